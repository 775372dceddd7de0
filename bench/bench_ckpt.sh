#!/usr/bin/env bash
# bench/bench_ckpt.sh — checkpoint I/O speed of ckpt/ against peers measured in the same run, on the
# same filesystem: dd (sync save, cold read), memcpy (async stall), torch.save / torch.load, and
# PyTorch Distributed Checkpoint (DCP) on the same number of processes, including a load onto another
# layout.
#
#   bench/bench_ckpt.sh [GIB] [--rounds R] [--mesh-rounds M] [--procs N] [--bin PATH/bench_ckpt]
#                       [--dir DIR] [--keep]
#
# GIB (default 1): the size of the state, parameters + two AdamW moments of a Llama-shaped model
# (bench/bench_ckpt.c: 549 f32 tensors in 987 boxes at 1 GiB). R rounds (default 5); each round:
#   1. sync save    dd if=/dev/zero bs=16M conv=fsync of the same byte count; `bench_ckpt save`
#                   (ckpt_save_begin/add/commit, one process, mp_comm_self); `bench_ckpt raw` (the same
#                   boxes pwritten to a plain file + fsync: the I/O floor, no HDF5, no hashing);
#                   `bench_ckpt h5` (the same boxes as datasets of one HDF5 file, fsync: the container
#                   alone, no hashing, attributes or index); torch_save.py save (torch.save +
#                   os.fsync); in an order that alternates by round;
#   2. cold load    `bench_ckpt load` (ckpt_open + ckpt_read of every tensor whole, checksums verified),
#                   `bench_ckpt load --boxes` (every saved box: a same-mesh load), dd bs=16M of the rank
#                   file to /dev/null, torch_save.py load (torch.load), in alternating order.
# Before each measurement the page cache is synced and dropped (`echo 3 > /proc/sys/vm/drop_caches`;
# if that is refused the loads are warm and labelled so), and 1.25x the state of fresh memory is
# touched and freed right before the timed part (bench_ckpt prime, or inside the measured program):
# this VM hands memory the guest left free back to the host, and the first touch of it then costs
# 1-2 s/GiB, landing on whichever program allocates page cache first (docs/BENCH_CKPT.md).
# Then `bench_ckpt async` runs R rounds of: a memcpy of the whole state into a staging buffer (the
# peer), then the stall (the same memcpy + begin/add/ckpt_save_start), then ckpt_save_wait (the
# background write).
# Then M rounds (default 3; 0 skips it) of the multi-process comparison with DCP, N processes (default
# 2) on each side, the same tensors (`bench_ckpt shapes GIB`) and values:
#   meshpoint  bench_ckpt_mesh (bench/bench_ckpt_mesh.c) under `mpirun -np N`: each rank holds its
#              shards and calls the library directly (ckpt_save_begin/add/commit over the MPI world;
#              ckpt_open + one ckpt_read per local box), the way `meshpoint train` saves and resumes,
#              without the model, optimiser and data loader around it;
#   DCP        bench/dcp_ckpt.py, N processes spawned here (gloo on 127.0.0.1, no torchrun: one torch
#              import less on 2 cores), the state as {name: DTensor} on a 1-D CPU DeviceMesh;
#              torch.distributed.checkpoint.save(FileSystemWriter(dir, sync_files=True)) and .load
#              (FileSystemReader), in the venv of scripts/bench_venv.sh (created there if missing).
# The layouts: saved as TP-N (Megatron: o_proj/down_proj split on dim 1, other matrices on dim 0,
# norms replicated, written once), loaded cold on the same layout and on FSDP-N (tp 1 x dp N: every
# tensor on dim 0): a reshard that changes the split axis of o_proj/down_proj. Each side is timed
# inside its processes from a barrier to the last rank's return (process start-up and imports are not
# timed), and reports bytes read (/proc/self/io rchar: bytes through read syscalls, summed over the
# ranks) against bytes needed (the bytes of the target shards), and the peak RSS the operation added
# on top of the state the processes hold (VmHWM after, reset through /proc/self/clear_refs, minus
# VmRSS before) over the state's size. The order of the two sides alternates by round.
# Reported: the best of the rounds of every figure (other jobs only ever slow a run down), the median
# in brackets, the ratios, and the goals: sync save >= 0.9x dd, async stall <= 1.5x memcpy, cold load
# (whole tensors) >= 0.95x dd. MB = 1e6 bytes. Files go to a fresh directory under DIR (default
# $TMPDIR, else the binary's build directory; never a tmpfs), removed at the end unless --keep. About
# 3-4 minutes at 1 GiB with 5 rounds on 2 cores, plus 1-3 minutes per multi-process round (most of
# it Python start-up: 3 launches of N processes a round).
# Exit status: 0 done (goals met or not: this reports), 1 a run failed, 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PY="${PY:-/usr/bin/python3}"
gib=1
rounds=5
mrounds=3
procs=2
bin=""
base=""
keep=0

