#!/usr/bin/env bash
# bench/bench_gguf.sh — checkpoint -> GGUF f16: `meshpoint export CKPT --format gguf --dtype f16` against the route
# it replaces (`meshpoint export CKPT` to an HF directory, then llama.cpp's convert_hf_to_gguf.py --outtype f16)
# and the copy floor of the bytes written, in one run.
#
#   bench/bench_gguf.sh [--layers "2 4"] [--rounds 3] [--bin PATH/meshpoint] [--dir DIR] [--max-memory 256M]
#                       [--no-check] [--no-prime] [--keep]
#
# Model: Llama-3.2-1B's tensor shapes (hidden 2048, 32 heads / 8 kv heads, intermediate 8192, vocab 128256,
# tied embeddings; no RoPE scaling) at each layer count of --layers (default "2 4"), meshpoint's seeded
# initialisation, float32. Per L:
#   1. SRC: `meshpoint init` (1 x 1), exported to HF, the llama3-layout test tokenizer added
#      (bench/gguf_peer.py tokenizer), imported back: a model-only float32 checkpoint carrying a tokenizer
#      (both routes write its vocabulary, padded to 128256 as the converter does); untimed;
#   2. --rounds times (default 3; medians quoted), the order alternating (odd rounds meshpoint, copy, peer;
#      even rounds peer, copy, meshpoint), each part after `sync; echo 3 > /proc/sys/vm/drop_caches` (if
#      refused, every figure is WARM and labelled so) and bench/bench_lib.sh's memory priming:
#        a. /usr/bin/time -v meshpoint export SRC --format gguf --dtype f16 --out MP.gguf --no-verify;
#        b. the copy floor of the bytes written: `cat MP.gguf > FILE; sync FILE` (round 1's MP.gguf, kept);
#           and the I/O floor: the same after reading every file of SRC (the float32 source read, as the export must);
#        c. /usr/bin/time -v of: meshpoint export SRC --out HF --no-verify (fp32), then the venv's python
#           tests/python/llamacpp_convert.py (convert_hf_to_gguf.py, its pre-tokenizer name given: the test
#           vocabulary has no hash entry) HF --outtype f16 --outfile PEER.gguf, then `sync PEER.gguf`;
#      in round 1 (unless --no-check) PEER.gguf and MP.gguf hold the same tensors, byte for byte
#      (bench/gguf_peer.py compare);
#   3. SRC removed (unless --keep).
# Printed: per L, medians of each part's seconds, meshpoint / floor and meshpoint / peer (medians of the
# per-round ratios), peak RSS (the largest over the rounds); the goals: meshpoint <= 1.10x the copy floor,
# its peak RSS flat across L. Work directory: a fresh DIR/bench_gguf.XXXXXX (default $TMPDIR, else the
# binary's directory; never a tmpfs), removed unless --keep. Exit: 0 done, 1 a step failed, 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
layers="2 4"; rounds=3; bin=""; base=""; maxmem=""; check=1; prime_on=1; keep=0

usage() { sed -n '2,31p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="${2:-}"; shift 2 ;;
    --rounds) rounds="${2:-}"; shift 2 ;;
    --bin) bin="${2:-}"; shift 2 ;;
    --dir) base="${2:-}"; shift 2 ;;
    --max-memory) maxmem="${2:-}"; shift 2 ;;
    --no-check) check=0; shift ;;
    --no-prime) prime_on=0; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_gguf.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
for l in $layers; do [[ "$l" =~ ^[1-9][0-9]*$ ]] || { echo "bench_gguf.sh: --layers takes positive integers" >&2; exit 2; }; done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_gguf.sh: --rounds takes a positive integer" >&2; exit 2; }
if [ -z "$bin" ]; then
  for b in "$root"/build/meshpoint "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_gguf.sh: no meshpoint binary (scripts/build.sh, or pass --bin)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
[ -x /usr/bin/time ] || { echo "bench_gguf.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
PY="$("$root/scripts/llamacpp_venv.sh")"   # also bench_lib.sh's prime() (numpy)
convert="$("$root/scripts/llamacpp_venv.sh" --convert)"
base="${base:-${TMPDIR:-$(dirname "$bin")}}"
[ -d "$base" ] || { echo "bench_gguf.sh: $base is not a directory" >&2; exit 2; }
case "$(stat -f -c %T "$base")" in
  tmpfs|ramfs) echo "bench_gguf.sh: $base is in memory, not on disk: pass --dir on a disk filesystem" >&2; exit 2 ;;
