#!/usr/bin/env bash
# tests/eval_sample_device.sh MESHPOINT DATA CONFIG WORKDIR DEVICE — `eval` and `sample` on DEVICE (cuda in
# scripts/gpu-check.sh; cpu-bf16 in ctest, the same bf16 storage through the same backend table) against the
# fp32 CPU, on a model trained here on the CPU (300 steps of CONFIG on DATA):
#   eval: the loss on DEVICE within 2e-3 relative of the CPU's (gpu_e2e's tolerance: bf16 activations and
#     weights, fp32 accumulation; cpu-bf16 measured 8e-5 against fp32 on this config, 2026-12-03);
#   sample, greedy (--temperature 0), 24 tokens after a 42-id prompt (the cache filled by chunks, then one
#     row per token): the ids on DEVICE with the KV cache (layers/llama.c's llama_forward_kv: the cache and
#     attn_fwd_kv on the device's table) equal to DEVICE
#     --no-kv-cache and to the CPU's. Greedy ids flip only where two logits lie within the bf16 error of each
#     other; the trained model's top-2 margins along this prompt are far wider (the cpu-bf16 run here agrees
#     with fp32), so a difference is a wrong kernel, not rounding.
set -u
bin=$1; data=$2; config=$3; work=$4; dev=$5
case="eval_sample_device ($dev)"
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train
py=${MP_PYTHON:-$(command -v python3 || echo /usr/bin/python3)}
train --run-dir "$work/run" --steps 300 --ckpt-every 300 --device cpu > "$work/train.log" 2>&1 ||
  fail "training the model on the CPU: $(tail -5 "$work/train.log")"
run() {   # NAME ARGS...: meshpoint ARGS into NAME.out, failing with its stderr
  local name=$1; shift
  "$bin" "$@" > "$work/$name.out" 2> "$work/$name.err" || fail "$* exited $?: $(cat "$work/$name.err")"
}
for d in cpu "$dev"; do run "eval_$d" eval --checkpoint "$work/run" --data "$data" --batches 2 --device "$d" --json; done
"$py" - "$work/eval_cpu.out" "$work/eval_$dev.out" "$dev" <<'PY' || fail "eval on $dev: $(cat "$work/eval_$dev.out")"
import json, sys
a, b = (json.load(open(f))["loss"] for f in sys.argv[1:3])
rel = abs(a - b) / abs(a)
print(f"eval loss: cpu {a:.7f} {sys.argv[3]} {b:.7f} (relative {rel:.2e}, bound 2e-3)")
sys.exit(0 if rel <= 2e-3 else 1)
PY
p=$(printf %s "the quick brown fox jumps over the lazy do" | od -An -tu1 | xargs)
g=(sample --checkpoint "$work/run" --ids --prompt "$p" --tokens 24 --temperature 0)
run greedy_cpu "${g[@]}" --device cpu
run greedy_kv "${g[@]}" --device "$dev"
run greedy_nokv "${g[@]}" --device "$dev" --no-kv-cache
[ "$(wc -w < "$work/greedy_cpu.out")" -eq 66 ] || fail "not 42 + 24 ids on the CPU: $(cat "$work/greedy_cpu.out")"
cmp -s "$work/greedy_kv.out" "$work/greedy_nokv.out" ||
  fail "greedy on $dev: the KV cache differs from --no-kv-cache:\n$(cat "$work/greedy_kv.out")\n$(cat "$work/greedy_nokv.out")"
cmp -s "$work/greedy_kv.out" "$work/greedy_cpu.out" ||
  fail "greedy on $dev differs from the CPU's:\n$(cat "$work/greedy_kv.out")\n$(cat "$work/greedy_cpu.out")"
echo "eval_sample_device: eval within 2e-3 and greedy ids (KV cache and not) equal to the CPU's on $dev"
