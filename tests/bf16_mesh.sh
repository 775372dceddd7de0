#!/bin/sh
# tests/bf16_mesh.sh MESHPOINT DATA CONFIG WORKDIR — the bf16 paths of layers/ on a mesh, without a GPU:
# tp 2 x dp 2 with sequence parallelism, --device cpu-bf16 (core/backend_cpu_bf16.c: bf16 compute copies,
# bf16 FSDP gathers and tp/dp collectives, fp32 weight gradients), 6 steps, beside the same run on
# --device cpu. Checks:
#   1. every loss of the cpu-bf16 run is finite and within 2e-3 relative of the cpu run's (bf16 storage:
#      the loss is a mean over all tokens, so its rounding errors average out; measured 6e-5), and the
#      loss drop over the 6 steps within 5e-2 relative of the cpu run's (measured 1e-3; updates that do
#      not reach the compute copies leave it near 0); the tp collectives move half the cpu run's bytes and
#      the dp ones fewer (the `comm:` lines): the collectives really carry bf16;
#   2. the cpu-bf16 run is bitwise repeatable: a second run logs the same losses (17 digits) and saves a
#      final checkpoint `meshpoint ckpt diff` finds bitwise equal;
#   3. its checkpoints are device-independent: a cpu-bf16 run stopped at step 3 (whose 3 losses must be the
#      first run's, bitwise) resumes on --device cpu, and the resumed steps' losses (and the drop to step
#      6) are within the tolerances of 1. of the cpu run's.
set -eu
bin=$1; data=$2; config=$3; work=$4
mpi="mpiexec --allow-run-as-root --oversubscribe -np 4"
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --steps 6 --tp 2 --dp 2 --sp --log-every 0"
case=bf16_mesh; . "$(dirname "$0")/lib.sh"
run() {   # run LOG DIR ARGS...: one 4-rank training job in run directory WORK/DIR, its output in WORK/LOG.log
    log=$1; dir=$2; shift 2
    $mpi "$bin" $common --run-dir "$work/$dir" "$@" > "$work/$log.log" 2>&1 ||
        { cat "$work/$log.log"; fail "$log: meshpoint train $* failed"; }
}
losses() { grep -o '"loss": [^,}]*' "$work/$1/metrics.jsonl"; }

run cpu cpu --device cpu
run bf16_a bf16_a --device cpu-bf16 --ckpt-every 6
run bf16_b bf16_b --device cpu-bf16 --ckpt-every 6
losses cpu > "$work/cpu.txt"
losses bf16_a > "$work/a.txt"
losses bf16_b > "$work/b.txt"
test "$(wc -l < "$work/a.txt")" -eq 6 || fail "the cpu-bf16 run logged $(wc -l < "$work/a.txt") steps, not 6"

# 2. bitwise repeatable
cmp -s "$work/a.txt" "$work/b.txt" || { paste "$work/a.txt" "$work/b.txt"; fail "two cpu-bf16 runs logged different losses"; }
"$bin" ckpt diff "$work/bf16_a" "$work/bf16_b" > "$work/diff.log" 2>&1 ||
    { cat "$work/diff.log"; fail "two cpu-bf16 runs saved different final checkpoints"; }
echo "cpu-bf16 tp2 x dp2: two runs bitwise identical (6 losses, final checkpoint)"

# 3. a cpu-bf16 checkpoint resumed on the cpu
run xdev xdev --device cpu-bf16 --stop-at 3
test -d "$work/xdev/checkpoints/step_00000003" || fail "no checkpoint at the stop (step 3)"
losses xdev > "$work/x3.txt"
head -n 3 "$work/a.txt" | cmp -s - "$work/x3.txt" || { paste "$work/a.txt" "$work/x3.txt"; fail "the stopped cpu-bf16 run's losses differ from the first run's"; }
run xdev_resume xdev --device cpu --resume
grep -q "resumed from .*step_00000003 at step 3" "$work/xdev_resume.log" ||
    { cat "$work/xdev_resume.log"; fail "the cpu run did not resume from the cpu-bf16 checkpoint at step 3"; }

# 1. and 3.: the losses against the cpu run's
/usr/bin/python3 - "$work" <<'PY'
import json, math, re, sys
w = sys.argv[1]
def losses(run): return {json.loads(l)["step"]: json.loads(l)["loss"] for l in open(f"{w}/{run}/metrics.jsonl") if '"loss"' in l}
ref, bf, xd = losses("cpu"), losses("bf16_a"), losses("xdev")
assert sorted(ref) == sorted(bf) == sorted(xd) == list(range(1, 7)), (sorted(ref), sorted(bf), sorted(xd))
LOSS_TOL, PROGRESS_TOL = 2e-3, 5e-2
ok = True
def bad(msg):
    global ok
    print(f"FAIL (bf16_mesh): {msg}"); ok = False
for name, got, steps in (("cpu-bf16", bf, range(1, 7)), ("cpu-bf16 to step 3, then cpu", xd, range(4, 7))):
    if not all(math.isfinite(got[s]) for s in range(1, 7)):
        bad(f"{name}: a loss is not finite: {[got[s] for s in range(1, 7)]}"); continue
    rel = {s: abs(got[s] - ref[s]) / abs(ref[s]) for s in steps}
    worst = max(rel, key=rel.get)
    # training progress over the run: updates that did not reach the bf16 compute copies, or wrong
    # gradients, leave the losses close to the cpu run's at first but change how far they fall
    p_ref, p_got = ref[1] - ref[6], got[1] - got[6]
    prel = abs(p_got - p_ref) / abs(p_ref)
    print(f"{name} vs cpu, tp2 x dp2: worst relative loss difference {rel[worst]:.2e} at step {worst} "
          f"({got[worst]:.9g} vs {ref[worst]:.9g}; tolerance {LOSS_TOL:g}); loss drop over 6 steps "
          f"{p_got:.6g} vs {p_ref:.6g} (relative difference {prel:.2e}; tolerance {PROGRESS_TOL:g})")
    if rel[worst] > LOSS_TOL: bad(f"{name}: loss at step {worst} out of tolerance")
    if prel > PROGRESS_TOL: bad(f"{name}: loss drop over the run out of tolerance")
# the collectives move bf16: the tp all-reduces / gathers of activations carry half the cpu run's bytes,
# and the dp traffic (bf16 FSDP gathers, fp32 gradient reduce-scatters) is less than the cpu run's
def comm(log):
    m = re.search(r"comm: tp ([0-9.]+) MiB/step, dp ([0-9.]+) MiB/step", open(f"{w}/{log}.log").read())
    return (float(m.group(1)), float(m.group(2))) if m else None
c32, c16 = comm("cpu"), comm("bf16_a")
if not c32 or not c16:
    bad("no comm: line in the cpu or cpu-bf16 run's log")
else:
    print(f"comm per step: tp {c16[0]} MiB (cpu {c32[0]}), dp {c16[1]} MiB (cpu {c32[1]})")
    if not (c32[0] > 0 and 0.4 <= c16[0] / c32[0] <= 0.6): bad("cpu-bf16's tp collectives do not move half the cpu run's bytes")
    if not c16[1] < c32[1]: bad("cpu-bf16's dp collectives move no fewer bytes than the cpu run's")
sys.exit(0 if ok else 1)
PY
