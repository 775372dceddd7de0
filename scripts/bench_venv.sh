#!/usr/bin/env bash
# scripts/bench_venv.sh — creates (once) the Python virtual environment the benchmarks' PyTorch peers run
# in, and prints its interpreter's path on stdout (everything else goes to stderr).
#
# Why a venv: Debian's python3-torch is torch 1.13, which barely uses a second thread here and has no
# torch.compile; the peers users pick today are current PyTorch (eager and torch.compile, fused AdamW,
# sdpa attention), transformers' LlamaForCausalLM and torch.distributed.checkpoint (DCP). They come
# from PyPI, pinned so two runs of a benchmark compare the same peer.
#
#   scripts/bench_venv.sh            # path of the venv's python, creating the venv if needed
#   MP_BENCH_VENV=DIR scripts/bench_venv.sh
#
# Default location: $XDG_CACHE_HOME/meshpoint/bench-venv-<pins> (else ~/.cache/...). A stamp file records
# the pins; a venv without it (a failed or older install) is rebuilt. About 6 GB on disk (PyPI's Linux
# torch wheel pulls its CUDA libraries even for CPU use) and 1-3 minutes to install.
set -euo pipefail
TORCH_PIN="torch==2.15.0"
TRANSFORMERS_PIN="transformers==5.24.0"
NUMPY_PIN="numpy==2.4.6"
PINS="$TORCH_PIN $TRANSFORMERS_PIN $NUMPY_PIN"
TAG="torch2.15.0-tf5.24.0"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/meshpoint"
VENV="${MP_BENCH_VENV:-$cache/bench-venv-$TAG}"

# python3-venv and python3-dev (torch.compile's inductor builds C++ against Python.h), gcc: Debian's
if [ ! -x /usr/bin/python3 ] || ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null ||
   [ ! -e "/usr/include/python3.$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])' 2>/dev/null || echo x)/Python.h" ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "bench_venv: installing python3-venv python3-dev" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv python3-dev \
    build-essential >&2
fi

if [ -f "$VENV/.meshpoint-pins" ] && [ "$(cat "$VENV/.meshpoint-pins")" = "$PINS" ] && [ -x "$VENV/bin/python" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
if [ -e "$VENV" ] && [ ! -f "$VENV/.meshpoint-pins" ] && [ -n "$(ls -A "$VENV" 2>/dev/null)" ] &&
   [ ! -f "$VENV/pyvenv.cfg" ]; then
  echo "bench_venv: error: $VENV exists and is not a virtual environment this script made; set MP_BENCH_VENV" >&2
  exit 2
fi
echo "bench_venv: creating $VENV ($PINS)" >&2
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv --clear "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check $PINS >&2
"$VENV/bin/python" -c 'import torch, transformers, torch.distributed as d; assert d.is_gloo_available()' >&2
echo "$PINS" > "$VENV/.meshpoint-pins"
echo "$VENV/bin/python"
