"""tests/python/dcp_import.py — `meshpoint import DCP_DIR` and `export DCP_DIR` (reshard/dcp_source.c) against DCP
directories that torch (scripts/bench_venv.sh's pinned release, gloo) writes, and transformers' Llama.

  1. A tiny random LlamaForCausalLM (GQA 4:2, untied, weights perturbed so every row matters) is the reference:
     its state dict under HF names, and under torchtitan's Llama 3 names built here by hand (the inverse of
     torchtitan's Llama3StateDictAdapter.to_hf, written independently of the C code: names, and the q/k rows
     of each head from HF's half layout back to torchtitan's interleaved one), in the current spelling
     (attention.qkv_linear.wq, lm_head.weight) and the earlier one (attention.wq, output.weight).
  2. torch saves them with DCP: 1 process (no_dist), 2 gloo processes (DTensor Shard(1) matrices, Shard(0)
     vectors), 4 gloo processes (a 2x2 mesh: Shard(0) x Shard(1); vectors Shard(0) x Replicate), float32 and
     bfloat16, and a 2-process save with torchtitan's flattened AdamW state (optimizer.state.<fqn>.exp_avg,
     .exp_avg_sq, .step, param_groups as bytes) and train_state.
  3. `import` to 1x1 and tp 2 x dp 2: every model/<hf name> of the checkpoint (read with Debian's h5py through
     index.h5's views) equals the HF weights bitwise (bf16 saves: their bf16 values); with AdamW state the
     optim/exp_avg and exp_avg_sq tensors equal the saved moments (q/k permuted like the weights), the step is
     the saved one, and `train --resume-from` continues from it; without, the checkpoint is model-only.
  4. `eval` of the 1x1 import = transformers' loss of the HF model on the same tokens (1e-5).
  5. `export DCP_DIR --config --out HF`: LlamaForCausalLM.from_pretrained loads it with the same weights, bitwise.
  6. Under mpirun -np 2 the import is the 1-process one, bitwise. Memory: the import's "memory: peak" within its plan (+16 MiB), under --max-memory 4M.
  7. Refusals (exit 2, named): a missing tensor, a wrong shape, an unknown name set, a tensor the model has not,
     --names hf on torchtitan keys, no --config, a moment missing for one parameter.

Usage: python dcp_import.py MESHPOINT WORKDIR
"""
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.multiprocessing as mp

MP, WORK = sys.argv[1], sys.argv[2]
FAILS = []
H5PY = "/usr/bin/python3"   # Debian's, with h5py: reads the checkpoint through index.h5's views
CFG = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
           vocab_size=256, max_position_embeddings=128, tie_word_embeddings=False)
B, T = 4, 16


