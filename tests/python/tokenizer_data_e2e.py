"""tests/python/tokenizer_data_e2e.py MESHPOINT WORKDIR — `meshpoint data --tokenizer` end to end against Hugging
Face's `tokenizers`: the train file followed by the validation file holds, document after document,
template BOS + encode(doc, add_special_tokens=False) + EOS as the library computes them, the validation
file being the last round(F * n) tokens; headers are llm.c's (uint16, magic 20240520, when the vocabulary
fits; else uint32, magic 20240801 version 7). Cases: text files (an empty one, one of several MiB that is
cut into pieces and encoded on 2 threads) for GPT-2, Llama 3 and Llama 2 layouts,
JSONL records (--jsonl-field), a vocabulary over 65536 (uint32), --val-fraction 0 (the train file alone),
and bad JSONL (exit 2 naming file:line).
"""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402


def read_tokens(path):
    with open(path, "rb") as f:
        data = f.read()
    magic, version, n = struct.unpack("<3i", data[:12])
    width = {20240520: 2, 20240801: 4}[magic]
    assert version == (1 if width == 2 else 7), (path, version)
    body = data[1024:]
    assert len(body) == n * width, (path, len(body), n)
    return width, list(struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), body))


def expected(tok, docs, eos_name):
    bos = tok.encode("", add_special_tokens=True).ids
    eos = tok.token_to_id(eos_name)
    out = []
    for d in docs:
        out += bos + tok.encode(d, add_special_tokens=False).ids + [eos]
    return out


def run(meshpoint, args, env_threads="2"):
    env = dict(os.environ, OMP_NUM_THREADS=env_threads)
    return subprocess.run([meshpoint, "data"] + args, capture_output=True, text=True, env=env, check=False)


def check(name, meshpoint, tokdir, tok, docs, files, work, extra, eos_name, want_width, failures, frac=0.1):
    out = os.path.join(work, "out_" + name)
    r = run(meshpoint, ["--tokenizer", tokdir, "--out", out, "--name", name, "--val-fraction", str(frac)] + extra + files)
    if r.returncode != 0:
        failures.append("%s: exit %d: %s" % (name, r.returncode, r.stderr))
        return
    w1, train = read_tokens(os.path.join(out, name + "_train.bin"))
    want = expected(tok, docs, eos_name)
    if frac == 0:   # --val-fraction 0: the train file alone, every token, and the summary line says so
        if os.path.exists(os.path.join(out, name + "_val.bin")) or "no validation file (--val-fraction 0)" not in r.stdout:
            failures.append("%s: --val-fraction 0 wrote a validation file or did not say so: %r" % (name, r.stdout))
        w2, val = w1, []
    else:
        w2, val = read_tokens(os.path.join(out, name + "_val.bin"))
    nval = max(1, min(len(want) - 1, round(frac * len(want)))) if frac else 0
    if w1 != want_width or w2 != want_width:
        failures.append("%s: token width %d/%d, want %d" % (name, w1, w2, want_width))
    if train + val != want:
        i = next((k for k, (a, b) in enumerate(zip(train + val, want)) if a != b), min(len(train + val), len(want)))
        failures.append("%s: tokens differ from tokenizers at %d (of %d/%d): %s vs %s" %
                        (name, i, len(train + val), len(want), (train + val)[i:i + 8], want[i:i + 8]))
    elif len(val) != nval:
        failures.append("%s: %d val tokens, want %d" % (name, len(val), nval))
    print("%s: %d documents, %d tokens, %s" % (name, len(docs), len(want), r.stdout.strip()))


def write_docs(work, name, docs):
    files = []
    for i, d in enumerate(docs):
        p = os.path.join(work, "%s_%02d.txt" % (name, i))
        with open(p, "w", encoding="utf-8", newline="") as f:
            f.write(d)
        files.append(p)
    return files


def big_doc():
    """Several MiB of varied lines: cut into pieces of 1 MiB, encoded on two threads."""
    lines = [c for c in tb.CASES if "{" not in c] + tb.TRAIN_TEXT[:7]
    out, i, size = [], 0, 0
    while size < 3_500_000:
        out.append(lines[i % len(lines)] + " %d\n" % i)
        size += len(out[-1])
        i += 1
    return "".join(out)


def main():
    meshpoint, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = []
    toks = {k: tb.save(k, tb.BUILDERS[k](), work) for k in ("gpt2", "llama3", "llama2")}
    small = [t for t in tb.case_texts("llama3") if t] + ["", "last document"]
    for kind in ("gpt2", "llama3"):
        d, tok = toks[kind]
        docs = tb.case_texts(kind) + [big_doc()]
        check(kind, meshpoint, d, tok, docs, write_docs(work, kind, docs), work, [], tb.SPECIALS[kind][1], 2, failures)
    d, tok = toks["llama2"]
    docs = tb.case_texts("llama2") + [big_doc()]   # one BPE word per segment: the cut is exercised too
    check("llama2", meshpoint, d, tok, docs, write_docs(work, "llama2", docs), work, [], "</s>", 2, failures, frac=0.3)
    # JSONL records, the tokenizer given as a tokenizer.json file and the EOS by --eos
    jl = os.path.join(work, "docs.jsonl")
    with open(jl, "w", encoding="utf-8") as f:
        for i, t in enumerate(small):
            f.write(json.dumps({"id": i, "text": t}) + ("\n\n" if i == 3 else "\n"))
    d3, tok3 = toks["llama3"]
    check("jsonl", meshpoint, os.path.join(d3, "tokenizer.json"), tok3, small + small, [jl, jl], work,
          ["--jsonl-field", "text", "--eos", "<|reserved_special_token_7|>"], "<|reserved_special_token_7|>", 2, failures)
    # --val-fraction 0 (a separate validation corpus): the training file alone
    check("noval", meshpoint, d3, tok3, small, write_docs(work, "noval", small), work, [], tb.SPECIALS["llama3"][1], 2,
          failures, frac=0)
    # a vocabulary past 65536: uint32 tokens, ids above 65535 in the text
    big = tb.BUILDERS["llama3"]()
    big.add_special_tokens(["<|extra_%d|>" % i for i in range(65000)])
    dbig, tokbig = tb.save("llama3", big, os.path.join(work, "big"))
    docs = ["a <|extra_64999|> b <|extra_70|>", "plain text here", "<|extra_65|>"]
    check("uint32", meshpoint, dbig, tokbig, docs, write_docs(work, "big", docs), work, [], "<|end_of_text|>", 4, failures)
    # bad JSONL: exit 2 naming file:line; --jsonl-field without --tokenizer: exit 2
    bad = os.path.join(work, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"text": "ok"}\n{"text": 5}\n')
    r = run(meshpoint, ["--tokenizer", d3, "--out", os.path.join(work, "o"), "--jsonl-field", "text", bad])
    if r.returncode != 2 or bad + ":2" not in r.stderr:
        failures.append("bad JSONL: exit %d, %r" % (r.returncode, r.stderr))
    r = run(meshpoint, ["--out", os.path.join(work, "o"), "--jsonl-field", "text", bad])
    if r.returncode != 2 or "--tokenizer" not in r.stderr:
        failures.append("--jsonl-field alone: exit %d, %r" % (r.returncode, r.stderr))
    for f in failures:
        print("FAIL", f)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
