#!/usr/bin/env bash
# bench/bench_train.sh — training throughput of `meshpoint train` (CPU, one process, 1x1 mesh) against
# a PyTorch eager peer (bench/torch_train.py: the same HF Llama in float32, AdamW, clipping) on the same
# machine in the same run, for configs/bench_tiny.json and configs/bench_small.json.
#
#   bench/bench_train.sh [--bin build/meshpoint] [--threads N] [--only tiny|small] [--out DIR]
#                        [--tiny-steps 12] [--small-steps 4] [--data FILE --data-format u16|u32|llmc]
#                        [--repeat R]
#
# Both sides: the same batch (4) and sequence length (256 tiny, 512 small), the same thread count N
# (default nproc: OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=N for meshpoint, torch.set_num_threads(N)), the
# same tokens (random ids in [0, 32000) written once as a raw u16 file, unless --data is given). The first
# step of each run is warm-up (tiny: 2 steps) and is not timed. meshpoint's per-step tokens/s come from
# RUN/metrics.jsonl (the wall time of a whole step: batch, forward, backward, clip, AdamW); torch's from
# the same span. For each side the script prints the throughput over the timed steps
# (tokens / total time) and the median step's, and the ratio meshpoint / torch of both. The median is
# the figure to quote on a shared or noisy machine. --repeat R runs each pair R times, alternating
# meshpoint and torch, and keeps each side's best run (by median step): load from other processes only
# ever slows a run down, so the best of R is the least disturbed. Exit status: 0 done, 1 a run failed,
# 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PY="${PY:-/usr/bin/python3}"
bin="${MP_BIN:-}"
threads="$(nproc)"
only=""
out=""
tiny_steps=12
small_steps=4
data=""
fmt="u16"
repeat=1

usage() { sed -n '2,21p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tiny-steps) tiny_steps="$2"; shift 2 ;;
    --small-steps) small_steps="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --data-format) fmt="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_train.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  for b in "$root/build/meshpoint" "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_train.sh: no meshpoint binary (build it, or pass --bin)" >&2; exit 2; }
case "$only" in ""|tiny|small) ;; *) echo "bench_train.sh: --only tiny|small" >&2; exit 2 ;; esac
out="${out:-$(mktemp -d /tmp/mp_bench_train.XXXXXX)}"
mkdir -p "$out"

if [ -z "$data" ]; then
  data="$out/random_u16.bin"
  fmt="u16"
  # 64 batches of the larger config: enough that no step of either run rereads a batch.
  "$PY" -c "import numpy as np; np.random.default_rng(1).integers(0, 32000, size=64*4*512+1, dtype=np.uint16).tofile('$data')"
fi

echo "meshpoint training benchmark: $bin, $threads threads, data $data ($fmt), logs in $out"
echo "host: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "torch: $("$PY" -c 'import torch; print(torch.__version__)')"

# summarise FILE WARMUP TOKENS_PER_STEP: prints "TOTAL MEDIAN" tok/s over the steps after warm-up.
summarise_meshpoint() {
  "$PY" - "$1" "$2" "$3" <<'EOF'
import json, sys, statistics
path, warm, tps = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
rates = [json.loads(l)["tokens_per_s"] for l in open(path) if '"tokens_per_s"' in l][warm:]
if not rates:
    sys.exit("no timed steps in " + path)
times = [tps / r for r in rates]
print(f"{tps * len(times) / sum(times):.1f} {tps / statistics.median(times):.1f}")
EOF
}

declare -a rows=()
# better A_TOTAL A_MED B_TOTAL B_MED: prints the pair with the higher median.
better() { awk -v at="$1" -v am="$2" -v bt="$3" -v bm="$4" 'BEGIN { if (bm > am) print bt, bm; else print at, am }'; }

run_one() {   # NAME CONFIG STEPS WARMUP BATCH SEQ
  local name="$1" cfg="$2" steps="$3" warm="$4" B="$5" T="$6"
  local tok=$((B * T))
  local mp_total=0 mp_med=0 th_total=0 th_med=0 t m r
  echo
  echo "== $name: $cfg, batch $B x seq $T, $steps steps ($warm warm-up), $repeat round(s)"
  for ((r = 1; r <= repeat; r++)); do
    local log="$out/meshpoint_${name}_$r.log" run="$out/run_${name}_$r"
    rm -rf "$run"
    local t0=$SECONDS
    if ! OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads" "$bin" train --config "$cfg" --steps "$steps" \
         --batch "$B" --seq-len "$T" --lr 3e-4 --warmup 0 --seed 1337 --train-data "$data" --data-format "$fmt" \
         --run-dir "$run" 2> "$log"; then
      echo "meshpoint train failed; see $log:" >&2; tail -5 "$log" >&2; exit 1
    fi
    read -r t m < <(summarise_meshpoint "$run/metrics.jsonl" "$warm" "$tok")
    echo "round $r meshpoint: $t tok/s (median step $m tok/s), $((SECONDS - t0)) s"
    read -r mp_total mp_med < <(better "$mp_total" "$mp_med" "$t" "$m")
    t0=$SECONDS
    log="$out/torch_${name}_$r.log"
    local res
    if ! res="$("$PY" "$here/torch_train.py" --config "$cfg" --steps "$steps" --warmup "$warm" --batch "$B" \
         --seq-len "$T" --threads "$threads" --lr 3e-4 --seed 1337 --train-data "$data" --data-format "$fmt" \
         2> "$log" | tail -1)"; then
      echo "torch_train.py failed; see $log:" >&2; tail -5 "$log" >&2; exit 1
    fi
    t="$(sed -n 's/.* tok_per_s=\([0-9.]*\).*/\1/p' <<< "$res")"
    m="$(sed -n 's/.*tok_per_s_median=\([0-9.]*\).*/\1/p' <<< "$res")"
    [ -n "$t" ] && [ -n "$m" ] || { echo "torch_train.py printed no result; see $log" >&2; exit 1; }
    echo "round $r torch:     $t tok/s (median step $m tok/s), $((SECONDS - t0)) s"
    read -r th_total th_med < <(better "$th_total" "$th_med" "$t" "$m")
  done
  local r_total r_med
  r_total="$(awk -v a="$mp_total" -v b="$th_total" 'BEGIN { printf "%.2f", a / b }')"
  r_med="$(awk -v a="$mp_med" -v b="$th_med" 'BEGIN { printf "%.2f", a / b }')"
  echo "$name: meshpoint $mp_total tok/s, torch $th_total tok/s, ratio meshpoint/torch ${r_total}x (median step ${r_med}x)"
  rows+=("$(printf '%-6s %5d %4d %6d %12s %12s %8s %12s %12s %8s' "$name" "$B" "$T" "$((steps - warm))" \
            "$mp_total" "$th_total" "${r_total}x" "$mp_med" "$th_med" "${r_med}x")")
}

[ "$only" = "small" ] || run_one tiny "$root/configs/bench_tiny.json" "$tiny_steps" 2 4 256
[ "$only" = "tiny" ] || run_one small "$root/configs/bench_small.json" "$small_steps" 1 4 512

echo
echo "summary ($threads threads, best of $repeat; tok/s over the timed steps, then of the median step):"
printf '%-6s %5s %4s %6s %12s %12s %8s %12s %12s %8s\n' config batch seq steps meshpoint torch ratio \
  mp_median th_median ratio
for r in "${rows[@]}"; do echo "$r"; done
