"""
bench/torch_train.py — the PyTorch eager peer for bench/bench_train.sh: trains the Llama of
tests/python/llama_torch.py (HF LlamaForCausalLM semantics) in float32 on the CPU with the same work
per step as `meshpoint train`: forward, mean cross-entropy, backward, global-norm gradient clipping
(1.0), AdamW (betas 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices only), same batch, sequence
length and thread count.

  /usr/bin/python3 bench/torch_train.py --config configs/bench_tiny.json --steps 12 --warmup 2
        [--batch 4] [--seq-len 256] [--threads N] [--lr 3e-4] [--seed 1337]
        [--train-data FILE --data-format u16|u32|llmc]   (random tokens when no file is given)

Batches follow meshpoint's loader (core/data.h): batch g's sequence k reads tokens
[pos + k*T, pos + k*T + T + 1), pos advancing by B*T and wrapping to 0. The first --warmup steps are
not timed; every step's time and tok/s goes to stderr; the last stdout line is
  result impl=torch tok_per_s=X tok_per_s_median=M steps=K warmup=W threads=N batch=B seq_len=T
with X = B*T*K / (total time of the K timed steps) and M = B*T / (median step time). A step is timed
like meshpoint's: from fetching the batch to the loss read back after opt.step.
"""
import argparse
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
from llama_torch import LlamaConfig, LlamaForCausalLM  # noqa: E402


def load_tokens(path, fmt):
    if fmt == "llmc":
        header = np.fromfile(path, dtype="<i4", count=256)
        if header[0] != 20240520:
            sys.exit(f"torch_train: {path}: not an llm.c token file (magic {header[0]})")
        return np.fromfile(path, dtype="<u2", offset=1024, count=int(header[2]))
    return np.memmap(path, dtype={"u16": "<u2", "u32": "<u4"}[fmt], mode="r")


def main():
    ap = argparse.ArgumentParser(description="PyTorch eager Llama training throughput (meshpoint's peer)")
    ap.add_argument("--config", required=True)
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

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    cfg = LlamaConfig.load(args.config)
    model = LlamaForCausalLM(cfg)
    decay = [p for p in model.parameters() if p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    nparams = sum(p.numel() for p in model.parameters())

    B, T = args.batch, args.seq_len
    if args.train_data:
        toks = load_tokens(args.train_data, args.data_format)
    else:
        toks = np.random.default_rng(args.seed).integers(0, cfg.vocab_size, size=B * T * 8 + 1, dtype=np.int64)
    if len(toks) < B * T + 1:
        sys.exit(f"torch_train: {len(toks)} tokens, a batch needs {B * T + 1}")
    pos = 0
    print(f"torch_train: {nparams / 1e6:.1f}M parameters, B={B} T={T} threads={torch.get_num_threads()} "
          f"torch {torch.__version__}", file=sys.stderr)

    dts = []
    for step in range(args.steps):
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
        _, loss = model(x, y)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        lv = loss.item()
        dt = time.perf_counter() - t0
        if step >= args.warmup:
            dts.append(dt)
        print(f"step {step + 1}/{args.steps} loss {lv:.4f} norm {norm.item():.3f} {dt * 1e3:.1f} ms "
              f"{B * T / dt:.0f} tok/s{'' if step >= args.warmup else ' (warm-up)'}", file=sys.stderr)

    k = len(dts)
    print(f"result impl=torch tok_per_s={B * T * k / sum(dts):.1f} "
          f"tok_per_s_median={B * T / float(np.median(dts)):.1f} steps={k} warmup={args.warmup} "
          f"threads={torch.get_num_threads()} batch={B} seq_len={T}")


if __name__ == "__main__":
    main()
