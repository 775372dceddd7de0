#!/usr/bin/env bash
# tests/bench_gpu_floor.sh MESHPOINT CONFIG WORK — bench/bench_gpu.sh's floor, on a dry run on the CPU
# (MP_BENCH_GPU_DEVICE=cpu-bf16: no GPU figure): with --min-mfu 90 the run must exit 1 saying the MFU is
# below the floor; with --min-mfu 0 it passes and prints the summary line and the roofline's projected MFU.
set -u
bin=$1; config=$2; work=$3
case=bench_gpu_floor; . "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
bench="$(dirname "$0")/../bench/bench_gpu.sh"
args=(--bin "$bin" --config "$config" --batch 2 --seq-len 16 --steps 3 --warmup 1)
MP_BENCH_GPU_DEVICE=cpu-bf16 expect 1 'FAIL: MFU [0-9.]+% is below the floor of 90%' "$work/high.log" \
  "$bench" "${args[@]}" --min-mfu 90 --out "$work/high"
MP_BENCH_GPU_DEVICE=cpu-bf16 expect 0 'roofline: step .* projected MFU' "$work/zero.log" \
  "$bench" "${args[@]}" --min-mfu 0 --out "$work/zero"
grep -q '^bench_gpu: ' "$work/zero.log" || fail "no summary line: $(cat "$work/zero.log")"
expect 2 'min-mfu: a percentage' "$work/badarg.log" "$bench" "${args[@]}" --min-mfu lots
echo "bench_gpu_floor: below the floor exits 1, above it 0, a bad --min-mfu 2"
