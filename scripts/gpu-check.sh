#!/usr/bin/env bash
# scripts/gpu-check.sh [BUILD_DIR] — the GPU's check, in one command for a lent GPU machine (issue 12):
# builds the CUDA variant (warnings as errors), then runs, each part under a time limit, with a summary
# that gives every part PASS, FAIL or NOT RUN (and why):
#   1. nvidia-smi and `meshpoint --version` (the devices line: GPUs found, or CUDA's reason for none);
#   2. kernels_host     the kernels' host-side check (also runs in CI without a GPU);
#   3. kernels_device   every launcher against host references, reductions run twice and compared
#                       bit for bit (core/cuda/hostcheck/check_kernels_device.cu);
#   4. cuda_train       a 2-step tiny `train --device cuda`: whether the backend trains at all. A refusal
#                       (exit 2, e.g. "the CUDA backend table is not complete yet") marks it and parts 5-7
#                       NOT RUN with the refusal, never PASS;
#   5. device_parity_cuda  (ctest) CPU-vs-GPU parity of logits, loss and gradients on small configs
#                       (NOT RUN when the test is not registered in this tree);
#   6. gpu_e2e          (ctest, tests/gpu_e2e.sh) exact resume on 1x1 and on a tp x dp mesh when the host
#                       has several GPUs, a GPU checkpoint verified / evaluated / resumed on the CPU, a CPU
#                       checkpoint resumed on the GPU;
#   7. bench_gpu        bench/bench_gpu.sh: the 1B shape on one GPU, tokens/s and bf16 MFU;
#   8. compute-sanitizer memcheck, racecheck, synccheck on the device check, when installed, with the
#                       time that is left.
# Time: the whole script, build included, stays within MP_GPU_CHECK_BUDGET seconds (default 300: 5
# minutes on one H200); each part runs under `timeout` with its own limit, cut to the time left; a part
# that finds under 10 s left is NOT RUN (out of time). An already-built BUILD_DIR rebuilds incrementally.
# Exit status: 0 everything that ran passed (the summary lists what did not run), 1 a part failed (or
# the build did), 2 no usable GPU here (nothing to check). Record the output and the date in
# docs/BENCH_GPU.md.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
root=$(pwd)
build=${1:-build-gpu}
case "$build" in /*) ;; *) build="$root/$build" ;; esac
budget=${MP_GPU_CHECK_BUDGET:-300}
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
summary=()
failed=0
note() { summary+=("$1"); echo "== $1"; }

echo "== gpu-check $(date -u +%Y-%m-%dT%H:%M:%SZ), $(git describe --always --dirty 2>/dev/null || echo 'no git'), budget ${budget} s"
if command -v nvidia-smi > /dev/null 2>&1; then nvidia-smi -L 2>&1; else echo "(nvidia-smi: not installed)"; fi
./scripts/setup.sh > /dev/null
if ! ./scripts/build.sh "$build" -DMP_CUDA=ON -DMP_WERROR=ON > "$build.log" 2>&1; then
  tail -30 "$build.log"
  echo "gpu-check: the CUDA build failed (log: $build.log)"
  exit 1
fi
note "build: CUDA variant, warnings as errors: PASS ($SECONDS s)"
"$build/meshpoint" --version
devices=$("$build/meshpoint" --version | grep '^devices:')
case "$devices" in
  *"cuda ("*) ;;
  *) echo "gpu-check: no usable GPU here: $devices"; exit 2 ;;
esac

left() { echo $((budget - SECONDS)); }
# part NAME LIMIT CMD...: CMD under min(LIMIT, time left), output in $build/gpu-check.NAME.log; its
# verdict in the summary: PASS (exit 0), NOT RUN (exit 77: skipped, with its last line), FAIL otherwise.
part() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS rc l log="$build/gpu-check.$name.log"
  l=$(left)
  if [ "$l" -lt 10 ]; then note "$name: NOT RUN (out of time: ${l} s left of the ${budget} s budget)"; return 0; fi
  [ "$limit" -le "$l" ] || limit=$l
  timeout "$limit" "$@" > "$log" 2>&1
  rc=$?
  tail -15 "$log"
  case $rc in
    0) note "$name: PASS ($((SECONDS - t0)) s)" ;;
    77) note "$name: NOT RUN (skipped: $(grep -v '^$' "$log" | tail -1 | cut -c1-200))" ;;
    124) note "$name: FAIL (timed out after $limit s; log $log)"; failed=1 ;;
    *) note "$name: FAIL (exit $rc, $((SECONDS - t0)) s; log $log)"; failed=1 ;;
  esac
}
# ctest_one NAME: the ctest test NAME alone (the set-up tests of its fixtures come with it), verbose;
# exit 77 when ctest skipped it (its SKIP_RETURN_CODE). Run through `bash -c` so that timeout can start it.
ctest_one() {
  local name=$1 out rc
  out=$(cd "$build" && ctest -V -R "^${name}\$" 2>&1); rc=$?
  echo "$out"
  [ "$rc" -eq 0 ] || return "$rc"
  if echo "$out" | grep -Eq "Test +#[0-9]+: ${name} .*Skipped"; then
    # the test's own last line (its reason) last, for the summary
    echo "$out" | grep -E '^[0-9]+: ' | grep -v 'Test timeout' | tail -1 | sed 's/^[0-9]*: //'
    return 77
  fi
  return 0
}
export -f ctest_one
export build
# ctest_part NAME LIMIT: ctest_one under part; NOT RUN when this tree registers no such test.
ctest_part() {
  local name=$1 limit=$2
  if ! (cd "$build" && ctest -N -R "^${name}\$" | grep -q 'Total Tests: [1-9]'); then
    note "$name: NOT RUN (no such test in this tree yet)"; return 0
  fi
  part "$name" "$limit" bash -c 'ctest_one "$1"' ctest_one "$name"
}

part kernels_host 30 "$build/cuda_check_host"
part kernels_device 60 "$build/cuda_check_device"

# Does --device cuda train at all? A refusal is NOT RUN for everything that needs it, never PASS.
work=$(mktemp -d /tmp/mp_gpu_check.XXXXXX)
"$build/meshpoint" data --out "$work" --name t README.md core/config.c layers/llama.c > "$work/data.log" 2>&1
probe_rc=0
probe_limit=$(left); [ "$probe_limit" -le 60 ] || probe_limit=60; [ "$probe_limit" -ge 10 ] || probe_limit=10
timeout "$probe_limit" "$build/meshpoint" train --config tests/configs/cli_tiny.json --train-data "$work/t_train.bin" \
  --steps 2 --run-dir "$work/probe" --device cuda > "$work/probe.log" 2>&1 || probe_rc=$?
tail -5 "$work/probe.log"
trains=1
if [ $probe_rc -eq 0 ]; then
  note "cuda_train: PASS (2 tiny steps on --device cuda)"
elif [ $probe_rc -eq 2 ] && ! grep -q 'error: .*GPU\|error: .*cuda\|error: .*CUDA' "$work/probe.log"; then
  note "cuda_train: FAIL (exit 2 for another reason than the device; log $work/probe.log)"; failed=1
elif [ $probe_rc -eq 2 ]; then
  trains=0
  why=$(grep -o 'error: .*' "$work/probe.log" | head -1 | cut -c1-240)
  note "cuda_train: NOT RUN (--device cuda refused: ${why:-exit 2})"
else
  note "cuda_train: FAIL (exit $probe_rc; log $work/probe.log)"; failed=1
fi
if [ $trains -eq 1 ]; then
  ctest_part device_parity_cuda 90
  ctest_part gpu_e2e 120
  part bench_gpu 150 bench/bench_gpu.sh --bin "$build/meshpoint" --out "$build/bench_gpu"
  grep '^bench_gpu:' "$build/gpu-check.bench_gpu.log" 2>/dev/null || true
else
  for p in device_parity_cuda gpu_e2e bench_gpu; do note "$p: NOT RUN (--device cuda is refused, see cuda_train)"; done
fi

if command -v compute-sanitizer > /dev/null 2>&1; then
  for tool in memcheck racecheck synccheck; do
    part "sanitizer_$tool" 120 compute-sanitizer --tool "$tool" --error-exitcode 1 "$build/cuda_check_device"
  done
else
  note "compute-sanitizer: NOT RUN (not installed)"
fi

echo
echo "== summary ($SECONDS s of the ${budget} s budget; logs $build/gpu-check.*.log, $work)"
for s in "${summary[@]}"; do echo "  $s"; done
exit $failed
