#!/usr/bin/env python3
"""tests/python/rope_reference.py TOOL_ROPE WORKDIR — meshpoint's RoPE tables against transformers' formulas.

For each config below (linear and llama3 scaling, through rope_scaling and transformers 5's rope_parameters,
plus the default as a control), runs tests/tool_rope, which prints meshpoint's inverse frequencies (double)
and writes the fp32 cos/sin tables the model uses, and compares them with a float64 reference written from
transformers' modeling_rope_utils (_compute_default_rope_parameters, _compute_linear_scaling_rope_parameters,
_compute_llama3_parameters: same operations, same order, torch float64 instead of float32):
  - inverse frequencies within 1e-15 relative (pow vs 1/pow may differ in the last bit);
  - every table entry within half an fp32 ulp of the float64 value (plus 1e-12 of double noise), i.e. the
    correctly rounded fp32 number up to ties with double noise; at least 99.9% of entries exactly equal
    to float32(reference).
The llama3 configs together must exercise all three bands (unchanged, divided, smoothed).
"""
import json
import math
import os
import subprocess
import sys

import numpy as np
import torch

tool, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)


def default_inv_freq(base, dim):
    # transformers: 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).to(torch.float64) / dim))


def linear_inv_freq(base, dim, rs):
    inv_freq = default_inv_freq(base, dim)
    inv_freq /= rs["factor"]
    return inv_freq


def llama3_inv_freq(base, dim, rs, bands):
    inv_freq = default_inv_freq(base, dim)
    factor = rs["factor"]
    low_freq_factor = rs["low_freq_factor"]
    high_freq_factor = rs["high_freq_factor"]
    old_context_len = rs["original_max_position_embeddings"]
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = torch.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed_inv_freq = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium_freq = ~(wavelen < high_freq_wavelen) * ~(wavelen > low_freq_wavelen)
    inv_freq_llama = torch.where(is_medium_freq, smoothed_inv_freq, inv_freq_llama)
    bands["high"] += int((wavelen < high_freq_wavelen).sum())
    bands["low"] += int((wavelen > low_freq_wavelen).sum())
    bands["medium"] += int(is_medium_freq.sum())
    return inv_freq_llama


L3 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192,
      "rope_type": "llama3"}
cases = [  # name, heads, head_dim, theta, rope key, rope object, positions
    ("default", 4, 64, 10000.0, "rope_scaling", None, 2048),
    ("linear_f2", 4, 64, 10000.0, "rope_scaling", {"type": "linear", "factor": 2.0}, 4096),
    ("linear_f4_theta5e5", 2, 128, 500000.0, "rope_scaling", {"rope_type": "linear", "factor": 4}, 4096),
    ("linear_f1_5_tf5", 2, 32, 10000.0, "rope_parameters",
     {"rope_type": "linear", "factor": 1.5, "rope_theta": 10000.0}, 1024),
    ("llama3_1_8b", 2, 128, 500000.0, "rope_scaling", L3, 8192),
    ("llama3_2_1b", 2, 64, 500000.0, "rope_scaling", dict(L3, factor=32.0), 4096),
    ("llama3_tiny", 2, 16, 10000.0, "rope_scaling",
     {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 1024,
      "rope_type": "llama3"}, 512),
    ("llama3_tf5_odd", 4, 64, 20000.0, "rope_parameters",
     {"rope_type": "llama3", "factor": 3.5, "low_freq_factor": 2.0, "high_freq_factor": 8.0,
      "original_max_position_embeddings": 4096, "rope_theta": 20000.0}, 2048),
]
bands = {"high": 0, "low": 0, "medium": 0}
fail = 0
for name, heads, hd, theta, key, rope, P in cases:
    cfg = {"hidden_size": heads * hd, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": heads,
           "vocab_size": 256, "max_position_embeddings": 131072, "rope_theta": theta, key: rope}
    path = os.path.join(work, name + ".json")
    with open(path, "w") as f:
        json.dump(cfg, f)
    out = os.path.join(work, name + ".bin")
    res = subprocess.run([tool, path, str(P), out], capture_output=True, text=True)
    if res.returncode != 0:
        print(f"{name}: tool_rope failed: {res.stderr}")
        fail = 1
        continue
    lines = res.stdout.split()
    assert int(lines[0]) == hd, (lines[0], hd)
    mp_inv = np.array([float(x) for x in lines[2:]], dtype=np.float64)
    rtype = None if rope is None else rope.get("rope_type", rope.get("type"))
    if rtype is None:
        ref_inv = default_inv_freq(theta, hd)
    elif rtype == "linear":
        ref_inv = linear_inv_freq(theta, hd, rope)
    else:
        ref_inv = llama3_inv_freq(theta, hd, rope, bands)
    ref_inv = ref_inv.numpy()
    inv_rel = np.max(np.abs(mp_inv - ref_inv) / ref_inv)
    # the tables: angle = pos * inv_freq (transformers: inv_freq @ position_ids, then cos/sin)
    half = hd // 2
    tab = np.fromfile(out, dtype=np.float32)
    assert tab.size == 2 * P * half, (tab.size, P, half)
    mp_cos, mp_sin = tab[: P * half].reshape(P, half), tab[P * half:].reshape(P, half)
    ang = np.outer(np.arange(P, dtype=np.float64), ref_inv)
    worst, exact = 0.0, 0
    for mp_t, ref in ((mp_cos, np.cos(ang)), (mp_sin, np.sin(ang))):
        ulp = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)
        excess = np.abs(mp_t.astype(np.float64) - ref) - (0.5 * ulp + 1e-12 * (1 + ang))
        worst = max(worst, float(np.max(excess)))
        exact += int(np.sum(mp_t == ref.astype(np.float32)))
    frac = exact / (2 * P * half)
    ok = inv_rel <= 1e-15 and worst <= 0 and frac >= 0.999
    print(f"{name}: {rtype or 'default'}, head_dim {hd}, {P} positions: inv_freq max rel diff {inv_rel:.2e}; "
          f"tables within half an fp32 ulp: {'yes' if worst <= 0 else 'NO (by %.3g)' % worst}; "
          f"exactly float32(reference): {100 * frac:.4f}% {'ok' if ok else 'FAIL'}")
    fail |= not ok
print(f"llama3 bands exercised: {bands}")
if min(bands.values()) == 0:
    print("FAIL: a llama3 band was never exercised")
    fail = 1
sys.exit(1 if fail else 0)
