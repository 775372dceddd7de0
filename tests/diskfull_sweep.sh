#!/bin/bash
# tests/diskfull_sweep.sh MESHPOINT DATA CONFIG WORKDIR CASE — every failed save and load names its cause
# and a file, through the real CLI.
#
# The sweep cases put the checkpoint root on a small tmpfs (mounted here; needs root or a user
# namespace), save step 1, then resume and save step 2 with the free space set, by a filler file, to
# each of many points across the byte range the step-2 save needs (measured first: T bytes). Each trial
# must either succeed (step 2 complete and verified) or
#   exit 1 with one error whose text holds "No space left on device" and a path inside the
#   checkpoint root (the rank file, index.h5, the .partial directory or latest);
#   leave no .partial directory, and every step_* directory verifying (`meshpoint ckpt verify`);
#   keep `latest` naming a complete checkpoint (step 1, or step 2 when only `latest` itself failed).
# A save that succeeded but whose background view.h5 write failed leaves step 2 with its views
# pending: `ckpt ls` marks it, verify passes with one note naming repair-views, and the next
# `train --resume` (the space back) writes view.h5, after which verify passes without the note.
# Cases: sweep (1 process, ~all pages of the save plus every page of its last 24 KiB), sweep_async
# (--async-save: the writer thread), sweep_zstd (--compress zstd:3: filtered chunks), sweep_np2
# (mpiexec -np 2 --tp 2: the message of the failing rank reaches the launcher's output once).
# Without a tmpfs (mount refused), the sweep falls back to RLIMIT_FSIZE (ulimit -f, SIGXFSZ ignored)
# across the rank file's size, where the cause is "File too large" (EFBIG) — and says so.
#
# perm_write: as an unprivileged user (setpriv to nobody; root ignores permissions) the save of step 2
#   fails with "Permission denied" naming the file: the checkpoint root read-only (mkdir of the .partial
#   directory), and a umask of 0222 (the .partial directory is created read-only, so H5Fcreate of the
#   rank file fails), then a read-only remount of the tmpfs ("Read-only file system"). Skipped (exit 77)
#   where neither setpriv nor a non-root user is available.
# perm_read: loading a checkpoint (`ckpt verify`, `train --resume`) whose rank file is unreadable names
#   the cause and the file: mode 000 for nobody ("Permission denied"), a directory in its place ("Is a
#   directory"), the file truncated ("truncated file"), index.h5 unreadable ("Permission denied").
set -u
bin=$1; data=$2; config=$3; work=$4; case=$5
. "$(dirname "$0")/lib.sh"
note() { echo "($case) $*"; }
export OPENBLAS_NUM_THREADS=1
mpi="mpiexec --allow-run-as-root --oversubscribe"

mnt=$work/mnt
cleanup() { mountpoint -q "$mnt" 2>/dev/null && umount "$mnt" 2>/dev/null; true; }
mountpoint -q "$mnt" 2>/dev/null && umount "$mnt"
rm -rf "$work"; mkdir -p "$work" || fail "cannot create $work"
trap cleanup EXIT

# mounts a tmpfs of $1 at $mnt; returns non-zero where mounting is not allowed
# (MP_DISKFULL_NO_TMPFS=1 pretends it is not, to exercise the fallback)
mount_tmpfs() {
    [ "${MP_DISKFULL_NO_TMPFS:-0}" = 1 ] && return 1
    mkdir -p "$mnt" && mount -t tmpfs -o "size=$1,mode=0777" tmpfs "$mnt" 2>/dev/null
}

np=1; extra=""; launch=""
case "$case" in
sweep) ;;
sweep_async) extra="--async-save" ;;
sweep_zstd) extra="--compress zstd:3" ;;
sweep_np2) np=2; extra="--tp 2"; launch="$mpi -np 2" ;;
perm_write|perm_read) ;;
*) fail "unknown case" ;;
esac

ck=$mnt/ck
# train STEPS RUN_DIR [more args]: resumes when RUN_DIR has a checkpoint
train() {
    local steps=$1 rd=$2; shift 2
    $launch "$bin" train --config "$config" --train-data "$data" --log-every 0 --ckpt-every 1 --steps "$steps" \
        --run-dir "$rd" --ckpt-dir "$ck" $extra "$@"
}
verify() { "$bin" ckpt verify "$1" >/dev/null 2>&1; }
avail() { df -B1 --output=avail "$mnt" | tail -1 | tr -d ' '; }

