#!/usr/bin/env bash
# bench/bench_dcp.sh — PyTorch DCP -> Hugging Face conversion: `meshpoint export DCP_DIR --config CONFIG`
# against torchtitan's convert_to_hf.py flow (bench/dcp_hf_peer.py convert: dcp.load of the whole state
# dict, then HuggingFaceStorageWriter) and the copy floor, on the same DCP files, in one run.
#
#   bench/bench_dcp.sh [--layers "2 4"] [--rounds 3] [--bin PATH/meshpoint] [--dir DIR] [--max-memory 256M]
#                      [--python PY] [--no-check] [--no-prime] [--keep]
#
# Model: Llama-2-7B's tensor shapes (hidden 4096, 32 heads / 32 kv heads, intermediate 11008, vocab
# 32000, untied head) at each layer count of --layers (default "2 4": 2.67 and 4.28 GB as float32). Per L:
#   1. bench/dcp_hf_peer.py write: torch 2.15 (scripts/bench_venv.sh) saves the HF-named float32 state
#      dict with torch.distributed.checkpoint.save from one process: SRC = __0_0.distcp + .metadata;
#   2. --rounds times (default 3; medians quoted), the order of the sides alternating (odd rounds
#      meshpoint, copy, peer; even rounds peer, copy, meshpoint), each part after `sync; echo 3 >
#      /proc/sys/vm/drop_caches` (if refused, every figure is WARM and labelled so) and the memory
#      priming of bench/bench_lib.sh:
#        a. /usr/bin/time -v meshpoint export SRC --config CONFIG --out HF --no-verify: wall time, peak RSS;
#        b. the copy floor: `cat SRC's files > one file; sync FILE` (read S bytes, write S, fsync: what any
#           conversion of S bytes into S bytes must at least do on this disk; as bench_reshard.sh);
#        c. /usr/bin/time -v PY bench/dcp_hf_peer.py convert CONFIG SRC PEER, then `sync` of the files it
#           consolidated (its sharded/ files are fsynced by torch; meshpoint fsyncs what it writes): wall
#           time, peak RSS;
#      in round 1 (unless --no-check), the peer's model-00001-of-00001.safetensors is compared tensor by
#      tensor with meshpoint's model.safetensors (untimed); outputs removed after each round;
#   3. SRC removed (unless --keep).
# Printed: per L, medians over the rounds of each part's seconds, meshpoint / copy floor and meshpoint / peer
# (medians of the per-round ratios), peak RSS (the largest over the rounds); then the goals: meshpoint
# <= 1.10x the copy floor, its peak RSS <= 256 MiB and flat across L, beside the peer's growth.
# Work directory: a fresh DIR/bench_dcp.XXXXXX (DIR defaults to $TMPDIR, else the binary's directory; never a
# tmpfs), removed at the end unless --keep. Exit status: 0 done (goals met or not: this reports), 1 a step
# failed or did not fit, 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
layers="2 4"
rounds=3
bin=""
base=""
maxmem=""
peer_py=""
check=1
prime_on=1
keep=0

usage() { sed -n '2,32p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --layers) layers="${2:-}"; shift 2 ;;
    --rounds) rounds="${2:-}"; shift 2 ;;
    --bin) bin="${2:-}"; shift 2 ;;
    --dir) base="${2:-}"; shift 2 ;;
    --max-memory) maxmem="${2:-}"; shift 2 ;;
    --python) peer_py="${2:-}"; shift 2 ;;
    --no-check) check=0; shift ;;
    --no-prime) prime_on=0; shift ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_dcp.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
for l in $layers; do [[ "$l" =~ ^[1-9][0-9]*$ ]] || { echo "bench_dcp.sh: --layers takes positive integers" >&2; exit 2; }; done
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || { echo "bench_dcp.sh: --rounds takes a positive integer" >&2; exit 2; }
if [ -z "$bin" ]; then
  for b in "$root"/build/meshpoint "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_dcp.sh: no meshpoint binary (scripts/build.sh, or pass --bin)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
[ -x /usr/bin/time ] || { echo "bench_dcp.sh: needs GNU time at /usr/bin/time (apt-get install time)" >&2; exit 2; }
peer_py="${peer_py:-$("$root/scripts/bench_venv.sh")}"
"$peer_py" -c 'import torch, safetensors; from torch.distributed.checkpoint import HuggingFaceStorageWriter' 2> /dev/null ||
  { echo "bench_dcp.sh: $peer_py lacks torch (with HuggingFaceStorageWriter) or safetensors" >&2; exit 2; }
