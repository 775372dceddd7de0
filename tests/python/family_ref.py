"""tests/python/family_ref.py FAMILY --bin MESHPOINT --dump TOOL_LLAMA_DUMP --src SRC --work DIR
                                  [--mpiexec "mpiexec ARGS..."]

One model family (llama, mistral, qwen2, qwen3, phi3) end to end against transformers itself, in the venv
scripts/bench_venv.sh makes (transformers' own *ForCausalLM class is the oracle, float64):

  1. a small random model of the family, made by transformers' class from the family's published
     config.json (tests/data/hf_configs, FAMILIES below) shrunk to a tiny shape with every other key
     kept; norm weights, biases and q/k norms perturbed away from 1/0 so a kernel that drops them fails;
     saved with save_pretrained (safetensors, float32) beside a small token file;
  2. gradients: tests/tool_llama_dump (one forward + backward on 1x1, CPU) of the same config; its
     parameters loaded into the transformers model in float64 (Phi-3's fused qkv_proj / gate_up_proj
     built from the separate tensors), the same tokens: loss and every gradient within 1e-4 (max-norm
     relative, as tests/python/compare_torch.py), the family's own tensors named in the output;
  3. `import` as saved; `eval` on 1x1, tp 2, dp 2 and tp 2 x dp 2 = transformers' float64 loss on the
     same sequences to 1e-5 (relative);
  4. greedy `sample --ids` (KV cache) on 1x1 and tp 2 = transformers' greedy `generate` ids;
  5. a fine-tune on tp 2 x dp 2 (`train --init-from`, 4 steps) whose losses equal 1x1's to 1e-5; stopped at
     step 2 and resumed, the same step-4 checkpoint bitwise; that step 2 resumed on tp 1 x dp 2, the same
     losses to 1e-5; that checkpoint resharded to tp 1 and back is
     bitwise itself, and `ckpt verify` passes on all three;
  6. `export` of the 2-step checkpoint loads as the same class with no missing or unexpected keys, and
     transformers' float64 loss of it = meshpoint's `eval` of that checkpoint to 1e-5;
  7. the same family beside a tokenizer of its models' layout (Qwen: NFC, no BOS; Mistral, Phi-3:
     sentencepiece-style): `import` carries it, `sample --prompt TEXT` = transformers' greedy text, and
     `export` writes tokenizer.json back byte for byte.
Exit 0 when all hold, 1 otherwise (each failure named), 2 on bad usage or a tool that failed to run.
"""
import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys

import numpy as np
import torch
import transformers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import tokenizer_build as tb  # noqa: E402

# family -> (published config under tests/data/hf_configs, transformers class names, the tiny shape)
TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=256, max_position_embeddings=128)
FAMILIES = {
    "llama": ("smollm2-135m.json", "LlamaConfig", "LlamaForCausalLM", {}),
    "mistral": ("mistral-7b-v0.3.json", "MistralConfig", "MistralForCausalLM", {}),
    # v0.1-style: a window (8) shorter than the sequences (16) and the sampled length
    "mistral_window": ("mistral-7b-v0.3.json", "MistralConfig", "MistralForCausalLM", {"sliding_window": 8}),
    "qwen2": ("qwen2.5-0.5b.json", "Qwen2Config", "Qwen2ForCausalLM", {}),
    # use_sliding_window: layers from max_window_layers (1) on slide (8 keys), layer 0 sees everything
    "qwen2_window": ("qwen2.5-0.5b.json", "Qwen2Config", "Qwen2ForCausalLM",
                     {"use_sliding_window": True, "sliding_window": 8, "max_window_layers": 1}),
    # head_dim 32 > hidden/heads = 16, as Qwen3-0.6B's 128 > 1024/16
    "qwen3": ("qwen3-0.6b.json", "Qwen3Config", "Qwen3ForCausalLM", {"head_dim": 32}),
    "phi3": ("phi-3-mini-4k-instruct.json", "Phi3Config", "Phi3ForCausalLM", {}),
}
# the tokenizer layout a family's published models use (tests/python/tokenizer_build.py builds it)
TOKENIZER = {"llama": "llama3", "mistral": "llama2", "mistral_window": "llama2", "qwen2": "qwen2",
             "qwen2_window": "qwen2", "qwen3": "qwen2", "phi3": "llama2"}
