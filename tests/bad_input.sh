#!/usr/bin/env bash
# tests/bad_input.sh BIN DATA CONFIG WORKDIR SRCDIR CASE — what users type that used to crash or pass,
# each case asserting the exit status and the message:
#   ulimit_plan        a 1.1B-parameter run under `ulimit -v` (RLIMIT_AS): refused by the memory plan,
#                      exit 2, naming the limit — it used to pass the plan and die with SIGABRT (134)
#   ulimit_data        the same under `ulimit -d` (RLIMIT_DATA)
#   ulimit_seq         --seq-len 1000000 on a small model under `ulimit -v`: refused by the plan, exit 2
#   ulimit_alloc       the plan overridden (--max-memory 64G) under `ulimit -v`: the allocation fails and
#                      the run ends with exit 1 naming the size and what it was for, never 134
#   ulimit_alloc_mpi   the same on 2 ranks under mpiexec: mpiexec exits 1, no rank left hanging
#   stop_at            --stop-at -1 refused like every other step flag
#   config_stream      --config through a pipe (process substitution) and /dev/stdin works
#   config_dir         a directory as --config is named as one
#   run_dir_empty      --run-dir "" names the empty flag
#   fault_unknown      MP_FAULT naming a fault that does not exist (a test's typo) is refused, exit 2,
#                      naming it, before any work: it would otherwise inject nothing and let its test pass
#   device_some_ranks  a device only some ranks cannot use (a host's broken GPU; the fault fail_device_rank),
#                      then one all ranks cannot use: one message in all, from the lowest failing rank, with
#                      one "[rank N] " prefix; every rank exits 2, none left hanging
set -uo pipefail
bin=$1 data=$2 config=$3 work=$4 src=$5 case=$6
source "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work"
big=$src/configs/llama_1b.json
limit=4000000   # KiB: 3.8 GiB of address space, far below the 17 GiB a 1.1B model needs to train
# Never an abort: a status of 128+ is a signal (134: SIGABRT).
no_signal() { [ "$1" -lt 128 ] || fail "killed by a signal (exit $1): $(cat "$work/log")"; }

