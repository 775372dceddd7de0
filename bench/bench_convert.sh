#!/usr/bin/env bash
# bench/bench_convert.sh — `meshpoint export` (checkpoint -> HF safetensors) and `meshpoint import`
# (HF -> checkpoint) against the copy floor of the same bytes, in one run, --rounds rounds (median).
#
#   bench/bench_convert.sh [--small] [--layers "2"] [--rounds 3] [--bin PATH/meshpoint] [--dir DIR]
#                          [--max-memory 256M] [--no-serial] [--no-prime] [--keep]
#
# Model: the shapes of Llama-2-7B (hidden 4096, 32 / 32 heads, intermediate 11008, vocab 32000, untied)
# at each layer count of --layers (default 2); --small: hidden 1024, 8 / 8 heads, intermediate 2752,
# vocab 8000. Per layer count L: `meshpoint init --tp 8 --dp 1` writes SRC (untimed here: see
# bench_reshard.sh), then per round, each part after `sync; echo 3 > /proc/sys/vm/drop_caches`:
#   export  meshpoint export SRC --out HF --no-verify (fp32): reads the model/ boxes of SRC's 8 rank
#           files, writes model.safetensors (S bytes, fsynced); wall time, peak RSS, bytes read;
#   import  meshpoint import HF --tp 8 --dp 1 --out IMP --no-verify: reads S, writes 8 rank files of S
#           tensor bytes (fsynced); wall time, peak RSS, bytes read / needed;
#   copy    the copy floor: `cat HF/model.safetensors > FILE; sync FILE`: the same S bytes read once
#           and written once, durably (both directions move S bytes; one floor per round serves both);
#   serial  (unless --no-serial) export and import again with MP_FAULT=ckpt_serial_fill: the band
#           pipelines without their helper thread (the path before the overlap), as a peer.
# Printed: per round and the median over rounds: seconds, ratio to the copy floor of the same round,
# peak RSS (MiB) against the model size; read / needed. The helpers (drop, prime, fits, run_timed) are
# bench/bench_lib.sh's, shared with bench_reshard.sh.
# Exit status: 0 done (goals met or not: this reports), 1 a step failed or did not fit, 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PY="${PY:-/usr/bin/python3}"
layers="2"; rounds=3; small=0; bin=""; base=""; maxmem=""; serial_on=1; prime_on=1; keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --small) small=1; shift ;;
    --layers) layers="${2:-}"; shift 2 ;;
    --rounds) rounds="${2:-}"; shift 2 ;;
    --bin) bin="${2:-}"; shift 2 ;;
    --dir) base="${2:-}"; shift 2 ;;
    --max-memory) maxmem="${2:-}"; shift 2 ;;
    --no-serial) serial_on=0; shift ;;
    --no-prime) prime_on=0; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d'; exit 0 ;;
    *) echo "bench_convert.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_convert.sh: --rounds takes a positive integer" >&2; exit 2; }
for l in $layers; do [[ "$l" =~ ^[1-9][0-9]*$ ]] || { echo "bench_convert.sh: --layers takes positive integers" >&2; exit 2; }; done
if [ "$small" = 1 ]; then D=1024; H=8; KV=8; I=2752; V=8000; else D=4096; H=32; KV=32; I=11008; V=32000; fi
if [ -z "$bin" ]; then
  for b in "$root"/build/meshpoint "$root"/build-*/meshpoint; do [ -x "$b" ] && { bin="$b"; break; }; done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_convert.sh: no meshpoint binary (scripts/build.sh, or pass --bin)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
[ -x /usr/bin/time ] || { echo "bench_convert.sh: needs GNU time at /usr/bin/time" >&2; exit 2; }
base="${base:-${TMPDIR:-$(dirname "$bin")}}"
[ -d "$base" ] || { echo "bench_convert.sh: $base is not a directory" >&2; exit 2; }
case "$(stat -f -c %T "$base")" in
  tmpfs|ramfs) echo "bench_convert.sh: $base is in memory, not on disk: pass --dir on a disk filesystem" >&2; exit 2 ;;
esac
work="$(mktemp -d "$base/bench_convert.XXXXXX")"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "files kept in $work"; fi; }
trap cleanup EXIT
mm=(); [ -n "$maxmem" ] && mm=(--max-memory "$maxmem")
me=bench_convert.sh
. "$here/bench_lib.sh"

hd=$(( D / H ))
per_layer=$(( 2 * D + D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I ))
edges=$(( 2 * V * D + D ))
res="$work/results.tsv"
printf 'L\tround\tpart\ts\trss_mib\tread_mib\tneeded_mib\tbytes\n' > "$res"
drop
echo "$me: $bin"
echo "machine: $(nproc) cores, $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: hidden $D, heads $H / kv $KV, intermediate $I, vocab $V; layers: $layers; rounds $rounds"
if [ "$cold" = 1 ]; then echo "page cache: dropped before every timed part (cold)"
else echo "page cache: CANNOT drop: every figure below is WARM"; fi

# part L ROUND NAME LOG CMD...: one timed conversion, a row of results.tsv
part() {
  local L=$1 r=$2 name=$3 log=$4; shift 4
  drop; prime $(( 2 * mbytes + mbytes / 10 ))
  run_timed "$log" "$log.time" "$@"
  local line rd nd
  line="$(grep -E 'meshpoint (export|import): wrote' "$log" | tail -n 1 || true)"
  rd="$(sed -n 's/.*; read \([0-9.]*\) MiB.*/\1/p' <<< "$line")"
  nd="$(sed -n 's/.* MiB for \([0-9.]*\) MiB needed.*/\1/p' <<< "$line")"
  [ -n "$nd" ] || nd="$(awk -v b="$mbytes" 'BEGIN { printf "%.2f", b / 1048576 }')"
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$L" "$r" "$name" "$T_S" "$(rss_mib "$log.time")" "${rd:-?}" "$nd" "$mbytes" >> "$res"
  echo "  $name: $T_S s, peak RSS $(rss_mib "$log.time") MiB  [${line:-no summary line}]"
}

