#!/usr/bin/env bash
# bench/bench_reshard.sh — offline resharding speed and memory of `meshpoint reshard`, against a cold
# `dd` of the same bytes and a naive h5py/numpy peer (bench/naive_reshard.py), in one run.
#
#   bench/bench_reshard.sh [--small] [--layers "2 8"] [--targets "2 1"] [--rounds 3] [--bin PATH/meshpoint]
#                          [--dir DIR] [--max-memory 256M] [--check] [--verify] [--no-naive]
#                          [--no-prime] [--keep]
#
# Model: the tensor shapes of Llama-2-7B (hidden 4096, 32 heads / 32 kv heads, intermediate 11008,
# vocab 32000, untied head) at each layer count of --layers (default "2 8"); --small: hidden 1024,
# 8 / 8 heads, intermediate 2752, vocab 8000, layers "1 2" (a one-minute run). Per layer count L:
#   1. writes the config JSON and `meshpoint init --tp 8 --dp 1 --no-verify` a step-0 checkpoint
#      (parameters + both Adam moments, f32): SRC; timed, with its peak RSS;
#   2. --rounds times (default 3; the summary quotes medians), per target tp T of --targets (default
#      "2 1"), dp 1, each part after `sync; echo 3 >
#      /proc/sys/vm/drop_caches` (if refused, every figure is WARM and labelled so):
#        a. /usr/bin/time -v meshpoint reshard SRC --tp T --dp 1 --out DST --no-verify: wall time,
#           peak RSS, bytes read / bytes needed (its last stderr line); DST removed (unless --check);
#           with --verify, then `meshpoint ckpt verify DST` (cold, timed, not part of the figure);
#        b. dd if=<each rank file of SRC> of=/dev/null bs=16M, summed: the cold read of the same bytes;
#           then the copy floor: `cat SRC's rank files > one file; sync FILE` (read S, write S, fsync:
#           what any conversion of S bytes must do on this disk);
#        c. /usr/bin/time -v /usr/bin/python3 bench/naive_reshard.py SRC --tp T --out DST2: wall time
#           and peak RSS (it fsyncs what it writes, as meshpoint does); with --check, DST2's datasets
#           are then compared with DST's (naive_reshard.py --compare, untimed); DST2 removed;
#   3. SRC removed (unless --keep).
# Before every timed part, fresh memory of about the part's page-cache footprint is touched and freed
# (unless --no-prime): this VM hands memory the guest left free back to the host, and the first touch
# of it costs 1-2.5 s/GiB, which would otherwise land on whichever program fills the page cache first
# (docs/BENCH_CKPT.md). Free disk is checked (df) before each step: at most SRC + one output (+ the
# second with --check) exist at a time; a step that does not fit is refused with a message.
# Printed: a table per (L, target), medians over the rounds: bytes, reshard s, MB/s, dd s, dd MB/s,
# reshard / dd, copy s, reshard / copy (the median of the per-round ratios, each against the floor
# measured minutes apart in the same round), peak RSS (the largest), read / needed, naive s, naive RSS,
# speedup over naive; the init times; the goals (reshard <= 1.10x the copy floor, peak RSS < 512 MiB,
# flat across L). MB/s = SRC bytes / s; MB = 1e6 bytes, MiB = 2^20. Logs and
# results.tsv stay in the work directory (a fresh DIR/bench_reshard.XXXXXX; DIR defaults to $TMPDIR,
# else the binary's directory; never a tmpfs), removed at the end unless --keep.
# Exit status: 0 done (goals met or not: this reports), 1 a step failed or did not fit, 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PY="${PY:-/usr/bin/python3}"
layers=""
targets="2 1"
rounds=3
small=0
bin=""
base=""
maxmem=""
check=""
verify=""
naive=1
prime_on=1
keep=0

