"""bench/gguf_peer.py — helpers of bench/bench_gguf.sh, in scripts/llamacpp_venv.sh's venv.

  gguf_peer.py tokenizer DIR      the llama3-layout test tokenizer (tests/python/tokenizer_build.py) into DIR:
                                  tokenizer.json + tokenizer_config.json (the converter and the export need one)
  gguf_peer.py compare A B        GGUF files A and B hold the same tensors (names, types, shapes, bytes);
                                  exit 1 naming the first difference
"""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "python"))


def main():
    if sys.argv[1] == "tokenizer":
        import tokenizer_build as tb
        d, _ = tb.save("llama3", tb.BUILDERS["llama3"](), sys.argv[2])
        print(d)
    elif sys.argv[1] == "compare":
        import gguf
        a, b = gguf.GGUFReader(sys.argv[2]), gguf.GGUFReader(sys.argv[3])
        ta, tb_ = {t.name: t for t in a.tensors}, {t.name: t for t in b.tensors}
        if sorted(ta) != sorted(tb_):
            sys.exit("gguf_peer: tensor names differ: %s" % sorted(set(ta) ^ set(tb_)))
        for n in ta:
            x, y = ta[n], tb_[n]
            if x.tensor_type != y.tensor_type or list(x.shape) != list(y.shape) or not np.array_equal(x.data, y.data):
                sys.exit("gguf_peer: tensor %s differs (%s %s vs %s %s)" % (n, x.tensor_type.name, list(x.shape),
                                                                          y.tensor_type.name, list(y.shape)))
        print("gguf_peer: %d tensors identical" % len(ta))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
