#!/bin/bash
# tests/train_faults.sh MESHPOINT EQUAL_TOOL DATA CONFIG WORKDIR CASE — failures of a training job's save,
# on tp 2 x dp 2 through the real CLI. Every case: a straight 6-step run is the reference; the faulty run
# saves step 2, then fails while saving step 4; the run is then resumed and must continue from the
# newest COMPLETE checkpoint, finish, and end bitwise equal to the reference (final checkpoint).
#   crash:POINT  SIGKILL every rank at POINT of the step-4 save (the fault ckpt_crash_at): during_rank_files,
#                after_rank_files, before_index, after_index -> resume from 2; after_rename, after_latest
#                -> step 4 is complete, resume from 4; during_view (rank 0's background view.h5 write,
#                killed before its rename) -> step 4 is complete without view.h5, its views
#                pending: `ckpt ls` marks it, `ckpt verify` passes (exit 0) with one note naming
#                repair-views; the resume loads it from 4 and writes its view.h5 (logged), after which
#                verify passes without the note, nothing temporary is left, and h5py reads its views.
#   diskfull     the step-4 save runs past the file-size limit (ulimit -f, SIGXFSZ ignored): the job
#                exits 1 naming the failure, step 2 stays loadable.
#   diskfull-continue  the same with --on-save-error continue: the job logs step 4's failure and goes on;
#                the stop's save at step 5 (the run's last) fails too, and that fails the job (exit 1).
#   corrupt      a flipped byte in the data of rank 3's file of step 2: the resume is refused by the ranks
#                that read that box — and by every rank, with one message naming the file, the tensor and
#                the checksum, exit 1, no hang.
set -u
bin=$1; equal=$2; data=$3; config=$4; work=$5; case=$6
mpi="mpiexec --allow-run-as-root --oversubscribe -np 4"
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --steps 6 --tp 2 --dp 2 --log-every 0 --ckpt-every 2"
. "$(dirname "$0")/lib.sh"
$mpi "$bin" $common --run-dir "$work/ref" || fail "reference run"
run="$work/run"
$mpi "$bin" $common --run-dir "$run" --stop-at 3 >"$work/p1.log" 2>&1 || fail "phase 1: $(cat "$work/p1.log")"
# phase 1 saved steps 2 and 3; drop 3 so that the faulty save is the one right after step 2 -> 4
rm -rf "$run/checkpoints/step_00000003"; echo step_00000002 > "$run/checkpoints/latest"
expect_from=2
case "$case" in
crash:*)
    point=${case#crash:}
    MP_FAULT=ckpt_crash_at:$point $mpi "$bin" $common --run-dir "$run" --resume >"$work/p2.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] || fail "the job was to be killed at $point but exited 0"
    grep -q "fault ckpt_crash_at:$point" "$work/p2.log" || fail "the crash point $point was not reached: $(cat "$work/p2.log")"
    case "$point" in after_rename|after_latest|during_view) expect_from=4 ;; esac
    if [ "$point" = during_view ]; then
        v=$run/checkpoints/step_00000004
        [ "$(cat "$run/checkpoints/latest")" = step_00000004 ] || fail "during_view: step 4 is not the latest"
        [ -e "$v/view.h5" ] && fail "during_view: a view.h5 under its final name before the rename"
        ls "$v" | grep -qE '^view\.h5\.tmp\.[0-9]+$' || fail "during_view: no view.h5.tmp.<pid>: the kill was not inside the write"
        expect 0 "^note: views pending: .*meshpoint ckpt repair-views $v" "$work/verify_noview" "$bin" ckpt verify "$v"
        [ "$(grep -c 'views pending' "$work/verify_noview")" = 2 ] && ! grep -q '^problem' "$work/verify_noview" ||
            fail "during_view: verify is to say views pending once, with no problem: $(cat "$work/verify_noview")"
        expect 0 "step_00000004 .*<- latest  views pending" "$work/ls_noview" "$bin" ckpt ls "$run"
    fi
    ;;
