#!/usr/bin/env bash
# bench/bench_sample.sh [--bin build/meshpoint] [--rounds 3] [--threads N] [--tokens 128] [--out DIR] —
# `meshpoint sample` (KV cache) against transformers' `generate`, in the same run, on the same model:
#
#   the model  a randomly initialised LlamaForCausalLM with SmolLM2-135M's published config
#              (tests/data/hf_configs/smollm2-135m.json: 134.5M parameters, 30 layers, GQA 9/3 heads, tied
#              embeddings, vocab 49152), made by transformers (bench/sample_peer.py make, seed 1) and saved
#              with save_pretrained in float32, then read by `meshpoint import`
#   the task   greedy continuation of a 16-token prompt by --tokens new tokens (end-of-sequence ignored on
#              both sides, so both make exactly --tokens tokens), float32, --threads threads each
#   meshpoint  `meshpoint sample --ids --temperature 0 --ignore-eos`, OMP_NUM_THREADS=threads,
#              OPENBLAS_NUM_THREADS=1; its time is the generation as the command reports it (prefill
#              included, checkpoint load excluded), its peak RSS the whole process's (/usr/bin/time -v)
#   peer       transformers' model.generate(use_cache=True, do_sample=False), torch.set_num_threads(threads),
#              the generate call alone (after a 4-token warm-up in the same process)
# Rounds alternate meshpoint and the peer (one process each per round, so load drifts hit both alike).
# Prints each round, the medians, and the ratios: tokens/s meshpoint / transformers (goal >= 1.0) and
# meshpoint's peak RSS / the weights' float32 bytes (goal <= 1.25 x weights + 100 MiB). Both sides' greedy
# tokens are compared (they agree unless two logits nearly tie: float32 sums in different orders).
# Exit status: 0 done, 1 a run failed, 2 bad usage.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/meshpoint rounds=3 threads=$(nproc) tokens=128 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;; --threads) threads=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;; --out) out=$2; shift 2 ;;
    *) echo "usage: $0 [--bin B] [--rounds N] [--threads N] [--tokens N] [--out DIR]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench_sample: no binary $bin (build first)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_sample: /usr/bin/time is needed (apt-get install time)" >&2; exit 2; }
py=$(scripts/bench_venv.sh)
out=${out:-$(mktemp -d /tmp/mp_bench_sample.XXXXXX)}
mkdir -p "$out"
rm -rf "$out/hf" "$out/ck"
"$py" bench/sample_peer.py make tests/data/hf_configs/smollm2-135m.json "$out/hf" 1 2> "$out/make.log" ||
  { cat "$out/make.log" >&2; exit 1; }
nparams=$(sed -n 's/^made .*: \([0-9]*\) parameters$/\1/p' "$out/make.log")
weights=$((nparams * 4))
"$bin" import "$out/hf" --out "$out/ck" > "$out/import.log" 2>&1 || { cat "$out/import.log" >&2; exit 1; }
prompt="$(seq -s ' ' 1000 1015)"
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "bench_sample: $nparams parameters ($weights bytes of float32 weights), prompt 16 tokens, $tokens new tokens," \
     "greedy, $threads thread(s), $rounds rounds; $(uname -n), $(date -u +%FT%TZ)"
mp_tps=() hf_tps=() rss=()
for r in $(seq "$rounds"); do
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1 /usr/bin/time -v "$bin" sample --checkpoint "$out/ck" --ids \
    --prompt "$prompt" --tokens "$tokens" --temperature 0 --ignore-eos > "$out/mp.out" 2> "$out/mp.err" ||
    { cat "$out/mp.err" >&2; exit 1; }
  secs=$(sed -n "s/.*sampled $tokens token(s) in \([0-9.]*\) s.*/\1/p" "$out/mp.err")
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$out/mp.err")
  [ -n "$secs" ] && [ -n "$kib" ] || { echo "bench_sample: no timing or RSS in $out/mp.err" >&2; exit 1; }
  "$py" bench/sample_peer.py generate "$out/hf" "$prompt" "$tokens" 1 "$threads" > "$out/hf.out" 2> "$out/hf.err" ||
    { cat "$out/hf.err" >&2; exit 1; }
  hsecs=$(awk '$1 == "round" {print $3}' "$out/hf.out")
  mp_tps+=("$(echo "$tokens / $secs" | bc -l)") hf_tps+=("$(echo "$tokens / $hsecs" | bc -l)") rss+=("$((kib * 1024))")
  printf 'round %d: meshpoint %.2f tokens/s (%.2f s), peak RSS %.1f MiB; transformers %.2f tokens/s (%.2f s)\n' \
    "$r" "${mp_tps[-1]}" "$secs" "$(echo "$kib / 1024" | bc -l)" "${hf_tps[-1]}" "$hsecs"
done
mp_ids=$(cat "$out/mp.out") hf_ids=$(sed -n 's/^ids //p' "$out/hf.out")
same=$(paste <(tr ' ' '\n' <<< "$mp_ids") <(tr ' ' '\n' <<< "$hf_ids") | awk '$1 != $2 {exit} {n++} END {print n - 16}')
mp_med=$(printf '%s\n' "${mp_tps[@]}" | median) hf_med=$(printf '%s\n' "${hf_tps[@]}" | median)
rss_med=$(printf '%s\n' "${rss[@]}" | median)
bound=$(echo "1.25 * $weights + 100 * 1048576" | bc -l)
printf 'median: meshpoint %.2f tokens/s, transformers %.2f tokens/s: ratio %.2fx (goal >= 1.0)\n' "$mp_med" "$hf_med" \
  "$(echo "$mp_med / $hf_med" | bc -l)"
printf 'median peak RSS %.1f MiB = %.2fx the weights (%.1f MiB); goal <= 1.25x + 100 MiB = %.1f MiB: %s\n' \
  "$(echo "$rss_med / 1048576" | bc -l)" "$(echo "$rss_med / $weights" | bc -l)" "$(echo "$weights / 1048576" | bc -l)" \
  "$(echo "$bound / 1048576" | bc -l)" "$([ "$(echo "$rss_med <= $bound" | bc)" = 1 ] && echo met || echo NOT met)"
echo "greedy tokens: the first $same of $tokens agree with transformers'"
