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
#   - offline writers group too: `reshard --ckpt-files 2` (tp 2 x dp 2) writes the files training's
#     --ckpt-files 2 did, tensors equal; --ckpt-files 4 (one file) and 3 (files of 3 and 1 ranks) on two
#     worker processes: equal to the per-rank save, and training resumes from the latter with bitwise
#     the per-rank resume's losses; --plan prints one line per file (tp 2 x dp 3 in files of 4); import and init with --ckpt-files 4: one file, equal to theirs
#     per rank;
#   - --ckpt-files with --async-save, a bad value, and node offline: refused (exit 2) naming the flag.
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
# the memory plan counts a group leader's two checkpoint band buffers where files group ranks (every rank:
# which one leads is known at the save), and only there
grep -q 'checkpoint band buffers' "$work/rank.log" && fail "rank: the plan counts band buffers: $(grep 'memory plan, rank 0' "$work/rank.log")"
for f in 2 node; do
    grep -q 'checkpoint staging 0 B, checkpoint band buffers 32.0 MiB' "$work/$f.log" ||
        fail "$f: the plan does not count the leader's band buffers: $(grep 'memory plan, rank 0' "$work/$f.log")"
done
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
# offline writers group files too: reshard, import and init with --ckpt-files N
fail_log="$work/reshard_g2.log"
"$bin" reshard "$(ck rank)" --tp 2 --dp 2 --ckpt-files 2 --out "$work/reshard_g2" >"$fail_log" 2>&1 || fail "reshard --ckpt-files 2"
grep -q "(2 rank files" "$fail_log" || fail "reshard --ckpt-files 2: summary does not say 2 rank files"
[ "$(files "$work/reshard_g2")" = "rank_00000.h5 rank_00002.h5" ] || fail "reshard --ckpt-files 2: files $(files "$work/reshard_g2")"
[ "$(ls "$work/reshard_g2" | grep -c '^rank_')" -eq 2 ] || fail "reshard --ckpt-files 2: on disk $(ls "$work/reshard_g2")"
fail_log="$work/equal_reshard_g2.log"
"$equal" "$(ck 2)" "$work/reshard_g2" >"$fail_log" 2>&1 || fail "reshard --ckpt-files 2 differs from training's --ckpt-files 2 save"
fail_log="$work/reshard_g4_mpi.log"   # two workers, one file: the worker without a file commits with the other
$mpi -np 2 "$bin" reshard "$(ck 2)" --tp 2 --dp 2 --ckpt-files 4 --out "$work/reshard_g4" >"$fail_log" 2>&1 ||
    fail "reshard --ckpt-files 4 on 2 processes"
[ "$(files "$work/reshard_g4")" = "rank_00000.h5" ] || fail "reshard --ckpt-files 4: files $(files "$work/reshard_g4")"
fail_log="$work/equal_reshard_g4.log"
"$equal" "$(ck rank)" "$work/reshard_g4" >"$fail_log" 2>&1 || fail "reshard --ckpt-files 4 differs from the per-rank save"
fail_log="$work/reshard_g3_mpi.log"   # 4 ranks in files of 3: files of 3 and 1 rank, dealt to two workers
$mpi -np 2 "$bin" reshard "$(ck rank)" --tp 2 --dp 2 --ckpt-files 3 --out "$work/reshard_g3" >"$fail_log" 2>&1 ||
    fail "reshard --ckpt-files 3 on 2 processes"
[ "$(files "$work/reshard_g3")" = "rank_00000.h5 rank_00003.h5" ] || fail "reshard --ckpt-files 3: files $(files "$work/reshard_g3")"
fail_log="$work/equal_reshard_g3.log"
"$equal" "$(ck rank)" "$work/reshard_g3" >"$fail_log" 2>&1 || fail "reshard --ckpt-files 3 differs from the per-rank save"
d="$work/res_g3"; fail_log="$d.log"; mkdir -p "$d/checkpoints"; cp -r "$work/reshard_g3" "$d/checkpoints/step_00000003"
echo step_00000003 > "$d/checkpoints/latest"
$mpi -np 4 "$bin" $common --steps 6 --ckpt-every 6 --tp 2 --dp 2 --run-dir "$d" --resume >"$fail_log" 2>&1 ||
    fail "resume on tp 2 x dp 2 from the grouped reshard"
grep -o '"loss": [^,]*' "$d/metrics.jsonl" > "$d.loss"
tail -n 3 "$work/res_tp2dp2_rank.loss" | cmp -s - "$d.loss" ||   # steps 4..6 (that run dir also holds 1..3)
    fail "resume from the grouped reshard: losses differ from the per-rank resume's steps 4-6"
grep -q "resumed from .*step_00000003 at step 3" "$fail_log" || fail "resume from the grouped reshard did not resume at 3"
"$bin" reshard --plan "$(ck rank)" --tp 2 --dp 3 --ckpt-files 4 > "$work/plan_g4.txt" 2>&1 || fail "reshard --plan --ckpt-files 4"
grep -q "^target ranks 0-3 (rank_00000.h5):" "$work/plan_g4.txt" && grep -q "^target ranks 4-5 (rank_00004.h5):" "$work/plan_g4.txt" &&
    [ "$(grep -c '^target' "$work/plan_g4.txt")" -eq 2 ] || { fail_log="$work/plan_g4.txt"; fail "reshard --plan --ckpt-files 4: not two files 0-3 and 4-5"; }
for f in rank 4; do
    fail_log="$work/import_$f.log"
    "$bin" import "$work/export_rank" --tp 2 --dp 2 --ckpt-files $f --out "$work/import_$f" >"$fail_log" 2>&1 || fail "import --ckpt-files $f"
    fail_log="$work/init_$f.log"
    "$bin" init --config "$config" --tp 2 --dp 2 --ckpt-files $f --out "$work/init_$f" >"$fail_log" 2>&1 || fail "init --ckpt-files $f"
done
[ "$(files "$work/import_4")" = "rank_00000.h5" ] && [ "$(files "$work/init_4")" = "rank_00000.h5" ] ||
    fail "import / init --ckpt-files 4: files $(files "$work/import_4") / $(files "$work/init_4")"
for x in import init; do
    fail_log="$work/equal_$x.log"
    "$equal" "$work/${x}_rank" "$work/${x}_4" >"$fail_log" 2>&1 || fail "$x --ckpt-files 4 differs from $x's per-rank files"
done
echo "reshard, import and init with --ckpt-files N: the leaders' files, equal to per-rank ones and to training's; resumed"
set +e   # expect checks the exit status itself
expect 2 "ckpt-files.*async-save" "$work/async.log" $mpi -np 2 "$bin" $common --steps 2 --dp 2 --run-dir "$work/async" --ckpt-files node --async-save
expect 2 "ckpt-files.*expected rank, node or a number" "$work/bad.log" "$bin" $common --steps 2 --run-dir "$work/bad" --ckpt-files nodes
expect 2 "ckpt-files node: an offline conversion knows no nodes" "$work/rs_node.log" "$bin" reshard "$(ck rank)" --tp 1 --dp 1 --ckpt-files node --out "$work/rs_node"
expect 2 "ckpt-files.*expected rank, node or a number" "$work/rs_bad.log" "$bin" import "$work/export_rank" --ckpt-files 0 --out "$work/imp_bad"
echo "ok: files of several ranks through training, resume, reshard and export"
