#!/usr/bin/python3
"""tests/zstd_damaged.py — a zstd checkpoint with one chunk replaced by a crafted frame, read by the
library and by h5py through the plugin.

Trains a tiny model for 2 steps with `--compress zstd:3` (one rank), checks that the rank file records the
chunk size in the filter's cd_values ({level, CKPT_ZSTD_CD_TAG, chunk bytes}: docs/FORMAT.md
"Compression"), then, for each crafted frame, copies the checkpoint, replaces the single chunk of one
box dataset with the frame (h5py's write_direct_chunk: raw bytes, filters bypassed) and requires that

  (a) `meshpoint ckpt verify` exits 1 with a message naming the rank file, the tensor and the zstd
      filter's cause, and `meshpoint eval --checkpoint` (the ckpt_read path) fails naming the file;
      run in the sanitizer build, any heap over-read is an ASan report and a non-1 exit;
  (b) h5py with HDF5_PLUGIN_PATH=<build>/plugins raises instead of returning data, for the box dataset
      and for the tensor's virtual view in index.h5; the pristine copy reads and matches.

Frames (RFC 8878, built here by hand): short (half the chunk, honest header), long (twice), lying
(header says the chunk size, blocks hold half), bomb (1 GiB of RLE blocks in 32 KiB, no declared size),
declared bomb (1 GiB declared), garbage, truncated (the original frame cut in half), two frames
(two halves), empty (a frame of zero bytes).

usage: zstd_damaged.py --meshpoint BIN --plugins DIR --config JSON --data TRAIN_BIN --workdir DIR
"""
import argparse
import os
import random
import shutil
import struct
import subprocess
import sys

TAG = 0x4D505A31          # CKPT_ZSTD_CD_TAG (ckpt/zstd_filter.h)
FILTER = 32015
TENSOR = "model/model.layers.0.mlp.down_proj.weight"
DSET = TENSOR + "/box_0"
MAGIC = 0xFD2FB528


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def frame(content, declared=None, rle=False):
    """A zstd frame of `content` bytes in raw (or RLE) blocks; `declared` in the header, or no size."""
    out = bytearray(struct.pack("<I", MAGIC))
    if declared is not None:
        out += bytes([0xE0]) + struct.pack("<Q", declared)      # single segment, 8-byte content size
    else:
        out += bytes([0x00, (17 - 10) << 3])                     # no content size, 128 KiB window
    done = 0
    while True:
        k = min(content - done, 131072)
        last = done + k == content
        out += struct.pack("<I", int(last) | (1 if rle else 0) << 1 | k << 3)[:3]
        out += b"\x55" if rle else bytes((done + i) * 7 % 251 for i in range(k))
        done += k
        if done >= content:
            return bytes(out)


