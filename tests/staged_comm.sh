#!/bin/sh
# tests/staged_comm.sh MESHPOINT DATA CONFIG WORKDIR — the staged communicator (core/comm_staged.h: device
# buffers copied to the host, the MPI collective, copied back) against the plain MPI communicator, on
# the CPU where `--comm staged` forces it over the cpu and cpu-bf16 backends (on a GPU it is chosen when
# ranks share one; tests/gpu_e2e.sh). For each device and each mesh (tp 2, dp 2, tp 2 x dp 2 with SP):
# 3 training steps with a checkpoint at step 3, once on the MPI comm and once staged. Checks:
#   1. the staged run says it stages (its log line), so the flag is not silently ignored;
#   2. its 3 losses equal the MPI run's to the last digit (17 significant digits: bitwise) and its
#      final checkpoint is bitwise the MPI run's (`meshpoint ckpt diff`): the same MPI collectives on the
#      same bytes, fp32 (cpu) and bf16 (cpu-bf16: bf16 gathers and tp all-reduces, fp32 reduce-scatters);
#   3. its comm figures (bytes per step of the tp and dp groups) are the MPI run's: the staging copies
#      are not counted as traffic, the collectives are counted once.
#   4. the memory plan counts the staged host buffers: tp 2 x dp 2 on tests/configs/memplan_32m.json (its
#      staging buffers, ~40 MiB a rank, exceed the plan's 16 MiB allowance) peaks within its plan.
# The dp meshes run the FSDP prefetch through the staged split-phase gather; the tp meshes the
# vocab-parallel loss's all-reduces (max and sum) and SP's gathers and reduce-scatters.
set -eu
bin=$1; data=$2; config=$3; work=$4
case=staged_comm; . "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
run() {   # run NAME NP ARGS...: a training job of NP ranks in run directory WORK/NAME, its output in WORK/NAME.log
    name=$1; np=$2; shift 2
    mpiexec --allow-run-as-root --oversubscribe -np "$np" "$bin" train --config "$config" --train-data "$data" \
        --steps 3 --ckpt-every 3 --log-every 1 --run-dir "$work/$name" "$@" > "$work/$name.log" 2>&1 ||
        { cat "$work/$name.log"; fail "$name: meshpoint train $* failed"; }
}
losses() { grep -o '"loss": [^,}]*' "$work/$1/metrics.jsonl"; }
comm() { grep -o 'comm: tp [0-9.]* MiB/step, dp [0-9.]* MiB/step' "$work/$1.log"; }

for dev in cpu cpu-bf16; do
    for mesh in "2 --tp 2" "2 --dp 2" "4 --tp 2 --dp 2"; do
        np=${mesh%% *}; flags=${mesh#* }
        tag=$(echo "$dev$flags" | tr -d ' -')
        run "${tag}_mpi" "$np" --device "$dev" $flags
        run "${tag}_staged" "$np" --device "$dev" $flags --comm staged
        grep -q "comm: the tp and dp collectives stage through host memory" "$work/${tag}_staged.log" ||
            fail "$dev $flags: the --comm staged run does not say it stages: $(cat "$work/${tag}_staged.log")"
        grep -q "stage through host memory" "$work/${tag}_mpi.log" && fail "$dev $flags: the MPI run stages"
        losses "${tag}_mpi" > "$work/${tag}_mpi.txt"
        losses "${tag}_staged" > "$work/${tag}_staged.txt"
        test "$(wc -l < "$work/${tag}_mpi.txt")" -eq 3 || fail "$dev $flags: the MPI run logged no 3 losses"
        cmp -s "$work/${tag}_mpi.txt" "$work/${tag}_staged.txt" ||
            { paste "$work/${tag}_mpi.txt" "$work/${tag}_staged.txt"; fail "$dev $flags: staged losses differ from MPI's"; }
        "$bin" ckpt diff "$work/${tag}_mpi" "$work/${tag}_staged" > "$work/${tag}_diff.log" 2>&1 ||
            { cat "$work/${tag}_diff.log"; fail "$dev $flags: the staged run's checkpoint differs from the MPI run's"; }
        a=$(comm "${tag}_mpi") && b=$(comm "${tag}_staged") || fail "$dev $flags: no comm: line in a log"
        [ "$a" = "$b" ] || fail "$dev $flags: comm figures differ: MPI '$a', staged '$b'"
        echo "$dev $flags: staged = MPI bitwise (3 losses, the step-3 checkpoint), $b"
    done
done

# 4. the plan counts the staging buffers (without them the peak is ~40 MiB above it)
cfg32=$(dirname "$config")/memplan_32m.json
mpiexec --allow-run-as-root --oversubscribe -np 4 "$bin" train --config "$cfg32" --train-data "$data" --steps 1 \
    --seq-len 64 --tp 2 --dp 2 --comm staged --log-every 0 --run-dir "$work/plan32" > "$work/plan32.log" 2>&1 ||
    { cat "$work/plan32.log"; fail "memplan_32m tp 2 x dp 2 --comm staged failed"; }
grep -q "collective buffers" "$work/plan32.log" || fail "no collective buffers in the plan: $(cat "$work/plan32.log")"
peak_within_plan "memplan_32m tp 2 x dp 2 staged" "$work/plan32.log" 4
