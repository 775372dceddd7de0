"""tests/python/gguf_export.py — `meshpoint export --format gguf` (reshard/gguf_sink.c, reshard/gguf.c) read
with the `gguf` package (llama.cpp's gguf-py: GGUFReader, quants) in scripts/test_venv.sh's venv.

For a tiny model of each family (llama with GQA and llama3 rope, q and o over --max-memory 4M's 1 MiB band
so that they stream in bands of whole heads, mistral with rows that are not whole q8_0
blocks, qwen2 with q/k/v biases, qwen3 with an explicit head_dim and tied embeddings, phi3 with a sliding
window and fused tensors), initialised by `meshpoint init` and exported at f32, f16, bf16 and q8_0:
  1. the metadata: general.architecture (llama for Llama and Mistral), every hyperparameter key with the
     config's value and the GGUF value type convert_hf_to_gguf.py writes (u32, f32, string), key_length /
     value_length only with an explicit head_dim, rope.scaling.* for linear rope, sliding_window for phi3,
     general.file_type of the dtype; GGUF version 3, alignment 32;
  2. the tensor set, names and shapes: what the same checkpoint's HF export (fp32 safetensors, parsed
     here) holds, under llama.cpp's names (written here independently of the C map), no output.weight when
     tied, rope_freqs.weight for llama3 rope (its factors as the converter computes them from the config);
  3. every tensor's bytes, bitwise: the HF tensor, q/k rows permuted for arch llama as the converter's
     LlamaModel.permute does, converted with numpy (f16: astype; bf16 / q8_0: gguf.quants.quantize, which
     is ggml's reference bit for bit); 1-D tensors and norms f32; a q8_0 tensor whose rows are not whole
     blocks f16, as the converter falls back;
  4. refusals and atomicity: an existing --out without --force (exit 2, untouched); --dtype q8_0 with
     --format hf (exit 2); --out a directory (exit 2); a damaged source rank file fails the export mid-stream
     (exit 1) leaving no file and no .partial, and with --force the existing file byte for byte; no .partial
     left after a success.

Usage: python gguf_export.py MESHPOINT WORKDIR
"""
import json
import math
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import quantize

BIN, WORK = sys.argv[1], sys.argv[2]

TRAIN = {"batch_size": 4, "seq_len": 16, "lr": 1e-3, "warmup_steps": 1}
FAMILIES = {
    "llama": {"hidden_size": 768, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 12,
              "num_key_value_heads": 4, "vocab_size": 384, "max_position_embeddings": 128, "rms_norm_eps": 1e-5,
              "rope_theta": 50000.0,
              "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}},
    "mistral": {"model_type": "mistral", "hidden_size": 64, "intermediate_size": 80, "num_hidden_layers": 2,
                "num_attention_heads": 4, "num_key_value_heads": 1, "vocab_size": 96, "max_position_embeddings": 256,
                "rms_norm_eps": 1e-6, "sliding_window": None, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 160, "max_position_embeddings": 128,
              "rms_norm_eps": 1e-6, "rope_theta": 1000000.0},
    "qwen3": {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 128,
              "max_position_embeddings": 128, "rms_norm_eps": 1e-6, "tie_word_embeddings": True},
    "phi3": {"model_type": "phi3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 128, "max_position_embeddings": 128,
             "rms_norm_eps": 1e-5, "sliding_window": 48, "pad_token_id": None},
}
ARCH = {"llama": "llama", "mistral": "llama", "qwen2": "qwen2", "qwen3": "qwen3", "phi3": "phi3"}
FTYPE = {"f32": 0, "f16": 1, "q8_0": 7, "bf16": 32}
U32, F32, STR = gguf.GGUFValueType.UINT32, gguf.GGUFValueType.FLOAT32, gguf.GGUFValueType.STRING


def run(*args, expect=0):
    p = subprocess.run([BIN, *args], capture_output=True, text=True)
    if p.returncode != expect:
        sys.exit(f"FAIL: meshpoint {' '.join(args)}: exit {p.returncode}, expected {expect}\n{p.stderr}")
    return p.stderr


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    out = {}
    for k, v in head.items():
        if k == "__metadata__":
            continue
        assert v["dtype"] == "F32", (k, v["dtype"])
        a, b = v["data_offsets"]
        out[k] = np.frombuffer(data[a:b], dtype=np.float32).reshape(v["shape"])
    return out


def gguf_name(hf):
    """llama.cpp's name of an HF tensor (convert_hf_to_gguf.py's tensor map, for these families)."""
    top = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
           "lm_head.weight": "output.weight"}
    if hf in top:
        return top[hf]
    parts = hf.split(".")
    assert parts[:2] == ["model", "layers"], hf
    sub = {"input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm", "self_attn.q_proj": "attn_q",
           "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
           "self_attn.qkv_proj": "attn_qkv", "self_attn.q_norm": "attn_q_norm", "self_attn.k_norm": "attn_k_norm",
           "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down",
           "mlp.gate_up_proj": "ffn_up"}[".".join(parts[3:-1])]
    return f"blk.{parts[2]}.{sub}.{parts[-1]}"


