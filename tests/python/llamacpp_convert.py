"""tests/python/llamacpp_convert.py — llama.cpp's convert_hf_to_gguf.py, run as it is, except that its name of the
byte-level pre-tokenizer is PRE: the converter finds that name by hashing the tokenizer's output on its check
text, which a vocabulary trained for the tests (tests/python/tokenizer_build.py) does not match; PRE is the name
a published model of that layout gets (llama3: "llama-bpe", qwen2: "qwen2"). "-": no change.
Used by tests/python/gguf_import.py and bench/bench_gguf.sh.

Usage: python llamacpp_convert.py CONVERT_PY PRE|- HF_DIR [converter arguments: --outtype T --outfile F ...]
"""
import os
import runpy
import sys

conv, pre = sys.argv[1], sys.argv[2]
sys.path[:0] = [os.path.dirname(conv), os.path.join(os.path.dirname(conv), "gguf-py")]
if pre != "-":
    import conversion.base as cb
    cb.TextModel.get_vocab_base_pre = lambda self, tokenizer: pre
sys.argv = [conv] + sys.argv[3:]
runpy.run_path(conv, run_name="__main__")