PY="$peer_py"   # bench_lib.sh's prime() runs numpy in it
base="${base:-${TMPDIR:-$(dirname "$bin")}}"
[ -d "$base" ] || { echo "bench_dcp.sh: $base is not a directory" >&2; exit 2; }
case "$(stat -f -c %T "$base")" in
  tmpfs|ramfs) echo "bench_dcp.sh: $base is in memory, not on disk: pass --dir on a disk filesystem" >&2; exit 2 ;;
esac

work="$(mktemp -d "$base/bench_dcp.XXXXXX")"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "files kept in $work"; fi; }
trap cleanup EXIT
mm=(); [ -n "$maxmem" ] && mm=(--max-memory "$maxmem")
me=bench_dcp.sh
. "$here/bench_lib.sh"

D=4096; H=32; KV=32; I=11008; V=32000
per_layer=$(( 2 * D + 4 * D * D + 3 * D * I ))
edges=$(( 2 * V * D + D ))
res="$work/results.tsv"
printf 'L\tround\tpart\ts\trss_mib\tbytes\tcpu_s\n' > "$res"
drop
echo "$me: $bin"
echo "peer: $peer_py ($("$peer_py" -c 'import torch; print("torch", torch.__version__)'))"
echo "machine: $(nproc) cores, $(awk '/^MemTotal:/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo) RAM, $(lscpu 2> /dev/null | sed -n 's/^Model name: *//p' | head -n 1); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: hidden $D, heads $H / kv $KV, intermediate $I, vocab $V, float32, HF names; layers: $layers; rounds $rounds"
echo "work: $work ($(df -h "$work" | awk 'NR == 2 { print $4 " free" }'))"
if [ "$cold" = 1 ]; then echo "page cache: dropped before every timed part (cold)"
else echo "page cache: CANNOT drop (/proc/sys/vm/drop_caches refused): every figure below is WARM"; fi

