"""tests/python/gguf_import.py — `meshpoint import model.gguf` against GGUF files made outside the project:
llama.cpp's own convert_hf_to_gguf.py and quantizer (scripts/llamacpp_venv.sh's venv) as the oracle.

For a small model of each family (llama, qwen2 with biases, qwen3 with an explicit head_dim, phi3 fused;
transformers' class with random weights, tests/python/family_ref.py's tiny config, and the family's test
tokenizer from tests/python/tokenizer_build.py), saved as an HF directory:
  1. f32: convert_hf_to_gguf.py --outtype f32, `import` (the first family's imports for tp 2 (x dp 2 when
     quantized): boxes of part of a row, so of part of the blocks), then
     - every tensor of the imported checkpoint (`export --format hf --dtype fp32`) is bitwise the original
       HF tensor (the name map, llama's q/k un-permutation, Phi-3's fused rows);
     - `eval`'s loss = transformers' float64 loss on the original HF directory to 1e-5 (fp32 accuracy);
     - the rebuilt tokenizer (`meshpoint data tokenize` via the carried tokenizer.json) gives llama.cpp's ids
       on the GGUF for the tokenizer tests' corpus;
     - `train --init-from` of the imported checkpoint runs 3 steps with finite, falling loss.
  2. q8_0: convert_hf_to_gguf.py --outtype q8_0, `import`, then every imported tensor is bitwise gguf-py's
     gguf.quants.dequantize of the file's (q/k un-permuted like the HF side); `eval`'s loss = transformers' float64
     loss with those dequantized weights to 1e-5 (so the whole difference from f32 is the quantization's), and
     that difference is within 1% of the f32 loss (each weight moves by at most half a step, amax/254 of its
     block of 32, ~0.4% of the block's largest weight: a first-order change of the loss of that order).
  2b. the export side's tokenizer: the HF directory imported, exported with `export --format gguf`: llama.cpp's
     tokenizer on that file gives the `tokenizers` library's ids on the corpus (texts NFC changes left out, and
     counted, for Qwen's NFC tokenizer: llama.cpp applies no normalization);
  3. q4_0, q4_1: llama.cpp's quantizer (llama_cpp.llama_model_quantize, pure: every 2-D tensor of that type) on
     the f32 file; the import's tensors are bitwise gguf.quants.dequantize's.
  4. refusals: another architecture (named), a tensor of a type import does not read (named with its type).

Usage: python gguf_import.py MESHPOINT SRC_DIR WORKDIR CONVERT_PY
"""
import ctypes
import json
import os
import shlex
import shutil
import subprocess
import sys
import unicodedata

import numpy as np
import gguf
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import family_ref as fr  # noqa: E402
import tokenizer_build as tb  # noqa: E402

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(cmd, what, rc=0):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, check=False,
                       env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    if r.returncode != rc:
        print("ERROR: %s: exit %d (wanted %d)\n$ %s\n%s\n%s" % (what, r.returncode, rc, shlex.join(map(str, cmd)),
                                                               r.stdout[-3000:], r.stderr[-3000:]))
        sys.exit(1)
    return r.stdout + r.stderr


def load_safetensors(d):
    from safetensors.numpy import load_file
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(d, f)))
    return out


def unpermute(w, heads):
    """llama.cpp's q/k row order (convert_hf_to_gguf.py's LlamaModel.permute) back to HF's."""
    hd = w.shape[0] // heads
    return w.reshape(heads, hd // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def gguf_as_hf(path, cfg, family):
    """Every tensor of GGUF path, dequantized by gguf-py, under its HF name and in HF's layout (q/k rows of the
    llama architecture un-permuted; Phi-3's fused qkv_proj and gate_up_proj as they are)."""
    r = gguf.GGUFReader(path)
    blk = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm", "attn_q": "self_attn.q_proj",
           "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
           "attn_q_norm": "self_attn.q_norm", "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj",
           "ffn_down": "mlp.down_proj", "ffn_up": "mlp.up_proj", "attn_qkv": "self_attn.qkv_proj"}
    top = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
    out = {}
    H, KV = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    for t in r.tensors:
        x = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float32).reshape(list(reversed(t.shape.tolist())))
        base, kind = t.name.rsplit(".", 1)
        if base.startswith("blk."):
            _, n, part = base.split(".", 2)
            name = "model.layers.%s.%s.%s" % (n, blk[part], kind)
        else:
            name = "%s.%s" % (top[base], kind)
        if family in ("llama", "mistral") and kind == "weight" and part_of(t.name) in ("attn_q", "attn_k"):
            x = unpermute(x, H if part_of(t.name) == "attn_q" else KV)
        if family == "phi3" and ".mlp.up_proj." in name:   # HF's Phi-3 fuses gate and up as llama.cpp does
            name = name.replace("up_proj", "gate_up_proj")
        out[name] = x
    return out


