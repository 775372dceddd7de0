#!/bin/sh
# tests/ckpt_planned_same.sh TOOL MPIEXEC BIN CONFIG WORK — the collective load open (ckpt_open_planned)
# plans and reads exactly as ckpt_open (the whole index, every box expanded: the oracle) on 1, 2, 3, 5
# and 8 ranks, and on 5 and 8 with rank 0 planning in rounds of 2 and 3 ranks (the fault ckpt_gather_ranks)
# (tool_ckpt_mpi planned-same: per rank, regions that cut every tensor by rows and by columns, and a
# tensor the checkpoint lacks; the same saved boxes in the same order — rank file, dataset path,
# place, checksums — and the same bytes), for checkpoints of every format version:
#   v3_tool   tool_ckpt_mpi save on 4 ranks (dim-0 / dim-1 / reversed / 2-D grid / replicated boxes)
#   v3_zstd   the same on 3 ranks, zstd level 3
#   v3_init   meshpoint init, tp 2 x dp 3 (an odd mesh: uneven FSDP groups, runs of a training layout)
#   v2        the checked-in v2 fixture tests/data/ckpt_v2/init_tp2dp1 (dataset paths stored in the index)
#   v1        the checked-in v1 fixtures tests/data/ckpt_v1/step_0000000{1,2} (slab checksums, zstd)
set -eu
tool=$1; mpiexec=$2; bin=$3; config=$4; work=$5
case=ckpt_planned_same
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
mpi="$mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work"; mkdir -p "$work"
fail_log="$work/make.log"
$mpi -np 4 "$tool" save "$work/tool" 5 > "$fail_log" 2>&1 || fail "save on 4 ranks"
$mpi -np 3 "$tool" save "$work/zstd" 6 --zstd 3 > "$fail_log" 2>&1 || fail "zstd save on 3 ranks"
"$bin" init --config "$config" --tp 2 --dp 3 --out "$work/init" > "$fail_log" 2>&1 || fail "init tp 2 x dp 3"
cp -r "$src/tests/data/ckpt_v2/init_tp2dp1" "$work/v2"
cp -r "$src/tests/data/ckpt_v1" "$work/v1"
for dir in "$work/tool/step_00000005" "$work/zstd/step_00000006" "$work/init" "$work/v2" \
           "$work/v1/step_00000001" "$work/v1/step_00000002"; do
    for run in 1 2 3 5 8 "5 2" "8 3"; do   # "NP R": rank 0 plans in rounds of R ranks
        set -- $run
        np=$1; rounds=${2:-}
        fail_log="$work/same.log"
        env ${rounds:+MP_FAULT=ckpt_gather_ranks:$rounds} $mpi -np $np "$tool" planned-same "$dir" > "$fail_log" 2>&1 ||
            fail "planned-same $dir on $np ranks${rounds:+ (rounds of $rounds)}"
        [ "$(grep -c 'saved boxes the same as ckpt_open' "$fail_log")" -eq $np ] || fail "not every rank compared ($dir, $np ranks)"
        ! grep -q ' 0 saved boxes' "$fail_log" || fail "a rank compared no box ($dir, $np ranks)"
    done
    echo "ok: $dir"
done
echo "ok: the collective open plans and reads as ckpt_open for v3, v2 and v1 checkpoints on 1, 2, 3, 5, 8 ranks"
