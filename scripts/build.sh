#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [extra cmake args...] — configures and builds meshpoint (Release, for a
# portable x86-64-v2 baseline; add -DMP_NATIVE=ON to compile for this machine's CPU, e.g. for benchmarks).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