def cases(chunk, original):
    rnd = random.Random(5)
    half = frame(chunk // 2, chunk // 2)
    return {
        "short": half,
        "long": frame(chunk * 2, chunk * 2),
        "lying": frame(chunk // 2, chunk),
        "bomb": frame(1 << 30, None, rle=True),
        "declared_bomb": frame(1 << 30, 1 << 30, rle=True),
        "garbage": bytes(rnd.randrange(256) for _ in range(len(original))),
        "truncated": original[: len(original) // 2],
        "two_frames": half + half,
        "empty": frame(0, 0),
    }


def run(cmd, log):
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    with open(log) as f:
        return p.returncode, f.read()


READER = r"""
import os, sys
os.environ["HDF5_PLUGIN_PATH"] = sys.argv[1]
import h5py, numpy
step, dset, view = sys.argv[2], sys.argv[3], sys.argv[4]
for path, name in ((os.path.join(step, "rank_00000.h5"), dset), (os.path.join(step, "index.h5"), view)):
    with h5py.File(path, "r") as f:
        try:
            a = f[name][...]
        except Exception as e:           # h5py raises OSError for a failed filter
            print("RAISED", name, type(e).__name__, str(e).replace("\n", " ")[:200])
            continue
        print("READ", name, a.dtype, a.shape, float(numpy.abs(a).sum()))
"""


def h5py_read(plugins, step):
    p = subprocess.run([sys.executable, "-c", READER, plugins, step, DSET, "view/" + TENSOR],
                       capture_output=True, text=True)
    if p.returncode != 0:
        fail("the h5py reader process crashed (%d): %s %s" % (p.returncode, p.stdout, p.stderr))
    return p.stdout.splitlines()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--meshpoint", required=True)
    ap.add_argument("--plugins", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()
    plugins = os.path.abspath(a.plugins)
    work = os.path.abspath(a.workdir)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    import h5py  # raw chunk access only: no plugin needed (HDF5_PLUGIN_PATH unset here)

    run_dir = os.path.join(work, "run")
    rc, out = run([a.meshpoint, "train", "--config", a.config, "--train-data", a.data, "--log-every", "0",
                   "--run-dir", run_dir, "--steps", "2", "--ckpt-every", "2", "--compress", "zstd:3"],
                  os.path.join(work, "train.log"))
    if rc != 0:
        fail("training failed (%d): %s" % (rc, out))
    pristine = os.path.join(run_dir, "checkpoints", "step_00000002")
    rank = os.path.join(pristine, "rank_00000.h5")

    with h5py.File(rank, "r") as f:
        d = f[DSET]
        plist = d.id.get_create_plist()
        cd = plist.get_filter_by_id(FILTER)[1]
        chunk = d.dtype.itemsize
        for c in d.chunks:
            chunk *= c
        if tuple(cd) != (3, TAG, chunk):
            fail("cd_values of %s are %s, expected (3, 0x%x, %d)" % (DSET, tuple(cd), TAG, chunk))
        if d.id.get_num_chunks() != 1:
            fail("expected one chunk in %s" % DSET)
        original = d.id.read_direct_chunk((0,) * d.ndim)[1]
        ok = d.id.get_chunk_info(0)
    print("chunk of %s: %d bytes, stored in %d (filter_mask %d)" % (DSET, chunk, ok.size, ok.filter_mask))

    rc, out = run([a.meshpoint, "ckpt", "verify", pristine], os.path.join(work, "verify_pristine.log"))
    if rc != 0:
        fail("the pristine checkpoint does not verify (%d): %s" % (rc, out))
    lines = h5py_read(plugins, pristine)
    if len(lines) != 2 or not all(x.startswith("READ") for x in lines) or lines[0].split()[-1] != lines[1].split()[-1]:
        fail("h5py cannot read the pristine checkpoint through the plugin: %s" % lines)

    for name, fr in cases(chunk, bytes(original)).items():
        step = os.path.join(work, name, "step_00000002")
        shutil.copytree(pristine, step)
        with h5py.File(os.path.join(step, "rank_00000.h5"), "r+") as f:
            f[DSET].id.write_direct_chunk((0,) * f[DSET].ndim, fr, 0)
        rc, vout = run([a.meshpoint, "ckpt", "verify", step], os.path.join(work, name + "_verify.log"))
        out = vout
        if rc != 1:
            fail("%s: ckpt verify exited %d, expected 1: %s" % (name, rc, out))
        for want in ("rank_00000.h5", TENSOR, "zstd filter"):
            if want not in out:
                fail("%s: ckpt verify does not name %r: %s" % (name, want, out))
        if "AddressSanitizer" in out or "runtime error" in out:
            fail("%s: sanitizer report from ckpt verify: %s" % (name, out))
        rc, out = run([a.meshpoint, "eval", "--checkpoint", step, "--data", a.data, "--batch", "4", "--seq-len", "16",
                       "--batches", "1"], os.path.join(work, name + "_eval.log"))
        if rc not in (1, 2) or "rank_00000.h5" not in out or "AddressSanitizer" in out:
            fail("%s: eval of the damaged checkpoint exited %d: %s" % (name, rc, out))
        lines = h5py_read(plugins, step)
        if len(lines) != 2 or not all(x.startswith("RAISED") for x in lines):
            fail("%s: h5py returned data from a damaged chunk: %s" % (name, lines))
        print("%-14s %5d-byte chunk: verify exit 1 (%s); h5py raised" % (name, len(fr), vout.strip().splitlines()[-1][-90:]))
    print("PASS")


if __name__ == "__main__":
    main()
