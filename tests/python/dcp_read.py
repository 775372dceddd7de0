"""tests/python/dcp_read.py — meshpoint's DCP reader (reshard/dcp.c, reshard/pickle.c) and `ckpt ls|show|verify`
of DCP directories, against DCP directories that torch (scripts/bench_venv.sh's pinned release) writes.

  1. torch writes DCP checkpoints: 1 process (no_dist), 2 and 4 gloo processes (torch.multiprocessing spawn
     on localhost) with DTensor shards on dim 0, dim 1, both (a 2x2 mesh), uneven shards and a replicated
     tensor, in float32, bfloat16 and float16, plus torchtitan's train_state step (a 0-d int32 tensor, or a
     plain int saved as bytes) and an opaque bytes item.
  2. `ckpt show --json` lists exactly the tensors, dtypes, shapes and chunks (offsets, sizes, file, record
     offset and length) of torch's own Metadata, the bytes items by name and the step.
  3. tests/tool_dcp_dump's chunks (what the reader returns) equal the saved state dict's boxes, bitwise.
  4. `ckpt verify` passes, saying DCP has no checksums; `ckpt ls` lists the directories; verify fails
     (exit 1, naming the problem) on a truncated .distcp, a chunk missing from coverage, overlapping chunks.
  5. Crafted `.metadata` files are refused with exit 2 naming the problem, nothing executed, under a 256 MiB
     address-space limit: os.system (GLOBAL and STACK_GLOBAL), builtins.eval, a REDUCE of an allowlisted non-callable,
     100k MARKs, 100k stacked lists, a memo chain of nested lists, a huge length prefix, a truncated file,
     transform_descriptors (compression).

Usage: python dcp_read.py MESHPOINT TOOL_DCP_DUMP WORKDIR
"""
import json
import os
import pickle
import resource
import shutil
import struct
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

MP, DUMP, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
FAILS = []


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def full_tensors():
    """The global tensors every writer saves (same seed in every process)."""
    g = torch.Generator().manual_seed(1234)
    return {
        "model.w_rows": torch.randn(8, 6, generator=g),                          # f32, dim 0
        "model.w_cols": torch.randn(4, 12, generator=g).to(torch.bfloat16),      # bf16, dim 1
        "model.w_both": torch.randn(6, 10, generator=g).to(torch.float16),       # f16, dims 0 and 1 (2x2 mesh)
        "model.uneven": torch.randn(10, 3, generator=g).to(torch.bfloat16),      # 10 rows over 4: 3,3,3,1
        "model.norm": torch.randn(7, generator=g),                               # replicated
    }


def state_dict(world, rank_mesh=None):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    full = full_tensors()
    if world == 1:
        sd = dict(full)
    else:
        from torch.distributed.device_mesh import init_device_mesh
        mesh = init_device_mesh("cpu", (world,))
        sd = {"model.w_rows": distribute_tensor(full["model.w_rows"], mesh, [Shard(0)]),
              "model.w_cols": distribute_tensor(full["model.w_cols"], mesh, [Shard(1)]),
              "model.uneven": distribute_tensor(full["model.uneven"], mesh, [Shard(0)]),
              "model.norm": distribute_tensor(full["model.norm"], mesh, [Replicate()])}
        if world == 4:
            m2 = init_device_mesh("cpu", (2, 2))
            sd["model.w_both"] = distribute_tensor(full["model.w_both"], m2, [Shard(0), Shard(1)])
        else:
            sd["model.w_both"] = distribute_tensor(full["model.w_both"], mesh, [Shard(1)])
    return sd


def writer(rank, world, out, port, step_as_tensor):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    sd = state_dict(world)
    sd["train_state"] = {"step": torch.tensor(42, dtype=torch.int32) if step_as_tensor else 42}
    sd["extra"] = b"opaque bytes"
    dcp.save(sd, checkpoint_id=out)
    dist.destroy_process_group()


def write_all():
    dirs = {}
    d1 = os.path.join(WORK, "dcp_w1")
    sd = state_dict(1)
    sd["train_state"] = {"step": 42}
    sd["extra"] = b"opaque bytes"
    dcp.save(sd, checkpoint_id=d1, no_dist=True)
    dirs[1] = d1
    for world, port, as_tensor in ((2, 29631, True), (4, 29641, False)):
        d = os.path.join(WORK, f"dcp_w{world}")
        mp.spawn(writer, args=(world, d, port, as_tensor), nprocs=world)
        dirs[world] = d
    return dirs


def run(*args):
    r = subprocess.run([MP, *args], capture_output=True, text=True)
    return r.returncode, r.stdout, r.stderr


