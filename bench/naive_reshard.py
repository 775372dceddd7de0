#!/usr/bin/python3
"""bench/naive_reshard.py — the naive peer of `meshpoint reshard`: the conversion done the way the usual
per-tensor scripts do it (load every tensor whole with h5py/numpy, re-slice, write).

    /usr/bin/python3 bench/naive_reshard.py SRC --tp T [--dp D] --out DST [--no-fsync]
    /usr/bin/python3 bench/naive_reshard.py --compare A B

Conversion: opens SRC/index.h5 and, for every tensor of /layout/tensors in turn,
  1. allocates the whole global tensor (np.empty of its global shape, f32),
  2. reads every saved box of it (/layout/boxes, or format v3's /layout/runs expanded: file + dataset + offset + shape) with
     `full[slices] = f[dataset][()]` (h5py reads the box into a fresh array, numpy copies it in),
  3. cuts the box of every target rank with the layout rule of layers/llama_params.c (llama_place +
     llama_disk_box + llama_disk_writer, mirrored in target_box() below) and writes it to that rank's
     file DST/rank_%05d.h5 as dataset /<tensor>/box_0 (contiguous f32, like meshpoint), with the
     attributes tensor, dtype, global_offset, global_shape,
  4. frees the tensor before the next one.
So memory peaks at about the largest tensor (embed_tokens / lm_head) plus one box, not the model.
At the end every rank file is closed and fsynced (unless --no-fsync; meshpoint fsyncs what it writes,
so the timed comparison includes it), and a minimal DST/index.h5 is written: /meta/* copied from SRC
(mesh rewritten for the target) and a /layout/boxes table (tensor, file, dataset, offset, shape).

This is the cheap way: no checksums written or verified, no format_version / index_checksum / files /
slab tables (meshpoint's reader refuses the result), no atomic commit (a crash leaves a half-written
DST that looks like the real thing), no check that the saved boxes cover each tensor (np.empty
garbage would be written silently), no bound on memory.

--compare A B: checks that the rank files of B hold exactly the box datasets (`.../box_<k>`) of A's
rank files (same files and paths, shapes, global_offset and bytes); exit 1 on the first difference. Used by bench_reshard.sh to
check this peer against meshpoint's output (it checks the peer, not meshpoint).
"""
import argparse
import json
import os
import re
import sys
import time

import h5py
import numpy as np

KINDS = ("model/", "optim/exp_avg/", "optim/exp_avg_sq/")
ROWS = re.compile(r"\.(q_proj|k_proj|v_proj|gate_proj|up_proj)\.weight$")
COLS = re.compile(r"\.(o_proj|down_proj)\.weight$")
VOCAB = ("model.embed_tokens.weight", "lm_head.weight")


def s(x):
    return x.decode() if isinstance(x, (bytes, np.bytes_)) else str(x)


def mp_split(n, p, i):
    """core/mesh.c mp_split: balanced, the first n % p parts get one more. Returns (start, count)."""
    base, rem = divmod(n, p)
    return i * base + min(i, rem), base + (1 if i < rem else 0)


def hf_name(name):
    for k in KINDS:
        if name.startswith(k):
            return name[len(k):]
    raise ValueError("tensor %s: not model/..., optim/exp_avg/... or optim/exp_avg_sq/..." % name)


def target_box(name, gshape, vocab, tp, tpr, dp, dpr):
    """The box (off, shape) that rank (tpr, dpr) of a tp x dp mesh writes of tensor `name`, or None.
    Mirrors llama_place + llama_disk_box + llama_disk_writer (layers/llama_params.c, llama.h)."""
    hf = hf_name(name)
    rows = gshape[0]
    cols = gshape[1] if len(gshape) == 2 else 1
    tp_off = [0, 0]
    if len(gshape) == 1:                       # norms: replicated, written by tp rank 0 only
        if tpr != 0:
            return None
        tp_shape, valid = [rows, cols], rows
    elif hf in VOCAB:                          # vocab rows in blocks of ceil(V / tp), last one padded
        per = (vocab + tp - 1) // tp
        tp_off[0] = tpr * per
        tp_shape = [per, cols]
        valid = max(0, min(per, rows - tp_off[0]))
    elif ROWS.search(hf):
        tp_off[0], n = mp_split(rows, tp, tpr)
        tp_shape, valid = [n, cols], n
    elif COLS.search(hf):
        tp_off[1], n = mp_split(cols, tp, tpr)
        tp_shape, valid = [rows, n], rows
    else:
        raise ValueError("tensor %s: no layout rule for this name" % name)
    row0, nrows = mp_split(tp_shape[0], dp, dpr)
    r = max(0, min(nrows, valid - row0))
    if r == 0:
        return None
    off = [tp_off[0] + row0, tp_off[1]]
    shape = [r, tp_shape[1]]
    if len(gshape) == 1:
        return off[:1], shape[:1]
    return off, shape


