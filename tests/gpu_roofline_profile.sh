#!/usr/bin/env bash
# tests/gpu_roofline_profile.sh SRC WORK — bench/gpu_roofline.py's measured column and bench/bench_gpu.sh's op
# count, on real data: tests/data/h200/profile_1b_2steps.tsv is the per-op file (core/cuda/prof_cuda.h) of two
# profiled steps of the 1B shape on an H200 (2026-12-04, docs/BENCH_GPU.md). Every measured figure must be
# the file's total over the steps (GEMM keys with and without ' +=' summed), the "measured:" line their sum,
# and the op count bench_gpu.sh gives MP_CUDA_PROFILE_SKIP (gpu_roofline.py --count-ops) the sum of the
# calls column.
set -u
src=$1; work=$2
case=gpu_roofline_profile; . "$src/tests/lib.sh"
rm -rf "$work"; mkdir -p "$work"
PY=/usr/bin/python3; [ -x "$PY" ] || PY=python3
tsv="$src/tests/data/h200/profile_1b_2steps.tsv"
"$PY" "$src/bench/gpu_roofline.py" "$src/configs/llama_1b.json" --profile "$tsv" --profile-steps 2 > "$work/table" ||
  fail "gpu_roofline.py failed: $(tail -3 "$work/table")"
"$PY" - "$tsv" "$work/table" <<'PYEOF' || fail "the measured column is not the file's per-step times"
import re, sys
tsv, table = sys.argv[1:]
want = {}
for line in list(open(tsv))[1:]:
    key, calls, ms = line.rstrip("\n").split("\t")
    key = key.replace(" +=", "")
    want[key] = want.get(key, 0.0) + float(ms) / 2
rows = {}
for line in open(table):
    parts = line.split()
    if not parts or parts[0] in ("op", "roofline:", "measured:") or parts[-2] == "(none)":
        continue   # (none): a modeled op the file lacks (xent_fwd: the file predates it, three xent ops)
    # the op column: up to the first run of 2+ spaces (a key has single spaces; its width is the longest key's,
    # e.g. the file's separate q/k/v GEMM keys, which the fused-qkv model lists as not modeled)
    name = re.split(r"\s{2,}", line.strip())[0].replace(" (not modeled)", "")
    rows[name] = float(parts[-2])
bad = [(k, rows.get(k), round(v, 3)) for k, v in want.items() if k not in rows or abs(rows[k] - v) > 0.0015]
if bad:
    sys.exit(f"rows differ from the file: {bad[:5]}")
total = [l for l in open(table) if l.startswith("measured: ")][0]
if abs(float(total.split()[1]) - sum(want.values())) > 0.1:
    sys.exit(f"measured line {total.strip()} against {sum(want.values()):.1f}")
PYEOF
# the op count bench_gpu.sh skips (gpu_roofline.py --count-ops) against the calls column summed here
n=$("$PY" "$src/bench/gpu_roofline.py" --count-ops "$tsv") || fail "--count-ops failed"
want=$("$PY" -c 'import sys; print(sum(int(l.split("\t")[1]) for l in list(open(sys.argv[1]))[1:]))' "$tsv")
[ "$n" = "$want" ] || fail "--count-ops gave $n ops for $tsv, its calls column sums to $want"
echo "gpu_roofline_profile: measured column = the H200 file's per-step times; op count for MP_CUDA_PROFILE_SKIP $n"
