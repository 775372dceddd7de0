#!/usr/bin/env bash
# tests/dcp_import.sh BUILD_DIR SRC_DIR — `meshpoint import DCP_DIR` and `export DCP_DIR` (reshard/dcp_source.c)
# against DCP directories torch writes in scripts/bench_venv.sh's venv (pinned PyPI torch, gloo) and transformers'
# Llama: tests/python/dcp_import.py says what it checks. Reads the checkpoints with Debian's h5py.
set -euo pipefail
build=$1 src=$2
source "$src/tests/lib.sh"
py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
work="$build/dcp_import"
rm -rf "$work"
mkdir -p "$work"
"$py" "$src/tests/python/dcp_import.py" "$build/meshpoint" "$work"
