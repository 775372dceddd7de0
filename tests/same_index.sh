#!/usr/bin/env bash
# tests/same_index.sh TOOL MPIEXEC NP WORKDIR WANT — a save of NP processes (tests/tool_ckpt_mpi save:
# every rank's boxes of the shared tensor set, deterministic values) must produce the same index as
# the writer did before the layout exchange became a gather to rank 0: WANT is the
# index_checksum (XXH3-64 over the canonical content of every table row and metadata entry, box
# checksums and tile checksums of the data included; docs/FORMAT.md, "Index checksum") that the
# previous writer (commit 6c1c6c4, one broadcast per process) produced for this save, so equality
# proves the same tensors, boxes, files, data checksums and metadata. The checkpoint is then read back
# and verified on NP ranks (tool_ckpt_mpi check), and saved again with rank 0 receiving the lists in
# rounds of 3 ranks (the fault ckpt_gather_ranks). A change of the tool's tensor set changes WANT.
# Since format v3 (no box table in the index) the compared value is the v2 index checksum rebuilt from
# the v3 files by h5py alone (tests/python/v2_index_checksum.py: runs expanded, every rank file's /boxes
# table checked against the index and joined): equal to WANT, the v3 save holds the same boxes, dataset
# names, box and tile checksums (the same data, bitwise) and metadata as the v2 writer's.
set -uo pipefail
case="same_index np$3"
. "$(dirname "$0")/lib.sh"
tool=$1 mpiexec=$2 np=$3 work=$4 want=$5
rm -rf "$work"
mkdir -p "$work"
log=$work/log
# save_and_compare WHAT [ENV=VALUE...]: a fresh save of step 7 (with the environment given), whose
# index_checksum must be WANT
save_and_compare() {
    local what=$1; shift
    rm -rf "$work/root"
    env "$@" "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$tool" save "$work/root" 7 >"$log" 2>&1 ||
        fail "$what: save failed: $(cat "$log")"
    got=$(/usr/bin/python3 "$(dirname "$0")/python/v2_index_checksum.py" "$work/root/step_00000007") ||
        fail "$what: cannot rebuild the v2 index checksum"
    [ "$got" = "$want" ] || fail "$what: index_checksum $got, the previous writer's was $want"
    echo "ok: $what: $np-process save, index_checksum $got as before"
}
save_and_compare "one gatherv round"
"$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$tool" check "$work/root" 7 >"$log" 2>&1 ||
    fail "read-back failed: $(cat "$log")"
save_and_compare "gather rounds of 3 ranks" MP_FAULT=ckpt_gather_ranks:3
rm -rf "$work"
