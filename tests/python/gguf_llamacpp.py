"""tests/python/gguf_llamacpp.py — llama.cpp itself (llama-cpp-python, scripts/llamacpp_venv.sh) as the oracle
of `meshpoint export --format gguf`.

For a small model of each family (llama with GQA and llama3 rope, mistral with linear rope, qwen2 with
biases, qwen3 with an explicit head_dim and tied embeddings, phi3 fused; initialised by `meshpoint init`
with initializer_range 0.1, so that the logits spread and greedy choices are not near-ties):
  1. the f32 export's logits of a 24-token prompt, computed by llama.cpp, are within 1e-4 (relative, of
     the largest) of meshpoint's own (tests/tool_hf_logits.c: llama_forward on the checkpoint);
  2. 32 greedy steps from a prompt: llama.cpp on the f32 export gives the tokens `meshpoint sample --ids
     --temperature 0` gives;
  3. the q8_0 export: its greedy choice at each step of the f32 sequence agrees with f32's on at least 3/4
     of the steps, and its perplexity of a 64-token held-out sequence (4 other random ids and the f32
     model's greedy continuation: text the model predicts, as a trained model's corpus is; an untrained
     model's perplexity of random ids is dominated by noise) is within 1% of the f32 export's.
The tokenizer metadata is not meshpoint's yet (gguf_put_tokenizer, cli/cmd_export.c): the test adds a
placeholder vocabulary (`tokenizer.ggml.model` gpt2, one token per id, one merge) with gguf-py, copying
every key and tensor of meshpoint's file unchanged, so that llama.cpp loads it; prompts are token ids.

Usage: python gguf_llamacpp.py MESHPOINT TOOL_HF_LOGITS WORKDIR
"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import gguf
from llama_cpp import Llama

BIN, LOGITS_TOOL, WORK = sys.argv[1], sys.argv[2], sys.argv[3]
TRAIN = {"batch_size": 4, "seq_len": 16, "lr": 1e-3, "warmup_steps": 1}
BASE = {"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
        "initializer_range": 0.1}
FAMILIES = {
    "llama": {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}},
    "mistral": {"model_type": "mistral", "sliding_window": None, "rope_scaling": {"rope_type": "linear", "factor": 2.0}},
    "qwen2": {"model_type": "qwen2", "rope_theta": 1000000.0},
    "qwen3": {"model_type": "qwen3", "head_dim": 64, "tie_word_embeddings": True},
    "phi3": {"model_type": "phi3", "num_key_value_heads": 4, "sliding_window": None, "pad_token_id": None},
}
PROMPT_T, STEPS = 24, 32


def run(*args):
    p = subprocess.run(list(args), capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"FAIL: {' '.join(args)}: exit {p.returncode}\n{p.stderr}")
    return p.stdout


def with_vocab(src, dst, n_vocab):
    """A copy of GGUF src with a placeholder gpt2 vocabulary (every key and tensor of src unchanged)."""
    r = gguf.GGUFReader(src)
    arch = r.fields["general.architecture"].contents()
    w = gguf.GGUFWriter(dst, arch)
    for k, f in r.fields.items():
        if k.startswith("GGUF.") or k == "general.architecture":
            continue
        t = f.types[0]
        if t == gguf.GGUFValueType.ARRAY:
            w.add_array(k, f.contents())
        else:
            w.add_key_value(k, f.contents(), t)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([f"<{i}>" for i in range(n_vocab)])
    w.add_token_types([gguf.TokenType.NORMAL] * n_vocab)
    w.add_token_merges(["<0> <1>"])   # llama.cpp requires the key for gpt2; an empty array is not written
    for t in r.tensors:
        w.add_tensor(t.name, t.data, raw_shape=list(t.data.shape), raw_dtype=t.tensor_type)   # bytes per row when quantized
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llm(path):
    # f32 K/V cache (the default f16 one rounds K and V: ~1e-3 of the logits)
    return Llama(model_path=path, n_ctx=128, n_batch=128, logits_all=True, verbose=False, n_threads=2, seed=0,
                 type_k=0, type_v=0, flash_attn=False)


def greedy(m, prompt, steps):
    m.reset()
    m.eval(prompt)
    out = []
    for _ in range(steps):
        tok = int(np.argmax(m.scores[m.n_tokens - 1]))
        out.append(tok)
        m.eval([tok])
    return out


def perplexity(m, ids):
    m.reset()
    m.eval(ids)
    lg = np.asarray(m.scores[: len(ids) - 1], dtype=np.float64)
    lg -= lg.max(axis=1, keepdims=True)
    lp = lg - np.log(np.exp(lg).sum(axis=1, keepdims=True))
    return float(np.exp(-lp[np.arange(len(ids) - 1), ids[1:]].mean()))


def check_family(family, extra):
    cfg = {**BASE, **extra}
    d = os.path.join(WORK, family)
    os.makedirs(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({**cfg, "train": TRAIN}, f)
    ck = os.path.join(d, "ck")
    run(BIN, "init", "--config", os.path.join(d, "config.json"), "--tp", "1", "--dp", "1", "--out", ck)
    files = {}
    for dt in ("f32", "q8_0"):
        raw = os.path.join(d, f"raw_{dt}.gguf")
        run(BIN, "export", ck, "--format", "gguf", "--dtype", dt, "--out", raw)
        files[dt] = os.path.join(d, f"{dt}.gguf")
        with_vocab(raw, files[dt], cfg["vocab_size"])
    # 1. logits of a prompt
    run(LOGITS_TOOL, ck, os.path.join(d, "logits"), "7", "1", str(PROMPT_T))
    ids = np.fromfile(os.path.join(d, "logits", "inputs.i32"), dtype=np.int32).tolist()
    ref = np.fromfile(os.path.join(d, "logits", "logits.f32"), dtype=np.float32).reshape(PROMPT_T, -1)
    m32 = llm(files["f32"])
    m32.eval(ids)
    got = np.asarray(m32.scores[:PROMPT_T], dtype=np.float32)
    rel = float(np.abs(got - ref).max() / np.abs(ref).max())
    assert rel <= 1e-4, f"{family}: llama.cpp's logits differ from meshpoint's by {rel:.2e} of the max"
    # 2. greedy tokens
    prompt = ids[:8]
    out = run(BIN, "sample", "--checkpoint", ck, "--ids", "--prompt", " ".join(map(str, prompt)), "--temperature", "0",
              "--tokens", str(STEPS), "--ignore-eos")
    mine = [int(x) for x in out.split()][len(prompt):]
    theirs = greedy(m32, prompt, STEPS)
    assert mine == theirs, f"{family}: greedy tokens differ:\n meshpoint {mine}\n llama.cpp {theirs}"
    # 3. q8_0
    mq = llm(files["q8_0"])   # its greedy choice at each step of f32's sequence (one early flip would
    mq.eval(prompt + theirs)   # otherwise change every later step)
    q = [int(np.argmax(mq.scores[len(prompt) - 1 + k])) for k in range(STEPS)]
    agree = sum(a == b for a, b in zip(q, theirs))
    assert agree * 4 >= STEPS * 3, f"{family}: q8_0 greedy agrees on {agree}/{STEPS} steps"
    start = np.random.default_rng(11).integers(0, cfg["vocab_size"], 4).tolist()
    held = start + greedy(m32, start, 60)   # text the model predicts (an untrained model's random ids are noise)
    p32, p8 = perplexity(m32, held), perplexity(mq, held)
    assert abs(p8 / p32 - 1) <= 0.01, f"{family}: q8_0 perplexity {p8:.4f} vs f32 {p32:.4f}"
    print(f"ok: {family}: logits within {rel:.1e} of the max, {STEPS} greedy tokens equal; q8_0 agrees on "
          f"{agree}/{STEPS}, perplexity {p8:.3f} vs {p32:.3f}")


def main():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(WORK)
    for family, extra in FAMILIES.items():
        check_family(family, extra)


if __name__ == "__main__":
    main()
