"""tests/python/dcp_export.py — `meshpoint export --format dcp` (reshard/dcp_sink.c, reshard/pickle_write.c)
against torch.distributed.checkpoint.load of scripts/bench_venv.sh's pinned torch.

  1. A meshpoint checkpoint from a tp 2 x dp 2 training run (mpirun -np 4, cli_tiny: GQA 4:2): export
     --format dcp (one chunk per rank box, 4 files) loads with dcp.load into an HF-named state dict whose
     model tensors equal `export` (HF, fp32 safetensors) bitwise; its Adam moments (nonzero after training)
     equal those of a 1 x 1 reshard of the same checkpoint exported whole (other chunking, same values), and
     AdamW's step and train_state.step are the checkpoint's step; --dtype bf16 = RNE of fp32.
  2. --names torchtitan loads into a torchtitan-named state dict equal to the HF tensors mapped with
     torchtitan's Llama3StateDictAdapter.from_hf logic (written here independently: names, and
     _reverse_permute of wq / wk), moments under optimizer.state.<fqn>.exp_avg(_sq) mapped the same way.
  3. dcp.load from 2 gloo processes into DTensor targets (Shard(0) and Shard(1) on a 1-D mesh of 2) gives
     the same full tensors.
  4. A transformers LlamaForCausalLM (random, saved by save_pretrained) -> meshpoint import -> export
     --format dcp loads into exactly model.state_dict() (bitwise), and with torchtitan names into the
     adapter-mapped state dict.
  5. `ckpt verify` of each written directory passes; the files are __R_0.distcp for the mesh's ranks; every
     record's entries have the right CRC-32 (zipfile.testzip), are stored and 64-byte aligned.
  6. Phi-3 (HF names fuse q/k/v and gate/up: the parts are chunks of one DCP tensor) = the HF export.
     Refusals and atomicity: an existing DIR without --force (exit 2, DIR untouched); --names torchtitan of a
     Qwen3 checkpoint (exit 2 naming the family); a failure mid-write (a corrupted source rank file, found
     while the records stream) leaves no DIR and no DIR.partial, and with --force leaves the existing DIR
     byte for byte as it was.
  7. Round trip, when `meshpoint import` reads DCP directories (skipped, saying so, on a
     build without it): the LlamaForCausalLM's state dict saved by torch's dcp.save from 2 gloo processes
     (DTensor shards on dims 0 and 1), and its torchtitan-named form saved by 1 process -> import --config
     -> export --format dcp (HF names; torchtitan names) -> dcp.load: bitwise the state dict torch saved.

Usage: python dcp_export.py MESHPOINT TRAIN_DATA WORKDIR SRC_DIR
"""
import hashlib
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp
from safetensors.torch import load_file

MP, DATA, WORK, SRC = sys.argv[1:5]
FAILS = []
MPI = ["mpiexec", "--allow-run-as-root", "--oversubscribe"]


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def run(*args, expect=0):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != expect:
        print(r.stdout + r.stderr)
    check(r.returncode == expect, "exit %d from %s" % (expect, " ".join(map(str, args[:6]))))
    return r


def load_dcp(d, dtype_of=None):
    """Every tensor of DCP directory d, loaded by dcp.load into plain tensors sized from its metadata."""
    md = dcp.FileSystemReader(d).read_metadata()
    sd = {k: torch.empty(v.size, dtype=v.properties.dtype) for k, v in md.state_dict_metadata.items()}
    dcp.load(sd, checkpoint_id=d, no_dist=True)
    return sd


def records_ok(d):
    """Every record of DCP directory d is a zip Python's zipfile accepts: CRC-32 of every entry right
    (testzip), entries stored, each entry's data 64-byte aligned from the record's start (torch's layout)."""
    import io
    import zipfile
    md = dcp.FileSystemReader(d).read_metadata()
    for si in md.storage_data.values():
        with open(os.path.join(d, si.relative_path), "rb") as f:
            f.seek(si.offset)
            rec = f.read(si.length)
        z = zipfile.ZipFile(io.BytesIO(rec))
        if z.testzip() is not None:
            return False
        for i in z.infolist():
            nl, xl = struct.unpack("<HH", rec[i.header_offset + 26:i.header_offset + 30])
            if i.compress_type != 0 or (i.header_offset + 30 + nl + xl) % 64:
                return False
    return True


def same(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a.view(-1).view(torch.uint8) if a.numel() else a,
                                                                     b.view(-1).view(torch.uint8) if b.numel() else b)


