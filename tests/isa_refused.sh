#!/bin/sh
# tests/isa_refused.sh MESHPOINT CONFIG DATA WORKDIR — MP_ISA that the CPU cannot run (a v2 CPU pretended
# with the fault cpu_isa_max) or that names no level is refused with exit 2 naming it, before any work;
# --version says which level runs. Skipped (77) in a one-level build (MP_NATIVE, custom MP_ARCH).
bin=$1 config=$2 data=$3 work=$4 case=isa_refused
. "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work"
"$bin" --version | grep -q '^cpu kernels: v[234]$' || { echo "skipped: a one-level build"; exit 77; }
expect 2 "^meshpoint train: error: MP_ISA=v3: this CPU does not run x86-64-v3 \(AVX2, FMA\) \(the best it runs is v2\)$" \
    "$work/log" env MP_FAULT=cpu_isa_max:v2 MP_ISA=v3 "$bin" train --config "$config" --train-data "$data" --run-dir "$work/run"
[ ! -e "$work/run" ] || fail "a refused run made its run directory"
expect 2 "^meshpoint eval: error: MP_ISA=avx9: not an ISA level of this build \(v2, v3, v4\)$" \
    "$work/log" env MP_ISA=avx9 "$bin" eval --config "$config" --data "$data"
expect 0 "^cpu kernels: v2 \(MP_ISA\)$" "$work/log" env MP_FAULT=cpu_isa_max:v2 MP_ISA=v2 "$bin" --version
expect 0 "^cpu kernels: v2$" "$work/log" env MP_FAULT=cpu_isa_max:v2 "$bin" --version
echo "PASS ($case)"