# cpu_s TIMEFILE: user + system seconds of a /usr/bin/time -v record
cpu_s() { awk -F': ' '/User time|System time/ { s += $2 } END { printf "%.2f", s }' "$1"; }
# row L ROUND PART SECONDS RSS CPU: one line of results.tsv
row() { printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" "$sbytes" "$6" >> "$res"; }

# part_meshpoint L ROUND: meshpoint export SRC -> $hf, timed
part_meshpoint() {
  drop; prime $(( 2 * sbytes + sbytes / 10 ))
  run_timed "$work/mp.log" "$work/mp.time" "$bin" export "$src" --config "$cfg" --out "$hf" --no-verify "${mm[@]}"
  row "$1" "$2" meshpoint "$T_S" "$(rss_mib "$work/mp.time")" "$(cpu_s "$work/mp.time")"
  echo "  meshpoint export: $T_S s, peak RSS $(rss_mib "$work/mp.time") MiB, cpu $(cpu_s "$work/mp.time") s  [$(grep 'meshpoint export: wrote' "$work/mp.log" | tail -n 1 | sed 's/.* in \([0-9.]* s\)/\1/')]"
}

# part_copy L ROUND: the copy floor of SRC's bytes
part_copy() {
  local t0 t1 s
  drop; prime $(( 2 * sbytes + sbytes / 10 ))
  t0="$(now)"; cat "$src"/__*.distcp "$src"/.metadata > "$work/copy.bin"; sync "$work/copy.bin"; t1="$(now)"
  rm -f "$work/copy.bin"
  s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
  row "$1" "$2" copy "$s" - -
  echo "  copy floor (cat SRC's files > FILE; sync FILE): $s s"
}

# part_peer L ROUND: torchtitan's convert_to_hf.py flow SRC -> $peer, then sync of what it consolidated
part_peer() {
  drop; prime $(( 3 * sbytes + sbytes / 10 ))
  run_timed "$work/peer.log" "$work/peer.time" bash -c '"$0" "$1" convert "$2" "$3" "$4" && sync "$4"/model-*.safetensors "$4"/model.safetensors.index.json' \
    "$peer_py" "$here/dcp_hf_peer.py" "$cfg" "$src" "$peer"
  row "$1" "$2" peer "$T_S" "$(rss_mib "$work/peer.time")" "$(cpu_s "$work/peer.time")"
  echo "  torchtitan flow:  $T_S s, peak RSS $(rss_mib "$work/peer.time") MiB, cpu $(cpu_s "$work/peer.time") s  [$(grep '^dcp_hf_peer' "$work/peer.log" | tail -n 1)]"
}

for L in $layers; do
  params=$(( L * per_layer + edges )); mbytes=$(( 4 * params ))
  cfg="$work/llama_L$L.json"
  cat > "$cfg" << JSON
{"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": $D, "intermediate_size": $I,
 "num_hidden_layers": $L, "num_attention_heads": $H, "num_key_value_heads": $KV, "vocab_size": $V,
 "max_position_embeddings": 4096, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "initializer_range": 0.02,
 "tie_word_embeddings": false, "hidden_act": "silu"}
JSON
  src="$work/dcp_L$L"; hf="$work/hf_L$L"; peer="$work/peer_L$L"
  echo; echo "== L $L: $params parameters, float32 $(gb "$mbytes") GB"
  # SRC + meshpoint's output + the peer's two copies (sharded/ and consolidated) + the copy floor's file
  fits $(( 4 * mbytes + mbytes / 10 )) "source + outputs (L $L)"
  "$peer_py" "$here/dcp_hf_peer.py" write "$cfg" "$src" > "$work/write_L$L.log" 2>&1 \
    || { echo "$me: writing the DCP failed: $(tail -5 "$work/write_L$L.log")" >&2; exit 1; }
  sbytes="$(stat -c %s "$src"/__*.distcp "$src"/.metadata | awk '{ s += $1 } END { printf "%.0f", s }')"
  echo "SRC: $(gb "$sbytes") GB in $(ls "$src" | wc -l) files ($(grep '^dcp_hf_peer' "$work/write_L$L.log"))"
  for r in $(seq 1 "$rounds"); do
    echo "round $r (load $(cut -d' ' -f1-3 /proc/loadavg)):"
    rm -rf "$hf" "$peer"
    if [ $(( r % 2 )) = 1 ]; then part_meshpoint "$L" "$r"; part_copy "$L" "$r"; part_peer "$L" "$r"
    else part_peer "$L" "$r"; part_copy "$L" "$r"; part_meshpoint "$L" "$r"; fi
    if [ "$check" = 1 ] && [ "$r" = 1 ]; then
      "$peer_py" "$here/dcp_hf_peer.py" compare "$hf/model.safetensors" "$peer/model-00001-of-00001.safetensors" \
        || { echo "$me: the peer's output differs from meshpoint's (L $L)" >&2; exit 1; }
    fi
    rm -rf "$hf" "$peer"
  done
  [ "$keep" = 1 ] || rm -rf "$src"
done

echo
echo "== summary ($([ "$cold" = 1 ] && echo cold || echo WARM: page cache not dropped)); medians over $rounds round(s); MB = 1e6 B, MiB = 2^20 B"
awk -F'\t' 'NR == 1 { next }
  { L = $1; r = $2; p = $3; s[L, p, r] = $4; if ($5 != "-" && $5 > rss[L, p]) rss[L, p] = $5; b[L] = $6; Ls[L] = 1; R = (r > R ? r : R) }
  function med(a, c,   i, j, t) { for (i = 1; i <= c; i++) for (j = i + 1; j <= c; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return (c % 2) ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2 }
  END {
    printf "  %3s %8s %9s %9s %9s %9s %9s %9s %10s %10s\n", "L", "src_GB", "mp_s", "copy_s", "peer_s", "mp/copy", "mp/peer", "mp_MB/s", "mp_RSS_MiB", "peer_RSS_MiB"
    for (L in Ls) {
      for (i = 1; i <= R; i++) { m[i] = s[L, "meshpoint", i]; c[i] = s[L, "copy", i]; q[i] = s[L, "peer", i]
        x[i] = s[L, "meshpoint", i] / s[L, "copy", i]; y[i] = s[L, "meshpoint", i] / s[L, "peer", i] }
      mm = med(m, R)
      printf "  %3s %8.2f %9.2f %9.2f %9.2f %8.2fx %8.2fx %9.0f %10s %10s\n", L, b[L] / 1e9, mm, med(c, R), med(q, R),
             med(x, R), med(y, R), b[L] / 1e6 / mm, rss[L, "meshpoint"], rss[L, "peer"] } }' "$res" | sort -k1,1n
echo "goals: meshpoint <= 1.10x the copy floor (mp/copy); meshpoint peak RSS <= 256 MiB and flat across L (mp_RSS_MiB); the peer's RSS beside it"
echo "per-round rows (results.tsv):"; sed "s/^/  /" "$res"