def eval_loss(cmd, what):
    out = run(cmd, what)
    return json.JSONDecoder().raw_decode(out[out.index("{"):])[0]["loss"]


def part_of(gname):
    return gname.split(".")[2] if gname.startswith("blk.") else ""


def imported_tensors(a, ckpt, work, tag):
    hf = os.path.join(work, "back_" + tag)
    run([a.bin, "export", ckpt, "--out", hf, "--dtype", "fp32", "--force"], "export of the import " + tag)
    return load_safetensors(hf)


def same_tensors(got, want, what):
    names = sorted(set(got) | set(want))
    bad = [n for n in names if n not in got or n not in want or got[n].shape != want[n].shape
           or not np.array_equal(got[n].view(np.uint32), want[n].astype(np.float32).view(np.uint32))]
    check(not bad and names, "%s: %d tensors bitwise equal%s" % (what, len(names), (", differ: %s" % bad[:4]) if bad else ""))


def llamacpp_ids(path, texts):
    from llama_cpp import Llama
    m = Llama(model_path=path, vocab_only=True, verbose=False)
    return [m.tokenize(t.encode("utf-8"), add_bos=False, special=True) for t in texts]


def rebuilt_ids(hf_dir, texts):
    """The `tokenizers` library's ids of each text with the tokenizer.json the import rebuilt and carried (the
    export of the imported checkpoint writes the carried files into hf_dir)."""
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(hf_dir, "tokenizer.json"))
    return [tok.encode(t, add_special_tokens=False).ids for t in texts]


# llama.cpp's name of the byte-level pre-tokenizer a published model of the kind has; the converter finds it by
# hashing the tokenizer's output on its check text, which a vocabulary trained for the tests does not match.
PRE = {"llama3": "llama-bpe", "qwen2": "qwen2"}


def convert(convert_py, d, outtype, path, pre):
    """convert_hf_to_gguf.py d --outtype outtype --outfile path, its pre-tokenizer name answered with pre."""
    run([sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_convert.py"), convert_py,
         pre or "-", d, "--outtype", outtype, "--outfile", path],
        "convert_hf_to_gguf.py " + outtype)


def exported_tokenizer(a, d, tok, texts, work, family):
    """The export side: the HF directory imported and exported with `export --format gguf`; llama.cpp's tokenizer
    on that file = the `tokenizers` library's on the original tokenizer.json, texts that NFC changes left out
    (and counted) when the tokenizer normalizes with NFC (Qwen's): llama.cpp applies no normalization."""
    ck, out = os.path.join(work, "ck_hf"), os.path.join(work, "export.gguf")
    run([a.bin, "import", d, "--out", ck], "import of the HF directory")
    run([a.bin, "export", ck, "--format", "gguf", "--out", out], "export --format gguf")
    keep = texts
    if type(tok.normalizer).__name__ == "NFC":
        keep = [t for t in texts if unicodedata.normalize("NFC", t) == t]
        print("%s: %d texts change under NFC, which llama.cpp does not apply: left out" % (family, len(texts) - len(keep)))
    want = [tok.encode(t, add_special_tokens=False).ids for t in keep]
    got = llamacpp_ids(out, keep)
    same = sum(g == w for g, w in zip(got, want))
    check(same == len(keep) and keep, "%s: llama.cpp on the exported GGUF = tokenizers' ids on %d/%d texts"
          % (family, same, len(keep)))
    return out


def quantize(src, dst, ftype):
    import llama_cpp
    p = llama_cpp.llama_model_quantize_default_params()
    p.ftype, p.pure = ftype, True
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(p))
    return rc == 0


