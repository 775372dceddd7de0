#!/bin/bash
# tests/run_dir.sh MESHPOINT DATA CONFIG WORKDIR CASE — the run directory through the real CLI: what a
# run may do to what an earlier run (or another job) left there. Every case asserts exit codes and
# messages.
#   fresh_refused  a fresh run into a used run directory exits 2 naming what is there and the ways on,
#                  and touches nothing (file listing and checksums equal before and after)
#   overwrite      --overwrite starts over there: the old checkpoints and metrics are moved aside intact
#   rewind         --resume-from step_2 while steps 4 and 6 exist: 4 and 6 are moved aside (still
#                  verifiable), `latest` names the newest complete checkpoint after every save, retention
#                  never removes it, later --resume runs continue the new branch, metrics.jsonl holds each
#                  step once (the abandoned lines kept aside), and the result equals a straight run
#   fallback       --resume past a damaged newest checkpoint, then saving that step again, works
#   lock           a second job on a checkpoint directory in use exits 2 naming the holder (pid, host) and
#                  leaves its *.partial alone; a SIGKILLed holder leaves no stale lock
#   usage          --resume-from "" and --overwrite with --resume exit 2 naming the flag
#   metrics_full   metrics.jsonl cannot grow (file-size limit, as on a full disk): the run stops with exit 1
#                  naming the file and the cause, and the checkpoints it committed before are intact
#   save_continue  --on-save-error continue: an earlier failed save is logged and the run goes on, but the
#                  run's last save failing fails the run (exit 1), sync and async alike
#   ranks_data     (mpiexec -np 2) a training file only rank 0 can open: one agreed error, exit 2, no hang
#   ranks_resume   (mpiexec -np 2) ranks that see different checkpoint roots resume from rank 0's choice
#   retention_leftover  a retention a kill interrupted (an old step directory whose index.h5 is gone) is
#                  finished by the next --keep run even when it saves nothing (resumed at its last step);
#                  an old directory with a damaged index, a newer one and `latest`'s are left alone
set -u
bin=$1; data=$2; config=$3; work=$4; case=$5
mpi="mpiexec --allow-run-as-root --oversubscribe -np 2"
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
snapshot() { (cd "$1" && find . -print | LC_ALL=C sort && find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2); }
steps_logged() { grep -o '"step": [0-9]*, "loss"' "$1" | grep -o '[0-9]*' | tr '\n' ' '; }
# check_latest ROOT STEP: `latest` names step_STEP, which is complete and the newest step directory
check_latest() {
    local want; want=$(printf "step_%08d" "$2")
    [ "$(cat "$1/latest")" = "$want" ] || fail "latest names $(cat "$1/latest"), expected $want"
    "$bin" ckpt verify "$1/$want" >/dev/null 2>&1 || fail "latest names $want, which does not verify"
    [ "$(ls "$1" | grep '^step_[0-9]*$' | sort | tail -1)" = "$want" ] || fail "$want is not the newest: $(ls "$1")"
}

case "$case" in
fresh_refused)
    run=$work/run
    train --run-dir "$run" --steps 10 --ckpt-every 5 >/dev/null 2>&1 || fail "first run"
    snapshot "$run" > "$work/before"
    expect 2 "already holds a run" "$work/log" train --run-dir "$run" --steps 12 --ckpt-every 3 --keep 2
    grep -q "metrics.jsonl (10 lines)" "$work/log" || fail "the metrics file is not named: $(cat "$work/log")"
    grep -q "2 checkpoints (steps 5 to 10)" "$work/log" || fail "the checkpoints are not named: $(cat "$work/log")"
    grep -q -- "--resume" "$work/log" && grep -q -- "--run-dir" "$work/log" && grep -q -- "--overwrite" "$work/log" ||
        fail "the ways on (--resume, --run-dir, --overwrite) are not named: $(cat "$work/log")"
    snapshot "$run" > "$work/after"
    diff "$work/before" "$work/after" || fail "the refused run changed the run directory"
    echo "ok ($case): refused with exit 2, nothing touched: $(grep 'error' "$work/log" | cut -c1-160)"
    ;;
