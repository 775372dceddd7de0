#!/bin/bash
# tests/init_from.sh MPIEXEC... -- MESHPOINT DATA CONFIG WORKDIR — `meshpoint train --init-from`:
# a new run from the weights of a checkpoint.
#   1. a source run trains 4 steps (1 process) and saves; a model-only copy on tp 2 is made by reshard;
#   2. --init-from the full checkpoint on 1 process and on tp 2 x dp 2 (mpiexec -np 4): every step's loss
#      agrees within 1e-5 relative;
#   3. --init-from the model-only tp 2 copy on 1 process gives bitwise the same losses as from the full
#      checkpoint (fresh moments: the source's are ignored), also when its run state (data_cursor) is
#      unreadable, and from the source named by its run directory;
#   4. the first step's loss equals `eval --checkpoint SRC` of that batch (the loaded weights, unchanged);
#   5. the new run starts at step 1 with the warmup's first learning rate (a new schedule), and every save
#      records the source in metadata "init_from", also after a --resume of the new run;
#   6. export -> import for tp 2 x dp 2 -> --init-from (fine-tuning an HF model): 1 process and tp 2 x dp 2
#      agree within 1e-5, and equal --init-from the source bit for bit.
set -u
launcher=""
while [ "$1" != "--" ]; do launcher="$launcher $1"; shift; done
shift
bin=$1; data=$2; config=$3; work=$4
case=init_from
source "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
export OPENBLAS_NUM_THREADS=1
# the model's own losses are compared: 17 digits in metrics.jsonl
losses() { /usr/bin/python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }

# 1. the source, and a model-only copy laid out for tp 2
train --steps 4 --ckpt-every 4 --run-dir "$work/src" >"$work/src.log" 2>&1 || fail "source run: $(cat "$work/src.log")"
src=$work/src/checkpoints/step_00000004
"$bin" reshard "$src" --tp 2 --dp 1 --model-only --out "$work/mo" >"$work/mo.log" 2>&1 || fail "reshard: $(cat "$work/mo.log")"

# 2. 1 process vs tp 2 x dp 2 from the full checkpoint
train --steps 6 --init-from "$src" --run-dir "$work/one" --ckpt-every 3 >"$work/one.log" 2>&1 || fail "1 process: $(cat "$work/one.log")"
# shellcheck disable=SC2086
$launcher -np 4 "$bin" train --config "$config" --train-data "$data" --log-every 0 --steps 6 --init-from "$src" \
    --run-dir "$work/mesh" --tp 2 --dp 2 >"$work/mesh.log" 2>&1 || fail "tp 2 x dp 2: $(cat "$work/mesh.log")"
/usr/bin/python3 - "$work/one/metrics.jsonl" "$work/mesh/metrics.jsonl" <<'PY' || fail "1 process and tp 2 x dp 2 disagree"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 6, (len(a), len(b))
rel = [abs(x - y) / abs(x) for x, y in zip(a, b)]
print("init-from, 1 process vs tp 2 x dp 2: step-1 loss %.9g vs %.9g; worst relative difference over 6 steps %.2e"
      % (a[0], b[0], max(rel)))
sys.exit(0 if max(rel) <= 1e-5 else 1)
PY

# 3. from the model-only tp 2 copy, named by its directory: bitwise the same run
train --steps 6 --init-from "$work/mo" --run-dir "$work/one_mo" >"$work/one_mo.log" 2>&1 || fail "model-only: $(cat "$work/one_mo.log")"
[ "$(losses "$work/one/metrics.jsonl")" = "$(losses "$work/one_mo/metrics.jsonl")" ] ||
    fail "from the model-only copy: $(losses "$work/one_mo/metrics.jsonl") vs $(losses "$work/one/metrics.jsonl")"
# the run state is not needed (an imported checkpoint has none): with data_cursor unreadable, eval (which
# reads it) refuses the copy and --init-from still starts the same run
cp -r "$work/mo" "$work/mo_norun"
"$(dirname "$bin")/tool_ckpt_craft" "$work/mo_norun/index.h5" meta data_cursor '"none"' >"$work/craft.log" 2>&1 ||
    fail "craft: $(cat "$work/craft.log")"
expect 1 'data_cursor' "$work/eval_norun.log" "$bin" eval --config "$config" --checkpoint "$work/mo_norun" --data "$data"
train --steps 2 --init-from "$work/mo_norun" --run-dir "$work/one_norun" >"$work/one_norun.log" 2>&1 ||
    fail "no run state: $(cat "$work/one_norun.log")"
[ "$(losses "$work/one_norun/metrics.jsonl")" = "$(losses "$work/one/metrics.jsonl" | cut -d' ' -f1-2)" ] ||
    fail "from the copy without run state"
# and a run directory names its newest checkpoint
train --steps 1 --init-from "$work/src" --run-dir "$work/one_rd" >"$work/one_rd.log" 2>&1 || fail "run dir: $(cat "$work/one_rd.log")"
[ "$(losses "$work/one_rd/metrics.jsonl")" = "$(losses "$work/one/metrics.jsonl" | cut -d' ' -f1)" ] || fail "from the run directory"

