#!/bin/bash
# tests/signal_stop.sh MESHPOINT DATA CONFIG WORKDIR SIGNAL NP — preemption: a training job that gets
# SIGNAL (TERM or INT) saves a checkpoint at the end of the current step and exits cleanly; resuming
# continues from that step. NP 1 runs meshpoint directly (exit status must be 0); NP 4 runs it under
# mpiexec (tp 2 x dp 2; the launcher forwards the signal to every rank — its own exit status reports
# that it was signalled, so the ranks' clean stop is checked from their log).
set -u
bin=$1; data=$2; config=$3; work=$4; sig=$5; np=$6
rm -rf "$work"; mkdir -p "$work"
case=signal_stop_$sig$np fail_log=$work/log; . "$(dirname "$0")/lib.sh"
args=(train --config "$config" --train-data "$data" --steps 1000000 --log-every 0 --run-dir "$work/run")
if [ "$np" -eq 1 ]; then
    "$bin" "${args[@]}" >"$work/log" 2>&1 &
else
    mpiexec --allow-run-as-root --oversubscribe -np "$np" "$bin" "${args[@]}" --tp 2 --dp 2 >"$work/log" 2>&1 &
fi
pid=$!
for _ in $(seq 100); do   # wait until training runs (a few steps in the metrics file)
    [ -f "$work/run/metrics.jsonl" ] && [ "$(wc -l < "$work/run/metrics.jsonl")" -ge 3 ] && break
    sleep 0.1
done
[ -f "$work/run/metrics.jsonl" ] || fail "training did not start"
kill -"$sig" "$pid"
wait "$pid"; rc=$?
[ "$np" -eq 1 ] && [ $rc -ne 0 ] && fail "exit status $rc after SIG$sig, expected 0"
grep -q "stopped by signal after step" "$work/log" || fail "no clean stop after SIG$sig"
step=$(grep -o "stopped by signal after step [0-9]*" "$work/log" | grep -o "[0-9]*$")
printf -v dir "step_%08d" "$step"
[ -f "$work/run/checkpoints/$dir/index.h5" ] || fail "no checkpoint $dir"
[ "$(cat "$work/run/checkpoints/latest")" = "$dir" ] || fail "latest does not name $dir"
# resume for 2 more steps
args=(train --config "$config" --train-data "$data" --steps $((step + 2)) --log-every 0 --run-dir "$work/run" --resume)
if [ "$np" -eq 1 ]; then "$bin" "${args[@]}" >"$work/log2" 2>&1
else mpiexec --allow-run-as-root --oversubscribe -np "$np" "$bin" "${args[@]}" --tp 2 --dp 2 >"$work/log2" 2>&1; fi
[ $? -eq 0 ] || { cat "$work/log2"; fail "resume failed"; }
grep -q "resumed from .*$dir at step $step" "$work/log2" || { cat "$work/log2"; fail "did not resume from $dir"; }
grep -q "done: $((step + 2)) steps" "$work/log2" || { cat "$work/log2"; fail "resumed run did not finish"; }
echo "ok: SIG$sig stopped the job after step $step with a checkpoint; the resumed run finished step $((step + 2))"
