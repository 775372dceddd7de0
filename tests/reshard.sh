#!/bin/bash
# tests/reshard.sh MESHPOINT EQUAL_TOOL DATA WORKDIR CASE — offline resharding (meshpoint reshard / init)
# through the real CLI, on tests/configs/reshard_gqa.json (GQA 8:4 heads, intermediate 90 and vocab 258
# divisible by neither 4 nor 8: uneven TP slices and vocab padding) and reshard_mqa_tied.json (MQA, tied
# embeddings). The source is a real training checkpoint of tp 2 x dp 2 at step 3 (parameters + moments).
#   roundtrip  tp2xdp2 -> tp4xdp1 -> tp1xdp2 -> tp1xdp1 -> tp2xdp2: every tensor of every hop bitwise equal
#              to the source, and the final box checksums identical to the source's (same layout).
#   continue   for tp1xdp2, tp4xdp1, tp1xdp1: resume 10 steps from the offline reshard and from the source
#              (load-time reshard) on that mesh: bitwise the same losses and final checkpoint; losses
#              within 1e-5 relative of the un-resharded continuation on tp2xdp2.
#   workers    mpirun -np 2 reshard (to tp4xdp1 and tp1xdp2) = the one-process result: tensors bitwise,
#              box checksums and datasets identical.
#   init       init tp2xdp2 = train's step-0 save on tp2xdp2 (bitwise); init tp4 resharded to tp1 = init tp1;
#              init on 1 thread = init on 3 threads (bitwise).
#   corners    MQA + tied: 1x1 -> dp4 (k_proj 6 rows on 4 ranks) -> dp8 (two empty shards) -> 1x1, bitwise;
#              init on dp8 = the resharded dp8.
#   plan       --plan (text and --json): per-rank reads, totals equal to what the reshard then writes, and
#              nothing written.
#   modelonly  --model-only: no moments; eval of it = eval of the full checkpoint; resume refuses it.
set -u
bin=$1; equal=$2; data=$3; work=$4; case=$5
src_dir=$(cd "$(dirname "$0")/.." && pwd)
cfg=$src_dir/tests/configs/reshard_gqa.json
mpi="mpiexec --allow-run-as-root --oversubscribe"
. "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
common="train --config $cfg --train-data $data --steps 13 --log-every 0"
ck3=$work/src/checkpoints/step_00000003
make_source() {
    $mpi -np 4 "$bin" $common --run-dir "$work/src" --tp 2 --dp 2 --ckpt-every 3 --stop-at 3 >"$work/src.log" 2>&1 \
        || fail "training the source: $(cat "$work/src.log")"
    [ -f "$ck3/index.h5" ] || fail "no step-3 checkpoint"
}
reshard() {  # reshard SRC OUT TP DP [extra...]
    local s=$1 o=$2 t=$3 d=$4; shift 4
    "$bin" reshard "$s" --tp "$t" --dp "$d" --out "$o" "$@" >"$o.log" 2>&1 || fail "reshard $s -> $o: $(cat "$o.log")"
    grep -q "verified $o" "$o.log" || fail "reshard did not verify its output: $(cat "$o.log")"
}
same() { "$equal" "$1" "$2" >"$work/eq.log" 2>&1 || fail "$1 and $2 differ: $(cat "$work/eq.log")"; }
# box (tensor, offset, shape, checksum) lists of two checkpoints must be identical
same_boxes() {
    /usr/bin/python3 - "$1" "$2" "$src_dir/tests/python" <<'PY' || fail "box checksums of $1 and $2 differ"
import sys, h5py, numpy as np
sys.path.insert(0, sys.argv[3])
from test_ckpt_h5py import layout_boxes   # any format version (v3: runs + the rank files' /boxes tables)
def boxes(d):
    with h5py.File(d + "/index.h5", "r") as f:
        fails = []
        b = layout_boxes(h5py, np, lambda c, m: c or fails.append(m), d, d, f)
        assert not fails, fails
        return sorted((r["tensor"], r["file"], tuple(r["offset"]), tuple(r["shape"]), int(r["checksum"])) for r in b)
a, b = boxes(sys.argv[1]), boxes(sys.argv[2])
assert len(a) == len(b) and a == b, (len(a), len(b))
print(f"{len(a)} boxes with identical offsets, shapes, files and checksums")
PY
}
losses() { /usr/bin/python3 -c 'import json,sys; print(" ".join(repr(json.loads(l)["loss"]) for l in open(sys.argv[1]) if "\"loss\"" in l))' "$1"; }
mesh_cmd() {  # mesh_cmd TP DP -> the launcher prefix and flags for that mesh
    local t=$1 d=$2 n=$(( $1 * $2 ))
    if [ $n -eq 1 ]; then echo ""; else echo "$mpi -np $n"; fi
}

