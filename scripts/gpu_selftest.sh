# scripts/gpu_selftest.sh — sourced by scripts/gpu-check.sh --selftest (which defines part, note, bin, out,
# data, tiny, mode, root): mp_gpu_selftest runs the CPU part of the GPU check, on the machine that built
# the bundle, every piece required:
#   kernels_host   tests/cuda on the host (the kernels' helpers, the attention tiling vs float64)
#   cuda_module    `train --device cuda` loads the CUDA module beside meshpoint (core/cuda_module.h) with the
#                  CUDA libraries found: it trains (a GPU here) or exits 2 with CUDA's own reason ("device
#                  cuda: no ..."), never "cannot load the CUDA module"
#   mma_probe      the device probe loads, checks its fragment table against the PTX ISA and, with no GPU,
#                  exits 77 naming "no GPU" (with one: 0, everything agreeing)
#   cpu_train      3 steps on --device cpu with a zstd-compressed checkpoint, `ckpt verify`, `eval`: HDF5,
#                  zstd, xxHash, cJSON, OpenBLAS, OpenMP and an Open MPI singleton (no mpirun)
#   mpiexec_tp2    tp 2 on the CPU under `mpiexec -np 2` (the bundle's Open MPI: the launcher that the
#                  multi-GPU part of gpu_e2e uses; a single process never initialises MPI, cli/runtime.c)
#   load_audit     (bundle only) cpu_train and mpiexec_tp2 again under LD_DEBUG=libs (Open MPI's dlopened
#                  components included): every shared object initialised must
#                  come from the bundle, from the CUDA directories gpu_env.sh found, or be glibc's or the
#                  driver's; anything else (a library of this machine the bundle lacks) is named and fails
#   parity_cpu_bf16_hd64  the parity program on cpu-bf16 with the head-dim-64 config at T = 112
#   parity_cpu_bf16_window  the same with a sliding window of 40 keys in every layer (--window 40)
#   parity_cpu_bf16_family128_window  the same with head dim 128, biases and q/k norms (--family 128)
#   bench_dry      bench/bench_gpu.sh as a dry run on cpu-bf16 (the script, its roofline table, its floor
#                  logic with --min-mfu 0), from wherever the check runs (the bundle's copy inside one)
#   e2e_dry        tests/gpu_e2e.sh as a dry run on cpu-bf16 pretending 2 GPUs: 1x1, dp 2 and tp 2 under
#                  mpiexec, the cross-device checkpoint steps (the script and its python3, not a GPU)
# It proves that the bundle loads and runs without the project's packages, nothing about a GPU.

