#!/bin/sh
# tests/cli_mesh_equal.sh MPIEXEC... -- MESHPOINT DATA CONFIG WORKDIR [MESH FLAGS...] — trains the same run on
# one process and on 4 processes (tp 2 x dp 2, plus MESH FLAGS, e.g. --grad-accum 2) through the real CLI
# and checks that every step's loss agrees within 1e-5 relative (the metrics files carry 17 digits).
set -eu
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
bin=$1; data=$2; config=$3; work=$4; shift 4
rm -rf "$work"; mkdir -p "$work"
"$bin" train --config "$config" --train-data "$data" --steps 8 --run-dir "$work/one" --log-every 0
$launcher -np 4 "$bin" train --config "$config" --train-data "$data" --steps 8 --run-dir "$work/mesh" --tp 2 --dp 2 --log-every 0 "$@"
/usr/bin/python3 - "$work/one/metrics.jsonl" "$work/mesh/metrics.jsonl" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 8, (len(a), len(b))
worst = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("1 process vs tp2 x dp2: worst relative loss difference %.2e over %d steps" % (worst, len(a)))
sys.exit(0 if worst <= 1e-5 else 1)
PY
