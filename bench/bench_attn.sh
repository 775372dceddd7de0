#!/usr/bin/env bash
# bench/bench_attn.sh [--bin build/bench_attn] [--rounds 5] [--threads 1] — the CPU attention backward
# (flash-style, no T x T matrix) against the T x T backward it replaced, at the attention shapes of
# configs/bench_tiny.json (B 4, T 256, 4 heads / 2 kv heads, head dim 64) and configs/bench_small.json
# (B 4, T 512, 12 / 4, 64), plus a long sequence (B 1, T 2048, 4 / 2, 64). Both kernels run in one
# process on the same inputs, alternating, CPU seconds per backward (bench/bench_attn.c says how); the
# figure is the median of the rounds' flash / T x T ratios (<= 1.00: the flash backward is at least as
# fast). The build users get: the ISA level is the one mp_backend_cpu() dispatches to (printed).
# Exit status: 0 done (whatever the ratio: this reports), 1 a run failed (incl. the kernels disagreeing),
# 2 bad usage.
set -euo pipefail
bin=build/bench_attn rounds=5 threads=1
while [ $# -gt 0 ]; do
    case $1 in
    --bin) bin=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;; --threads) threads=$2; shift 2 ;;
    *) echo "usage: $0 [--bin build/bench_attn] [--rounds N] [--threads N]" >&2; exit 2 ;;
    esac
done
[ -x "$bin" ] || { echo "bench_attn.sh: $bin not found (cmake --build build --target bench_attn)" >&2; exit 2; }
printf '%-6s %-22s %s\n' shape "B T H KV hd" "median flash/TxT CPU time"
for spec in "tiny:4 256 4 2 64:5" "small:4 512 12 4 64:2" "long:1 2048 4 2 64:2"; do
    IFS=: read -r name shape reps <<<"$spec"
    # shellcheck disable=SC2086  # the shape is five words on purpose
    log=$(OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads "$bin" $shape "$rounds" "$reps") ||
        { echo "bench_attn.sh: bench_attn $shape failed" >&2; echo "$log" >&2; exit 1; }
    echo "$log" | sed 's/^/  /' >&2
    printf '%-6s %-22s %s\n' "$name" "$shape" "$(echo "$log" | sed -n 's/^median flash\/TxT CPU time: \([0-9.]*\).*/\1/p')"
done
