"""bench/dcp_ckpt.py — the PyTorch Distributed Checkpoint (DCP) side of the multi-process comparison in
bench/bench_ckpt.sh; meshpoint's side is bench/bench_ckpt_mesh.c, and both follow the same rules.

  python -m torch.distributed.run --standalone --nproc-per-node N bench/dcp_ckpt.py save SHAPES DIR LAYOUT
  python -m torch.distributed.run --standalone --nproc-per-node N bench/dcp_ckpt.py load SHAPES DIR LAYOUT

N processes, gloo, CPU tensors, a 1-D DeviceMesh over the N ranks. The state: the tensors of SHAPES
(the output of `bench_ckpt shapes GIB`: parameters + both AdamW moments of bench_ckpt's Llama-shaped
model, f32), as a flat state dict {name: DTensor}. LAYOUT:
  tp    Megatron TP of degree N: o_proj and down_proj Shard(1), every other 2-D tensor Shard(0), 1-D
        norms Replicate() (DCP saves a replicated tensor once);
  fsdp  FSDP over N (tp 1 x dp N): every tensor Shard(0).
Shards are DTensor's (torch.chunk: chunk = ceil(len / N)). Element g (row-major global index) of tensor
t (its line in SHAPES) holds ((g * 2654435761 + t * 40503) & 0xffffff) / 2^24, as in bench_ckpt_mesh.

  save   fill (untimed); timed from a barrier to the last rank's return of
         torch.distributed.checkpoint.save(state, storage_writer=FileSystemWriter(DIR, sync_files=True))
  load   allocate and touch this rank's shards in LAYOUT (untimed); timed from a barrier to the last
         rank's return of torch.distributed.checkpoint.load(state, storage_reader=FileSystemReader(DIR))
         (DCP reshards when LAYOUT differs from the saved one); then (untimed) the values are checked.

Before the timed part each rank touches and frees 1.25x its share of the state (see bench_ckpt.c,
prime()). Memory: `5` into /proc/self/clear_refs resets the peak RSS right before the timed part;
extra = VmHWM after - VmRSS before. I/O: /proc/self/io rchar and read_bytes around the timed part, and
the bytes of the stored items DCP's reader was planned to read (it reads each stored item whole, then
narrows it to the requested region). Rank 0 prints one line of sums over the ranks:
  dcp_save procs= layout= bytes= seconds= extra_rss= hwm= state=
  dcp_load procs= layout= needed= seconds= rchar= read_bytes= dcp_read= extra_rss= hwm= state=
Exit status: 0 ok, 1 a failed check, 2 bad usage.
"""
import datetime
import sys
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard

from ckpt_state import prime, read_shapes




def placement(name, shape, layout):
    """(placement, dim): dim None for replicated."""
    if layout == "fsdp":
        return Shard(0), 0
    if len(shape) == 1:
        return Replicate(), None
    if "o_proj" in name or "down_proj" in name:
        return Shard(1), 1
    return Shard(0), 0


