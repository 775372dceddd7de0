#!/usr/bin/env bash
# bench/bench_isa.sh [--default build/meshpoint] [--native build-native/meshpoint] [--rounds 3] [--steps 10]
#                    [--config configs/bench_tiny.json] [--data FILE] — runtime ISA dispatch:
# the default, portable build (its CPU kernels chosen at start-up) against a -DMP_NATIVE=ON build of the same
# tree, and against itself forced to the old baseline (MP_ISA=v2), in the same run, one thread each
# (OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=1), rounds alternating. Each round's figure is the median tokens/s
# of steps 3.. of a `meshpoint train` (RUN/metrics.jsonl); the summary prints the medians over rounds and
# the ratios default / native (goal: within 3%) and default / v2.
# Build the native side first: ./scripts/build.sh build-native -DMP_NATIVE=ON -DMP_CUDA=OFF
set -euo pipefail
cd "$(dirname "$0")/.."
def=build/meshpoint nat=build-native/meshpoint rounds=3 steps=10 config=configs/bench_tiny.json data=""
while [ $# -gt 0 ]; do
  case $1 in
    --default) def=$2; shift 2 ;; --native) nat=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;; --config) config=$2; shift 2 ;; --data) data=$2; shift 2 ;;
    *) echo "usage: see the top of $0" >&2; exit 2 ;;
  esac
done
for b in "$def" "$nat"; do [ -x "$b" ] || { echo "bench_isa: no binary $b" >&2; exit 2; }; done
work=$(mktemp -d /tmp/mp_bench_isa.XXXXXX)
if [ -z "$data" ]; then
  MP_BIN=$def ./scripts/make_demo_data.sh "$work/data" > /dev/null
  data=$work/data/fortunes_train.bin
fi
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
# one_round BIN [ENV...]: the median tokens/s of steps 3.. of one short run
one_round() {
  local bin=$1; shift
  rm -rf "$work/run"
  env OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 "$@" "$bin" train --config "$config" --train-data "$data" \
      --steps "$steps" --run-dir "$work/run" --log-every 0 > "$work/log" 2>&1 || { cat "$work/log" >&2; exit 1; }
  sed -nE 's/.*"step": ([0-9]+),.*"tokens_per_s": ([0-9.]+).*/\1 \2/p' "$work/run/metrics.jsonl" |
      awk '$1 >= 3 {print $2}' | median
}
echo "bench_isa: $config, $steps steps, $rounds rounds, 1 thread; $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2);" \
     "default kernels: $("$def" --version | sed -n 's/^cpu kernels: //p'); $(date -u +%FT%TZ)"
d=() n=() v=()
for r in $(seq "$rounds"); do
  d+=("$(one_round "$def")"); n+=("$(one_round "$nat")"); v+=("$(one_round "$def" MP_ISA=v2)")
  echo "round $r: default ${d[-1]} tok/s, native ${n[-1]}, default with MP_ISA=v2 ${v[-1]}"
done
md=$(printf '%s\n' "${d[@]}" | median) mn=$(printf '%s\n' "${n[@]}" | median) mv=$(printf '%s\n' "${v[@]}" | median)
awk -v d="$md" -v n="$mn" -v v="$mv" 'BEGIN { printf "bench_isa: default %.1f tok/s, native %.1f, v2 %.1f; default/native %.3f (goal >= 0.97), default/v2 %.2fx\n", d, n, v, d / n, d / v }'
rm -rf "$work"