esac

work="$(mktemp -d "$base/bench_gguf.XXXXXX")"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "files kept in $work"; fi; }
trap cleanup EXIT
mm=(); [ -n "$maxmem" ] && mm=(--max-memory "$maxmem")
me=bench_gguf.sh
. "$here/bench_lib.sh"

D=2048; H=32; KV=8; I=8192; V=128256
per_layer=$(( 2 * D + 2 * D * D + 2 * D * (D / H * KV) + 3 * D * I ))
edges=$(( V * D + D ))
res="$work/results.tsv"
printf 'L\tround\tpart\ts\trss_mib\tbytes\tcpu_s\n' > "$res"
drop
echo "$me: $bin"
echo "peer: $convert (llama-cpp-python 0.3.36's llama.cpp), python $PY"
echo "machine: $(nproc) cores, $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: hidden $D, heads $H / kv $KV, intermediate $I, vocab $V, tied, float32 checkpoint -> GGUF f16; layers: $layers; rounds $rounds"
echo "work: $work ($(df -h "$work" | awk 'NR == 2 { print $4 " free" }'))"
if [ "$cold" = 1 ]; then echo "page cache: dropped before every timed part (cold)"
else echo "page cache: CANNOT drop (/proc/sys/vm/drop_caches refused): every figure below is WARM"; fi

cpu_s() { awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$1"; }
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$obytes" "$6" >> "$res"; }

# part_meshpoint L ROUND: meshpoint's direct export SRC -> $mp
part_meshpoint() {
  drop; prime $(( 2 * sbytes ))
  rm -f "$mp"
  run_timed "$work/mp.log" "$work/mp.time" "$bin" export "$src" --format gguf --dtype f16 --out "$mp" --no-verify "${mm[@]}"
  obytes="$(stat -c %s "$mp")"
  row "$1" "$2" meshpoint "$T_S" "$(rss_mib "$work/mp.time")" "$(cpu_s "$work/mp.time")"
  echo "  meshpoint export --format gguf: $T_S s, peak RSS $(rss_mib "$work/mp.time") MiB, cpu $(cpu_s "$work/mp.time") s"
  [ -f "$floor_src" ] || cp "$mp" "$floor_src"
}

# part_copy L ROUND: the copy floor of the bytes written (needs round 1's output)
part_copy() {
  local t0 t1 s
  [ -f "$floor_src" ] || part_meshpoint "$1" 0   # an even first round: make the file once, untimed row 0
  drop; prime $(( 2 * sbytes ))
  t0="$(now)"; cat "$floor_src" > "$work/copy.bin"; sync "$work/copy.bin"; t1="$(now)"
  rm -f "$work/copy.bin"
  s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
  row "$1" "$2" copy "$s" - -
  drop; prime $(( 2 * sbytes ))
  t0="$(now)"; find "$src" -type f -exec cat {} + > /dev/null; cat "$floor_src" > "$work/copy.bin"; sync "$work/copy.bin"; t1="$(now)"
  rm -f "$work/copy.bin"
  local io; io="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
  row "$1" "$2" io "$io" - -
  echo "  copy floor (cat OUT > FILE; sync FILE): $s s; with the source read too (every file of SRC read first): $io s"
}

# part_peer L ROUND: export to HF, convert_hf_to_gguf.py, sync
part_peer() {
  drop; prime $(( 3 * sbytes ))
  rm -rf "$hf" "$peer"
  run_timed "$work/peer.log" "$work/peer.time" bash -c '"$0" export "$1" --out "$2" --no-verify && "$3" "$4" "$5" llama-bpe "$2" --outtype f16 --outfile "$6" && sync "$6"' \
    "$bin" "$src" "$hf" "$PY" "$root/tests/python/llamacpp_convert.py" "$convert" "$peer"
  row "$1" "$2" peer "$T_S" "$(rss_mib "$work/peer.time")" "$(cpu_s "$work/peer.time")"
  echo "  export to HF + convert_hf_to_gguf.py: $T_S s, peak RSS $(rss_mib "$work/peer.time") MiB, cpu $(cpu_s "$work/peer.time") s"
  rm -rf "$hf"
}

for L in $layers; do
  params=$(( L * per_layer + edges )); mbytes=$(( 4 * params ))
  cfg="$work/llama_L$L.json"
  cat > "$cfg" << JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": $D, "intermediate_size": $I,
 "num_hidden_layers": $L, "num_attention_heads": $H, "num_key_value_heads": $KV, "vocab_size": $V,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "initializer_range": 0.02,
 "tie_word_embeddings": true, "hidden_act": "silu", "bos_token_id": 1, "eos_token_id": 2}