case "$case" in
roundtrip)
    make_source
    reshard "$ck3" "$work/a_tp4dp1" 4 1
    reshard "$work/a_tp4dp1" "$work/b_tp1dp2" 1 2
    reshard "$work/b_tp1dp2" "$work/c_tp1dp1" 1 1
    reshard "$work/c_tp1dp1" "$work/d_tp2dp2" 2 2
    for d in a_tp4dp1 b_tp1dp2 c_tp1dp1 d_tp2dp2; do same "$ck3" "$work/$d"; done
    same_boxes "$ck3" "$work/d_tp2dp2"
    grep -Eq '"tp":[[:space:]]*4' <("$bin" ckpt show "$work/a_tp4dp1" --json) || fail "mesh metadata of the tp4 output"
    "$bin" ckpt diff "$ck3" "$work/d_tp2dp2" >"$work/diff.log" 2>&1 || fail "ckpt diff: $(cat "$work/diff.log")"
    ;;
continue)
    make_source
    $mpi -np 4 "$bin" $common --run-dir "$work/ref" --tp 2 --dp 2 --resume-from "$ck3" --ckpt-every 10 >"$work/ref.log" 2>&1 \
        || fail "reference continuation: $(cat "$work/ref.log")"
    ref=$(losses "$work/ref/metrics.jsonl")
    for m in "1 2" "4 1" "1 1"; do
        set -- $m; t=$1; d=$2; name=tp${t}dp${d}
        reshard "$ck3" "$work/off_$name" "$t" "$d"
        launch=$(mesh_cmd "$t" "$d")
        $launch "$bin" $common --run-dir "$work/run_off_$name" --tp "$t" --dp "$d" --resume-from "$work/off_$name" \
            --ckpt-every 10 >"$work/off_$name.run.log" 2>&1 || fail "resume from the offline reshard on $name: $(cat "$work/off_$name.run.log")"
        $launch "$bin" $common --run-dir "$work/run_load_$name" --tp "$t" --dp "$d" --resume-from "$ck3" \
            --ckpt-every 10 >"$work/load_$name.run.log" 2>&1 || fail "load-time reshard on $name: $(cat "$work/load_$name.run.log")"
        grep -q "read .* MiB for .* MiB needed (ratio" "$work/off_$name.run.log" || fail "no bytes read/needed line on resume"
        a=$(losses "$work/run_off_$name/metrics.jsonl"); b=$(losses "$work/run_load_$name/metrics.jsonl")
        [ "$a" = "$b" ] || fail "$name: offline and load-time reshard continue differently: [$a] vs [$b]"
        same "$work/run_off_$name/checkpoints/step_00000013" "$work/run_load_$name/checkpoints/step_00000013"
        /usr/bin/python3 - "$ref" "$a" "$name" <<'PY' || fail "$name: losses drift from the tp2xdp2 continuation"
import sys
ref = [float(x) for x in sys.argv[1].split()]; got = [float(x) for x in sys.argv[2].split()]
assert len(ref) == len(got) == 10, (len(ref), len(got))
worst = max(abs(a - b) / abs(b) for a, b in zip(got, ref))
print(f"{sys.argv[3]}: 10 steps, worst relative loss difference to tp2xdp2 {worst:.2e}")
assert worst <= 1e-5
PY
    done
    ;;
