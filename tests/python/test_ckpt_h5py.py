#!/usr/bin/python3
"""tests/python/test_ckpt_h5py.py — checkpoints read by other tools, with no code of ours.

Writes a checkpoint with 3 ranks (tests/tool_ckpt_mpi save), plain and zstd-compressed, then with
Debian's h5py (also saved with files of several ranks: --files 2 and node, whose tensors must equal the
plain save's bitwise): opens index.h5, checks the format attributes, reads the layout tables, assembles every
tensor from the rank files through the box table (checking each dataset's attributes against the
table and that every element is written exactly once), reads every tensor whole through its virtual
view and requires both to be equal. Format v2 checksum tiles are checked from the spec alone
(check_box_tiles, also used by test_train_ckpt_h5py.py): the tile geometry rule, the dataset
attributes, the tiles dataset next to each box, and every checksum (box, tile, tile array) recomputed
with the system's libxxhash through ctypes. Compressed checkpoints are read with HDF5_PLUGIN_PATH pointing at
the build's plugins directory (the zstd filter, id 32015). h5dump -d of a compressed dataset must
print its numbers with the plugin, and must fail to without it (so the plugin is what makes it work).
Exit status 0 on success, 1 on a failed check.
"""
import argparse
import ctypes
import ctypes.util
import os
import shutil
import subprocess
import sys

_xxh3_fn = None
_tile_consts = None


def tile_consts():
    """(CK_TILE_BYTES, CK_TILE_MIN_SEG, CK_CHUNK_BYTES): the numbers of the tile and chunk rules, from
    ckpt/ckpt_internal.h."""
    global _tile_consts
    if _tile_consts is None:
        import re
        h = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "ckpt", "ckpt_internal.h")
        text = open(h).read()
        _tile_consts = tuple(int(re.search(r"#define %s (\d+)" % n, text).group(1))
                             for n in ("CK_TILE_BYTES", "CK_TILE_MIN_SEG"))
        m = re.search(r"#define CK_CHUNK_BYTES \((\d+) << (\d+)\)", text)
        _tile_consts += (int(m.group(1)) << int(m.group(2)),)
    return _tile_consts


def xxh3(arr):
    """XXH3-64 (seed 0) of a C-contiguous numpy array's bytes, by libxxhash (what meshpoint links)."""
    global _xxh3_fn
    if _xxh3_fn is None:
        lib = ctypes.CDLL(ctypes.util.find_library("xxhash") or "libxxhash.so.0")
        _xxh3_fn = lib.XXH3_64bits
        _xxh3_fn.restype = ctypes.c_uint64
        _xxh3_fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    assert arr.flags["C_CONTIGUOUS"]
    return int(_xxh3_fn(arr.ctypes.data, arr.nbytes))


