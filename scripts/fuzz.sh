#!/usr/bin/env bash
# scripts/fuzz.sh [SECONDS] — builds the libFuzzer targets (tests/fuzz/fuzz_*.c, tests/ckpt/fuzz_*.c) with clang in
# FUZZ_BUILD (default build-fuzz: -DMP_FUZZ=ON, ASan + UBSan with float-cast-overflow) and runs each
# for SECONDS (default 20, the CI budget: 5 targets ~ 100 s plus the build), one at a time, one process
# each. Seeds come from tests/fuzz/corpus/<name> (read only); what a run adds to the corpus goes to
# FUZZ_BUILD/corpus/<name>, so a longer run on demand continues where the last one stopped:
#     ./scripts/fuzz.sh 600                        # 10 minutes per target
#     FUZZ_TARGETS="index zstd" ./scripts/fuzz.sh 3600
# A finding (crash, sanitizer report, leak, timeout, out-of-memory) is written to
# FUZZ_BUILD/artifacts/<name>-*; the script says how to replay it, goes on with the other targets, and
# exits 1. docs/RELIABILITY.md ("Fuzzing") lists the targets and what they found.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
build=$(realpath -m "${FUZZ_BUILD:-build-fuzz}")
cc=${FUZZ_CC:-clang}
if ! command -v "$cc" >/dev/null; then
  echo "fuzz: $cc not found (scripts/setup.sh installs clang)" >&2
  exit 1
fi
targets=${FUZZ_TARGETS:-$(for f in tests/fuzz/fuzz_*.c tests/ckpt/fuzz_*.c; do basename "$f" .c | sed 's/^fuzz_//'; done)}

echo "== fuzz: building $build ($cc)"
cmake -S . -B "$build" -DMP_FUZZ=ON -DCMAKE_C_COMPILER="$cc" -DMP_CUDA=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j"$(nproc)" --target $(for t in $targets; do printf 'fuzz_%s ' "$t"; done)

# HDF5's and Open MPI's own allocations are kept until exit (tests/lsan.supp); any undefined behaviour
# is a finding (the build already makes it fatal; the stack helps).
export LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}"
mkdir -p "$build/artifacts"
failed=()
for t in $targets; do
  mkdir -p "$build/corpus/$t"
  log="$build/fuzz_$t.log"
  echo "== fuzz: $t for ${secs} s (log $log)"
  if "$build/fuzz_$t" -max_total_time="$secs" -timeout=30 -rss_limit_mb=2048 -print_final_stats=1 \
       -artifact_prefix="$build/artifacts/$t-" "$build/corpus/$t" "tests/fuzz/corpus/$t" >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^Done' "$log" | tr '\n' ' '
    echo
  else
    failed+=("$t")
    tail -n 60 "$log"
    echo "fuzz: $t FOUND A PROBLEM; artifacts: $(ls "$build"/artifacts/"$t"-* 2>/dev/null | tr '\n' ' ')"
    echo "      replay: $build/fuzz_$t ARTIFACT   minimise: $build/fuzz_$t -minimize_crash=1 -runs=10000 ARTIFACT"
  fi
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: findings in: ${failed[*]}" >&2
  exit 1
fi
echo "fuzz: all targets clean"
