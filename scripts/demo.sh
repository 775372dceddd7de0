#!/usr/bin/env bash
# scripts/demo.sh — the main demo from a fresh Debian machine: installs the packages, builds, turns the
# `fortunes` package's English text into byte-level tokens, and trains a small Llama on 4 processes
# (tp 2 x dp 2, sequence parallel, FSDP), printing the falling loss and the validation loss. It saves a
# checkpoint every 250 steps, stops halfway (as a preempted job would), and resumes from the newest
# checkpoint to finish. A few minutes on 2 cores. Set DEMO_STEPS to change the length.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
./scripts/build.sh build
export MP_BIN=$PWD/build/meshpoint
export OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
run=runs/demo
rm -rf "$run"
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
echo "== metrics: $run/metrics.jsonl; checkpoints: $run/checkpoints (open index.h5 with h5py)"
