#!/bin/bash
# tests/views.sh MESHPOINT DATA CONFIG WORKDIR PLUGINS CASE — index.h5's /view datasets (what h5py and other
# HDF5 tools read) checked by `ckpt verify` and rebuilt by `ckpt repair-views`.
#   intact   verify passes, repair-views leaves index.h5 byte for byte as it was (exit 0)
#   wrong    views rewritten with h5py through index.h5 (format v3: into view.h5, the external link's
#            target; one mapping to another tensor's box, one deleted): verify exits 1
#            naming both; repair-views rebuilds view.h5 (exit 0), keeps index.h5's creation time, and afterwards
#            verify passes and h5py reads every view bitwise equal to the rank files' boxes
#   crash    a libhdf5 crash while checking a view (the fault ckpt_views_crash_at) is a problem verify reports
#            (exit 1, naming the view), not a crash of verify; so is one while reading index.h5 itself
#   dense    an index with dense groups (as written before compact storage) and a flipped byte in /meta's
#            fractal heap: verify exits 1 reporting it (libhdf5 crashes there: contained in a child)
#   tables   damaged tables (not views): repair-views refuses (exit 1) and leaves index.h5 as it was
#   background  training writes view.h5 after the commit, on a background thread: a run saving
#            every step, synchronous and --async-save, with --keep 2 retention, leaves every kept
#            checkpoint's view.h5 complete at exit (verify passes, h5py reads every view equal to the
#            rank files' boxes, no view.h5.repair left) and exactly the newest 2 steps; a failed
#            background write (MP_FAULT=ckpt_fail_at:view_write) is a warning naming the checkpoint and
#            `meshpoint ckpt repair-views DIR`, the run exits 0, verify passes noting the views pending,
#            repair-views writes them and verify passes without the note
#   pending  views pending: a run's step 2 without view.h5 (a leftover view.h5.tmp.<pid> beside it)
#            and step 1 without view.h5: `ckpt verify` exits 0 with ONE line about it, naming `meshpoint
#            ckpt repair-views DIR` (no per-tensor line, no problem; "views_pending": true in --json; ckpt
#            show says it too);
#            `ckpt ls` marks both "views pending" (--json too). `train --resume` writes both view.h5 in the
#            background (logged), removes the leftover, and afterwards verify passes without the note, ls
#            marks nothing and h5py reads every view equal to the rank files' boxes. What is not the run's
#            or is complete is left alone: a step directory that is a link to a checkpoint elsewhere
#            without view.h5 keeps lacking it, and an existing but wrong view.h5 is not rewritten (verify
#            still exits 1 on it)
#   pending_start  the same healing at a start that is not --resume: `train --resume-from` an older step
#            (a rewind, under the job lock like every start) writes that step's missing view.h5; a fresh
#            run (no --resume*) in a used run directory is refused before anything is written
#   pending_race  a stand-in for another writer of step 2's views (holding the directory's flock, as
#            ck_views_replace does) publishes view.h5 while train --resume heals: the heal waits, then
#            keeps that file (no rewrite, no temporary left), and verify is clean
set -u
bin=$1; data=$2; config=$3; work=$4; plugins=$5; case=$6
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
export HDF5_PLUGIN_PATH=$plugins
train --run-dir "$work/run" --steps 2 --ckpt-every 2 >/dev/null 2>&1 || fail "training the fixture"
ck=$work/run/checkpoints/step_00000002
# views_equal DIR: h5py reads every view of DIR bitwise equal to its boxes in the rank files
views_equal() {
    /usr/bin/python3 - "$1" "$(cd "$(dirname "$0")" && pwd)/python" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
sys.path.insert(0, sys.argv[2])
from test_ckpt_h5py import layout_boxes   # any format version (v3: runs + the rank files' /boxes tables)
with h5py.File(d + "/index.h5", "r") as f:
    fails = []
    boxes = layout_boxes(h5py, np, lambda c, m: c or fails.append(m), d, d, f)
    assert not fails, fails
    n = 0
    for b in boxes:
        name = b["tensor"].decode()
        with h5py.File(d + "/" + b["file"].decode(), "r") as r:
            src = r[b["dataset"].decode()][()]
        nd = src.ndim
        sel = tuple(slice(int(b["offset"][k]), int(b["offset"][k]) + src.shape[k]) for k in range(nd))
        got = f["view/" + name][sel]
        if got.tobytes() != src.tobytes():
            print("view of", name, "differs from", b["file"].decode(), b["dataset"].decode()); sys.exit(1)
        n += 1
print("views equal:", n, "boxes")
PY
}
# expect_pending DIR LOG: DIR has no view.h5, and verify passes (exit 0) saying so in one line naming
# repair-views (and in its verdict), with no problem and no per-tensor line
expect_pending() {
    [ -e "$1/view.h5" ] && fail "$1 has a view.h5"
    expect 0 "^note: views pending: $1 has no view.h5 yet .*\`meshpoint ckpt repair-views $1\`" "$2" "$bin" ckpt verify "$1"
    grep -q "^ok: .*; views pending$" "$2" || fail "the verdict does not say views pending: $(cat "$2")"
    # (a leftover view.h5.tmp.<pid> gets its own note, checked by the caller)
    [ "$(sed "s|$1||g" "$2" | grep -v "leftover temp file" | grep -c view)" = 2 ] ||
        fail "verify is to name the views in one line: $(cat "$2")"
    grep -q "^problem" "$2" && fail "pending views are not problems: $(cat "$2")"
}
# check_healed DIR LOG: DIR's view.h5 was written: verify passes without the note, no temporary file is
# left, h5py reads every view equal to the rank files' boxes
check_healed() {
    [ -f "$1/view.h5" ] || fail "$1 still has no view.h5"
    ls "$1" | grep -q repair && fail "a temporary view file was left: $(ls "$1")"
    expect 0 "^ok:" "$2" "$bin" ckpt verify "$1"
    grep -q "views pending" "$2" && fail "views still pending: $(cat "$2")"
    views_equal "$1" >"$2.h5py" 2>&1 || fail "h5py after the healing: $(cat "$2.h5py")"
}
case "$case" in
intact)
    expect 0 "^ok:" "$work/verify" "$bin" ckpt verify "$ck"
    sum=$(sha256sum "$ck/index.h5")
    expect 0 "intact: index.h5 left as it is" "$work/repair" "$bin" ckpt repair-views "$ck"
    [ "$(sha256sum "$ck/index.h5")" = "$sum" ] || fail "repair-views rewrote intact views"
    views_equal "$ck" >/dev/null || fail "h5py does not read the views"
    echo "ok ($case)"
    ;;