workers)
    make_source
    for m in "4 1" "1 2"; do
        set -- $m; name=tp$1dp$2
        reshard "$ck3" "$work/one_$name" "$1" "$2"
        $mpi -np 2 "$bin" reshard "$ck3" --tp "$1" --dp "$2" --out "$work/two_$name" >"$work/two_$name.log" 2>&1 \
            || fail "mpirun -np 2 reshard: $(cat "$work/two_$name.log")"
        same "$work/one_$name" "$work/two_$name"
        same_boxes "$work/one_$name" "$work/two_$name"
    done
    ;;
init)
    $mpi -np 4 "$bin" train --config "$cfg" --train-data "$data" --steps 0 --ckpt-every 1 --tp 2 --dp 2 \
        --run-dir "$work/t0" >"$work/t0.log" 2>&1 || fail "train --steps 0: $(cat "$work/t0.log")"
    "$bin" init --config "$cfg" --tp 2 --dp 2 --out "$work/init_tp2dp2" >"$work/i.log" 2>&1 || fail "init: $(cat "$work/i.log")"
    same "$work/t0/checkpoints/step_00000000" "$work/init_tp2dp2"
    same_boxes "$work/t0/checkpoints/step_00000000" "$work/init_tp2dp2"
    "$bin" init --config "$cfg" --tp 4 --dp 1 --out "$work/init_tp4" >"$work/i4.log" 2>&1 || fail "init tp4: $(cat "$work/i4.log")"
    OPENBLAS_NUM_THREADS=1 "$bin" init --config "$cfg" --tp 1 --dp 1 --out "$work/init_tp1" >"$work/i1.log" 2>&1 \
        || fail "init tp1: $(cat "$work/i1.log")"
    # the random init splits rows over threads: bitwise the same on 1 and on 3 threads
    OMP_NUM_THREADS=3 OPENBLAS_NUM_THREADS=3 "$bin" init --config "$cfg" --tp 1 --dp 1 --out "$work/init_tp1_3thr" \
        >"$work/i13.log" 2>&1 || fail "init tp1 on 3 threads: $(cat "$work/i13.log")"
    same "$work/init_tp1" "$work/init_tp1_3thr"
    same_boxes "$work/init_tp1" "$work/init_tp1_3thr"
    reshard "$work/init_tp4" "$work/init_tp4_to_tp1" 1 1
    same "$work/init_tp4_to_tp1" "$work/init_tp1"
    same_boxes "$work/init_tp4_to_tp1" "$work/init_tp1"
    # the step-0 checkpoint trains: resume from it on tp4 for 2 steps
    $mpi -np 4 "$bin" train --config "$cfg" --train-data "$data" --steps 2 --tp 4 --run-dir "$work/from_init" \
        --resume-from "$work/init_tp4" >"$work/fi.log" 2>&1 || fail "training from init: $(cat "$work/fi.log")"
    ;;
corners)
    mcfg=$src_dir/tests/configs/reshard_mqa_tied.json
    "$bin" init --config "$mcfg" --tp 1 --dp 1 --out "$work/m11" >"$work/m.log" 2>&1 || fail "init: $(cat "$work/m.log")"
    reshard "$work/m11" "$work/m_dp4" 1 4
    reshard "$work/m_dp4" "$work/m_dp8" 1 8
    reshard "$work/m_dp8" "$work/m_back" 1 1
    for d in m_dp4 m_dp8 m_back; do same "$work/m11" "$work/$d"; done
    same_boxes "$work/m11" "$work/m_back"
    "$bin" init --config "$mcfg" --tp 1 --dp 8 --out "$work/m_init8" >"$work/m8.log" 2>&1 || fail "init dp8: $(cat "$work/m8.log")"
    same_boxes "$work/m_init8" "$work/m_dp8"
    # empty shards write nothing: k_proj (6 rows) has 6 boxes on dp 8
    n=$(/usr/bin/python3 -c 'import h5py,sys; t=h5py.File(sys.argv[1]+"/index.h5")["layout/tensors"][...]; print(sum(int(r["nboxes"]) for r in t if r["name"]==b"model/model.layers.0.self_attn.k_proj.weight"))' "$work/m_dp8")
    [ "$n" = 6 ] || fail "expected 6 boxes of k_proj on dp 8, got $n"
    # GQA with uneven intermediate and padded vocab to tp 8 is refused (4 kv heads); tp 4 x dp 3 is fine
    "$bin" init --config "$cfg" --tp 1 --dp 1 --out "$work/g11" >/dev/null 2>&1 || fail "init gqa"
    reshard "$work/g11" "$work/g_tp4dp3" 4 3
    reshard "$work/g_tp4dp3" "$work/g_back" 1 1
    same "$work/g11" "$work/g_back"; same_boxes "$work/g11" "$work/g_back"
    ;;
