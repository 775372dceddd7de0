#!/bin/sh
# tests/nodefiles_train.sh MESHPOINT EQUAL_TOOL DATA CONFIG WORKDIR — training checkpoints with files of
# several ranks (meshpoint train --ckpt-files; ckpt/group.c), on tp 2 x dp 2 (4 processes, one node):
#   - the same 3 steps saved with --ckpt-files rank, 2 and node: the index lists rank_00000..3, then
#     rank_00000 + rank_00002, then rank_00000 alone; every tensor bitwise equal to the per-rank save
#     (tool_ckpt_equal); `meshpoint ckpt verify` passes on each;
#   - resumed for 3 more steps on the same mesh, on dp 2 and on one process: bitwise the same losses and
#     final checkpoint as the resume from the per-rank checkpoint on that mesh;
#   - `meshpoint reshard` (to tp 1 x dp 2) and `meshpoint export` of the node checkpoint: tensors equal to
#     those of the per-rank checkpoint's, the HF files byte for byte;
#   - --ckpt-files with --async-save, and a bad value: refused (exit 2) naming the flag.
set -eu
bin=$1; equal=$2; data=$3; config=$4; work=$5
case=nodefiles_train
. "$(dirname "$0")/lib.sh"
mpi="mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --log-every 0"
files() { /usr/bin/python3 -c 'import h5py,sys; print(" ".join(sorted(x.decode() for x in h5py.File(sys.argv[1],"r")["layout/files"]["name"])))' "$1/index.h5"; }
for f in rank 2 node; do
    fail_log="$work/$f.log"
    $mpi -np 4 "$bin" $common --steps 6 --tp 2 --dp 2 --stop-at 3 --run-dir "$work/$f" --ckpt-files $f >"$fail_log" 2>&1 ||
        fail "train --ckpt-files $f"
done
ck() { echo "$work/$1/checkpoints/step_00000003"; }
[ "$(files "$(ck rank)")" = "rank_00000.h5 rank_00001.h5 rank_00002.h5 rank_00003.h5" ] || fail "rank: files $(files "$(ck rank)")"
[ "$(files "$(ck 2)")" = "rank_00000.h5 rank_00002.h5" ] || fail "2: files $(files "$(ck 2)")"
[ "$(files "$(ck node)")" = "rank_00000.h5" ] || fail "node: files $(files "$(ck node)")"
[ "$(ls "$(ck node)" | grep -c '^rank_')" -eq 1 ] || fail "node: rank files on disk: $(ls "$(ck node)")"
for f in 2 node; do
    fail_log="$work/equal_$f.log"
    "$equal" "$(ck rank)" "$(ck $f)" >"$fail_log" 2>&1 || fail "checkpoint of --ckpt-files $f differs from the per-rank one"
    "$bin" ckpt verify "$(ck $f)" >"$work/verify_$f.log" 2>&1 || { fail_log="$work/verify_$f.log"; fail "ckpt verify ($f)"; }
done
echo "saved with --ckpt-files rank, 2, node: 4, 2, 1 files, tensors bitwise equal, verified"
# resume from each on three meshes: the same losses and final checkpoint as from the per-rank one
for mesh in tp2dp2 dp2 one; do
    for f in rank node; do
        d="$work/res_${mesh}_$f"
        cp -r "$work/$f" "$d"
        fail_log="$d.log"
        case $mesh in
        tp2dp2) $mpi -np 4 "$bin" $common --steps 6 --ckpt-every 6 --tp 2 --dp 2 --run-dir "$d" --resume --ckpt-files $f >"$fail_log" 2>&1 ;;
        dp2) $mpi -np 2 "$bin" $common --steps 6 --ckpt-every 6 --dp 2 --run-dir "$d" --resume --ckpt-files $f >"$fail_log" 2>&1 ;;
        one) "$bin" $common --steps 6 --ckpt-every 6 --run-dir "$d" --resume --ckpt-files $f >"$fail_log" 2>&1 ;;
        esac || fail "resume on $mesh from --ckpt-files $f"
        grep -q "resumed from .*step_00000003 at step 3" "$fail_log" || fail "resume on $mesh ($f) did not resume at 3"
        grep -o '"loss": [^,]*' "$d/metrics.jsonl" > "$d.loss"
    done
    [ "$(wc -l < "$work/res_${mesh}_rank.loss")" -eq 6 ] || fail "$mesh: $(wc -l < "$work/res_${mesh}_rank.loss") losses"
    cmp -s "$work/res_${mesh}_rank.loss" "$work/res_${mesh}_node.loss" ||
        fail "$mesh: losses after resuming from the node checkpoint differ: $(paste "$work/res_${mesh}_rank.loss" "$work/res_${mesh}_node.loss")"
    fail_log="$work/equal_res_$mesh.log"
    "$equal" "$work/res_${mesh}_rank/checkpoints/step_00000006" "$work/res_${mesh}_node/checkpoints/step_00000006" \
        >"$fail_log" 2>&1 || fail "$mesh: final checkpoints differ"
done
[ "$(files "$work/res_tp2dp2_node/checkpoints/step_00000006")" = "rank_00000.h5" ] || fail "resumed node run: files"
echo "resumed on tp2 x dp2, dp2 and one process: bitwise the same losses and final checkpoints as from per-rank files"
# offline reshard and export of the node checkpoint equal those of the per-rank checkpoint
for f in rank node; do
    fail_log="$work/reshard_$f.log"
    "$bin" reshard "$(ck $f)" --tp 1 --dp 2 --out "$work/reshard_$f" >"$fail_log" 2>&1 || fail "reshard ($f)"
    fail_log="$work/export_$f.log"
    "$bin" export "$(ck $f)" --out "$work/export_$f" >"$fail_log" 2>&1 || fail "export ($f)"
done
fail_log="$work/equal_reshard.log"
"$equal" "$work/reshard_rank" "$work/reshard_node" >"$fail_log" 2>&1 || fail "reshards differ"
for x in $(cd "$work/export_rank" && ls); do
    cmp -s "$work/export_rank/$x" "$work/export_node/$x" || fail "export: $x differs"
done
echo "reshard and export of the node checkpoint equal the per-rank checkpoint's"
set +e   # expect checks the exit status itself
expect 2 "ckpt-files.*async-save" "$work/async.log" $mpi -np 2 "$bin" $common --steps 2 --dp 2 --run-dir "$work/async" --ckpt-files node --async-save
expect 2 "ckpt-files.*expected rank, node or a number" "$work/bad.log" "$bin" $common --steps 2 --run-dir "$work/bad" --ckpt-files nodes
echo "ok: files of several ranks through training, resume, reshard and export"