def tile_geometry(esize, shape):
    """(tile_rows, tile_cols) of a box of this shape: the rule of docs/FORMAT.md ("Tile geometry")."""
    tile_bytes, min_seg, _ = tile_consts()
    rows, cols = shape[0], (shape[1] if len(shape) >= 2 else 1)
    inner = 1
    for n in shape[2:]:
        inner *= n
    unit = inner * esize
    b = next((b for b in (8, 4, 2) if cols % b == 0 and cols // b * unit >= min_seg), 1)
    tc = cols // b
    target = min_seg if len(shape) == 1 else tile_bytes
    tr = min(max(1, -(-target // (tc * unit))), rows)
    return tr, tc


def check_box_tiles(h5py, np, check, what, f, b, ds, zstd):
    """Checks box row b (a dict of layout_boxes), whose dataset ds is in rank file f: tile fields
    per the geometry rule, dataset attributes, the tiles dataset, and every checksum from raw bytes."""
    shape = tuple(int(x) for x in ds.shape)
    ft = ds.id.get_type()
    es = ft.get_size()
    tr, tc = tile_geometry(es, shape)
    rows, cols = shape[0], (shape[1] if len(shape) >= 2 else 1)
    ncb = -(-cols // tc)
    ntiles = -(-rows // tr) * ncb
    check((int(b["tile_rows"]), int(b["tile_cols"]), int(b["ntiles"])) == (tr, tc, ntiles),
          f"{what}: tile fields {b['tile_rows']} {b['tile_cols']} {b['ntiles']}, rule says {tr} {tc} {ntiles}")
    check(int(ds.attrs["tile_rows"]) == tr and int(ds.attrs["tile_cols"]) == tc, f"{what}: tile attributes")
    check(int(ds.attrs["tiles_checksum"]) == int(b["tiles_checksum"]), f"{what}: tiles_checksum attribute")
    tpath = b["tiles_dataset"].decode()
    check(tpath == b["dataset"].decode().replace("/box_", "/tiles_"), f"{what}: tiles dataset {tpath}")
    tds = f[tpath]
    check(tds.shape == (ntiles,) and tds.dtype == np.dtype("<u8"), f"{what}: tiles dataset {tds.shape} {tds.dtype}")
    check(tds.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS, f"{what}: tiles dataset not contiguous")
    tiles = np.ascontiguousarray(tds[...].astype("<u8"))
    check(xxh3(tiles) == int(b["tiles_checksum"]), f"{what}: tile array does not hash to tiles_checksum")
    plist = ds.id.get_create_plist()
    if zstd:
        # whole tile rows of one column block, about CK_CHUNK_BYTES (docs/FORMAT.md, rank file)
        per = tile_consts()[2] // (es * tr * (tc if len(shape) >= 2 else 1) * (int(np.prod(shape[2:])) if len(shape) > 2 else 1))
        crows = min(tr * max(1, per), rows)
        want = (crows, tc)[:len(shape)] + shape[2:]
        check(plist.get_layout() == h5py.h5d.CHUNKED and tuple(plist.get_chunk()) == want,
              f"{what}: chunks {plist.get_chunk()}, the rule says {want} (tiles {tr} x {tc})")
    else:
        check(plist.get_layout() == h5py.h5d.CONTIGUOUS, f"{what}: not contiguous")
    raw = np.empty(shape + (es,), np.uint8)     # the stored bytes, no type conversion (bf16 too)
    ds.id.read(h5py.h5s.ALL, h5py.h5s.ALL, raw, mtype=ft)
    check(xxh3(raw) == int(b["checksum"]), f"{what}: box checksum")
    a = raw.reshape(rows, cols, -1)
    bad = 0
    for i in range(-(-rows // tr)):
        for j in range(ncb):
            t = np.ascontiguousarray(a[i * tr:(i + 1) * tr, j * tc:(j + 1) * tc, :])
            bad += xxh3(t) != int(tiles[i * ncb + j])
    check(bad == 0, f"{what}: {bad} of {ntiles} tile checksums differ")


def layout_boxes(h5py, np, check, what, step_dir, idx):
    """The box rows of a checkpoint as dicts with the fields of a v2 /layout/boxes row. Version 1/2: the
    index's table. Version 3 (docs/FORMAT.md), rebuilt here from the spec alone: /layout/runs expanded
    (box i of a run at offset + i * offset_step in the rank file of rank + i * rank_stride), each
    tensor's boxes sorted by offset, dataset paths /<name>/box_<k> with k counting the file's boxes of
    the tensor in that order; every rank file's /boxes table must hash (XXH3-64 of its bytes) to the
    index's boxes_checksum, list exactly the file's boxes in (tensor name, offset) order with their k
    and shape, and gives each box its checksum and tile fields."""
    version = int(idx.attrs["format_version"])
    if version < 3:
        return [dict(zip(b.dtype.names, b)) for b in idx["layout/boxes"][...]]
    tensors = idx["layout/tensors"][...]
    files = idx["layout/files"][...]
    runs = idx["layout/runs"][...]
    by_rank = {int(f["rank"]): f for f in files}
    boxes = []
    for ti, t in enumerate(tensors):
        mine = []
        for r in runs[runs["tensor_index"] == ti]:
            for i in range(int(r["count"])):
                rank = int(r["rank"]) + i * int(r["rank_stride"])
                off = tuple(int(o) + i * int(s) for o, s in zip(r["offset"], r["offset_step"]))
                mine.append((off, rank, tuple(int(x) for x in r["shape"])))
        mine.sort()
        check(len(mine) == int(t["nboxes"]), f"{what}: {t['name']}: runs give {len(mine)} boxes, table {t['nboxes']}")
        k = {}
        for off, rank, shp in mine:
            check(rank in by_rank, f"{what}: a run names rank file {rank}, not in /layout/files")
            kk = k.get(rank, 0)
            k[rank] = kk + 1
            name = t["name"].decode()
            boxes.append({"tensor": t["name"], "tensor_index": ti, "rank": rank, "file": b"rank_%05d.h5" % rank,
                          "dataset": ("/%s/box_%d" % (name, kk)).encode(),
                          "tiles_dataset": ("/%s/tiles_%d" % (name, kk)).encode(),
                          "offset": np.array(off), "shape": np.array(shp), "k": kk})
    for rank, f in by_rank.items():
        with h5py.File(os.path.join(step_dir, f["name"].decode()), "r") as rf:
            table = rf["boxes"][...]
            raw = np.ascontiguousarray(table)
            check(raw.dtype.itemsize == 364, f"{what}: {f['name']}: /boxes rows of {raw.dtype.itemsize} bytes")
            check(xxh3(raw.view(np.uint8)) == int(f["boxes_checksum"]),
                  f"{what}: {f['name']}: /boxes does not hash to the index's boxes_checksum")
            mine = [b for b in boxes if b["rank"] == rank]
            mine.sort(key=lambda b: (b["tensor"], tuple(b["offset"])))
            check(len(mine) == len(table) == int(f["nboxes"]), f"{what}: {f['name']}: {len(table)} rows")
            for b, row in zip(mine, table):
                check(row["tensor"] == b["tensor"] and list(row["offset"]) == list(b["offset"]) and
                      list(row["shape"]) == list(b["shape"]) and int(row["k"]) == b["k"],
                      f"{what}: {f['name']}: row {row} is not box {b}")
                for key in ("checksum", "tile_rows", "tile_cols", "ntiles", "tiles_checksum"):
                    b[key] = row[key]
    return boxes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tool", required=True)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--plugins", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--np", type=int, default=3)
    a = ap.parse_args()
    os.environ["HDF5_PLUGIN_PATH"] = os.path.abspath(a.plugins)
    os.environ["HDF5_USE_FILE_LOCKING"] = "FALSE"
    import h5py  # after HDF5_PLUGIN_PATH is set
    import numpy as np

    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    mpi = [a.mpiexec, "--allow-run-as-root", "--oversubscribe", "-np", str(a.np)]
    fails = []

    def check(cond, msg):
        if not cond:
            fails.append(msg)
            print("FAIL:", msg, file=sys.stderr)

    # files of several ranks (ckpt_save_opts.ranks_per_file): the same reading, the rank files of the
    # groups' leaders only, and every tensor equal to the plain (one file per rank) save's
    modes = (("plain", [], range(a.np)), ("zstd", ["--zstd", "4"], range(a.np)),
             ("files2", ["--files", "2"], range(0, a.np, 2)), ("node", ["--files", "node"], [0]))
    tensors_of = {}
    for mode, extra, want_files in modes:
        root = os.path.join(a.workdir, mode)
        r = subprocess.run(mpi + [a.tool, "save", root, "5"] + extra, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        if r.returncode != 0:
            print(f"FAIL: {mode}: tool_ckpt_mpi save exited {r.returncode}", file=sys.stderr)
            return 1
        with open(os.path.join(root, "latest")) as f:
            step_dir = os.path.join(root, f.read().strip())
        # read from another directory: the views' relative source paths must not depend on the cwd
        os.chdir("/")
        idx = h5py.File(os.path.join(step_dir, "index.h5"), "r")
        check(idx.attrs["format"] == b"meshpoint-checkpoint", f"{mode}: format {idx.attrs['format']!r}")
        check(int(idx.attrs["format_version"]) == 3, f"{mode}: version")
        link = idx.get("view", getlink=True)
        check(isinstance(link, h5py.ExternalLink) and link.filename == "view.h5" and link.path == "/view",
              f"{mode}: /view is not the external link to view.h5:/view")
        check("layout/slab_checksums" not in idx, f"{mode}: a v2 index has no slab checksum table")
        check(int(idx.attrs["step"]) == 5, f"{mode}: step")
        check(int(idx.attrs["world_size"]) == a.np, f"{mode}: world_size")
        check(idx["meta/who"][()] == b"rank0", f"{mode}: meta who = {idx['meta/who'][()]!r}")
        check(b"hidden_size" in idx["meta/model_config"][()], f"{mode}: model_config")
        tensors = idx["layout/tensors"][...]
        boxes = layout_boxes(h5py, np, check, mode, step_dir, idx)
        files = idx["layout/files"][...]
        check(len(tensors) == 6, f"{mode}: {len(tensors)} tensors")
        check(sorted(int(x) for x in files["rank"]) == list(want_files), f"{mode}: files {files}")
        check(sorted(x for x in os.listdir(step_dir) if x.startswith("rank_")) ==
              ["rank_%05d.h5" % r for r in want_files], f"{mode}: rank files on disk {os.listdir(step_dir)}")
        rank_files = {}
        for ti, t in enumerate(tensors):
            name = t["name"].decode()
            nd = int(t["ndim"])
            shape = tuple(int(x) for x in t["shape"][:nd])
            dtype = t["dtype"].decode()
            full = np.full(shape, np.nan, dtype=np.float32)
            count = np.zeros(shape, dtype=np.int32)
            first, n = int(t["box_first"]), int(t["nboxes"])
            check(n >= 1, f"{mode}: {name} has no boxes")
            for b in boxes[first:first + n]:
                check(b["tensor"].decode() == name and int(b["tensor_index"]) == ti, f"{mode}: box of {name}")
                fname = b["file"].decode()
                if fname not in rank_files:
                    rank_files[fname] = h5py.File(os.path.join(step_dir, fname), "r")
                ds = rank_files[fname][b["dataset"].decode()]
                off = [int(x) for x in b["offset"][:nd]]
                shp = [int(x) for x in b["shape"][:nd]]
                check(list(ds.shape) == shp, f"{mode}: {name} {fname}: shape {ds.shape} vs {shp}")
                check(list(ds.attrs["global_offset"]) == off, f"{mode}: {name}: global_offset attribute")
                check(list(ds.attrs["global_shape"]) == list(shape), f"{mode}: {name}: global_shape attribute")
                check(int(ds.attrs["checksum"]) == int(b["checksum"]), f"{mode}: {name}: checksum attribute")
                check(ds.attrs["tensor"] == name.encode(), f"{mode}: {name}: tensor attribute")
                check(int(rank_files[fname].attrs["format_version"]) == 3, f"{mode}: {fname}: format_version")
                check_box_tiles(h5py, np, check, f"{mode}: {name} {fname}", rank_files[fname], b, ds, mode == "zstd")
                if mode == "zstd":
                    plist = ds.id.get_create_plist()
                    filters = [plist.get_filter(i)[0] for i in range(plist.get_nfilters())]
                    check(filters == [h5py.h5z.FILTER_SHUFFLE, 32015], f"{mode}: {name}: filters {filters}")
                sl = tuple(slice(o, o + s) for o, s in zip(off, shp))
                full[sl] = ds.astype("f4")[...]
                count[sl] += 1
            check(bool((count == 1).all()), f"{mode}: {name}: elements not written exactly once")
            view = idx["view/" + name]
            check(view.is_virtual, f"{mode}: {name}: view is not virtual")
            check(view.shape == shape, f"{mode}: {name}: view shape {view.shape}")
            got = view.astype("f4")[...]
            check(np.array_equal(got, full), f"{mode}: {name} ({dtype}): view differs from the rank files")
            check(not np.isnan(got).any(), f"{mode}: {name}: view has fill values (missing source?)")
            tensors_of.setdefault(mode, {})[name] = view[...]
            if mode in ("files2", "node"):
                ref = tensors_of["plain"][name]
                check(got.dtype == ref.dtype and np.array_equal(view[...].view(np.uint8), ref.view(np.uint8)),
                      f"{mode}: {name}: differs bitwise from the one-file-per-rank save")
        for f in rank_files.values():
            f.close()
        idx.close()
        # h5dump reads a (compressed) dataset with the plugin, and not without it
        rf = os.path.join(step_dir, "rank_00000.h5")
        dset = "/model/model.embed_tokens.weight/box_0"
        r = subprocess.run(["h5dump", "-d", dset, rf], capture_output=True, text=True)
        check(r.returncode == 0 and "-6.75" in r.stdout and "DATA" in r.stdout,
              f"{mode}: h5dump -d failed: rc {r.returncode} {r.stdout[:300]} {r.stderr[:300]}")
        if mode == "zstd":
            env = dict(os.environ)
            env.pop("HDF5_PLUGIN_PATH")
            env["HDF5_PLUGIN_PATH"] = "/nonexistent"
            r = subprocess.run(["h5dump", "-d", dset, rf], capture_output=True, text=True, env=env)
            check("-6.75" not in r.stdout, f"{mode}: h5dump read compressed data without the plugin?")
    if fails:
        print(f"test_ckpt_h5py: {len(fails)} failures", file=sys.stderr)
        return 1
    print("test_ckpt_h5py: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