# 4. step 1 of the new run = eval of the source on that batch (the first batch of the data)
batch=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train"]["batch_size"])' "$config")
seq=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["train"]["seq_len"])' "$config")
"$bin" eval --config "$config" --checkpoint "$src" --data "$data" --batch "$batch" --seq-len "$seq" --batches 1 --json \
    >"$work/eval.json" 2>"$work/eval.log" || fail "eval: $(cat "$work/eval.log")"
/usr/bin/python3 - "$work/eval.json" "$work/one/metrics.jsonl" "$work/src/metrics.jsonl" <<'PY' || fail "step 1 vs eval"
import json, sys
ev = json.load(open(sys.argv[1]))["loss"]
first = [json.loads(l) for l in open(sys.argv[2]) if '"loss"' in l][0]
src1 = [json.loads(l) for l in open(sys.argv[3]) if '"loss"' in l][0]
print("step-1 loss %.17g, eval of the source %.17g (the source's own step 1: %.9g)" % (first["loss"], ev, src1["loss"]))
assert first["step"] == 1 and abs(first["loss"] - ev) <= 1e-6 * abs(ev), "not the source's weights"
assert first["lr"] == src1["lr"], "the schedule must start over: lr %g vs %g" % (first["lr"], src1["lr"])
assert abs(first["loss"] - src1["loss"]) > 1e-3, "the weights look like a fresh initialisation"
PY

# 5. provenance: every save, and a resumed run, records the source
abs_src=$(realpath "$src")
"$bin" ckpt show "$work/one/checkpoints/step_00000003" >"$work/show3.log" 2>&1 || fail "ckpt show: $(cat "$work/show3.log")"
grep -q "init_from: {\"checkpoint\":\"$abs_src\",\"step\":4}" "$work/show3.log" || fail "no init_from in step 3: $(cat "$work/show3.log")"
grep -q "a new run from the weights of $abs_src (its step 4)" "$work/one.log" || fail "no log line: $(cat "$work/one.log")"
train --steps 8 --resume --run-dir "$work/one" --ckpt-every 8 >"$work/resume.log" 2>&1 || fail "resume: $(cat "$work/resume.log")"
"$bin" ckpt show "$work/one/checkpoints/step_00000008" >"$work/show8.log" 2>&1 || fail "ckpt show 8"
grep -q "init_from: {\"checkpoint\":\"$abs_src\",\"step\":4}" "$work/show8.log" || fail "resumed run lost init_from: $(cat "$work/show8.log")"

# 6. fine-tuning a Hugging Face model: export the source, import it laid out for tp 2 x dp 2, and
# --init-from the import on 1 process and on tp 2 x dp 2: the same losses (1e-5 relative), and the same
# losses as --init-from the source itself (the import holds the source's weights, bit for bit)
"$bin" export "$src" --out "$work/hf" >"$work/export.log" 2>&1 || fail "export: $(cat "$work/export.log")"
"$bin" import "$work/hf" --out "$work/imported" --tp 2 --dp 2 >"$work/import.log" 2>&1 || fail "import: $(cat "$work/import.log")"
train --steps 6 --init-from "$work/imported" --run-dir "$work/ft_one" >"$work/ft_one.log" 2>&1 ||
    fail "fine-tune, 1 process: $(cat "$work/ft_one.log")"
# shellcheck disable=SC2086
$launcher -np 4 "$bin" train --config "$config" --train-data "$data" --log-every 0 --steps 6 --init-from "$work/imported" \
    --run-dir "$work/ft_mesh" --tp 2 --dp 2 >"$work/ft_mesh.log" 2>&1 || fail "fine-tune, tp 2 x dp 2: $(cat "$work/ft_mesh.log")"
[ "$(losses "$work/ft_one/metrics.jsonl")" = "$(losses "$work/one/metrics.jsonl" | cut -d" " -f1-6)" ] ||
    fail "--init-from the import differs from --init-from the source: $(losses "$work/ft_one/metrics.jsonl")"
/usr/bin/python3 - "$work/ft_one/metrics.jsonl" "$work/ft_mesh/metrics.jsonl" <<'PY' || fail "the imported fine-tune: 1 process and tp 2 x dp 2 disagree"
import json, sys
a = [json.loads(l)["loss"] for l in open(sys.argv[1]) if '"loss"' in l]
b = [json.loads(l)["loss"] for l in open(sys.argv[2]) if '"loss"' in l]
assert len(a) == len(b) == 6, (len(a), len(b))
rel = max(abs(x - y) / abs(x) for x, y in zip(a, b))
print("export -> import (tp 2 x dp 2) -> init-from: 1 process vs tp 2 x dp 2, worst relative difference %.2e" % rel)
sys.exit(0 if rel <= 1e-5 else 1)
PY
echo "init-from: ok"
