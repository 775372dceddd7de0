"""bench/sample_peer.py — the transformers side of bench/bench_sample.sh (run in scripts/bench_venv.sh's venv).

  sample_peer.py make CONFIG_JSON OUT_DIR SEED
      A randomly initialised LlamaForCausalLM of that config (transformers' own init, torch.manual_seed(SEED)),
      saved with save_pretrained in float32 (model.safetensors + config.json), what `meshpoint import` reads.
  sample_peer.py generate MODEL_DIR "ID ID ..." NEW_TOKENS ROUNDS THREADS ATTN
      model.generate(greedy, use_cache=True, max_new_tokens=NEW_TOKENS, float32, torch.set_num_threads(THREADS),
      attn_implementation ATTN: "sdpa" (transformers' default) or "eager",
      end-of-sequence disabled so every round makes NEW_TOKENS tokens), once untimed for 4 tokens (warm-up), then ROUNDS
      timed rounds: prints "round R SECONDS" per round (the generate call alone, wall clock) and then
      "ids ID ID ..." (prompt and continuation), for the comparison with meshpoint's greedy tokens.
"""
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM


def make(config_path, out_dir, seed):
    torch.manual_seed(int(seed))
    cfg = LlamaConfig.from_json_file(config_path)
    cfg.dtype = "float32"
    model = LlamaForCausalLM(cfg).to(torch.float32)
    model.save_pretrained(out_dir, safe_serialization=True)
    n = sum(p.numel() for p in model.parameters())
    print(f"made {out_dir}: {n} parameters", file=sys.stderr)


def generate(model_dir, ids, new_tokens, rounds, threads, attn):
    torch.set_num_threads(int(threads))
    model = LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation=attn).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    x = torch.tensor([[int(t) for t in ids.split()]], dtype=torch.long)
    kw = dict(max_new_tokens=int(new_tokens), do_sample=False, use_cache=True, attention_mask=torch.ones_like(x))
    with torch.inference_mode():
        model.generate(x, **dict(kw, max_new_tokens=4))   # warm-up
        for r in range(int(rounds)):
            t0 = time.perf_counter()
            out = model.generate(x, **kw)
            print(f"round {r + 1} {time.perf_counter() - t0:.6f}", flush=True)
    assert out.shape[1] == x.shape[1] + int(new_tokens), out.shape
    print("ids " + " ".join(str(int(t)) for t in out[0]))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "make":
        make(*sys.argv[2:])
    elif len(sys.argv) == 8 and sys.argv[1] == "generate":
        generate(*sys.argv[2:])
    else:
        sys.exit(__doc__)
