#!/usr/bin/env bash
# tests/config_keys.sh BIN DATA WORKDIR — an HF config.json as published is a valid config:
# a key transformers' LlamaConfig does not know is accepted with one warning naming it (one,
# also from a 2-rank job: rank 0 speaks), bookkeeping keys (unk_token_id, auto_map, ...) silently, a
# typo inside meshpoint's own "train" object stays an error, and a key that changes the math and cannot
# be represented (attention_bias true) stays an error naming it. A near typo of a key with an effect that
# the file lacks (rope_thetta without rope_theta) is an error, "did you mean rope_theta?"; with
# its twin present it is the warning, with the hint. A published config (SmolLM2-135M's) is read and
# planned by `train` without a warning.
set -uo pipefail
bin=$1 data=$2 work=$3 case=config_keys
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
rm -rf "$work" && mkdir -p "$work"
shape='"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256'
printf '{%s, "unk_token_id": 0, "auto_map": {"AutoModel": "m.M"}, "foo_bar": 1, "train": {"seq_len": 16, "batch_size": 2}}\n' \
    "$shape" >"$work/extra.json"
expect 0 "model: 34976 parameters" "$work/one.log" "$bin" train --config "$work/extra.json" --train-data "$data" \
    --steps 0 --run-dir "$work/r1"
[ "$(grep -c 'warning: config .*extra.json: key "foo_bar": not a key of transformers' "$work/one.log")" -eq 1 ] ||
    fail "expected one warning naming foo_bar: $(cat "$work/one.log")"
grep -Eq 'unk_token_id|auto_map' "$work/one.log" && fail "bookkeeping keys should pass silently: $(cat "$work/one.log")"
expect 0 "model: 34976 parameters" "$work/two.log" mpiexec --allow-run-as-root --oversubscribe -np 2 "$bin" train --config "$work/extra.json" \
    --train-data "$data" --steps 0 --run-dir "$work/r2" --dp 2
[ "$(grep -c 'key "foo_bar"' "$work/two.log")" -eq 1 ] || fail "2 ranks: expected one warning: $(cat "$work/two.log")"
grep -q 'foo_bar.*did you mean' "$work/one.log" && fail "foo_bar is near no key: no hint expected: $(cat "$work/one.log")"
# a near typo of a key with an effect that the file lacks: exit 2 naming the file and the key meant
for typo in rope_thetta:rope_theta num_key_value_head:num_key_value_heads rms_norm_epsilon:rms_norm_eps; do
    printf '{%s, "%s": 1e-5}\n' "${shape/, \"num_key_value_heads\": 2/}" "${typo%%:*}" >"$work/near.json"
    expect 2 "error: $work/near.json: key \"${typo%%:*}\": not a key of transformers' LlamaConfig; did you mean ${typo#*:}\\?" \
        "$work/near.log" "$bin" train --config "$work/near.json" --train-data "$data" --steps 0 --run-dir "$work/r6"
done
# ... whose twin is in the file: one warning with the hint, and the run goes on
printf '{%s, "rope_theta": 10000, "rope_thetta": 500000, "train": {"seq_len": 16, "batch_size": 2}}\n' "$shape" >"$work/twin.json"
expect 0 "model: 34976 parameters" "$work/twin.log" "$bin" train --config "$work/twin.json" --train-data "$data" \
    --steps 0 --run-dir "$work/r7"
grep -q 'warning: config .*twin.json: key "rope_thetta": not a key of transformers.*(did you mean rope_theta?)' \
    "$work/twin.log" || fail "expected a warning with the hint: $(cat "$work/twin.log")"
printf '{%s, "train": {"stepz": 3}}\n' "$shape" >"$work/typo.json"
expect 2 'error: .*typo.json: train: unknown key "stepz"' "$work/typo.log" "$bin" train --config "$work/typo.json" \
    --train-data "$data" --run-dir "$work/r3"
printf '{%s, "attention_bias": true}\n' "$shape" >"$work/bias.json"
expect 2 'error: .*bias.json: key "attention_bias": biases are not supported' "$work/bias.log" "$bin" train \
    --config "$work/bias.json" --train-data "$data" --run-dir "$work/r4"
# (planned, not built: --max-memory 1M refuses the plan, which proves the file was read as the model)
expect 2 "memory plan: this rank needs [0-9.]+ GiB, above --max-memory 1.0 MiB" "$work/smol.log" "$bin" train \
    --config "$src/tests/data/hf_configs/smollm2-135m.json" --train-data "$data" --batch 1 --seq-len 16 \
    --run-dir "$work/r5" --max-memory 1M
grep -q "warning" "$work/smol.log" && fail "a published config should load without warnings: $(cat "$work/smol.log")"
echo "PASS ($case)"
