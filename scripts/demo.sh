#!/usr/bin/env bash
# scripts/demo.sh — the main demo from a fresh Debian machine: installs the packages, builds, turns the
# `fortunes` package's English text into byte-level tokens, and trains a small Llama on 4 processes
# (tp 2 x dp 2, sequence parallel, FSDP), printing the falling loss and the validation loss. It saves a
# checkpoint every 250 steps, stops halfway (as a preempted job would), and resumes from the newest
# checkpoint to finish. Then the cluster "shrinks": the newest checkpoint is resharded offline to 2
# processes (the plan first), training resumes on 2 processes from it, and the same checkpoint is also
# loaded straight onto 1 process (load-time resharding) to evaluate it; the demo ends by sampling text from the
# model it trained. A few minutes on 2 cores. Set
# DEMO_STEPS to change the length.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh build
export MP_BIN=$PWD/build/meshpoint
export OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
run=runs/demo
rm -rf "$run" "${run}_dp2"
mkdir -p "$run"
./scripts/make_demo_data.sh "$run/data"
steps=${DEMO_STEPS:-1000}
train=(mpirun --oversubscribe -np 4 "$MP_BIN" train --config configs/demo.json
       --train-data "$run/data/fortunes_train.bin" --val-data "$run/data/fortunes_val.bin"
       --run-dir "$run" --tp 2 --dp 2 --steps "$steps" --ckpt-every 250 --keep 2)
echo "== training on 4 processes (tp 2 x dp 2); stopping after step $((steps / 2)) as if preempted"
"${train[@]}" --stop-at $((steps / 2))
echo "== checkpoints: $(ls "$run/checkpoints" | tr '\n' ' ')"
echo "== resuming from the newest checkpoint"
"${train[@]}" --resume
newest=$run/checkpoints/$(cat "$run/checkpoints/latest")
small=$run/resharded_tp1_dp2
echo "== the cluster shrinks to 2 processes: resharding $newest offline to tp 1 x dp 2 (the plan first)"
"$MP_BIN" reshard "$newest" --tp 1 --dp 2 --plan
rm -rf "$small"
"$MP_BIN" reshard "$newest" --tp 1 --dp 2 --out "$small"
echo "== resuming on 2 processes from the resharded checkpoint for 100 more steps (at the schedule's floor lr)"
# --decay-steps keeps the finished run's schedule (warmup 30, cosine to step $steps): the extra steps run at min_lr
mpirun --oversubscribe -np 2 "$MP_BIN" train --config configs/demo.json \
    --train-data "$run/data/fortunes_train.bin" --val-data "$run/data/fortunes_val.bin" \
    --run-dir "${run}_dp2" --dp 2 --steps $((steps + 100)) --decay-steps $((steps - 30)) \
    --resume-from "$small" --eval-every 100
echo "== load-time resharding: the tp 2 x dp 2 checkpoint evaluated on 1 process"
"$MP_BIN" eval --config configs/demo.json --data "$run/data/fortunes_val.bin" --checkpoint "$newest" --batches 4
echo "== sampling from the trained model (the same text on any mesh for a given --seed)"
"$MP_BIN" sample --checkpoint "${run}_dp2" --prompt "The secret of " --tokens 160 --temperature 0.7 --top-k 20 --seed 1
"$MP_BIN" plot "$run" --out "$run/curves.png" --force
echo "== metrics: $run/metrics.jsonl, ${run}_dp2/metrics.jsonl; checkpoints: $run/checkpoints, $small (open index.h5 with h5py); curves: $run/curves.png"
