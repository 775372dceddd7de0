#!/usr/bin/env bash
# tests/gpu_roofline_baseline.sh SRC WORK — bench/gpu_roofline.py's --baseline: the per-op times of the steady
# steps are the longer profiled run minus the run of the first step alone (bench/bench_gpu.sh runs both).
# The data are real: tests/data/h200/profile_1b_2steps.tsv is the per-op file of two profiled steps of the 1B
# shape on an H200 (2026-12-04, docs/BENCH_GPU.md). Here a first step is made from its per-step half with a
# one-time cost of 63 ms on the q/o GEMM (what the first step's cuBLASLt heuristics cost there); the file of
# 1 + 2 steps is that first step plus the two. Subtracting must give the two steps' times exactly, and
# without --baseline the first step's cost shows (the check fails if the subtraction is dropped).
set -u
src=$1; work=$2
case=gpu_roofline_baseline; . "$src/tests/lib.sh"
rm -rf "$work"; mkdir -p "$work"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
two="$src/tests/data/h200/profile_1b_2steps.tsv"
"$PY" - "$two" "$work/first.tsv" "$work/three.tsv" <<'PYEOF' || fail "could not build the profile files"
import sys
two, first, three = sys.argv[1:]
rows = [l.rstrip("\n").split("\t") for l in open(two)][1:]
with open(first, "w") as f1, open(three, "w") as f3:
    f1.write("key\tcalls\ttotal_ms\n"); f3.write("key\tcalls\ttotal_ms\n")
    for key, calls, ms in rows:
        c1, m1 = int(calls) // 2, float(ms) / 2 + (63.0 if key == "gemm 16384x2048x2048 t01 bf16" else 0.0)
        f1.write(f"{key}\t{c1}\t{m1:.6f}\n")
        f3.write(f"{key}\t{c1 + int(calls)}\t{m1 + float(ms):.6f}\n")
PYEOF
cfg="$src/configs/llama_1b.json"
"$PY" "$src/bench/gpu_roofline.py" "$cfg" --profile "$two" --profile-steps 2 > "$work/direct" || fail "gpu_roofline.py on the 2-step file failed"
"$PY" "$src/bench/gpu_roofline.py" "$cfg" --profile "$work/three.tsv" --baseline "$work/first.tsv" --profile-steps 2 \
  > "$work/steady" || fail "gpu_roofline.py --baseline failed"
"$PY" "$src/bench/gpu_roofline.py" "$cfg" --profile "$work/three.tsv" --profile-steps 3 > "$work/all3" || fail "3-step run failed"
# the measured column of every row: --baseline must reproduce the 2-step file's figures exactly
diff <(awk '{print $1, $2, $3, $(NF-1)}' "$work/direct") <(awk '{print $1, $2, $3, $(NF-1)}' "$work/steady") > "$work/diff" ||
  fail "--baseline did not give the steady steps' times: $(head -5 "$work/diff")"
grep -q '^measured: ' "$work/steady" || fail "no measured line: $(tail -3 "$work/steady")"
q=$(awk '/^gemm 16384x2048x2048 t01 bf16/ {print $(NF-1)}' "$work/steady")
q3=$(awk '/^gemm 16384x2048x2048 t01 bf16/ {print $(NF-1)}' "$work/all3")
"$PY" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if b > a + 15 else 1)" "$q" "$q3" ||
  fail "without --baseline the first step's 63 ms should show on the q/o GEMM ($q3 ms vs $q ms)"
echo "gpu_roofline_baseline: the steady steps' per-op times are the longer run minus the first step's (q/o GEMM $q ms; $q3 ms with the first step averaged in)"