usage() { sed -n '2,53p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds="${2:-}"; shift 2 ;;
    --mesh-rounds) mrounds="${2:-}"; shift 2 ;;
    --procs) procs="${2:-}"; shift 2 ;;
    --bin) bin="${2:-}"; shift 2 ;;
    --dir) base="${2:-}"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    -*) echo "bench_ckpt.sh: unknown option $1" >&2; usage >&2; exit 2 ;;
    *) gib="$1"; shift ;;
  esac
done
[[ "$rounds" =~ ^[1-9][0-9]?$ ]] || { echo "bench_ckpt.sh: --rounds takes 1..99" >&2; exit 2; }
[[ "$mrounds" =~ ^[0-9][0-9]?$ ]] || { echo "bench_ckpt.sh: --mesh-rounds takes 0..99" >&2; exit 2; }
[[ "$procs" =~ ^[1-9][0-9]?$ ]] || { echo "bench_ckpt.sh: --procs takes 1..99" >&2; exit 2; }
[[ "$gib" =~ ^[0-9]*\.?[0-9]+$ ]] || { echo "bench_ckpt.sh: size $gib is not a number of GiB" >&2; exit 2; }
if [ -z "$bin" ]; then
  for b in "$root"/build/bench_ckpt "$root"/build-*/bench_ckpt; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_ckpt.sh: no bench_ckpt binary (build target bench_ckpt, or pass --bin)" >&2; exit 2; }
bin="$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")"
base="${base:-${TMPDIR:-$(dirname "$bin")}}"
[ -d "$base" ] || { echo "bench_ckpt.sh: $base is not a directory" >&2; exit 2; }
fstype="$(stat -f -c %T "$base")"
case "$fstype" in
  tmpfs|ramfs) echo "bench_ckpt.sh: $base is on $fstype (memory, not disk): pass --dir on a disk filesystem" >&2; exit 2 ;;
esac

work="$(mktemp -d "$base/bench_ckpt.XXXXXX")"
cleanup() { if [ "$keep" = 0 ]; then rm -rf "$work"; else echo "files kept in $work"; fi; }
trap cleanup EXIT

"$bin" shapes "$gib" > "$work/shapes.txt"
hash="$("$bin" hash "$gib")"
bytes="$(sed -n 's/.*bytes=\([0-9]*\).*/\1/p' <<< "$hash")"
prime_gib="$(awk -v b="$bytes" 'BEGIN { printf "%.3f", b * 1.25 / 1073741824 }')"   # see prime() in bench_ckpt.c
avail=$(( $(df -Pk "$work" | awk 'NR == 2 { print $4 }') * 1024 ))
if [ "$avail" -lt $((bytes * 7 / 2)) ]; then
  echo "bench_ckpt.sh: $work has $((avail >> 20)) MiB free, needs $((bytes * 7 / 2 >> 20)) MiB" >&2; exit 1
