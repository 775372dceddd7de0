"""
bench/torch_train.py — the PyTorch peers of bench/bench_train.sh: trains a Llama in float32 on the CPU
with the same work per step as `meshpoint train`: forward, mean cross-entropy, backward, global-norm
gradient clipping (1.0), AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only, 0 on the
norm weights), same batch, sequence length, tokens and thread count.

  PY bench/torch_train.py --config configs/bench_tiny.json --steps 12 --warmup 2
        [--model hf|ref] [--compile] [--adamw fused|foreach|forloop|auto]
        [--batch 4] [--seq-len 256] [--threads N] [--lr 3e-4] [--seed 1337]
        [--train-data FILE --data-format u16|u32|llmc]   (random tokens when no file is given)

Models:
  --model hf   transformers' LlamaForCausalLM built from the JSON config as HF reads a config.json
               (LlamaConfig.from_json_file), attn_implementation="sdpa", float32, use_cache=False; the
               loss is F.cross_entropy of its logits against the loader's targets (what HF's loss does,
               without its internal shift: the loader already shifts, as meshpoint's does). Needs
               current torch + transformers: the venv of scripts/bench_venv.sh.
  --model ref  tests/python/llama_torch.py (HF semantics, matmul + masked-softmax attention; runs on
               Debian's torch 1.13, /usr/bin/python3).
--compile wraps model + loss in torch.compile (inductor, default mode; the backward is compiled by
AOTAutograd); clipping and AdamW stay eager (fused AdamW is already one kernel per group). The compile
happens in the first warm-up step and is not timed; its time is reported (warmup_s).
--adamw auto: fused where this torch has it for CPU tensors (torch >= 2.4), else the for-loop one.

Batches follow meshpoint's loader (core/data.h): batch g's sequence k reads tokens
[pos + k*T, pos + k*T + T + 1), pos advancing by B*T and wrapping to 0. The first --warmup steps are
not timed; every step's time and tok/s goes to stderr; the last stdout line is
  result impl=NAME tok_per_s=X tok_per_s_median=M tok_per_cpu_s=C cpu_s=S wall_s=W warmup_s=U steps=K ...
with X = B*T*K / (wall time of the K timed steps), M = B*T / (median step time), C = B*T*K / S where S
is the CPU time (user + system, all threads, getrusage RUSAGE_SELF) this process spent over the timed
steps: unlike wall time it hardly moves when other processes share the cores. A step is timed like
meshpoint's: from fetching the batch to the loss read back after opt.step.
"""
import argparse
import os
import resource
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F


def load_tokens(path, fmt):
    if fmt == "llmc":
        header = np.fromfile(path, dtype="<i4", count=256)
        if header[0] != 20240520:
            sys.exit(f"torch_train: {path}: not an llm.c token file (magic {header[0]})")
        return np.fromfile(path, dtype="<u2", offset=1024, count=int(header[2]))
    return np.memmap(path, dtype={"u16": "<u2", "u32": "<u4"}[fmt], mode="r")


def cpu_time():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def build_model(args):
    """(model, vocab size, loss_fn(x, y) -> mean CE, description)."""
    if args.model == "hf":
        from transformers import AutoConfig, AutoModelForCausalLM
        import transformers
        cfg = AutoConfig.from_pretrained(args.config)   # the config.json's model_type picks the class
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
        V = cfg.vocab_size

        def loss_fn(x, y):
            logits = model(input_ids=x, use_cache=False).logits
            return F.cross_entropy(logits.reshape(-1, V).float(), y.reshape(-1))
        desc = f"transformers {transformers.__version__} {type(model).__name__} attn={model.config._attn_implementation}"
    else:
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
        from llama_torch import LlamaConfig, LlamaForCausalLM
        cfg = LlamaConfig.load(args.config)
        model = LlamaForCausalLM(cfg)
        V = cfg.vocab_size

        def loss_fn(x, y):
            return model(x, y)[1]
        desc = "tests/python/llama_torch.py"
    return model, V, loss_fn, desc


