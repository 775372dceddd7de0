"""tests/python/tokenizer_refusals.py TOOL WORKDIR [MESHPOINT] — tokenizer.json files meshpoint does not implement,
made with Hugging Face's `tokenizers` itself, are refused with exit status 2 and a message naming what is
unsupported and the file; a missing, garbled or empty tokenizer file is refused naming the file. TOOL is
tests/tool_tokenize; with MESHPOINT, `meshpoint data --tokenizer` is held to the same.
"""
import os
import subprocess
import sys

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402


def bpe():
    return Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2, "[UNK]": 3}, merges=[("a", "b")], unk_token="[UNK]"))


def with_attr(name, value):
    t = bpe()
    setattr(t, name, value)
    return t


CASES = {   # name -> (tokenizer, what the message must name)
    "wordpiece": (lambda: Tokenizer(models.WordPiece(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]")), "WordPiece"),
    "unigram": (lambda: Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0)], unk_id=0)), "Unigram"),
    "wordlevel": (lambda: Tokenizer(models.WordLevel(vocab={"[UNK]": 0, "a": 1}, unk_token="[UNK]")), "WordLevel"),
    "strip": (lambda: with_attr("normalizer", normalizers.Strip()), "Strip"),
    "nfc_bert": (lambda: with_attr("normalizer", normalizers.Sequence([normalizers.NFC(), normalizers.BertNormalizer()])),
                 "BertNormalizer"),   # NFC is supported; what follows it in a Sequence is still named
    "lowercase": (lambda: with_attr("normalizer", normalizers.Sequence([normalizers.Prepend("x"), normalizers.Lowercase()])),
                  "Lowercase"),
    "whitespace": (lambda: with_attr("pre_tokenizer", pre_tokenizers.Whitespace()), "Whitespace"),
    "bert_pre": (lambda: with_attr("pre_tokenizer", pre_tokenizers.BertPreTokenizer()), "BertPreTokenizer"),
    "digits": (lambda: with_attr("pre_tokenizer", pre_tokenizers.Sequence([pre_tokenizers.Digits()])), "Digits"),
    "wp_decoder": (lambda: with_attr("decoder", decoders.WordPiece()), "WordPiece"),
    "roberta": (lambda: with_attr("post_processor", processors.RobertaProcessing(("</s>", 2), ("<s>", 0))),
                "RobertaProcessing"),
    "split_merged": (lambda: with_attr("pre_tokenizer", pre_tokenizers.Split(" ", behavior="merged_with_next")),
                     "MergedWithNext"),
}


def expect(cmd, what, must, failures):
    out = subprocess.run(cmd, capture_output=True, text=True, errors="replace", check=False)
    text = out.stdout + out.stderr
    if out.returncode != 2 or any(m not in text for m in must):
        failures.append("%s: exit %d (want 2), output %r lacks %s" % (what, out.returncode, text.strip(), must))


def main():
    tool, root = sys.argv[1], sys.argv[2]
    meshpoint = sys.argv[3] if len(sys.argv) > 3 else None
    os.makedirs(root, exist_ok=True)
    text = os.path.join(root, "doc.txt")
    with open(text, "w") as f:
        f.write("ab")
    files = {}
    for name, (build, must) in CASES.items():
        path = os.path.join(root, name + ".json")
        build().save(path)
        files[name] = (path, [must, path])
    garbled = os.path.join(root, "garbled.json")
    with open(garbled, "w") as f:
        f.write('{"model": {"type": "BPE", "vocab": {"a": 0}')
    empty_dir = os.path.join(root, "empty_dir")
    os.makedirs(empty_dir, exist_ok=True)
    missing = os.path.join(root, "missing.json")
    files["garbled"] = (garbled, [garbled])
    files["missing"] = (missing, [missing])
    files["dir_without_json"] = (empty_dir, [os.path.join(empty_dir, "tokenizer.json")])
    failures = []
    for name, (path, must) in files.items():
        expect([tool, path, text], "tool_tokenize " + name, must, failures)
        if meshpoint:
            expect([meshpoint, "data", "--tokenizer", path, "--out", os.path.join(root, "out"), text],
                   "meshpoint data " + name, must, failures)
    for f in failures:
        print("FAIL", f)
    print("%d refusal cases, %d failures" % (len(files), len(failures)))
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