BATCH, SEQ, BATCHES = 2, 16, 2
failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True, check=False,
                       env=dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1"))
    if r.returncode != 0:
        print("ERROR: %s: exit %d\n$ %s\n%s\n%s" % (what, r.returncode, shlex.join(cmd), r.stdout, r.stderr))
        sys.exit(2)
    return r.stdout


def tiny_config(src, family):
    """The published config.json with the tiny shape (and the family's extras) written over it."""
    published, _, _, extra = FAMILIES[family]
    with open(os.path.join(src, "tests/data/hf_configs", published)) as f:
        cfg = json.load(f)
    cfg.update(TINY, **extra)
    for k in ("head_dim",):   # a published head_dim belongs to the published shape
        if k not in extra and k in cfg:
            cfg[k] = TINY["hidden_size"] // TINY["num_attention_heads"]
    if cfg.get("sliding_window") is not None and family == "phi3":
        cfg["sliding_window"] = 8   # Phi-3 mini's 2047 against 4096 positions: here 8 against 16
    cfg["bos_token_id"], cfg["eos_token_id"] = 1, 2
    if cfg.get("pad_token_id") is not None:   # Phi-3 mini's 32000 lies outside the tiny vocabulary
        cfg["pad_token_id"] = 0
    return cfg


def make_model(cfg, family, seed=36):
    """transformers' own class from cfg, weights random with norms and biases perturbed."""
    _, conf_cls, model_cls, _ = FAMILIES[family]
    conf = getattr(transformers, conf_cls)(**{k: v for k, v in cfg.items() if k != "architectures"})
    conf._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = getattr(transformers, model_cls)(conf)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.2)
            elif name.endswith("bias"):
                p.normal_(0.0, 0.3)
            else:   # RMSNorm weights, q_norm / k_norm included
                p.copy_(1.0 + 0.25 * (2 * torch.rand_like(p) - 1))
    return model.eval()


def write_tokens(path, vocab, n, seed):
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, vocab, n).astype(np.uint16)
    header = np.zeros(256, dtype=np.int32)
    header[0], header[1], header[2] = 20240520, 1, n
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(toks.tobytes())
    return toks


