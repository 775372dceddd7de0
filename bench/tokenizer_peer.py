"""bench/tokenizer_peer.py — the peer side of bench/bench_tokenizer.sh, in scripts/test_venv.sh's venv.

  python tokenizer_peer.py build KIND CORPUS VOCAB OUTDIR   trains a KIND ("llama3" or "llama2") tokenizer
                                                            of VOCAB tokens on CORPUS with `tokenizers`, laid
                                                            out as tests/python/tokenizer_build.py lays them
  python tokenizer_peer.py encode TOKDIR ROUNDS FILE...     encodes each FILE (a document) ROUNDS times on
                                                            one thread (RAYON_NUM_THREADS=1), prints one line
                                                            per round: "peer_s SECONDS TOKENS"
The encode is what `meshpoint data --tokenizer` does per document: encode(text, add_special_tokens=False).
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))
import tokenizer_build as tb  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402


def build(kind, corpus, vocab, out):
    with open(corpus, encoding="utf-8", errors="replace") as f:
        tb.TRAIN_TEXT[:] = f.read().split("\n%\n")   # fortunes are separated by "%" lines
    real = tb._train_bytelevel
    tb._train_bytelevel = lambda pre, _size, specials: real(pre, vocab, specials)
    real_sp = tb._train_sentencepiece
    tb._train_sentencepiece = lambda _size: real_sp(vocab)
    tok = tb.BUILDERS[kind]()
    d, _ = tb.save(kind, tok, out)
    print(d)


def encode(tokdir, rounds, files):
    tok = Tokenizer.from_file(os.path.join(tokdir, "tokenizer.json"))
    docs = []
    for p in files:
        with open(p, "rb") as f:
            docs.append(f.read().decode("utf-8", "replace"))
    for _ in range(rounds):
        t0 = time.perf_counter()
        n = sum(len(tok.encode(d, add_special_tokens=False).ids) for d in docs)
        print("peer_s %.6f %d" % (time.perf_counter() - t0, n), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "build":
        build(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
    else:
        encode(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