wrong)
    created=$(/usr/bin/python3 -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs['created_utc'].decode())" "$ck/index.h5")
    /usr/bin/python3 - "$ck/index.h5" <<'PY' || fail "could not rewrite the views"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    v = f["view/model/model.norm.weight"]
    shape, dt = v.shape, v.dtype
    del f["view/model/model.norm.weight"]
    lay = h5py.VirtualLayout(shape=shape, dtype=dt)
    lay[...] = h5py.VirtualSource("rank_00000.h5", "/model/model.layers.0.input_layernorm.weight/box_0", shape=shape)
    f.create_virtual_dataset("view/model/model.norm.weight", lay, fillvalue=float("nan"))
    del f["view/optim/exp_avg/lm_head.weight"]
PY
    expect 1 "view of model/model.norm.weight: mapping 0 maps rank_00000.h5:/model/model.layers.0.input_layernorm" \
        "$work/verify" "$bin" ckpt verify "$ck"
    grep -q "view of optim/exp_avg/lm_head.weight: /view/optim/exp_avg/lm_head.weight is missing" "$work/verify" ||
        fail "the deleted view is not named: $(cat "$work/verify")"
    grep -q "ckpt repair-views" "$work/verify" || fail "verify does not say how to repair: $(cat "$work/verify")"
    expect 0 "repaired .*: view.h5 rebuilt from its tables \(3 view problem\(s\) before, none now" "$work/repair" \
        "$bin" ckpt repair-views "$ck"
    expect 0 "^ok:" "$work/verify2" "$bin" ckpt verify "$ck"
    views_equal "$ck" >"$work/h5py" 2>&1 || fail "h5py after the repair: $(cat "$work/h5py")"
    now=$(/usr/bin/python3 -c "import h5py,sys; print(h5py.File(sys.argv[1],'r').attrs['created_utc'].decode())" "$ck/index.h5")
    [ "$now" = "$created" ] || fail "created_utc changed: $created -> $now"
    ls "$ck" | grep -q repair && fail "a temporary file was left: $(ls "$ck")"
    echo "ok ($case): $(cat "$work/h5py")"
    ;;
