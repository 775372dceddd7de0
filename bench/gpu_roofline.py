#!/usr/bin/env python3
"""bench/gpu_roofline.py — the roofline of one training step of `meshpoint train --device cuda` (docs/CUDA.md).

    gpu_roofline.py CONFIG.json [--batch B] [--seq-len T] [--profile FILE --profile-steps S]
    gpu_roofline.py --count-ops FILE     the number of ops a profile holds (its calls summed: what
                                         bench_gpu.sh passes as MP_CUDA_PROFILE_SKIP)
                    [--peak 989e12] [--mm 790e12] [--bw 4.3e12] [--markdown]

For every op of the CUDA backend's table that a step issues (1x1 mesh, grad_accum 1, bf16 compute, fp32
masters/moments/weight gradients, flash attention with causal tiles skipped), its FLOPs and bytes moved
per step and its time at the H200's rates: max(FLOPs / mm, bytes / bw), mm = bf16 tensor-core GEMM rate
(790e12: KINDS.md's measured 8192^3 product on random data), bw = HBM copy rate (4.3e12: KINDS.md's measured
device-to-device copy). GEMMs are one row per shape (the key the profiler prints: M x N x K, transposes,
C type); the other ops one row per op. The projected MFU is the model FLOPs of the step (6 N + 12 L H hd T
per token, bench/bench_gpu.sh's count) over the summed roofline time, against --peak (989e12 dense bf16).

With --profile (MP_CUDA_PROFILE's file of core/cuda/prof_cuda.h, from a run of S steps) each row also gets
the measured ms per step and measured / roofline; ops the model does not cover (copies, memsets, residual
adds, conversions) are listed as measured only. Standard library only (the GPU machine's python3 is a venv).
"""
import argparse
import json
import math
import sys


def gemm_key(ta, tb, m, n, k, c):
    return f"gemm {m}x{n}x{k} t{ta}{tb} {c}"


def model_rows(c, B, T):
    """{key: [calls, flops, bytes]} per step for config c at batch B x seq T."""
    D, I, L, H, V = (c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                                     "vocab_size"))
    KV = c.get("num_key_value_heads", H)
    hd = D // H
    N = B * T
    rows = {}

    def add(key, calls, flops, nbytes):
        r = rows.setdefault(key, [0, 0.0, 0.0])
        r[0] += calls
        r[1] += flops
        r[2] += nbytes

    # q, k and v are one [(H + 2 KV) hd, D] GEMM each way (layers/llama.c's fused qkv rows)
    linears = [(D, (H + 2 * KV) * hd, L), (H * hd, D, L), (D, V, 1)]
    for din, dout, cnt in linears:
        f = 2.0 * N * din * dout
        add(gemm_key(0, 1, N, dout, din, "bf16"), cnt, cnt * f, cnt * 2.0 * (N * din + din * dout + N * dout))
        add(gemm_key(0, 0, N, din, dout, "bf16"), cnt, cnt * f, cnt * 2.0 * (N * dout + din * dout + 2 * N * din))
        add(gemm_key(1, 0, dout, din, N, "f32"), cnt, cnt * f, cnt * (2.0 * (N * dout + N * din) + 8.0 * din * dout))
    # the MLP runs feature-major (layers/llama.c): gate and up are one [2I, D] GEMM each way, on
    # transposed activations; down reads h^T [I, N]
    f = 2.0 * N * D * 2 * I
    add(gemm_key(0, 1, 2 * I, N, D, "bf16"), L, L * f, L * 2.0 * (N * D + 2 * I * D + 2 * I * N))
    add(gemm_key(1, 0, N, D, 2 * I, "bf16"), L, L * f, L * 2.0 * (2 * I * N + 2 * I * D + N * D))
    add(gemm_key(0, 0, 2 * I, D, N, "f32"), L, L * f, L * (2.0 * (2 * I * N + N * D) + 8.0 * 2 * I * D))
    f = 2.0 * N * I * D
    add(gemm_key(1, 1, N, D, I, "bf16"), L, L * f, L * 2.0 * (N * I + I * D + N * D))
    add(gemm_key(1, 1, I, N, D, "bf16"), L, L * f, L * 2.0 * (D * I + N * D + I * N))
    add(gemm_key(1, 1, D, I, N, "f32"), L, L * f, L * (2.0 * (N * D + I * N) + 8.0 * D * I))
    att = 4.0 * B * H * T * T * hd / 2          # QK^T and PV over the causal half
    qkv = 2.0 * N * (H + 2 * KV) * hd
    add("attn_fwd", L, L * att, L * (qkv + 2.0 * N * H * hd + 4.0 * N * H))
    add("attn_bwd", L, L * 2.5 * att, L * (2 * qkv + 4.0 * N * H * hd + 4.0 * N * H))   # S, dP, dV, dQ, dK
    add("rmsnorm_fwd", 2 * L + 1, 0, (2 * L + 1) * (4.0 * N * D + 4.0 * N))
    add("rmsnorm_bwd", 2 * L + 1, 0, (2 * L + 1) * (8.0 * N * D + 4.0 * N))
    rope = 4.0 * N * (H + KV) * hd + 8.0 * T * hd / 2
    add("rope_fwd", L, 0, L * rope)   # q and k in one call: adjacent heads of the fused qkv rows
    add("rope_bwd", L, 0, L * rope)
    add("swiglu_fwd", L, 0, L * 6.0 * N * I)
    add("swiglu_bwd", L, 0, L * 10.0 * N * I)
    add("embed_fwd", 1, 0, 4.0 * N * D)
    add("embed_bwd", 1, 0, 2.0 * N * D + 8.0 * N * D)
    add("xent_fwd", 1, 0, 2.0 * N * V)   # rowmax, sumexp and target in one read of the logits (tp = 1)
    add("xent_bwd", 1, 0, 4.0 * N * V)
    P = L * (D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I + 2 * D) + D + 2 * V * D
    add("adamw", 1, 0, 30.0 * P)
    add("sumsq_acc", 1, 0, 4.0 * P)
    nmm = L * (D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I) + D * V
    model_flops = (6.0 * nmm + 12.0 * L * H * hd * T) * N
    return rows, model_flops


