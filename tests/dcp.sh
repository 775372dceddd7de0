#!/usr/bin/env bash
# tests/dcp.sh BUILD_DIR SRC_DIR [read|import|titan] — PyTorch Distributed Checkpoint (DCP) directories through meshpoint,
# against the DCP directories torch writes in scripts/bench_venv.sh's venv (pinned PyPI torch, gloo):
#   read    reshard/dcp.c, reshard/pickle.c, `meshpoint ckpt ls|show|verify` (tests/python/dcp_read.py says what)
#   import  `meshpoint import DCP_DIR`, `export DCP_DIR` (reshard/dcp_source.c; tests/python/dcp_import.py says what;
#           it reads the checkpoints with Debian's h5py)
#   titan   import / export --format dcp against torchtitan's own Llama 3 model (PyPI torchtitan in
#           scripts/titan_venv.sh's venv, over the bench venv's torch; tests/python/dcp_titan.py says what)
set -euo pipefail
build=$1 src=$2 part=${3:-read}
source "$src/tests/lib.sh"
venv=bench_venv.sh
[ "$part" = titan ] && venv=titan_venv.sh
py=$("$src/scripts/$venv") || fail "scripts/$venv could not make the venv"
work="$build/dcp_$part"
rm -rf "$work"
mkdir -p "$work"
case $part in
    read) "$py" "$src/tests/python/dcp_read.py" "$build/meshpoint" "$build/tool_dcp_dump" "$work" ;;
    import) "$py" "$src/tests/python/dcp_import.py" "$build/meshpoint" "$work" ;;
    titan) "$py" "$src/tests/python/dcp_titan.py" "$build/meshpoint" "$build/tool_hf_logits" "$work" ;;
    *) fail "unknown part $part" ;;
esac
