#!/usr/bin/env bash
# scripts/llamacpp_venv.sh — creates (once) the Python virtual environment in which the GGUF tests hold
# meshpoint against llama.cpp itself, and prints its interpreter's path on stdout (everything else goes to
# stderr).
#
#   scripts/llamacpp_venv.sh             # path of the venv's python, creating it (and the bench venv) if needed
#   scripts/llamacpp_venv.sh --convert   # path of llama.cpp's convert_hf_to_gguf.py (same llama.cpp)
#   MP_LLAMACPP_VENV=DIR MP_LLAMACPP_JOBS=N scripts/llamacpp_venv.sh
#
# What is in it: llama-cpp-python (pinned) built from its PyPI sdist, which vendors llama.cpp at a fixed
# commit: its llama.cpp library (CPU only, no multimodal library, no tests/examples/tools) is the oracle
# (llama_cpp.Llama: tokenize, logits, perplexity); `gguf`, the GGUF reader/writer, installed from the same
# sdist's vendor/llama.cpp/gguf-py, so the reader matches the library that loads the files; and that
# llama.cpp's own convert_hf_to_gguf.py, reachable with --convert (the sdist is kept, extracted, beside the
# venv: the converter is not part of the installed package).
#
# Why the sdist is fetched by curl: `pip download` of an sdist prepares its metadata (a build environment,
# minutes here); the file's URL and sha256 are pinned below, as PyPI's simple index lists them, and the
# download is checked against the sha256 before it is extracted.
#
# Why over the bench venv (as scripts/titan_venv.sh): convert_hf_to_gguf.py needs torch and transformers;
# they come from scripts/bench_venv.sh's venv, seen after this venv's own packages through a .pth file
# (mp_venv's MP_VENV_UNDER), so there is no second ~6 GB torch. numpy is pinned as the bench venv pins it;
# sentencepiece is the converter's (it imports it for every Llama-family directory, tokenizer.model or not).
#
# Build: CPU only, GGML_NATIVE off with the x86-64-v3 set (AVX2/FMA/F16C) so a cached venv runs on any CI
# runner of the last decade; MP_LLAMACPP_JOBS (default 2) parallel compile jobs. The cmake settings are
# pip's --config-settings, so they are part of the pins and of the stamp: changing them rebuilds the venv.
#
# Default location: $XDG_CACHE_HOME/meshpoint/llamacpp-venv-<pins> and .../llamacpp-src-<version> (else
# ~/.cache/...). About 80 MB (sdist) + 300 MB (extracted) + 30 MB (venv); the build takes minutes (see
# docs/GGUF_TOKENIZER.md for the measured time); later calls take well under a second.
set -euo pipefail
LCP_VERSION=0.3.36
LCP_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LCP_URL=https://files.pythonhosted.org/packages/ec/e9/e7de2b0463ea3ffbf0ede6cb21b58c1258a8f6521aae45ca773a59fe7cf3/llama_cpp_python-$LCP_VERSION.tar.gz
NUMPY_PIN="numpy==2.4.6"
SENTENCEPIECE_PIN="sentencepiece==0.2.1"   # convert_hf_to_gguf.py imports it on every llama-family directory
TAG="llamacpp$LCP_VERSION"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/meshpoint"
VENV="${MP_LLAMACPP_VENV:-$cache/llamacpp-venv-$TAG}"
SRC="$cache/llamacpp-src-$LCP_VERSION"

# Extracts the pinned sdist into $SRC once (a stamp file records its sha256); a $SRC this script did not
# make is refused, as mp_venv refuses a foreign venv.
llamacpp_fetch_src() {
  if [ -f "$SRC/.meshpoint-sha256" ] && [ "$(cat "$SRC/.meshpoint-sha256")" = "$LCP_SHA256" ]; then return 0; fi
  if [ -e "$SRC" ] && [ ! -f "$SRC/.meshpoint-sha256" ] && [ -n "$(ls -A "$SRC" 2>/dev/null)" ]; then
    echo "llamacpp_venv: error: $SRC exists and is not a source tree this script made; remove it" >&2
    return 2
  fi
  mkdir -p "$cache"
  local tmp
  tmp=$(mktemp -d "$cache/llamacpp-src.partial.XXXXXX")
  echo "llamacpp_venv: downloading llama-cpp-python $LCP_VERSION sdist" >&2
  curl -fsSL --retry 3 -o "$tmp/sdist.tar.gz" "$LCP_URL" >&2
  if [ "$(sha256sum "$tmp/sdist.tar.gz" | cut -d' ' -f1)" != "$LCP_SHA256" ]; then
    echo "llamacpp_venv: error: $LCP_URL does not have the pinned sha256 $LCP_SHA256" >&2
    rm -rf "$tmp"
    return 1
  fi
  tar -xzf "$tmp/sdist.tar.gz" -C "$tmp"
  rm -rf "$SRC"
  mv "$tmp/llama_cpp_python-$LCP_VERSION" "$SRC"
  rm -rf "$tmp"
  echo "$LCP_SHA256" > "$SRC/.meshpoint-sha256"
}

llamacpp_fetch_src
if [ "${1:-}" = --convert ]; then
  echo "$SRC/vendor/llama.cpp/convert_hf_to_gguf.py"
  exit 0
fi
bench_py=$("$(dirname "$0")/bench_venv.sh")
bench_site=$("$bench_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
CMAKE_DEFS="GGML_NATIVE=OFF GGML_AVX=ON GGML_AVX2=ON GGML_FMA=ON GGML_F16C=ON GGML_BMI2=ON GGML_OPENMP=OFF
  GGML_BLAS=OFF GGML_CUDA=OFF GGML_VULKAN=OFF GGML_METAL=OFF LLAVA_BUILD=OFF LLAMA_CURL=OFF LLAMA_BUILD_TESTS=OFF
  LLAMA_BUILD_EXAMPLES=OFF LLAMA_BUILD_TOOLS=OFF LLAMA_BUILD_SERVER=OFF"
PINS="$NUMPY_PIN $SENTENCEPIECE_PIN $SRC/vendor/llama.cpp/gguf-py $SRC"
for d in $CMAKE_DEFS; do PINS="$PINS --config-settings=cmake.define.$d"; done
export CMAKE_BUILD_PARALLEL_LEVEL="${MP_LLAMACPP_JOBS:-2}"

. "$(dirname "$0")/venv_lib.sh"
MP_VENV_UNDER="$bench_site" mp_venv llamacpp_venv MP_LLAMACPP_VENV "$VENV" "$PINS" \
  'import llama_cpp, gguf, torch, transformers; assert llama_cpp.__version__ == "'"$LCP_VERSION"'", llama_cpp.__version__' \
  python3-venv build-essential cmake curl
