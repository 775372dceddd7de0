#!/bin/sh
# tests/nodefiles.sh TOOL MESHPOINT MPIEXEC NP WORK — files of several ranks (ckpt_save_opts.ranks_per_file,
# ckpt/group.c) on NP processes of this machine (tool_ckpt_mpi save --files):
#   - --files 2, 4 and node: the index lists (and the directory holds) the files of the groups' leaders
#     only; every rank of NP and of 3 processes reads every tensor back equal to the generator, rank 0
#     runs ckpt_verify (tool check); the collective open plans and reads on NP (tool planned);
#   - nodes made by the fault ckpt_ranks_per_node (nodes of 2 and of 3 ranks): node files per
#     simulated node, groups of 2 never crossing a node;
#   - with a tensor of 1024 rows per rank and 64 KiB bands (--big --fill 65536: every member box moves
#     in several bands): h5py reads every tensor through view.h5 bitwise equal to the per-rank save's,
#     and so does `meshpoint ckpt diff` (our reader, checksums checked);
#   - failures after a good save of step 7: a member failing mid-transfer (MP_FAULT=ckpt_fail_at:group_send on
#     rank 1) or before sending (group_list: the save fails with rank 1's own message), the leader failing while writing a member's boxes (group_write on rank 0), a member killed
#     mid-transfer (MP_FAULT=ckpt_crash_at:during_rank_files on rank 1): exit non-zero (the first two with a
#     message naming the rank), no step 8, step 7 still the newest and intact;
#   - an asynchronous save with --files 2 is refused with a message.
set -eu
tool=$1; bin=$2; mpiexec=$3; np=$4; work=$5
case=nodefiles_np$np
. "$(dirname "$0")/lib.sh"
mpi="$mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work"; mkdir -p "$work"
files() { /usr/bin/python3 -c 'import h5py,sys; print(" ".join(sorted(x.decode() for x in h5py.File(sys.argv[1],"r")["layout/files"]["name"])))' "$1/index.h5"; }
ondisk() { (cd "$1" && ls | grep '^rank_' | tr '\n' ' ' | sed 's/ $//'); }
names() { for r in "$@"; do printf 'rank_%05d.h5 ' "$r"; done | sed 's/ $//'; }
save() {   # save ROOT STEP [tool flags...]
    r=$1; st=$2; shift 2
    fail_log="$work/save_$(basename "$r")_$st.log"
    $mpi -np $np "$tool" save "$r" "$st" "$@" >"$fail_log" 2>&1 || fail "save $r $st $*"
}
leaders() {   # leaders G NODE_SIZE: the lowest rank of each group of G ranks (0: the node) of each node
    /usr/bin/python3 -c '
import sys
np, g, node = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
print(" ".join(str(r) for r in range(np) if (r % node) % (g or node) == 0))' $np "$1" "$2"
}
# 1. groups on one node
for f in rank 2 4 node; do
    save "$work/$f" 7 --files $f
    d="$work/$f/step_00000007"
    case $f in rank) g=1 ;; node) g=0 ;; *) g=$f ;; esac
    want=$(names $(leaders $g $np))
    [ "$(files "$d")" = "$want" ] || fail "--files $f: index lists $(files "$d"), expected $want"
    [ "$(ondisk "$d")" = "$want" ] || fail "--files $f: directory holds $(ondisk "$d"), expected $want"
    for n in $np 3; do
        fail_log="$work/check_${f}_$n.log"
        $mpi -np $n "$tool" check "$work/$f" 7 >"$fail_log" 2>&1 || fail "check of --files $f on $n processes"
    done
    fail_log="$work/planned_$f.log"
    $mpi -np $np "$tool" planned "$work/$f" 7 >"$fail_log" 2>&1 || fail "collective open of --files $f"
done
echo "--files rank, 2, 4, node: the leaders' files only, read back on $np and 3 processes, planned open"
# 2. simulated nodes
for v in "node 2" "2 3" "node 3"; do
    set -- $v
    r="$work/sim_$1_$2"
    MP_FAULT=ckpt_ranks_per_node:$2 save "$r" 7 --files $1
    fail_log="$work/check_sim_$1_$2.log"
    $mpi -np $np "$tool" check "$r" 7 >"$fail_log" 2>&1 || fail "check of --files $1 on nodes of $2"
    g=$1; [ "$g" = node ] && g=0
    want=$(names $(leaders $g $2))
    [ "$(files "$r/step_00000007")" = "$want" ] || fail "--files $1 on nodes of $2: $(files "$r/step_00000007"), expected $want"