crash)
    MP_FAULT=ckpt_views_crash_at:model/lm_head.weight expect 1 \
        "libhdf5 crashed \(signal 11\) checking the view of model/lm_head.weight" "$work/verify" "$bin" ckpt verify "$ck"
    grep -q "^FAILED" "$work/verify" || fail "no verdict line after the contained crash: $(cat "$work/verify")"
    # a crash reading index.h5 itself: reported, and verify does not open the index in its own process
    MP_FAULT=ckpt_views_crash_at:index.h5 expect 1 "libhdf5 crashed \(signal 11\) reading the index: the file is damaged" \
        "$work/verify_index" "$bin" ckpt verify "$ck"
    grep -q "^FAILED" "$work/verify_index" || fail "no verdict line after the contained crash: $(cat "$work/verify_index")"
    echo "ok ($case)"
    ;;
dense)
    # checkpoints written before compact group storage kept the 9 links of /meta in a fractal heap (HDF5's
    # default thresholds, 8 compact / 6 dense, which h5repack -c 8 -d 6 writes again). A flipped byte in the
    # heap's root block crashes libhdf5 1.10 in its error path (the corruption campaign, seed 61786): verify
    # contains it in its child, reports it and does not open the index in its own process (exit 1).
    h5repack -c 8 -d 6 "$ck/index.h5" "$work/dense.h5" || fail "h5repack"
    mv "$work/dense.h5" "$ck/index.h5"
    expect 0 "^ok:" "$work/verify_dense_intact" "$bin" ckpt verify "$ck"
    addr=$(/usr/bin/python3 -c "import h5py,sys; print(h5py.h5o.get_info(h5py.File(sys.argv[1],'r')['meta'].id).addr)" \
        "$ck/index.h5")
    heap=$(h5debug "$ck/index.h5" "$addr" | sed -n "s/.*'Dense' link storage fractal heap address: *//p")
    [ -n "$heap" ] || fail "/meta of the repacked index is not dense: $(h5debug "$ck/index.h5" "$addr" | head -40)"
    root=$(h5debug "$ck/index.h5" "$heap" | sed -n "s/.*Table's root address: *//p")
    [ -n "$root" ] || fail "no root block in /meta's fractal heap at $heap"
    /usr/bin/python3 -c "
import sys; p, at = sys.argv[1], int(sys.argv[2])
b = bytearray(open(p, 'rb').read()); b[at] ^= 1; open(p, 'wb').write(bytes(b))" "$ck/index.h5" "$root"
    expect 1 "^FAILED" "$work/verify_dense" "$bin" ckpt verify "$ck"
    # where this libhdf5 crashes, the crash is what verify reports (any HDF5 that detects it instead is fine)
    if grep -q "crashed" "$work/verify_dense"; then
        grep -Eq "libhdf5 crashed \((signal [0-9]+|exit status [0-9]+)\) reading the index" "$work/verify_dense" ||
            fail "$(cat "$work/verify_dense")"   # SIGSEGV here, SIGBUS under ASan
    fi
    echo "ok ($case): $(grep -m1 '^problem' "$work/verify_dense")"
    ;;
tables)
    /usr/bin/python3 - "$ck/index.h5" <<'PY' || fail "could not damage the tables"
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f:
    b = f["layout/runs"][()]
    b[0]["offset"][0] += 1
    f["layout/runs"][0] = b[0]
PY
    sum=$(sha256sum "$ck/index.h5")
    expect 1 "index.h5: index checksum mismatch .*corrupt" "$work/repair" "$bin" ckpt repair-views "$ck"
    [ "$(sha256sum "$ck/index.h5")" = "$sum" ] || fail "repair-views changed an index it could not rebuild"
    echo "ok ($case)"
    ;;