overwrite)
    run=$work/run
    train --run-dir "$run" --steps 10 --ckpt-every 5 >/dev/null 2>&1 || fail "first run"
    (cd "$run/checkpoints" && find . -type f ! -name .lock -exec sha256sum {} + | LC_ALL=C sort -k2) > "$work/old_ckpt"
    sha256sum < "$run/metrics.jsonl" > "$work/old_metrics"
    expect 0 "moved 2 checkpoint directories" "$work/log" \
        train --run-dir "$run" --steps 12 --ckpt-every 3 --keep 2 --overwrite
    aside=$(cd "$run/checkpoints" && ls -d abandoned_*) || fail "no abandoned_* directory: $(ls -a "$run/checkpoints")"
    [ "$(echo "$aside" | wc -l)" -eq 1 ] || fail "more than one aside directory: $aside"
    (cd "$run/checkpoints/$aside" && find . -type f -exec sha256sum {} + | LC_ALL=C sort -k2) > "$work/moved_ckpt"
    diff "$work/old_ckpt" "$work/moved_ckpt" || fail "the old checkpoints were not moved aside intact"
    sha256sum < "$run/metrics.$aside.jsonl" | cmp -s - "$work/old_metrics" || fail "the old metrics were not kept aside"
    [ "$(steps_logged "$run/metrics.jsonl")" = "1 2 3 4 5 6 7 8 9 10 11 12 " ] ||
        fail "metrics.jsonl: $(steps_logged "$run/metrics.jsonl")"
    check_latest "$run/checkpoints" 12
    [ -d "$run/checkpoints/step_00000009" ] || fail "retention (keep 2) should keep step 9"
    echo "ok ($case): the old run moved aside intact into $aside; the new run saved steps 9 and 12"
    ;;
rewind)
    run=$work/run; root=$run/checkpoints
    train --run-dir "$work/ref" --steps 8 --ckpt-every 8 >/dev/null 2>&1 || fail "reference run"
    train --run-dir "$run" --steps 8 --ckpt-every 2 --stop-at 6 >/dev/null 2>&1 || fail "first run"
    next=(--run-dir "$run" --steps 8 --ckpt-every 1 --keep 2)
    expect 0 "resumed from .*step_00000002 at step 2" "$work/r1" train "${next[@]}" --resume-from "$root/step_00000002" --stop-at 3
    grep -q "moved 2 checkpoint directories saved after step 2" "$work/r1" || fail "no message about the move: $(cat "$work/r1")"
    aside=$(cd "$root" && ls -d abandoned_*) || fail "no abandoned_* directory"
    for s in 4 6; do
        d=$(printf "%s/%s/step_%08d" "$root" "$aside" $s)
        "$bin" ckpt verify "$d" >/dev/null 2>&1 || fail "the abandoned $d does not verify"
    done
    check_latest "$root" 3
    expect 0 "resumed from .*step_00000003 at step 3" "$work/r2" train "${next[@]}" --resume --stop-at 5
    check_latest "$root" 5
    [ "$(ls "$root" | grep -c '^step_[0-9]*$')" -eq 2 ] || fail "keep 2: $(ls "$root")"
    expect 0 "resumed from .*step_00000005 at step 5" "$work/r3" train "${next[@]}" --resume
    check_latest "$root" 8
    [ "$(steps_logged "$run/metrics.jsonl")" = "1 2 3 4 5 6 7 8 " ] || fail "metrics.jsonl: $(steps_logged "$run/metrics.jsonl")"
    [ "$(steps_logged "$run/metrics.$aside.jsonl")" = "3 4 5 6 " ] ||
        fail "the abandoned lines: $(steps_logged "$run/metrics.$aside.jsonl")"
    "$bin" ckpt diff "$work/ref/checkpoints/step_00000008" "$root/step_00000008" >"$work/diff" 2>&1 ||
        fail "the rewound run differs from a straight one: $(cat "$work/diff")"
    echo "ok ($case): steps 4 and 6 moved aside to $aside; the new branch resumed twice and equals a straight run"
    ;;
