#!/bin/bash
# tests/memory_plan.sh MESHPOINT DATA VAL CONFIG WORKDIR [MPIEXEC [SEQ]] — the memory plan is an upper bound
# (docs/DESIGN_NOTES.md "The memory plan is an upper bound"): for train (also with
# --recompute full: its own, smaller plan), train --resume,
# eval, sample, reshard, import and export, each exiting 0, the "memory: peak" line's figure (this
# process's VmHWM above its VmRSS once its runtime was up) is at most the plan plus ALLOWANCE, a fixed
# 16 MiB for what the libraries touch after start-up (HDF5, OpenBLAS, Open MPI, their code pages;
# ~8.5 MiB measured). CONFIG's embedding and lm_head are 32 MiB each, so a model-sized buffer left out
# of the plan (a host copy of a shard, a whole tensor in a converter, the band buffers) passes it.
# The converters' plan is their --max-memory bound (8M here). Then under MPIEXEC (default mpiexec): train
# on dp 2 with a save, --resume on tp 2, --resume on tp 2 x dp 2 (4 ranks), train --recompute full on
# tp 2 x dp 2, eval on 2 ranks: the line
# is every rank's (the one least below its own plan, "on rank R of W"), so each rank's peak is within its
# plan + 16 MiB. SEQ (default 16) is every command's --seq-len. Open MPI's reduce-scatter allocated 1.5x the largest FSDP unit's gradient inside the
# call (49 MiB above the plan on dp 2), which core/comm_mpi.c's ring on planned buffers replaces.
set -u
bin=$1; data=$2; val=$3; config=$4; work=$5; mpiexec=${6:-mpiexec}; seq=${7:-16}; case=memory_plan
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, peak_within_plan
# run NAME CMD...: CMD must exit 0 and pass peak_within_plan
run() {
    local name=$1; shift
    "$@" >"$work/$name.log" 2>&1 || fail "$name: exit $?: $(cat "$work/$name.log")"
    peak_within_plan "$name" "$work/$name.log"
}
# run_np NAME NP ARGS...: meshpoint ARGS on NP ranks must exit 0 and pass peak_within_plan for all NP of them
run_np() {
    local name=$1 np=$2; shift 2
    $mpiexec --allow-run-as-root --oversubscribe -np "$np" "$bin" "$@" >"$work/$name.log" 2>&1 ||
        fail "$name: exit $?: $(cat "$work/$name.log")"
    peak_within_plan "$name" "$work/$name.log" "$np"
}
T=(--config "$config" --train-data "$data" --log-every 0 --batch 2 --seq-len "$seq" --ckpt-every 2 --run-dir "$work/run")
run train "$bin" train "${T[@]}" --steps 2
run train_recompute "$bin" train "${T[@]}" --steps 2 --recompute full --run-dir "$work/run_rc"
grep -q "this run: full" "$work/train_recompute.log" || fail "train_recompute: no plan line for --recompute full"
run resume "$bin" train "${T[@]}" --steps 4 --resume
run eval "$bin" eval --checkpoint "$work/run" --data "$val" --batch 2 --seq-len "$seq" --batches 2
run sample "$bin" sample --checkpoint "$work/run" --prompt "memory" --tokens 4
run reshard "$bin" reshard "$work/run" --tp 2 --dp 1 --out "$work/tp2" --max-memory 8M
run export "$bin" export "$work/run" --out "$work/hf" --max-memory 8M
run import "$bin" import "$work/hf" --out "$work/imported" --max-memory 8M
M=(--config "$config" --train-data "$data" --log-every 0 --batch 2 --seq-len "$seq" --ckpt-every 2 --run-dir "$work/mpi")
run_np train_dp2 2 train "${M[@]}" --steps 2 --dp 2 --tp 1
run_np resume_tp2 2 train "${M[@]}" --steps 4 --dp 1 --tp 2 --resume
run_np resume_tp2dp2 4 train "${M[@]}" --steps 6 --dp 2 --tp 2 --resume
run_np train_tp2dp2_recompute 4 train "${M[@]}" --steps 2 --dp 2 --tp 2 --recompute full --run-dir "$work/mpi_rc"
run_np eval_np2 2 eval --checkpoint "$work/mpi" --data "$val" --batch 2 --seq-len "$seq" --batches 2
echo "ok ($case)"
