#!/usr/bin/env bash
# tests/family.sh BUILD_DIR SRC_DIR FAMILY MPIEXEC... — one model family end to end against transformers
# (tests/python/family_ref.py, in scripts/bench_venv.sh's venv): a random model made by the family's own
# transformers class imports; gradients, eval on 1x1 / tp 2 / dp 2 / tp 2 x dp 2 and greedy sample equal
# transformers' float64 numbers; a fine-tune on tp 2 x dp 2 is mesh-invariant, resumes bitwise, reshards
# tp 2 -> 1 -> 2 bitwise and verifies; its export loads as the same class with the same loss.
set -euo pipefail
build=$1 src=$2 family=$3
shift 3
source "$src/tests/lib.sh"
py=$("$src/scripts/bench_venv.sh") || fail "scripts/bench_venv.sh could not make the venv"
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
"$py" "$src/tests/python/family_ref.py" "$family" --bin "$build/meshpoint" --dump "$build/tool_llama_dump" \
    --equal "$build/tool_ckpt_equal" --src "$src" --work "$build/family_$family" --mpiexec "$*"
