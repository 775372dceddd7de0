"""tests/python/hf_fused_e2e.py MESHPOINT TOOL_HF_LOGITS WORKDIR — a family whose HF checkpoints fuse projections (Phi-3:
self_attn.qkv_proj = [q; k; v], mlp.gate_up_proj = [gate; up]) through import and export, against
transformers itself (scripts/bench_venv.sh's venv):

  1. a tiny random Phi3ForCausalLM (transformers' own class, hidden 64, Phi-3 mini's vocabulary, weights and
     norms perturbed so every row matters) saved by save_pretrained, as a user's directory is;
  2. `import` on tp 2 (each rank's q/k/v and gate/up boxes are row ranges of the fused tensors, shifted)
     and on 1 x 1;
  3. the imported checkpoint's logits (tests/tool_hf_logits.c: meshpoint's forward) are transformers'
     float64 logits of the original within 1e-4 (max|a-b|/max|b|): q, k, v and gate, up were taken from
     the right rows (a consistent mix-up would still round-trip bitwise below);
  4. `export` of each, whole and sharded (--max-shard-size small enough that the fused tensors get files
     of their own): the same tensor names as transformers saved, every tensor bitwise equal (fp32), and
     config.json says phi3 / Phi3ForCausalLM;
  5. Phi3ForCausalLM.from_pretrained of the export: no missing, unexpected or mismatched keys, the same
     class, the state dict bitwise the original's, and the same logits.

"""
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import torch
from safetensors import safe_open
from transformers import Phi3Config, Phi3ForCausalLM

failures = []


def check(cond, what):
    print(("ok: " if cond else "FAIL: ") + what, flush=True)
    if not cond:
        failures.append(what)


def mp(bin_, *args):
    r = subprocess.run([bin_] + list(args), capture_output=True, text=True, check=False,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    return r


def tensors(d):
    """Every tensor of the safetensors files of HF directory d, by name (torch, as stored)."""
    out = {}
    for f in sorted(os.listdir(d)):
        if f.endswith(".safetensors"):
            with safe_open(os.path.join(d, f), framework="pt") as s:
                for k in s.keys():
                    assert k not in out, k
                    out[k] = s.get_tensor(k)
    return out


def make_model(d):
    # Phi-3 mini's vocabulary and token ids (Phi3Config's defaults): an export's config.json does not
    # carry pad_token_id, and Phi3Config's default 32000 needs a vocabulary above it
    cfg = Phi3Config(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False,
                     sliding_window=None)
    torch.manual_seed(36)
    model = Phi3ForCausalLM(cfg)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
            else:
                p.copy_(1.0 + 0.2 * torch.randn_like(p))
    model.save_pretrained(d)
    return model


def main():
    bin_, tool, work = sys.argv[1], sys.argv[2], sys.argv[3]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    src = os.path.join(work, "phi3")
    model = make_model(src)
    orig = tensors(src)
    check(any(k.endswith("qkv_proj.weight") for k in orig) and any(k.endswith("gate_up_proj.weight") for k in orig),
          "transformers saved fused qkv_proj and gate_up_proj")
    r = mp(bin_, "import", src, "--out", os.path.join(work, "ck_tp2"), "--tp", "2", "--dp", "1")
    check(r.returncode == 0, "import --tp 2 of transformers' Phi-3 directory\n" + r.stderr)
    r = mp(bin_, "import", src, "--out", os.path.join(work, "ck_1"))
    check(r.returncode == 0, "import on 1 x 1\n" + r.stderr)
    ids = torch.randint(0, model.config.vocab_size, (2, 12), generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        ref_logits = model(ids).logits
    dump, V = os.path.join(work, "logits"), model.config.vocab_size
    r = subprocess.run([tool, os.path.join(work, "ck_1"), dump, "1234", "2", "16"], capture_output=True, text=True)
    check(r.returncode == 0, "tool_hf_logits on the import\n" + r.stderr)
    lg = torch.from_numpy(np.fromfile(os.path.join(dump, "logits.f32"), dtype="<f4").astype(np.float64))
    tok = torch.from_numpy(np.fromfile(os.path.join(dump, "inputs.i32"), dtype="<i4").astype(np.int64)).view(2, 16)
    with torch.no_grad():
        ref = model.to(torch.float64)(tok).logits.reshape(-1, V)
        model.to(torch.float32)
    err = ((lg.view(-1, V) - ref).abs().max() / ref.abs().max()).item()
    check(err <= 1e-4, "meshpoint's logits of the import = transformers' float64 (max|a-b|/max|b| %.3e)" % err)
    for ck in ("ck_tp2", "ck_1"):
        for shard in ("5GB", "30KB"):
            out = os.path.join(work, "hf_%s_%s" % (ck, shard))
            r = mp(bin_, "export", os.path.join(work, ck), "--out", out, "--max-shard-size", shard)
            check(r.returncode == 0, "export %s --max-shard-size %s\n%s" % (ck, shard, r.stderr))
            if r.returncode:
                continue
            back = tensors(out)
            check(sorted(back) == sorted(orig), "%s %s: the tensor names transformers saved (%s)" %
                  (ck, shard, sorted(set(back) ^ set(orig))))
            same = [k for k in orig if k in back and back[k].dtype == orig[k].dtype and torch.equal(back[k], orig[k])]
            check(len(same) == len(orig), "%s %s: every tensor bitwise (%d of %d)" % (ck, shard, len(same), len(orig)))
            with open(os.path.join(out, "config.json")) as f:
                c = json.load(f)
            check(c.get("model_type") == "phi3" and c.get("architectures") == ["Phi3ForCausalLM"],
                  "%s %s: config.json model_type %r architectures %r" % (ck, shard, c.get("model_type"),
                                                                         c.get("architectures")))
            m2, info = Phi3ForCausalLM.from_pretrained(out, output_loading_info=True, torch_dtype=torch.float32)
            bad = {k: v for k, v in info.items() if v}
            check(not bad, "%s %s: from_pretrained reports nothing missing/unexpected/mismatched (%s)" % (ck, shard, bad))
            check(type(m2) is Phi3ForCausalLM, "%s %s: loads as Phi3ForCausalLM" % (ck, shard))
            sd, sd2 = model.state_dict(), m2.state_dict()
            check(sorted(sd) == sorted(sd2) and all(torch.equal(sd[k], sd2[k]) for k in sd),
                  "%s %s: the loaded state dict is the original's, bitwise" % (ck, shard))
            m2.eval()
            with torch.no_grad():
                check(torch.equal(m2(ids).logits, ref_logits), "%s %s: the same logits" % (ck, shard))
    if failures:
        sys.exit("FAILED: %d check(s):\n  " % len(failures) + "\n  ".join(f.splitlines()[0] for f in failures))
    print("ok: Phi-3's fused tensors through import and export, against transformers", flush=True)


if __name__ == "__main__":
    main()