fi
have_torch=1
"$PY" -c 'import torch' 2> /dev/null || have_torch=0
# the multi-process comparison: meshpoint's tool next to bench_ckpt, DCP in the benchmark venv
mesh_bin="$(dirname "$bin")/bench_ckpt_mesh"
mesh_note=""
VPY=""
if [ "$mrounds" -gt 0 ]; then
  if [ ! -x "$mesh_bin" ]; then mesh_note="no $mesh_bin (build target bench_ckpt_mesh)"
  elif ! command -v mpirun > /dev/null; then mesh_note="no mpirun"
  elif ! VPY="$("$root/scripts/bench_venv.sh")" || ! "$VPY" -c 'import torch.distributed as d; assert d.is_gloo_available()' 2> /dev/null
  then mesh_note="no Python with torch.distributed + gloo from scripts/bench_venv.sh"; fi
  [ -z "$mesh_note" ] || { echo "bench_ckpt.sh: multi-process DCP comparison skipped: $mesh_note" >&2; mrounds=0; }
fi

cold=1
drop() { sync; if [ "$cold" = 1 ] && ! { echo 3 > /proc/sys/vm/drop_caches; } 2> /dev/null; then cold=0; fi; }
drop
echo "checkpoint I/O benchmark: $bin, $gib GiB ($bytes bytes, $(wc -l < "$work/shapes.txt") tensors), $rounds round(s)"
echo "files in $work ($(df -P "$work" | awk 'NR == 2 { print $1 }'), $fstype)"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ "$have_torch" = 1 ] && echo "torch: $("$PY" -c 'import torch; print(torch.__version__)')" || echo "torch: not importable by $PY (torch peer skipped)"
[ "$mrounds" -gt 0 ] && echo "multi-process: $procs processes a side, $mrounds round(s); DCP: torch $("$VPY" -c 'import torch; print(torch.__version__)') ($VPY), gloo"
if [ "$cold" = 1 ]; then echo "page cache: dropped before every measurement (cold loads)"
else echo "page cache: CANNOT drop (/proc/sys/vm/drop_caches refused): load figures below are WARM"; fi

res="$work/results.txt"   # lines: KIND SECONDS BYTES
: > "$res"
now() { date +%s.%N; }
field() { sed -n "s/.*[ ^]$1=\([^ ]*\).*/\1/p" <<< " $2"; }
fail() { echo "bench_ckpt.sh: $1 failed:" >&2; cat "$work/err.txt" >&2; exit 1; }

