#!/usr/bin/env bash
# scripts/titan_venv.sh — creates (once) the Python virtual environment in which tests/python/dcp_titan.py runs
# torchtitan's own Llama 3 model (torchtitan from PyPI, pinned), and prints its interpreter's path on stdout
# (everything else goes to stderr).
#
#   scripts/titan_venv.sh            # path of the venv's python, creating it (and the bench venv) if needed
#   MP_TITAN_VENV=DIR scripts/titan_venv.sh
#
# torchtitan's declared dependencies are a trainer's (datasets, wandb, tensorboard, torchdata,
# torch_checkpointing, ...); importing its Llama 3 model and state-dict adapter needs only torch and the four
# packages pinned below beside it, so torchtitan is installed --no-deps with exactly those.
#
# Why over the bench venv: torch (and transformers, numpy) come from scripts/bench_venv.sh's venv, which this
# venv sees after its own packages through a .pth file (mp_venv's MP_VENV_UNDER). A second copy of PyPI's
# torch would cost another ~6 GB and minutes of download (pip's cache is not kept here); reusing the bench
# venv runs torchtitan against the very torch the other DCP tests pin, and nothing is installed into the bench
# venv, whose stamp stays true. Not --system-site-packages: that would expose Debian's torch 1.13. Both venvs
# are made by /usr/bin/python3, so the interpreter matches; the stamp records the bench venv's site-packages
# (whose path names its pins), so a change of the bench pins rebuilds this venv.
#
# Default location: $XDG_CACHE_HOME/meshpoint/titan-venv-<pins> (else ~/.cache/...). About 10 MB, seconds.
set -euo pipefail
bench_py=$("$(dirname "$0")/bench_venv.sh")
bench_site=$("$bench_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
PINS="--no-deps torchtitan==0.3.0 spmd_types==0.2.3 tyro==1.0.17 docstring_parser==0.18.0 typeguard==4.6.1"
TAG="torchtitan0.3.0"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/meshpoint"
VENV="${MP_TITAN_VENV:-$cache/titan-venv-$TAG}"

. "$(dirname "$0")/venv_lib.sh"
MP_VENV_UNDER="$bench_site" mp_venv titan_venv MP_TITAN_VENV "$VENV" "$PINS" \
  'import torch, torchtitan.models.llama3 as t; from torchtitan.models.llama3.state_dict_adapter import Llama3StateDictAdapter; assert torch.__version__.startswith("2.15.0")' \
  python3-venv
