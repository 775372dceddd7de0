"""tests/python/dcp_titan.py — meshpoint against torchtitan itself (PyPI 0.3.0, scripts/titan_venv.sh), not against
torchtitan's logic re-written in a test (as dcp_import.py and dcp_export.py do).

  1. torchtitan's own Llama3Model (its config classes: GQA 4:2, dim 64, 2 layers, vocab 256, fused wqkv as its
     flavors build it, compiled FlexAttention as its language models use) with random weights, RoPE theta 500000
     and torchtitan's "llama" scaling with original_max_position_embeddings 64 (so that the scaling changes the
     rotation within the T tokens tested; checked: without it the logits differ by far more than the tolerance).
     The HF config.json given to meshpoint says the same (rope_scaling llama3: factor 8, low 1, high 4, 64).
  2. Its model.state_dict() is saved with torch.distributed.checkpoint by 1 process and by 2 gloo processes
     (FSDP2's fully_shard: Shard(0) DTensors; torchtitan's hooks replicate the fused wqkv to split it).
  3. `meshpoint import DCP --config` (names detected: torchtitan, current spelling) to 1x1 and, from the 2-process
     save, to tp 2 x dp 2; tests/tool_hf_logits computes meshpoint's logits on B x T tokens; torchtitan's model
     on the same tokens: max|a-b| / max|b| <= 1e-5 (both imports: the same logits, bitwise).
  4. `meshpoint export CK --format dcp --names torchtitan` (1x1 and --tp 2): its keys are exactly a fresh torchtitan
     model's state-dict keys (no missing, no unexpected), dcp.load fills that state dict, load_state_dict(strict)
     takes it, every tensor equals the saved one bitwise, and the model's logits equal the original's bitwise.

Usage: python dcp_titan.py MESHPOINT TOOL_HF_LOGITS WORKDIR
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

MP, TOOL, WORK = sys.argv[1:4]
FAILS = []
DIM, HEADS, KV, LAYERS, VOCAB, FFN, EPS = 64, 4, 2, 2, 256, 160, 1e-5
THETA, FACTOR, LOW, HIGH, ORIG = 500000.0, 8.0, 1.0, 4.0, 64
B, T, SEED, TOL = 2, 48, 4242, 1e-5


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def run(*args):
    r = subprocess.run(list(args), capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if r.returncode != 0:
        raise RuntimeError("%s exited %d:\n%s%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r.stdout + r.stderr


def titan_model(seed, scaling="llama"):
    """torchtitan's Llama3Model built from its own config classes, as its flavors (llama3_configs) build theirs,
    with random weights from seed (matrices N(0, 0.15^2), norms 1 + N(0, 0.2^2): every row matters)."""
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers
    rope = ComplexRoPE.Config(dim=DIM // HEADS, max_seq_len=T, theta=THETA, scaling=scaling, scaling_factor=FACTOR,
                              low_freq_factor=LOW, high_freq_factor=HIGH, original_max_position_embeddings=ORIG)
    cfg = Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM),
        norm=RMSNorm.Config(normalized_shape=DIM, eps=EPS),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB),
        layers=_build_llama3_layers(n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=KV, hidden_dim=FFN, rope=rope,
                                    attn_backend="flex"))
    for layer in cfg.layers:
        for norm in (layer.attention_norm, layer.ffn_norm):
            norm.eps = EPS
    torch.manual_seed(seed)
    m = cfg.build()
    with torch.no_grad():
        for _, p in m.named_parameters():
            p.copy_(torch.randn_like(p) * 0.15 if p.dim() == 2 else 1.0 + 0.2 * torch.randn_like(p))
    return m.eval()


def titan_logits(m, ids):
    """torchtitan's forward as its trainer calls it: positions per token, FlexAttention's document-causal masks."""
    pos = torch.arange(ids.shape[1]).repeat(ids.shape[0], 1)
    with torch.no_grad():
        return m(ids, pos, m.get_attention_masks(pos)).reshape(ids.numel(), -1)


def hf_config(path):
    cj = dict(architectures=["LlamaForCausalLM"], model_type="llama", hidden_size=DIM, intermediate_size=FFN,
              num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV, vocab_size=VOCAB,
              max_position_embeddings=4 * ORIG, rms_norm_eps=EPS, rope_theta=THETA, hidden_act="silu",
              tie_word_embeddings=False, torch_dtype="float32", attention_bias=False, mlp_bias=False,
              rope_scaling=dict(rope_type="llama3", factor=FACTOR, low_freq_factor=LOW, high_freq_factor=HIGH,
                                original_max_position_embeddings=ORIG))
    with open(path, "w") as f:
        json.dump(cj, f, indent=1)


def save_worker(rank, world, port, out):
    """One of 2 gloo processes: torchtitan's model under FSDP2 (fully_shard per block and at the root, as
    torchtitan's data parallelism applies it) saves model.state_dict() with DCP, as torchtitan's checkpointer
    (components/checkpointer ModelWrapper) does: each rank its Shard(0) rows."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    m = titan_model(1)
    mesh = init_device_mesh("cpu", (world,))
    for block in m.layers.values():
        fully_shard(block, mesh=mesh)
    fully_shard(m, mesh=mesh)
    dcp.save(m.state_dict(), checkpoint_id=out)
    dist.barrier()
    dist.destroy_process_group()


