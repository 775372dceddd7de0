#!/usr/bin/env bash
# bench/bench_tokenizer.sh [--bin build/meshpoint] [--rounds 5] [--vocab 32000] [--out DIR] — tokenizer
# encode throughput, meshpoint's C tokenizer (tokenizer/) against Hugging Face's `tokenizers` (Rust, from
# scripts/test_venv.sh's venv), both on ONE thread, in the same run, over the same documents.
#
# The corpus: the Debian `fortunes` text files the demo uses (~2.6 MB of English, 43 documents). For each
# layout (llama3: byte-level BPE with Llama 3's Split pattern; llama2: sentencepiece-style BPE with byte
# fallback) a tokenizer of --vocab tokens is trained on it with `tokenizers` itself (bench/tokenizer_peer.py),
# then each side encodes every document (add_special_tokens=False):
#   meshpoint  `meshpoint data --tokenizer DIR` with OMP_NUM_THREADS=1: the whole command, process start,
#              tokenizer load, reading and writing the token files included (so the figure is conservative)
#   tokenizers Tokenizer.encode per document, RAYON_NUM_THREADS=1, the encode loop alone
# Prints each round, the medians, tokens/s, and the ratio peer time / meshpoint time (>= 1.0: meshpoint is at
# least as fast: the goal). Both sides' token counts are printed and must agree.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=build/meshpoint rounds=5 vocab=32000 out=""
while [ $# -gt 0 ]; do
  case $1 in
    --bin) bin=$2; shift 2 ;; --rounds) rounds=$2; shift 2 ;; --vocab) vocab=$2; shift 2 ;;
    --out) out=$2; shift 2 ;; *) echo "usage: $0 [--bin B] [--rounds N] [--vocab V] [--out DIR]" >&2; exit 2 ;;
  esac
done
[ -x "$bin" ] || { echo "bench_tokenizer: no binary $bin (build first)" >&2; exit 2; }
py=$(scripts/test_venv.sh)
out=${out:-$(mktemp -d /tmp/mp_bench_tok.XXXXXX)}
mkdir -p "$out"
files=()
for f in /usr/share/games/fortunes/*; do
  case $f in *.dat|*.u8) continue ;; esac
  [ -f "$f" ] && [ ! -L "$f" ] && files+=("$f")
done
[ ${#files[@]} -gt 0 ] || { echo "bench_tokenizer: no fortunes text (apt-get install fortunes)" >&2; exit 2; }
cat "${files[@]}" > "$out/corpus.txt"
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }
echo "bench_tokenizer: $(wc -c < "$out/corpus.txt") bytes in ${#files[@]} documents, vocab $vocab, $rounds rounds, one thread; $(date -u +%FT%TZ)"
for kind in llama3 llama2; do
  dir=$("$py" bench/tokenizer_peer.py build "$kind" "$out/corpus.txt" "$vocab" "$out/tok")
  peer=$(RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false "$py" bench/tokenizer_peer.py encode "$dir" "$rounds" "${files[@]}")
  mp_times=()
  for r in $(seq "$rounds"); do
    rm -rf "$out/mp"
    t0=$(date +%s.%N)
    OMP_NUM_THREADS=1 "$bin" data --tokenizer "$dir" --out "$out/mp" --name b "${files[@]}" > "$out/mp.log" 2>&1
    t1=$(date +%s.%N)
    mp_times+=("$(echo "$t1 - $t0" | bc -l)")
  done
  mp_med=$(printf '%s\n' "${mp_times[@]}" | median)
  peer_med=$(echo "$peer" | awk '{print $2}' | median)
  peer_tokens=$(echo "$peer" | awk 'NR == 1 {print $3}')
  mp_tokens=$(sed -nE "s/.*document[s]?, ([0-9]+) tokens .*/\1/p" "$out/mp.log" | head -1)
  echo "== $kind: meshpoint rounds (s): ${mp_times[*]}"
  echo "== $kind: tokenizers rounds (s): $(echo "$peer" | awk '{printf "%s ", $2}')"
  awk -v m="$mp_med" -v p="$peer_med" -v n="$peer_tokens" -v k="$kind" -v mt="${mp_tokens:-?}" 'BEGIN {
      printf "bench_tokenizer %s: meshpoint %.3f s (%.0f tok/s), tokenizers %.3f s (%.0f tok/s); ratio %.2fx (peer time / meshpoint time, median); tokens: tokenizers %d, meshpoint %s (with BOS/EOS per document)\n",
             k, m, n / m, p, n / p, p / m, n, mt }'
done