run_dd_write() {
  drop
  "$bin" prime "$prime_gib" > /dev/null
  local t0 t1
  t0="$(now)"
  dd if=/dev/zero of="$work/dd.bin" bs=16M count="$bytes" iflag=count_bytes conv=fsync 2> "$work/err.txt" || fail dd
  t1="$(now)"
  rm -f "$work/dd.bin"
  local s; s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')"
  echo "save_dd $s $bytes" >> "$res"; echo "  dd write           $s s"
}
run_ckpt_save() {   # ROUND
  drop
  local out
  out="$("$bin" save "$work/ckpt" "$gib" "$1" 2> "$work/err.txt")" || fail "bench_ckpt save"
  echo "save_ckpt $(field seconds "$out") $(field bytes "$out")" >> "$res"
  echo "commit_ckpt $(field commit_s "$out") 0" >> "$res"
  echo "user_ckpt $(field user_s "$out") 0" >> "$res"
  echo "  ckpt save          $(field seconds "$out") s (rank file write+fsync $(field write_s "$out") s, commit" \
       "$(field commit_s "$out") s; cpu user $(field user_s "$out") s, sys $(field sys_s "$out") s)"
}
run_raw_write() {
  drop
  local out
  out="$("$bin" raw "$work/raw.bin" "$gib" 2> "$work/err.txt")" || fail "bench_ckpt raw"
  rm -f "$work/raw.bin"
  echo "save_raw $(field seconds "$out") $(field bytes "$out")" >> "$res"
  echo "  raw pwrite+fsync   $(field seconds "$out") s (pwrite $(field pwrite_s "$out") s, fsync $(field fsync_s "$out") s;" \
       "cpu user $(field user_s "$out") s, sys $(field sys_s "$out") s)"
}
run_h5_write() {
  drop
  local out
  out="$("$bin" h5 "$work/h5.h5" "$gib" 2> "$work/err.txt")" || fail "bench_ckpt h5"
  rm -f "$work/h5.h5"
  echo "save_h5 $(field seconds "$out") $(field bytes "$out")" >> "$res"
  echo "user_h5 $(field user_s "$out") 0" >> "$res"
  echo "  HDF5 only          $(field seconds "$out") s (cpu user $(field user_s "$out") s, sys $(field sys_s "$out") s)"
}
run_torch_save() {
  [ "$have_torch" = 1 ] || return 0
  drop
  local out
  out="$("$PY" "$here/torch_save.py" save "$work/shapes.txt" "$work/state.pt" 2> "$work/err.txt")" || fail "torch_save.py save"
  echo "save_torch $(field seconds "$out") $(field bytes "$out")" >> "$res"
  echo "  torch.save         $(field seconds "$out") s"
}
run_ckpt_load() {   # ROUND [--boxes]
  drop
  local out kind=load_ckpt label="ckpt load (whole)"
  [ "${2:-}" = --boxes ] && { kind=load_boxes; label="ckpt load (boxes)"; }
  out="$("$bin" load "$work/ckpt/step_$(printf %08d "$1")" "$gib" ${2:-} 2> "$work/err.txt")" || fail "bench_ckpt load"
  echo "$kind $(field seconds "$out") $(field bytes "$out")" >> "$res"
  printf '  %-18s %s s (open %s s; cpu user %s s, sys %s s)\n' "$label" "$(field seconds "$out")" \
    "$(field open_s "$out")" "$(field user_s "$out")" "$(field sys_s "$out")"
}
run_dd_read() {   # ROUND
  drop
  "$bin" prime "$prime_gib" > /dev/null
  local t0 t1 f n=0
  t0="$(now)"
  for f in "$work/ckpt/step_$(printf %08d "$1")"/rank_*.h5; do
    dd if="$f" of=/dev/null bs=16M 2> "$work/err.txt" || fail "dd read"
    n=$((n + $(stat -c %s "$f")))
  done
  t1="$(now)"
  local s; s="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')"
  echo "load_dd $s $n" >> "$res"; echo "  dd read rank file  $s s"
}
run_torch_load() {
  [ "$have_torch" = 1 ] || return 0
  drop
  local out
  out="$("$PY" "$here/torch_save.py" load "$work/shapes.txt" "$work/state.pt" 2> "$work/err.txt")" || fail "torch_save.py load"
  echo "load_torch $(field seconds "$out") $(field bytes "$out")" >> "$res"
  echo "  torch.load         $(field seconds "$out") s"
}

# The multi-process comparison (see the top): SIDE (mp|dcp) MODE (save|load) LAYOUT (tp|fsdp); appends
# the tool's line to mesh.txt.
mesh="$work/mesh.txt"
: > "$mesh"
run_mesh() {
  local side="$1" mode="$2" lay="$3" out r ok=0 port pids=()
  drop
  if [ "$side" = mp ]; then
    local args=("$work/mp" 1)
    [ "$mode" = load ] && args=("$work/mp/step_00000001")
    out="$(OPENBLAS_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np "$procs" "$mesh_bin" "$mode" \
           "$work/shapes.txt" "${args[@]}" "$lay" 2> "$work/err.txt")" || fail "bench_ckpt_mesh $mode $lay"
  else
    port="$("$VPY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
    for ((r = 0; r < procs; r++)); do
      MASTER_ADDR=127.0.0.1 MASTER_PORT="$port" RANK="$r" LOCAL_RANK="$r" WORLD_SIZE="$procs" LOCAL_WORLD_SIZE="$procs" \
        GLOO_SOCKET_IFNAME=lo OMP_NUM_THREADS=1 "$VPY" "$here/dcp_ckpt.py" "$mode" "$work/shapes.txt" "$work/dcp" "$lay" \
        > "$work/dcp_out.$r" 2> "$work/dcp_err.$r" &
      pids+=($!)
    done
    for r in "${pids[@]}"; do wait "$r" || ok=1; done
    cat "$work"/dcp_err.* > "$work/err.txt"
    [ "$ok" = 0 ] || fail "dcp_ckpt.py $mode $lay"
    out="$(cat "$work/dcp_out.0")"
  fi
  echo "$out" >> "$mesh"
  local what="$side $mode $lay"
  if [ "$mode" = save ]; then
    printf '  %-22s %s s (extra peak RSS %s MB over all ranks)\n' "$what" "$(field seconds "$out")" \
      "$(awk -v b="$(field extra_rss "$out")" 'BEGIN { printf "%.0f", b / 1e6 }')"
  else
    printf '  %-22s %s s (read %s MB for %s MB needed; extra peak RSS %s MB)\n' "$what" "$(field seconds "$out")" \
      "$(awk -v b="$(field rchar "$out")" 'BEGIN { printf "%.0f", b / 1e6 }')" \
      "$(awk -v b="$(field needed "$out")" 'BEGIN { printf "%.0f", b / 1e6 }')" \
      "$(awk -v b="$(field extra_rss "$out")" 'BEGIN { printf "%.0f", b / 1e6 }')"
  fi
}