# views_pending DIR LOG CAUSE WHAT RUN: DIR (published) lacks view.h5 because its background view write
# failed for CAUSE: no view.h5 (nor a leftover view.h5.tmp.<pid>), the warning in LOG naming CAUSE and
# repair-views; `ckpt ls` marks it "views pending" and verify passes (exit 0) with one note naming
# repair-views and no problem; then `train --resume` of RUN (at its last step: nothing to train) writes
# the view and verify passes without the note.
views_pending() {
    local d=$1 log=$2 cause=$3 what=$4 rd=$5 out
    ! ls "$d" | grep -q '^view\.h5\.tmp\.' || fail "$what: the failed view write left a $d/view.h5.tmp.<pid>"
    grep -q "writing its views (view.h5) failed: .*$cause.*repair-views" "$log" ||
        fail "$what: exit 0, $d without views, and no warning naming '$cause' and repair-views: $(cat "$log")"
    "$bin" ckpt ls "$ck" | grep -q "$(basename "$d") .*views pending" || fail "$what: ckpt ls does not mark $d: $("$bin" ckpt ls "$ck")"
    out=$("$bin" ckpt verify "$d" 2>&1) || fail "$what: verify of $d (views pending) fails: $out"
    [ "$(echo "$out" | grep -c 'views pending')" = 2 ] && echo "$out" | grep -q "^note: views pending: .*meshpoint ckpt repair-views $d" ||
        fail "$what: verify does not report the pending views in one note naming repair-views: $out"
    echo "$out" | grep -q '^problem:' && fail "$what: $d has problems besides its pending views: $out"
    train 2 "$rd" --resume >"$work/heal.log" 2>&1 || fail "$what: the resume that heals $d: $(cat "$work/heal.log")"
    grep -q "views: wrote the missing view.h5 of $d " "$work/heal.log" || fail "$what: the resume did not heal $d: $(cat "$work/heal.log")"
    out=$("$bin" ckpt verify "$d" 2>&1) || fail "$what: $d does not verify after the resume healed it: $out"
    echo "$out" | grep -q "views pending" && fail "$what: views still pending after the resume: $out"
}

# Checks the checkpoint root after a failed or successful step-2 save; $1 = the save's exit status,
# $2 = its log, $3 = the cause pattern.
check_trial() {
    local rc=$1 log=$2 cause=$3 what=$4 rd=$5 pending=""
    ls "$ck" | grep -q '\.partial$' && fail "$what: a .partial directory was left: $(ls "$ck")"
    # train writes view.h5 after the commit, on a thread: a full disk may fail that write
    # alone. Then the save succeeded (exit 0, step 2 published) and warned; step 2 has its views pending;
    # with the space back, the next resume must write them.
    if [ "$rc" -eq 0 ] && [ ! -e "$ck/step_00000002/view.h5" ]; then
        views_pending "$ck/step_00000002" "$log" "$cause" "$what" "$rd"
        pending=1
    fi
    for d in "$ck"/step_*; do
        verify "$d" || fail "$what: $d does not verify: $("$bin" ckpt verify "$d" 2>&1 | tail -3)"
    done
    local latest; latest=$(cat "$ck/latest" 2>/dev/null)
    [ -n "$latest" ] && verify "$ck/$latest" || fail "$what: latest ('$latest') does not name a complete checkpoint"
    verify "$ck/step_00000001" || fail "$what: the earlier checkpoint step 1 no longer verifies"
    if [ "$rc" -eq 0 ]; then
        [ "$latest" = step_00000002 ] || fail "$what: exit 0 but latest is '$latest'"
        if [ -n "$pending" ]; then echo views; else echo ok; fi
        return
    fi
    [ "$rc" -eq 1 ] || fail "$what: exit $rc, expected 1: $(cat "$log")"
    local msg; msg=$(grep -E "^meshpoint.*error: " "$log" | head -1)
    [ -n "$msg" ] || fail "$what: exit 1 without an error message: $(cat "$log")"
    n=$(grep -cE "^meshpoint.*error: " "$log")
    [ "$n" -eq 1 ] || fail "$what: the error was printed $n times: $(cat "$log")"
    echo "$msg" | grep -q -- "$cause" || fail "$what: the cause ('$cause') is not named: $msg"
    local named
    named=$(echo "$msg" | grep -oE "$ck/(step_[0-9]{8}(\.partial)?(/[A-Za-z0-9_.]+)?|latest(\.tmp\.[0-9]+)?|\.lock)" | tail -1)
    [ -n "$named" ] || fail "$what: no file in $ck is named: $msg"
    # what the failure named last (the innermost context), for the coverage summary
    case "$named" in
    */rank_*) echo rank_file ;; */index.h5) echo index ;; */latest*) echo latest ;; */.lock) echo lock ;;
    *) echo directory ;;
    esac
}

