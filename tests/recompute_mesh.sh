#!/bin/sh
# tests/recompute_mesh.sh MPIEXEC... -- MESHPOINT DATA CONFIG WORKDIR — `train --recompute full` through the
# real CLI is bitwise `--recompute none`, on every mesh: for CONFIG (Llama) and two family configs made
# here (Qwen2 with a sliding window of 6 keys from layer 1 on, T = 16: q/k/v biases and a window shorter
# than the sequence; Qwen3: q/k norms, head_dim 12 != hidden/heads), 3 layers each, 3 steps with a final
# checkpoint on --device cpu on 1x1, tp 2 (SP), tp 2 without SP, dp 2 and tp 2 x dp 2 (SP), and on
# --device cpu-bf16 on 1x1 and tp 2 x dp 2: the two runs log the same losses (metrics.jsonl, 17 digits)
# and save checkpoints that `meshpoint ckpt diff` finds bitwise equal (train_config.recompute is a memory
# choice it notes, not a difference). Then a resume that changes the mode: a --recompute none run stopped
# at step 2 and resumed with --recompute full ends bitwise where an uninterrupted none run ends.
set -eu
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
bin=$1; data=$2; config=$3; work=$4
case=recompute_mesh; . "$(dirname "$0")/lib.sh"   # fail
rm -rf "$work"; mkdir -p "$work"
common='"hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
 "num_key_value_heads": 2, "vocab_size": 256, "max_position_embeddings": 128,
 "train": {"batch_size": 4, "seq_len": 16, "lr": 1e-3, "warmup_steps": 1}'
echo "{\"model_type\": \"qwen2\", \"use_sliding_window\": true, \"sliding_window\": 6, \"max_window_layers\": 1, $common}" > "$work/qwen2w.json"
echo "{\"model_type\": \"qwen3\", \"head_dim\": 12, $common}" > "$work/qwen3.json"

# train NAME NP MODE ARGS...: 3 steps, a checkpoint at the end, into WORK/NAME
train() {
    name=$1; np=$2; mode=$3; shift 3
    if [ "$np" = 1 ]; then run="$bin"; else run="$launcher -np $np $bin"; fi
    # shellcheck disable=SC2086
    $run train --train-data "$data" --steps 3 --ckpt-every 3 --log-every 0 --run-dir "$work/$name" \
        --recompute "$mode" "$@" > "$work/$name.log" 2>&1 || { cat "$work/$name.log"; fail "$name: train failed"; }
}
losses() { grep -o '"loss": [^,}]*' "$work/$1/metrics.jsonl"; }
# same A B WHAT: bitwise losses and final checkpoints
same() {
    losses "$1" > "$work/$1.loss"; losses "$2" > "$work/$2.loss"
    test "$(wc -l < "$work/$1.loss")" -eq 3 || fail "$1 logged $(wc -l < "$work/$1.loss") steps, not 3"
    cmp -s "$work/$1.loss" "$work/$2.loss" || { paste "$work/$1.loss" "$work/$2.loss"; fail "$3: losses differ"; }
    "$bin" ckpt diff "$work/$1" "$work/$2" > "$work/$2.diff" 2>&1 || { cat "$work/$2.diff"; fail "$3: checkpoints differ"; }
    echo "ok: $3: 3 losses and the final checkpoint bitwise"
}
for cfg in "$config" "$work/qwen2w.json" "$work/qwen3.json"; do
    c=$(basename "$cfg" .json)
    for mesh in "1:" "2:--tp 2" "2:--tp 2 --no-sp" "2:--dp 2" "4:--tp 2 --dp 2"; do
        np=${mesh%%:*}; flags=${mesh#*:}
        tag=$c-np$np$(echo "$flags" | tr -d ' -')
        # shellcheck disable=SC2086
        train "$tag-none" "$np" none --config "$cfg" $flags
        # shellcheck disable=SC2086
        train "$tag-full" "$np" full --config "$cfg" $flags
        same "$tag-none" "$tag-full" "$c cpu np $np $flags: --recompute full vs none"
    done
    for mesh in "1:" "4:--tp 2 --dp 2"; do
        np=${mesh%%:*}; flags=${mesh#*:}
        tag=$c-bf16-np$np
        # shellcheck disable=SC2086
        train "$tag-none" "$np" none --config "$cfg" --device cpu-bf16 $flags
        # shellcheck disable=SC2086
        train "$tag-full" "$np" full --config "$cfg" --device cpu-bf16 $flags
        same "$tag-none" "$tag-full" "$c cpu-bf16 np $np $flags: --recompute full vs none"
    done
done
grep -q "memory plan: activations .* with --recompute none, .* with --recompute full (this run: full" \
    "$work/cli_tiny-np1-full.log" || fail "no plan line comparing the two modes"

# a resume may change the mode: none to step 2, full from there, against none throughout
c=$(basename "$config" .json)
"$bin" train --config "$config" --train-data "$data" --steps 3 --stop-at 2 --log-every 0 \
    --run-dir "$work/switch" --recompute none > "$work/switch1.log" 2>&1 || { cat "$work/switch1.log"; fail "switch: first part"; }
"$bin" train --config "$config" --train-data "$data" --steps 3 --ckpt-every 3 --log-every 0 \
    --run-dir "$work/switch" --recompute full --resume > "$work/switch2.log" 2>&1 || { cat "$work/switch2.log"; fail "switch: resume"; }
grep -q "resumed from .*step_00000002 at step 2" "$work/switch2.log" || { cat "$work/switch2.log"; fail "switch: no resume at step 2"; }
same "$c-np1-none" switch "a --recompute none run resumed at step 2 with --recompute full"
echo "ok ($case)"