t_start=$SECONDS
for ((r = 1; r <= rounds; r++)); do
  echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)):"
  if ((r % 2)); then run_dd_write; run_ckpt_save "$r"; run_raw_write; run_h5_write; run_torch_save
  else run_torch_save; run_h5_write; run_raw_write; run_ckpt_save "$r"; run_dd_write; fi
  if ((r % 2)); then run_ckpt_load "$r"; run_dd_read "$r"; run_torch_load; run_ckpt_load "$r" --boxes
  else run_ckpt_load "$r" --boxes; run_torch_load; run_dd_read "$r"; run_ckpt_load "$r"; fi
  rm -rf "$work/ckpt" "$work/state.pt"
done
drop
echo "async ($rounds rounds):"
out="$("$bin" async "$work/ckpt" "$gib" "$rounds" 2> "$work/err.txt")" || fail "bench_ckpt async"
while read -r line; do
  case "$line" in
    async_round*) echo "  round $(field round "$line"): memcpy $(field memcpy_s "$line") s, stall $(field stall_s "$line") s" \
                       "(library $(field lib_s "$line") s), background $(field background_s "$line") s" ;;
  esac
done <<< "$out"
a="$(grep '^async ' <<< "$out")"
rm -rf "$work/ckpt"
if [ "$mrounds" -gt 0 ]; then
  echo "multi-process, $procs processes a side ($mrounds rounds): saved as TP-$procs, loaded as TP-$procs and as FSDP-$procs"
  for ((r = 1; r <= mrounds; r++)); do
    echo "round $r (load $(cut -d' ' -f1 /proc/loadavg)):"
    if ((r % 2)); then a1=mp; a2=dcp; else a1=dcp; a2=mp; fi
    run_mesh "$a1" save tp; run_mesh "$a2" save tp
    run_mesh "$a2" load tp; run_mesh "$a1" load tp
    run_mesh "$a1" load fsdp; run_mesh "$a2" load fsdp
    rm -rf "$work/mp" "$work/dcp"
  done
fi
echo "total time $((SECONDS - t_start)) s"

"$PY" - "$res" "$rounds" "$cold" "$a" "$hash" "$mesh" "$procs" <<'EOF'
import statistics, sys
path, rounds, cold, a, hsh = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4], sys.argv[5]
mesh_path, procs = sys.argv[6], int(sys.argv[7])
secs, nbytes = {}, {}
for line in open(path):
    k, s, b = line.split()
    secs.setdefault(k, []).append(float(s))
    nbytes[k] = int(b)
def t(k, med=False):   # seconds: best (least disturbed) or median
    return statistics.median(secs[k]) if med else min(secs[k])
def mbs(k, med=False):
    return nbytes[k] / t(k, med) / 1e6
def show(label, k):
    if k not in secs:
        return f"{label:<30} (not run)"
    return f"{label:<30} {mbs(k):7.0f} MB/s  {t(k):7.3f} s   [median {mbs(k, True):.0f} MB/s]"