diskfull|diskfull-continue)
    extra=""
    [ "$case" = diskfull-continue ] && extra="--on-save-error continue"
    # each rank file of this config is ~100 KiB: the limit lets the metrics file grow but not a rank file
    # the limit goes on the ranks only (the launcher's own shared-memory files need room)
    $mpi sh -c 'trap "" XFSZ; ulimit -f 64; exec "$@"' rank "$bin" $common --run-dir "$run" --resume --stop-at 5 $extra \
        >"$work/p2.log" 2>&1
    rc=$?
    if [ "$case" = diskfull ]; then
        [ $rc -eq 1 ] || fail "expected exit 1 on a failed save, got $rc: $(cat "$work/p2.log")"
        grep -qi "saving a checkpoint at step 4" "$work/p2.log" || fail "no message naming the failed save: $(cat "$work/p2.log")"
        grep -qiE "file too large|no space|EFBIG|too large" "$work/p2.log" || fail "the cause is not named: $(cat "$work/p2.log")"
    else
        # step 4's failure is logged and training goes on; the stop's save at step 5 is the run's last,
        # and its failure fails the run even with --on-save-error continue
        [ $rc -eq 1 ] || fail "--on-save-error continue: expected exit 1 (the last save failed), got $rc: $(cat "$work/p2.log")"
        grep -qi "step 4.*continuing" "$work/p2.log" || fail "no 'continuing' message for step 4: $(cat "$work/p2.log")"
        grep -q "the run's last save failed.*step 5" "$work/p2.log" || fail "the last save's failure is not named: $(cat "$work/p2.log")"
        [ -d "$run/checkpoints/step_00000005" ] && fail "a failed save left step_00000005"
    fi
    [ -d "$run/checkpoints/step_00000004" ] && fail "a failed save left step_00000004"
    ls "$run/checkpoints" | grep -q partial && fail "a failed save left a .partial directory"
    ;;
corrupt)
    /usr/bin/python3 - "$run/checkpoints/step_00000002/rank_00003.h5" <<'PY' || fail "could not corrupt the file"
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    name = []
    f.visititems(lambda n, o: name.append(n) if isinstance(o, h5py.Dataset) and "mlp.down_proj" in n and name == [] else None)
    off = f[name[0]].id.get_offset()
with open(path, "r+b") as g:
    g.seek(off + 5); b = g.read(1); g.seek(off + 5); g.write(bytes([b[0] ^ 0x10]))
print("flipped a byte of", name[0])
PY
    timeout 120 $mpi "$bin" $common --run-dir "$run" --resume >"$work/p2.log" 2>&1
    rc=$?
    [ $rc -eq 124 ] && fail "the job hung after a checksum failure on one rank"
    [ $rc -ne 0 ] || fail "a corrupt checkpoint was loaded"
    grep -q "rank_00003.h5" "$work/p2.log" || fail "the message does not name the file: $(cat "$work/p2.log")"
    grep -q "down_proj" "$work/p2.log" || fail "the message does not name the tensor: $(cat "$work/p2.log")"
    grep -qi "checksum" "$work/p2.log" || fail "the message does not say checksum: $(cat "$work/p2.log")"
    n=$(grep -c "meshpoint [a-z ]*: error:" "$work/p2.log")
    [ "$n" -eq 1 ] || fail "the error was printed $n times: $(cat "$work/p2.log")"
    grep -q "^step\|resumed from" "$work/p2.log" && fail "training went on: $(cat "$work/p2.log")"
    echo "ok ($case): refused on every rank with one message: $(grep 'meshpoint [a-z ]*: error:' "$work/p2.log" | cut -c1-200)"
    exit 0
    ;;
*) fail "unknown case" ;;
esac
$mpi "$bin" $common --run-dir "$run" --resume >"$work/p3.log" 2>&1 || fail "resume: $(cat "$work/p3.log")"
grep -q "resumed from .*step_0000000$expect_from at step $expect_from" "$work/p3.log" ||
    fail "expected to resume from step $expect_from: $(cat "$work/p3.log")"
"$equal" "$work/ref/checkpoints/step_00000006" "$run/checkpoints/step_00000006" || fail "final state differs from the straight run"
# the metrics file holds each step once (lines logged after the checkpoint by the failed run are
# dropped on resume), with the straight run's losses
grep -o '"step": [0-9]*, "loss": [^,]*' "$work/ref/metrics.jsonl" > "$work/ref.txt"
grep -o '"step": [0-9]*, "loss": [^,]*' "$run/metrics.jsonl" > "$work/run.txt"
cmp -s "$work/ref.txt" "$work/run.txt" || { paste "$work/ref.txt" "$work/run.txt"; fail "metrics.jsonl differs from the straight run"; }
if [ "$case" = crash:during_view ]; then
    # the resume wrote the pending view: no repair-views needed
    grep -q "views: wrote the missing view.h5 of $v " "$work/p3.log" || fail "the resume did not heal $v: $(cat "$work/p3.log")"
    expect 0 "^ok:" "$work/verify_healed" "$bin" ckpt verify "$v"
    grep -q "views pending" "$work/verify_healed" && fail "views still pending: $(cat "$work/verify_healed")"
    ls "$v" | grep -q repair && fail "during_view: a temporary view file was left: $(ls "$v")"
    /usr/bin/python3 -c '
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1] + "/index.h5", "r")
w = f["view/model/model.embed_tokens.weight"][...]
assert np.isfinite(w).all() and w.shape[0] > 0, w' "$v" >"$work/h5py" 2>&1 || fail "h5py through the healed view: $(cat "$work/h5py")"
fi
echo "ok ($case): resumed from step $expect_from and finished bitwise equal to the straight run"
