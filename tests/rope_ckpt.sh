#!/bin/bash
# tests/rope_ckpt.sh MESHPOINT DATA CONFIG WORKDIR — a llama3-scaled model (CONFIG) through checkpoints:
#   1. the scaling is in effect: step 1's loss differs from the same config without rope_scaling;
#   2. the checkpoint's model_config carries rope_scaling exactly (ckpt show --json);
#   3. --resume of the scaled run continues (the stored config parses back and matches), and the resumed
#      losses equal an uninterrupted run's bit for bit;
#   4. resuming or --init-from with the unscaled config is refused (exit 2) naming rope_scaling.
set -u
bin=$1; data=$2; config=$3; work=$4
case=rope_ckpt
source "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
losses() { /usr/bin/python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }
/usr/bin/python3 -c 'import json,sys; c=json.load(open(sys.argv[1])); c["rope_scaling"]=None; json.dump(c, open(sys.argv[2], "w"))' \
    "$config" "$work/plain.json"

train --steps 4 --run-dir "$work/whole" >"$work/whole.log" 2>&1 || fail "uninterrupted: $(cat "$work/whole.log")"
"$bin" train --config "$work/plain.json" --train-data "$data" --log-every 0 --steps 1 --run-dir "$work/plain" \
    >"$work/plain.log" 2>&1 || fail "plain: $(cat "$work/plain.log")"
a=$(losses "$work/whole/metrics.jsonl" | cut -d' ' -f1); b=$(losses "$work/plain/metrics.jsonl")
[ "$a" != "$b" ] || fail "rope_scaling changed nothing (step-1 loss $a both ways)"

train --steps 4 --stop-at 2 --ckpt-every 2 --run-dir "$work/split" >"$work/split1.log" 2>&1 || fail "first half: $(cat "$work/split1.log")"
"$bin" ckpt show "$work/split" --json >"$work/show.json" 2>"$work/show.log" || fail "ckpt show: $(cat "$work/show.log")"
/usr/bin/python3 - "$work/show.json" "$config" <<'PY' || fail "rope_scaling not stored: $(cat "$work/show.json")"
import json, sys
got = json.load(open(sys.argv[1]))["model_config"]["rope_scaling"]
want = json.load(open(sys.argv[2]))["rope_scaling"]
assert got == want, (got, want)
PY
train --steps 4 --resume --ckpt-every 2 --run-dir "$work/split" >"$work/split2.log" 2>&1 || fail "resume: $(cat "$work/split2.log")"
[ "$(losses "$work/split/metrics.jsonl")" = "$(losses "$work/whole/metrics.jsonl")" ] ||
    fail "resumed $(losses "$work/split/metrics.jsonl") vs uninterrupted $(losses "$work/whole/metrics.jsonl")"

expect 2 'saved with rope_scaling = llama3 \(factor 8, .*\), the config says default' "$work/bad1.log" \
    "$bin" train --config "$work/plain.json" --train-data "$data" --steps 6 --resume --run-dir "$work/split"
expect 2 '--init-from: .*rope_scaling = llama3' "$work/bad2.log" \
    "$bin" train --config "$work/plain.json" --train-data "$data" --steps 1 --init-from "$work/split" --run-dir "$work/x"
echo "rope_scaling through checkpoints: ok"
