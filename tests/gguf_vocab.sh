#!/usr/bin/env bash
# tests/gguf_vocab.sh BUILD_DIR SRC_DIR CASE — the GGUF tokenizer keys and the llama.cpp oracle driver, in the venv
# scripts/llamacpp_venv.sh makes once (tests/gguf_vocab.cmake says what each CASE checks):
#   vocab      tests/python/gguf_vocab.py with tests/tool_gguf_vocab and llama.cpp's convert_hf_to_gguf.py
#   ref_tool   tests/python/gguf_ref_check.py: tests/python/gguf_ref.py on a tiny model the converter writes
#   import     tests/python/gguf_import.py: `meshpoint import model.gguf` of the converter's and quantizer's files
set -euo pipefail
build=$1 src=$2 case=$3
source "$src/tests/lib.sh"
py=$("$src/scripts/llamacpp_venv.sh") || fail "scripts/llamacpp_venv.sh could not make the venv"
convert=$("$src/scripts/llamacpp_venv.sh" --convert)
work="$build/gguf_$case"
rm -rf "$work"
mkdir -p "$work"
case $case in
  vocab) "$py" "$src/tests/python/gguf_vocab.py" "$build/tool_gguf_vocab" "$work" "$convert" ;;
  ref_tool) "$py" "$src/tests/python/gguf_ref_check.py" "$src/tests/python/gguf_ref.py" "$work" "$convert" ;;
  import) "$py" "$src/tests/python/gguf_import.py" "$build/meshpoint" "$src" "$work" "$convert" ;;
  *) fail "unknown case $case" ;;
esac