background)
    for mode in sync async; do
        extra=""
        [ $mode = async ] && extra=--async-save
        rd=$work/bg_$mode
        train --run-dir "$rd" --steps 5 --ckpt-every 1 --keep 2 $extra >"$work/train_$mode" 2>&1 ||
            fail "training ($mode): $(cat "$work/train_$mode")"
        kept=$(ls "$rd/checkpoints" | grep '^step_' | tr '\n' ' ')
        [ "$kept" = "step_00000004 step_00000005 " ] || fail "$mode: --keep 2 left: $kept"
        for s in 4 5; do
            d=$rd/checkpoints/step_0000000$s
            [ -f "$d/view.h5" ] || fail "$mode: $d has no view.h5 at exit"
            ls "$d" | grep -q repair && fail "$mode: a temporary view file was left: $(ls "$d")"
            expect 0 "^ok:" "$work/verify_${mode}_$s" "$bin" ckpt verify "$d"
            views_equal "$d" >"$work/h5py_${mode}_$s" 2>&1 || fail "$mode step $s: $(cat "$work/h5py_${mode}_$s")"
        done
        grep -q "repair-views" "$work/train_$mode" && fail "$mode: a warning: $(cat "$work/train_$mode")"
    done
    rd=$work/bg_fail
    MP_FAULT=ckpt_fail_at:view_write expect 0 "checkpoint .*step_00000002 is complete and loadable, but writing its views \(view.h5\) failed: .*simulated failure; run meshpoint ckpt repair-views .*step_00000002" \
        "$work/train_fail" train --run-dir "$rd" --steps 2 --ckpt-every 2
    d=$rd/checkpoints/step_00000002
    [ -e "$d/view.h5" ] && fail "a failed view write left view.h5"
    expect 0 "^note: views pending: .*meshpoint ckpt repair-views $d" "$work/verify_fail" "$bin" ckpt verify "$d"
    expect 0 "view.h5 rebuilt" "$work/repair_fail" "$bin" ckpt repair-views "$d"
    expect 0 "^ok:" "$work/verify_fail2" "$bin" ckpt verify "$d"
    grep -q "views pending" "$work/verify_fail2" && fail "views still pending after repair-views: $(cat "$work/verify_fail2")"
    views_equal "$d" >/dev/null || fail "h5py after repairing a failed background write"
    echo "ok ($case): $(cat "$work/h5py_async_5")"
    ;;
pending)
    rd=$work/p
    ckr=$rd/checkpoints
    train --run-dir "$rd" --steps 2 --ckpt-every 1 >"$work/train" 2>&1 || fail "training: $(cat "$work/train")"
    # not the run's: a step directory that is a link to a checkpoint elsewhere, without view.h5
    cp -r "$ckr/step_00000001" "$work/foreign"; rm "$work/foreign/view.h5"; ln -s "$work/foreign" "$ckr/step_00000000"
    rm "$ckr/step_00000001/view.h5" "$ckr/step_00000002/view.h5"
    echo "an interrupted write" >"$ckr/step_00000002/view.h5.tmp.4242"   # a crashed writer's temp file
    d=$ckr/step_00000002
    expect_pending "$d" "$work/verify"
    grep -q "^note: 1 leftover temp file .*: view.h5.tmp.4242$" "$work/verify" ||
        fail "verify does not name the crashed writer's view.h5.tmp.4242: $(cat "$work/verify")"
    "$bin" ckpt verify --json "$d" >"$work/verify.json" 2>&1 || fail "verify --json: $(cat "$work/verify.json")"
    /usr/bin/python3 -c '
import json, sys
j = json.load(open(sys.argv[1]))
assert j["ok"] is True and j["views_pending"] is True and j["problems"] == [], j
assert sum("views pending" in n for n in j["notes"]) == 1, j' "$work/verify.json" || fail "verify --json: $(cat "$work/verify.json")"
    expect 0 "step_00000002 .*<- latest  views pending" "$work/ls" "$bin" ckpt ls "$rd"
    grep -q "step_00000001 .*  views pending" "$work/ls" || fail "ls does not mark step 1: $(cat "$work/ls")"
    grep -q "views pending: no view.h5 yet .*meshpoint ckpt repair-views $ckr/step_00000002" "$work/ls" ||
        fail "ls does not say how to write the views: $(cat "$work/ls")"
    "$bin" ckpt ls --json "$rd" | /usr/bin/python3 -c '
import json, sys
j = json.load(sys.stdin)
p = {c["dir"]: c["views_pending"] for c in j["checkpoints"]}
assert p["step_00000001"] and p["step_00000002"], p' || fail "ls --json does not mark the pending views"
    expect 0 "^views +pending: no view.h5 yet .*repair-views $d" "$work/show" "$bin" ckpt show "$d"
    "$bin" ckpt show --json "$d" | /usr/bin/python3 -c '
