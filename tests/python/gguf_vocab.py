"""tests/python/gguf_vocab.py TOOL WORKDIR [KIND...] — tokenizer/tok_gguf.h held against llama.cpp itself, in the venv
scripts/llamacpp_venv.sh makes (llama_cpp, gguf, and over the bench venv torch + transformers + tokenizers). For each
tokenizer tokenizer_build.py makes that GGUF can hold (gpt2, llama3, qwen2 byte-level; llama2, openllama
sentencepiece):

 1. converter: llama.cpp's own convert_hf_to_gguf.py --vocab-only on a tiny HF model directory with that tokenizer;
    every tokenizer.* key it writes equals TOOL from-json's (tokens, token types, merges, special ids, add_* flags,
    chat template), bit for bit, with two stated exceptions: `.pre` (the converter names a byte-level pre-tokenizer
    by hashing the ids of a fixed text against published models, so a trained vocabulary has no entry: it runs with
    that lookup answering "UNNAMED", and the name is held by step 2 instead) and the sentencepiece scores (the
    converter writes -1000 for every token of a tokenizer.json-only model; ours are merge ranks: step 2 shows
    llama.cpp then gives `tokenizers`' ids, and that the converter's own file does not), and for those the unk token's
    type (ours UNKNOWN, as the converter's tokenizer.model path writes it; its tokenizer.json path: NORMAL).
 2. llama.cpp's tokenizer (Llama(vocab_only=True).tokenize, special tokens parsed) on a GGUF holding from-json's keys
    gives `tokenizers`' ids (encode(x, add_special_tokens=False) on the original tokenizer.json) for the tokenizer
    tests' corpus (tokenizer_build.case_texts, invalid UTF-8 read as U+FFFD).
 3. TOOL to-json on those keys: `tokenizers` on the rebuilt tokenizer.json gives llama.cpp's ids on the same corpus,
    and the rebuilt file adds BOS as llama.cpp does (add_bos).
Exit 1 on any difference.
"""
import json
import os
import runpy
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402

KINDS = ["gpt2", "llama3", "qwen2", "llama2", "openllama"]
ARCH = {"qwen2": ("qwen2", "Qwen2ForCausalLM")}
UNNAMED = "UNNAMED"


def tiny_model_dir(kind, root):
    """tokenizer_build's tokenizer files plus a 1-layer model (config.json, model.safetensors) of its vocabulary."""
    import torch
    from safetensors.torch import save_file
    d, tok = tb.save(kind, tb.BUILDERS[kind](), root)
    model_type, archname = ARCH.get(kind, ("llama", "LlamaForCausalLM"))
    V, H, F = tok.get_vocab_size(with_added_tokens=True), 16, 32
    cfg = {"architectures": [archname], "model_type": model_type, "vocab_size": V, "hidden_size": H,
           "intermediate_size": F, "num_hidden_layers": 1, "num_attention_heads": 2, "num_key_value_heads": 2,
           "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
           "torch_dtype": "float32"}
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    g = torch.Generator().manual_seed(0)
    w = lambda *s: torch.randn(*s, generator=g) * 0.02  # noqa: E731
    t = {"model.embed_tokens.weight": w(V, H), "lm_head.weight": w(V, H), "model.norm.weight": torch.ones(H),
         "model.layers.0.input_layernorm.weight": torch.ones(H),
         "model.layers.0.post_attention_layernorm.weight": torch.ones(H)}
    for p in ("q", "k", "v", "o"):
        t["model.layers.0.self_attn.%s_proj.weight" % p] = w(H, H)
    if model_type == "qwen2":
        for p in ("q", "k", "v"):
            t["model.layers.0.self_attn.%s_proj.bias" % p] = torch.zeros(H)
    for p, s in (("gate", (F, H)), ("up", (F, H)), ("down", (H, F))):
        t["model.layers.0.mlp.%s_proj.weight" % p] = w(*s)
    save_file(t, os.path.join(d, "model.safetensors"))
    return d, tok


