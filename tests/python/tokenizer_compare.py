"""tests/python/tokenizer_compare.py TOOL WORKDIR [KIND...] — meshpoint's tokenizer (tests/tool_tokenize.c) against
Hugging Face's `tokenizers` on the tokenizers tokenizer_build.py makes: for every edge case and every invalid
UTF-8 input, the ids of encode(text, add_special_tokens=False) are identical, meshpoint's decode equals the
library's decode(ids, skip_special_tokens=False) and decode(ids, skip_special_tokens=True), decode(encode(x)) == x wherever the convention
round-trips (byte-level: always, NFC(x) for qwen2; sentencepiece with byte fallback: text without special tokens in it), and
the template's BOS/EOS ids equal what encode(x, add_special_tokens=True) adds. Exit 1 on any difference.
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402


def run_tool(tool, d, payloads, workdir):
    files = []
    for i, p in enumerate(payloads):
        path = os.path.join(workdir, "case_%03d.txt" % i)
        with open(path, "wb") as f:
            f.write(p)
        files.append(path)
    out = subprocess.run([tool, d] + files, capture_output=True, check=False)
    if out.returncode != 0:
        sys.exit("FAIL: %s %s exited %d: %s" % (tool, d, out.returncode, out.stderr.decode(errors="replace")))
    lines = [json.loads(l) for l in out.stdout.decode().split("\n") if l]   # (not splitlines: U+2028 is text)
    return lines[0], lines[1:]


def roundtrips(kind, text):
    if kind in ("gpt2", "llama3", "qwen2"):
        return True   # (gpt2_prefix adds a space in front: no round trip; qwen2 gives back NFC(x))
    if kind == "llama2":
        return not any(s in text for s in tb.SPECIALS[kind])
    return False


def normal_form(tok, text):
    """x as the round trip gives it back: the library's NFC(x) under an NFC normalizer, else x."""
    return tok.normalizer.normalize_str(text) if type(tok.normalizer).__name__ == "NFC" else text


def check(kind, tool, root):
    d, tok = tb.save(kind, tb.BUILDERS[kind](), root)
    texts = tb.case_texts(kind)
    payloads = [t.encode() for t in texts] + tb.INVALID_UTF8
    expect_texts = texts + [b.decode("utf-8", "replace") for b in tb.INVALID_UTF8]
    head, got = run_tool(tool, d, payloads, os.path.join(root, kind))
    bad = 0
    for i, (text, res) in enumerate(zip(expect_texts, got)):
        enc = tok.encode(text, add_special_tokens=False)
        want_dec = tok.decode(enc.ids, skip_special_tokens=False)
        if res["ids"] != enc.ids:
            bad += 1
            print("FAIL %s case %d %r:\n  meshpoint %s\n  tokenizers %s\n  tokens %s" %
                  (kind, i, text, res["ids"], enc.ids, enc.tokens))
        elif res["decoded"] != want_dec:
            bad += 1
            print("FAIL %s case %d %r: decode %r, tokenizers %r" % (kind, i, text, res["decoded"], want_dec))
        elif res["decoded_skip"] != tok.decode(enc.ids, skip_special_tokens=True):
            bad += 1
            print("FAIL %s case %d %r: decode(skip_special_tokens) %r, tokenizers %r" %
                  (kind, i, text, res["decoded_skip"], tok.decode(enc.ids, skip_special_tokens=True)))
        elif i < len(texts) and roundtrips(kind, text) and res["decoded"] != normal_form(tok, text):
            bad += 1
            print("FAIL %s case %d: decode(encode(x)) = %r != x = %r" % (kind, i, res["decoded"], normal_form(tok, text)))
    full = tok.encode("x", add_special_tokens=True).ids
    plain = tok.encode("x", add_special_tokens=False).ids
    if full != head["bos"] + plain + head["eos"]:
        bad += 1
        print("FAIL %s template: meshpoint bos %s eos %s, tokenizers %s around %s" % (kind, head["bos"], head["eos"], full, plain))
    if head["vocab_size"] != tok.get_vocab_size(with_added_tokens=True):
        bad += 1
        print("FAIL %s vocab_size %d != %d" % (kind, head["vocab_size"], tok.get_vocab_size(with_added_tokens=True)))
    if head["eos_id"] != tok.token_to_id(tb.SPECIALS[kind][1]):
        bad += 1
        print("FAIL %s eos_id %d != %s" % (kind, head["eos_id"], tok.token_to_id(tb.SPECIALS[kind][1])))
    ntok = sum(len(r["ids"]) for r in got)
    print("%s: %d texts, %d tokens, %s" % (kind, len(got), ntok, "identical" if not bad else "%d differences" % bad))
    return bad


def main():
    tool, root = sys.argv[1], sys.argv[2]
    kinds = sys.argv[3:] or list(tb.BUILDERS)
    os.makedirs(root, exist_ok=True)
    bad = sum(check(k, tool, root) for k in kinds)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
