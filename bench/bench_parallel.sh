#!/usr/bin/env bash
# bench/bench_parallel.sh — training throughput and the share of step time spent in collectives on the
# meshes 1x1, tp2 and dp2, for the "small" config (hidden 768, 12 layers, seq 512, batch 4, vocab 32000),
# with the bytes each collective group moved per step. On a 2-core CPU machine the figures are a baseline
# (2 ranks share 2 cores: each rank gets one OpenBLAS thread, the 1x1 run gets both); they become
# meaningful on GPUs. Usage: bench/bench_parallel.sh [STEPS] [CONFIG]. Results: docs/BENCH_PARALLEL.md.
set -euo pipefail
cd "$(dirname "$0")/.."
steps=${1:-4}
config=${2:-configs/bench_small.json}
bin=${MP_BIN:-build/meshpoint}
[ -x "$bin" ] || ./scripts/build.sh build >/dev/null
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
vocab=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$config")
/usr/bin/python3 - "$work/tokens.bin" "$vocab" <<'PY'
import sys, numpy as np
rng = np.random.default_rng(0)
tok = rng.integers(0, int(sys.argv[2]), size=4 * 512 * 64 + 1, dtype=np.uint16)
hdr = np.zeros(256, dtype=np.int32); hdr[0] = 20240520; hdr[1] = 1; hdr[2] = tok.size
with open(sys.argv[1], "wb") as f: f.write(hdr.tobytes()); f.write(tok.tobytes())
PY
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1
cores=$(nproc)
run() {  # name np tp dp threads
    local log="$work/$1.log"
    local launch=()
    [ "$2" -gt 1 ] && launch=(mpirun --oversubscribe -np "$2")
    OPENBLAS_NUM_THREADS=$5 OMP_NUM_THREADS=$5 "${launch[@]}" "$bin" train --config "$config" \
        --train-data "$work/tokens.bin" --steps "$steps" --warmup 1 --tp "$3" --dp "$4" --log-every 1 \
        --run-dir "$work/$1" 2>"$log" || { cat "$log"; exit 1; }
    # tokens/s over the steps after the first (warm-up), from the metrics file
    local tps
    tps=$(/usr/bin/python3 -c "
import json,sys
r=[json.loads(l) for l in open(sys.argv[1]) if '\"loss\"' in l][1:]
print('%.0f' % (sum(x['tokens_per_s'] for x in r)/len(r)))" "$work/$1/metrics.jsonl")
    local comm
    comm=$(grep -o 'comm: .*' "$log" || echo "comm: none (one process)")
    printf '%-6s %8s tok/s   %s\n' "$1" "$tps" "$comm"
}
echo "config $config, $steps steps, $cores cores"
run 1x1 1 1 1 "$cores"
per=$(( cores / 2 > 0 ? cores / 2 : 1 ))
run tp2 2 2 1 "$per"
run dp2 2 1 2 "$per"