def permute(w, n_head, n_head_kv):
    """convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(cfg):
    """The converter's rope_freqs (LlamaModel.generate_extra_tensors), with the rope_scaling's own
    original_max_position_embeddings (the one transformers and meshpoint rotate with)."""
    rs = cfg["rope_scaling"]
    dim = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    base = cfg.get("rope_theta", 10000.0)
    freqs = 1.0 / (base ** (np.arange(0, dim, 2, dtype=np.float64) / dim))
    old = rs["original_max_position_embeddings"]
    lo, hi = old / rs["low_freq_factor"], old / rs["high_freq_factor"]
    out = []
    for f in freqs:
        wl = 2 * math.pi / f
        if wl < hi:
            out.append(1.0)
        elif wl > lo:
            out.append(rs["factor"])
        else:
            s = (old / wl - rs["low_freq_factor"]) / (rs["high_freq_factor"] - rs["low_freq_factor"])
            out.append(1 / ((1 - s) / rs["factor"] + s))
    return np.array(out, dtype=np.float32)


def expected_bytes(name, hf, cfg, family, dtype):
    """(ggml type, bytes) of a tensor as the converter writes it."""
    w = hf
    if ARCH[family] == "llama" and name.endswith("attn_q.weight"):
        w = permute(w, cfg["num_attention_heads"], cfg["num_attention_heads"])
    if ARCH[family] == "llama" and name.endswith("attn_k.weight"):
        w = permute(w, cfg["num_attention_heads"], cfg.get("num_key_value_heads"))
    if w.ndim == 1 or name.endswith("_norm.weight") or dtype == "f32":
        return T.F32, w.astype(np.float32).tobytes()
    if dtype == "q8_0" and w.shape[-1] % 32 == 0:
        return T.Q8_0, quantize(w, T.Q8_0).tobytes()
    if dtype in ("f16", "q8_0"):
        return T.F16, w.astype(np.float16).tobytes()
    return T.BF16, quantize(w, T.BF16).tobytes()


def check_meta(r, cfg, family, dtype, path):
    arch = ARCH[family]
    hd = cfg.get("head_dim", cfg["hidden_size"] // cfg["num_attention_heads"])
    want = {"general.architecture": (STR, arch), "general.file_type": (U32, FTYPE[dtype]),
            f"{arch}.context_length": (U32, cfg["max_position_embeddings"]),
            f"{arch}.embedding_length": (U32, cfg["hidden_size"]),
            f"{arch}.block_count": (U32, cfg["num_hidden_layers"]),
            f"{arch}.feed_forward_length": (U32, cfg["intermediate_size"]),
            f"{arch}.attention.head_count": (U32, cfg["num_attention_heads"]),
            f"{arch}.attention.head_count_kv": (U32, cfg["num_key_value_heads"]),
            f"{arch}.rope.freq_base": (F32, np.float32(cfg.get("rope_theta", 10000.0))),
            f"{arch}.attention.layer_norm_rms_epsilon": (F32, np.float32(cfg["rms_norm_eps"])),
            }
    if arch == "llama":   # LlamaModel.set_gguf_parameters
        want[f"{arch}.vocab_size"] = (U32, cfg["vocab_size"])
    if arch in ("llama", "phi3"):   # LlamaModel's and Phi3MiniModel's
        want[f"{arch}.rope.dimension_count"] = (U32, hd)
    if "head_dim" in cfg:
        want[f"{arch}.attention.key_length"] = want[f"{arch}.attention.value_length"] = (U32, hd)
    rs = cfg.get("rope_scaling") or {}
    if rs.get("rope_type") == "linear":
        want[f"{arch}.rope.scaling.type"] = (STR, "linear")
        want[f"{arch}.rope.scaling.factor"] = (F32, np.float32(rs["factor"]))
    if family == "phi3":   # always, 0 for none
        want["phi3.attention.sliding_window"] = (U32, cfg["sliding_window"] or 0)
    for k, (ty, v) in want.items():
        f = r.fields.get(k)
        assert f is not None, f"{path}: key {k} missing"
        assert f.types == [ty], f"{path}: key {k} has types {f.types}, expected {ty}"
        got = f.contents()
        assert (got == v) if ty != F32 else (np.float32(got) == v), f"{path}: {k} = {got!r}, expected {v!r}"
    arch_keys = {k for k in r.fields if k.startswith(arch + ".")}
    extra = arch_keys - set(want)
    assert not extra, f"{path}: unexpected keys {sorted(extra)}"
    assert r.fields["GGUF.version"].contents() == 3
    assert r.alignment == 32 and "general.alignment" not in r.fields


def check_tensors(r, hf, cfg, family, dtype, path):
    got = {t.name: t for t in r.tensors}
    want = {gguf_name(k): v for k, v in hf.items()}
    if (cfg.get("rope_scaling") or {}).get("rope_type") == "llama3":
        want["rope_freqs.weight"] = llama3_factors(cfg)
    assert set(got) == set(want), f"{path}: tensors {sorted(set(got) ^ set(want))} differ"
    if cfg.get("tie_word_embeddings"):
        assert "output.weight" not in got
    for name, w in want.items():
        t = got[name]
        ty, b = expected_bytes(name, w, cfg, family, dtype)
        assert t.tensor_type == ty, f"{path}: {name} is {t.tensor_type.name}, expected {ty.name}"
        assert list(t.shape) == list(reversed(w.shape)), f"{path}: {name} shape {t.shape} vs {w.shape}"
        if name == "rope_freqs.weight":   # float64 math here, meshpoint's own inv_freq in C: within an ulp or two
            assert np.allclose(np.frombuffer(t.data.tobytes(), np.float32), w, rtol=1e-6, atol=0), f"{path}: {name}"
            continue
        assert t.data.tobytes() == b, f"{path}: {name} ({ty.name}) bytes differ from the converter's"


def export_family(family, cfg):
    d = os.path.join(WORK, family)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({**cfg, "train": TRAIN}, f)
    ck, hfdir = os.path.join(d, "ck"), os.path.join(d, "hf")
    run("init", "--config", os.path.join(d, "config.json"), "--tp", "1", "--dp", "1", "--out", ck)
    run("export", ck, "--out", hfdir)
    hf = read_safetensors(os.path.join(hfdir, "model.safetensors"))
    for dtype in ("f32", "f16", "bf16", "q8_0"):
        out = os.path.join(d, f"m_{dtype}.gguf")
        run("export", ck, "--format", "gguf", "--dtype", dtype, "--out", out, "--max-memory", "4M")
        assert not os.path.exists(out + ".partial"), out
        r = gguf.GGUFReader(out)
        check_meta(r, cfg, family, dtype, out)
        check_tensors(r, hf, cfg, family, dtype, out)
    print(f"ok: {family}: metadata, tensors and bytes at f32, f16, bf16, q8_0")
    return ck, d


def refusals(ck, d):
    out = os.path.join(d, "m_f32.gguf")
    before = open(out, "rb").read()
    err = run("export", ck, "--format", "gguf", "--out", out, expect=2)
    assert "already exists" in err and open(out, "rb").read() == before, err
    err = run("export", ck, "--format", "hf", "--dtype", "q8_0", "--out", os.path.join(d, "x"), expect=2)
    assert "--dtype q8_0" in err, err
    err = run("export", ck, "--format", "gguf", "--force", "--out", d, expect=2)
    assert "is a directory" in err, err
    # a source whose rank file is damaged: the export fails while streaming; --force leaves the old file
    bad = os.path.join(d, "bad")
    shutil.copytree(ck, bad)
    f = sorted(p for p in os.listdir(bad) if p.startswith("rank_"))[-1]
    b = bytearray(open(os.path.join(bad, f), "rb").read())
    for i in range(len(b) * 3 // 4, len(b) * 3 // 4 + 4096):
        b[i] ^= 0x5A
    open(os.path.join(bad, f), "wb").write(bytes(b))
    err = run("export", bad, "--format", "gguf", "--out", os.path.join(d, "bad.gguf"), expect=1)
    assert not os.path.exists(os.path.join(d, "bad.gguf")) and not os.path.exists(os.path.join(d, "bad.gguf.partial")), err
    run("export", bad, "--format", "gguf", "--force", "--out", out, expect=1)
    assert open(out, "rb").read() == before and not os.path.exists(out + ".partial")
    run("export", ck, "--format", "gguf", "--force", "--dtype", "q8_0", "--out", out)
    assert open(out, "rb").read() != before and not os.path.exists(out + ".partial")
    print("ok: refusals (exists, --dtype with hf, a directory), a failed export leaves no file and no .partial "
          "(--force: the old file as it was), --force replacing the file")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    last = None
    for family, cfg in FAMILIES.items():
        last = export_family(family, cfg)
    refusals(*last)


if __name__ == "__main__":
    main()