JSON
  obytes=""; src="$work/ckpt_L$L"; hf="$work/hf_L$L"; mp="$work/mp_L$L.gguf"; peer="$work/peer_L$L.gguf"; floor_src="$work/floor_L$L.gguf"
  echo; echo "== L $L: $params parameters, float32 $(gb "$mbytes") GB, f16 out $(gb $(( mbytes / 2 ))) GB"
  # SRC (+ init's moments while it is made) + HF + two outputs + the floor's two copies
  fits $(( 4 * mbytes )) "source + outputs (L $L)"
  "$bin" init --config "$cfg" --tp 1 --dp 1 --out "$work/init" --no-verify > "$work/setup.log" 2>&1 &&
    "$bin" export "$work/init" --out "$work/hf0" --no-verify >> "$work/setup.log" 2>&1 && rm -rf "$work/init" &&
    "$PY" "$here/gguf_peer.py" tokenizer "$work/tok" >> "$work/setup.log" 2>&1 &&
    cp "$work/tok/llama3/tokenizer.json" "$work/tok/llama3/tokenizer_config.json" "$work/hf0/" &&
    "$bin" import "$work/hf0" --out "$src" --no-verify >> "$work/setup.log" 2>&1 && rm -rf "$work/hf0" ||
    { echo "$me: making the source failed: $(tail -5 "$work/setup.log")" >&2; exit 1; }
  sbytes="$(du -sb "$src" | cut -f1)"
  for r in $(seq 1 "$rounds"); do
    echo "round $r (load $(cut -d' ' -f1-3 /proc/loadavg)):"
    if [ $(( r % 2 )) = 1 ]; then part_meshpoint "$L" "$r"; part_copy "$L" "$r"; part_peer "$L" "$r"
    else part_peer "$L" "$r"; part_copy "$L" "$r"; part_meshpoint "$L" "$r"; fi
    if [ "$check" = 1 ] && [ "$r" = 1 ]; then
      "$PY" "$here/gguf_peer.py" compare "$mp" "$peer" || { echo "$me: the peer's GGUF differs from meshpoint's (L $L)" >&2; exit 1; }
    fi
    rm -f "$peer"
  done
  rm -f "$mp" "$floor_src"
  [ "$keep" = 1 ] || rm -rf "$src"
done

echo
echo "== summary ($([ "$cold" = 1 ] && echo cold || echo WARM: page cache not dropped)); medians over $rounds round(s); MB = 1e6 B, MiB = 2^20 B"
awk -F'\t' 'NR == 1 || $2 == 0 { next }
  { L = $1; r = $2; p = $3; s[L, p, r] = $4; if ($5 != "-" && $5 > rss[L, p]) rss[L, p] = $5; if ($6 != "") b[L] = $6; Ls[L] = 1; R = (r > R ? r : R) }
  function med(a, c,   i, j, t) { for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 }
  END {
    printf "  %3s %8s %9s %9s %9s %9s %9s %9s %9s %10s %10s\n", "L", "out_GB", "mp_s", "copy_s", "io_s", "peer_s", "mp/copy", "mp/io", "mp/peer", "mp_RSS_MiB", "peer_RSS_MiB"
    for (L in Ls) {
      for (i = 1; i <= R; i++) { m[i] = s[L, "meshpoint", i]; c[i] = s[L, "copy", i]; q[i] = s[L, "peer", i]; o[i] = s[L, "io", i]
        x[i] = s[L, "meshpoint", i] / s[L, "copy", i]; y[i] = s[L, "meshpoint", i] / s[L, "peer", i]; z[i] = s[L, "meshpoint", i] / s[L, "io", i] }
      printf "  %3s %8.2f %9.2f %9.2f %9.2f %9.2f %8.2fx %8.2fx %8.2fx %10s %10s\n", L, b[L] / 1e9, med(m, R), med(c, R), med(o, R),
             med(q, R), med(x, R), med(z, R), med(y, R), rss[L, "meshpoint"], rss[L, "peer"] } }' "$res" | sort -k1,1n
echo "goals: meshpoint <= 1.10x the copy floor of the bytes written (mp/copy; mp/io: against reading the source too); meshpoint peak RSS flat across L (mp_RSS_MiB)"
echo "per-round rows (results.tsv):"; sed "s/^/  /" "$res"
