#!/bin/sh
# tests/device_cuda.sh MESHPOINT DATA CONFIG WORKDIR — `--device cuda` where it cannot run is a usage
# error (exit 2) that says why, for train, eval and sample, and creates nothing:
#   - a build without CUDA: "meshpoint was built without CUDA";
#   - a CUDA build on a host without a usable GPU (this CI machine): the CUDA module loads and the refusal
#     is CUDA's own reason; `meshpoint --version` says "devices: cpu; cuda built in, no usable GPU: ..."
#     (without a CUDA driver it does not load the module: its reason is then the missing libcuda.so.1).
#     The module missing or unloadable is tests/cuda_module.sh's.
# On a host where `--version` lists GPUs the refusal does not apply: the test is skipped (exit 77);
# scripts/gpu-check.sh is the GPU's test.
set -u
bin=$1; data=$2; config=$3; work=$4
rm -rf "$work"; mkdir -p "$work"
case=device_cuda; . "$(dirname "$0")/lib.sh"
"$bin" --version > "$work/version" || fail "--version exited $?"
devices=$(grep '^devices:' "$work/version") || fail "--version names no devices: $(cat "$work/version")"
case "$devices" in
  *"cuda not built in"*) want="meshpoint was built without CUDA" ;;
  *"no usable GPU"*|*"no GPU on this host"*) want="device cuda: no" ;;
  *"cuda ("*) echo "SKIP: $devices (a GPU is here: scripts/gpu-check.sh tests it)"; exit 77 ;;
  *) fail "unexpected devices line: $devices" ;;
esac
echo "$devices"
# a checkpoint on the CPU for eval and sample to read
"$bin" train --config "$config" --train-data "$data" --steps 1 --ckpt-every 1 --run-dir "$work/cpu" > "$work/cpu.log" 2>&1 ||
  fail "the CPU run failed: $(cat "$work/cpu.log")"
for cmd in train eval sample; do
  run="$work/run_$cmd"
  case $cmd in
    train) set -- train --config "$config" --train-data "$data" --steps 1 --run-dir "$run" --device cuda ;;
    eval) set -- eval --checkpoint "$work/cpu" --data "$data" --device cuda ;;
    sample) set -- sample --checkpoint "$work/cpu" --ids --prompt "1 2" --tokens 1 --device cuda ;;
  esac
  "$bin" "$@" > "$work/$cmd.log" 2>&1
  rc=$?
  [ $rc -eq 2 ] || fail "$cmd --device cuda exited $rc, not 2: $(cat "$work/$cmd.log")"
  grep -q "$want" "$work/$cmd.log" || fail "$cmd: the message does not say '$want': $(cat "$work/$cmd.log")"
  [ ! -e "$run" ] || fail "$cmd --device cuda created $run"
done
echo "train, eval and sample refuse --device cuda with exit 2: $want"
