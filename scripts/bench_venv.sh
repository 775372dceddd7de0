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
. "$(dirname "$0")/venv_lib.sh"
mp_venv bench_venv MP_BENCH_VENV "$VENV" "$PINS" \
  'import torch, transformers, torch.distributed as d; assert d.is_gloo_available()' \
  python3-venv python3-dev build-essential