# ------------------------------------------------------------------------------------------ sweeps
sweep_tmpfs() {
    local per_points=$1 tail_pages=$2
    train 1 "$work/r0" >"$work/s1.log" 2>&1 || fail "step-1 save: $(cat "$work/s1.log")"
    verify "$ck/step_00000001" || fail "step 1 does not verify"
    # the space the step-2 save takes (tmpfs counts pages); measured on a copy of the run directory
    local a0 a1; a0=$(avail)
    cp -r "$work/r0" "$work/rm"
    train 2 "$work/rm" --resume >"$work/m.log" 2>&1 || fail "measuring run: $(cat "$work/m.log")"
    a1=$(avail)
    local T=$((a0 - a1)); [ "$T" -gt 0 ] || fail "the step-2 save took no space ($a0 -> $a1)"
    rm -rf "$ck/step_00000002" "$work/rm"; echo step_00000001 >"$ck/latest"
    [ "$(avail)" -eq "$a0" ] || fail "free space not restored ($(avail) != $a0)"
    note "step-2 save takes $T bytes on the tmpfs; trials at $per_points points + the last $tail_pages pages and one past"
    local pts=() p=4096 i
    for ((i = 0; i < per_points; i++)); do pts+=($((T * i / per_points / 4096 * 4096))); done
    # the last pages one by one, up to one page past T: `latest.tmp.<pid>` needs a page while `latest` still
    # holds its own, so at exactly T the save fails only at replacing `latest`
    for ((i = tail_pages; i >= -1; i--)); do pts+=($((T - i * 4096))); done
    pts+=($((T + 16 * 4096)))
    local nfail=0 nok=0 nviews=0 kinds="" k
    for k in "${pts[@]}"; do
        [ "$k" -lt 0 ] && continue
        fallocate -l $((a0 - k)) "$mnt/fill" 2>/dev/null || dd if=/dev/zero of="$mnt/fill" bs=4096 count=$(((a0 - k) / 4096)) status=none
        cp -r "$work/r0" "$work/r1"
        train 2 "$work/r1" --resume >"$work/t.log" 2>&1
        local rc=$?
        rm -f "$mnt/fill"
        local kind; kind=$(check_trial $rc "$work/t.log" "No space left on device" "free $k of $T bytes" "$work/r1") || { echo "$kind"; exit 1; }
        case "$kind" in
        ok) nok=$((nok + 1)) ;; views) nviews=$((nviews + 1)) ;; *) nfail=$((nfail + 1)); kinds="$kinds $kind" ;;
        esac
        echo "  free $k: exit $rc ${kind}: $(grep -m1 -E '^meshpoint.*error: ' "$work/t.log" | sed "s|$work/||g" | cut -c1-240)"
        rm -rf "$work/r1" "$ck/step_00000002"; echo step_00000001 >"$ck/latest"
    done
    note "$nfail failed saves, each naming its cause and file; $nok succeeded; $nviews succeeded with views pending (healed by the next resume)"
    [ "$nfail" -ge $((per_points / 2)) ] || fail "only $nfail of ${#pts[@]} trials failed: the sweep missed the save"
    echo "$kinds" | grep -q rank_file || fail "no trial failed in a rank file"
    [ "$np" -gt 1 ] || echo "$kinds" | grep -q index || fail "no trial failed in index.h5"
    [ "$nok" -ge 1 ] || fail "not even the largest free space let the save succeed"
}

