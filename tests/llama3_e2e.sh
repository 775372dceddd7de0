#!/bin/bash
# tests/llama3_e2e.sh MPIEXEC... -- MESHPOINT WORKDIR — a Llama 3.2 config.json (tests/configs/hf_llama3_2_1b.json:
# llama3 rope_scaling, tied embeddings, the 128256-token vocabulary) shrunk to a small width and depth, trained
# on an llm.c Llama 3 token file (uint32 ids up to 128255, written as docs/TOKENIZER.md's Python writer does) on one
# process and on tp 2 x dp 2: it trains, the first loss is near ln(128256), and every step agrees within 1e-5.
set -u
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
bin=$1; work=$2
case=llama3_e2e
source "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
src=$(cd "$(dirname "$0")/.." && pwd)
/usr/bin/python3 - "$src/tests/configs/hf_llama3_2_1b.json" "$work/cfg.json" "$work/tokens.bin" <<'PY' || fail "setup"
import json, sys
import numpy as np
c = json.load(open(sys.argv[1]))
c.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
         head_dim=16)
c["rope_scaling"]["original_max_position_embeddings"] = 16   # the bands matter at seq_len 16
c["train"] = {"batch_size": 4, "seq_len": 16, "lr": 1e-3, "warmup_steps": 1}
json.dump(c, open(sys.argv[2], "w"))
rng = np.random.default_rng(7)
toks = rng.integers(0, 128256, 4000).astype(np.uint32)
toks[::50] = 128000                                           # <|begin_of_text|>
header = np.zeros(256, dtype=np.int32)
header[0], header[1], header[2] = 20240801, 7, len(toks)
with open(sys.argv[3], "wb") as f:
    f.write(header.tobytes())
    f.write(toks.tobytes())
PY
"$bin" train --config "$work/cfg.json" --train-data "$work/tokens.bin" --steps 3 --run-dir "$work/one" --log-every 0 \
    >"$work/one.log" 2>&1 || fail "1 process: $(cat "$work/one.log")"
# shellcheck disable=SC2086
$launcher -np 4 "$bin" train --config "$work/cfg.json" --train-data "$work/tokens.bin" --steps 3 --run-dir "$work/mesh" \
    --tp 2 --dp 2 --log-every 0 >"$work/mesh.log" 2>&1 || fail "tp 2 x dp 2: $(cat "$work/mesh.log")"
/usr/bin/python3 - "$work/one/metrics.jsonl" "$work/mesh/metrics.jsonl" <<'PY' || fail "losses"
import json, math, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 3, (len(a), len(b))
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("Llama 3.2 shape (llama3 rope, vocab 128256, uint32 tokens): step-1 loss %.6f (ln V = %.6f); "
      "1 process vs tp 2 x dp 2 worst relative difference %.2e" % (a[0], math.log(128256), rel))
assert abs(a[0] - math.log(128256)) < 0.5 and rel <= 1e-5
PY
echo "llama3 end to end: ok"