def check_family(a, family, tp):
    work = os.path.join(a.work, family)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    # Phi-3's converter reads a tokenizer.model, or with tokenizer_class GPT2Tokenizer a byte-level BPE (Phi-4's)
    kind = "qwen2" if family == "phi3" else fr.TOKENIZER[family]
    d, tok = tb.save(kind, tb.BUILDERS[kind](), work)
    if family == "phi3":
        tcp = os.path.join(d, "tokenizer_config.json")
        json.dump(dict(json.load(open(tcp)), tokenizer_class="GPT2Tokenizer"), open(tcp, "w"))
    cfg = fr.tiny_config(a.src, family)
    cfg["vocab_size"] = tok.get_vocab_size(with_added_tokens=True)
    cfg["max_position_embeddings"] = 128
    model = fr.make_model(cfg, family)
    model.save_pretrained(d, safe_serialization=True)
    orig = {k: v.float().numpy() for k, v in model.state_dict().items()}
    if cfg.get("tie_word_embeddings"):
        orig.pop("lm_head.weight", None)
    toks = fr.write_tokens(os.path.join(work, "val.bin"), cfg["vocab_size"], 4096, 7)
    fr.write_tokens(os.path.join(work, "train.bin"), cfg["vocab_size"], 8192, 8)
    want = fr.ref_loss(model, toks)
    g32, g8 = os.path.join(work, "f32.gguf"), os.path.join(work, "q8_0.gguf")
    for path, t in ((g32, "f32"), (g8, "q8_0")):
        convert(a.convert, d, t, path, PRE.get(kind))
    ck32 = os.path.join(work, "ck_f32")
    run([a.bin, "import", g32, "--out", ck32] + (["--tp", tp] if tp > 1 else []), "import f32")
    same_tensors(imported_tensors(a, ck32, work, "f32"), orig, "%s f32: imported = the HF directory's" % family)
    evalc = [a.bin, "eval", "--data", os.path.join(work, "val.bin"), "--batches", fr.BATCHES, "--batch", fr.BATCH,
             "--seq-len", fr.SEQ, "--json", "--checkpoint"]
    l32 = eval_loss(evalc + [ck32], "eval f32")
    check(abs(l32 - want) <= 1e-5 * abs(want), "%s f32: eval loss %.8f = transformers' %.8f" % (family, l32, want))
    texts = tb.case_texts(kind)
    got, ref = rebuilt_ids(os.path.join(work, "back_f32"), texts), llamacpp_ids(g32, texts)
    same = sum(g == r for g, r in zip(got, ref))
    if kind == "llama2":   # docs/GGUF_TOKENIZER.md: the converter scores every token of a tokenizer.json-only
        print("%s: (the converter's file scores every token -1000: llama.cpp's ids on it equal the rebuilt "
              "tokenizer's on %d/%d texts; the check is on meshpoint's export below)" % (family, same, len(texts)))
    else:
        check(same == len(texts), "%s: the rebuilt tokenizer's ids = llama.cpp's on %d/%d texts" % (family, same, len(texts)))
    exported = exported_tokenizer(a, d, tok, texts, work, family)
    ckx = os.path.join(work, "ck_export")   # and back: the import of meshpoint's own export
    run([a.bin, "import", exported, "--out", ckx], "import of the export")
    imported_tensors(a, ckx, work, "export")
    got, ref = rebuilt_ids(os.path.join(work, "back_export"), texts), llamacpp_ids(exported, texts)
    same = sum(g == r for g, r in zip(got, ref))
    check(same == len(texts), "%s: import of the export: the rebuilt tokenizer's ids = llama.cpp's on %d/%d texts"
          % (family, same, len(texts)))
    # q8_0
    ck8 = os.path.join(work, "ck_q8")
    mesh = ["--tp", tp, "--dp", 2] if tp > 1 else []   # tp splits o_proj/down_proj by columns: partial blocks
    run([a.bin, "import", g8, "--out", ck8] + mesh, "import q8_0")
    deq = gguf_as_hf(g8, cfg, family)
    same_tensors(imported_tensors(a, ck8, work, "q8"), deq, "%s q8_0: imported = gguf.quants.dequantize" % family)
    l8 = eval_loss(evalc + [ck8], "eval q8_0")
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in deq.items()}, strict=False)
    want8 = fr.ref_loss(model, toks)   # transformers on the dequantized weights: what q8_0's error makes of the loss
    check(abs(l8 - want8) <= 1e-5 * abs(want8), "%s q8_0: eval loss %.8f = transformers' on gguf's dequantized "
          "weights %.8f" % (family, l8, want8))
    check(abs(l8 - l32) <= 0.01 * l32, "%s q8_0: loss %.6f within 1%% of f32's %.6f" % (family, l8, l32))
    for ftype, t in ((2, "q4_0"), (3, "q4_1")):
        gq = os.path.join(work, t + ".gguf")
        if not quantize(g32, gq, ftype):
            check(False, "%s: llama.cpp's quantizer wrote %s" % (family, t))
            continue
        ckq = os.path.join(work, "ck_" + t)
        run([a.bin, "import", gq, "--out", ckq] + mesh, "import " + t)
        same_tensors(imported_tensors(a, ckq, work, t), gguf_as_hf(gq, cfg, family),
                     "%s %s: imported = gguf.quants.dequantize" % (family, t))
    # fine-tune a few steps from the import (the HF config.json given too: train refuses a checkpoint whose
    # model differs, so this also holds the config the metadata gave to the original)
    ft, conf = os.path.join(work, "ft"), os.path.join(d, "config.json")
    if family == "mistral":   # GGUF's llama architecture is Llama and Mistral alike: the import is a llama model
        conf = os.path.join(work, "as_llama.json")
        json.dump(dict(json.load(open(os.path.join(d, "config.json"))), model_type="llama",
                       architectures=["LlamaForCausalLM"]), open(conf, "w"))
    run([a.bin, "train", "--config", conf, "--train-data", os.path.join(work, "train.bin"),
         "--init-from", ck32, "--batch", 2, "--seq-len", fr.SEQ, "--log-every", 0, "--run-dir", ft, "--steps", 3],
        "train --init-from")
    losses = fr.losses(ft)
    check(len(losses) == 3 and all(np.isfinite(losses)), "%s: train --init-from of the import: losses %s" % (family, losses))


