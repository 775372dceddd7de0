#!/bin/sh
# tests/ckpt_planned.sh TOOL MPIEXEC WORK — the collective load open (ckpt_open_planned): a
# checkpoint saved by 4 ranks (tool_ckpt_mpi save) is opened collectively on 1, 2, 4 and 8 ranks; every
# rank reads its own and its neighbour's boxes back, and only rank 0 reads index.h5 (the tool checks
# ckpt_index_reads on every rank). Then index.h5 is damaged (truncated; then a table byte flipped, which
# only the index checksum catches): every rank of 4 must fail with MP_ECHECK and the same message, rank
# 0's.
set -eu
tool=$1; mpiexec=$2; work=$3
case=ckpt_planned
. "$(dirname "$0")/lib.sh"
mpi="$mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work"; mkdir -p "$work"
$mpi -np 4 "$tool" save "$work/root" 5 > "$work/save.log" 2>&1 || { fail_log="$work/save.log"; fail "save"; }
for np in 1 2 4 8; do
    fail_log="$work/planned_np$np.log"
    $mpi -np $np "$tool" planned "$work/root" 5 > "$fail_log" 2>&1 || fail "planned open on $np ranks"
    [ "$(grep -c 'index reads 0 (0 bytes)' "$fail_log")" -eq $((np - 1)) ] || fail "ranks other than 0 read index.h5 ($np ranks)"
    grep -q '^rank 0: .* index reads 1 ' "$fail_log" || fail "rank 0 did not read index.h5 once ($np ranks)"
done
damaged() {   # $1: what; the index is already damaged
    fail_log="$work/damaged_$1.log"
    $mpi -np 4 "$tool" planned-damaged "$work/bad" 5 > "$fail_log" 2>"$work/damaged_$1.err" || fail "damaged ($1): a rank did not fail as expected"
    [ "$(grep -c '^planned open: code' "$fail_log")" -eq 4 ] || fail "damaged ($1): not every rank reported"
    [ "$(grep '^planned open: code' "$fail_log" | sort -u | wc -l)" -eq 1 ] || fail "damaged ($1): the ranks' errors differ"
    grep -q "$2" "$fail_log" || fail "damaged ($1): the message does not say /$2/"
    cat "$fail_log"
}
cp -r "$work/root" "$work/bad"
idx="$work/bad/step_00000005/index.h5"
head -c 3000 "$work/root/step_00000005/index.h5" > "$idx"
damaged truncated "not a readable HDF5 file\|cannot be opened\|corrupt"
cp "$work/root/step_00000005/index.h5" "$idx"
/usr/bin/python3 - "$idx" <<'PY'
import sys, h5py
p = sys.argv[1]
with h5py.File(p, "r") as f:   # a byte of file 1's boxes_checksum in the table: only the index checksum covers it
    ds = f["layout/files"]
    at = ds.id.get_offset() + ds.dtype.itemsize + ds.dtype.fields["boxes_checksum"][1]
with open(p, "r+b") as fh:
    fh.seek(at)
    b = fh.read(1)
    fh.seek(at)
    fh.write(bytes([b[0] ^ 0x01]))
PY
damaged checksum "index checksum mismatch"
echo "ok: collective open on 1, 2, 4, 8 ranks, index read by rank 0 only; damaged index: the same error on every rank"