def tool_logits(ck, tag):
    """meshpoint's logits of checkpoint ck (tests/tool_hf_logits) and the tokens they were computed on."""
    dump = os.path.join(WORK, "dump_" + tag)
    run(TOOL, ck, dump, str(SEED), str(B), str(T))
    lg = np.fromfile(os.path.join(dump, "logits.f32"), dtype="<f4").reshape(B * T, VOCAB)
    ids = np.fromfile(os.path.join(dump, "inputs.i32"), dtype="<i4").reshape(B, T).astype(np.int64)
    return lg, torch.from_numpy(ids)


def rel_err(a, ref):
    a, ref = np.asarray(a, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    return float(np.abs(a - ref).max() / np.abs(ref).max())


def check_export(ref_model, ck, tag, extra=()):
    """export ck --format dcp --names torchtitan into a fresh torchtitan model: keys, bitwise weights, logits."""
    out = os.path.join(WORK, "export_" + tag)
    run(MP, "export", ck, "--format", "dcp", "--names", "torchtitan", "--out", out, *extra)
    fresh = titan_model(99)
    sd = fresh.state_dict()
    keys = set(dcp.FileSystemReader(out).read_metadata().state_dict_metadata)
    check(keys == set(sd), "%s: the export's keys are exactly torchtitan's state-dict keys (missing %s, unexpected %s)"
          % (tag, sorted(set(sd) - keys), sorted(keys - set(sd))))
    try:
        dcp.load(sd, checkpoint_id=out)   # DefaultLoadPlanner: a key of sd missing from the checkpoint raises
    except RuntimeError as ex:
        return check(False, "%s: dcp.load into torchtitan's state dict: %s" % (tag, ex))
    res = fresh.load_state_dict(sd, strict=True)
    check(not res.missing_keys and not res.unexpected_keys, "%s: load_state_dict(strict=True) takes it" % tag)
    want, got = ref_model.state_dict(), fresh.state_dict()
    same = [k for k in want if torch.equal(want[k].view(torch.int32), got[k].view(torch.int32))]
    check(len(same) == len(want), "%s: every tensor bitwise the saved one (%d of %d)" % (tag, len(same), len(want)))
    ids = torch.randint(0, VOCAB, (B, T), generator=torch.Generator().manual_seed(SEED))
    check(torch.equal(titan_logits(fresh, ids), titan_logits(ref_model, ids)),
          "%s: torchtitan's logits with the exported weights = with the saved ones, bitwise" % tag)


def main():
    os.makedirs(WORK, exist_ok=True)
    cfg = os.path.join(WORK, "config.json")
    hf_config(cfg)
    ref = titan_model(1)
    one, two = os.path.join(WORK, "dcp_1proc"), os.path.join(WORK, "dcp_2proc")
    dcp.save(ref.state_dict(), checkpoint_id=one, no_dist=True)
    print("torchtitan's state-dict keys:", ", ".join(k for k in ref.state_dict() if k.startswith(("layers.0.", "lm"))))
    mp.start_processes(save_worker, args=(2, 29617, two), nprocs=2, join=True, start_method="spawn")
    meta = dcp.FileSystemReader(two).read_metadata().state_dict_metadata
    check(len(meta["tok_embeddings.weight"].chunks) == 2, "2-process save: tok_embeddings.weight is 2 chunks (Shard(0))")

    ck1, ck4 = os.path.join(WORK, "ck_1x1"), os.path.join(WORK, "ck_tp2dp2")
    msg = run(MP, "import", one, "--config", cfg, "--out", ck1)
    check("attention.qkv_linear.wq" in msg, "import detects torchtitan's current spelling: %s"
          % next((ln for ln in msg.splitlines() if "torchtitan" in ln), msg.strip()[-200:]))
    run(MP, "import", two, "--config", cfg, "--out", ck4, "--tp", "2", "--dp", "2")

    lg, ids = tool_logits(ck1, "1x1")
    want = titan_logits(ref, ids).numpy()
    err = rel_err(lg, want)
    print("logits meshpoint (import of the 1-process save) vs torchtitan's model: max|a-b|/max|b| = %.3e" % err)
    check(err <= TOL, "meshpoint's logits = torchtitan's (%.1e <= %.0e)" % (err, TOL))
    lg4, ids4 = tool_logits(ck4, "tp2dp2")
    check(np.array_equal(lg4, lg) and torch.equal(ids4, ids),
          "the tp2 x dp2 import of the 2-process save gives the same logits, bitwise")
    unscaled = rel_err(titan_logits(titan_model(1, scaling="none"), ids).numpy(), want)
    check(unscaled > 100 * TOL, "the RoPE scaling matters at this size: without it torchtitan's logits move by %.1e"
          % unscaled)

    check_export(ref, ck1, "1x1")
    check_export(ref, ck4, "tp2", ("--tp", "2"))
    if FAILS:
        print("dcp_titan: FAIL\n  " + "\n  ".join(FAILS))
        return 1
    print("dcp_titan: OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
