#!/usr/bin/env bash
# tests/gguf_llamacpp.sh MESHPOINT TOOL_HF_LOGITS WORKDIR SRC_DIR — `meshpoint export --format gguf` against
# llama.cpp itself (llama-cpp-python in scripts/llamacpp_venv.sh's venv): tests/python/gguf_llamacpp.py says what.
set -euo pipefail
bin=$1 tool=$2 work=$3 src=$4
source "$src/tests/lib.sh"
py=$("$src/scripts/llamacpp_venv.sh") || fail "scripts/llamacpp_venv.sh could not make the venv"
"$py" "$src/tests/python/gguf_llamacpp.py" "$bin" "$tool" "$work"