case $case in
  ulimit_plan)
    (ulimit -v $limit; "$bin" train --config "$big" --train-data "$data" --batch 1 --seq-len 256 --steps 1 \
        --run-dir "$work/run" >"$work/log" 2>&1); rc=$?; no_signal $rc
    [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $(cat "$work/log")"
    grep -Eq "memory plan: this rank needs 17\.[0-9] GiB but the address-space limit \(ulimit -v, RLIMIT_AS\) of 3\.8 GiB leaves it" "$work/log" ||
        fail "no plan refusal naming ulimit -v: $(cat "$work/log")" ;;
  ulimit_data)
    (ulimit -d $limit; "$bin" train --config "$big" --train-data "$data" --batch 1 --seq-len 256 --steps 1 \
        --run-dir "$work/run" >"$work/log" 2>&1); rc=$?; no_signal $rc
    [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $(cat "$work/log")"
    grep -q "the data-size limit (ulimit -d, RLIMIT_DATA)" "$work/log" || fail "no plan refusal naming ulimit -d: $(cat "$work/log")" ;;
  ulimit_seq)
    sed 's/"max_position_embeddings": 128/"max_position_embeddings": 1048576/' "$config" >"$work/long.json"
    (ulimit -v $limit; "$bin" train --config "$work/long.json" --train-data "$data" --seq-len 1000000 --batch 1 \
        --steps 1 --run-dir "$work/run" >"$work/log" 2>&1); rc=$?; no_signal $rc
    [ $rc -eq 2 ] || fail "expected exit 2, got $rc: $(cat "$work/log")"
    grep -q "memory plan: this rank needs .* but the address-space limit" "$work/log" || fail "no plan refusal: $(cat "$work/log")" ;;
  ulimit_alloc)
    (ulimit -v $limit; "$bin" train --config "$big" --train-data "$data" --batch 1 --seq-len 256 --steps 1 \
        --run-dir "$work/run" --max-memory 64G >"$work/log" 2>&1); rc=$?; no_signal $rc
    [ $rc -eq 1 ] || fail "expected exit 1, got $rc: $(cat "$work/log")"
    grep -Eq "error: out of memory: could not allocate [0-9.]+ GiB \([0-9]+ bytes\) for (parameters|gradients|optimizer moments) at [a-z_]+/[a-z_0-9]+\.c:[0-9]+; this process is under the address-space limit" "$work/log" ||
        fail "no out-of-memory message with size, purpose and limit: $(cat "$work/log")" ;;
  ulimit_alloc_mpi)
    (ulimit -v $limit; mpiexec --allow-run-as-root --oversubscribe -np 2 "$bin" train --config "$big" --train-data "$data" --batch 2 \
        --seq-len 256 --steps 1 --run-dir "$work/run" --max-memory 64G >"$work/log" 2>&1); rc=$?; no_signal $rc
    [ $rc -eq 1 ] || fail "expected mpiexec to exit 1, got $rc: $(cat "$work/log")"
    grep -q "error: out of memory: could not allocate .* for " "$work/log" || fail "no out-of-memory message: $(cat "$work/log")" ;;
  stop_at)
    expect 2 "^meshpoint train: error: --stop-at must be >= 0 \(0: off\), got -1" "$work/log" \
        train --run-dir "$work/run" --stop-at -1
    [ ! -e "$work/run" ] || fail "a refused run made its run directory" ;;
  config_stream)
    expect 0 "done: 2 steps" "$work/log" "$bin" train --config <(cat "$config") --train-data "$data" --log-every 0 \
        --steps 2 --run-dir "$work/pipe"
    expect 0 "done: 2 steps" "$work/log" sh -c "\"\$0\" train --config /dev/stdin --train-data \"\$1\" --log-every 0 --steps 2 --run-dir \"\$2\" <\"\$3\"" \
        "$bin" "$data" "$work/stdin" "$config" ;;
  config_dir)
    expect 2 "^meshpoint train: error: config: .*/configs: is a directory, not a file" "$work/log" \
        "$bin" train --config "$src/configs" --train-data "$data" --run-dir "$work/run"
    expect 2 "^meshpoint eval: error: config: .*/configs: is a directory, not a file" "$work/log" \
        "$bin" eval --config "$src/configs" --data "$data" ;;
  run_dir_empty)
    expect 2 "^meshpoint train: error: --run-dir: the path is empty$" "$work/log" train --run-dir ""
    expect 2 "^meshpoint train: error: --ckpt-dir: the path is empty$" "$work/log" train --run-dir "$work/run" --ckpt-dir ""
    expect 2 "^meshpoint data: error: --out: the path is empty$" "$work/log" "$bin" data --out "" "$config"
    expect 2 "^meshpoint train: error: --device: the value is empty$" "$work/log" train --run-dir "$work/run" --device "" ;;
  fault_unknown)
    expect 2 '^meshpoint train: error: MP_FAULT: unknown fault "ckpt_crash_ta"' "$work/log" \
        env MP_FAULT=ckpt_serial_fill,ckpt_crash_ta:begin "$bin" train --config "$config" --train-data "$data" \
        --steps 1 --run-dir "$work/run"
    [ ! -e "$work/run" ] || fail "the refused run created $work/run" ;;
  device_some_ranks)
    # each rank's stderr and exit status apart (the wrapper runs per rank): one error line in all, from the
    # lowest failing rank, "[rank N] " once; every rank exits 2. "both": every rank fails (N = 0).
    for r in 1 0 both; do
        rm -f "$work"/err.* "$work"/rc.*
        timeout 60 mpiexec --allow-run-as-root --oversubscribe -np 2 -x R=$r -x W="$work" sh -c \
            'k=$OMPI_COMM_WORLD_RANK; [ "$R" = both ] && R=$k; MP_FAULT=fail_device_rank:$R "$0" "$@" 2>"$W/err.$k"; echo $? >"$W/rc.$k"' \
            "$bin" train --config "$config" --train-data "$data" --steps 2 --log-every 0 --run-dir "$work/run" --dp 2 \
            >"$work/log" 2>&1
        cat "$work"/err.* >>"$work/log" 2>/dev/null
        n=$([ $r = both ] && echo 0 || echo $r)
        for k in 0 1; do
            [ "$(cat "$work/rc.$k" 2>/dev/null)" = 2 ] || fail "rank $k ($r failing): exit $(cat "$work/rc.$k" 2>/dev/null): $(cat "$work/log")"
            want=$([ $k = $n ] && echo 1 || echo 0)
            [ "$(grep -c 'error:' "$work/err.$k")" -eq $want ] || fail "rank $k ($r failing): expected $want error lines: $(cat "$work/log")"
        done
        grep -Eq "^meshpoint train: error: \[rank $n\] device cpu: simulated failure on rank $n \(" "$work/err.$n" ||
            fail "rank $n ($r failing): not one [rank $n] prefix: $(cat "$work/log")"
    done ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case)"
