#!/usr/bin/env bash
# tests/format_v3.sh BIN EQUAL CONFIG WORK CASE — format version 3 (docs/FORMAT.md): what moved out of
# the index is still checked, and version 2 stays readable.
#   v2_fixture  the checked-in v2 checkpoint tests/data/ckpt_v2/init_tp2dp1 (written by the v2 writer,
#               see tests/data/ckpt_v2/README.txt) verifies, views included, reshards (a load through the
#               reader), and holds bitwise the tensors of a v3 `meshpoint init` of the same model and mesh
#               (EQUAL = tools/tool_ckpt_equal); the v2 index checksum rebuilt from that v3 checkpoint by
#               h5py alone (tests/python/v2_index_checksum.py) is the fixture's stored one: same boxes,
#               dataset names, box and tile checksums, metadata
#   boxes_flip  a flipped byte in a rank file's /boxes table (raw data: no HDF5 checksum there) is caught
#               by verify and by a load (reshard), exit 1, naming the rank file
#   swapped     a rank file of another save (another seed) in place of one: caught, exit 1, naming it
#   index_flat  the index does not grow with the world (README): a tp 2 x dp 16 init has as many runs as a
#               tp 2 x dp 2 one (8x the boxes) and an index.h5 less than 1.5x its size
#   no_view     view.h5 removed: verify passes with one note, "views pending", naming repair-views,
#               tensors still read (reshard works), repair-views rebuilds view.h5 ("it was missing") and
#               verify passes without the note, h5py reads a tensor through index.h5
set -uo pipefail
bin=$1 equal=$2 config=$3 work=$4 case=$5
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work"
mkdir -p "$work"
log=$work/log
init() { "$bin" init --config "$config" --tp 2 --dp "$1" --out "$2" "${@:3}" >"$log" 2>&1 || fail "init: $(cat "$log")"; }

case $case in
v2_fixture)
    cp -r "$src/tests/data/ckpt_v2/init_tp2dp1" "$work/v2"
    expect 0 "^ok: 63 tensors" "$log" "$bin" ckpt verify "$work/v2"
    expect 0 "meshpoint-checkpoint v2" "$log" "$bin" ckpt show "$work/v2"
    expect 0 "wrote" "$log" "$bin" reshard "$work/v2" --tp 1 --dp 1 --out "$work/from_v2"
    init 1 "$work/v3"
    expect 0 "" "$log" "$equal" "$work/v2" "$work/v3"
    expect 0 "" "$log" "$equal" "$work/from_v2" "$work/v3"
    want=$(/usr/bin/python3 -c 'import sys, h5py; print("%016x" % int(h5py.File(sys.argv[1], "r").attrs["index_checksum"]))' \
           "$work/v2/index.h5") || fail "reading the fixture's index_checksum"
    got=$(/usr/bin/python3 "$src/tests/python/v2_index_checksum.py" "$work/v3") || fail "v2_index_checksum.py failed"
    [ "$got" = "$want" ] || fail "the v3 init rebuilds to v2 index checksum $got, the v2 writer's was $want"
    echo "ok: v2 fixture verifies and reshards; a v3 init of the same mesh is bitwise the v2 one ($got)"
    ;;
boxes_flip)
    init 2 "$work/c"
    rf=$work/c/rank_00001.h5
    /usr/bin/python3 -c '
import sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    ds = f["boxes"]   # a byte of the second row'"'"'s checksum: raw data, only boxes_checksum covers it
    at = ds.id.get_offset() + ds.dtype.itemsize + ds.dtype.fields["checksum"][1]
with open(sys.argv[1], "r+b") as fh:
    fh.seek(at)
    b = fh.read(1)
    fh.seek(at)
    fh.write(bytes([b[0] ^ 0x01]))' "$rf" || fail "flipping a byte of /boxes"
    expect 1 "rank_00001.h5.*(/boxes|boxes table)" "$log" "$bin" ckpt verify "$work/c"
    expect 1 "rank_00001.h5" "$log" "$bin" reshard "$work/c" --tp 1 --dp 1 --out "$work/r"
    echo "ok: a flipped byte in rank_00001.h5's /boxes table is caught by verify and by a load"
    ;;
swapped)
    init 2 "$work/a" --seed 1
    init 2 "$work/b" --seed 2
    cp "$work/b/rank_00002.h5" "$work/a/rank_00002.h5"
    expect 1 "rank_00002.h5.*another save" "$log" "$bin" ckpt verify "$work/a"
    expect 1 "rank_00002.h5" "$log" "$bin" reshard "$work/a" --tp 1 --dp 1 --out "$work/r"
    echo "ok: a rank file of another save is caught, naming it"
    ;;
no_view)
    init 2 "$work/c"
    rm "$work/c/view.h5"
    expect 0 "^note: views pending: .*meshpoint ckpt repair-views $work/c" "$log" "$bin" ckpt verify "$work/c"
    [ "$(sed "s|$work/c||g" "$log" | grep -c view)" = 2 ] || fail "verify is to name the views once (and in its verdict): $(cat "$log")"
    expect 0 "wrote" "$log" "$bin" reshard "$work/c" --tp 1 --dp 1 --out "$work/r"
    expect 0 "repaired .*view.h5 rebuilt from its tables \(it was missing: views pending" "$log" \
        "$bin" ckpt repair-views "$work/c"
    [ -f "$work/c/view.h5" ] || fail "repair-views did not write view.h5"
    expect 0 "^ok" "$log" "$bin" ckpt verify "$work/c"
    grep -q "views pending" "$log" && fail "views still pending after repair-views: $(cat "$log")"
    (cd / && /usr/bin/python3 -c '
import sys, h5py, numpy as np
f = h5py.File(sys.argv[1] + "/index.h5", "r")
w = f["view/model/model.embed_tokens.weight"][...]
assert w.shape == (256, 32) and np.isfinite(w).all(), w' "$work/c") >"$log" 2>&1 || fail "h5py through the view: $(cat "$log")"
    echo "ok: a missing view.h5 is reported, repaired, and read through index.h5 by h5py"
    ;;
index_flat)
    init 2 "$work/small"
    init 16 "$work/large"
    /usr/bin/python3 - "$work/small" "$work/large" >"$log" 2>&1 <<'PY' || fail "$(cat "$log")"
import os, sys, h5py
(a, b) = [h5py.File(d + "/index.h5", "r") for d in sys.argv[1:3]]
na, nb = len(a["layout/runs"]), len(b["layout/runs"])
ba, bb = int(a["layout/tensors"]["nboxes"].sum()), int(b["layout/tensors"]["nboxes"].sum())
sa, sb = (os.path.getsize(d + "/index.h5") for d in sys.argv[1:3])
assert bb >= 7 * ba, (ba, bb)
assert na == nb, ("runs", na, nb)
assert sb < 1.5 * sa, ("index bytes", sa, sb)
print(f"boxes {ba} -> {bb}, runs {na} -> {nb}, index.h5 {sa} -> {sb} bytes")
PY
    echo "ok: $(cat "$log")"
    ;;
*) fail "unknown case $case" ;;
esac
rm -rf "$work"
