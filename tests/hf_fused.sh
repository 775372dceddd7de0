#!/usr/bin/env bash
# tests/hf_fused.sh MESHPOINT TOOL_HF_LOGITS SRC_DIR WORK — tests/python/hf_fused_e2e.py in
# scripts/bench_venv.sh's venv (transformers): a random Phi3ForCausalLM saved by transformers, with its fused
# qkv_proj and gate_up_proj, imported (tp 2 and 1 x 1; meshpoint's logits = transformers' float64) and
# exported (whole and sharded), loads back in Phi3ForCausalLM bitwise, with no missing or unexpected keys.
set -euo pipefail
bin=$1 tool=$2 src=$3 work=$4
source "$src/tests/lib.sh"
py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
exec "$py" "$src/tests/python/hf_fused_e2e.py" "$bin" "$tool" "$work"
