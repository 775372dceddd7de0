#!/bin/sh
# tests/cli_mesh_equal.sh MPIEXEC... -- MESHPOINT DATA CONFIG WORKDIR [MESH FLAGS...] — trains the same run on
# one process and on a mesh through the real CLI and checks that every step's loss agrees within 1e-5
# relative (the metrics files carry 17 digits). The mesh is tp 2 x dp 2 unless MESH FLAGS name --tp and/or
# --dp (the other one is then 1, e.g. `--tp 4` runs tp 4 x dp 1); the world size is tp x dp. Other MESH
# FLAGS (e.g. --grad-accum 2, --no-sp) go to the mesh run only.
set -eu
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
bin=$1; data=$2; config=$3; work=$4; shift 4
tp=""; dp=""; prev=""
for a in "$@"; do
    case $prev in --tp) tp=$a ;; --dp) dp=$a ;; esac
    prev=$a
done
mesh=""
if [ -z "$tp" ] && [ -z "$dp" ]; then tp=2; dp=2; mesh="--tp 2 --dp 2"; fi
np=$(( ${tp:-1} * ${dp:-1} ))
rm -rf "$work"; mkdir -p "$work"
"$bin" train --config "$config" --train-data "$data" --steps 8 --run-dir "$work/one" --log-every 0
# shellcheck disable=SC2086
$launcher -np "$np" "$bin" train --config "$config" --train-data "$data" --steps 8 --run-dir "$work/mesh" $mesh --log-every 0 "$@"
/usr/bin/python3 - "$work/one/metrics.jsonl" "$work/mesh/metrics.jsonl" "tp ${tp:-1} x dp ${dp:-1}" <<'PY'
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 8, (len(a), len(b))
rel = [abs(x - y) / abs(x) for x, y in zip(a, b)]
print("1 process vs %s: step-1 loss %.9g vs %.9g (relative difference %.2e); worst over %d steps %.2e"
      % (sys.argv[3], a[0], b[0], rel[0], len(a), max(rel)))
sys.exit(0 if max(rel) <= 1e-5 else 1)
PY
