#!/usr/bin/env bash
# scripts/build.sh [BUILD_DIR] [extra cmake args...] — configures and builds meshpoint (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
shift || true
cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$dir" -j"$(nproc)"
