"""
tests/python/test_hf_logits.py — `meshpoint export` read by a PyTorch Llama written to Hugging Face
conventions (tests/python/llama_torch.py), without meshpoint's code: the safetensors files are parsed
here from the format's definition, and the model is built from the exported config.json alone.

  /usr/bin/python3 test_hf_logits.py --bin MESHPOINT --tool TOOL_HF_LOGITS --config CFG --work DIR
                                     [--data TOKENS --steps N] [--tol 1e-4]

With --data the checkpoint is a short training run on that token file (trained weights, norm weights
away from 1); without, `meshpoint init` (for configs whose vocabulary byte data does not fit). Then:
  1. export --dtype fp32 and --dtype bf16;
  2. both directories follow the format exactly: u64 LE header length, header padded with spaces to a
     multiple of 8, __metadata__ {"format": "pt"}, offsets contiguous from 0, no trailing bytes;
     config.json says LlamaForCausalLM / llama with rope_theta, torch_dtype, dtype, rope_parameters;
  3. the tensor names are exactly the HF model's named_parameters() (tied: no lm_head.weight);
  4. the fp32 weights in the torch model (float64) give logits within --tol (max|a-b|/max|b|) of the
     logits meshpoint computes from the checkpoint (tests/tool_hf_logits.c) on the same tokens;
  5. every bf16 value is exactly the round-to-nearest-even of the fp32 value;
  6. an F16 directory written here (two shards + index, keys out of data order, no __metadata__ or
     padding) imports, and exports again as fp32, to exactly the F16 values widened.
Exit 0 when all hold, 1 otherwise (each failure named).
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from llama_torch import LlamaConfig, LlamaForCausalLM  # noqa: E402

DTYPES = {"F32": (np.float32, 4), "BF16": (np.uint16, 2), "F16": (np.float16, 2)}


def read_safetensors(path):
    """{name: (dtype string, numpy array)}; asserts the format's rules on the way."""
    with open(path, "rb") as f:
        raw = f.read()
    (hl,) = struct.unpack("<Q", raw[:8])
    assert hl % 8 == 0, f"{path}: header length {hl} is not a multiple of 8"
    text = raw[8:8 + hl].decode("utf-8")
    assert text.rstrip(" ") == text.rstrip(" ").rstrip(), f"{path}: padding is not spaces"
    hdr = json.loads(text)
    assert hdr.get("__metadata__") == {"format": "pt"}, f"{path}: __metadata__ {hdr.get('__metadata__')}"
    data = raw[8 + hl:]
    out, spans = {}, []
    for name, info in hdr.items():
        if name == "__metadata__":
            continue
        dt, size = DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        n = int(np.prod(info["shape"])) if info["shape"] else 1
        assert e - b == n * size, f"{path}: {name}: offsets {b},{e} for shape {info['shape']}"
        spans.append((b, e))
        out[name] = (info["dtype"], np.frombuffer(data[b:e], dtype=np.dtype(dt).newbyteorder("<")).reshape(info["shape"]))
    spans.sort()
    at = 0
    for b, e in spans:
        assert b == at, f"{path}: offsets not contiguous at {at}"
        at = e
    assert at == len(data), f"{path}: {len(data) - at} trailing bytes"
    return out