def run_limited(*args):
    """run() under a 256 MiB address-space limit (RLIMIT_AS): an absurd allocation fails there (exit 1 with
    the allocator's message) instead of being refused by the reader (exit 2). In the sanitizer build
    (MP_SANITIZED, tests/sanitize.cmake) ASan reserves terabytes of shadow address space, so the same bound
    is ASan's own: no allocation above 256 MiB, returned as NULL to meshpoint's checked allocator."""
    lim = 256 << 20
    if os.environ.get("MP_SANITIZED"):
        env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") +
                   ":max_allocation_size_mb=256:allocator_may_return_null=1")
        r = subprocess.run([MP, *args], capture_output=True, text=True, env=env)
    else:
        r = subprocess.run([MP, *args], capture_output=True, text=True,
                           preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (lim, lim)))
    return r.returncode, r.stdout, r.stderr


def torch_view(d):
    """What torch's own Metadata says: {name: (dtype, shape, [(offsets, sizes, file, off, len)])}."""
    md = dcp.FileSystemReader(d).read_metadata()
    tensors, byts = {}, set()
    for name, m in md.state_dict_metadata.items():
        if isinstance(m, dcp.metadata.BytesStorageMetadata):
            byts.add(name)
            continue
        chunks = []
        for i, c in enumerate(m.chunks):
            info = md.storage_data[dcp.metadata.MetadataIndex(name, c.offsets, i)]
            chunks.append((list(c.offsets), list(c.sizes), info.relative_path, info.offset, info.length))
        tensors[name] = (str(m.properties.dtype).replace("torch.", ""), list(m.size), sorted(chunks))
    return tensors, byts


def check_show(d, world):
    rc, out, err = run("ckpt", "show", "--json", d)
    check(rc == 0, f"w{world}: ckpt show --json exits 0 ({err.strip()[:300]})")
    if rc:
        return
    j = json.loads(out)
    want, byts = torch_view(d)
    got = {t["name"]: (t["dtype"], t["shape"], sorted((c["offsets"], c["sizes"], c["file"], c["record_offset"],
                                                        c["record_length"]) for c in t["chunks"]))
           for t in j["tensors"]}
    got = {k: (v[0], v[1], [tuple(c) for c in v[2]]) for k, v in got.items()}
    check(got == want, f"w{world}: show lists exactly torch's tensors, dtypes, shapes and chunks")
    check({b["name"] for b in j["bytes_items"]} == byts, f"w{world}: show lists the bytes items {sorted(byts)}")
    check(j["step"] == 42, f"w{world}: show gives train_state step 42 (got {j['step']})")
    nchunks = sum(len(v[2]) for v in want.values())
    check(world < 2 or nchunks > len(want), f"w{world}: tensors have several chunks ({nchunks})")
    rc, out, _ = run("ckpt", "show", d)
    check(rc == 0 and "train_state step  42" in out and "[0:3, 0:5]" in out if world == 4 else rc == 0,
          f"w{world}: ckpt show text prints the step and the boxes")


def check_bytes(d, world):
    out = os.path.join(WORK, f"dump_w{world}")
    os.makedirs(out, exist_ok=True)
    r = subprocess.run([DUMP, d, out], capture_output=True, text=True)
    check(r.returncode == 0 and "step 42" in r.stdout, f"w{world}: tool_dcp_dump reads every chunk ({r.stderr[:300]})")
    full = full_tensors()
    want, _ = torch_view(d)
    md = dcp.FileSystemReader(d).read_metadata()
    same = True
    for name, m in md.state_dict_metadata.items():
        if name not in full:
            continue
        for i, c in enumerate(m.chunks):
            box = full[name][tuple(slice(o, o + s) for o, s in zip(c.offsets, c.sizes))].contiguous()
            ref = box.view(torch.uint8).numpy().tobytes() if box.dim() else box.reshape(1).view(torch.uint8).numpy().tobytes()
            path = os.path.join(out, f"{name}.{i}.bin")
            # the dump's chunk order is the metadata's: names sort, chunks keep their order
            got = open(path, "rb").read() if os.path.exists(path) else None
            if got != ref:
                same = False
                print(f"      {name} chunk {i}: differs")
    check(same, f"w{world}: every chunk the reader returns equals the saved state dict's box, bitwise")


def check_verify(d, world):
    rc, out, _ = run("ckpt", "verify", d)
    check(rc == 0 and "no checksums" in out, f"w{world}: ckpt verify passes and says DCP has no checksums")
    rc, out, _ = run("ckpt", "verify", "--json", d)
    j = json.loads(out) if rc == 0 else {}
    check(rc == 0 and j.get("ok") and j.get("checksums") is False, f"w{world}: ckpt verify --json ok, checksums false")


def damaged(src, name, edit):
    d = os.path.join(WORK, name)
    shutil.rmtree(d, ignore_errors=True)
    shutil.copytree(src, d)
    edit(d)
    return d


