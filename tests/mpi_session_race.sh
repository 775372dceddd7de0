#!/usr/bin/env bash
# tests/mpi_session_race.sh MPI_PROG — the race tests/tmpdirs.cmake removes, reproduced and defeated.
# Open MPI 4's session directory $TMPDIR/ompi.<host>.<uid> is created by every mpiexec (and singleton
# MPI_Init) at start and removed at exit when empty. When entries of a parallel ctest shared one TMPDIR,
# a launch could fail with "mkdir /tmp/ompi.vm.0: File exists ... orte_session_dir failed ... orte_init
# failed": its mkdir found the directory another launch had just created, and its stat then found it
# gone, removed by a third launch's exit (the failure a fresh machine's scripts/test.sh once hit in
# ckpt_crash_mpi). Here a stand-in for the other entries (a Python loop creating and removing the
# directory, as their starts and exits do, only far more often) hammers one directory while:
#   1. SHARED: launches use the same TMPDIR as the stand-in, as every entry did before: up to 40 of them
#      until 3 failed with orte_session_dir; none failing means the stand-in did not reproduce the race
#      this time (a loaded machine can keep the two apart), part 2 would prove nothing: skipped (77);
#   2. OWN: launches use a TMPDIR of their own, as each entry does now: every one must pass, a real
#      2-rank run of MPI_PROG (tests/mpi_comm.c) included.
# Open MPI 4.x only (its session directory; other versions: skipped, 77). Works in a new directory under
# the entry's own TMPDIR (tests/tmpdirs.cmake); the stand-in never touches anything else.
set -uo pipefail
case=mpi_session_race
. "$(dirname "$0")/lib.sh"
prog=$1
ver=$(mpiexec --version 2>&1 | head -1)
case "$ver" in
*"Open MPI"*" 4."* | *"OpenRTE"*" 4."*) ;;
*) echo "skipped ($case): the session directory checked here is Open MPI 4.x's; mpiexec is: $ver"; exit 77 ;;
esac
base=$(mktemp -d "${TMPDIR:-/tmp}/mpi_session_race.XXXXXX") || fail "mktemp -d failed"
trap 'rm -rf "$base"' EXIT
shared=$base/shared; own=$base/own
mkdir -p "$shared" "$own"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
unset OMPI_MCA_orte_tmpdir_base PRTE_MCA_prte_tmpdir_base   # TMPDIR alone says where, below
# The session directory Open MPI derives from a TMPDIR, as a launch reports it.
top=$(TMPDIR=$shared mpiexec -np 1 printenv OMPI_MCA_orte_top_session_dir) || fail "mpiexec did not start"
[ "${top#"$shared"/ompi.}" != "$top" ] || fail "unexpected session directory '$top' for TMPDIR $shared"

hammer() {   # hammer SECONDS: create and remove $top as fast as possible, as other launches' start/exit
    exec /usr/bin/python3 - "$top" "$1" <<'PY'
import os, sys, time
top, end = sys.argv[1], time.time() + float(sys.argv[2])
while time.time() < end:
    try: os.mkdir(top, 0o700)
    except OSError: pass
    try: os.rmdir(top)
    except OSError: pass
PY
}
launches=12; tries=40
hammer 240 & hpid=$!   # killed at exit; outlasts any run of the two loops below
trap 'kill $hpid 2>/dev/null; rm -rf "$base"' EXIT
bad=0; i=0
while [ $i -lt $tries ] && [ $bad -lt 3 ]; do   # until 3 launches lost the race, at most $tries
    i=$((i + 1))
    TMPDIR=$shared mpiexec -np 1 true >"$base/shared.$i.log" 2>&1 || {
        grep -q "orte_session_dir failed\|mkdir" "$base/shared.$i.log" ||
            fail "shared launch $i failed for another reason: $(cat "$base/shared.$i.log")"
        bad=$((bad + 1)); }
done
if [ $bad -eq 0 ]; then
    echo "skipped ($case): no shared launch of $tries lost the race this time: the stand-in did not reproduce it"
    exit 77
fi
echo "shared TMPDIR: $bad of $i launches failed in orte_session_dir (the race)"
for i in $(seq $launches); do
    np=1; cmd=true; [ $i -eq 1 ] && { np=2; cmd=$prog; }
    TMPDIR=$own mpiexec -np $np "$cmd" >"$base/own.$i.log" 2>&1 ||
        fail "own-TMPDIR launch $i (np $np $cmd) failed: $(tail -5 "$base/own.$i.log")"
done
echo "ok ($case): a TMPDIR of one's own: $launches of $launches launches passed beside the same stand-in"
