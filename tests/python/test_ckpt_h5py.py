#!/usr/bin/python3
"""tests/python/test_ckpt_h5py.py — checkpoints read by other tools, with no code of ours.

Writes a checkpoint with 3 ranks (tests/tool_ckpt_mpi save), plain and zstd-compressed, then with
Debian's h5py: opens index.h5, checks the format attributes, reads the layout tables, assembles every
tensor from the rank files through the box table (checking each dataset's attributes against the
table and that every element is written exactly once), reads every tensor whole through its virtual
view and requires both to be equal. Compressed checkpoints are read with HDF5_PLUGIN_PATH pointing at
the build's plugins directory (the zstd filter, id 32015). h5dump -d of a compressed dataset must
print its numbers with the plugin, and must fail to without it (so the plugin is what makes it work).
Exit status 0 on success, 1 on a failed check.
"""
import argparse
import os
import shutil
import subprocess
import sys


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

    for mode, extra in (("plain", []), ("zstd", ["--zstd", "4"])):
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
        check(int(idx.attrs["format_version"]) == 1, f"{mode}: version")
        check(int(idx.attrs["step"]) == 5, f"{mode}: step")
        check(int(idx.attrs["world_size"]) == a.np, f"{mode}: world_size")
        check(idx["meta/who"][()] == b"rank0", f"{mode}: meta who = {idx['meta/who'][()]!r}")
        check(b"hidden_size" in idx["meta/model_config"][()], f"{mode}: model_config")
        tensors = idx["layout/tensors"][...]
        boxes = idx["layout/boxes"][...]
        files = idx["layout/files"][...]
        check(len(tensors) == 6, f"{mode}: {len(tensors)} tensors")
        check(sorted(int(x) for x in files["rank"]) == list(range(a.np)), f"{mode}: files {files}")
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
