"""
tests/python/compare_torch.py — checks meshpoint's Llama forward and backward against a float64
PyTorch reference with Hugging Face semantics (tests/python/llama_torch.py).

  /usr/bin/python3 compare_torch.py --tool build/tool_llama_dump --config tests/configs/X.json
                                    [--seed S] [--batch B] [--seq-len T] [--tol 1e-4] [--keep DIR]
                                    [--perturb-norms] [--qkv-bias] [--qk-norm] [--head-dim N]

Runs the dump tool (tests/tool_llama_dump.c: one forward + backward on a 1x1 mesh, CPU backend), loads
its parameters by HF name into the torch model in float64, runs the same tokens, and compares logits,
the mean loss and EVERY parameter gradient (autograd of the mean loss; with tie_word_embeddings the
one embedding's gradient includes both uses).

Error measure, per tensor: max|a - b| / max|b| (a = meshpoint, b = float64 reference): the largest
element error relative to the tensor's scale, so an error in a tiny element of a large tensor is not
blown up the way an elementwise relative error would be, yet a wrong element anywhere is caught. The
relative L2 error ||a - b|| / ||b|| is printed alongside. A tensor fails when the max-norm error exceeds
--tol (default 1e-4); the loss fails when |a - b| / |b| does. The set of parameter names must match the
reference model's exactly (no missing, no extra tensors).

--perturb-norms asks the tool to set the norm weights (all 1 after init) to 1 + 0.25*u and the biases
(all 0) to 0.5*u, u uniform in [-1, 1), so a kernel that ignores or misapplies them cannot pass.
--qkv-bias, --qk-norm and --head-dim N go to the tool (the families' q/k/v biases, Qwen3's q/k norms, an
explicit head dimension); the reference is built with what the tool's manifest says the model had.
Batch and sequence length default to the config's "train" object (batch_size, seq_len), else 2 x 16.
Exit status: 0 all agree (one summary line), 1 a mismatch (each failing tensor named with its error),
2 bad usage or the tool failed to run.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch import LlamaConfig, LlamaForCausalLM  # noqa: E402


def load_raw(d, entry):
    dt = {"f32": np.float32, "i32": np.int32}[entry["dtype"]]
    a = np.fromfile(os.path.join(d, entry["file"]), dtype="<" + np.dtype(dt).str[1:])
    shape = tuple(int(s) for s in entry["shape"])
    if a.size != int(np.prod(shape)):
        raise ValueError(f"{entry['file']}: {a.size} elements, manifest says shape {shape}")
    return a.reshape(shape)


def errors(a, b):
    """(max-norm relative error, relative L2 error) of a against the reference b, both float64."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        return float("inf"), float("inf")
    diff = a - b
    bmax = np.abs(b).max()
    bl2 = np.linalg.norm(b)
    emax = np.abs(diff).max() / bmax if bmax > 0 else float(np.abs(diff).max() > 0) * float("inf")
    el2 = np.linalg.norm(diff) / bl2 if bl2 > 0 else float(np.linalg.norm(diff) > 0) * float("inf")
    return float(np.nan_to_num(emax, nan=0.0)), float(np.nan_to_num(el2, nan=0.0))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="path of the tool_llama_dump binary")
    ap.add_argument("--config", required=True, help="model config JSON (HF field names)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--batch", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--perturb-norms", action="store_true", help="norm weights != 1 (see above)")
    ap.add_argument("--qkv-bias", action="store_true", help="q/k/v biases (Qwen2)")
    ap.add_argument("--qk-norm", action="store_true", help="q_norm / k_norm (Qwen3)")
    ap.add_argument("--head-dim", type=int, default=None, help="explicit head_dim")
    ap.add_argument("--keep", default=None, help="dump into this directory and keep it")
    args = ap.parse_args()

    with open(args.config) as f:
        cfg_json = json.load(f)
    train = cfg_json.get("train", {}) or {}
    B = args.batch or int(train.get("batch_size", 2))
    T = args.seq_len or int(train.get("seq_len", 16))
    name = os.path.basename(args.config)

    out = args.keep or tempfile.mkdtemp(prefix="mp_torch_cmp_")
    try:
        cmd = [args.tool, args.config, out, str(args.seed), str(B), str(T)] + (["--perturb-norms"] if args.perturb_norms else [])
        cmd += (["--qkv-bias"] if args.qkv_bias else []) + (["--qk-norm"] if args.qk_norm else [])
        cmd += ["--head-dim", str(args.head_dim)] if args.head_dim else []
        try:
            r = subprocess.run(cmd, capture_output=True, text=True)
        except OSError as e:
            print(f"compare_torch: cannot run {args.tool}: {e}", file=sys.stderr)
            return 2
        if r.returncode != 0:
            print(f"compare_torch: {' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}", file=sys.stderr)
            return 2
        with open(os.path.join(out, "manifest.json")) as f:
            man = json.load(f)
        cfg = LlamaConfig(dict(cfg_json, head_dim=man["head_dim"], qkv_bias=man["qkv_bias"], qk_norm=man["qk_norm"]))
        by_kind = {}
        for e in man["tensors"]:
            by_kind.setdefault(e["kind"], {})[e["name"]] = e
        params = {n: load_raw(out, e) for n, e in by_kind.get("param", {}).items()}
        grads = {n: load_raw(out, e) for n, e in by_kind.get("grad", {}).items()}
        logits_mp = load_raw(out, by_kind["logits"]["logits"])
        inputs = load_raw(out, by_kind["inputs"]["inputs"]).astype(np.int64)
        targets = load_raw(out, by_kind["targets"]["targets"]).astype(np.int64)
        loss_mp = float(man["loss_mean"])
    finally:
        if not args.keep:
            shutil.rmtree(out, ignore_errors=True)

    fails = []
    model = LlamaForCausalLM(cfg).double()
    ref_names = [n for n, _ in model.named_parameters()]
    missing = sorted(set(ref_names) - set(params))
    extra = sorted(set(params) - set(ref_names))
    if missing or extra:
        print(f"compare_torch {name}: parameter names differ from HF LlamaForCausalLM"
              f" (tie_word_embeddings={cfg.tie_word_embeddings}): missing {missing}, unexpected {extra}")
        return 1
    if set(grads) != set(params):
        print(f"compare_torch {name}: gradients dumped for {sorted(set(grads) ^ set(params))} do not match parameters")
        return 1
    if inputs.shape != (B, T) or inputs.min() < 0 or inputs.max() >= cfg.vocab_size or \
            targets.min() < 0 or targets.max() >= cfg.vocab_size:
        print(f"compare_torch {name}: bad tokens in the dump (shape {inputs.shape}, want {(B, T)})")
        return 1

    with torch.no_grad():
        for n, p in model.named_parameters():
            if tuple(p.shape) != params[n].shape:
                print(f"compare_torch {name}: {n}: shape {params[n].shape}, HF shape {tuple(p.shape)}")
                return 1
            p.copy_(torch.from_numpy(params[n].astype(np.float64)))
    logits, loss = model(torch.from_numpy(inputs), torch.from_numpy(targets))
    loss.backward()

    rows = []
    e_max, e_l2 = errors(logits_mp, logits.detach().reshape(B * T, -1).numpy())
    rows.append(("logits", e_max, e_l2))
    loss_ref = loss.item()
    e_loss = abs(loss_mp - loss_ref) / abs(loss_ref)
    rows.append(("loss", e_loss, e_loss))
    for n, p in model.named_parameters():
        ref = p.grad.numpy()
        if not np.any(ref):
            print(f"compare_torch {name}: reference gradient of {n} is all zero: the test would prove nothing")
            return 1
        rows.append(("grad " + n, *errors(grads[n], ref)))

    width = max(len(r[0]) for r in rows)
    print(f"compare_torch {name}: B={B} T={T} seed={args.seed} tied={cfg.tie_word_embeddings} "
          f"H={cfg.num_attention_heads} KV={cfg.num_key_value_heads} head_dim={cfg.head_dim} qkv_bias={cfg.qkv_bias} "
          f"qk_norm={cfg.qk_norm} perturb_norms={args.perturb_norms}; loss meshpoint {loss_mp:.9g}, "
          f"torch fp64 {loss_ref:.9g}")
    print(f"  {'tensor':<{width}}  max|a-b|/max|b|  ||a-b||/||b||")
    for tname, em, el in rows:
        bad = not (em <= args.tol)
        if bad:
            fails.append((tname, em))
        print(f"  {tname:<{width}}  {em:15.3e}  {el:13.3e}{'  FAIL' if bad else ''}")
    worst = max(rows, key=lambda r: r[1])
    if fails:
        print(f"compare_torch {name}: MISMATCH in {len(fails)} of {len(rows)} tensors (tol {args.tol:.0e}): "
              + ", ".join(f"{t} ({e:.2e})" for t, e in fails))
        return 1
    print(f"compare_torch {name}: OK, logits, loss and {len(rows) - 2} gradients agree; worst {worst[0]} "
          f"{worst[1]:.2e} <= {args.tol:.0e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