def titan_from_hf(hf, cfg):
    """torchtitan's (0.3.0) Llama3StateDictAdapter.from_hf, written from its source's logic: names, and wq / wk
    rows by _reverse_permute (w.view(heads, 2, hd // 2, dim).transpose(1, 2).reshape)."""
    heads, kv, dim = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"]
    hd = dim // heads
    top = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
           "lm_head.weight": "lm_head.weight"}
    layer = {"self_attn.v_proj.weight": "attention.qkv_linear.wv.weight", "self_attn.o_proj.weight": "attention.wo.weight",
             "mlp.gate_proj.weight": "feed_forward.w1.weight", "mlp.up_proj.weight": "feed_forward.w3.weight",
             "mlp.down_proj.weight": "feed_forward.w2.weight", "input_layernorm.weight": "attention_norm.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight"}

    def rperm(w, n):
        return w.view(n, 2, w.shape[0] // n // 2, w.shape[1]).transpose(1, 2).reshape(w.shape[0], w.shape[1])
    out = {}
    for k, v in hf.items():
        m = re.match(r"^model\.layers\.(\d+)\.(.*)$", k)
        if k in top:
            out[top[k]] = v
        elif m and m.group(2) in layer:
            out["layers.%s.%s" % (m.group(1), layer[m.group(2)])] = v
        elif m and m.group(2) == "self_attn.q_proj.weight":
            out["layers.%s.attention.qkv_linear.wq.weight" % m.group(1)] = rperm(v, heads)
        elif m and m.group(2) == "self_attn.k_proj.weight":
            out["layers.%s.attention.qkv_linear.wk.weight" % m.group(1)] = rperm(v, kv)
        else:
            raise KeyError(k)
    assert hd * heads == dim
    return out


def split(sd):
    """(model tensors, {param: {exp_avg, exp_avg_sq, step}}, train_state step) of a loaded DCP state dict."""
    model, opt = {}, {}
    for k, v in sd.items():
        m = re.match(r"^optimizer\.state\.(.*)\.(exp_avg|exp_avg_sq|step)$", k)
        if m:
            opt.setdefault(m.group(1), {})[m.group(2)] = v
        elif k != "train_state.step":
            model[k] = v
    return model, opt, sd.get("train_state.step")


def compare(got, want, what):
    check(sorted(got) == sorted(want), "%s: the same %d names (got %d)" % (what, len(want), len(got)))
    bad = [k for k in want if k in got and not same(got[k], want[k])]
    check(not bad, "%s: every tensor bitwise equal%s" % (what, (" (differ: %s)" % bad[:4]) if bad else ""))


def tree_hash(d):
    h = hashlib.sha256()
    for root, _, files in sorted(os.walk(d)):
        for f in sorted(files):
            h.update(f.encode())
            h.update(open(os.path.join(root, f), "rb").read())
    return h.hexdigest()


def gloo_worker(rank, d, ref, names, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29731")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2,))
    sd = {k: distribute_tensor(torch.zeros_like(ref[k]), mesh, [Shard(i % min(2, ref[k].dim()))])
          for i, k in enumerate(names)}
    dcp.load(sd, checkpoint_id=d)
    ok = all(torch.equal(sd[k].full_tensor(), ref[k]) for k in names)
    if rank == 0:
        q.put(ok)
    dist.destroy_process_group()


def gloo_load(d, ref, what):
    names = [k for k in sorted(ref) if ref[k].dim() >= 1 and ref[k].shape[0] % 2 == 0 and
             (ref[k].dim() == 1 or ref[k].shape[1] % 2 == 0)]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(gloo_worker, args=(d, ref, names, q), nprocs=2, start_method="spawn", join=True)
    check(q.get() is True, "%s: dcp.load from 2 gloo processes into DTensors (Shard(0) / Shard(1)), %d tensors"
          % (what, len(names)))


def gloo_save_worker(rank, d, ref, q):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29733")
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor
    mesh = init_device_mesh("cpu", (2,))
    sd = {k: distribute_tensor(v.clone(), mesh, [Shard(i % v.dim())]) for i, (k, v) in enumerate(sorted(ref.items()))}
    dcp.save(sd, checkpoint_id=d)
    if rank == 0:
        q.put(True)
    dist.destroy_process_group()


def part_roundtrip(ref, cfg):
    """torch's DCP -> meshpoint import -> export --format dcp -> dcp.load, bitwise (HF and torchtitan names)."""
    h = subprocess.run([MP, "import", "--help"], capture_output=True, text=True).stdout
    if "DCP" not in h:
        print("skip  DCP -> import -> DCP round trip: this build's `meshpoint import` does not read DCP directories")
        return
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    mp.start_processes(gloo_save_worker, args=(WORK + "/torch_dcp", ref, q), nprocs=2, start_method="spawn", join=True)
    check(q.get() is True, "torch saved the model's state dict from 2 gloo processes (Shard(0) / Shard(1))")
    run(MP, "import", WORK + "/torch_dcp", "--config", WORK + "/hf_src/config.json", "--out", WORK + "/rt_ck")
    run(MP, "export", WORK + "/rt_ck", "--format", "dcp", "--out", WORK + "/rt_dcp")
    compare(load_dcp(WORK + "/rt_dcp"), ref, "round trip torch DCP (2 processes, HF names) -> import -> export --format dcp")
    tt = titan_from_hf(ref, cfg)
    dcp.save(tt, checkpoint_id=WORK + "/torch_tt", no_dist=True)
    run(MP, "import", WORK + "/torch_tt", "--config", WORK + "/hf_src/config.json", "--out", WORK + "/rt_ck_tt")
    run(MP, "export", WORK + "/rt_ck_tt", "--format", "dcp", "--names", "torchtitan", "--tp", "2", "--out", WORK + "/rt_tt")
    compare(load_dcp(WORK + "/rt_tt"), tt, "round trip torch DCP (torchtitan names) -> import -> export --names torchtitan")


def trained_checkpoint(cfg_path):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(MPI + ["-np", "4", MP, "train", "--config", cfg_path, "--train-data", DATA, "--steps", "3",
                              "--log-every", "0", "--run-dir", WORK + "/run", "--tp", "2", "--dp", "2", "--ckpt-every", "3"],
                       capture_output=True, text=True, env=env)
    check(r.returncode == 0, "train cli_tiny on tp 2 x dp 2 (mpirun -np 4)\n" + r.stderr[-2000:])
    return WORK + "/run"


def part_trained(cfg):
    run_dir = trained_checkpoint(SRC + "/tests/configs/cli_tiny.json")
    e = WORK + "/e"
    run(MP, "export", run_dir, "--out", e + "_hf")
    hf = load_file(e + "_hf/model.safetensors")
    r = run(MP, "export", run_dir, "--format", "dcp", "--tp", "2", "--dp", "2", "--out", e + "_dcp")
    check("verified" in r.stderr, "export read its output back")
    check(sorted(f for f in os.listdir(e + "_dcp")) == [".metadata"] + ["__%d_0.distcp" % i for i in range(4)],
          "one __R_0.distcp per rank of tp 2 x dp 2, .metadata")
    run(MP, "ckpt", "verify", e + "_dcp")
    check(records_ok(e + "_dcp"), "every record: CRC-32 of each entry right (zipfile.testzip), stored, 64-byte aligned")
    model, opt, step = split(load_dcp(e + "_dcp"))
    compare(model, hf, "tp2 x dp2 export, HF names = the HF export (fp32)")
    check(step is not None and step.dtype == torch.int32 and int(step) == 3, "train_state.step is 3 (int32)")
    check(sorted(opt) == sorted(hf) and all(sorted(v) == ["exp_avg", "exp_avg_sq", "step"] for v in opt.values()),
          "optimizer.state.<param>.{exp_avg, exp_avg_sq, step} for every parameter")
    check(all(float(v["step"]) == 3.0 and v["step"].dtype == torch.float32 for v in opt.values()), "AdamW step 3.0 (float32)")
    check(all(v["exp_avg"].abs().sum() > 0 and (v["exp_avg_sq"] >= 0).all() for v in opt.values()),
          "the moments are a trained run's (nonzero, exp_avg_sq >= 0)")
    run(MP, "reshard", run_dir, "--tp", "1", "--dp", "1", "--out", e + "_11")
    run(MP, "export", e + "_11", "--format", "dcp", "--out", e + "_dcp11")
    sd11 = load_dcp(e + "_dcp11")
    compare(load_dcp(e + "_dcp"), sd11, "tp2 x dp2 chunks = 1 x 1 whole tensors (moments included)")
    run(MP, "export", run_dir, "--format", "dcp", "--dtype", "bf16", "--out", e + "_bf16")
    mb, ob, _ = split(load_dcp(e + "_bf16"))
    compare(mb, {k: v.to(torch.bfloat16) for k, v in hf.items()}, "--dtype bf16 = RNE of the fp32 tensors")
    run(MP, "export", run_dir, "--format", "dcp", "--names", "torchtitan", "--tp", "2", "--out", e + "_tt")
    mt, ot, _ = split(load_dcp(e + "_tt"))
    compare(mt, titan_from_hf(hf, cfg), "torchtitan names = torchtitan's from_hf of the HF tensors")
    for kind in ("exp_avg", "exp_avg_sq"):
        want = titan_from_hf({k: v[kind] for k, v in opt.items()}, cfg)
        compare({k: v[kind] for k, v in ot.items()}, want, "torchtitan optimizer.state.<fqn>.%s" % kind)
    gloo_load(e + "_tt", mt, "torchtitan names")
    return run_dir, e


def part_import():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(7)
    cfg = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
               num_key_value_heads=2, vocab_size=128, max_position_embeddings=64, tie_word_embeddings=False)
    m = LlamaForCausalLM(LlamaConfig(**cfg)).float()
    m.save_pretrained(WORK + "/hf_src", safe_serialization=True)
    ref = {k: v.detach().clone() for k, v in m.state_dict().items() if "rotary" not in k}
    run(MP, "import", WORK + "/hf_src", "--out", WORK + "/imp")
    run(MP, "export", WORK + "/imp", "--format", "dcp", "--out", WORK + "/imp_dcp")
    compare(load_dcp(WORK + "/imp_dcp"), ref, "import of LlamaForCausalLM -> DCP = model.state_dict()")
    run(MP, "export", WORK + "/imp", "--format", "dcp", "--names", "torchtitan", "--out", WORK + "/imp_tt")
    tt = load_dcp(WORK + "/imp_tt")
    compare(tt, titan_from_hf(ref, cfg), "import -> DCP torchtitan names = from_hf(model.state_dict())")
    gloo_load(WORK + "/imp_dcp", ref, "HF names of the import")
    run(MP, "ckpt", "verify", WORK + "/imp_tt")
    part_roundtrip(ref, cfg)


def part_refusals(run_dir, e):
    before = tree_hash(e + "_dcp")
    r = run(MP, "export", run_dir, "--format", "dcp", "--tp", "2", "--dp", "2", "--out", e + "_dcp", expect=2)
    check("already exists" in r.stderr and tree_hash(e + "_dcp") == before, "an existing DIR without --force: refused, untouched")
    q = WORK + "/qwen3.json"
    json.dump(dict(model_type="qwen3", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, head_dim=8, vocab_size=64, max_position_embeddings=64), open(q, "w"))
    run(MP, "init", "--config", q, "--tp", "1", "--dp", "1", "--out", WORK + "/qw")
    r = run(MP, "export", WORK + "/qw", "--format", "dcp", "--names", "torchtitan", "--out", WORK + "/qw_tt", expect=2)
    check("qwen3" in r.stderr and "llama3" in r.stderr and not os.path.exists(WORK + "/qw_tt"),
          "--names torchtitan of a Qwen3 checkpoint: refused naming the family")
    run(MP, "export", WORK + "/qw", "--format", "dcp", "--out", WORK + "/qw_hf")
    # Phi-3: HF names fuse qkv_proj and gate_up_proj; each part (and each tp rank's box of it) is a chunk
    p3 = WORK + "/phi3.json"
    json.dump(dict(model_type="phi3", hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=64, max_position_embeddings=64, sliding_window=None,
                   pad_token_id=None), open(p3, "w"))
    run(MP, "init", "--config", p3, "--tp", "2", "--dp", "1", "--out", WORK + "/phi")
    run(MP, "export", WORK + "/phi", "--out", WORK + "/phi_hf")
    run(MP, "export", WORK + "/phi", "--format", "dcp", "--tp", "2", "--model-only", "--out", WORK + "/phi_dcp")
    compare(load_dcp(WORK + "/phi_dcp"), load_file(WORK + "/phi_hf/model.safetensors"),
            "Phi-3 (fused qkv_proj, gate_up_proj as chunks of one tensor) = the HF export")
    # a source whose last rank file is damaged: the export fails while streaming records
    bad = WORK + "/bad"
    shutil.copytree(os.path.join(e + "_11"), bad)
    f = sorted(p for p in os.listdir(bad) if p.startswith("rank_"))[-1]
    b = bytearray(open(os.path.join(bad, f), "rb").read())
    for i in range(len(b) * 3 // 4, len(b) * 3 // 4 + 4096):
        b[i] ^= 0x5A
    open(os.path.join(bad, f), "wb").write(bytes(b))
    r = run(MP, "export", bad, "--format", "dcp", "--out", WORK + "/bad_dcp", expect=1)
    check(not os.path.exists(WORK + "/bad_dcp") and not os.path.exists(WORK + "/bad_dcp.partial"),
          "a failed export leaves no DIR and no DIR.partial (%s)" % r.stderr.strip().splitlines()[-1][:200])
    before = tree_hash(e + "_dcp11")
    run(MP, "export", bad, "--format", "dcp", "--force", "--out", e + "_dcp11", expect=1)
    check(tree_hash(e + "_dcp11") == before and not os.path.exists(e + "_dcp11.partial"),
          "a failed export --force leaves the existing DIR as it was")


def main():
    cfg = json.load(open(SRC + "/tests/configs/cli_tiny.json"))
    run_dir, e = part_trained(cfg)
    part_import()
    part_refusals(run_dir, e)
    if FAILS:
        print("FAILED: %d checks" % len(FAILS))
        sys.exit(1)
    print("ok: export --format dcp against torch.distributed.checkpoint.load")


if __name__ == "__main__":
    main()
