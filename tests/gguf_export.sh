#!/usr/bin/env bash
# tests/gguf_export.sh MESHPOINT WORKDIR SRC_DIR — `meshpoint export --format gguf` of a tiny model of each
# family at f32/f16/bf16/q8_0, read with llama.cpp's `gguf` package in scripts/test_venv.sh's venv:
# tests/python/gguf_export.py says what it checks.
set -euo pipefail
bin=$1 work=$2 src=$3
source "$src/tests/lib.sh"
py=$("$src/scripts/test_venv.sh") || fail "scripts/test_venv.sh could not make the venv"
"$py" "$src/tests/python/gguf_export.py" "$bin" "$work"