def edit_metadata(d, fn):
    p = os.path.join(d, ".metadata")
    with open(p, "rb") as f:
        md = pickle.load(f)
    fn(md)
    with open(p, "wb") as f:
        pickle.dump(md, f)


def check_damaged(src):
    def truncate(d):
        f = sorted(x for x in os.listdir(d) if x.endswith(".distcp"))[-1]
        p = os.path.join(d, f)
        os.truncate(p, os.path.getsize(p) // 2)

    def drop_chunk(md):
        m = md.state_dict_metadata["model.w_rows"]
        c = m.chunks.pop()
        del md.storage_data[dcp.metadata.MetadataIndex("model.w_rows", c.offsets, len(m.chunks))]

    def overlap(md):
        m = md.state_dict_metadata["model.w_cols"]
        key = dcp.metadata.MetadataIndex("model.w_cols", m.chunks[1].offsets, 1)
        info = md.storage_data.pop(key)
        m.chunks[1] = dcp.metadata.ChunkStorageMetadata(offsets=torch.Size([0, 1]), sizes=m.chunks[1].sizes)
        md.storage_data[dcp.metadata.MetadataIndex("model.w_cols", m.chunks[1].offsets, 1)] = info

    for name, edit, want in (("bad_truncated", truncate, "truncated"),
                             ("bad_missing_chunk", lambda d: edit_metadata(d, drop_chunk), "not covered exactly once"),
                             ("bad_overlap", lambda d: edit_metadata(d, overlap), "overlap")):
        d = damaged(src, name, edit)
        rc, out, err = run("ckpt", "verify", d)
        check(rc == 1 and want in out and "problem: " in out,
              f"verify of {name} exits 1 naming the problem ({want!r}) (rc {rc}: {(out + err).strip()[-300:]})")


class Evil:
    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg

    def __reduce__(self):
        return (self.fn, (self.arg,))


def crafted_cases(real_md):
    marker = os.path.join(WORK, "pwned")
    n = 100000
    chain = b"\x80\x02]" + b"".join(b"]r" + struct.pack("<I", i) + b"a0j" + struct.pack("<I", i) for i in range(2000)) + b"."
    md = pickle.loads(real_md)
    k = next(iter(md.storage_data))
    md.storage_data[k].transform_descriptors = ["zstd"]
    return [
        ("os_system_global", b"\x80\x02cos\nsystem\nX\x05\x00\x00\x00touch\x85R.", "refusing to load class os.system"),
        ("os_system_stack_global", pickle.dumps(Evil(os.system, "touch " + marker), protocol=4),
         "refusing to load class posix.system"),
        ("builtins_eval", pickle.dumps(Evil(eval, "open('%s','w')" % marker), protocol=4),
         "refusing to load class builtins.eval"),
        ("reduce_dtype", b"\x80\x02ctorch\nfloat32\n)R.", "refusing to call torch.float32"),
        ("marks", b"\x80\x02" + b"(" * n + b".", "nested MARKs"),
        ("lists", b"\x80\x02" + b"]" * (2 * n) + b".", "values on the pickle stack"),
        ("memo_chain", chain, "nested deeper than"),
        ("huge_length", b"\x80\x04\x8d" + struct.pack("<Q", 1 << 62) + b"abc.", "runs past the end"),
        ("truncated", real_md[: len(real_md) // 2], "byte"),
        ("compression", pickle.dumps(md), "transform_descriptors"),
    ]


def check_crafted(src):
    real_md = open(os.path.join(src, ".metadata"), "rb").read()
    for name, data, want in crafted_cases(real_md):
        d = os.path.join(WORK, "crafted_" + name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(src, d)
        with open(os.path.join(d, ".metadata"), "wb") as f:
            f.write(data)
        for sub in ("show", "verify"):
            rc, out, err = run_limited("ckpt", sub, d)
            check(rc == 2 and want in err and ".metadata" in err,
                  f"crafted {name}: ckpt {sub} (256 MiB address space) exits 2 naming {want!r} (rc {rc}: {err.strip()[-240:]})")
    check(not os.path.exists(os.path.join(WORK, "pwned")), "nothing in a crafted pickle was executed")


def main():
    os.makedirs(WORK, exist_ok=True)
    dirs = write_all()
    for world, d in dirs.items():
        check_show(d, world)
        check_bytes(d, world)
        check_verify(d, world)
    rc, out, _ = run("ckpt", "ls", WORK)
    check(rc == 0 and all(f"dcp_w{w}" in out for w in dirs), "ckpt ls lists the DCP directories")
    check_damaged(dirs[2])
    check_crafted(dirs[2])
    if FAILS:
        print(f"{len(FAILS)} check(s) failed")
        sys.exit(1)
    print("all checks passed")


if __name__ == "__main__":
    main()