# mp_gpu_audit_loads DEBUG_PREFIX: 0 when every "calling init:" object in the LD_DEBUG files is allowed.
mp_gpu_audit_loads() {
  local f path ok bad=0 n=0 d
  for path in $(cat "$1".* 2>/dev/null | sed -n 's/.*calling init: //p' | sort -u); do
    n=$((n + 1)); ok=0
    case "$path" in "$root"/*) ok=1 ;; esac
    case "$(basename "$path")" in
      libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*|libutil.so.*|libanl.so.*|\
      libmvec.so.*|libnss_*|libcuda.so*|libnvidia-*) ok=1 ;;
      libstdc++.so.*|libgcc_s.so.*) ok=1 ;;   # the machine's own, preferred (gpu_env.sh)
    esac
    for d in ${MP_GPU_CUDA_DIRS//:/ }; do case "$path" in "$d"/*) ok=1 ;; esac; done
    if [ $ok = 0 ]; then echo "load_audit: $path is not the bundle's, CUDA's or glibc's"; bad=1; fi
  done
  [ $n -gt 10 ] || { echo "load_audit: only $n objects seen in $1.*: LD_DEBUG did not work"; return 1; }
  echo "load_audit: $n shared objects initialised, all from the bundle, CUDA ($MP_GPU_CUDA_DIRS) or glibc"
  return $bad
}
export -f mp_gpu_audit_loads

# mp_gpu_cpu_train RUN: 3 CPU steps of the tiny config with a compressed checkpoint, verified and evaluated.
mp_gpu_cpu_train() {
  local run=$1
  "$bin/meshpoint" train --config "$tiny" --train-data "$data" --steps 3 --ckpt-every 3 --compress zstd:3 \
    --log-every 1 --device cpu --run-dir "$run" || return 1
  "$bin/meshpoint" ckpt verify "$run/checkpoints/step_00000003" || return 1
  "$bin/meshpoint" eval --checkpoint "$run/checkpoints/step_00000003" --data "$data" --batches 2 --device cpu
}
# mp_gpu_tp2 RUN: 2 CPU steps of the tiny config on tp 2 under mpiexec.
mp_gpu_tp2() {
  mpiexec --allow-run-as-root --oversubscribe -np 2 "$bin/meshpoint" train --config "$tiny" --train-data "$data" \
    --steps 2 --tp 2 --log-every 1 --device cpu --run-dir "$1"
}
# mp_gpu_cuda_module RUN: 0 when `--device cuda` reaches CUDA through the module (trains, or CUDA's refusal).
mp_gpu_cuda_module() {
  local rc
  "$bin/meshpoint" train --config "$tiny" --train-data "$data" --steps 1 --device cuda --run-dir "$1" > "$1.out" 2>&1
  rc=$?
  cat "$1.out"
  [ $rc -eq 0 ] && return 0
  [ $rc -eq 2 ] && grep -q 'device cuda: no' "$1.out" && ! grep -q 'cannot load the CUDA module' "$1.out"
}
export -f mp_gpu_cpu_train mp_gpu_tp2 mp_gpu_cuda_module
export bin tiny data root

mp_gpu_selftest() {
  part kernels_host 60 1 "$bin/cuda_check_host"
  part cuda_module 60 1 bash -c 'mp_gpu_cuda_module "$1"' _ "$out/cuda_module"
  part mma_probe 30 1 bash -c 'o=$("$1" 2>&1); rc=$?; echo "$o"; [ $rc = 0 ] || { [ $rc = 77 ] && [[ $o == *"no GPU"* ]]; }' _ "$bin/cuda_mma_probe"
  part cpu_train 60 1 bash -c 'mp_gpu_cpu_train "$1"' _ "$out/cpu_train"
  part mpiexec_tp2 90 1 bash -c 'mp_gpu_tp2 "$1"' _ "$out/tp2"
  if [ "$mode" = bundle ]; then
    part load_audit 120 1 bash -c 'export LD_DEBUG=libs LD_DEBUG_OUTPUT="$1/lddebug"
      { mp_gpu_cpu_train "$1/audit_run" && mp_gpu_tp2 "$1/audit_tp2"; } > "$1/audit_run.log" 2>&1 ||
      { tail -20 "$1/audit_run.log"; exit 1; }; unset LD_DEBUG; mp_gpu_audit_loads "$1/lddebug"' _ "$out"
  fi
  part parity_cpu_bf16_hd64 120 1 "$bin/test_device_parity" --seq-len 112 cpu-bf16 tests/configs/parity_hd64.json
  part parity_cpu_bf16_window 120 1 "$bin/test_device_parity" --seq-len 112 --window 40 cpu-bf16 tests/configs/parity_hd64.json
  part parity_cpu_bf16_family128_window 120 1 "$bin/test_device_parity" --seq-len 112 --window 40 --family 128 \
    cpu-bf16 tests/configs/parity_hd64.json
  part bench_dry 120 1 env MP_BENCH_GPU_DEVICE=cpu-bf16 bench/bench_gpu.sh --bin "$bin/meshpoint" --config "$tiny" \
    --batch 2 --seq-len 16 --steps 3 --warmup 1 --min-mfu 0 --out "$out/bench_dry"
  part e2e_dry 180 1 env MP_GPU_E2E_DEVICE=cpu-bf16 MP_GPU_E2E_GPUS=2 tests/gpu_e2e.sh "$bin/meshpoint" "$data" "$tiny" \
    "$out/e2e_dry"
}
