"""tests/python/family_config.py — meshpoint's config.json reading and writing against transformers itself
(run in the scripts/bench_venv.sh venv: transformers 5.24.0 pinned).

For each case (the published files of tests/data/hf_configs of every family, and small configs that omit
the keys whose defaults differ between families): transformers builds its config class from the input,
and from the JSON meshpoint writes back (tests/tool_config_json: llama_config_parse then
llama_config_to_json); both must give the same *ForCausalLM class (AutoModelForCausalLM.from_config on
the meta device) and the same attributes that shape the math: sizes, effective head_dim, eps, RoPE theta,
tying, and each layer's attention window. A default meshpoint gets wrong (a missing key read as another
value than the family's class has) or a key it fails to write fails here.

Usage: family_config.py TOOL SRC
"""
import json, os, subprocess, sys, tempfile

import torch
from transformers import AutoConfig, AutoModelForCausalLM

SHAPE = {"hidden_size": 256, "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 32,
         "vocab_size": 256}
SMALL = [
    {"model_type": "llama"},
    {"model_type": "mistral"},
    {"model_type": "mistral", "sliding_window": None, "head_dim": 16},
    {"model_type": "qwen2"},
    {"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 64, "max_window_layers": 2},
    {"model_type": "qwen3"},
    {"model_type": "qwen3", "use_sliding_window": True, "sliding_window": 32, "max_window_layers": 0,
     "layer_types": ["full_attention"] + ["sliding_attention"] * 3},
    {"model_type": "phi3", "pad_token_id": None},   # (its default 32000 is outside this vocabulary)
    {"model_type": "phi3", "pad_token_id": None, "sliding_window": 2047, "num_key_value_heads": 8},
]


def windows(c):
    """Each layer's window as the family's attention reads it (None: full causal)."""
    L = c.num_hidden_layers
    if c.model_type in ("qwen2", "qwen3"):
        return [c.sliding_window if c.layer_types[i] == "sliding_attention" else None for i in range(L)]
    if c.model_type in ("mistral", "phi3"):
        return [c.sliding_window] * L
    return [None] * L


def summary(c):
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(c)
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return {"config": type(c).__name__, "model": type(model).__name__, "hidden": c.hidden_size,
            "inter": c.intermediate_size, "layers": c.num_hidden_layers, "heads": c.num_attention_heads,
            "kv": c.num_key_value_heads, "head_dim": hd, "vocab": c.vocab_size,
            "max_pos": c.max_position_embeddings, "eps": c.rms_norm_eps,
            "theta": c.rope_parameters["rope_theta"], "rope_type": c.rope_parameters.get("rope_type"),
            "tied": c.tie_word_embeddings, "attention_bias": getattr(c, "attention_bias", False),
            "windows": windows(c),
            # the q/k/v bias and q/k norm parameters the class builds: what the family implies
            "params": sorted({n.split(".", 3)[-1] for n, _ in model.named_parameters() if ".layers.0." in n})}


def main():
    tool, src = sys.argv[1], sys.argv[2]
    hf = os.path.join(src, "tests/data/hf_configs")
    cases = [(f, json.load(open(os.path.join(hf, f)))) for f in sorted(os.listdir(hf))
             if f.endswith(".json") and json.load(open(os.path.join(hf, f))).get("model_type") != "llama"]
    cases += [("small " + json.dumps(s), {**SHAPE, **s}) for s in SMALL]
    fails = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, d in cases:
            path = os.path.join(tmp, "in.json")
            json.dump(d, open(path, "w"))
            out = subprocess.run([tool, path], capture_output=True, text=True)
            if out.returncode:
                print(f"FAIL {name}: meshpoint refused it: {out.stderr.strip()}")
                fails += 1
                continue
            back = json.loads(out.stdout)
            d = {k: v for k, v in d.items() if k != "auto_map"}   # the Hub's remote code: not loaded offline
            want = summary(AutoConfig.for_model(d.pop("model_type"), **d))
            got = summary(AutoConfig.for_model(back.pop("model_type"), **back))
            diff = {k: (want[k], got[k]) for k in want if want[k] != got[k]}
            print(("FAIL " if diff else "ok   ") + name + (f": {diff}" if diff else f" ({want['model']})"))
            fails += bool(diff)
    print(f"{len(cases) - fails} of {len(cases)} configs agree with transformers")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