# RLIMIT_FSIZE fallback: the largest file a save writes is the rank file; sweep the limit across it.
sweep_fsize() {
    local points=$1 ckd=$work/ck
    ck=$ckd
    train 1 "$work/r0" >"$work/s1.log" 2>&1 || fail "step-1 save: $(cat "$work/s1.log")"
    local R; R=$(stat -c %s "$ck/step_00000001/rank_00000.h5")
    note "no tmpfs: RLIMIT_FSIZE across the rank file's $R bytes, cause 'File too large' (EFBIG), not ENOSPC"
    local k nfail=0
    for ((i = 0; i < points; i++)); do
        k=$((R * i / points / 1024 + 1))
        cp -r "$work/r0" "$work/r1"
        $launch sh -c 'trap "" XFSZ; ulimit -f '"$k"'; exec "$@"' rank "$bin" train --config "$config" \
            --train-data "$data" --log-every 0 --ckpt-every 1 --steps 2 --run-dir "$work/r1" --ckpt-dir "$ck" \
            $extra --resume 2>&1 | cat >"$work/t.log"   # a pipe: the limit would cut the log file too
        local rc=${PIPESTATUS[0]}
        local kind; kind=$(check_trial $rc "$work/t.log" "File too large" "limit $k KiB" "$work/r1") || { echo "$kind"; exit 1; }
        [ "$kind" = ok ] || [ "$kind" = views ] || nfail=$((nfail + 1))
        echo "  limit ${k} KiB: exit $rc ${kind}: $(grep -m1 -E '^meshpoint.*error: ' "$work/t.log" | sed "s|$work/||g" | cut -c1-200)"
        rm -rf "$work/r1" "$ck/step_00000002"; echo step_00000001 >"$ck/latest"
    done
    [ "$nfail" -ge $((points / 2)) ] || fail "only $nfail of $points trials failed"
}

case "$case" in
sweep*)
    case "$case" in
    sweep) per=${MP_DISKFULL_POINTS:-40}; tailp=6 ;;
    sweep_np2) per=${MP_DISKFULL_POINTS:-6}; tailp=2 ;;
    *) per=${MP_DISKFULL_POINTS:-12}; tailp=3 ;;
    esac
    if mount_tmpfs 16m; then
        sweep_tmpfs "$per" "$tailp"
    else
        note "mounting a tmpfs is not permitted here"
        sweep_fsize "$per"
    fi
    echo "ok ($case)"
    exit 0
    ;;
esac

# ------------------------------------------------------------------------------------- permissions
# as_nobody CMD...: runs CMD as an unprivileged user (root ignores file permissions)
nobody_ok=0
if [ "$(id -u)" -ne 0 ]; then
    as_nobody() { "$@"; }
    nobody_ok=1
elif command -v setpriv >/dev/null && setpriv --reuid=65534 --regid=65534 --clear-groups true 2>/dev/null; then
    as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"; }
    nobody_ok=1
fi
# the unprivileged user must reach the program, config and data
[ "$nobody_ok" -eq 1 ] && ! as_nobody test -x "$bin" -a -r "$config" -a -r "$data" && nobody_ok=0
if [ "$nobody_ok" -ne 1 ]; then
    echo "SKIP ($case): no unprivileged user to run as (root ignores permissions; setpriv missing or refused)"
    exit 77
fi

# perm_* work without a tmpfs too; the read-only remount needs one
have_tmpfs=0
if mount_tmpfs 16m; then have_tmpfs=1; else mkdir -p "$mnt"; chmod 0777 "$mnt"; fi
chmod 0755 "$work"
mkdir -p "$ck" "$work/r0"; chown 65534:65534 "$ck" "$work/r0"
as_nobody "$bin" train --config "$config" --train-data "$data" --log-every 0 --ckpt-every 1 --steps 1 \
    --run-dir "$work/r0" --ckpt-dir "$ck" >"$work/s1.log" 2>&1 || fail "step-1 save as nobody: $(cat "$work/s1.log")"