def read_profile(path, steps):
    """{key: [calls, ms]} per step from a prof_cuda.h file; GEMM keys lose their ' +=' (beta 1) suffix."""
    out = {}
    with open(path) as f:
        next(f)
        for line in f:
            key, calls, ms = line.rstrip("\n").split("\t")
            key = key.replace(" +=", "")
            r = out.setdefault(key, [0.0, 0.0])
            r[0] += int(calls) / steps
            r[1] += float(ms) / steps
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config", nargs="?")
    ap.add_argument("--count-ops", metavar="FILE")
    ap.add_argument("--batch", type=int)
    ap.add_argument("--seq-len", type=int)
    ap.add_argument("--profile")
    ap.add_argument("--profile-steps", type=int, default=1)
    ap.add_argument("--peak", type=float, default=989e12)
    ap.add_argument("--mm", type=float, default=790e12)
    ap.add_argument("--bw", type=float, default=4.3e12)
    ap.add_argument("--markdown", action="store_true")
    a = ap.parse_args()
    if a.count_ops:
        print(round(sum(calls for calls, _ in read_profile(a.count_ops, 1).values())))
        return
    if not a.config:
        ap.error("CONFIG.json is required (unless --count-ops)")
    c = json.load(open(a.config))
    tr = c.get("train", {})
    B = a.batch or tr.get("batch_size", 8)
    T = a.seq_len or tr.get("seq_len", 2048)
    rows, model_flops = model_rows(c, B, T)
    prof = read_profile(a.profile, a.profile_steps) if a.profile else {}
    sep = " | " if a.markdown else "  "
    hdr = ["op (per step)", "calls", "GFLOP", "MB", "roofline ms", "bound"] + (["measured ms", "meas/roof"] if prof else [])
    lines = [hdr]
    total = 0.0
    meas_total = 0.0
    for key in sorted(rows, key=lambda k: -max(rows[k][1] / a.mm, rows[k][2] / a.bw)):
        calls, fl, by = rows[key]
        t = max(fl / a.mm, by / a.bw)
        total += t
        row = [key, f"{calls}", f"{fl / 1e9:.1f}", f"{by / 1e6:.1f}", f"{1e3 * t:.3f}",
               "compute" if fl / a.mm >= by / a.bw else "memory"]
        if prof:
            m = prof.pop(key, None)
            row += [f"{m[1]:.3f}", f"{m[1] / (1e3 * t):.2f}"] if m else ["(none)", "-"]
            meas_total += m[1] if m else 0
        lines.append(row)
    for key, (calls, ms) in sorted(prof.items(), key=lambda kv: -kv[1][1]):
        lines.append([key + " (not modeled)", f"{calls:g}", "-", "-", "-", "-", f"{ms:.3f}", "-"])
        meas_total += ms
    w = [max(len(r[i]) for r in lines) for i in range(len(hdr))]
    for i, r in enumerate(lines):
        if a.markdown:
            print("| " + sep.join(r) + " |")
            if i == 0:
                print("|" + "|".join("---" for _ in r) + "|")
        else:
            print(sep.join(x.ljust(w[j]) if j == 0 else x.rjust(w[j]) for j, x in enumerate(r)))
    mfu = model_flops / total / a.peak
    print(f"roofline: step {1e3 * total:.1f} ms at {a.mm / 1e12:.0f} TFLOP/s GEMM, {a.bw / 1e12:.1f} TB/s; "
          f"model {model_flops / 1e12:.1f} TFLOP/step ({B} x {T} tokens); projected MFU {100 * mfu:.1f}% "
          f"of {a.peak / 1e12:.0f} TFLOP/s")
    if prof or a.profile:
        print(f"measured: {meas_total:.1f} ms of device time per step in the ops (profiled, {a.profile_steps} steps; "
              f"{meas_total / (1e3 * total):.2f}x the roofline)")
    if not math.isfinite(mfu):
        sys.exit(1)


if __name__ == "__main__":
    main()