def make_adamw(args, groups):
    kw = dict(lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    mode = args.adamw
    if mode == "auto":
        mode = "fused" if tuple(int(v) for v in torch.__version__.split(".")[:2]) >= (2, 4) else "forloop"
    if mode == "fused":
        kw["fused"] = True
    elif mode == "foreach":
        kw["foreach"] = True
    elif "foreach" in torch.optim.AdamW.__init__.__code__.co_varnames:
        kw["foreach"] = False
    return torch.optim.AdamW(groups, **kw), mode


def main():
    ap = argparse.ArgumentParser(description="PyTorch Llama training throughput (meshpoint's peer)")
    ap.add_argument("--config", required=True)
    ap.add_argument("--model", choices=["hf", "ref"], default="ref")
    ap.add_argument("--compile", action="store_true", help="torch.compile (inductor) the forward + loss")
    ap.add_argument("--adamw", choices=["auto", "fused", "foreach", "forloop"], default="auto")
    ap.add_argument("--steps", type=int, default=12, help="total steps, warm-up included")
    ap.add_argument("--warmup", type=int, default=2, help="first steps not timed")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--train-data", default=None)
    ap.add_argument("--data-format", default="u16", choices=["u16", "u32", "llmc"])
    args = ap.parse_args()
    if args.steps <= args.warmup:
        sys.exit("torch_train: --steps must exceed --warmup")
    if args.compile and not hasattr(torch, "compile"):
        sys.exit(f"torch_train: torch {torch.__version__} has no torch.compile")

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model, V, loss_fn, desc = build_model(args)
    model.train()
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt, adamw = make_adamw(args, [{"params": decay, "weight_decay": 0.1},
                                   {"params": no_decay, "weight_decay": 0.0}])
    params = list(model.parameters())
    nparams = sum(p.numel() for p in params)
    step_loss = torch.compile(loss_fn) if args.compile else loss_fn
    impl = f"{'hf' if args.model == 'hf' else 'ref'}-{'compile' if args.compile else 'eager'}"

    B, T = args.batch, args.seq_len
    if args.train_data:
        toks = load_tokens(args.train_data, args.data_format)
    else:
        toks = np.random.default_rng(args.seed).integers(0, V, size=B * T * 8 + 1, dtype=np.int64)
    if len(toks) < B * T + 1:
        sys.exit(f"torch_train: {len(toks)} tokens, a batch needs {B * T + 1}")
    pos = 0
    print(f"torch_train: {impl}: {desc}, {nparams / 1e6:.1f}M parameters, B={B} T={T} "
          f"threads={torch.get_num_threads()} torch {torch.__version__}, AdamW {adamw}", file=sys.stderr)

    dts = []
    warm_s = 0.0
    cpu0 = None
    for step in range(args.steps):
        if step == args.warmup:
            cpu0 = cpu_time()
        t0 = time.perf_counter()
        if pos + B * T + 1 > len(toks):
            pos = 0
        chunk = torch.from_numpy(np.asarray(toks[pos: pos + B * T + 1], dtype=np.int64))
        pos += B * T
        # sequence k = tokens [k*T, k*T + T + 1) of the chunk (overlapping by one, as the loader does)
        idx = torch.arange(B)[:, None] * T + torch.arange(T + 1)[None, :]
        seqs = chunk[idx]
        x, y = seqs[:, :-1].contiguous(), seqs[:, 1:].contiguous()

        opt.zero_grad(set_to_none=True)
        loss = step_loss(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            dts.append(dt)
        else:
            warm_s += dt
        print(f"step {step + 1}/{args.steps} loss {lv:.4f} norm {norm.item():.3f} {dt * 1e3:.1f} ms "
              f"{B * T / dt:.0f} tok/s{'' if step >= args.warmup else ' (warm-up)'}", file=sys.stderr)
    cpu_s = cpu_time() - cpu0
    if args.compile:
        from torch._dynamo.utils import counters
        breaks = sum(counters["graph_break"].values())
        print(f"torch_train: torch.compile: {breaks} graph break(s){': ' if breaks else ''}"
              f"{', '.join(sorted(counters['graph_break']))}", file=sys.stderr)

    k = len(dts)
    print(f"result impl={impl} tok_per_s={B * T * k / sum(dts):.1f} "
          f"tok_per_s_median={B * T / float(np.median(dts)):.1f} tok_per_cpu_s={B * T * k / cpu_s:.1f} "
          f"cpu_s={cpu_s:.3f} wall_s={sum(dts):.3f} warmup_s={warm_s:.1f} steps={k} warmup={args.warmup} "
          f"threads={torch.get_num_threads()} batch={B} seq_len={T} params={nparams} adamw={adamw} "
          f"torch={torch.__version__}")


if __name__ == "__main__":
    main()