usage() { sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --small) small=1; shift ;;
    --layers) layers="${2:-}"; shift 2 ;;
    --targets) targets="${2:-}"; shift 2 ;;
    --rounds) rounds="${2:-}"; shift 2 ;;
    --bin) bin="${2:-}"; shift 2 ;;
    --dir) base="${2:-}"; shift 2 ;;
    --max-memory) maxmem="${2:-}"; shift 2 ;;
    --check) check=1; shift ;;
    --verify) verify=1; shift ;;
    --no-naive) naive=0; shift ;;
    --no-prime) prime_on=0; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_reshard.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done

if [ "$small" = 1 ]; then
  D=1024; H=8; KV=8; I=2752; V=8000; layers="${layers:-1 2}"; check="${check:-1}"; verify="${verify:-1}"
else
  D=4096; H=32; KV=32; I=11008; V=32000; layers="${layers:-2 8}"
fi
check="${check:-0}"; verify="${verify:-0}"
for l in $layers; do [[ "$l" =~ ^[1-9][0-9]*$ ]] || { echo "bench_reshard.sh: --layers takes positive integers" >&2; exit 2; }; done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_reshard.sh: --rounds takes a positive integer" >&2; exit 2; }
for t in $targets; do [[ "$t" =~ ^[1-9][0-9]*$ ]] || { echo "bench_reshard.sh: --targets takes positive integers" >&2; exit 2; }; done
[ "$naive" = 1 ] || check=0

if [ -z "$bin" ]; then
  for b in "$root"/build/meshpoint "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_reshard.sh: no meshpoint binary (scripts/build.sh, or pass --bin)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
[ -x /usr/bin/time ] || { echo "bench_reshard.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
if [ "$naive" = 1 ]; then
  "$PY" -c 'import h5py, numpy' 2> /dev/null || { echo "bench_reshard.sh: $PY lacks h5py or numpy (or pass --no-naive)" >&2; exit 2; }
fi
base="${base:-${TMPDIR:-$(dirname "$bin")}}"
[ -d "$base" ] || { echo "bench_reshard.sh: $base is not a directory" >&2; exit 2; }
case "$(stat -f -c %T "$base")" in
  tmpfs|ramfs) echo "bench_reshard.sh: $base is in memory, not on disk: pass --dir on a disk filesystem" >&2; exit 2 ;;
esac

work="$(mktemp -d "$base/bench_reshard.XXXXXX")"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "files kept in $work"; fi; }
trap cleanup EXIT
res="$work/results.tsv"
mm=()
[ -n "$maxmem" ] && mm=(--max-memory "$maxmem")

# ------------------------------------------------------------------------------------ helpers
me=bench_reshard.sh
. "$here/bench_lib.sh"

# --------------------------------------------------------------------------------- the model
hd=$(( D / H ))
per_layer=$(( 2 * D + D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I ))
edges=$(( 2 * V * D + D ))

drop
echo "bench_reshard.sh: $bin"
echo "machine: $(nproc) cores, $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1)"
echo "model: hidden $D, heads $H / kv $KV, intermediate $I, vocab $V; layers: $layers; source tp 8 x dp 1; targets tp: $targets (dp 1); rounds: $rounds"
echo "work: $work ($(df -h "$work" | awk 'NR == 2 { print $4 " free" }'))"
if [ "$cold" = 1 ]; then echo "page cache: dropped before every timed part (cold)"
else echo "page cache: CANNOT drop (/proc/sys/vm/drop_caches refused): every figure below is WARM"; fi
[ "$prime_on" = 1 ] || echo "memory priming: off (--no-prime)"
printf 'L\ttarget\tround\tsrc_bytes\tout_bytes\treshard_s\treshard_rss_mib\tread_mib\tneeded_mib\tratio\tlargest_mib\tdd_s\tnaive_s\tnaive_rss_mib\tverify_s\tcopy_s\n' > "$res"
inits=()

