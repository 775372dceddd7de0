#!/usr/bin/env bash
# tests/dcp.sh BUILD_DIR SRC_DIR [read|import] — PyTorch Distributed Checkpoint (DCP) directories through meshpoint,
# against the DCP directories torch writes in scripts/bench_venv.sh's venv (pinned PyPI torch, gloo):
#   read    reshard/dcp.c, reshard/pickle.c, `meshpoint ckpt ls|show|verify` (tests/python/dcp_read.py says what)
#   import  `meshpoint import DCP_DIR`, `export DCP_DIR` (reshard/dcp_source.c; tests/python/dcp_import.py says what;
#           it reads the checkpoints with Debian's h5py)
set -euo pipefail
build=$1 src=$2 part=${3:-read}
source "$src/tests/lib.sh"
py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
work="$build/dcp_$part"
rm -rf "$work"
mkdir -p "$work"
case $part in
    read) "$py" "$src/tests/python/dcp_read.py" "$build/meshpoint" "$build/tool_dcp_dump" "$work" ;;
    import) "$py" "$src/tests/python/dcp_import.py" "$build/meshpoint" "$work" ;;
    *) fail "unknown part $part" ;;
esac
