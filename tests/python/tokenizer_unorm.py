"""tests/python/tokenizer_unorm.py TOOL WORKDIR — meshpoint's Unicode normalizers (tokenizer/unorm.c: NFC, NFD,
NFKC, NFKD, and a Sequence holding them) against Hugging Face's `tokenizers`, exhaustively:

Each normalizer is put in front of a byte-level BPE with no merges (the 256 byte symbols are the whole
vocabulary, ByteLevel with GPT-2's pattern splits words), so the ids are the bytes of the normalized text and
equal ids mean equal normalized text. tests/tool_tokenize (meshpoint) and the library then encode
  - every code point of planes 0-2 and 14 (surrogates aside; all that Unicode 9.0 decomposes or gives a
    combining class lies there) and the first 4096 of each other plane, in blocks of 4096, each block one
    text: decompositions, singletons, exclusions, Hangul syllables, marks beside their neighbours;
  - 24000 random clusters (1 to 10 code points, seeded) drawn from the combining marks, the decomposable
    characters, the second characters of compositions, their first characters, Hangul jamo and syllables,
    ASCII, and the code points where Unicode 9.0 (the library's data) and later versions differ (U+11935
    U+11930, U+1DF6), joined by spaces into 8 texts: reordering, blocking, composition chains;
and the ids must be identical. Exit 1 on any difference, naming the form, the text and the first code
point where they part.
"""
import json
import os
import random
import subprocess
import sys
import unicodedata

from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

FORMS = {
    "NFC": normalizers.NFC, "NFD": normalizers.NFD, "NFKC": normalizers.NFKC, "NFKD": normalizers.NFKD,
    # a Sequence: decompose, drop the acute accent, compose again
    "SEQ": lambda: normalizers.Sequence([normalizers.NFKD(), normalizers.Replace("\u0301", ""), normalizers.NFC()]),
}


def probe_tokenizer(form, root):
    vocab = {c: i for i, c in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.normalizer = FORMS[form]()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    d = os.path.join(root, form)
    os.makedirs(d, exist_ok=True)
    tok.save(os.path.join(d, "tokenizer.json"))
    return d, tok


def texts():
    starts = [lo for lo in range(0, 0x110000, 4096) if lo < 0x30000 or lo >> 16 == 0xE or lo & 0xFFFF == 0]
    out = ["".join(chr(c) for c in range(lo, lo + 4096) if not 0xD800 <= c < 0xE000) for lo in starts]
    marks, decs, firsts, seconds = [], [], [], []
    for c in range(0x110000):
        if 0xD800 <= c < 0xE000:
            continue
        if unicodedata.combining(chr(c)):
            marks.append(c)
        d = unicodedata.decomposition(chr(c)).split()
        if d:
            decs.append(c)
            if not d[0].startswith("<"):
                firsts.append(int(d[0], 16))
                seconds.extend(int(x, 16) for x in d[1:])
    jamo = list(range(0x1100, 0x1113)) + list(range(0x1161, 0x1176)) + list(range(0x11A7, 0x11C3)) + [0xAC00, 0xAC01, 0xD7A3]
    pools = [marks, decs, sorted(set(seconds)), sorted(set(firsts)), jamo, list(range(0x20, 0x7F)),
             [0x11935, 0x11930, 0x11938, 0x1DF6, 0x0334, 0x0301, 0x0316, 0x0323, 0x0F71, 0x0F72]]
    rng = random.Random(36)
    for _ in range(8):
        out.append(" ".join("".join(chr(rng.choice(rng.choice(pools))) for _ in range(rng.randint(1, 10)))
                            for _ in range(3000)))
    return out


def main():
    tool, root = sys.argv[1], sys.argv[2]
    os.makedirs(root, exist_ok=True)
    all_texts = texts()
    paths = []
    for i, t in enumerate(all_texts):
        paths.append(os.path.join(root, "text_%03d.txt" % i))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.write(t)
    bad = 0
    for form in FORMS:
        d, tok = probe_tokenizer(form, root)
        out = subprocess.run([tool, d] + paths, capture_output=True, check=False)
        if out.returncode != 0:
            sys.exit("FAIL: %s %s exited %d: %s" % (tool, d, out.returncode, out.stderr.decode(errors="replace")))
        got = [json.loads(l)["ids"] for l in out.stdout.decode().split("\n")[1:] if l]
        nbad = 0
        for i, (t, ids) in enumerate(zip(all_texts, got)):
            want = tok.encode(t).ids
            if ids != want:
                nbad += 1
                k = next((j for j, (a, b) in enumerate(zip(ids, want)) if a != b), min(len(ids), len(want)))
                print("FAIL %s text %d (%s): ids part at byte %d of the normalized text, near %r" %
                      (form, i, os.path.basename(paths[i]), k, tok.normalizer.normalize_str(t)[max(0, k // 3 - 8):k // 3 + 8]))
        print("%s: %d texts, %d code points, %s" % (form, len(all_texts), sum(map(len, all_texts)),
                                                    "identical" if not nbad else "%d differ" % nbad))
        bad += nbad
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
