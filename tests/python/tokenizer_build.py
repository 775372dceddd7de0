"""tests/python/tokenizer_build.py — builds, with Hugging Face's `tokenizers` itself, small tokenizers laid out
as the real model files are, and the edge-case corpus the tokenizer tests encode. Imported by
tokenizer_compare.py and tokenizer_data_e2e.py; runs in scripts/test_venv.sh's venv (no network: the
tokenizers are trained here on TRAIN_TEXT, then configured like the published tokenizer.json files):

  gpt2      byte-level BPE, ByteLevel pre-tokenizer (GPT-2's pattern) and decoder; merges saved "a b"
  llama3    byte-level BPE, Split(Llama 3's pattern, Isolated) + ByteLevel(use_regex=false), ignore_merges,
            TemplateProcessing "<|begin_of_text|> $A", 256 special tokens as Llama 3 has
  llama2    sentencepiece-style BPE as Llama 2 / TinyLlama / Code Llama's tokenizer.json (legacy): normalizer
            Prepend("▁") + Replace(" ", "▁"), no pre-tokenizer, byte_fallback with <0x00>..<0xFF> at ids
            3..258, unk <unk> fused, decoder Replace + ByteFallback + Fuse + Strip, "<s> $A"
  metaspace sentencepiece-style with the Metaspace pre-tokenizer/decoder (prepend_scheme "first", as
            transformers writes non-legacy Llama files), no byte fallback: unknown characters are <unk>, fused
  gpt2_prefix, metaspace_split   the same with ByteLevel add_prefix_space, and Metaspace "always" + split
  openllama llama2 with <unk> and <s> normalized=true, as OpenLLaMA's published file has them
  qwen2     Qwen2/2.5 and Qwen3's layout: normalizer NFC, Split(Qwen's pattern: single digits, Isolated) +
            ByteLevel(use_regex=false), merges saved "a b", continuing_subword_prefix/end_of_word_suffix ""
            as the published file has them, no BOS template, <|endoftext|> <|im_start|> <|im_end|> after the
            vocabulary; trained on NFC text, so composed forms have merges that decomposed input only reaches
            through NFC
Each directory also gets the tokenizer_config.json that names the EOS token, as an HF model directory has.
"""
import json
import os

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
SP = "\u2581"

TRAIN_TEXT = [
    "The quick brown fox jumps over the lazy dog. It's a test; they'll see what we've done, isn't it?",
    "In 1969, 3 astronauts flew 384400 km to the Moon and back: 12345678 numbers, 3.14159 and 2,718.",
    "def main(argv):\n    for i in range(10):\n        print(i * 2)  # tabs\tand  spaces   here\n",
    "Café, naïve, résumé, façade, über, Ångström, jalapeño, coöperate. Élan and œuvre.",
    "Hello world! Hello, World!! hello... HELLO??? well -- well --- (yes) [no] {maybe} <tag> a+b=c; x->y",
    "Training language models: tokenization, merges, vocabulary, byte pairs, and the decoders that undo them.",
    "Lines\nwith\n\nblank lines\r\nand CRLF\r\n   indented\n\t\ttabbed\n",
] * 4
# more composed text for qwen2's training (NFC makes decomposed input reach these merges)
NFC_TRAIN_TEXT = ["Ångström Å 한국어 텍스트 한글 가각 résumé café élève ộ ñ ü 日本語 中文 😀 Ωmega"] * 4

