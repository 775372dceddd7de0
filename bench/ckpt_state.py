"""bench/ckpt_state.py — what the Python sides of bench/bench_ckpt.sh share: the tensor list that
`bench_ckpt shapes GIB` prints, and the memory priming every timed part starts with. Imported by
bench/torch_save.py (Debian's torch) and bench/dcp_ckpt.py (the venv's torch 2.x); torch only."""
import sys

import torch


def read_shapes(path):
    """[(name, shape)] from a `bench_ckpt shapes` file ("NAME D0 D1 ..." per line); exits if empty."""
    out = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if parts:
                out.append((parts[0], tuple(int(x) for x in parts[1:])))
    if not out:
        sys.exit(f"{path}: no tensors")
    return out


def prime(nbytes):
    """Touches nbytes of fresh memory (one byte per page) and frees it, right before the timed part, as
    bench_ckpt does: the pages the timed part allocates are then backed by the host (docs/BENCH_CKPT.md,
    "Machine")."""
    b = torch.empty(nbytes, dtype=torch.uint8)
    b[::4096] = 1
    del b
