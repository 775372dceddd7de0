#!/bin/sh
# tests/resume_other_mesh.sh MESHPOINT DATA CONFIG WORKDIR — load-time resharding through --resume: a run
# saved on tp 2 x dp 2 at step 3 resumes on dp 2 (tp 1) and on 1 process; every resumed step's loss must
# agree with a straight 1-process run within 1e-5 relative (floating-point reordering only).
set -eu
bin=$1; data=$2; config=$3; work=$4
mpi="mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --steps 6 --log-every 0"
"$bin" $common --run-dir "$work/straight"
for target in dp2 one; do
    $mpi -np 4 "$bin" $common --run-dir "$work/$target" --tp 2 --dp 2 --stop-at 3
    if [ $target = dp2 ]; then $mpi -np 2 "$bin" $common --run-dir "$work/$target" --dp 2 --resume > "$work/$target.log" 2>&1
    else "$bin" $common --run-dir "$work/$target" --resume > "$work/$target.log" 2>&1; fi
    grep -q "resumed from .*step_00000003 at step 3" "$work/$target.log" || { cat "$work/$target.log"; exit 1; }
done
/usr/bin/python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
def losses(run): return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{w}/{run}/metrics.jsonl") if '"loss"' in l}
ref = losses("straight")
for run in ("dp2", "one"):
    got = losses(run)
    assert sorted(got) == list(range(1, 7)), (run, sorted(got))
    worst = max(abs(got[s] - ref[s]) / abs(ref[s]) for s in range(1, 7))
    print(f"saved on tp2 x dp2, resumed on {run}: worst relative loss difference {worst:.2e}")
    assert worst <= 1e-5, run
PY
