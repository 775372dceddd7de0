"""tests/python/tokenizer_ckpt_e2e.py MESHPOINT SRC_DIR WORKDIR — checkpoints carry their tokenizer,
end to end against transformers itself (scripts/bench_venv.sh's venv):

  1. an HF model directory as a user downloads it: config.json = the published SmolLM2-135M file
     (tests/data/hf_configs) with the sizes made tiny and every bookkeeping key kept; random weights saved by
     transformers; a Llama 3 layout byte-level BPE tokenizer built with `tokenizers` and saved by
     transformers (tokenizer.json, tokenizer_config.json, ...); generation_config.json with a list
     eos_token_id;
  2. `import` keeps the files: `ckpt show` names the tokenizer (type, vocab, BOS, EOS), `ckpt verify` is ok;
  3. `sample --prompt TEXT` (greedy) prints exactly tokenizer.decode of transformers' own greedy
     continuation of tokenizer(TEXT);
  4. `data --tokenizer` + `train --init-from` (+ `--resume`): every checkpoint of the run carries the files,
     byte for byte, and verifies; `reshard` keeps them;
  5. `export`: the directory loads in AutoTokenizer.from_pretrained and gives the original's ids on an
     edge-case corpus; its generation_config.json is the original; the model loads in transformers;
  6. a flipped byte in a carried file: `ckpt verify` exits 1 naming the file, `sample` refuses;
  7. a checkpoint without carried files (tests/data/ckpt_v1) still shows, verifies and says "none";
  8. docs/CLI.md's text workflow block (<!-- text-workflow -->) runs as written, MODEL_DIR being the directory
     of step 1, and its outputs are right: text out of `sample`, the files in every checkpoint, and the
     exported tokenizer = the original;
  9. the same import and `sample` with a sentencepiece-style tokenizer (Llama 2 layout, byte fallback): the text
     printed token by token is transformers' decode of its greedy continuation;
 10. streaming split characters: a model whose greedy continuation is, by construction, the single-byte
     tokens of "東é" (byte-level) and the byte-fallback tokens <0xE6><0x9D><0xB1><0xC3><0xA9>: the printed text
     = transformers' decode of the greedy ids (the incomplete UTF-8 tail is held back, not printed as U+FFFD);
 11. a tokenizer meshpoint does not load (a Unigram tokenizer.json) or only a sentencepiece tokenizer.model:
     `sample --ids` still works; text is refused (exit 2) naming --ids; an eos_token_id outside the
     vocabulary in generation_config.json is refused (exit 2) naming the file.
"""
import json
import os
import shlex
import shutil
import subprocess
import sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402

FILES = ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def mp(bin_, *args, ok=True):
    r = subprocess.run([bin_] + list(args), capture_output=True, text=True, check=False,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    if ok and r.returncode != 0:
        sys.exit("FAIL: meshpoint %s: exit %d\n%s\n%s" % (" ".join(args), r.returncode, r.stdout, r.stderr))
    return r


def make_model_dir(src, d, kind="llama3"):
    """The HF directory of step 1 (kind llama3: byte-level BPE; llama2: sentencepiece-style with byte fallback)."""
    os.makedirs(d)
    tok = tb.BUILDERS[kind]()
    bos_t, eos_t = tb.SPECIALS[kind][:2]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=bos_t, eos_token=eos_t)
    fast.save_pretrained(d)
    with open(os.path.join(src, "tests/data/hf_configs/smollm2-135m.json")) as f:
        cfg = json.load(f)   # as published: bookkeeping keys and all
    bos, eos = fast.convert_tokens_to_ids(bos_t), fast.convert_tokens_to_ids(eos_t)
    cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, vocab_size=len(fast), max_position_embeddings=256, bos_token_id=bos,
               eos_token_id=eos)
    torch.manual_seed(20)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)}))
    with torch.no_grad():   # larger weights than the init's: a greedy continuation that varies, not one token repeated
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.35)
    model.save_pretrained(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    other = fast.convert_tokens_to_ids(tb.SPECIALS[kind][2])
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos, "eos_token_id": [eos, other], "transformers_version": "5.24.0"}, f, indent=2)
    return fast


def greedy(d, prompt, n):
    """transformers' greedy continuation (no early stop), decoded as text."""
    tok = AutoTokenizer.from_pretrained(d)
    model = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        for _ in range(n):
            nxt = model(ids).logits[0, -1].argmax().view(1, 1)
            ids = torch.cat([ids, nxt], dim=1)
    return tok.decode(ids[0].tolist(), skip_special_tokens=True)


