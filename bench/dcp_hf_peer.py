"""bench/dcp_hf_peer.py — the PyTorch side of bench/bench_dcp.sh: writes the DCP checkpoint both sides
convert, and converts it to Hugging Face safetensors the way torchtitan's
scripts/checkpoint_conversion/convert_to_hf.py does (the peer of `meshpoint export DCP_DIR`).

  python bench/dcp_hf_peer.py write CONFIG DCP_DIR
  python bench/dcp_hf_peer.py convert CONFIG DCP_DIR HF_DIR
  python bench/dcp_hf_peer.py compare HF_FILE_A HF_FILE_B

CONFIG is a Llama config.json (hidden_size, intermediate_size, num_hidden_layers, num_attention_heads,
num_key_value_heads, vocab_size; an untied head). The state dict has Hugging Face's names
(model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ..., lm_head.weight), float32, so the
conversion needs no name map and no q/k permutation (torchtitan's adapter does both in memory, after the
load; neither reads or writes a byte more).

write    fills every tensor (0.02 * N(0, 1), a seeded generator) and saves the whole dict with
         torch.distributed.checkpoint.save(FileSystemWriter(DCP_DIR)) from one process (no process group:
         DCP's single-process path): DCP_DIR/__0_0.distcp + .metadata, fsynced (sync_files, the default).
convert  torchtitan's flow (convert_to_hf.py at pytorch/torchtitan main), step by step:
           1. allocate the model's whole state dict (torchtitan builds the model on the CPU; here
              torch.empty of every tensor, which is cheaper: no initialisation);
           2. dcp.load(state_dict, storage_reader=FileSystemReader(DCP_DIR)) (torchtitan uses its
              _ParallelFileSystemReader with 8 threads; torch's reader is used here: 2 cores);
           3. the adapter's to_hf (here the identity: HF names already);
           4. dcp.save(hf_state_dict, storage_writer=HuggingFaceStorageWriter(HF_DIR,
              save_distributed=True, fqn_to_index_mapping=<every tensor in file 1>,
              enable_consolidation=True, thread_count_consolidation=5)): the tensors go to
              HF_DIR/sharded/*.safetensors (fsynced), then torch consolidates them into
              HF_DIR/model-00001-of-00001.safetensors. Export dtype float32 (torchtitan's default).
         bench_dcp.sh then syncs the files written (what meshpoint and the copy floor pay inside their time).
compare  checks that two safetensors files hold the same tensors (names, dtype, shape, bytes), one tensor
         at a time; exit 1 on the first difference. Used once per layer count to check the peer's output
         against meshpoint's (it checks the bench, not either converter).
Prints one line: dcp_hf_peer <mode> ... seconds=S vmhwm_mib=M. Exit status: 0 ok, 1 a difference, 2 bad usage.
"""
import json
import sys
import time

import torch


def hf_shapes(cfg):
    """[(name, shape)] of an untied Llama's HF state dict, in HF's order."""
    d, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    h, kv = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    hd = cfg.get("head_dim", d // h)
    out = [("model.embed_tokens.weight", (v, d))]
    for n in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{n}."
        out += [(p + "self_attn.q_proj.weight", (h * hd, d)), (p + "self_attn.k_proj.weight", (kv * hd, d)),
                (p + "self_attn.v_proj.weight", (kv * hd, d)), (p + "self_attn.o_proj.weight", (d, h * hd)),
                (p + "mlp.gate_proj.weight", (i, d)), (p + "mlp.up_proj.weight", (i, d)),
                (p + "mlp.down_proj.weight", (d, i)), (p + "input_layernorm.weight", (d,)),
                (p + "post_attention_layernorm.weight", (d,))]
    return out + [("model.norm.weight", (d,)), ("lm_head.weight", (v, d))]


def vmhwm_mib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return -1


def write(cfg, path):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter
    g = torch.Generator().manual_seed(37)
    sd = {}
    for name, shape in hf_shapes(cfg):
        t = torch.empty(shape, dtype=torch.float32)
        if len(shape) == 1:
            t.fill_(1.0)
        else:
            t.normal_(0.0, 0.02, generator=g)
        sd[name] = t
    t0 = time.perf_counter()
    dcp.save(sd, storage_writer=FileSystemWriter(path, sync_files=True))
    return time.perf_counter() - t0


def convert(cfg, src, out):
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader, HuggingFaceStorageWriter
    t0 = time.perf_counter()
    shapes = hf_shapes(cfg)
    state_dict = {name: torch.empty(shape, dtype=torch.float32) for name, shape in shapes}
    dcp.load(state_dict, storage_reader=FileSystemReader(src))
    hf_state_dict = state_dict   # the adapter's to_hf: HF names already
    writer = HuggingFaceStorageWriter(path=out, save_distributed=True,
                                      fqn_to_index_mapping={name: 1 for name, _ in shapes},
                                      enable_consolidation=True, thread_count_consolidation=5)
    dcp.save(hf_state_dict, storage_writer=writer)
    return time.perf_counter() - t0


def compare(a, b):
    from safetensors import safe_open
    with safe_open(a, "pt") as fa, safe_open(b, "pt") as fb:
        ka, kb = sorted(fa.keys()), sorted(fb.keys())
        if ka != kb:
            print(f"dcp_hf_peer compare: different tensor names ({len(ka)} vs {len(kb)})", file=sys.stderr)
            return 1
        for k in ka:
            ta, tb = fa.get_tensor(k), fb.get_tensor(k)
            if ta.dtype != tb.dtype or ta.shape != tb.shape or not torch.equal(ta, tb):
                print(f"dcp_hf_peer compare: {k} differs", file=sys.stderr)
                return 1
    print(f"dcp_hf_peer compare: {len(ka)} tensors identical")
    return 0


def main():
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "write":
        s = write(json.load(open(a[1])), a[2])
    elif len(a) == 4 and a[0] == "convert":
        s = convert(json.load(open(a[1])), a[2], a[3])
    elif len(a) == 3 and a[0] == "compare":
        return compare(a[1], a[2])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    print(f"dcp_hf_peer {a[0]} seconds={s:.3f} vmhwm_mib={vmhwm_mib():.0f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
