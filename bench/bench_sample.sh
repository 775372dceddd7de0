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
#   peers      transformers' model.generate(use_cache=True, do_sample=False), torch.set_num_threads(threads),
#              the generate call alone (after a 4-token warm-up in the same process), with the default
#              attention (attn_implementation "sdpa") and with "eager"; the goal is measured against the
#              faster of the two (on a 2-core CPU torch's sdpa decode step is far slower than eager's)
# Rounds alternate meshpoint and the peers (one process each per round, so load drifts hit all alike).
# Prints each round, the medians, and the ratios: tokens/s meshpoint / each peer and / the faster peer
# (goal >= 1.0), and meshpoint's peak RSS / the weights' float32 bytes (goal <= 1.25 x weights + 100 MiB).
# The greedy tokens are compared (they agree unless two logits nearly tie: float32 sums in other orders).
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
mp_tps=() sdpa_tps=() eager_tps=() rss=()
peer() {   # peer ATTN: one generate round; prints tokens/s; the ids go to $out/hf_ATTN.out
  "$py" bench/sample_peer.py generate "$out/hf" "$prompt" "$tokens" 1 "$threads" "$1" > "$out/hf_$1.out" 2> "$out/hf_$1.err" ||
    { cat "$out/hf_$1.err" >&2; return 1; }
  echo "$tokens / $(awk '$1 == "round" {print $3}' "$out/hf_$1.out")" | bc -l
}
for r in $(seq "$rounds"); do
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=1 /usr/bin/time -v "$bin" sample --checkpoint "$out/ck" --ids \
    --prompt "$prompt" --tokens "$tokens" --temperature 0 --ignore-eos > "$out/mp.out" 2> "$out/mp.err" ||
    { cat "$out/mp.err" >&2; exit 1; }
  secs=$(sed -n "s/.*sampled $tokens token(s) in \([0-9.]*\) s.*/\1/p" "$out/mp.err")
  kib=$(sed -n 's/.*Maximum resident set size (kbytes): \([0-9]*\)/\1/p' "$out/mp.err")
  [ -n "$secs" ] && [ -n "$kib" ] || { echo "bench_sample: no timing or RSS in $out/mp.err" >&2; exit 1; }
  sdpa_tps+=("$(peer sdpa)") eager_tps+=("$(peer eager)")
  mp_tps+=("$(echo "$tokens / $secs" | bc -l)") rss+=("$((kib * 1024))")
  printf 'round %d: meshpoint %.2f tokens/s, peak RSS %.1f MiB; transformers sdpa %.2f tokens/s, eager %.2f tokens/s\n' \
    "$r" "${mp_tps[-1]}" "$(echo "$kib / 1024" | bc -l)" "${sdpa_tps[-1]}" "${eager_tps[-1]}"
done
agree() {   # agree FILE: how many of the new tokens equal meshpoint's, from the first on
  paste <(tr ' ' '\n' < "$out/mp.out") <(sed -n 's/^ids //p' "$1" | tr ' ' '\n') | awk '$1 != $2 {exit} {n++} END {print n - 16}'
}
mp_med=$(printf '%s\n' "${mp_tps[@]}" | median)
sdpa_med=$(printf '%s\n' "${sdpa_tps[@]}" | median) eager_med=$(printf '%s\n' "${eager_tps[@]}" | median)
best=$(printf '%s\n%s\n' "$sdpa_med" "$eager_med" | sort -g | tail -1)
rss_med=$(printf '%s\n' "${rss[@]}" | median)
bound=$(echo "1.25 * $weights + 100 * 1048576" | bc -l)
printf 'median: meshpoint %.2f tokens/s; transformers sdpa %.2f (ratio %.2fx), eager %.2f (ratio %.2fx)\n' "$mp_med" \
  "$sdpa_med" "$(echo "$mp_med / $sdpa_med" | bc -l)" "$eager_med" "$(echo "$mp_med / $eager_med" | bc -l)"
printf 'against the faster transformers: %.2fx (goal >= 1.0)\n' "$(echo "$mp_med / $best" | bc -l)"
printf 'median peak RSS %.1f MiB = %.2fx the weights (%.1f MiB); goal <= 1.25x + 100 MiB = %.1f MiB: %s\n' \
  "$(echo "$rss_med / 1048576" | bc -l)" "$(echo "$rss_med / $weights" | bc -l)" "$(echo "$weights / 1048576" | bc -l)" \
  "$(echo "$bound / 1048576" | bc -l)" "$([ "$(echo "$rss_med <= $bound" | bc)" = 1 ] && echo met || echo NOT met)"
echo "greedy tokens: the first $(agree "$out/hf_sdpa.out") (sdpa) and $(agree "$out/hf_eager.out") (eager) of $tokens agree with meshpoint's"
