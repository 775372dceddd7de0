#!/bin/bash
# tests/save_memory.sh MESHPOINT DATA CONFIG WORKDIR — a sync save on the CPU writes straight from the
# shards: the memory plan shows no checkpoint staging copy, and the allocator's peak of
# a run saving every step is below the same run with --async-save (which keeps the staging copy) by at
# least that copy (parameters + both moments); the checkpoints of both are bitwise equal. And a fresh start
# of bench_tiny that saves peaks within the plan's 16 MiB library allowance (docs/DESIGN_NOTES.md "The memory
# plan is an upper bound"; start-up makes no host copy of a shard).
set -u
bin=$1; data=$2; config=$3; work=$4; case=save_memory
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect, peak_within_plan
alloc_peak() { grep -o 'allocator peak [^(]*(\([0-9]*\) bytes' "$1" | grep -o '([0-9]*' | tr -d '('; }
staging() { grep -o 'checkpoint staging [0-9.]* [KMG]*i*B' "$1"; }
train --run-dir "$work/sync" --steps 4 --ckpt-every 1 >"$work/sync.log" 2>&1 || fail "sync run: $(cat "$work/sync.log")"
train --run-dir "$work/async" --steps 4 --ckpt-every 1 --async-save >"$work/async.log" 2>&1 || fail "async run: $(cat "$work/async.log")"
[ "$(staging "$work/sync.log")" = "checkpoint staging 0 B" ] || fail "sync plan: $(staging "$work/sync.log")"
[ "$(staging "$work/async.log")" != "checkpoint staging 0 B" ] || fail "async plan shows no staging"
# the allocator's own peaks here (exact to the byte; the resident peak moves by whole pages)
ps=$(alloc_peak "$work/sync.log"); pa=$(alloc_peak "$work/async.log")
[ -n "$ps" ] && [ -n "$pa" ] || fail "no peak lines: $(grep memory "$work/sync.log" "$work/async.log")"
# parameters + moments of cli_tiny: 34976 floats x 3 x 4 bytes = 419712 bytes
[ $((pa - ps)) -ge 419712 ] || fail "sync peak $ps is not below the async peak $pa by the staging copy (419712 bytes)"
"$(dirname "$bin")/tool_ckpt_equal" "$work/sync/checkpoints/step_00000004" "$work/async/checkpoints/step_00000004" \
    >"$work/eq.log" 2>&1 || fail "sync and async checkpoints differ: $(cat "$work/eq.log")"
# The peak (VmHWM above start-up) is within the plan plus the libraries' allowance (16 MiB): a fresh start of
# bench_tiny (embedding shard 32.8 MB) that saves must stay within it, which a host copy of a whole shard at
# start-up breaks (docs/DESIGN_NOTES.md "Fresh weights without a host copy of each shard").
train_cfg=$(dirname "$0")/../configs/bench_tiny.json
"$bin" train --config "$train_cfg" --train-data "$data" --run-dir "$work/fresh" --steps 1 --ckpt-every 1 --log-every 0 \
    >"$work/fresh.log" 2>&1 || fail "bench_tiny run: $(cat "$work/fresh.log")"
peak_within_plan bench_tiny "$work/fresh.log"
echo "ok ($case): allocator peak $ps bytes sync, $pa bytes async; bench_tiny within its plan"