fallback)
    run=$work/run; root=$run/checkpoints
    train --run-dir "$work/ref" --steps 8 --ckpt-every 8 >/dev/null 2>&1 || fail "reference run"
    train --run-dir "$run" --steps 8 --ckpt-every 2 --stop-at 6 >/dev/null 2>&1 || fail "first run"
    rm "$root/step_00000006/rank_00000.h5"
    expect 0 "resumed from .*step_00000004 at step 4" "$work/log" train --run-dir "$run" --steps 8 --ckpt-every 2 --resume
    grep -q "checkpoint step 6 saved" "$work/log" || fail "step 6 was not saved again: $(cat "$work/log")"
    aside=$(cd "$root" && ls -d abandoned_*) || fail "no abandoned_* directory"
    [ -d "$root/$aside/step_00000006" ] || fail "the damaged step 6 was not moved aside"
    check_latest "$root" 8
    "$bin" ckpt verify "$root/step_00000006" >/dev/null 2>&1 || fail "the new step 6 does not verify"
    [ "$(steps_logged "$run/metrics.jsonl")" = "1 2 3 4 5 6 7 8 " ] || fail "metrics.jsonl: $(steps_logged "$run/metrics.jsonl")"
    "$bin" ckpt diff "$work/ref/checkpoints/step_00000008" "$root/step_00000008" >"$work/diff" 2>&1 ||
        fail "the resumed run differs from a straight one: $(cat "$work/diff")"
    echo "ok ($case): resumed from step 4 past the damaged step 6 (moved aside), saved 6 and 8 again"
    ;;
lock)
    run=$work/run; root=$run/checkpoints
    "$bin" train --config "$config" --train-data "$data" --log-every 0 --run-dir "$run" --steps 100000000 \
        --ckpt-every 1000000 >"$work/first.log" 2>&1 &
    pid=$!
    trap 'kill -9 $pid 2>/dev/null' EXIT
    for _ in $(seq 200); do grep -q "pid $pid " "$root/.lock" 2>/dev/null && break; sleep 0.05; done
    grep -q "pid $pid on host $(hostname)" "$root/.lock" 2>/dev/null || fail "no lock naming pid $pid: $(cat "$root/.lock")"
    mkdir "$root/step_99999999.partial"   # as if the first job were saving
    for how in --resume --overwrite ""; do
        expect 2 "in use by another job \(pid $pid on host $(hostname), started " "$work/second.log" \
            train --run-dir "$run" --steps 2 $how
    done
    [ -d "$root/step_99999999.partial" ] || fail "the second job removed the first job's *.partial"
    kill -9 $pid; wait $pid 2>/dev/null
    trap - EXIT
    rmdir "$root/step_99999999.partial"
    expect 0 "done: 2 steps" "$work/third.log" train --run-dir "$run" --steps 2 --resume
    grep -q "pid [0-9]* on host" "$root/.lock" && ! grep -q "pid $pid " "$root/.lock" || fail "the lock does not name the new holder"
    echo "ok ($case): refused with exit 2 naming pid $pid on $(hostname); no stale lock after SIGKILL"
    ;;
usage)
    expect 2 "--resume-from: the path is empty" "$work/log" train --run-dir "$work/run" --steps 2 --resume-from ""
    expect 2 "--overwrite .* cannot be combined with --resume" "$work/log" train --run-dir "$work/run" --steps 2 --overwrite --resume
    [ -e "$work/run" ] && fail "a refused run created $work/run"
    echo "ok ($case)"
    ;;
metrics_full)
    # 1 KiB of metrics holds ~6 steps; a checkpoint of step 2 is written before that (its files are
    # about 200 KiB, so the limit goes on metrics only: the checkpoint root lives outside the limit's reach
    # by saving it before the limited run, then resuming under the limit without saving; the run's own output
    # goes through a pipe to cat, outside the limit, so the log holds all of it, however long)
    train --run-dir "$work/run" --steps 2 --ckpt-every 2 >/dev/null 2>&1 || fail "first run"
    expect 1 "writing $work/run/metrics.jsonl: File too large" "$work/log" \
        bash -c 'trap "" XFSZ; (ulimit -f 1; exec "$@") 2>&1 | cat; exit ${PIPESTATUS[0]}' limited "$bin" train --config "$config" --train-data "$data" \
        --log-every 0 --run-dir "$work/run" --resume --steps 60
    grep -q "^done" "$work/log" && fail "the run said done: $(cat "$work/log")"
    "$bin" ckpt verify "$work/run" >"$work/verify" 2>&1 || fail "step 2 does not verify: $(cat "$work/verify")"
    echo "ok ($case): $(grep error "$work/log" | cut -c1-150)"
    ;;