def run_converter(convert_py, d, out):
    """convert_hf_to_gguf.py --vocab-only, in this process, its pre-name hash lookup answering UNNAMED."""
    conv_dir = os.path.dirname(convert_py)
    sys.path.insert(0, conv_dir)
    sys.path.insert(0, os.path.join(conv_dir, "gguf-py"))
    import conversion.base as cb
    cb.TextModel.get_vocab_base_pre = lambda self, tokenizer: UNNAMED
    argv = sys.argv
    sys.argv = [convert_py, d, "--vocab-only", "--outtype", "f32", "--outfile", out]
    try:
        runpy.run_path(convert_py, run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise
    finally:
        sys.argv = argv


def gguf_keys(path):
    """tokenizer.* keys of a GGUF file, as Python values (arrays as lists)."""
    import gguf
    r = gguf.GGUFReader(path)
    return {k: f.contents() for k, f in r.fields.items() if k.startswith("tokenizer.")}


KEY_OF = {"model": "tokenizer.ggml.model", "pre": "tokenizer.ggml.pre", "tokens": "tokenizer.ggml.tokens",
          "token_type": "tokenizer.ggml.token_type", "scores": "tokenizer.ggml.scores",
          "merges": "tokenizer.ggml.merges", "bos": "tokenizer.ggml.bos_token_id",
          "eos": "tokenizer.ggml.eos_token_id", "unk": "tokenizer.ggml.unknown_token_id",
          "sep": "tokenizer.ggml.seperator_token_id", "pad": "tokenizer.ggml.padding_token_id",
          "cls": "tokenizer.ggml.cls_token_id", "mask": "tokenizer.ggml.mask_token_id",
          "add_bos": "tokenizer.ggml.add_bos_token", "add_eos": "tokenizer.ggml.add_eos_token",
          "add_sep": "tokenizer.ggml.add_sep_token", "add_space_prefix": "tokenizer.ggml.add_space_prefix",
          "chat_template": "tokenizer.chat_template"}


def as_keys(meta):
    """from-json's object as GGUF keys (scores as float32, the GGUF type)."""
    out = {}
    for k, v in meta.items():
        if k == "scores":
            v = [float(x) for x in np.array(v, dtype=np.float32)]
        out[KEY_OF[k]] = v
    return out


def compare_converter(kind, conv, ours):
    bad = 0
    conv = dict(conv)
    ours = dict(ours)
    if conv.get("tokenizer.ggml.pre") == UNNAMED:
        conv.pop("tokenizer.ggml.pre")
        print("%s: .pre: ours %r (the converter has no hash entry for a trained vocabulary)" %
              (kind, ours.pop("tokenizer.ggml.pre")))
    if ours.get("tokenizer.ggml.model") == "llama":
        cs = conv.pop("tokenizer.ggml.scores", None)
        ours.pop("tokenizer.ggml.scores", None)
        if cs is None or any(s != -1000.0 for s in cs):
            bad += 1
            print("FAIL %s: the converter's scores are not all -1000 (the stated difference has changed)" % kind)
        unk = ours.get("tokenizer.ggml.unknown_token_id", 0)
        ct, ot = list(conv.get("tokenizer.ggml.token_type", [])), list(ours.get("tokenizer.ggml.token_type", []))
        if len(ct) > unk and len(ot) > unk and ot[unk] == 2 and ct[unk] in (1, 3):
            print("%s: token_type[%d] (the unk token): ours UNKNOWN, the converter's %d (stated difference)" %
                  (kind, unk, ct[unk]))
            ct[unk] = 2
            conv["tokenizer.ggml.token_type"] = ct
    for k in sorted(set(conv) | set(ours)):
        if conv.get(k) != ours.get(k):
            bad += 1
            cv, ov = conv.get(k), ours.get(k)
            if isinstance(cv, list) and isinstance(ov, list):
                diff = [i for i in range(min(len(cv), len(ov))) if cv[i] != ov[i]][:5]
                print("FAIL %s %s: lengths %d/%d, first differences at %s: converter %s ours %s" %
                      (kind, k, len(cv), len(ov), diff, [cv[i] for i in diff], [ov[i] for i in diff]))
            else:
                print("FAIL %s %s: converter %r, ours %r" % (kind, k, cv, ov))
    print("%s: converter keys %s" % (kind, "identical" if not bad else "%d differences" % bad))
    return bad


def write_vocab_gguf(path, meta):
    """A vocabulary-only GGUF (llama architecture hparams of a tiny model) holding from-json's keys."""
    import gguf
    w = gguf.GGUFWriter(path, "llama")
    w.add_context_length(64)
    w.add_embedding_length(16)
    w.add_block_count(1)
    w.add_feed_forward_length(32)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model(meta["model"])
    w.add_tokenizer_pre(meta["pre"])
    w.add_token_list(meta["tokens"])
    w.add_token_types(meta["token_type"])
    if "scores" in meta:
        w.add_token_scores(meta["scores"])
    if "merges" in meta:
        w.add_token_merges(meta["merges"])
    for k in ("bos", "eos", "unk", "sep", "pad", "cls", "mask"):
        if k in meta:
            getattr(w, "add_%s_token_id" % k)(meta[k])
    for k in ("add_bos", "add_eos", "add_sep", "add_space_prefix"):
        if k in meta:
            getattr(w, "add_%s" % (k if k == "add_space_prefix" else "add_%s_token" % k[4:]))(meta[k])
    if "chat_template" in meta:
        w.add_chat_template(meta["chat_template"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def corpus(kind):
    texts = tb.case_texts(kind) + [b.decode("utf-8", "replace") for b in tb.INVALID_UTF8]
    return [t for t in texts if t]   # (llama.cpp's tokenize of "" is [], as tokenizers'; nothing to compare)


def llama_ids(path, texts):
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    out = [list(llm.tokenize(t.encode(), add_bos=False, special=True)) for t in texts]
    with_bos = list(llm.tokenize(b"x", add_bos=True, special=True))
    return out, with_bos, llm


def compare_ids(kind, what, texts, want, got):
    bad = 0
    for t, a, b in zip(texts, want, got):
        if a != b:
            bad += 1
            if bad <= 5:
                print("FAIL %s %s %r:\n  tokenizers %s\n  llama.cpp  %s" % (kind, what, t, a, b))
    print("%s: %s: %d texts, %s" % (kind, what, len(texts), "identical" if not bad else "%d differences" % bad))
    return bad


def check(kind, tool, convert_py, root):
    from tokenizers import Tokenizer
    d, tok = tiny_model_dir(kind, root)
    res = subprocess.run([tool, "from-json", d], capture_output=True, text=True)
    if res.returncode:
        print("FAIL %s: from-json exited %d: %s" % (kind, res.returncode, res.stderr))
        return 1
    meta = json.loads(res.stdout)
    conv_path = os.path.join(root, kind + ".converter.gguf")
    run_converter(convert_py, d, conv_path)
    bad = compare_converter(kind, gguf_keys(conv_path), as_keys(meta))
    ours_path = os.path.join(root, kind + ".ours.gguf")
    write_vocab_gguf(ours_path, meta)
    texts = corpus(kind)
    want = [tok.encode(t, add_special_tokens=False).ids for t in texts]
    got, with_bos, llm = llama_ids(ours_path, texts)
    # An added token with normalized=true (OpenLLaMA's <s>) is matched by `tokenizers` in the normalized text
    # ("▁<s>"), by llama.cpp in the raw text: the texts holding one are left out of this comparison, and say so.
    normed = [a["content"] for a in json.load(open(os.path.join(d, "tokenizer.json")))["added_tokens"] if a["normalized"]]
    keep = [i for i, t in enumerate(texts) if not any(c in t for c in normed)]
    if len(keep) < len(texts):
        print("%s: %d texts hold a normalized=true added token %s: left out of the next comparison" %
              (kind, len(texts) - len(keep), normed))
    # llama.cpp applies no Unicode normalization (Qwen's NFC): texts that NFC changes are left out, and counted.
    if type(tok.normalizer).__name__ == "NFC":
        nfc = [i for i in keep if tok.normalizer.normalize_str(texts[i]) == texts[i]]
        print("%s: %d texts change under NFC, which llama.cpp does not apply: left out of the next comparison" %
              (kind, len(keep) - len(nfc)))
        keep = nfc
    bad += compare_ids(kind, "llama.cpp on from-json's keys vs tokenizers", [texts[i] for i in keep],
                       [want[i] for i in keep], [got[i] for i in keep])
    if meta["model"] == "llama":   # the stated difference: the converter's own scores give other ids
        conv_got, _, _ = llama_ids(conv_path, texts)
        print("%s: (llama.cpp on the converter's file: %d of %d texts differ from tokenizers)" %
              (kind, sum(a != b for a, b in zip(want, conv_got)), len(texts)))
    meta_path = os.path.join(root, kind + ".meta.json")
    with open(meta_path, "w") as f:
        json.dump(meta, f)
    rebuilt = os.path.join(root, kind + ".rebuilt")
    os.makedirs(rebuilt, exist_ok=True)
    res = subprocess.run([tool, "to-json", meta_path, rebuilt], capture_output=True, text=True)
    if res.returncode:
        print("FAIL %s: to-json exited %d: %s" % (kind, res.returncode, res.stderr))
        return bad + 1
    rt = Tokenizer.from_file(os.path.join(rebuilt, "tokenizer.json"))
    bad += compare_ids(kind, "tokenizers on to-json's file vs llama.cpp", texts,
                       [rt.encode(t, add_special_tokens=False).ids for t in texts], got)
    if rt.encode("x", add_special_tokens=True).ids != with_bos:
        bad += 1
        print("FAIL %s: rebuilt template %s, llama.cpp with add_bos %s" %
              (kind, rt.encode("x", add_special_tokens=True).ids, with_bos))
    return bad


def main():
    tool, root, convert_py = sys.argv[1], sys.argv[2], sys.argv[3]
    kinds = sys.argv[4:] or KINDS
    os.makedirs(root, exist_ok=True)
    bad = sum(check(k, tool, convert_py, root) for k in kinds)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