def ratio(k1, k2):
    return f"{mbs(k1) / mbs(k2):.2f}x [median {mbs(k1, True) / mbs(k2, True):.2f}x]"
kv = dict(x.split("=") for x in a.split()[1:])
hk = dict(x.split("=") for x in hsh.split()[1:])
B = float(kv["bytes"])
print(f"\nsummary: best of {rounds} round(s) (other jobs only ever slow a run down), median in brackets;"
      " MB = 1e6 bytes")
print(show("sync save: ckpt", "save_ckpt"))
print(show("sync save: dd conv=fsync", "save_dd"))
sr = mbs("save_ckpt") / mbs("save_dd")
print(f"  ckpt / dd = {ratio('save_ckpt', 'save_dd')}   goal >= 0.90x: {'MET' if sr >= 0.9 else 'MISSED'}")
print(show("sync save: raw pwrite+fsync", "save_raw"))
print(show("sync save: HDF5 only", "save_h5"))
print(f"  ckpt / raw = {ratio('save_ckpt', 'save_raw')}; best times: ckpt - raw = {t('save_ckpt') - t('save_raw'):.3f} s ="
      f" HDF5 container (HDF5 only - raw) {t('save_h5') - t('save_raw'):.3f} s + the rest (ckpt - HDF5 only)"
      f" {t('save_ckpt') - t('save_h5'):.3f} s;")
print(f"  the rest: hashing {float(hk['writer_s']):.3f} s (XXH3 of every checksum tile + the box, measured apart), commit"
      f" {t('commit_ckpt'):.3f} s (index.h5, fsyncs, renames, latest), dataset attributes;")
print(f"  user CPU of the save (median): ckpt {t('user_ckpt', True):.3f} s, HDF5 only {t('user_h5', True):.3f} s"
      " (the page cache copy and fsync are system time / waiting, the same for all writers)")
stall, mc = float(kv["stall_best"]), float(kv["memcpy_best"])
print(f"{'async stall: ckpt':<30} {stall * 1e3:7.1f} ms           [median {float(kv['stall_med']) * 1e3:.1f} ms]"
      f"  memcpy + begin/add/start; the library's part {float(kv['lib_med']) * 1e3:.1f} ms")
print(f"{'async peer: memcpy':<30} {mc * 1e3:7.1f} ms           [median {float(kv['memcpy_med']) * 1e3:.1f} ms]"
      f"  {B / mc / 1e6:.0f} MB/s")
sm = float(kv["stall_med"]) / float(kv["memcpy_med"])
print(f"  stall / memcpy = {stall / mc:.2f}x [median {sm:.2f}x]   goal <= 1.50x: {'MET' if stall / mc <= 1.5 else 'MISSED'}")
bg = float(kv["background_best"])
print(f"{'async background write':<30} {B / bg / 1e6:7.0f} MB/s  {bg:7.3f} s   [median {float(kv['background_med']):.3f} s]"
      "  write + fsync on the writer thread, commit in wait")
print(show("load" + ("" if cold else " (WARM)") + ": ckpt whole tensors", "load_ckpt"))
print(show("load: ckpt per saved box", "load_boxes"))
print(show("load: dd of the rank file", "load_dd"))
print(f"  ckpt whole / dd = {ratio('load_ckpt', 'load_dd')}   ckpt boxes / dd = {ratio('load_boxes', 'load_dd')}")
lr = mbs("load_ckpt") / mbs("load_dd")
print(f"  goal: cold load >= 0.95x dd: {lr:.2f}x [median {mbs('load_ckpt', True) / mbs('load_dd', True):.2f}x]"
      f" {'MET' if lr >= 0.95 else 'MISSED'}" + ("" if cold else " (WARM loads: not a cold figure)"))
print(f"  (verifying checksums: ~{float(hk['one_pass_s']):.3f} s of XXH3 over every byte, measured apart)")
if "save_torch" in secs:
    print(show("torch.save + fsync", "save_torch"))
    print(show("torch.load", "load_torch"))
    print(f"  ckpt save / torch.save = {ratio('save_ckpt', 'save_torch')}   "
          f"ckpt load (whole) / torch.load = {ratio('load_ckpt', 'load_torch')}")