def chain_model_dir(src, d, kind, chain, prompt):
    """Step 10: the directory of make_model_dir(kind) with weights that make greedy decoding walk `chain`
    (token strings) after the prompt's last token: every layer adds nothing (o_proj, down_proj zero), so
    the last position's state is its token's embedding, a basis vector e_i for the i-th chain token, and
    lm_head row of token i+1 is e_i."""
    fast = make_model_dir(src, d, kind)
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    cfg["tie_word_embeddings"] = False
    ids = [fast(prompt).input_ids[-1]] + [fast.convert_tokens_to_ids(t) for t in chain]
    assert len(set(ids)) == len(ids) and all(isinstance(i, int) and i >= 0 for i in ids), ids
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in cfg.items() if k not in ("architectures",)}))
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.fill_(1.0 if "norm" in name else 0.0)
        emb, head = model.model.embed_tokens.weight, model.lm_head.weight
        for i, t in enumerate(ids):
            emb[t, i] = 1.0
            if i + 1 < len(ids):
                head[ids[i + 1], i] = 1.0
    model.save_pretrained(d)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


def split_characters(bin_, src, work):
    """Step 10, byte-level and byte-fallback."""
    # GPT-2's byte -> character map of the ByteLevel alphabet
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:] + [256 + i for i in range(256 - len(bs))]
    bs += [b for b in range(256) if b not in bs]
    b2u = {b: chr(c) for b, c in zip(bs, cs)}
    raw = "東é".encode()
    for kind, chain in (("llama3", [b2u[b] for b in raw]), ("llama2", ["<0x%02X>" % b for b in raw])):
        d, ck = os.path.join(work, "hf_split_" + kind), os.path.join(work, "ck_split_" + kind)
        chain_model_dir(src, d, kind, chain, "ab")
        mp(bin_, "import", d, "--out", ck)
        got = mp(bin_, "sample", "--checkpoint", ck, "--prompt", "ab", "--tokens", str(len(chain)),
                 "--temperature", "0").stdout
        want = greedy(d, "ab", len(chain))
        check(want.endswith("東é") and got.rstrip("\n") == want,
              "%s: characters split across tokens print as transformers decodes them: %r vs %r" % (kind, got, want))


def untokenizable(bin_, work, hf):
    """Step 11."""
    from tokenizers import Tokenizer, models
    for what in ("unigram", "spm"):
        d, c = os.path.join(work, "hf_" + what), os.path.join(work, "ck_" + what)
        shutil.copytree(hf, d)
        for n in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if os.path.exists(os.path.join(d, n)):
                os.remove(os.path.join(d, n))
        if what == "unigram":
            Tokenizer(models.Unigram([("<unk>", 0.0), ("a", -1.0), ("b", -2.0)], 0)).save(os.path.join(d, "tokenizer.json"))
        else:
            open(os.path.join(d, "tokenizer.model"), "wb").write(b"\x0a\x05hello")
        mp(bin_, "import", d, "--out", c)
        r = mp(bin_, "sample", "--checkpoint", c, "--prompt", "1 2 3", "--ids", "--tokens", "2", "--temperature", "0",
               ok=False)
        check(r.returncode == 0 and len(r.stdout.split()) == 5, "%s: sample --ids works: exit %d %r" % (what, r.returncode, r.stderr))
        r = mp(bin_, "sample", "--checkpoint", c, "--prompt", "ab", "--tokens", "2", ok=False)
        check(r.returncode == 2 and "--ids" in r.stderr and ("tokenizer.model" in r.stderr if what == "spm" else
              "Unigram" in r.stderr), "%s: text refused, naming why and --ids: exit %d %r" % (what, r.returncode, r.stderr))
    bad, d = os.path.join(work, "bad_eos"), os.path.join(work, "hf_bad_eos")
    shutil.copytree(hf, d)
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [1, 10 ** 6]}, f)
    mp(bin_, "import", d, "--out", bad)
    r = mp(bin_, "sample", "--checkpoint", bad, "--prompt", "ab", "--tokens", "1", ok=False)
    check(r.returncode == 2 and "generation_config.json" in r.stderr and "eos_token_id" in r.stderr,
          "an eos_token_id outside the vocabulary is refused: exit %d %r" % (r.returncode, r.stderr))