def refusals(a):
    work = os.path.join(a.work, "refuse")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = os.path.join(a.work, "llama", "f32.gguf")
    r = gguf.GGUFReader(src)
    for what, arch, retype in (("architecture", "gemma", None), ("type", None, "token_embd.weight")):
        dst = os.path.join(work, what + ".gguf")
        w = gguf.GGUFWriter(dst, arch or r.fields["general.architecture"].contents())
        for k, f in r.fields.items():
            if k.startswith("GGUF.") or k == "general.architecture":
                continue
            key = k.replace("llama.", "gemma.") if arch else k
            if f.types[0] == gguf.GGUFValueType.ARRAY:
                w.add_array(key, f.contents())
            else:
                w.add_key_value(key, f.contents(), f.types[0])
        for t in r.tensors:
            data = t.data
            if t.name == retype:   # as Q5_0 blocks: 22 bytes per 32 elements
                data = np.zeros((data.shape[0], data.shape[1] // 32 * 22), dtype=np.uint8)
                w.add_tensor(t.name, data, raw_shape=list(data.shape), raw_dtype=gguf.GGMLQuantizationType.Q5_0)
            else:
                w.add_tensor(t.name, data, raw_shape=list(data.shape), raw_dtype=t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        out = run([a.bin, "import", dst, "--out", os.path.join(work, "ck_" + what)], "import refused", rc=2)
        named = "gemma" in out if arch else ("token_embd.weight" in out and "Q5_0" in out)
        check(named and not os.path.exists(os.path.join(work, "ck_" + what)),
              "refused naming the %s, nothing written: %s" % (what, out.strip().splitlines()[-1][:160]))


class Args:
    pass


def main():
    a = Args()
    a.bin, a.src, a.work, a.convert = sys.argv[1:5]
    families = sys.argv[5].split(",") if len(sys.argv) > 5 else ["llama", "mistral", "qwen2", "qwen3", "phi3"]
    os.makedirs(a.work, exist_ok=True)
    for i, fam in enumerate(families):
        check_family(a, fam, 2 if i == 0 else 1)
    if "llama" in families:
        refusals(a)
    if failures:
        sys.exit("FAIL: %d checks: %s" % (len(failures), failures))
    print("all gguf import checks passed")


if __name__ == "__main__":
    main()
