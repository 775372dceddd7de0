#!/usr/bin/env bash
# bench/bench_scale.sh [--fast] [BUILD_DIR] — checkpoint costs at cluster scale, simulated (no tensor
# data): bench/bench_scale.c stands for one rank of a tp 8 x dp N world of Llama-2-7B, Llama-2-70B and
# Llama-3.1-405B shapes and runs the library's real save planning, layout exchange, index writer, index
# reader and load planning for that rank. Prints the table of docs/BENCH_SCALE.md:
#   own boxes / list   boxes this rank saves and the bytes of its box list (what the exchange sends)
#   recv r0, recv rN   bytes the collectives of a save deliver to rank 0 and to the last rank
#   index              index.h5 bytes (rank 0 builds it; "-" where the world's boxes exceed the budget
#                      MAX_BOXES, see below)
#   idx read           bytes the last rank reads from index.h5 to open the checkpoint (load)
#   r0 commit, r0 MiB  rank 0's commit (layout build, checks, index write; median of ROUNDS) and its peak
#                      resident memory above start
#   save plan          the last rank's own planning (adding its boxes)
#   load s, load MiB   the last rank's ckpt_open + planning of its boxes (median of ROUNDS), peak memory
#   x                  growth factor of a column against the world 8x smaller (linear in world = 8.0)
# A second table: the collective load open (ckpt_open_planned), on the same index:
#   idx read r0, rN    bytes rank 0 reads from index.h5; the last rank's index.h5 opens (ckpt_index_reads:
#                      0) and the bytes it read from any file during the open (rchar, the pipe excluded)
#   recv r0, rN        bytes the open's collectives deliver: rank 0 every rank's region list, rank N its part
#   share rN           rank N's part against its share of the index: the tensor table (every rank loads
#                      every tensor) + the box-describing tables (v3 runs, v2 boxes) and file table / world
#   r0 s, r0 MiB       rank 0's open (read, plan every rank, pack) and its peak memory
#   rN s, rN MiB       the last rank's own work in the open (not the wait for rank 0) + its planning, memory
# The rank-0 index build and the loads run only where the world has at most MAX_BOXES boxes (default
# 1.2M: rank 0's memory and time on this machine). The last rank's save runs for every world up to
# MAX_WORLD_<model>. --fast: Llama-2-7B at worlds 8 and 64 only, one round (a quick check; the test
# tests/scale.cmake runs it). Every run is a fresh process; times are medians of ROUNDS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
fast=0
if [ "${1:-}" = "--fast" ]; then fast=1; shift; fi
build=${1:-build}
bin=$build/bench_scale
[ -x "$bin" ] || { echo "bench_scale.sh: $bin missing (cmake --build $build --target bench_scale)" >&2; exit 2; }
ROUNDS=${ROUNDS:-3}
MAX_BOXES=${MAX_BOXES:-1200000}
work=$(mktemp -d /tmp/bench_scale.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ $fast = 1 ]; then
    models="7b"; worlds_7b="8 64"; ROUNDS=1
else
    models="7b 70b 405b"
    worlds_7b="8 64 512 4096 16384"; worlds_70b="8 64 512 4096"; worlds_405b="8 64 512 4096"
fi
tp=8
planned_rows=()

# key VALUE of a "mode key=value ..." line
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
# median of numbers on stdin
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
mib() { awk -v b="$1" 'BEGIN { if (b == "-") print "-"; else printf "%.1f", b / 1048576 }'; }
kib_mib() { awk -v k="$1" 'BEGIN { if (k == "-") print "-"; else printf "%.0f", k / 1024 }'; }
# growth of value $1 against $2 (previous world), "-" when either is missing
grow() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.1f", a / b }'; }

# one measured run (fresh process): prints its line, fails the script on error
one() { "$bin" "$@" || { echo "bench_scale.sh: bench_scale $* failed" >&2; exit 1; }; }