for L in $layers; do
  params=$(( L * per_layer + edges ))
  est=$(( 12 * params ))
  cfg="$work/llama_L$L.json"
  cat > "$cfg" << EOF
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": $D,
  "intermediate_size": $I,
  "num_hidden_layers": $L,
  "num_attention_heads": $H,
  "num_key_value_heads": $KV,
  "vocab_size": $V,
  "max_position_embeddings": 4096,
  "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0,
  "initializer_range": 0.02,
  "tie_word_embeddings": false,
  "hidden_act": "silu",
  "train": {"batch_size": 1, "seq_len": 4096}
}
EOF
  src="$work/src_L$L"
  echo
  echo "== L $L: $params parameters, x3 (params + exp_avg + exp_avg_sq) f32 = $(gb "$est") GB"
  fits $(( est + est / 50 )) "meshpoint init (L $L)"
  drop; prime $(( est + est / 10 ))
  run_timed "$work/init_L$L.log" "$work/init_L$L.time" "$bin" init --config "$cfg" --tp 8 --dp 1 --out "$src" --no-verify "${mm[@]}"
  sbytes="$(dir_bytes "$src")"
  init_rss="$(rss_mib "$work/init_L$L.time")"
  echo "init  tp8: $(gb "$sbytes") GB in $T_S s ($(awk -v b="$sbytes" -v t="$T_S" 'BEGIN { printf "%.0f", b / 1e6 / t }') MB/s), peak RSS $init_rss MiB"
  inits+=("$L $sbytes $T_S $init_rss")

  for R in $(seq 1 "$rounds"); do
  [ "$rounds" = 1 ] || echo "-- round $R of $rounds (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for T in $targets; do
    dst="$work/dst_L${L}_tp$T"; dst2="$work/naive_L${L}_tp$T"
    tag="L${L}_tp${T}_r$R"
    outs=1; [ "$check" = 1 ] && outs=2
    fits $(( outs * (sbytes + sbytes / 50) + (64 << 20) )) "reshard to tp $T (L $L)"
    # a. meshpoint reshard
    drop; prime $(( 2 * sbytes + sbytes / 10 ))
    run_timed "$work/reshard_$tag.log" "$work/reshard_$tag.time" "$bin" reshard "$src" --tp "$T" --dp 1 --out "$dst" --no-verify "${mm[@]}"
    r_s="$T_S"; r_rss="$(rss_mib "$work/reshard_$tag.time")"
    line="$(grep 'meshpoint reshard: wrote' "$work/reshard_$tag.log" | tail -n 1 || true)"
    rd="$(sed -n 's/.*; read \([0-9.]*\) MiB for \([0-9.]*\) MiB needed (ratio \([0-9.]*\)).*/\1/p' <<< "$line")"
    nd="$(sed -n 's/.*; read \([0-9.]*\) MiB for \([0-9.]*\) MiB needed (ratio \([0-9.]*\)).*/\2/p' <<< "$line")"
    ratio="$(sed -n 's/.*MiB needed (ratio \([0-9.]*\)).*/\1/p' <<< "$line")"
    largest="$(sed -n 's/.*largest piece in memory \([0-9.]*\) MiB.*/\1/p' <<< "$line")"
    obytes="$(dir_bytes "$dst")"
    echo "reshard -> tp$T: $T_S s, peak RSS $r_rss MiB, read ${rd:-?} MiB for ${nd:-?} MiB needed (ratio ${ratio:-?})"
    echo "  [${line:-no summary line in its log}]"
    v_s="-"
    if [ "$verify" = 1 ]; then
      drop; prime $(( sbytes + sbytes / 10 ))
      run_timed "$work/verify_$tag.log" "$work/verify_$tag.time" "$bin" ckpt verify "$dst"
      v_s="$T_S"; echo "ckpt verify tp$T: $T_S s (cold)"
    fi
    [ "$check" = 1 ] || rm -rf "$dst"
    # b. dd of the same bytes
    drop; prime $(( sbytes + sbytes / 10 ))
    t0="$(now)"
    for f in "$src"/rank_*.h5; do dd if="$f" of=/dev/null bs=16M status=none; done
    t1="$(now)"
    dd_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
    echo "dd of SRC's rank files: $dd_s s"
    # b2. the copy floor: the same bytes read once and written once, fsynced (cat + sync FILE): what any
    #     conversion of S bytes into S bytes must at least do on this disk
    fits $(( sbytes + sbytes / 50 )) "copy floor (L $L)"
    drop; prime $(( 2 * sbytes + sbytes / 10 ))
    t0="$(now)"
    cat "$src"/rank_*.h5 > "$work/copy.bin"
    sync "$work/copy.bin"
    t1="$(now)"
    rm -f "$work/copy.bin"
    cp_s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
    echo "copy floor (cat SRC's rank files > one file, fsync): $cp_s s"
    # c. the naive peer
    n_s="-"; n_rss="-"
    if [ "$naive" = 1 ]; then
      fits $(( sbytes + sbytes / 50 + (64 << 20) )) "naive reshard to tp $T (L $L)"
      drop; prime $(( 2 * sbytes + sbytes / 10 ))
      run_timed "$work/naive_$tag.log" "$work/naive_$tag.time" "$PY" "$here/naive_reshard.py" "$src" --tp "$T" --out "$dst2"
      n_s="$T_S"; n_rss="$(rss_mib "$work/naive_$tag.time")"
      echo "naive  -> tp$T: $T_S s, peak RSS $n_rss MiB"
      echo "  [$(grep 'naive_reshard: wrote' "$work/naive_$tag.log" | tail -n 1 || true)]"
      if [ "$check" = 1 ]; then
        "$PY" "$here/naive_reshard.py" --compare "$dst" "$dst2" || { echo "bench_reshard.sh: the naive peer's output differs from meshpoint's (tp $T, L $L)" >&2; exit 1; }
      fi
      rm -rf "$dst2"
    fi
    rm -rf "$dst"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$L" "$T" "$R" "$sbytes" "$obytes" "$r_s" \
      "$r_rss" "${rd:-?}" "${nd:-?}" "${ratio:-?}" "${largest:-?}" "$dd_s" "$n_s" "$n_rss" "$v_s" "$cp_s" >> "$res"
  done
  done
  [ "$keep" = 1 ] || rm -rf "$src"
