#!/usr/bin/env bash
# scripts/gpu-check.sh [--selftest] [BUILD_DIR] — the GPU's check, one command on a lent GPU machine.
# It runs from a bundle (scripts/gpu_bundle.sh; this script inside it finds BUNDLE beside
# scripts/), which needs nothing on the machine but CUDA's libraries, or from a source tree, where it first
# builds BUILD_DIR (default build-gpu) with -DMP_CUDA=ON -DMP_WERROR=ON. docs/CUDA.md has the one call.
#
# Parts, each under `timeout` with its limit in seconds (a hang guard, 2-10x what the H200 took at 7416d7b),
# the required ones (R) first, then the optional ones with the time left:
#   R kernels_host 10     tests/cuda: the kernels' host side and the attention tiling on the host
#   R kernels_device 20   every launcher against host references (tolerances derived from the rounding,
#                         check_kernels_host.cu), reductions run twice, bitwise (attention on the default
#                         tensor-core kernels, forward + backward repeated bitwise)
#   R cuda_train 10       a 2-step tiny `train --device cuda`
#   R device_parity 10    CPU-vs-GPU logits, loss, gradients, AdamW steps (tests/test_device_parity.c) on
#                         the two small configs (T 16)
#   R device_parity_hd64 10  the same on tests/configs/parity_hd64.json: head dim 64, T = 112 (several key
#                         tiles: the tensor-core attention inside training)
#   R device_parity_window 10  the same with a sliding window of 40 keys in every layer (--window 40 < T)
#   R device_parity_family128_window 10  the same with head dim 128, q/k/v biases and q/k norms (--family 128)
#   R eval_sample 20      tests/eval_sample_device.sh: `eval` and greedy `sample` (KV cache on the device)
#                         on --device cuda against the CPU's (loss within 2e-3, the same ids)
#   R gpu_e2e 75          tests/gpu_e2e.sh: bitwise resume, GPU->CPU and CPU->GPU checkpoints; tp 2, dp 2 and
#                         tp 2 x dp 2 under the bundle's mpiexec: over NCCL where each rank has a GPU, as
#                         processes sharing a GPU (the staged comm) otherwise; --recompute full bitwise none
#                         (1x1 took 4-5 s on the H200; the meshes and the recompute runs are estimated at
#                         30-60 s, unmeasured)
#   R bench_gpu 60        bench/bench_gpu.sh on the 1B shape: fails below its MFU floor or on a non-finite loss
#     mma_probe 15        tests/cuda/mma_probe.cu: the mma.sync fragment layouts, the bf16 pair
#                         store and the tensor-core attention's tile helpers on the device against the host
#                         replay, element by element; its first mismatches name lane, register and half
#     kernels_device_simt 30  kernels_device with MP_CUDA_ATTN=simt: the CUDA-core attention kernels (the
#                         fallback for head dims other than 64 and 128)
#     gemm_probe 20       bench/gemm_probe.cu: the step's GEMM keys alone, against the roofline and the
#                         heuristic's other algorithms
#     membound_probe 15   bench/membound_probe.cu: the RMSNorm kernels alone at the 1B shape against a device
#                         copy of the same bytes and against the previous designs
#     sanitizer_* 30/150/30  compute-sanitizer (found under the CUDA directory) memcheck, racecheck, synccheck
#                         on kernels_device, with the time that is left; a sanitizer that refuses this
#                         device or runtime (its own "not supported" line) is NOT RUN (refused), quoted
# The required limits sum to 235 s, inside the budget (240 s) with the start-up; together they took ~45 s
# on the H200 before gpu_e2e ran the meshes of processes and eval_sample existed. The optional ones (290 s of limits; racecheck alone took 27-94 s) run only with the time
# left: a limit cut by the budget is NOT RUN (out of time), never FAIL, and none starts once it is spent, so the whole check with its start-up stays under 300 s and a
# second run fits in the 15 minutes a GPU machine is lent for. Every result line and the summary name the
# card (nvidia-smi, else meshpoint's device line): an H100 figure is never read as an H200 one.
# Verdicts: PASS; FAIL (it ran and failed, or hit its OWN time limit: a hang); NOT RUN (out of time: the
# budget cut it short or left it no time; or skipped: its reason; or refused: the tool's own words). NOT
# RUN of a required part fails the whole check. With one GPU the summary says that NCCL and tp/dp on the
# GPU were not covered.
# Budget: MP_GPU_CHECK_BUDGET seconds for the parts and their start-up (default 240; a source tree's build
# runs before it, under its own limit MP_GPU_CHECK_BUILD_LIMIT, default 1800; --selftest: 450).
# Logs: MP_GPU_CHECK_OUT (default a new /tmp/mp_gpu_check.XXXXXX), one file per part.
#
# --selftest: the CPU part, for the machine that built the bundle (tests/gpu_bundle.sh runs it with the
# project's packages hidden): the programs load (inside a bundle: every library loaded comes from the
# bundle, the CUDA directories found, or glibc), the CUDA module loads (`--device cuda` gets as far as
# CUDA's own answer), kernels_host, a CPU training run with a compressed
# checkpoint verified and evaluated (HDF5, zstd, xxHash, OpenBLAS, an MPI singleton), tp 2 under the
# bundled mpiexec, and the parity program on cpu-bf16 with the head-dim-64 config. No GPU needed.
#
# Exit status: 0 every required part passed; 1 a part failed or did not run, a prerequisite is missing
# (named), or the build failed; 2 no GPU here (not with --selftest).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd -P)
cd "$root" || exit 1
selftest=0
if [ "${1:-}" = --selftest ]; then selftest=1; shift; fi
budget=${MP_GPU_CHECK_BUDGET:-$([ $selftest = 1 ] && echo 450 || echo 240)}
out=${MP_GPU_CHECK_OUT:-$(mktemp -d /tmp/mp_gpu_check.XXXXXX)}
mkdir -p "$out" || exit 1
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
SECONDS=0
. "$root/scripts/gpu_verdict.sh"
die() { echo "gpu-check: $*" >&2; exit 1; }
. "$root/scripts/gpu_env.sh"