def local_region(shape, dim, rank, n):
    """(offsets, lengths) of this rank's shard, torch.chunk rule; None if it is empty."""
    off, lens = [0] * len(shape), list(shape)
    if dim is not None:
        c = -(-shape[dim] // n)
        s = rank * c
        cnt = min(c, shape[dim] - s)
        if cnt <= 0:
            return None
        off[dim], lens[dim] = s, cnt
    return off, lens


def values(t, shape, off, lens):
    if len(shape) == 1:
        g = torch.arange(off[0], off[0] + lens[0], dtype=torch.int64)
    else:
        g = (torch.arange(off[0], off[0] + lens[0], dtype=torch.int64)[:, None] * shape[1]
             + torch.arange(off[1], off[1] + lens[1], dtype=torch.int64)[None, :])
    return ((g * 2654435761 + t * 40503) & 0xFFFFFF).to(torch.float32) / 16777216.0


def build(shapes, layout, mesh, rank, n, fill):
    """{name: DTensor} of this rank's shards, filled with the values (fill) or -1 (touched only);
    also the list (t, name, off, lens, local tensor) and the local bytes."""
    state, parts, nbytes = {}, [], 0
    for t, (name, shape) in enumerate(shapes):
        pl, dim = placement(name, shape, layout)
        reg = local_region(shape, dim, rank, n)
        if reg is None:
            local = torch.empty([0 if d == dim else s for d, s in enumerate(shape)], dtype=torch.float32)
        else:
            off, lens = reg
            local = values(t, shape, off, lens) if fill else torch.full(lens, -1.0, dtype=torch.float32)
            parts.append((t, name, off, lens, local))
            nbytes += local.numel() * 4
        stride = tuple(int(torch.tensor(shape[i + 1:]).prod()) for i in range(len(shape)))
        state[name] = DTensor.from_local(local, mesh, [pl], run_check=False, shape=torch.Size(shape), stride=stride)
    return state, parts, nbytes




def status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field):
                return 1024 * int(line.split()[1])
    return -1


def proc_io():
    d = {}
    with open("/proc/self/io") as f:
        for line in f:
            k, v = line.split(":")
            d[k] = int(v)
    return d["rchar"], d["read_bytes"]


class CountingReader(FileSystemReader):
    """FileSystemReader that adds up the stored bytes of every item its plan reads."""
    planned = 0

    def read_data(self, plan, planner):
        for item in plan.items:
            CountingReader.planned += self.storage_data[item.storage_index].length
        return super().read_data(plan, planner)


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("save", "load") or sys.argv[4] not in ("tp", "fsdp"):
        print(__doc__, file=sys.stderr)
        return 2
    mode, shapes_path, path, layout = sys.argv[1:]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", timeout=datetime.timedelta(minutes=10))   # a dead peer: fail, not hang 30 min
    rank, n = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (n,))
    shapes = read_shapes(shapes_path)
    state, parts, nbytes = build(shapes, layout, mesh, rank, n, fill=(mode == "save"))
    prime(nbytes + nbytes // 4)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    rss0 = status_bytes("VmRSS:")
    dist.barrier()
    io0 = proc_io()
    t0 = time.perf_counter()
    if mode == "save":
        dcp.save(state, storage_writer=FileSystemWriter(path, sync_files=True))
    else:
        dcp.load(state, storage_reader=CountingReader(path))
    io1 = proc_io()
    dist.barrier()
    dt = time.perf_counter() - t0
    hwm = status_bytes("VmHWM:")
    bad = 0
    if mode == "load":
        for t, name, off, lens, local in parts:
            if not torch.equal(local, values(t, shapes[t][1], off, lens)):
                print(f"dcp_ckpt.py [rank {rank}]: {name}: loaded values differ", file=sys.stderr)
                bad = 1
                break
    v = torch.tensor([nbytes, io1[0] - io0[0], io1[1] - io0[1], CountingReader.planned, hwm - rss0, hwm, bad],
                     dtype=torch.float64)
    dist.all_reduce(v)
    v = v.tolist()
    if rank == 0 and v[6] == 0:
        if mode == "save":
            print(f"dcp_save procs={n} layout={layout} bytes={v[0]:.0f} seconds={dt:.4f} extra_rss={v[4]:.0f}"
                  f" hwm={v[5]:.0f} state={v[0]:.0f}", flush=True)
        else:
            print(f"dcp_load procs={n} layout={layout} needed={v[0]:.0f} seconds={dt:.4f} rchar={v[1]:.0f}"
                  f" read_bytes={v[2]:.0f} dcp_read={v[3]:.0f} extra_rss={v[4]:.0f} hwm={v[5]:.0f} state={v[0]:.0f}",
                  flush=True)
    dist.destroy_process_group()
    return 1 if v[6] else 0


if __name__ == "__main__":
    sys.exit(main())
