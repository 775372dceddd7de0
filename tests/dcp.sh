#!/usr/bin/env bash
# tests/dcp.sh BUILD_DIR SRC_DIR — PyTorch Distributed Checkpoint (DCP) directories read by meshpoint
# (reshard/dcp.c, reshard/pickle.c, `meshpoint ckpt ls|show|verify`), against the DCP directories torch
# writes in scripts/bench_venv.sh's venv (pinned PyPI torch, gloo): tests/python/dcp_read.py says what it checks.
set -euo pipefail
build=$1 src=$2
source "$src/tests/lib.sh"
py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
work="$build/dcp_read"
rm -rf "$work"
mkdir -p "$work"
"$py" "$src/tests/python/dcp_read.py" "$build/meshpoint" "$build/tool_dcp_dump" "$work"