def check(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        FAILS.append(what)


def run(*args, stdout_only=False):
    r = subprocess.run([MP, *args], capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    return r.returncode, r.stdout if stdout_only else r.stdout + r.stderr


def hf_model():
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.manual_seed(37)
    m = LlamaForCausalLM(LlamaConfig(**CFG))
    with torch.no_grad():
        for _, p in m.named_parameters():
            p.copy_(torch.randn_like(p) * 0.3 if p.dim() == 2 else 1.0 + 0.2 * torch.randn_like(p))
    d = os.path.join(WORK, "hf")
    m.save_pretrained(d)
    return m, d


# ---------------------------------------------------------------- torchtitan's names, built by hand

def titan_of_hf(name, current):
    """torchtitan's name of HF tensor name (current: attention.qkv_linear.wq / lm_head; else attention.wq /
    output), and the heads whose rows torchtitan interleaves (0: none)."""
    heads = {"q_proj": CFG["num_attention_heads"], "k_proj": CFG["num_key_value_heads"]}
    top = {"model.embed_tokens.weight": "tok_embeddings.weight", "model.norm.weight": "norm.weight",
           "lm_head.weight": "lm_head.weight" if current else "output.weight"}
    if name in top:
        return top[name], 0
    m = re.fullmatch(r"model\.layers\.(\d+)\.(.*)", name)
    qkv = "attention.qkv_linear." if current else "attention."
    layer = {"self_attn.q_proj.weight": qkv + "wq.weight", "self_attn.k_proj.weight": qkv + "wk.weight",
             "self_attn.v_proj.weight": qkv + "wv.weight", "self_attn.o_proj.weight": "attention.wo.weight",
             "mlp.gate_proj.weight": "feed_forward.w1.weight", "mlp.up_proj.weight": "feed_forward.w3.weight",
             "mlp.down_proj.weight": "feed_forward.w2.weight", "input_layernorm.weight": "attention_norm.weight",
             "post_attention_layernorm.weight": "ffn_norm.weight"}[m.group(2)]
    proj = m.group(2).split(".")[1]
    return f"layers.{m.group(1)}.{layer}", heads.get(proj, 0)


def to_interleaved(w, heads):
    """HF's rows of each head (first halves, then second halves of the rotary pairs) -> torchtitan's
    interleaved pairs: row h*hd + 2*i + j of the result is HF row h*hd + j*hd/2 + i."""
    rows, cols = w.shape
    hd = rows // heads
    return w.reshape(heads, 2, hd // 2, cols).transpose(1, 2).reshape(rows, cols).contiguous()


def titan_sd(hf_sd, current):
    out = {}
    for k, v in hf_sd.items():
        name, heads = titan_of_hf(k, current)
        out[name] = to_interleaved(v, heads) if heads else v.clone()
    return out


def moments(hf_sd):
    """AdamW state per HF name: exp_avg, exp_avg_sq (positive), in HF's layout."""
    g = torch.Generator().manual_seed(5)
    return {k: (torch.randn(v.shape, generator=g) * 1e-3, torch.rand(v.shape, generator=g) * 1e-6)
            for k, v in hf_sd.items()}


def with_optimizer(tsd, hf_sd, mom, step):
    """torchtitan's checkpoint: model keys flat, the optimizer flattened under optimizer.state.<fqn>.*"""
    sd = dict(tsd)
    for k, (m1, m2) in mom.items():
        fqn, heads = titan_of_hf(k, True)
        sd[f"optimizer.state.{fqn}.exp_avg"] = to_interleaved(m1, heads) if heads else m1
        sd[f"optimizer.state.{fqn}.exp_avg_sq"] = to_interleaved(m2, heads) if heads else m2
        sd[f"optimizer.state.{fqn}.step"] = torch.tensor(float(step))
        sd[f"optimizer.param_groups.{fqn}.lr"] = 3e-4
    sd["train_state"] = {"step": torch.tensor(step, dtype=torch.int32)}
    return sd


# ---------------------------------------------------------------- DCP saves

def distributed(sd, world):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    out = {}
    if world == 2:
        mesh = init_device_mesh("cpu", (2,))
    else:
        mesh = init_device_mesh("cpu", (2, 2))
    for k, v in sd.items():
        if not isinstance(v, torch.Tensor) or v.dim() == 0:
            out[k] = v
        elif world == 2:
            out[k] = distribute_tensor(v, mesh, [Shard(1) if v.dim() == 2 else Shard(0)])
        else:
            out[k] = distribute_tensor(v, mesh, [Shard(0), Shard(1)] if v.dim() == 2 else [Shard(0), Replicate()])
    return out


def writer(rank, world, path, port, src):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    dcp.save(distributed(torch.load(src), world), checkpoint_id=path)
    dist.destroy_process_group()


PORT = [29731]


def save(sd, name, world):
    path = os.path.join(WORK, name)
    if world == 1:
        dcp.save(sd, checkpoint_id=path, no_dist=True)
    else:
        src = os.path.join(WORK, name + ".pt")
        torch.save(sd, src)
        PORT[0] += 10
        mp.spawn(writer, args=(world, path, PORT[0], src), nprocs=world)
    return path


# ---------------------------------------------------------------- reading meshpoint's checkpoint

def ckpt_tensors(ck):
    """Every tensor of checkpoint ck, whole, by name (through Debian's h5py: index.h5's views)."""
    out = os.path.join(WORK, "ck.npz")
    code = ("import h5py, numpy as np, sys\n"
            "f = h5py.File(sys.argv[1] + '/index.h5', 'r')\n"
            "d = {}\n"
            "f['view'].visititems(lambda n, o: d.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)\n"
            "np.savez(sys.argv[2], **{k.replace('/', '|'): v for k, v in d.items()})\n")
    subprocess.run([H5PY, "-c", code, ck, out], check=True)
    z = np.load(out)
    return {k.replace("|", "/"): z[k] for k in z.files}


def same(a, b):
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def check_weights(ck, ref, what):
    got = ckpt_tensors(ck)
    model = {k[6:]: v for k, v in got.items() if k.startswith("model/")}
    check(set(model) == set(ref), f"{what}: the model tensors are the HF model's ({sorted(set(model) ^ set(ref))[:4]})")
    bad = [k for k in ref if k in model and not same(model[k], ref[k].float().numpy())]
    check(not bad, f"{what}: every model tensor bitwise the saved one (differ: {bad[:4]})")
    return got


def import_ok(dcp_dir, out, *extra):
    rc, log = run("import", dcp_dir, "--config", CONFIG, "--out", out, *extra)
    check(rc == 0, f"import {os.path.basename(dcp_dir)} {' '.join(extra)} exits 0 ({log.strip()[-600:] if rc else ''})")
    return rc == 0, log


def peak_within_plan(log, what):
    m = re.search(r"memory: peak [^(]*\((\d+) bytes\).*, plan [^(]*\((\d+) bytes\)", log)
    check(m is not None, f"{what}: a memory: peak line")
    if m and os.environ.get("MP_SANITIZED"):   # tests/lib.sh's rule: ASan's redzones and quarantine, not ours
        print(f"{what}: peak {m.group(1)}, plan {m.group(2)} bytes (bound not asserted in the sanitizer build)")
    elif m:
        peak, plan = int(m.group(1)), int(m.group(2))
        check(peak <= plan + (16 << 20), f"{what}: peak {peak} bytes within the plan {plan} + 16 MiB")


def hf_loss(model, tokens):
    x = torch.tensor(tokens[:B * T + 1], dtype=torch.long)
    inp = torch.stack([x[k * T:k * T + T] for k in range(B)])
    tgt = torch.stack([x[k * T + 1:k * T + T + 1] for k in range(B)])
    with torch.no_grad():
        logits = model(inp).logits.double()
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)).item()


CONFIG = None


def main():
    global CONFIG
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    model, hf_dir = hf_model()
    CONFIG = os.path.join(hf_dir, "config.json")
    hf_sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
    bf = {k: v.to(torch.bfloat16) for k, v in hf_sd.items()}
    cases = [("hf_w1", hf_sd, 1, hf_sd), ("titan_w1", titan_sd(hf_sd, True), 1, hf_sd),
             ("titan_old_w2", titan_sd(hf_sd, False), 2, hf_sd), ("hf_bf16_w4", bf, 4, bf),
             ("titan_bf16_w4", titan_sd(bf, True), 4, bf)]
    for name, sd, world, ref in cases:
        d = save(sd, name, world)
        for mesh in (("1", "1"), ("2", "2")):
            out = os.path.join(WORK, f"ck_{name}_{mesh[0]}x{mesh[1]}")
            ok, log = import_ok(d, out, "--tp", mesh[0], "--dp", mesh[1], "--max-memory", "4M")
            if not ok:
                continue
            got = check_weights(out, ref, f"{name} -> tp {mesh[0]} x dp {mesh[1]}")
            check(not any(k.startswith("optim/") for k in got), f"{name}: model-only without AdamW state")
            peak_within_plan(log, f"{name} -> {mesh[0]}x{mesh[1]}")
    check_mpi()
    check_eval(model)
    check_moments(hf_sd)
    check_export(model)
    check_refusals(hf_sd)


def check_mpi():
    """Under mpirun -np 2 (each process writing its share of the rank files) = the 1-process import."""
    out = os.path.join(WORK, "ck_mpi")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", OMP_NUM_THREADS="1")
    r = subprocess.run(["mpiexec", "-np", "2", MP, "import", os.path.join(WORK, "titan_bf16_w4"), "--config", CONFIG,
                        "--out", out, "--tp", "2", "--dp", "2"], capture_output=True, text=True, env=env)
    check(r.returncode == 0, f"mpirun -np 2 import exits 0 ({(r.stdout + r.stderr)[-400:] if r.returncode else ''})")
    if r.returncode == 0:
        a, b = ckpt_tensors(out), ckpt_tensors(os.path.join(WORK, "ck_titan_bf16_w4_2x2"))
        check(a.keys() == b.keys() and all(same(a[k], b[k]) for k in a), "mpirun -np 2 import = the 1-process one")


def check_eval(model):
    tokens = np.random.default_rng(3).integers(0, CFG["vocab_size"], size=4096, dtype=np.uint32)
    data = os.path.join(WORK, "tokens.u32")
    tokens.tofile(data)
    rc, log = run("eval", "--checkpoint", os.path.join(WORK, "ck_titan_w1_1x1"), "--data", data, "--data-format",
                  "u32", "--batches", "1", "--batch", str(B), "--seq-len", str(T), "--json", stdout_only=True)
    check(rc == 0, f"eval of the torchtitan import exits 0 ({log[-400:] if rc else ''})")
    if rc == 0:
        got = json.loads(log)["loss"]
        want = hf_loss(model, tokens.astype(np.int64))
        check(abs(got - want) <= 1e-5 * max(1.0, abs(want)), f"eval loss {got} = transformers' {want}")


def check_moments(hf_sd):
    mom = moments(hf_sd)
    step = 7
    d = save(with_optimizer(titan_sd(hf_sd, True), hf_sd, mom, step), "titan_adamw_w2", 2)
    for tp, dp in (("1", "1"), ("2", "2")):
        out = os.path.join(WORK, f"ck_adamw_{tp}x{dp}")
        ok, log = import_ok(d, out, "--tp", tp, "--dp", dp)
        if not ok:
            continue
        check("AdamW moments carried" in log and f"AdamW step {step}" in log, f"adamw {tp}x{dp}: says moments, step {step}")
        got = check_weights(out, hf_sd, f"adamw -> tp {tp} x dp {dp}")
        bad = [k for k, (m1, m2) in mom.items()
               if not (same(got.get("optim/exp_avg/" + k, np.zeros(0)), m1.numpy())
                       and same(got.get("optim/exp_avg_sq/" + k, np.zeros(0)), m2.numpy()))]
        check(not bad, f"adamw {tp}x{dp}: exp_avg and exp_avg_sq bitwise the saved moments (differ: {bad[:4]})")
        rc, out_json = run("ckpt", "show", "--json", out, stdout_only=True)
        check(rc == 0 and json.loads(out_json).get("step") == step, f"adamw {tp}x{dp}: checkpoint step {step}")
    # the moments are used: one step resumed from them and from zero moments (same weights, same batch, so the
    # same gradient) differ in exp_avg by exactly beta1 * the imported exp_avg (up to rounding)
    zero = {k: (torch.zeros_like(a), torch.zeros_like(b)) for k, (a, b) in mom.items()}
    dz = save(with_optimizer(titan_sd(hf_sd, True), hf_sd, zero, step), "titan_adamw0_w1", 1)
    import_ok(dz, os.path.join(WORK, "ck_adamw0_1x1"))
    after = {}
    for ck in ("ck_adamw_1x1", "ck_adamw0_1x1"):
        run_dir = os.path.join(WORK, "resumed_" + ck)
        rc, log = run("train", "--config", CONFIG, "--resume-from", os.path.join(WORK, ck), "--train-data",
                      os.path.join(WORK, "tokens.u32"), "--data-format", "u32", "--steps", str(step + 1), "--run-dir",
                      run_dir, "--log-every", "1", "--ckpt-every", "1")
        ok = rc == 0 and f"at step {step}:" in log and f"step     {step + 1}/{step + 1}" in log
        check(ok, f"train --resume-from {ck} continues at step {step + 1} ({'' if ok else log[-600:]})")
        if rc == 0:
            after[ck] = ckpt_tensors(os.path.join(run_dir, "checkpoints", f"step_{step + 1:08d}"))
    if len(after) == 2:
        worst = max(float(np.abs(after["ck_adamw_1x1"]["optim/exp_avg/" + k] - after["ck_adamw0_1x1"]["optim/exp_avg/" + k]
                                 - 0.9 * m1.numpy()).max()) for k, (m1, _) in mom.items())
        check(worst < 1e-7, f"resumed exp_avg - zero-moment run's = beta1 * imported exp_avg (max error {worst:.2e})")


def check_export(model):
    from transformers import LlamaForCausalLM
    out = os.path.join(WORK, "hf_from_dcp")
    rc, log = run("export", os.path.join(WORK, "titan_old_w2"), "--config", CONFIG, "--out", out)
    check(rc == 0, f"export DCP --config --out HF exits 0 ({log[-600:] if rc else ''})")
    if rc:
        return
    back = LlamaForCausalLM.from_pretrained(out, torch_dtype=torch.float32)
    ref, got = model.state_dict(), back.state_dict()
    bad = [k for k in ref if k not in got or not torch.equal(ref[k], got[k])]
    check(not bad and set(ref) == set(got), f"transformers loads the export with the same weights (differ: {bad[:4]})")


def refuse(sd, name, pattern, *extra, config=True):
    d = save(sd, name, 1)
    args = ["import", d, "--out", os.path.join(WORK, "ck_" + name)] + (["--config", CONFIG] if config else [])
    rc, log = run(*args, *extra)
    check(rc == 2 and re.search(pattern, log) is not None, f"refused {name}: exit {rc}, /{pattern}/ ({log.strip()[-300:]})")
    check(not os.path.exists(os.path.join(WORK, "ck_" + name)), f"refused {name}: nothing written")


def check_refusals(hf_sd):
    t = titan_sd(hf_sd, True)
    refuse({k: v for k, v in t.items() if k != "layers.1.feed_forward.w2.weight"}, "missing",
           r"layers\.1\.feed_forward\.w2\.weight.*missing")
    refuse(dict(t, **{"layers.0.attention.wo.weight": torch.zeros(64, 60)}), "shape",
           r"layers\.0\.attention\.wo\.weight.*shape \[64, 60\].*implies \[64, 64\]")
    refuse({"encoder." + k: v for k, v in hf_sd.items()}, "unknown_names", r"unknown name set")
    refuse(dict(t, **{"layers.9.attention.wo.weight": torch.zeros(64, 64)}), "extra",
           r"layers\.9\.attention\.wo\.weight is not part of the llama model")
    refuse(t, "forced_hf", r"model\.embed_tokens\.weight.*missing", "--names", "hf")
    refuse(t, "no_config", r"--config CONFIG .* is required", config=False)
    mom = moments(hf_sd)
    sd = with_optimizer(t, hf_sd, mom, 3)
    del sd["optimizer.state.norm.weight.exp_avg_sq"]
    refuse(sd, "moment_missing", r"optimizer\.state\.norm\.weight\.exp_avg_sq.*missing")


if __name__ == "__main__":
    main()
    print(f"{len(FAILS)} failure(s)" if FAILS else "all checks passed")
    sys.exit(1 if FAILS else 0)