# The edge cases every tokenizer encodes; "{BOS}"/"{EOS}"/"{X}" are replaced by each tokenizer's special tokens.
CASES = [
    "Hello world",
    " leading space",
    "trailing space ",
    "  two leading, three trailing   ",
    "whitespace    runs     of   varied      length",
    "tabs\tand\t\tmore\ttabs\n\nnew\nlines\r\n\r\nCRLF",
    "\n\n\n",
    "   ",
    "digits 1 12 123 1234 12345 3.14159 2,718,281 0x1F 1e-9 007",
    "punctuation!!! ??? ... --- (( )) [[ ]] {{ }} <<>> @#$%^&*~`|\\/ ;;; ::",
    "it's they're we've I'm you'll he'd IT'S THEY'RE 'quoted' \"double\"",
    "accents: café naïve résumé façade über Ångström jalapeño ÉLAN œuvre",
    "CJK: 日本語のテキスト 中文文本 한국어 텍스트",
    "emoji: 😀 🎉🎉 👩\u200d💻 🇫🇷 ❤️ x😀y",
    "combining marks: e\u0301 a\u0308 n\u0303 o\u0302\u0323 (decomposed) vs é ä ñ ộ (composed)",
    "mixed: Hello世界 123abc abc123 ½ ² Ⅻ ﬁ",
    "specials in text: {BOS}Hello{EOS} and {X} inside, {BOS} {BOS}{EOS}",
    "{BOS}starts with a special",
    "ends with a special{EOS}",
    "The quick brown fox jumps over the lazy dog.",
    "",
    "a",
    "\u00a0non-breaking\u00a0space and\u2003em\u2003space",
    "other spaces: a\u0085b \u0085 x a\u001cb \u001c\u001d x zero\u200bwidth ideo\u3000graphic \u3000\u3000 x",
    "separators: line\u2028sep \u2029 x vt\x0bff\x0c x ogham\u1680 \u2007fig\u202f\u205f x \ufeffbom x",
    "long word: pneumonoultramicroscopicsilicovolcanoconiosis supercalifragilisticexpialidocious",
    # NFC (qwen2): decomposed accents compose; marks are reordered by class first; Hangul jamo compose by
    # arithmetic (L V, L V T, LV T); singletons (U+212B ANGSTROM, U+2126 OHM, U+00C5 stays) map to their
    # canonical form; composition exclusions (U+0958 DEVANAGARI QA, U+FB1D) stay decomposed; a mark after a
    # blocking mark of the same class does not compose; compatibility forms (ﬁ, ², ｈ) are left alone
    "NFC: cafe\u0301 re\u0301sume\u0301 e\u0301le\u0300ve A\u030angstro\u0308m n\u0303 u\u0308ber o\u0323\u0302 o\u0302\u0323",
    "Hangul: \u1112\u1161\u11ab\u1100\u1173\u11af \u1100\u1161 \uac00\u11a8 \u1100\u1161\u11a8x \u1100 \u1161 \u11a8",
    "singletons: \u212b \u2126 \u212a \u00c5 \u2000 \u0374 \u037e ; exclusions: \u0958 \u0915\u093c \ufb1d \u05d9\u05b4 \u2adc",
    "blocking: a\u0346\u0301 a\u0301\u0301 a\u0323\u0301 a\u0301\u0323 e\u0327\u0306 \u0301lead \u0f71\u0f72 \u0f73 \u1e9b\u0323",
    "mixed NFC: 日本語e\u0301 😀\u0301 x\U00011935\U00011930 \u1df6a\u0301 compat ﬁ ² ｈ ① ㌀ Ⅻ",
]

# Bytes that are not valid UTF-8: meshpoint reads them as bytes.decode("utf-8", "replace") does.
INVALID_UTF8 = [
    b"bad \xff byte",
    b"cut \xe4\xb8 short and \xf0\x9f\x98 again",
    b"\xc0\xaf overlong \xe0\x80\xaf and surrogate \xed\xa0\x80 end",
    b"lone continuation \x80\x81 and \xf5\xf8 high",
    b"tail cut \xe2\x82",
]

SPECIALS = {
    "gpt2": ("<|endoftext|>", "<|endoftext|>", "<|endoftext|>"),
    "llama3": ("<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_3|>"),
    "llama2": ("<s>", "</s>", "<unk>"),
    "metaspace": ("<s>", "</s>", "<unk>"),
    "gpt2_prefix": ("<|endoftext|>", "<|endoftext|>", "<|endoftext|>"),
    "metaspace_split": ("<s>", "</s>", "<unk>"),
    "openllama": ("<s>", "</s>", "<unk>"),
    "qwen2": ("<|im_start|>", "<|im_end|>", "<|endoftext|>"),   # (Qwen has no BOS: "{BOS}" is <|im_start|>)
}


def case_texts(kind):
    bos, eos, x = SPECIALS[kind]
    return [c.replace("{BOS}", bos).replace("{EOS}", eos).replace("{X}", x) for c in CASES]


def _train_bytelevel(pre, vocab_size, specials):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    return tok


def build_gpt2():
    pre = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok = _train_bytelevel(pre, 700, ["<|endoftext|>"])
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


def build_llama3():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    specials = ["<|begin_of_text|>", "<|end_of_text|>"] + ["<|reserved_special_token_%d|>" % i for i in range(254)]
    trained = _train_bytelevel(pre, 1000, [])
    data = json.loads(trained.to_str())
    vocab, merges = data["model"]["vocab"], [tuple(m) for m in data["model"]["merges"]]
    # a whole word in the vocabulary that no merge reaches: one token only because of ignore_merges
    vocab["\u0120pneumonoultramicroscopicsilicovolcanoconiosis"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, ignore_merges=True))
    tok.pre_tokenizer = pre
    tok.add_special_tokens(specials)   # ids after the vocabulary, as in Llama 3 (128000...)
    tok.decoder = decoders.ByteLevel()
    bos_id = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A <|begin_of_text|> $B",
                                      special_tokens=[("<|begin_of_text|>", bos_id)])])
    return tok