def fsync_path(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def layout_rows(idx):
    """The saved boxes as rows with tensor, file, dataset, offset, shape: format v2's /layout/boxes, or
    format v3's /layout/runs expanded by the rule of docs/FORMAT.md (box i of a run at offset + i *
    offset_step in the file of rank + i * rank_stride; box_<k> counting a file's boxes of the tensor in
    offset order). Nothing is verified: this peer trusts the files."""
    if "layout/boxes" in idx:
        return idx["layout/boxes"][()]
    tens, runs, rows = idx["layout/tensors"][()], idx["layout/runs"][()], []
    for ti, t in enumerate(tens):
        mine = sorted((tuple(int(o) + i * int(st) for o, st in zip(r["offset"], r["offset_step"])),
                       int(r["rank"]) + i * int(r["rank_stride"]), tuple(int(x) for x in r["shape"]))
                      for r in runs[runs["tensor_index"] == ti] for i in range(int(r["count"])))
        k = {}
        for off, rank, shp in mine:
            rows.append({"tensor": t["name"], "file": b"rank_%05d.h5" % rank,
                         "dataset": b"/%s/box_%d" % (t["name"], k.get(rank, 0)), "offset": off, "shape": shp})
            k[rank] = k.get(rank, 0) + 1
    return rows


def convert(src, tp, dp, dst, do_fsync):
    t0 = time.time()
    if os.path.exists(dst):
        sys.exit("naive_reshard: %s exists" % dst)
    idx = h5py.File(os.path.join(src, "index.h5"), "r")
    tens = idx["layout/tensors"][()]
    boxes = layout_rows(idx)
    meta = {k: s(idx["meta"][k][()]) for k in idx["meta"]} if "meta" in idx else {}
    names = [s(t["name"]) for t in tens]
    by_tensor = {}
    for b in boxes:
        by_tensor.setdefault(s(b["tensor"]), []).append(b)
    # vocab size: the rows of the embedding (what the model config says too)
    vocab = None
    for t in tens:
        if hf_name(s(t["name"])) == VOCAB[0]:
            vocab = int(t["shape"][0])
    if vocab is None and "model_config" in meta:
        vocab = json.loads(meta["model_config"])["vocab_size"]

    os.makedirs(dst)
    world = tp * dp
    outs = {}                                   # rank -> h5py.File, opened when first needed
    srcs = {}                                   # source rank file -> h5py.File
    rows_out = []
    read_bytes = write_bytes = largest = 0
    for t, name in zip(tens, names):
        nd = int(t["ndim"]) if "ndim" in t.dtype.names else None
        bl = by_tensor.get(name, [])
        if nd is None:                          # no ndim field: from the first box's attribute
            f0 = s(bl[0]["file"])
            nd = len(srcs.setdefault(f0, h5py.File(os.path.join(src, f0), "r"))[s(bl[0]["dataset"])]
                     .attrs["global_shape"])
        gshape = tuple(int(x) for x in t["shape"][:nd])
        full = np.empty(gshape, dtype=np.float32)           # the whole tensor
        largest = max(largest, full.nbytes)
        for b in bl:
            fn = s(b["file"])
            f = srcs.get(fn)
            if f is None:
                f = srcs[fn] = h5py.File(os.path.join(src, fn), "r")
            off = [int(x) for x in b["offset"][:nd]]
            shp = [int(x) for x in b["shape"][:nd]]
            sl = tuple(slice(o, o + n) for o, n in zip(off, shp))
            full[sl] = f[s(b["dataset"])][()]
            read_bytes += 4 * int(np.prod(shp))
        for r in range(world):
            tb = target_box(name, gshape, vocab, tp, r % tp, dp, r // tp)
            if tb is None:
                continue
            off, shp = tb
            out = outs.get(r)
            if out is None:
                out = outs[r] = h5py.File(os.path.join(dst, "rank_%05d.h5" % r), "w")
            sl = tuple(slice(o, o + n) for o, n in zip(off, shp))
            path = "/%s/box_0" % name
            ds = out.create_dataset(path, data=full[sl])          # contiguous, f32
            ds.attrs["tensor"] = name
            ds.attrs["dtype"] = "f32"
            ds.attrs["global_offset"] = np.array(off, dtype=np.int64)
            ds.attrs["global_shape"] = np.array(gshape, dtype=np.int64)
            write_bytes += 4 * int(np.prod(shp))
            rows_out.append((name, "rank_%05d.h5" % r, path, off + [0] * (4 - nd), shp + [1] * (4 - nd)))
        del full
    for f in srcs.values():
        f.close()
    idx.close()
    paths = []
    for r, f in sorted(outs.items()):
        f.close()
        paths.append(os.path.join(dst, "rank_%05d.h5" % r))
    # the minimal index: where each box is, and the metadata
    dt = np.dtype([("tensor", "S256"), ("file", "S32"), ("dataset", "S288"), ("offset", "<i8", (4,)),
                   ("shape", "<i8", (4,))])
    table = np.array([(a.encode(), b.encode(), c.encode(), d, e) for a, b, c, d, e in rows_out], dtype=dt)
    with h5py.File(os.path.join(dst, "index.h5"), "w") as ix:
        ix.create_dataset("layout/boxes", data=table)
        for k, v in meta.items():
            if k == "mesh":
                try:
                    m = json.loads(v)
                    m.update(world=world, tp=tp, dp=dp)
                    v = json.dumps(m)
                except ValueError:
                    pass
            ix.create_dataset("meta/" + k, data=np.bytes_(v.encode()))
    paths.append(os.path.join(dst, "index.h5"))
    if do_fsync:
        for p in paths:
            fsync_path(p)
        fsync_path(dst)
    dt_s = time.time() - t0
    print("naive_reshard: wrote %s for tp %d x dp %d (%d rank files, %.2f MiB) in %.2f s; read %.2f MiB; "
          "largest tensor in memory %.2f MiB" % (dst, tp, dp, len(outs), write_bytes / 2**20, dt_s,
                                                 read_bytes / 2**20, largest / 2**20), file=sys.stderr)


def datasets(d):
    """{(file, dataset path): h5py.Dataset} of the boxes (datasets named box_<k>; meshpoint's other
    datasets, such as the tile checksums of format v2, are not data) in the rank files of directory d."""
    out = {}
    for fn in sorted(os.listdir(d)):
        if not re.fullmatch(r"rank_\d{5}\.h5", fn):
            continue
        f = h5py.File(os.path.join(d, fn), "r")

        def visit(path, obj, fn=fn):
            if isinstance(obj, h5py.Dataset) and re.fullmatch(r"box_\d+", path.rsplit("/", 1)[-1]):
                out[(fn, "/" + path)] = obj
        f.visititems(visit)
    return out


def compare(a, b):
    da, db = datasets(a), datasets(b)
    if set(da) != set(db):
        only_a = sorted(set(da) - set(db))[:5]
        only_b = sorted(set(db) - set(da))[:5]
        sys.exit("naive_reshard --compare: different datasets: only in %s %s; only in %s %s" % (a, only_a, b, only_b))
    nbytes = 0
    for k in sorted(da):
        x, y = da[k], db[k]
        if x.shape != y.shape or list(x.attrs["global_offset"]) != list(y.attrs["global_offset"]):
            sys.exit("naive_reshard --compare: %s:%s differs in shape or global_offset" % k)
        xa, ya = x.astype("f4")[()], y[()]
        if xa.tobytes() != ya.tobytes():
            sys.exit("naive_reshard --compare: %s:%s differs in data" % k)
        nbytes += ya.nbytes
    print("naive_reshard --compare: %d datasets, %.2f MiB, identical" % (len(da), nbytes / 2**20))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", nargs="?")
    ap.add_argument("--tp", type=int)
    ap.add_argument("--dp", type=int, default=1)
    ap.add_argument("--out")
    ap.add_argument("--no-fsync", action="store_true")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"))
    o = ap.parse_args()
    if o.compare:
        compare(*o.compare)
        return
    if not o.src or not o.tp or not o.out or o.tp < 1 or o.dp < 1:
        ap.error("SRC, --tp N (>= 1) and --out DIR are required")
    convert(o.src, o.tp, o.dp, o.out, not o.no_fsync)


if __name__ == "__main__":
    main()