runs = {}   # (side, mode, layout) -> list of {key: float}
for line in open(mesh_path):
    f = line.split()
    if not f:
        continue
    side, mode = f[0].split("_")
    kv = dict(x.split("=") for x in f[1:])
    runs.setdefault((side, mode, kv["layout"]), []).append({k: float(v) for k, v in kv.items() if k != "layout"})
if runs:
    def vals(side, mode, lay, key):
        return [r[key] for r in runs[(side, mode, lay)]]
    def best(side, mode, lay):
        return min(vals(side, mode, lay, "seconds"))
    def med(side, mode, lay, key="seconds"):
        return statistics.median(vals(side, mode, lay, key))
    state = runs[("mesh", "save", "tp")][0]["state"]
    n = len(runs[("mesh", "save", "tp")])
    print(f"\nmulti-process, {procs} processes a side: meshpoint (mpirun, ckpt/) and PyTorch DCP (gloo,"
          f" FileSystemWriter sync_files=True / FileSystemReader), {state / 1e6:.0f} MB of state saved as TP-{procs};"
          f" best of {n} round(s), median in brackets")
    print(f"{'':<34} {'meshpoint':>22} {'DCP':>22}   meshpoint speed / DCP")
    for label, mode, lay in (("save TP (+ fsync)", "save", "tp"), ("cold load, same layout TP", "load", "tp"),
                             (f"cold load, other layout FSDP", "load", "fsdp")):
        cells = []
        for side in ("mesh", "dcp"):
            # save: the bytes of the state (replicated norms once); load: the bytes of the target shards
            by = state if mode == "save" else runs[(side, mode, lay)][0]["needed"]
            cells.append(f"{best(side, mode, lay):6.3f} s {by / best(side, mode, lay) / 1e6:6.0f} MB/s")
        r = best("dcp", mode, lay) / best("mesh", mode, lay)
        rm = med("dcp", mode, lay) / med("mesh", mode, lay)
        print(f"{label:<34} {cells[0]:>22} {cells[1]:>22}   {r:.2f}x [median {rm:.2f}x]")
    for lay, label in (("fsdp", "other layout FSDP"), ("tp", "same layout TP")):
        m = [med(s, "load", lay, "rchar") / runs[(s, "load", lay)][0]["needed"] for s in ("mesh", "dcp")]
        print(f"{'read / needed, ' + label:<34} {m[0]:>21.3f}x {m[1]:>21.3f}x   (rchar: read syscalls, all ranks)")
    for lay, label in (("fsdp", "other layout"), ("tp", "same layout")):
        lib = med("mesh", "load", lay, "lib_read") / runs[("mesh", "load", lay)][0]["needed"]
        dr = med("dcp", "load", lay, "dcp_read") / runs[("dcp", "load", lay)][0]["needed"]
        print(f"{'  own counters, ' + label:<34} {lib:>21.3f}x {dr:>21.3f}x   (ckpt_reader_io; DCP: stored items it"
              " reads whole)")
    for label, mode, lay in (("extra peak RSS / state: save", "save", "tp"), ("  load same layout", "load", "tp"),
                             ("  load other layout", "load", "fsdp")):
        m = [med(s, mode, lay, "extra_rss") / runs[(s, mode, lay)][0]["state"] for s in ("mesh", "dcp")]
        print(f"{label:<34} {m[0]:>21.3f}x {m[1]:>21.3f}x   (VmHWM - VmRSS before, all ranks, median)")
    m = [med(s, "load", "fsdp", "hwm") / runs[(s, "load", "fsdp")][0]["state"] for s in ("mesh", "dcp")]
    print(f"{'  whole peak RSS / state (FSDP)':<34} {m[0]:>21.2f}x {m[1]:>21.2f}x   (VmHWM, all ranks: + program,"
          " libraries, interpreter)")
if not cold:
    print("NOTE: the page cache could not be dropped: every load figure above is WARM")
EOF
