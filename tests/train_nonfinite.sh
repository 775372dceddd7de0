#!/bin/bash
# tests/train_nonfinite.sh MESHPOINT DATA CONFIG WORKDIR CASE — a non-finite gradient norm and resume
# bookkeeping through the real CLI. MP_FAULT=nonfinite_at_step:N (the test hook of layers/llama_train.c)
# makes step N's gradient norm NaN.
#   stop          default: exit 1 naming the step; the newest checkpoint (committed, --async-save) is the
#                 last good one, and holds no NaN (ckpt show --stats --json)
#   skip          --on-nonfinite skip: exit 0, the skip logged on stderr and marked/counted in metrics.jsonl
#   param         a parameter driven to inf (--lr 1e300 on resume) with a finite gradient norm: the save
#                 refuses it (exit 1 naming the tensor), publishes nothing, and the last good checkpoint
#                 stays the newest and `latest`
#   resume_done   resuming at or past --steps: "nothing to do: already at step S of N"
#   resume_batch  a different --batch on resume is logged
#   time_s        time_s in metrics.jsonl continues across a resume
set -u
bin=$1; data=$2; config=$3; work=$4; case=$5
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
# time_at FILE STEP: the time_s of STEP's line
time_at() { grep "^{\"step\": $2, \"loss\"" "$1" | sed 's/.*"time_s": \([0-9.]*\).*/\1/'; }
run=$work/run; root=$run/checkpoints

case "$case" in
stop)
    MP_FAULT=nonfinite_at_step:5 expect 1 "gradient norm is nan at step 5" "$work/log" \
        train --run-dir "$run" --steps 8 --ckpt-every 2 --async-save
    grep -q "checkpoint step 4 committed" "$work/log" || fail "the async save of step 4 was not committed: $(cat "$work/log")"
    [ "$(cat "$root/latest")" = step_00000004 ] || fail "latest names $(cat "$root/latest")"
    [ "$(ls "$root" | grep '^step_[0-9]*$' | sort | tail -1)" = step_00000004 ] || fail "newest is not step 4: $(ls "$root")"
    ls "$root" | grep -q partial && fail "a save was left unfinished: $(ls "$root")"
    "$bin" ckpt show --stats --json "$root/step_00000004" >"$work/stats" 2>&1 || fail "ckpt show: $(cat "$work/stats")"
    [ "$(grep -c '"nonfinite":' "$work/stats")" -gt 0 ] || fail "no nonfinite counts in: $(head -c 2000 "$work/stats")"
    grep -Eq '"nonfinite":[[:space:]]*[1-9]' "$work/stats" && fail "step 4 holds non-finite values"
    grep -q '"step": 5,' "$run/metrics.jsonl" && fail "step 5 was logged as done"
    echo "ok ($case): $(grep 'error' "$work/log" | cut -c1-120)"
    ;;
skip)
    MP_FAULT=nonfinite_at_step:3 expect 0 "step 3: gradient norm is nan: update skipped \(1 skipped" "$work/log" \
        train --run-dir "$run" --steps 5 --ckpt-every 5 --on-nonfinite skip
    grep -q "1 update(s) skipped for a non-finite gradient norm" "$work/log" || fail "no count at the end: $(cat "$work/log")"
    grep -q '^{"step": 3, .*"grad_norm": null, .*"skipped": true, "nonfinite_skips": 1' "$run/metrics.jsonl" ||
        fail "step 3 is not marked skipped in metrics.jsonl: $(cat "$run/metrics.jsonl")"
    [ "$(grep -c '"skipped"' "$run/metrics.jsonl")" -eq 1 ] || fail "other steps marked skipped"
    "$bin" ckpt show --stats --json "$root/step_00000005" >"$work/stats" 2>&1 || fail "ckpt show"
    grep -Eq '"nonfinite":[[:space:]]*[1-9]' "$work/stats" && fail "step 5 holds non-finite values"
    echo "ok ($case): step 3 skipped, counted in stderr and metrics"
    ;;
param)
    train --run-dir "$run" --steps 2 --ckpt-every 2 >/dev/null 2>&1 || fail "first run"
    expect 1 "saving a checkpoint at step 3: refusing to save: [a-z_]+/model\..* holds a non-finite value" "$work/log" \
        train --run-dir "$run" --steps 4 --ckpt-every 1 --resume --lr 1e300
    [ "$(cat "$root/latest")" = step_00000002 ] || fail "latest names $(cat "$root/latest")"
    [ "$(ls "$root" | grep '^step_')" = step_00000002 ] || fail "something besides step 2 is left: $(ls "$root")"
    "$bin" ckpt verify "$root/step_00000002" >"$work/verify" 2>&1 || fail "step 2 does not verify: $(cat "$work/verify")"
    echo "ok ($case): $(grep 'error' "$work/log" | cut -c1-140)"
    ;;
resume_done)
    train --run-dir "$run" --steps 4 --ckpt-every 4 >/dev/null 2>&1 || fail "first run"
    expect 0 "nothing to do: already at step 4 of 4" "$work/log" train --run-dir "$run" --steps 4 --resume
    expect 0 "nothing to do: already at step 4 of 3" "$work/log2" train --run-dir "$run" --steps 3 --resume
    [ "$(grep -c '"loss"' "$run/metrics.jsonl")" -eq 4 ] || fail "metrics.jsonl changed: $(cat "$run/metrics.jsonl")"
    echo "ok ($case)"
    ;;
resume_batch)
    train --run-dir "$run" --steps 6 --ckpt-every 2 --stop-at 2 >/dev/null 2>&1 || fail "first run"
    expect 0 "changed batch: --batch 8 \(was 4\)" "$work/log" train --run-dir "$run" --steps 4 --ckpt-every 2 --resume --batch 8
    grep -q "done: 4 steps" "$work/log" || fail "the resumed run did not finish: $(cat "$work/log")"
    expect 0 "resumed from .*step_00000004" "$work/log2" train --run-dir "$run" --steps 5 --resume --batch 8
    grep -q "changed batch" "$work/log2" && fail "an unchanged batch was reported: $(cat "$work/log2")"
    echo "ok ($case): $(grep 'changed batch' "$work/log" | cut -c1-120)"
    ;;
time_s)
    train --run-dir "$run" --steps 8 --ckpt-every 4 --stop-at 4 >/dev/null 2>&1 || fail "first run"
    before=$(time_at "$run/metrics.jsonl" 4)
    [ -n "$before" ] || fail "no time_s for step 4: $(cat "$run/metrics.jsonl")"
    sleep 1
    train --run-dir "$run" --steps 8 --resume >"$work/log" 2>&1 || fail "resumed run: $(cat "$work/log")"
    after=$(time_at "$run/metrics.jsonl" 5)
    [ -n "$after" ] || fail "no time_s for step 5: $(cat "$run/metrics.jsonl")"
    awk -v a="$after" -v b="$before" 'BEGIN { exit !(a >= b) }' || fail "time_s went back: step 4 $before, step 5 $after"
    echo "ok ($case): time_s $before at step 4, $after at step 5 after the resume"
    ;;
*) fail "unknown case" ;;
esac
