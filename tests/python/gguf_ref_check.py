"""tests/python/gguf_ref_check.py GGUF_REF WORKDIR CONVERT_PY — tests/python/gguf_ref.py (the llama.cpp oracle driver
the GGUF export tests use) held against transformers on a model from outside the project: a tiny random Llama (f32,
the llama2 sentencepiece tokenizer of tokenizer_build.py) saved by transformers, converted by llama.cpp's own
convert_hf_to_gguf.py --outtype f32. Checks, in scripts/llamacpp_venv.sh's venv:
  logits    every position's logits of a prompt = transformers' (within 1e-4 of the row's largest magnitude)
  greedy    32 greedy steps = transformers' greedy continuation
  ppl       the mean loss over a token file (uint16, magic 20240520; windows of CTX) = transformers' on the same
            windows (1e-4 relative)
  tokenize  the ids of a text file detokenize (llama.cpp) to the text, and --bos puts the BOS id first
  refusals  a missing .gguf, ids that are not integers, a file that is not a token file: exit 2 naming it
Exit 1 on any difference.
"""
import json
import os
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402

CTX = 16


def make_model(root):
    """An HF directory: a 2-layer random LlamaForCausalLM (transformers) with the llama2 test tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM
    d, tok = tb.save("llama2", tb.BUILDERS["llama2"](), root)
    cfg = LlamaConfig(vocab_size=tok.get_vocab_size(with_added_tokens=True), hidden_size=32, intermediate_size=64,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                      rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=False, bos_token_id=1,
                      eos_token_id=2)
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    model.save_pretrained(d, safe_serialization=True)
    return d, model


def ref(gguf_ref, *args, expect_rc=0):
    res = subprocess.run([sys.executable, gguf_ref] + [str(a) for a in args], capture_output=True, text=True)
    if res.returncode != expect_rc:
        sys.exit("FAIL: gguf_ref.py %s exited %d (wanted %d): %s" % (" ".join(map(str, args)), res.returncode,
                                                                       expect_rc, res.stderr[-2000:]))
    return json.loads(res.stdout) if expect_rc == 0 else res.stderr


def main():
    import torch
    gguf_ref, root, convert_py = sys.argv[1], sys.argv[2], sys.argv[3]
    os.makedirs(root, exist_ok=True)
    d, model = make_model(root)
    path = os.path.join(root, "tiny-f32.gguf")
    subprocess.run([sys.executable, convert_py, d, "--outtype", "f32", "--outfile", path], check=True,
                   capture_output=True)
    bad = 0
    ids = [1, 400, 17, 311, 92, 250, 8, 77, 460, 5]
    got = np.array(ref(gguf_ref, "logits", path, ",".join(map(str, ids)))["logits"])
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits[0].double().numpy()
    err = np.abs(got - want).max(axis=1) / np.abs(want).max(axis=1)
    print("logits: %d positions x %d, worst relative difference %.2e" % (got.shape[0], got.shape[1], err.max()))
    bad += int(got.shape != want.shape or err.max() > 1e-4)
    steps = ref(gguf_ref, "greedy", path, ",".join(map(str, ids)), 32)["tokens"]
    with torch.no_grad():
        gen = model.generate(torch.tensor([ids]), max_new_tokens=32, do_sample=False, min_new_tokens=32)[0, len(ids):]
    same = sum(int(a == b) for a, b in zip(steps, gen.tolist()))
    print("greedy: %d of 32 steps = transformers'" % same)
    bad += int(same != 32)
    toks = np.random.default_rng(1).integers(3, model.config.vocab_size, size=3 * CTX + 5)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, len(toks)
    tpath = os.path.join(root, "tokens.bin")
    with open(tpath, "wb") as f:
        f.write(header.tobytes() + toks.astype(np.uint16).tobytes())
    p = ref(gguf_ref, "ppl", path, tpath, CTX)
    nll, n = 0.0, 0
    with torch.no_grad():
        for s in range(0, len(toks) - 1, CTX):
            win = torch.tensor([toks[s:s + CTX].tolist()])
            if win.shape[1] < 2:
                break
            lp = torch.log_softmax(model(win).logits[0].double(), dim=-1)
            nll -= float(lp[torch.arange(win.shape[1] - 1), win[0, 1:]].sum())
            n += win.shape[1] - 1
    print("ppl: loss %.6f over %d tokens, transformers %.6f over %d" % (p["loss"], p["tokens"], nll / n, n))
    bad += int(p["tokens"] != n or abs(p["loss"] - nll / n) > 1e-4 * abs(nll / n))
    text = "Hello world, the quick brown fox."
    with open(os.path.join(root, "text.txt"), "w") as f:
        f.write(text)
    import llama_cpp
    llm = llama_cpp.Llama(model_path=path, vocab_only=True, verbose=False)
    tids = ref(gguf_ref, "tokenize", path, os.path.join(root, "text.txt"))["ids"]
    bids = ref(gguf_ref, "tokenize", path, os.path.join(root, "text.txt"), "--bos")["ids"]
    back = llm.detokenize(tids).decode()
    print("tokenize: %d ids, detokenized %r, with --bos %s..." % (len(tids), back, bids[:2]))
    bad += int(back.strip() != text or bids != [1] + tids)
    for args, name in ((("logits", os.path.join(root, "missing.gguf"), "1,2"), "missing.gguf"),
                       (("logits", path, "1,x"), "1,x"), (("ppl", path, os.path.join(root, "text.txt")), "text.txt")):
        msg = ref(gguf_ref, *args, expect_rc=2)
        if name not in msg:
            bad += 1
            print("FAIL: gguf_ref.py %s: the message does not name %s: %s" % (" ".join(args), name, msg[:300]))
    print("refusals: exit 2 naming the input" if not bad else "%d differences" % bad)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