save_continue)
    for mode in sync async; do
        extra=""; [ $mode = async ] && extra=--async-save
        # rank files of this config are ~200 KiB: the limit fails every save, metrics fit
        expect 1 "the run's last save failed .*step 4" "$work/log_$mode" \
            bash -c 'trap "" XFSZ; ulimit -f 100; exec "$@"' limited "$bin" train --config "$config" --train-data "$data" \
            --log-every 0 --run-dir "$work/run_$mode" --steps 4 --ckpt-every 2 --on-save-error continue $extra
        grep -q "step 2.*continuing: --on-save-error continue\|continuing: --on-save-error continue" "$work/log_$mode" ||
            fail "$mode: the failed save of step 2 was not logged as continued: $(cat "$work/log_$mode")"
        ls "$work/run_$mode/checkpoints" | grep -q step_ && fail "$mode: a failed save left a step directory"
    done
    echo "ok ($case): sync and async exit 1 when the last save fails"
    ;;
ranks_data)
    # rank 1 gets a training file that does not exist: both ranks must stop, with one message
    expect 2 "\[rank 1\].*nothere.bin" "$work/log" timeout 120 $mpi sh -c \
        'd=$1; shift; [ "$OMPI_COMM_WORLD_RANK" = 1 ] && d=/nonexistent/nothere.bin; exec "$@" --train-data "$d"' \
        rank "$data" "$bin" train --config "$config" --log-every 0 --dp 2 --steps 2 --run-dir "$work/run"
    [ "$(grep -c 'meshpoint [a-z ]*: error:' "$work/log")" -eq 1 ] || fail "expected one error line: $(cat "$work/log")"
    echo "ok ($case): $(grep 'meshpoint [a-z ]*: error:' "$work/log" | cut -c1-160)"
    ;;
ranks_resume)
    run=$work/run
    $mpi "$bin" train --config "$config" --train-data "$data" --log-every 0 --dp 2 --steps 4 --ckpt-every 2 \
        --run-dir "$run" >"$work/first.log" 2>&1 || fail "first run: $(cat "$work/first.log")"
    mkdir "$work/empty"
    # rank 1 looks at an empty checkpoint root: alone it would start from step 0 while rank 0 resumes step 4
    expect 0 "resumed from .*step_00000004 at step 4" "$work/log" timeout 120 $mpi sh -c \
        'e=$1; shift; if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then exec "$@" --ckpt-dir "$e"; else exec "$@"; fi' \
        rank "$work/empty" "$bin" train --config "$config" --train-data "$data" --log-every 0 --dp 2 --steps 5 \
        --run-dir "$run" --resume
    grep -q "done: 5 steps" "$work/log" || fail "the resumed run did not finish: $(cat "$work/log")"
    echo "ok ($case): every rank resumed from rank 0's choice (step 4)"
    ;;
retention_leftover)
    run=$work/run; root=$run/checkpoints
    train --run-dir "$run" --steps 10 --ckpt-every 2 >/dev/null 2>&1 || fail "first run"
    rm "$root/step_00000002/index.h5"                          # retention killed after its first unlink
    printf 'damaged' > "$root/step_00000004/index.h5"            # not retention's work: evidence, kept
    rm "$root/step_00000008/index.h5"                          # inside the kept window (10, 6): kept
    before=$(snapshot "$root/step_00000004")
    expect 0 "removing .*step_00000002, left by an interrupted retention" "$work/log" \
        train --run-dir "$run" --steps 10 --ckpt-every 2 --keep 2 --resume
    grep -q "resumed from .*step_00000010" "$work/log" || fail "did not resume from step 10: $(cat "$work/log")"
    [ -e "$root/step_00000002" ] && fail "the interrupted retention's step_00000002 is still there"
    [ "$(snapshot "$root/step_00000004")" = "$before" ] || fail "step_00000004 (damaged index) was touched"
    [ -d "$root/step_00000008" ] || fail "step_00000008 was removed: only directories older than the kept ones go"
    [ -d "$root/step_00000006" ] || fail "step_00000006 (kept) was removed"
    check_latest "$root" 10
    # without --keep, nothing is retention's business
    mkdir "$root/step_00000001"
    expect 0 "" "$work/log2" train --run-dir "$run" --steps 10 --ckpt-every 2 --resume
    [ -d "$root/step_00000001" ] || fail "a run without --keep removed step_00000001"
    echo "ok ($case): the interrupted retention finished; the damaged, the kept window's and latest's left alone"
    ;;
*) fail "unknown case" ;;
esac
