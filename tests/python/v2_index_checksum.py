#!/usr/bin/python3
"""tests/python/v2_index_checksum.py STEP_DIR — prints, as 16 hex digits, the index_checksum that a
format-v2 index of this checkpoint would carry (docs/FORMAT.md, "Index checksum").

For a v2 checkpoint that is its stored index_checksum, recomputed. For a v3 checkpoint the v2 box table
is rebuilt from the v3 files by h5py alone (test_ckpt_h5py.layout_boxes: the runs expanded, every rank
file's /boxes table checked against boxes_checksum and joined) and hashed in the v2 sequence, so a v3
save can be compared with what the v2 writer produced for the same save: equal values mean the same
tensors, boxes, rank files, dataset names, box and tile checksums (so the same data, bitwise) and
metadata (tests/same_index.sh). Exit status 0 on success, 1 when a check of layout_boxes fails.
"""
import os
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_ckpt_h5py import layout_boxes, xxh3  # noqa: E402


def main():
    import h5py
    import numpy as np
    step_dir = sys.argv[1]
    fails = []
    idx = h5py.File(os.path.join(step_dir, "index.h5"), "r")
    boxes = layout_boxes(h5py, np, lambda c, m: c or fails.append(m), step_dir, step_dir, idx)
    if fails:
        print("\n".join(fails), file=sys.stderr)
        return 1
    tensors = idx["layout/tensors"][...]
    files = idx["layout/files"][...]
    meta = sorted((k.encode(), bytes(idx["meta/" + k][()])) for k in idx["meta"])
    out = bytearray()

    def i64(v):
        out.extend(struct.pack("<q", int(v) if int(v) < 1 << 63 else int(v) - (1 << 64)))

    def s(b):
        out.extend(bytes(b).rstrip(b"\0") + b"\0")

    s(b"meshpoint-checkpoint")
    for v in (2, idx.attrs["step"], idx.attrs["world_size"], idx.attrs["zstd_level"], len(tensors), len(boxes),
              len(files), 0, len(meta)):
        i64(v)
    for t in tensors:
        s(t["name"]); s(t["dtype"]); i64(t["ndim"])
        for x in t["shape"]:
            i64(x)
        i64(t["box_first"]); i64(t["nboxes"])
    file_index = {int(f["rank"]): i for i, f in enumerate(files)}
    for b in boxes:
        i64(b["tensor_index"]); i64(file_index[int(b["rank"])]); s(b["dataset"])
        for x in list(b["offset"]) + list(b["shape"]):
            i64(x)
        for k in ("checksum", "tile_rows", "tile_cols", "ntiles", "tiles_checksum"):
            i64(b[k])
        s(b["tiles_dataset"])
    for f in files:
        i64(f["rank"]); s(f["name"]); i64(f["nboxes"]); i64(f["bytes"])
    for k, v in meta:
        s(k); s(v)
    print("%016x" % xxh3(np.frombuffer(bytes(out), np.uint8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
