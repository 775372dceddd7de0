#!/usr/bin/python3
"""bench/torch_save.py — the PyTorch peer of bench/bench_ckpt.sh: torch.save / torch.load of the same
tensors that bench_ckpt checkpoints.

  torch_save.py save SHAPES FILE   a dict {name: f32 tensor} with the shapes listed in SHAPES (the
                                   output of `bench_ckpt shapes GIB`: "name dim0 [dim1]" per line),
                                   filled with random values (untimed); timed: open FILE, torch.save
                                   (the default zip format), flush, os.fsync, close.
  torch_save.py load SHAPES FILE   timed: torch.load(FILE) (every storage read into memory); then
                                   (untimed) the names, shapes and dtypes are checked against SHAPES
                                   and the values against the same random fill.

Before the timed part each mode primes memory (see prime()). Prints one line, "torch_save bytes=B
seconds=S file_bytes=F" or "torch_load bytes=B seconds=S", for the script to parse. Run with
Debian's interpreter (/usr/bin/python3, python3-torch). Single-threaded (torch.set_num_threads(1)):
serialisation is I/O, and the random fill should not compete with other jobs for both cores.
Exit status: 0 ok, 1 a failed check, 2 bad usage.
"""
import math
import os
import sys
import time

import torch

from ckpt_state import prime, read_shapes






def make_state(shapes):
    """The same values on every call: a fixed seed, tensors in file order."""
    g = torch.Generator().manual_seed(1234)
    return {name: torch.rand(shape, generator=g, dtype=torch.float32) * 2 - 1 for name, shape in shapes}


def main():
    if len(sys.argv) != 4 or sys.argv[1] not in ("save", "load"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, shapes_path, path = sys.argv[1:]
    torch.set_num_threads(1)
    shapes = read_shapes(shapes_path)
    if mode == "save":
        state = make_state(shapes)
        nbytes = sum(t.numel() * t.element_size() for t in state.values())
        prime(nbytes + nbytes // 4)   # the page cache of the file
        t0 = time.perf_counter()
        with open(path, "wb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())
        dt = time.perf_counter() - t0
        print(f"torch_save bytes={nbytes} seconds={dt:.4f} file_bytes={os.path.getsize(path)}")
        return 0
    nbytes = sum(4 * math.prod(shape) for _, shape in shapes)
    prime(2 * nbytes + nbytes // 4)   # the page cache of the file and the loaded tensors
    t0 = time.perf_counter()
    state = torch.load(path)
    dt = time.perf_counter() - t0
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    ref = make_state(shapes)
    if list(state) != list(ref):
        print(f"torch_save.py: {path}: tensor names differ from {shapes_path}", file=sys.stderr)
        return 1
    for name, t in ref.items():
        if state[name].dtype != t.dtype or state[name].shape != t.shape or not torch.equal(state[name], t):
            print(f"torch_save.py: {path}: tensor {name} differs from what was saved", file=sys.stderr)
            return 1
    print(f"torch_load bytes={nbytes} seconds={dt:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
