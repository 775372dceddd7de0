#!/usr/bin/env bash
# scripts/test_venv.sh — creates (once) the Python virtual environment the tokenizer tests compare against
# (Hugging Face's `tokenizers` library from PyPI, pinned) and the GGUF export test reads with (llama.cpp's
# `gguf` package: GGUFReader, its numpy quantizers; it brings numpy), and prints its interpreter's path on stdout
# (everything else goes to stderr). Modelled on scripts/bench_venv.sh.
#
#   scripts/test_venv.sh            # path of the venv's python, creating the venv if needed
#   MP_TEST_VENV=DIR scripts/test_venv.sh
#
# Default location: $XDG_CACHE_HOME/meshpoint/test-venv-<pins> (else ~/.cache/...). A stamp file records
# the pins; a venv without it (a failed or older install) is rebuilt. About 20 MB, seconds to install.
set -euo pipefail
TOKENIZERS_PIN="tokenizers==0.23.3"
GGUF_PIN="gguf==0.19.0"
PINS="$TOKENIZERS_PIN $GGUF_PIN"
TAG="tokenizers0.23.3-gguf0.19.0"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/meshpoint"
VENV="${MP_TEST_VENV:-$cache/test-venv-$TAG}"

# python3-venv: Debian's (the venv module and ensurepip are split out of python3)
. "$(dirname "$0")/venv_lib.sh"
mp_venv test_venv MP_TEST_VENV "$VENV" "$PINS" 'import tokenizers, gguf, numpy' python3-venv
