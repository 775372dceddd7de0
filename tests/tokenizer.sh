#!/usr/bin/env bash
# tests/tokenizer.sh BUILD_DIR SRC_DIR CASE — the tokenizer held against Hugging Face's `tokenizers` (PyPI,
# pinned, in the venv scripts/test_venv.sh makes once):
#   compare   tests/python/tokenizer_compare.py: ids, decode and round trip on the edge-case corpus for
#             GPT-2, Llama 3, Llama 2 (byte fallback), Metaspace and Qwen2 (NFC) layouts, invalid UTF-8 included
#   unorm     tests/python/tokenizer_unorm.py: the NFC/NFD/NFKC/NFKD normalizers (and a Sequence of them) on
#             every code point and on random clusters of marks, decomposables and jamo: identical ids
#   refusals  tests/python/tokenizer_refusals.py: unsupported models/normalizers/pre-tokenizers/decoders/
#             post-processors and missing or garbled files: exit 2 naming them (tool and `meshpoint data`)
#   data      tests/python/tokenizer_data_e2e.py: `meshpoint data --tokenizer` token files = BOS + encode(doc)
#             + EOS per document, as the library computes them (text files and JSONL; uint16 and uint32)
#   ckpt      tests/python/tokenizer_ckpt_e2e.py, in scripts/bench_venv.sh's venv (transformers): checkpoints
#             carry their tokenizer — import, ckpt show/verify, sample --prompt in text (= transformers' greedy
#             text), data --tokenizer, train --init-from and --resume, reshard, export (AutoTokenizer gives
#             the same ids), a flipped carried byte (verify exit 1 naming the file), an old checkpoint,
#             docs/CLI.md's text workflow block, a sentencepiece-style tokenizer (sample = transformers)
set -euo pipefail
build=$1 src=$2 case=$3
source "$src/tests/lib.sh"
if [ "$case" = ckpt ]; then
  py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
else
  py=$("$src/scripts/test_venv.sh") || fail "scripts/test_venv.sh could not make the venv"
fi
work="$build/tokenizer_$case"
rm -rf "$work"
mkdir -p "$work"
case $case in
  compare) "$py" "$src/tests/python/tokenizer_compare.py" "$build/tool_tokenize" "$work" ;;
  unorm) "$py" "$src/tests/python/tokenizer_unorm.py" "$build/tool_tokenize" "$work" ;;
  refusals) "$py" "$src/tests/python/tokenizer_refusals.py" "$build/tool_tokenize" "$work" "$build/meshpoint" ;;
  data) "$py" "$src/tests/python/tokenizer_data_e2e.py" "$build/meshpoint" "$work" ;;
  ckpt) "$py" "$src/tests/python/tokenizer_ckpt_e2e.py" "$build/meshpoint" "$src" "$work" ;;
  *) fail "unknown case $case" ;;
esac