def read_dir(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        files = sorted(set(wm.values()))
    else:
        files = ["model.safetensors"]
    tensors = {}
    for fn in files:
        for k, v in read_safetensors(os.path.join(d, fn)).items():
            assert k not in tensors, f"{k} in two files"
            tensors[k] = v
    return tensors


def bf16_of(x32):
    """Round-to-nearest-even fp32 -> bf16 bits (NaN-free input)."""
    u = x32.astype(np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def write_f16_dir(d, tensors, config_path):
    """An HF directory written here, not by meshpoint: F16, two shards + index, header keys in the reverse of
    data order, Python's JSON spacing, no __metadata__, no padding."""
    os.makedirs(d)
    shutil.copy(config_path, os.path.join(d, "config.json"))
    names = sorted(tensors)
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    wm = {}
    for k, part in enumerate(halves):
        fn = f"model-{k + 1:05d}-of-00002.safetensors"
        hdr, blob = {}, b""
        for n in part:
            b = tensors[n].astype("<f2").tobytes()
            hdr[n] = {"dtype": "F16", "shape": list(tensors[n].shape), "data_offsets": [len(blob), len(blob) + len(b)]}
            blob += b
            wm[n] = fn
        h = json.dumps(dict(reversed(list(hdr.items())))).encode()
        with open(os.path.join(d, fn), "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + blob)
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": sum(t.size * 2 for t in tensors.values())}, "weight_map": wm}, f)


def f16_interop(a, t32, hf32):
    """import of an F16 sharded directory written by write_f16_dir, exported again as fp32, gives exactly the
    F16 values widened."""
    src = {n: arr.astype(np.float16) for n, (_, arr) in t32.items()}
    d16 = os.path.join(a.work, "hf_f16_foreign")
    write_f16_dir(d16, src, os.path.join(hf32, "config.json"))
    ck16, back = os.path.join(a.work, "ck_f16"), os.path.join(a.work, "hf_f16_back")
    run([a.bin, "import", d16, "--out", ck16])
    run([a.bin, "export", ck16, "--out", back])
    got = read_dir(back)
    bad = [n for n in src if got[n][0] != "F32" or not np.array_equal(got[n][1], src[n].astype(np.float32))]
    return [f"F16 import -> fp32 export: {n} is not the F16 values widened" for n in bad[:5]]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout}{r.stderr}")
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--tool", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--data", default=None)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tol", type=float, default=1e-4)
    a = ap.parse_args()
    name = os.path.basename(a.config)
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    ck = os.path.join(a.work, "ck")
    if a.data:
        run([a.bin, "train", "--config", a.config, "--train-data", a.data, "--steps", str(a.steps), "--log-every", "0",
             "--run-dir", os.path.join(a.work, "run"), "--ckpt-every", str(a.steps)])
        ck = os.path.join(a.work, "run", "checkpoints", "step_%08d" % a.steps)
    else:
        run([a.bin, "init", "--config", a.config, "--tp", "1", "--dp", "1", "--out", ck])
    hf32, hf16 = os.path.join(a.work, "hf32"), os.path.join(a.work, "hfbf16")
    run([a.bin, "export", ck, "--out", hf32])
    run([a.bin, "export", ck, "--out", hf16, "--dtype", "bf16"])
    fails = []

    with open(os.path.join(hf32, "config.json")) as f:
        cj = json.load(f)
    for k, v in (("architectures", ["LlamaForCausalLM"]), ("model_type", "llama"), ("torch_dtype", "float32"),
                 ("dtype", "float32")):
        if cj.get(k) != v:
            fails.append(f"config.json {k} = {cj.get(k)!r}, want {v!r}")
    rp = cj.get("rope_parameters") or {}
    if rp.get("rope_theta") != cj.get("rope_theta") or "rope_type" not in rp:
        fails.append(f"config.json rope_parameters {rp} vs rope_theta {cj.get('rope_theta')}")
    with open(os.path.join(hf16, "config.json")) as f:
        if json.load(f).get("torch_dtype") != "bfloat16":
            fails.append("bf16 export's config.json torch_dtype is not bfloat16")

    cfg = LlamaConfig(cj)
    t32, t16 = read_dir(hf32), read_dir(hf16)
    model = LlamaForCausalLM(cfg).double()
    want = {n for n, _ in model.named_parameters()}
    if set(t32) != want:
        fails.append(f"tensor names: missing {sorted(want - set(t32))}, unexpected {sorted(set(t32) - want)}")
    else:
        with torch.no_grad():
            for n, p in model.named_parameters():
                dt, arr = t32[n]
                if dt != "F32" or tuple(arr.shape) != tuple(p.shape):
                    fails.append(f"{n}: {dt} {arr.shape}, want F32 {tuple(p.shape)}")
                    continue
                p.copy_(torch.from_numpy(arr.astype(np.float64)))
        B, T = 2, min(16, cfg.max_position_embeddings)
        dump = os.path.join(a.work, "dump")
        run([a.tool, ck, dump, "1234", str(B), str(T)])
        lg = np.fromfile(os.path.join(dump, "logits.f32"), dtype="<f4").reshape(B * T, cfg.vocab_size)
        ids = np.fromfile(os.path.join(dump, "inputs.i32"), dtype="<i4").reshape(B, T).astype(np.int64)
        with torch.no_grad():
            ref, _ = model(torch.from_numpy(ids))
        ref = ref.reshape(B * T, -1).numpy()
        err = np.abs(lg.astype(np.float64) - ref).max() / np.abs(ref).max()
        print(f"test_hf_logits {name}: logits meshpoint vs torch fp64 from the export: max|a-b|/max|b| = {err:.3e}")
        if not err <= a.tol:
            fails.append(f"logits differ by {err:.3e} > {a.tol:.0e}")
    if set(t16) != set(t32):
        fails.append("bf16 export holds other tensors than the fp32 one")
    else:
        for n, (dt, arr) in t16.items():
            if dt != "BF16" or not np.array_equal(arr, bf16_of(t32[n][1])):
                fails.append(f"bf16 {n}: not the round-to-nearest-even of the fp32 values")
    if not fails:
        fails += f16_interop(a, t32, hf32)
    if fails:
        print(f"test_hf_logits {name}: FAIL\n  " + "\n  ".join(fails))
        return 1
    print(f"test_hf_logits {name}: OK ({len(t32)} tensors, tied={cfg.tie_word_embeddings}, "
          f"H={cfg.num_attention_heads} KV={cfg.num_key_value_heads})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