echo "== gpu-check$([ $selftest = 1 ] && echo ' --selftest') $(date -u +%Y-%m-%dT%H:%M:%SZ), budget ${budget} s, logs $out"
# ---- prerequisites: all named at once ----
missing=()
for c in timeout awk sed grep python3; do command -v "$c" > /dev/null 2>&1 || missing+=("the command $c"); done
if [ -f "$root/BUNDLE" ]; then
  mode=bundle bin="$root/bin" corpus=("$root/data/CLI.md" "$root/data/config.c" "$root/data/llama.c")
  sed -n '1,5p' "$root/MANIFEST" 2>/dev/null
else
  mode=build build=${1:-build-gpu}
  case "$build" in /*) ;; *) build="$root/$build" ;; esac
  bin=$build corpus=("$root/docs/CLI.md" "$root/core/config.c" "$root/layers/llama.c")
  command -v cmake > /dev/null 2>&1 || missing+=("cmake (or run the bundle: scripts/gpu_bundle.sh)")
  command -v nvcc > /dev/null 2>&1 || [ -x /usr/local/cuda/bin/nvcc ] || missing+=("nvcc")
fi
for f in tests/gpu_e2e.sh tests/eval_sample_device.sh tests/lib.sh bench/bench_gpu.sh bench/gpu_roofline.py configs/llama_1b.json tests/configs/cli_tiny.json \
         tests/configs/torch_gqa_tied.json tests/configs/parity_hd64.json "${corpus[@]}"; do
  [ -e "$f" ] || missing+=("$f")
done
[ ${#missing[@]} -eq 0 ] || die "missing prerequisites: $(IFS=','; echo "${missing[*]}" | sed 's/,/, /g')"
if [ $mode = bundle ]; then
  mp_gpu_env "$root" || die "missing prerequisites (above): the bundle cannot run here"
  printf '%s' "$MP_GPU_ENV_LOG"
else
  mp_gpu_find_sanitizer
  timeout "${MP_GPU_CHECK_BUILD_LIMIT:-1800}" ./scripts/build.sh "$build" -DMP_CUDA=ON -DMP_WERROR=ON > "$out/build.log" 2>&1 ||
    { tail -30 "$out/build.log"; die "the CUDA build failed or ran out of time (log $out/build.log)"; }
  note "build: CUDA variant, warnings as errors: PASS ($SECONDS s, before the budget)"
  SECONDS=0   # the budget is the parts'; the build is the source tree's own cost
fi
for p in meshpoint cuda_check_host cuda_check_device cuda_mma_probe test_device_parity; do
  [ -x "$bin/$p" ] || missing+=("$bin/$p")
done
[ -f "$bin/libmeshpoint-cuda.so" ] || missing+=("$bin/libmeshpoint-cuda.so (the CUDA module meshpoint loads)")
[ ${#missing[@]} -eq 0 ] || die "missing prerequisites: ${missing[*]}"
if command -v nvidia-smi > /dev/null 2>&1; then
  timeout 30 nvidia-smi -L 2>&1
  card=$(timeout 30 nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr -s ' ' ' ' | sed 's/ *$//')
else echo "(nvidia-smi: not installed)"; fi
timeout 60 "$bin/meshpoint" --version > "$out/version.log" 2>&1 ||
  { cat "$out/version.log"; die "meshpoint --version did not run (exit $?): its libraries? (log $out/version.log)"; }
cat "$out/version.log"
devices=$(grep '^devices:' "$out/version.log")
ngpu=$(echo "$devices" | sed -n 's/.*cuda (\([0-9][0-9]*\) GPU.*/\1/p')
# without nvidia-smi the card is unnamed here; kernels_device's log names it (CUDA's device name)
[ -n "${card:-}" ] || card="GPU not named: no nvidia-smi; see kernels_device.log"
[ $selftest = 1 ] && card=""   # the selftest runs on the CPU: no card to name
if [ -z "$ngpu" ] && [ $selftest = 0 ]; then
  echo "gpu-check: no GPU: ${devices:-meshpoint --version printed no devices line}; nothing checked" >&2
  exit 2