for L in $layers; do
  params=$(( L * per_layer + edges )); est=$(( 12 * params )); mbytes=$(( 4 * params ))
  cfg="$work/llama_L$L.json"
  cat > "$cfg" << JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": $D, "intermediate_size": $I,
 "num_hidden_layers": $L, "num_attention_heads": $H, "num_key_value_heads": $KV, "vocab_size": $V,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.02,
 "tie_word_embeddings": false, "hidden_act": "silu", "train": {"batch_size": 1, "seq_len": 4096}}
JSON
  src="$work/src_L$L"; hf="$work/hf_L$L"; imp="$work/imp_L$L"
  echo; echo "== L $L: $params parameters; model f32 $(gb "$mbytes") GB (the bytes export and import move)"
  fits $(( est + 3 * mbytes + mbytes / 10 )) "source + HF + import + copy (L $L)"
  "$bin" init --config "$cfg" --tp 8 --dp 1 --out "$src" --no-verify "${mm[@]}" > "$work/init_L$L.log" 2>&1 \
    || { echo "$me: init failed: $(tail -5 "$work/init_L$L.log")" >&2; exit 1; }
  for r in $(seq 1 "$rounds"); do
    echo "round $r:"
    rm -rf "$hf" "$imp"
    part "$L" "$r" export "$work/export.log" "$bin" export "$src" --out "$hf" --no-verify "${mm[@]}"
    part "$L" "$r" import "$work/import.log" "$bin" import "$hf" --tp 8 --dp 1 --out "$imp" --no-verify "${mm[@]}"
    rm -rf "$imp"
    drop; prime $(( 2 * mbytes + mbytes / 10 ))
    t0="$(now)"; cat "$hf"/*.safetensors > "$work/copy.bin"; sync "$work/copy.bin"; t1="$(now)"
    rm -f "$work/copy.bin"
    cp_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
    printf '%s\t%s\tcopy\t%s\t-\t-\t-\t%s\n' "$L" "$r" "$cp_s" "$mbytes" >> "$res"
    echo "  copy floor (cat model.safetensors > FILE; sync FILE): $cp_s s"
    if [ "$serial_on" = 1 ]; then
      rm -rf "$hf.s"
      part "$L" "$r" export_serial "$work/export_s.log" env MP_FAULT=ckpt_serial_fill "$bin" export "$src" --out "$hf.s" --no-verify "${mm[@]}"
      cmp -s "$hf/model.safetensors" "$hf.s/model.safetensors" || { echo "$me: the serial export differs from the overlapped one" >&2; exit 1; }
      rm -rf "$hf.s"
      part "$L" "$r" import_serial "$work/import_s.log" env MP_FAULT=ckpt_serial_fill "$bin" import "$hf" --tp 8 --dp 1 --out "$imp" --no-verify "${mm[@]}"
      rm -rf "$imp"
    fi
  done
  [ "$keep" = 1 ] || rm -rf "$src" "$hf"
done

echo
echo "== summary ($([ "$cold" = 1 ] && echo cold || echo WARM)); per L: median over $rounds round(s) of each part's seconds and of its ratio to the same round's copy floor"
awk -F'\t' 'NR == 1 { next }
  { k = $1 SUBSEP $3; n[k]++; s[k, n[k]] = $4; if ($3 != "copy") { rss[k] = ($5 > rss[k] ? $5 : rss[k]); rd[k] = $6; nd[k] = $7 }
    mb[$1] = $8; if ($3 == "copy") cp[$1, $2] = $4; parts[$3] = 1; Ls[$1] = 1; rows[NR] = $0 }
  END {
    for (i in rows) { split(rows[i], f, "\t"); if (f[3] != "copy") { k = f[1] SUBSEP f[3]; m[k]++; q[k, m[k]] = f[4] / cp[f[1], f[2]] } }
    printf "  %3s %-14s %8s %9s %9s %9s %10s %10s\n", "L", "part", "model_GB", "median_s", "x_copy", "RSS_MiB", "RSS/model", "read/need"
    for (L in Ls) for (p in parts) { k = L SUBSEP p; if (!(k in n)) continue
      c = n[k]; for (i = 1; i <= c; i++) v[i] = s[k, i]
      for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (v[j] < v[i]) { t = v[i]; v[i] = v[j]; v[j] = t }
      med = (c % 2) ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
      xr = "-"
      if (p != "copy") { c2 = m[k]; for (i = 1; i <= c2; i++) w[i] = q[k, i]
        for (i = 1; i <= c2; i++) for (j = i + 1; j <= c2; j++) if (w[j] < w[i]) { t = w[i]; w[i] = w[j]; w[j] = t }
        xr = sprintf("%.2fx", (c2 % 2) ? w[(c2 + 1) / 2] : (w[c2 / 2] + w[c2 / 2 + 1]) / 2) }
      rn = (p == "copy" || rd[k] == "?" || nd[k] == 0) ? "-" : sprintf("%.3f", rd[k] / nd[k])
      printf "  %3s %-14s %8.2f %9.2f %9s %9s %10s %10s\n", L, p, mb[L] / 1e9, med, xr, (p == "copy" ? "-" : rss[k]),
             (p == "copy" ? "-" : sprintf("%.4f", rss[k] * 1048576 / mb[L])), rn } }' "$res" | sort -k1,1n -k2,2
echo "results: $res"