echo "| model | world | own boxes | list | recv r0 | recv rN (x) | index (x) | idx read rN (x) | r0 commit s | r0 MiB | save plan s | load s (x) | load MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for m in $models; do
    wv=worlds_$m
    p_recvN=-; p_index=-; p_read=-; p_load=-
    for W in ${!wv}; do
        dp=$((W / tp)); last=$((W - 1))
        [ $dp -ge 1 ] || continue
        d=$work/$m.$W; mkdir -p "$d"
        sN=$(one save $m $tp $dp $last "$d")
        boxes=$(kv boxes "$sN"); list=$(kv list_bytes "$sN"); recvN=$(kv recv_bytes "$sN"); plan=$(kv plan_s "$sN")
        recv0=-; index=-; c0=-; m0=-; read=-; load=-; lm=-
        r0boxes=$((boxes * W))
        if [ $r0boxes -le "$MAX_BOXES" ]; then
            cs=(); ls_=(); s0=""; lN=""
            for ((i = 0; i < ROUNDS; i++)); do
                rm -rf "$d/ckpt"
                s0=$(one save $m $tp $dp 0 "$d"); cs+=("$(kv commit_s "$s0")")
                lN=$(one load $m $tp $dp $last "$d")
                ls_+=("$(awk -v a="$(kv open_s "$lN")" -v b="$(kv plan_s "$lN")" 'BEGIN{print a+b}')")
            done
            recv0=$(kv recv_bytes "$s0"); index=$(kv index_bytes "$s0"); m0=$(kib_mib "$(kv peak_kib "$s0")")
            c0=$(printf '%s\n' "${cs[@]}" | median); load=$(printf '%s\n' "${ls_[@]}" | median)
            read=$(kv index_read_bytes "$lN"); lm=$(kib_mib "$(kv peak_kib "$lN")")
            rm -rf "$d/ckpt"
        fi
        echo "| $m | $W | $boxes | $(mib $list) MiB | $(mib $recv0) MiB | $(mib $recvN) MiB ($(grow $recvN $p_recvN)) |" \
             "$(mib $index) MiB ($(grow $index $p_index)) | $(mib $read) MiB ($(grow $read $p_read)) | $c0 | $m0 | $plan |" \
             "$load ($(grow $load $p_load)) | $lm |"
        p_recvN=$recvN; p_index=$index; p_read=$read; p_load=$load
        if [ "$index" != "-" ]; then   # the collective open of the same world's index (made again)
            rm -rf "$d/ckpt"; one save $m $tp $dp 0 "$d" > /dev/null
            o0=(); oN=(); q0=""; qN=""
            for ((i = 0; i < ROUNDS; i++)); do
                q0=$(one planned $m $tp $dp 0 "$d"); o0+=("$(awk -v a="$(kv open_s "$q0")" -v b="$(kv plan_s "$q0")" 'BEGIN{print a+b}')")
                qN=$(one planned $m $tp $dp $last "$d"); oN+=("$(awk -v a="$(kv open_s "$qN")" -v b="$(kv plan_s "$qN")" 'BEGIN{print a+b}')")
            done
            # rank N's share of the index: format v3 keeps one row per tensor, which every rank needs (it
            # loads every tensor), and one per run of boxes, of which it needs about 1/world
            sh=$(/usr/bin/python3 -c '
import sys, glob, h5py
f = h5py.File(glob.glob(sys.argv[1] + "/**/index.h5", recursive=True)[0], "r")
size = lambda n: f[n].id.get_storage_size() if n in f else 0
print(size("layout/tensors") + (size("layout/runs") + size("layout/boxes") + size("layout/files")) // int(sys.argv[2]))' "$d" "$W")
            share=$(awk -v r="$(kv recv_bytes "$qN")" -v s="$sh" 'BEGIN{printf "%.2f", r / s}')
            planned_rows+=("| $m | $W | $(mib "$(kv index_read_bytes "$q0")") MiB | $(kv index_reads "$qN") opens ($(kv index_read_bytes "$qN") B of any file) |"\
" $(mib "$(kv recv_bytes "$q0")") MiB | $(mib "$(kv recv_bytes "$qN")") MiB | ${share}x |"\
" $(printf '%s\n' "${o0[@]}" | median) | $(kib_mib "$(kv peak_kib "$q0")") | $(printf '%s\n' "${oN[@]}" | median) |"\
" $(kib_mib "$(kv peak_kib "$qN")") |")
            rm -rf "$d/ckpt"
        fi
    done
done
echo
echo "| model | world | idx read r0 | idx read rN | recv r0 | recv rN | share rN | r0 s | r0 MiB | rN s | rN MiB |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for row in "${planned_rows[@]}"; do echo "$row"; done