fi

"$bin/meshpoint" data --out "$out/data" --name t "${corpus[@]}" > "$out/data.log" 2>&1 || die "meshpoint data failed: $(tail -5 "$out/data.log")"
data="$out/data/t_train.bin"
tiny=tests/configs/cli_tiny.json

if [ $selftest = 1 ]; then
  . "$root/scripts/gpu_selftest.sh"
  mp_gpu_selftest
  finish
fi

part kernels_host 10 1 "$bin/cuda_check_host"
part kernels_device 20 1 "$bin/cuda_check_device"
part cuda_train 10 1 "$bin/meshpoint" train --config "$tiny" --train-data "$data" --steps 2 --run-dir "$out/probe" --device cuda
part device_parity 10 1 "$bin/test_device_parity" cuda tests/configs/cli_tiny.json tests/configs/torch_gqa_tied.json
part device_parity_hd64 10 1 "$bin/test_device_parity" --seq-len 112 cuda tests/configs/parity_hd64.json
part device_parity_window 10 1 "$bin/test_device_parity" --seq-len 112 --window 40 cuda tests/configs/parity_hd64.json
part device_parity_family128_window 10 1 "$bin/test_device_parity" --seq-len 112 --window 40 --family 128 cuda \
  tests/configs/parity_hd64.json
part eval_sample 20 1 tests/eval_sample_device.sh "$bin/meshpoint" "$data" "$tiny" "$out/eval_sample" cuda
if [ "$ngpu" -ge 2 ] && ! command -v mpiexec > /dev/null 2>&1; then
  note "gpu_e2e: FAIL ($ngpu GPUs but no mpiexec: the tp/dp part cannot run)"; failed=1
else
  part gpu_e2e 75 1 tests/gpu_e2e.sh "$bin/meshpoint" "$data" "$tiny" "$out/gpu_e2e"
fi
part bench_gpu 60 1 bench/bench_gpu.sh --bin "$bin/meshpoint" --out "$out/bench_gpu"
# optional, with the time left (part: NOT RUN, out of time, once the budget is spent)
part mma_probe 15 0 "$bin/cuda_mma_probe"
part kernels_device_simt 30 0 env MP_CUDA_ATTN=simt "$bin/cuda_check_device"
part gemm_probe 20 0 "$bin/gemm_probe"   # the step's GEMM keys alone, against the step's profile
part membound_probe 15 0 "$bin/membound_probe"   # the RMSNorm kernels alone, against a copy of their bytes
# the summary line and the whole per-kernel table (part shows only the log's tail)
grep '^bench_gpu: ' "$out/bench_gpu.log" 2>/dev/null || true
sed -n '/^per-op device time/,$p' "$out/bench_gpu.log" 2>/dev/null || true
cat "$out/gemm_probe.log" "$out/membound_probe.log" 2>/dev/null || true
if [ -n "${MP_GPU_SANITIZER:-}" ]; then
  echo "compute-sanitizer: $MP_GPU_SANITIZER"
  for tool in memcheck:30 racecheck:150 synccheck:30; do
    refused_re=$mp_sanitizer_refused_re part "sanitizer_${tool%:*}" "${tool#*:}" 0 \
      "$MP_GPU_SANITIZER" --tool "${tool%:*}" --error-exitcode 1 "$bin/cuda_check_device"
  done
else
  note "sanitizer: NOT RUN (no compute-sanitizer under \$CUDA_HOME, /usr/local/cuda* or on PATH)"
fi
if [ "$ngpu" -ge 2 ]; then
  note "coverage: $ngpu GPUs: gpu_e2e ran tp 2 and dp 2$([ "$ngpu" -ge 4 ] && echo ' and tp 2 x dp 2') over NCCL"
else
  note "coverage: one GPU: NCCL was NOT covered; gpu_e2e ran tp 2, dp 2 and tp 2 x dp 2 as processes sharing it (staged comm)"
fi
finish