# one failing step-2 save as nobody: $1 cause, $2 description, then the setup of the trial in $3 (run as root)
perm_trial() {
    local cause=$1 what=$2 umask_=$3
    rm -rf "$work/r1"; cp -r "$work/r0" "$work/r1"; chown -R 65534:65534 "$work/r1"
    as_nobody bash -c "umask $umask_; exec \"\$@\"" x "$bin" train --config "$config" --train-data "$data" \
        --log-every 0 --ckpt-every 1 --steps 2 --run-dir "$work/r1" --ckpt-dir "$ck" --resume >"$work/t.log" 2>&1
    local rc=$?
    local kind; kind=$(check_trial $rc "$work/t.log" "$cause" "$what" "$work/r1") || { echo "$kind"; exit 1; }
    [ "$kind" != ok ] || fail "$what: the save succeeded"
    echo "  $what: exit $rc ($kind): $(grep -m1 -E '^meshpoint.*error: ' "$work/t.log" | sed "s|$work/||g")"
    rm -rf "$ck/step_00000002"*
}

if [ "$case" = perm_write ]; then
    chown root:root "$ck"; chmod 0755 "$ck"; chmod 0666 "$ck/latest"
    perm_trial "Permission denied" "checkpoint root not writable" 022
    chown 65534:65534 "$ck"
    perm_trial "Permission denied" "umask 0222: the .partial directory is read-only" 0222
    if [ "$have_tmpfs" -eq 1 ] && mount -o remount,ro "$mnt" 2>/dev/null; then
        perm_trial "Read-only file system" "read-only file system" 022
        mount -o remount,rw "$mnt"
    else
        note "no read-only remount here: that trial is skipped"
    fi
    echo "ok ($case)"
    exit 0
fi

# perm_read: damage copies of step 1, each load must name the cause and the file
step=$ck/step_00000001
expect_load() {
    local cause=$1 what=$2 file=$3 dir=$4
    as_nobody "$bin" ckpt verify "$dir" >"$work/v.log" 2>&1
    local rc=$?
    [ $rc -eq 1 ] || fail "$what: ckpt verify exit $rc, expected 1: $(cat "$work/v.log")"
    grep -q -- "$cause" "$work/v.log" || fail "$what: ckpt verify does not name the cause '$cause': $(cat "$work/v.log")"
    grep -q -- "$file" "$work/v.log" || fail "$what: ckpt verify does not name $file: $(cat "$work/v.log")"
    # and a training job resuming from it
    rm -rf "$work/r2"; mkdir "$work/r2"; chown 65534:65534 "$work/r2"
    as_nobody "$bin" train --config "$config" --train-data "$data" --log-every 0 --steps 2 --run-dir "$work/r2" \
        --resume-from "$dir" >"$work/l.log" 2>&1
    rc=$?
    [ $rc -ne 0 ] || fail "$what: train --resume-from loaded it"
    grep -q -- "$cause" "$work/l.log" || fail "$what: the resume does not name the cause '$cause': $(cat "$work/l.log")"
    grep -q -- "$file" "$work/l.log" || fail "$what: the resume does not name $file: $(cat "$work/l.log")"
    echo "  $what: $(grep -m1 -E 'problem|error' "$work/v.log" | sed "s|$work/||g" | cut -c1-260)"
}
fresh() { rm -rf "$work/c"; cp -r "$step" "$work/c"; chmod -R a+rX "$work/c"; echo "$work/c"; }
d=$(fresh); chmod 000 "$d/rank_00000.h5"
expect_load "Permission denied" "rank file mode 000" "rank_00000.h5" "$d"
d=$(fresh); rm "$d/rank_00000.h5"; mkdir "$d/rank_00000.h5"
expect_load "Is a directory" "a directory in place of the rank file" "rank_00000.h5" "$d"
d=$(fresh); truncate -s $(($(stat -c %s "$d/rank_00000.h5") / 2)) "$d/rank_00000.h5"
expect_load "truncated" "rank file truncated to half" "rank_00000.h5" "$d"
d=$(fresh); chmod 000 "$d/index.h5"
expect_load "Permission denied" "index.h5 mode 000" "index.h5" "$d"
echo "ok ($case)"
exit 0
