#!/usr/bin/env bash
# tests/dcp_export.sh MESHPOINT TRAIN_DATA WORKDIR SRC_DIR — `meshpoint export --format dcp` against
# torch.distributed.checkpoint.load in scripts/bench_venv.sh's venv: tests/python/dcp_export.py says what it checks.
set -euo pipefail
bin=$1 data=$2 work=$3 src=$4
source "$src/tests/lib.sh"
py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
rm -rf "$work"
mkdir -p "$work"
"$py" "$src/tests/python/dcp_export.py" "$bin" "$data" "$work" "$src"