plan)
    make_source
    "$bin" reshard "$ck3" --tp 4 --dp 1 --plan >"$work/plan.txt" 2>&1 || fail "--plan: $(cat "$work/plan.txt")"
    grep -q "^target rank 3:" "$work/plan.txt" || fail "plan lacks target rank 3: $(cat "$work/plan.txt")"
    grep -q "^total: reads" "$work/plan.txt" || fail "plan lacks totals"
    "$bin" reshard "$ck3" --tp 4 --dp 1 --plan --json >"$work/plan.json" 2>"$work/plan.err" || fail "--plan --json"
    [ ! -e "$work/out" ] || fail "--plan wrote something"
    reshard "$ck3" "$work/out" 4 1
    /usr/bin/python3 - "$work/plan.json" "$work/out" <<'PY' || fail "the plan does not match the output"
import json, sys, h5py, glob
plan = json.load(open(sys.argv[1]))
assert len(plan["ranks"]) == 4
with h5py.File(sys.argv[2] + "/index.h5", "r") as f:
    written = int(sum(int(r["bytes"]) for r in f["layout/files"][...]))
assert plan["totals"]["write_bytes"] == written, (plan["totals"], written)
for r in plan["ranks"]:
    assert r["read_bytes"] > 0 and r["source_files"], r
    assert sum(f["bytes"] for f in r["source_files"].values()) == r["read_bytes"], r
    assert all(f["boxes"] > 0 for f in r["source_files"].values()), r
assert sum(r["read_bytes"] for r in plan["ranks"]) == plan["totals"]["read_bytes"]
print("plan: write bytes", written, "read bytes", plan["totals"]["read_bytes"])
PY
    ;;
modelonly)
    # --model-only drops the moments: eval reads it (same loss as the full checkpoint); resume refuses it
    make_source
    reshard "$ck3" "$work/mo" 1 1 --model-only
    n=$(/usr/bin/python3 -c 'import h5py,sys; t=h5py.File(sys.argv[1]+"/index.h5")["layout/tensors"][...]; print(sum(1 for r in t if r["name"].startswith(b"optim/")), len(t))' "$work/mo")
    [ "$n" = "0 21" ] || fail "model-only output holds optim tensors or misses model ones: $n"
    e1=$("$bin" eval --config "$cfg" --data "$data" --checkpoint "$work/mo" --batches 2 2>&1) || fail "eval model-only: $e1"
    e2=$("$bin" eval --config "$cfg" --data "$data" --checkpoint "$ck3" --batches 2 2>&1) || fail "eval source: $e2"
    l1=$(printf '%s' "$e1" | sed -n 's/^eval loss \([0-9.]*\).*/\1/p'); l2=$(printf '%s' "$e2" | sed -n 's/^eval loss \([0-9.]*\).*/\1/p')
    [ -n "$l1" ] && [ "$l1" = "$l2" ] || fail "eval of model-only ($l1) and full ($l2) checkpoints differ"
    o=$("$bin" train --config "$cfg" --train-data "$data" --steps 5 --run-dir "$work/morun" --resume-from "$work/mo" 2>&1); rc=$?
    [ $rc -ne 0 ] && printf '%s' "$o" | grep -q "no tensor optim/exp_avg" || fail "resume from a model-only checkpoint: rc $rc: $o"
    # reshard of a model-only checkpoint needs --model-only again (no moments to carry)
    o=$("$bin" reshard "$work/mo" --tp 2 --dp 1 --out "$work/mo2" 2>&1); rc=$?
    [ $rc -eq 2 ] && printf '%s' "$o" | grep -q "pass --model-only" || fail "reshard of model-only without --model-only: rc $rc: $o"
    reshard "$work/mo" "$work/mo2" 2 1 --model-only
    ;;
*) fail "unknown case" ;;
esac
echo "ok: $case"