def same_files(a, b, names):
    return all(open(os.path.join(a, n), "rb").read() == open(os.path.join(b, n), "rb").read() for n in names)


def readme_workflow(bin_, src, work, hf, carried, texts):
    """Step 8: docs/CLI.md's text workflow block, command by command, in WORK/readme."""
    lines, on, inb = [], False, False
    for l in open(os.path.join(src, "docs", "CLI.md"), encoding="utf-8"):
        if "<!-- text-workflow" in l:
            on = True
        elif on and l.startswith("```"):
            if inb:
                break
            inb = True
        elif on and inb:
            cmd = l.split(" #")[0].strip()
            if cmd:
                lines.append(cmd)
    check(len(lines) == 7 and all(c.startswith("meshpoint ") for c in lines), "docs/CLI.md's text workflow: %d commands" % len(lines))
    d = os.path.join(work, "readme")
    os.makedirs(d)
    with open(os.path.join(d, "corpus.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(tb.TRAIN_TEXT * 20))
    outs = []
    for c in lines:
        argv = [a.replace("MODEL_DIR", hf) for a in shlex.split(c)]
        r = subprocess.run([bin_] + argv[1:], cwd=d, capture_output=True, text=True, check=False,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        check(r.returncode == 0, "text workflow: %s: exit %d%s" % (c, r.returncode, " " + r.stderr[-500:] if r.returncode else ""))
        outs.append(r.stdout)
    check("byte-level BPE" in outs[1], "text workflow: ckpt show names the tokenizer")
    check(outs[2].startswith("The quick brown fox") and outs[5].startswith("The quick brown fox"),
          "text workflow: sample prints text: %r, %r" % (outs[2], outs[5]))
    for s in ("model_ckpt", "ft/checkpoints/step_00000002", "ft/checkpoints/step_00000004", "ft_hf"):
        p = os.path.join(d, s, "" if s == "ft_hf" else "files")
        check(same_files(hf, p, carried), "text workflow: %s has the tokenizer files" % s)
    a, b = AutoTokenizer.from_pretrained(hf), AutoTokenizer.from_pretrained(os.path.join(d, "ft_hf"))
    check(all(a(t).input_ids == b(t).input_ids for t in texts), "text workflow: ft_hf's tokenizer gives the original ids")


def main():
    bin_, src, work = (os.path.abspath(a) for a in sys.argv[1:4])
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    hf = os.path.join(work, "hf")
    fast = make_model_dir(src, hf)
    carried = [n for n in os.listdir(hf) if n in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                                  "added_tokens.json", "chat_template.jinja", "generation_config.json")]
    ck = os.path.join(work, "ck")
    mp(bin_, "import", hf, "--out", ck)
    check(same_files(hf, os.path.join(ck, "files"), carried), "import carries %s byte for byte" % carried)
    show = mp(bin_, "ckpt", "show", ck).stdout
    line = next((l for l in show.splitlines() if l.startswith("tokenizer")), "")
    check("byte-level BPE" in line and "vocab %d" % len(fast) in line and "<|begin_of_text|>" in line
          and "<|end_of_text|>" in line, "ckpt show names the tokenizer: %r" % line)
    check(mp(bin_, "ckpt", "verify", ck, "--format-only").returncode == 0, "ckpt verify of the (model-only) import")
    js = json.loads(mp(bin_, "ckpt", "show", ck, "--json").stdout)
    check(js.get("tokenizer") == line[len("tokenizer"):].strip(), "ckpt show --json: \"tokenizer\" = the text line: %r"
          % js.get("tokenizer"))

    prompt = "The quick brown fox — café, naïve 東京 🦊, in 1969:"
    got = mp(bin_, "sample", "--checkpoint", ck, "--prompt", prompt, "--tokens", "12", "--temperature", "0").stdout
    want = greedy(hf, prompt, 12)
    check(got.rstrip("\n") == want, "sample --prompt in text = transformers' greedy text: %r vs %r" % (got, want))

    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        f.write("\n".join(tb.TRAIN_TEXT * 20))
    mp(bin_, "data", "--tokenizer", hf, "--out", os.path.join(work, "tok"), "--name", "c", corpus)
    run = os.path.join(work, "run")
    common = ["--config", os.path.join(hf, "config.json"), "--train-data", os.path.join(work, "tok", "c_train.bin"),
              "--batch", "2", "--seq-len", "32", "--log-every", "0", "--run-dir", run, "--ckpt-every", "2"]
    mp(bin_, "train", *common, "--steps", "2", "--init-from", ck)
    mp(bin_, "train", *common, "--steps", "4", "--resume")
    steps = sorted(os.listdir(os.path.join(run, "checkpoints")))
    steps = [s for s in steps if s.startswith("step_")]
    check(len(steps) == 2, "train saved 2 checkpoints: %s" % steps)
    for s in steps:
        d = os.path.join(run, "checkpoints", s)
        check(same_files(hf, os.path.join(d, "files"), carried), "%s (init-from / resume) carries the files" % s)
        check(mp(bin_, "ckpt", "verify", d).returncode == 0, "ckpt verify %s" % s)
    ls = json.loads(mp(bin_, "ckpt", "ls", os.path.join(run, "checkpoints"), "--json").stdout)
    for e in ls["checkpoints"]:
        d = os.path.join(run, "checkpoints", e["dir"])
        size = sum(os.path.getsize(os.path.join(d, n)) for n in os.listdir(d) if os.path.isfile(os.path.join(d, n)))
        size += sum(os.path.getsize(os.path.join(d, "files", n)) for n in os.listdir(os.path.join(d, "files")))
        check(e["bytes"] == size, "ckpt ls: %s's size counts files/: %d vs %d" % (e["dir"], e["bytes"], size))
    rs = os.path.join(work, "rs")
    mp(bin_, "reshard", run, "--tp", "2", "--dp", "1", "--out", rs)
    check(same_files(hf, os.path.join(rs, "files"), carried), "reshard keeps the files")

    out = os.path.join(work, "export")
    mp(bin_, "export", rs, "--out", out)
    check(same_files(hf, out, carried), "export writes the files back as imported")
    a, b = AutoTokenizer.from_pretrained(hf), AutoTokenizer.from_pretrained(out)
    texts = tb.case_texts("llama3") + [prompt]
    check(all(a(t).input_ids == b(t).input_ids for t in texts), "the exported tokenizer gives the original ids")
    AutoModelForCausalLM.from_pretrained(out)
    check(True, "the exported model loads in transformers")

    bad = os.path.join(work, "bad")
    shutil.copytree(ck, bad)
    p = os.path.join(bad, "files", "tokenizer.json")
    data = bytearray(open(p, "rb").read())
    data[len(data) // 2] ^= 0x01
    open(p, "wb").write(bytes(data))
    r = mp(bin_, "ckpt", "verify", bad, "--format-only", ok=False)
    check(r.returncode == 1 and "tokenizer.json" in r.stdout, "verify of a flipped byte: exit %d %r" % (r.returncode, r.stdout))
    r = mp(bin_, "sample", "--checkpoint", bad, "--prompt", "x", "--tokens", "1", ok=False)
    check(r.returncode == 1 and "tokenizer.json" in r.stderr, "sample refuses it: exit %d %r" % (r.returncode, r.stderr))

    old = os.path.join(src, "tests/data/ckpt_v1/step_00000002")
    show = mp(bin_, "ckpt", "show", old).stdout
    check(any(l.startswith("tokenizer") and l.endswith("none") for l in show.splitlines()), "an old checkpoint: tokenizer none")
    check(mp(bin_, "ckpt", "verify", old, "--format-only").returncode == 0, "an old checkpoint still verifies")
    readme_workflow(bin_, src, work, hf, carried, texts)

    # sentencepiece-style (Llama 2 layout: "▁", byte fallback): the text printed token by token is still
    # transformers' decode of its greedy continuation
    sp = os.path.join(work, "hf_sp")
    make_model_dir(src, sp, "llama2")
    mp(bin_, "import", sp, "--out", os.path.join(work, "ck_sp"))
    show = mp(bin_, "ckpt", "show", os.path.join(work, "ck_sp")).stdout
    check("sentencepiece-style BPE" in show, "ckpt show: a sentencepiece-style tokenizer")
    got = mp(bin_, "sample", "--checkpoint", os.path.join(work, "ck_sp"), "--prompt", prompt, "--tokens", "12",
             "--temperature", "0").stdout
    want = greedy(sp, prompt, 12)
    check(got.rstrip("\n") == want, "sentencepiece-style: sample = transformers' greedy text: %r vs %r" % (got, want))
    split_characters(bin_, src, work)
    untokenizable(bin_, work, hf)
    if failures:
        sys.exit("FAILED: %d: %s" % (len(failures), failures))
    print("tokenizer_ckpt_e2e: all checks passed")


main()