done

# ------------------------------------------------------------------------------------ summary
echo
echo "== summary ($([ "$cold" = 1 ] && echo cold || echo WARM: page cache not dropped); MB/s = source bytes / s; MB = 1e6 B, MiB = 2^20 B)"
echo "init (meshpoint init --tp 8 --dp 1 --no-verify):"
printf '  %3s %9s %9s %8s %9s\n' L GB s MB/s RSS_MiB
for row in "${inits[@]}"; do
  read -r l b s r <<< "$row"
  printf '  %3s %9s %9s %8.0f %9s\n' "$l" "$(gb "$b")" "$s" "$(awk -v b="$b" -v t="$s" 'BEGIN { print b / 1e6 / t }')" "$r"
done
echo "reshard tp8 -> target (dp 1), medians over $rounds round(s):"
# columns of results.tsv: 1 L, 2 target, 3 round, 4 src_bytes, 5 out_bytes, 6 reshard_s, 7 rss, 8 read_mib,
# 9 needed_mib, 10 ratio, 11 largest, 12 dd_s, 13 naive_s, 14 naive_rss, 15 verify_s, 16 copy_s
awk -F'\t' '
  function med(a, n,   i, j, t) {   # the median of a[1..n] (sorts a; mawk has no asort)
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
  NR == 1 { next }
  { k = $1 SUBSEP $2; if (!(k in n)) { keys[++nk] = k; L[k] = $1; T[k] = $2; B[k] = $4 }
    i = ++n[k]; rs[k, i] = $6; dd[k, i] = $12; cp[k, i] = $16; rc[k, i] = $6 / $16
    if ($7 > rss[k]) rss[k] = $7
    rn[k] = ($8 == "?" || $9 == "?" || $9 == 0) ? "?" : sprintf("%.3f", $8 / $9)
    if ($13 != "-") { nn[k]++; nv[k, nn[k]] = $13; if ($14 > nr[k]) nr[k] = $14 } }
  END {
    printf "  %3s %6s %8s %9s %7s %8s %7s %8s %8s %8s %8s %9s %8s %8s %8s\n", "L", "target", "GB", "reshard_s", "MB/s",
           "dd_s", "dd_MB/s", "rs/dd", "copy_s", "rs/copy", "RSS_MiB", "read/need", "naive_s", "nRSS_MiB", "speedup"
    for (q = 1; q <= nk; q++) {
      k = keys[q]; m = n[k]
      for (i = 1; i <= m; i++) { a1[i] = rs[k, i]; a2[i] = dd[k, i]; a3[i] = cp[k, i]; a4[i] = rc[k, i]; a5[i] = rs[k, i] / dd[k, i] }
      r = med(a1, m); d = med(a2, m); c = med(a3, m); x = med(a4, m); y = med(a5, m)
      nvs = "-"; sp = "-"; nrs = "-"
      if (nn[k]) { for (i = 1; i <= nn[k]; i++) a6[i] = nv[k, i]; v = med(a6, nn[k]); nvs = sprintf("%.2f", v); sp = sprintf("%.2fx", v / r); nrs = nr[k] }
      printf "  %3s %6s %8.2f %9.2f %7.0f %8.2f %7.0f %7.2fx %8.2f %7.2fx %8s %9s %8s %8s %8s\n", L[k], "tp" T[k], B[k] / 1e9, r,
             B[k] / 1e6 / r, d, B[k] / 1e6 / d, y, c, x, rss[k], rn[k], nvs, nrs, sp
      line = line sprintf("  reshard tp%s at L %s <= 1.10x the copy floor: %s (median %.2fx; rounds", T[k], L[k], x <= 1.10 ? "MET" : "NOT MET", x)
      for (i = 1; i <= m; i++) line = line sprintf(" %.2fx", rc[k, i])
      line = line ")\n" }
    printf "%s", line > "/dev/stderr" }' "$res" 2> "$work/ratio_goals.txt"
if [ "$verify" = 1 ]; then
  awk -F'\t' 'NR > 1 && $15 != "-" { printf "  ckpt verify of the tp%s output, L %s, round %s: %s s\n", $2, $1, $3, $15 }' "$res"
fi
echo "goals:"
cat "$work/ratio_goals.txt"
awk -F'\t' 'NR == 1 { next }
  { if ($7 > mx) mx = $7; n++
    if (!($2 in lo) || $7 < lo[$2]) lo[$2] = $7
    if (!($2 in hi) || $7 > hi[$2]) hi[$2] = $7
    if (!($2 in l0) || $1 < l0[$2]) { l0[$2] = $1; r0[$2] = $7 }
    if (!($2 in l1) || $1 > l1[$2]) { l1[$2] = $1; r1[$2] = $7 } }
  END { if (!n) exit
        printf "  reshard peak RSS < 512 MiB: %s (largest %d MiB)\n", mx < 512 ? "MET" : "NOT MET", mx
        flat = 1
        for (t in lo) { d = hi[t] - lo[t]; lim = lo[t] / 10; if (lim < 16) lim = 16; if (d > lim) flat = 0
          printf "  tp%s: peak RSS %d MiB at L %s, %d MiB at L %s\n", t, r0[t], l0[t], r1[t], l1[t] }
        printf "  flat across L (spread <= max(16 MiB, 10%%)): %s\n", flat ? "MET" : "NOT MET" }' "$res"
echo "results: $res (logs beside it$([ "$keep" = 1 ] && echo ", kept" || echo ", removed at exit; --keep keeps them"))"
