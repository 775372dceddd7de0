"""tests/python/gguf_ref.py — llama.cpp itself (llama_cpp, built by scripts/llamacpp_venv.sh from the llama-cpp-python
sdist) as the oracle for GGUF files: what the GGUF tests compare meshpoint's export and import against. Runs in that
venv; prints one JSON object on stdout.

  gguf_ref.py logits   MODEL.gguf IDS      the logits of every position of the prompt IDS (comma-separated ids):
                                           {"n_vocab", "logits": [[...] per position]} (the last row is the next token's)
  gguf_ref.py greedy   MODEL.gguf IDS [N]  N (default 32) greedy steps after IDS: {"tokens": [...]}
  gguf_ref.py ppl      MODEL.gguf TOKENS [CTX]  mean loss and perplexity over a meshpoint token file (magic
                                           20240520 uint16 or 20240801 uint32), in windows of CTX (default 256)
                                           tokens, each predicting its tokens 1..CTX-1: {"tokens", "loss", "ppl"}
  gguf_ref.py tokenize MODEL.gguf TEXTFILE [--bos]   llama.cpp's ids of the file's text (special tokens in the text
                                           parsed as tokens, as `tokenizers`' encode does; BOS only with --bos):
                                           {"ids": [...]}; a .gguf holding only a vocabulary is enough
  gguf_ref.py meta     MODEL.gguf          every key of the file but the token arrays' contents, by the `gguf` reader

Threads: 1 unless OMP_NUM_THREADS says more (reproducible sums). The KV cache is f32 (llama.cpp's default f16 would
round K and V), flash attention off. Exit 2 on a usage error or an unreadable input.
"""
import json
import os
import sys

import numpy as np

HEADER_INTS = 256
MAGIC_U16, MAGIC_U32 = 20240520, 20240801
GGML_TYPE_F32 = 0   # the KV cache in f32 (llama.cpp's default is f16, which rounds K and V: not an f32 oracle)


def usage(msg):
    sys.stderr.write("gguf_ref.py: %s\n%s" % (msg, __doc__))
    sys.exit(2)


def load(path, vocab_only=False, n_ctx=512):
    """A llama_cpp.Llama on path (f32 logits for every evaluated position unless vocab_only)."""
    import llama_cpp
    if not os.path.isfile(path):
        usage("%s: no such file" % path)
    threads = int(os.environ.get("OMP_NUM_THREADS", "1"))
    return llama_cpp.Llama(model_path=path, vocab_only=vocab_only, n_ctx=n_ctx, n_batch=n_ctx, n_ubatch=n_ctx,
                           logits_all=not vocab_only, n_threads=threads, n_threads_batch=threads, verbose=False,
                           seed=0, type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32, flash_attn=False)


def parse_ids(s):
    try:
        ids = [int(x) for x in s.split(",") if x.strip()]
    except ValueError:
        usage("ids %r: not a comma-separated list of integers" % s)
    if not ids:
        usage("no prompt ids")
    return ids


def logits_of(llm, ids):
    """Every position's logits of ids evaluated from an empty context: an (len(ids), n_vocab) float32 array."""
    llm.reset()
    llm.eval(ids)
    return np.array(llm.scores[:len(ids)], dtype=np.float32)


def cmd_logits(path, ids):
    llm = load(path, n_ctx=max(64, len(ids)))
    rows = logits_of(llm, ids)
    return {"n_vocab": int(rows.shape[1]), "logits": rows.tolist()}


def cmd_greedy(path, ids, steps):
    llm = load(path, n_ctx=len(ids) + steps + 1)
    llm.reset()
    llm.eval(ids)
    out = []
    for _ in range(steps):
        nxt = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        out.append(nxt)
        llm.eval([nxt])
    return {"tokens": out}


def read_tokens(path):
    """The ids of a meshpoint/llm.c token file (256 int32 header: magic, version, count; then the ids)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(HEADER_INTS * 4)
            body = f.read()
    except OSError as e:
        usage("%s: %s" % (path, e))
    head = np.frombuffer(raw[:len(raw) // 4 * 4], dtype="<i4")
    if len(head) != HEADER_INTS or head[0] not in (MAGIC_U16, MAGIC_U32):
        usage("%s: not a token file (%s)" % (path, "magic %d" % head[0] if len(head) == HEADER_INTS else
                                             "shorter than the 1024-byte header"))
    dt = "<u2" if head[0] == MAGIC_U16 else "<u4"
    toks = np.frombuffer(body, dtype=dt)
    if len(toks) != head[2]:
        usage("%s: header says %d tokens, the file holds %d" % (path, head[2], len(toks)))
    return toks.astype(np.int64)


def cmd_ppl(path, tokens_path, ctx):
    toks = read_tokens(tokens_path)
    if len(toks) < 2:
        usage("%s: fewer than 2 tokens" % tokens_path)
    llm = load(path, n_ctx=ctx)
    nll, n = 0.0, 0
    for s in range(0, len(toks) - 1, ctx):
        win = [int(t) for t in toks[s:s + ctx]]
        if len(win) < 2:
            break
        rows = logits_of(llm, win).astype(np.float64)
        m = rows.max(axis=1, keepdims=True)
        lse = (m[:, 0] + np.log(np.exp(rows - m).sum(axis=1)))[:-1]
        nll += float((lse - rows[np.arange(len(win) - 1), win[1:]]).sum())
        n += len(win) - 1
    loss = nll / n
    return {"tokens": n, "loss": loss, "ppl": float(np.exp(loss))}


def cmd_tokenize(path, text_path, bos):
    try:
        with open(text_path, "rb") as f:
            data = f.read()
    except OSError as e:
        usage("%s: %s" % (text_path, e))
    llm = load(path, vocab_only=True)
    return {"ids": [int(t) for t in llm.tokenize(data, add_bos=bos, special=True)]}


def cmd_meta(path):
    import gguf
    r = gguf.GGUFReader(path)
    out = {}
    for name, field in r.fields.items():
        if name.startswith("GGUF."):
            continue
        out[name] = field.contents()
    return out


def main(argv):
    if len(argv) < 3:
        usage("a command and a .gguf are required")
    cmd, path, rest = argv[1], argv[2], argv[3:]
    if cmd == "logits" and len(rest) == 1:
        res = cmd_logits(path, parse_ids(rest[0]))
    elif cmd == "greedy" and len(rest) in (1, 2):
        res = cmd_greedy(path, parse_ids(rest[0]), int(rest[1]) if len(rest) == 2 else 32)
    elif cmd == "ppl" and len(rest) in (1, 2):
        res = cmd_ppl(path, rest[0], int(rest[1]) if len(rest) == 2 else 256)
    elif cmd == "tokenize" and len(rest) in (1, 2) and rest[1:] in ([], ["--bos"]):
        res = cmd_tokenize(path, rest[0], rest[1:] == ["--bos"])
    elif cmd == "meta" and not rest:
        res = cmd_meta(path)
    else:
        usage("bad arguments for %r: %s" % (cmd, " ".join(rest)))
    json.dump(res, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv)