def _train_sentencepiece(vocab_size):
    """Trains on Metaspace words (no byte fallback tokens yet); returns (vocab, merges) of the learned pieces."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False)
    tok.train_from_iterator(TRAIN_TEXT, trainer)
    data = json.loads(tok.to_str())
    return data["model"]["vocab"], [tuple(m) for m in data["model"]["merges"]]


def _sp_vocab(pieces, byte_fallback):
    """Llama 2's id layout: <unk> <s> </s>, then <0x00>..<0xFF> (byte fallback), then the pieces."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    if byte_fallback:
        for b in range(256):
            vocab["<0x%02X>" % b] = len(vocab)
    for piece, _ in sorted(pieces.items(), key=lambda kv: kv[1]):
        if piece not in vocab:
            vocab[piece] = len(vocab)
    return vocab


def _sp_specials(tok, normalized=()):
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken(t, normalized=t in normalized, special=True) for t in ("<unk>", "<s>", "</s>")])
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                       special_tokens=[("<s>", 1)])


def build_llama2():
    pieces, merges = _train_sentencepiece(500)
    tok = Tokenizer(models.BPE(vocab=_sp_vocab(pieces, True), merges=merges, unk_token="<unk>", fuse_unk=True,
                               byte_fallback=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(SP), normalizers.Replace(" ", SP)])
    tok.decoder = decoders.Sequence([decoders.Replace(SP, " "), decoders.ByteFallback(), decoders.Fuse(),
                                     decoders.Strip(content=" ", left=1, right=0)])
    _sp_specials(tok)
    return tok


def build_openllama():
    """Llama 2's legacy layout with <unk> and <s> normalized=true, as OpenLLaMA's published tokenizer.json has
    them: those two are matched by their normalized form ("▁<s>") in the normalized text."""
    tok = build_llama2()
    _sp_specials(tok, normalized=("<unk>", "<s>"))
    return tok


def build_metaspace():
    pieces, merges = _train_sentencepiece(400)
    tok = Tokenizer(models.BPE(vocab=_sp_vocab(pieces, False), merges=merges, unk_token="<unk>", fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="first", split=False)
    tok.decoder = decoders.Metaspace(replacement=SP, prepend_scheme="first", split=False)
    _sp_specials(tok)
    return tok


def build_gpt2_prefix():
    """GPT-2's layout with add_prefix_space (as some byte-level models ship it)."""
    tok = build_gpt2()
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    return tok


def build_metaspace_split():
    """Metaspace with prepend_scheme "always" and split=true (sentencepiece's own word split)."""
    tok = build_metaspace()
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SP, prepend_scheme="always", split=True)
    tok.decoder = decoders.Metaspace(replacement=SP, prepend_scheme="always", split=True)
    return tok


def build_qwen2():
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok = Tokenizer(models.BPE())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre
    trainer = trainers.BpeTrainer(vocab_size=1000, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(TRAIN_TEXT + NFC_TRAIN_TEXT, trainer)
    tok.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])   # ids after the vocabulary, as Qwen's
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    return tok


BUILDERS = {"gpt2": build_gpt2, "llama3": build_llama3, "llama2": build_llama2, "metaspace": build_metaspace,
            "gpt2_prefix": build_gpt2_prefix, "metaspace_split": build_metaspace_split, "openllama": build_openllama,
            "qwen2": build_qwen2}


def save(kind, tok, root):
    """DIR/tokenizer.json (+ tokenizer_config.json naming the EOS); gpt2's merges rewritten as "a b" strings."""
    d = os.path.join(root, kind)
    os.makedirs(d, exist_ok=True)
    data = json.loads(tok.to_str())
    if kind in ("gpt2", "qwen2"):
        data["model"]["merges"] = [" ".join(m) for m in data["model"]["merges"]]
    if kind == "qwen2":   # as Qwen2.5's published tokenizer.json spells "none"
        data["model"].update(continuing_subword_prefix="", end_of_word_suffix="")
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)
    with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump({"eos_token": SPECIALS[kind][1], "bos_token": None if kind == "qwen2" else SPECIALS[kind][0]}, f)
    return d, Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
