#!/usr/bin/env bash
# bench/bench_nodefiles.sh [BUILD_DIR] — what a save costs the file system with one file per rank
# (default) against one file per node (ckpt_save_opts.ranks_per_file, `train --ckpt-files node`;
# docs/BENCH_SCALE.md, "Files on a parallel file system"), for 4- and 8-process saves of
# tests/tool_ckpt_mpi (its tensor set plus --big: 1024 x 64 fp32 rows per rank) on this machine:
#   files       rank files created in the checkpoint directory (open with O_CREAT)
#   path ops    system calls naming a path inside the checkpoint root (open, stat, rename, mkdir, ...),
#               all processes, from `strace -ff -e trace=%file`
#   fsyncs      fsync + fdatasync calls, all processes
#   save s      the save as rank 0 sees it (ckpt_stats.stall_s: begin to commit returned), median of
#               ROUNDS (default 3) fresh jobs without strace; the peer of "node" is "rank" of the same
#               world, measured in the same run, and the ratio is node / rank.
# The counts are exact (one strace'd job each); the times are of a shared 2-core machine with a local
# disk, where a file's metadata costs microseconds, not a metadata server's round trip.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
tool=$build/tool_ckpt_mpi
rounds=${ROUNDS:-3}
[ -x "$tool" ] || { echo "no $tool: cmake --build $build --target tool_ckpt_mpi" >&2; exit 2; }
command -v strace >/dev/null || { echo "strace is required" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1
mpi="mpiexec --allow-run-as-root --oversubscribe"
work=$(mktemp -d /tmp/bench_nodefiles.XXXXXX)
trap 'rm -rf "$work"' EXIT

counts() {   # counts NP FILES -> "files pathops fsyncs"
    local np=$1 f=$2 root="$work/strace_$1_$2" tr="$work/tr_$1_$2"
    mkdir -p "$tr"
    strace -f -ff -qq -o "$tr/t" -e trace=%file,fsync,fdatasync \
        $mpi -np "$np" "$tool" save "$root" 7 --files "$f" --big >/dev/null 2>&1
    python3 - "$tr" "$root" <<'PY'
import glob, re, sys
tr, root = sys.argv[1], sys.argv[2]
files, ops, syncs = set(), 0, 0
for p in glob.glob(tr + "/t.*"):
    for line in open(p, errors="replace"):
        if re.match(r"(fsync|fdatasync)\(", line):
            syncs += 1
        elif root in line:
            ops += 1
            m = re.search(r'open(?:at)?\(.*?"([^"]*/rank_\d+\.h5)".*O_CREAT', line)
            if m:
                files.add(m.group(1))
print(len(files), ops, syncs)
PY
}

save_s() {   # save_s NP FILES ROUND -> rank 0's save seconds
    local r="$work/time_$1_$2_$3"
    $mpi -np "$1" "$tool" save "$r" 7 --files "$2" --big 2>&1 | sed -n 's/.*rank 0 saved step 7 in \([0-9.]*\) s.*/\1/p'
    rm -rf "$r"
}

median() { sort -g | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

printf '%-4s %-5s %6s %9s %7s %9s %7s\n' np files files "path ops" fsyncs "save s" "ratio"
for np in 4 8; do
    declare -A med=()
    for f in rank node; do
        read -r nf ops syncs < <(counts "$np" "$f")
        ts=""
        for k in $(seq "$rounds"); do ts="$ts $(save_s "$np" "$f" "$k")"; done
        med[$f]=$(echo $ts | tr ' ' '\n' | median)
        ratio=$(awk -v a="${med[$f]}" -v b="${med[rank]}" 'BEGIN {printf "%.2f", a / b}')
        printf '%-4s %-5s %6s %9s %7s %9s %7s   (rounds:%s)\n' "$np" "$f" "$nf" "$ops" "$syncs" "${med[$f]}" "$ratio" "$ts"
    done
    unset med
done
