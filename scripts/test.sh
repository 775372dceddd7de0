#!/usr/bin/env bash
# scripts/test.sh — the whole test suite from a fresh machine: installs the packages, builds Release,
# runs every test (unit, CLI, multi-rank under mpiexec, PyTorch and h5py interop), then builds the unit
# tests with AddressSanitizer + UndefinedBehaviorSanitizer and runs them too. .ci/run calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export OPENBLAS_NUM_THREADS=1
# Open MPI as root on a small machine: allow it, let ranks outnumber cores, and yield while waiting.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_mpi_yield_when_idle=1 OMPI_MCA_rmaps_base_oversubscribe=1
jobs=$(nproc)

echo "== build (Release)"
./scripts/build.sh build
echo "== tests (Release)"
(cd build && ctest --output-on-failure -j"$jobs" --timeout 900)

echo "== build (ASan + UBSan)"
./scripts/build.sh build-asan -DMP_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo
echo "== unit tests (ASan + UBSan)"
# Leak checking stays on; Open MPI's own allocations are suppressed for the mpiexec entries.
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
export LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp
(cd build-asan && ctest --output-on-failure -j"$jobs" --timeout 900 -L unit)