done
echo "nodes of 2 and 3 ranks (the fault ckpt_ranks_per_node): files per node, groups within nodes"
# 3. several bands per member box: h5py through view.h5, bitwise equal to the per-rank save
for f in rank 2 node; do
    save "$work/big_$f" 7 --files $f --big --fill 65536
    [ $f = rank ] && continue
    fail_log="$work/diff_big_$f.log"   # our reader: every box checksum and tile checked on the way
    "$bin" ckpt diff "$work/big_rank/step_00000007" "$work/big_$f/step_00000007" >"$fail_log" 2>&1 ||
        fail "ckpt diff of --big --files $f against the per-rank save"
    grep -q "result: equal (bitwise)" "$fail_log" || fail "ckpt diff: --big --files $f not bitwise equal"
done
fail_log="$work/h5py.log"
/usr/bin/python3 - "$work/big_rank/step_00000007" "$work/big_2/step_00000007" "$work/big_node/step_00000007" \
    >"$fail_log" 2>&1 <<'PY' || fail "h5py: the views differ"
import sys, h5py, numpy as np
ref, others = sys.argv[1], sys.argv[2:]
def tensors(d):
    with h5py.File(d + "/index.h5", "r") as idx:
        names = [t["name"].decode() for t in idx["layout/tensors"][...]]
    out = {}
    with h5py.File(d + "/view.h5", "r") as v:   # the views alone, as any HDF5 tool reads them
        for n in names:
            ds = v["view/" + n]
            assert ds.is_virtual, (d, n)
            out[n] = ds[...]
    return out
want = tensors(ref)
assert "model/big.weight" in want and len(want) == 7, sorted(want)
for d in others:
    got = tensors(d)
    assert sorted(got) == sorted(want), (d, sorted(got))
    for n, a in want.items():
        b = got[n]
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a.view(np.uint8), b.view(np.uint8)), (d, n)
print("views equal:", len(want), "tensors,", sum(a.nbytes for a in want.values()), "bytes")
PY
echo "1024-row boxes in 64 KiB bands: view.h5 read by h5py and ckpt diff bitwise equal to the per-rank save"
# 4. failures: the earlier checkpoint stays the newest and intact
g=2
intact() {   # after a failed save of step 8 into $work/fail
    [ ! -e "$work/fail/step_00000008" ] || fail "$1: step 8 was published"
    [ "$(cat "$work/fail/latest")" = step_00000007 ] || fail "$1: latest is $(cat "$work/fail/latest")"
    fail_log="$work/check_after_$1.log"
    $mpi -np $np "$tool" check "$work/fail" 7 >"$fail_log" 2>&1 || fail "$1: step 7 does not read back"
}
save "$work/fail" 7 --files $g
set +e   # expect checks the exit status itself
expect 1 "save failed: .*rank 1.*fault ckpt_fail_at:group_send: rank 1 fails sending" "$work/fail_send.log" \
    $mpi -np $np -x MP_FAULT=ckpt_fail_at:group_send,ckpt_fail_rank:1 "$tool" save "$work/fail" 8 --files $g --big --fill 65536
intact member_send
expect 1 "save failed: .*\[rank 1\] fault ckpt_fail_at:group_list: rank 1 fails before sending" "$work/fail_list.log" \
    $mpi -np $np -x MP_FAULT=ckpt_fail_at:group_list,ckpt_fail_rank:1 "$tool" save "$work/fail" 8 --files $g --big --fill 65536
intact member_list
expect 1 "save failed: .*\[rank 0\] .*fault ckpt_fail_at:group_write: rank 0 fails writing the boxes of rank 1" "$work/fail_write.log" \
    $mpi -np $np -x MP_FAULT=ckpt_fail_at:group_write,ckpt_fail_rank:0 "$tool" save "$work/fail" 8 --files $g --big --fill 65536
intact leader_write
timeout 120 $mpi -np $np -x MP_FAULT=ckpt_crash_at:during_rank_files,ckpt_crash_rank:1 "$tool" save "$work/fail" 8 \
    --files $g --big --fill 65536 >"$work/crash.log" 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -ne 124 ] || { fail_log="$work/crash.log"; fail "member killed mid-transfer: exit $rc"; }
grep -q "fault ckpt_crash_at:during_rank_files: killing rank 1" "$work/crash.log" || { fail_log="$work/crash.log"; fail "the crash point was not reached"; }
intact member_killed
expect 1 "save failed: .*asynchronous save.*ranks_per_file 2.*ckpt_save_commit" "$work/async.log" \
    $mpi -np $np "$tool" save "$work/async" 8 --files 2 --async
set -e
echo "failures (member before and mid-transfer, leader writing, member killed): step 7 kept; async refused"
echo "ok: files of several ranks on $np processes"