def ref_loss(model, toks):
    """transformers' float64 mean loss over meshpoint's eval sequences (core/data.h: sequence k of the
    stream reads tokens [k*T, k*T + T + 1))."""
    m = model.double()
    seqs = [toks[k * SEQ:k * SEQ + SEQ + 1] for k in range(BATCH * BATCHES)]
    x = torch.tensor(np.stack([s[:-1] for s in seqs]).astype(np.int64))
    y = torch.tensor(np.stack([s[1:] for s in seqs]).astype(np.int64))
    with torch.no_grad():
        logits = m(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    m.float()
    return loss.item()


def mp_eval(a, ckpt, data, launcher, tp, dp):
    cmd = launcher(tp * dp) + [a.bin, "eval", "--checkpoint", ckpt, "--data", data, "--batches", str(BATCHES),
                               "--batch", str(BATCH), "--seq-len", str(SEQ), "--json"]
    if tp * dp > 1:
        cmd += ["--tp", str(tp), "--dp", str(dp)]
    out = run(cmd, "eval tp %d dp %d" % (tp, dp))
    return json.loads(out[out.index("{"):])["loss"]


def fuse_phi3(sd, cfg):
    """meshpoint's separate q/k/v and gate/up as Phi-3's qkv_proj and gate_up_proj."""
    out = {}
    for k, v in sd.items():
        if ".q_proj." in k:
            out[k.replace("q_proj", "qkv_proj")] = torch.cat(
                [v, sd[k.replace("q_proj", "k_proj")], sd[k.replace("q_proj", "v_proj")]])
        elif ".gate_proj." in k:
            out[k.replace("gate_proj", "gate_up_proj")] = torch.cat([v, sd[k.replace("gate_proj", "up_proj")]])
        elif not any(s in k for s in (".k_proj.", ".v_proj.", ".up_proj.")):
            out[k] = v
    return out


def load_dump(d):
    man = json.load(open(os.path.join(d, "manifest.json")))
    arrays = {}
    for t in man["tensors"]:
        dt = np.float32 if t["dtype"] == "f32" else np.int32
        arrays[(t["kind"], t.get("name"))] = np.fromfile(os.path.join(d, t["file"]), dtype=dt).reshape(t["shape"])
    return man, arrays


def grads_check(a, cfg, family, work):
    """Step 2: tool_llama_dump's forward + backward against transformers' autograd in float64."""
    cfg_path = os.path.join(work, "dump_cfg.json")
    json.dump(dict(cfg, train={"batch_size": 2, "seq_len": SEQ}), open(cfg_path, "w"))
    d = os.path.join(work, "dump")
    run([a.dump, cfg_path, d, "5", "2", str(SEQ), "--perturb-norms"], "tool_llama_dump")
    man, arr = load_dump(d)
    model = make_model(cfg, family).double()
    params = {n: torch.tensor(v, dtype=torch.float64) for (k, n), v in arr.items() if k == "param"}
    grads = {n: v.astype(np.float64) for (k, n), v in arr.items() if k == "grad"}
    sd = fuse_phi3(params, cfg) if family == "phi3" else params
    missing, unexpected = model.load_state_dict(sd, strict=False)
    missing = [k for k in missing if not (cfg.get("tie_word_embeddings") and k == "lm_head.weight")]
    check(not missing and not unexpected, "%s: the dump's tensors are the model's (missing %s, unexpected %s)"
          % (family, missing, unexpected))
    x = torch.tensor(arr[("inputs", "inputs")].astype(np.int64))
    y = torch.tensor(arr[("targets", "targets")].astype(np.int64))
    logits = model(input_ids=x).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
    loss.backward()
    check(abs(man["loss_mean"] - loss.item()) <= 1e-5 * abs(loss.item()),
          "%s: dump loss %.8f = transformers float64 %.8f" % (family, man["loss_mean"], loss.item()))
    ref = {n: p.grad.numpy() for n, p in model.named_parameters()}
    if family == "phi3":   # the fused gradients, split back into meshpoint's tensors
        for n in list(ref):
            g = ref[n]
            if "qkv_proj" in n:
                qd = cfg["num_attention_heads"] * (cfg["hidden_size"] // cfg["num_attention_heads"])
                kd = (g.shape[0] - qd) // 2
                for part, rows in (("q_proj", g[:qd]), ("k_proj", g[qd:qd + kd]), ("v_proj", g[qd + kd:])):
                    ref[n.replace("qkv_proj", part)] = rows
                del ref[n]
            elif "gate_up_proj" in n:
                i = g.shape[0] // 2
                ref[n.replace("gate_up_proj", "gate_proj")], ref[n.replace("gate_up_proj", "up_proj")] = g[:i], g[i:]
                del ref[n]
    worst, names = 0.0, sorted(grads)
    for n in names:
        if n not in ref:
            check(False, "%s: gradient %s has no transformers parameter" % (family, n))
            continue
        b = ref[n].reshape(grads[n].shape)
        e = np.abs(grads[n] - b).max() / max(np.abs(b).max(), 1e-30)
        worst = max(worst, e)
        if e > 1e-4 or any(s in n for s in ("bias", "q_norm", "k_norm")):
            check(e <= 1e-4, "%s: gradient of %s within 1e-4 (%.2e)" % (family, n, e))
    check(set(names) >= set(ref), "%s: every transformers gradient was dumped (%s missing)"
          % (family, sorted(set(ref) - set(names))))
    print("%s: %d gradients, worst max-norm relative error %.2e" % (family, len(names), worst))


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [json.loads(line)["loss"] for line in f if '"loss"' in line]


def training_checks(a, fam, work, hf, ckpt, launcher):
    """Step 5's runs: a fine-tune from the import on tp 2 x dp 2 (4 steps, checkpoints at 2 and 4) whose
    losses equal 1x1's to 1e-5 (mesh-invariant); 2 steps, stop, --resume to 4 gives the same step-4
    checkpoint bitwise; that checkpoint resharded to tp 1 and back to tp 2 x dp 2 is bitwise itself, and
    `ckpt verify` passes on all three. Returns the tp 2 x dp 2 run directory."""
    common = [a.bin, "train", "--config", os.path.join(hf, "config.json"), "--train-data",
              os.path.join(work, "train.bin"), "--init-from", ckpt, "--batch", "4", "--seq-len", str(SEQ),
              "--log-every", "0", "--ckpt-every", "2"]
    mesh = ["--tp", "2", "--dp", "2"]
    ft, one, res = (os.path.join(work, n) for n in ("ft", "ft_1x1", "ft_resumed"))
    run(launcher(4) + common + mesh + ["--run-dir", ft, "--steps", "4"], "fine-tune tp 2 x dp 2")
    run(common + ["--run-dir", one, "--steps", "4"], "fine-tune 1x1")
    la, lb = losses(ft), losses(one)
    rel = max(abs(x - y) / abs(y) for x, y in zip(la, lb)) if len(la) == len(lb) == 4 else float("inf")
    check(rel <= 1e-5, "%s: 4 steps on tp 2 x dp 2 = 1x1 to 1e-5 (worst %.2e)" % (fam, rel))
    run(launcher(4) + common + mesh + ["--run-dir", res, "--steps", "4", "--stop-at", "2"], "fine-tune to the stop")
    resume = [c for c in common if c not in ("--init-from", ckpt)]
    run(launcher(4) + resume + mesh + ["--run-dir", res, "--steps", "4", "--resume"], "resume")
    s4 = os.path.join(ft, "checkpoints", "step_00000004")
    eq = subprocess.run([a.equal, s4, os.path.join(res, "checkpoints", "step_00000004")], capture_output=True, text=True)
    check(eq.returncode == 0 and losses(res) == la,
          "%s: stop at 2 and --resume: step 4 bitwise, losses bitwise %s" % (fam, eq.stderr.strip()))
    other = os.path.join(work, "ft_other_mesh")   # the stopped run's step 2, resumed on tp 1 x dp 2
    run(launcher(2) + resume + ["--dp", "2", "--run-dir", other, "--steps", "4", "--resume-from",
                                os.path.join(res, "checkpoints", "step_00000002")], "resume on another mesh")
    lo = losses(other)
    rel = max(abs(x - y) / abs(y) for x, y in zip(lo, la[2:])) if len(lo) == 2 else float("inf")
    check(rel <= 1e-5, "%s: step 2 of tp 2 x dp 2 resumed on tp 1 x dp 2: steps 3-4 within 1e-5 (%.2e)" % (fam, rel))
    r1, r2 = os.path.join(work, "reshard_tp1"), os.path.join(work, "reshard_back")
    run([a.bin, "reshard", s4, "--tp", "1", "--dp", "1", "--out", r1], "reshard to tp 1")
    run([a.bin, "reshard", r1, "--tp", "2", "--dp", "2", "--out", r2], "reshard back to tp 2 x dp 2")
    eq = subprocess.run([a.equal, s4, r2], capture_output=True, text=True)
    check(eq.returncode == 0, "%s: tp 2 x dp 2 -> tp 1 -> tp 2 x dp 2 is bitwise %s" % (fam, eq.stderr.strip()))
    for d in (s4, r1, r2):
        v = subprocess.run([a.bin, "ckpt", "verify", d], capture_output=True, text=True)
        check(v.returncode == 0, "%s: ckpt verify %s" % (fam, os.path.relpath(d, work)))
    return ft


def text_check(a, cfg, fam, work):
    """Step 7: the family's model beside a tokenizer of the family's layout (Qwen: NFC normalizer, no BOS;
    Mistral, Phi-3: sentencepiece-style with byte fallback), saved by transformers: `import` carries the
    tokenizer, `sample --prompt TEXT` (greedy, KV cache) prints transformers' greedy text, and `export`
    writes tokenizer.json back byte for byte."""
    kind = TOKENIZER[fam]
    bos_t, eos_t = tb.SPECIALS[kind][:2]
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tb.BUILDERS[kind](),
                                                bos_token=None if kind == "qwen2" else bos_t, eos_token=eos_t)
    d = os.path.join(work, "hf_text")
    fast.save_pretrained(d)
    c = dict(cfg, vocab_size=len(fast), eos_token_id=fast.convert_tokens_to_ids(eos_t))
    c["bos_token_id"] = None if kind == "qwen2" else fast.convert_tokens_to_ids(bos_t)
    model = make_model(c, fam, seed=37)
    model.save_pretrained(d)
    ck, out = os.path.join(work, "ck_text"), os.path.join(work, "export_text")
    run([a.bin, "import", d, "--out", ck], "import with a tokenizer")
    prompt = "The quick brown fox, cafe\u0301 and caf\u00e9, \uc548\ub155 in 1969:"   # decomposed and composed
    got = run([a.bin, "sample", "--checkpoint", ck, "--prompt", prompt, "--tokens", "10", "--temperature", "0",
               "--ignore-eos"], "sample in text").rstrip("\n")
    ids = fast(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        for _ in range(10):
            ids = torch.cat([ids, model.double()(ids).logits[0, -1].argmax().view(1, 1)], dim=1)
    want = fast.decode(ids[0].tolist(), skip_special_tokens=True)
    check(got == want, "%s: sample --prompt in text (%s tokenizer) = transformers' greedy text: %r vs %r"
          % (fam, kind, got, want))
    run([a.bin, "export", ck, "--out", out], "export with a tokenizer")
    same = open(os.path.join(d, "tokenizer.json"), "rb").read() == open(os.path.join(out, "tokenizer.json"), "rb").read()
    check(same, "%s: export writes the carried tokenizer.json byte for byte" % fam)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("family", choices=sorted(FAMILIES))   # a FAMILIES key
    ap.add_argument("--bin", required=True)
    ap.add_argument("--dump", required=True)
    ap.add_argument("--equal", required=True)
    ap.add_argument("--src", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--mpiexec", default="mpiexec")
    a = ap.parse_args()
    fam, work = a.family, a.work
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    mpi = shlex.split(a.mpiexec)
    launcher = lambda n: (mpi + ["-np", str(n)]) if n > 1 else []   # noqa: E731

    cfg = tiny_config(a.src, fam)
    model = make_model(cfg, fam)
    hf = os.path.join(work, "hf")
    model.save_pretrained(hf)
    toks = write_tokens(os.path.join(work, "val.bin"), cfg["vocab_size"], 4096, 7)
    write_tokens(os.path.join(work, "train.bin"), cfg["vocab_size"], 8192, 8)
    data = os.path.join(work, "val.bin")

    grads_check(a, cfg, fam, work)

    ckpt = os.path.join(work, "ckpt")
    run([a.bin, "import", hf, "--out", ckpt], "import")
    want = ref_loss(model, toks)
    for tp, dp in ((1, 1), (2, 1), (1, 2), (2, 2)):
        got = mp_eval(a, ckpt, data, launcher, tp, dp)
        check(abs(got - want) <= 1e-5 * abs(want),
              "%s: eval tp %d x dp %d loss %.8f = transformers float64 %.8f" % (fam, tp, dp, got, want))

    prompt = [int(t) for t in toks[:5]]
    with torch.no_grad():
        gen = model.double().generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False,
                                      eos_token_id=None, pad_token_id=0)[0, len(prompt):].tolist()
    model.float()
    for tp in (1, 2):
        cmd = launcher(tp) + [a.bin, "sample", "--checkpoint", ckpt, "--ids", "--prompt", " ".join(map(str, prompt)),
                              "--tokens", "12", "--temperature", "0", "--ignore-eos"] + (["--tp", "2"] if tp > 1 else [])
        out = run(cmd, "sample tp %d" % tp).split()
        got = [int(t) for t in out if t.lstrip("-").isdigit()][-12:]
        check(got == gen, "%s: greedy sample (KV cache) on tp %d = transformers generate %s (got %s)"
              % (fam, tp, gen, got))

    ft = training_checks(a, fam, work, hf, ckpt, launcher)
    out = os.path.join(work, "export")
    run([a.bin, "export", os.path.join(ft, "checkpoints", "step_00000002"), "--out", out], "export")
    _, _, model_cls, _ = FAMILIES[fam]
    exported, info = getattr(transformers, model_cls).from_pretrained(out, output_loading_info=True,
                                                                      dtype=torch.float32)
    check(type(exported).__name__ == model_cls, "%s: export loads as %s (%s)" % (fam, model_cls, type(exported).__name__))
    check(not info["missing_keys"] and not info["unexpected_keys"],
          "%s: export loads with no missing %s or unexpected %s keys" % (fam, info["missing_keys"], info["unexpected_keys"]))
    exported.config._attn_implementation = "eager"
    want = ref_loss(exported.eval(), toks)
    got = mp_eval(a, os.path.join(ft, "checkpoints", "step_00000002"), data, launcher, 1, 1)
    check(abs(got - want) <= 1e-5 * abs(want),
          "%s: the fine-tuned export's transformers float64 loss %.8f = meshpoint eval %.8f" % (fam, want, got))
    text_check(a, cfg, fam, work)
    if failures:
        print("%d FAILED (the FAIL lines above)" % len(failures))
        return 1
    print("family %s end to end: ok" % fam)
    return 0


if __name__ == "__main__":
    sys.exit(main())