import json, sys
assert json.load(sys.stdin)["views_pending"] is True' || fail "show --json does not say views_pending"
    # a view.h5 that exists is never rewritten, even a wrong one: step 1 gets one whose view of a tensor is
    # deleted; it is then not pending, and verify fails on it
    "$bin" ckpt repair-views "$ckr/step_00000001" >/dev/null 2>&1 || fail "repair-views of step 1"
    /usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r+") as f: del f["view/model/model.norm.weight"]' "$ckr/step_00000001/view.h5" ||
        fail "could not damage step 1's view.h5"
    wrong=$(sha256sum <"$ckr/step_00000001/view.h5")
    expect 0 "views: wrote the missing view.h5 of $d " "$work/resume" train --run-dir "$rd" --steps 3 --ckpt-every 1 --resume
    [ "$(grep -c "views: wrote the missing" "$work/resume")" = 1 ] || fail "the resume wrote other views: $(cat "$work/resume")"
    check_healed "$d" "$work/after"
    [ ! -e "$d/view.h5.tmp.4242" ] || fail "the heal left the crashed writer's view.h5.tmp.4242"
    [ "$(sha256sum <"$ckr/step_00000001/view.h5")" = "$wrong" ] || fail "the resume rewrote an existing view.h5"
    expect 1 "view of model/model.norm.weight: /view/model/model.norm.weight is missing" "$work/verify1" \
        "$bin" ckpt verify "$ckr/step_00000001"
    [ -e "$work/foreign/view.h5" ] && fail "the resume wrote a view into a checkpoint outside the run (a linked step directory)"
    rm "$ckr/step_00000000"   # the link (its target's views stay pending): not part of what ls checks next
    expect 0 "step_00000003 .*<- latest" "$work/ls2" "$bin" ckpt ls "$rd"
    grep -q "views pending" "$work/ls2" && fail "ls still marks views pending: $(cat "$work/ls2")"
    "$bin" ckpt show "$d" | grep -q "^views" && fail "show still says the views are pending"
    echo "ok ($case): $(grep -m1 "views: wrote" "$work/resume")"
    ;;
pending_start)
    rd=$work/s
    ckr=$rd/checkpoints
    train --run-dir "$rd" --steps 2 --ckpt-every 1 >"$work/train" 2>&1 || fail "training: $(cat "$work/train")"
    rm "$ckr/step_00000001/view.h5"
    d=$ckr/step_00000001
    expect_pending "$d" "$work/verify"
    # a fresh run in the used run directory is refused, writing nothing
    expect 2 "already holds a run.*--resume" "$work/fresh" train --run-dir "$rd" --steps 2 --ckpt-every 1
    [ -e "$d/view.h5" ] && fail "a refused run wrote a view"
    # a rewind to step 1 (--resume-from): step 2 is set aside, step 1's view written
    expect 0 "views: wrote the missing view.h5 of $d " "$work/rewind" \
        train --run-dir "$rd" --steps 2 --ckpt-every 1 --resume-from "$d"
    check_healed "$d" "$work/after"
    [ ! -e "$d/view.h5.tmp.4242" ] || fail "the heal left the crashed writer's view.h5.tmp.4242"
    echo "ok ($case): $(grep -m1 "views: wrote" "$work/rewind")"
    ;;
pending_race)
    # another writer of the same checkpoint's views (here a stand-in holding the directory's flock, as
    # ck_views_replace does, that publishes a view.h5 before it lets go) while train --resume heals: the
    # heal waits for the lock, then finds view.h5 there and leaves it (the same file, not rewritten)
    rd=$work/r
    ckr=$rd/checkpoints
    train --run-dir "$rd" --steps 2 --ckpt-every 1 >"$work/train" 2>&1 || fail "training: $(cat "$work/train")"
    d=$ckr/step_00000002
    cp "$d/view.h5" "$work/theirs.h5"; rm "$d/view.h5"
    flock "$d" sh -c 'touch "$1.held"; sleep 3; cp "$2" "$1/view.h5.theirs" && mv "$1/view.h5.theirs" "$1/view.h5"' \
        sh "$d" "$work/theirs.h5" & holder=$!
    for _ in $(seq 100); do [ -e "$d.held" ] && break; sleep 0.05; done
    [ -e "$d.held" ] || fail "the stand-in writer did not take the lock"
    rm "$d.held"
    train --run-dir "$rd" --steps 3 --ckpt-every 1 --resume >"$work/resume" 2>&1 || fail "resume: $(cat "$work/resume")"
    wait $holder || fail "the stand-in writer failed"
    grep -q "views: wrote the missing" "$work/resume" && fail "the heal wrote a view another writer had published: $(cat "$work/resume")"
    cmp -s "$d/view.h5" "$work/theirs.h5" || fail "step 2's view.h5 is not the one the other writer published"
    ls "$d" | grep -q 'repair' && fail "a temporary file is left: $(ls "$d")"
    expect 0 "ok" "$work/verify" "$bin" ckpt verify "$d"
    grep -q "views pending" "$work/verify" && fail "verify still notes views pending: $(cat "$work/verify")"
    echo "ok ($case): the heal waited for the other writer and kept its view.h5"
    ;;
*) fail "unknown case" ;;
esac
