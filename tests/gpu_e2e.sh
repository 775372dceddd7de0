#!/usr/bin/env bash
# tests/gpu_e2e.sh MESHPOINT DATA CONFIG WORKDIR — `--device cuda` end to end on the GPUs of this host:
#   1. exact resume on the GPU: N steps straight vs N/2, stop, resume, N/2 more, with checkpoints; the
#      loss sequences (17 significant digits in metrics.jsonl) and the final checkpoints (`meshpoint ckpt
#      diff`, no tolerance: parameters and both Adam moments) must be bitwise identical. On 1x1 always,
#      and under mpiexec dp 2 (1x2), tp 2 (2x1) and tp 2 x dp 2 (2x2): over NCCL where every rank has a
#      GPU of its own, and as meshes of processes sharing the GPUs where there are fewer GPUs than ranks
#      (one lent GPU: all three), on the staged communicator (core/comm_staged.h) that meshpoint then
#      chooses by itself: the log must say so (and must not where NCCL serves). Each mesh's checkpoint
#      passes `ckpt verify`, and its losses are within the bf16 tolerance (below) of the GPU's 1x1 run and
#      of the same mesh on the CPU (fp32): FSDP gathers and their prefetch, SP, the vocab-parallel loss
#      and its rescale, all on the device;
#   2. GPU -> CPU: the GPU's mid-run checkpoint (from the largest mesh) passes `ckpt verify`, evaluates on
#      the CPU and on the GPU to the same loss (within tolerance), and resumes on the CPU (one process:
#      load-time resharding too) to the end; its losses and final checkpoint match the GPU's straight run
#      within tolerance;
#   3. CPU -> GPU: a CPU run's mid-run checkpoint resumes on the GPU mesh; losses and final checkpoint
#      match the CPU's straight run within tolerance;
#   4. activation recomputation on the GPU: the straight run again with --recompute full, on 1x1 and on
#      the largest mesh, logs the same losses and saves a checkpoint `ckpt diff` finds bitwise equal (the
#      recomputed forward must give the forward's bits on the device too; one more 6-step run per mesh).
# Tolerances (GPU is bf16 compute, CPU fp32; docs/CUDA.md): losses and eval 2e-3 relative, about bf16's
# unit roundoff u = 2^-9 = 1.95e-3: each token's loss is a log-sum-exp of logits stored in bf16 (relative
# error <= u each), and the mean over the batch's tokens averages those roundings, so a run on another
# mesh or device (other summation orders, bf16 collectives, fp32 on the CPU) moves the mean loss by well
# under u over these 6 steps (measured: cpu-bf16 vs cpu 8e-5, tp 2 x dp 2 6e-5); checkpoints
# `ckpt diff --atol 2e-3 --rtol 0.1` (weights are ~0.02-0.08 in size: a zeroed, transposed or garbage
# tensor is far outside). For scale, the CPU emulation of the GPU's precision (MP_GPU_E2E_DEVICE=cpu-bf16,
# below) against fp32 gave, 2026-12-03: losses within 8e-5 relative, checkpoints within 1.4e-4 absolute
# and 1.4e-2 of each tensor's max (Adam's second moments). Exact resume is bitwise: same device, same mesh.
#
# Skipped (exit 77) where `meshpoint --version` shows no usable GPU, or a binary built without CUDA.
# MP_GPU_E2E_DEVICE=cpu or cpu-bf16 runs the same script on the CPU (a dry run of its logic where no GPU
# is lent; MP_GPU_E2E_GPUS=N then pretends N GPUs: a mesh of more ranks than that runs with --comm staged,
# the choice meshpoint makes by itself on a GPU); it proves nothing about the GPU. The ctest entry
# gpu_e2e_dry_cpu_bf16 runs it so (cpu-bf16, one pretended GPU: every mesh staged).
set -u
bin=$1; data=$2; config=$3; work=$4
dev=${MP_GPU_E2E_DEVICE:-cuda}
steps=6; half=3
py=${MP_PYTHON:-$(command -v python3 || echo /usr/bin/python3)}   # the lent machine's python3 is a venv's
rm -rf "$work"; mkdir -p "$work"
case=gpu_e2e; . "$(dirname "$0")/lib.sh"

"$bin" --version > "$work/version" 2>&1 || fail "--version exited $?: $(cat "$work/version")"
devices=$(grep '^devices:' "$work/version") || fail "--version names no devices: $(cat "$work/version")"
echo "$devices"
if [ "$dev" = cuda ]; then
  case "$devices" in
    *"cuda not built in"*) echo "SKIP: this meshpoint was built without CUDA"; exit 77 ;;
    *"no usable GPU"*|*"no GPU on this host"*) echo "SKIP: no usable GPU here"; exit 77 ;;
    *"cuda ("*) ngpu=$(echo "$devices" | sed -n 's/.*cuda (\([0-9][0-9]*\) GPU.*/\1/p') ;;
    *) fail "unexpected devices line: $devices" ;;
  esac
else
  ngpu=${MP_GPU_E2E_GPUS:-1}
  echo "dry run on --device $dev (pretending $ngpu GPU(s)): this checks the script, not a GPU"
fi
if [ -z "$ngpu" ] || [ "$ngpu" -lt 1 ]; then fail "cannot read the GPU count from: $devices"; fi

mpiexec_bin=$(command -v mpiexec || command -v mpirun || true)
meshes="1x1"
if [ -n "$mpiexec_bin" ]; then
  # dp 2, tp 2, tp 2 x dp 2: NCCL where ranks <= GPUs, staged (ranks sharing a GPU) otherwise; the last
  # mesh is the cross-device one
  meshes="1x1 1x2 2x1 2x2"
else
  echo "note: no mpiexec: the tp x dp mesh part does not run"
fi
big=${meshes##* }   # the largest mesh: the cross-device checks use it
ranks() { local m=$1; echo $(( ${m%x*} * ${m#*x} )); }

# launch MESH CMD...: meshpoint CMD on the mesh TPxDP (one process for 1x1, mpiexec otherwise).
launch() {
  local mesh=$1; shift
  local tp=${mesh%x*} dp=${mesh#*x}
  if [ "$mesh" = 1x1 ]; then "$bin" "$@"
  else "$mpiexec_bin" --allow-run-as-root --oversubscribe -np $((tp * dp)) "$bin" "$@" --tp "$tp" --dp "$dp"; fi
}
# train_on MESH DEVICE RUN_DIR [FLAGS...]: steps steps with a checkpoint at the end, log in RUN_DIR.log. A dry
# run's mesh of more ranks than the pretended GPUs takes --comm staged (on a GPU meshpoint chooses it).
train_on() {
  local mesh=$1 d=$2 run=$3; shift 3
  if [ "$dev" != cuda ] && [ "$d" = "$dev" ] && [ "$(ranks "$mesh")" -gt "$ngpu" ]; then set -- "$@" --comm staged; fi
  launch "$mesh" train --config "$config" --train-data "$data" --steps $steps --ckpt-every $steps --log-every 0 \
    --device "$d" --run-dir "$run" "$@" >> "$run.log" 2>&1 ||
    fail "train on $mesh --device $d ($run $*) exited $?: $(tail -20 "$run.log")"
}
losses() { grep -o '"loss": [^,]*' "$1/metrics.jsonl"; }
ckpt() { echo "$1/checkpoints/step_$(printf %08d "$2")"; }
# close_losses A B FROM TO: steps FROM..TO of runs A and B agree within 2e-3 relative.
close_losses() {
  "$py" - "$1/metrics.jsonl" "$2/metrics.jsonl" "$3" "$4" <<'PY' || fail "losses of $1 and $2 differ beyond 2e-3"
import json, math, sys
def losses(p): return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
a, b, lo, hi = losses(sys.argv[1]), losses(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
worst = 0.0
for s in range(lo, hi + 1):
    assert s in a and s in b, f"step {s} missing"
    assert math.isfinite(a[s]) and math.isfinite(b[s]), f"step {s}: {a[s]} vs {b[s]}"
    worst = max(worst, abs(a[s] - b[s]) / abs(b[s]))
print(f"steps {lo}-{hi}: worst relative loss difference {worst:.2e}")
sys.exit(0 if worst <= 2e-3 else 1)
PY
}
eval_loss() {   # DEVICE CKPT: the eval loss (JSON) of a checkpoint, one process
  "$bin" eval --checkpoint "$2" --data "$data" --batches 2 --device "$1" --json > "$work/eval_$1.json" \
    2> "$work/eval_$1.err" || fail "eval --device $1 of $2 exited $?: $(cat "$work/eval_$1.err" "$work/eval_$1.json")"
  "$py" -c "import json,sys; print(json.load(open(sys.argv[1]))['loss'])" "$work/eval_$1.json" ||
    fail "eval --device $1 printed no loss: $(cat "$work/eval_$1.json")"
}

# 1. exact resume on the GPU, per mesh; the mesh against 1x1 on the GPU and the same mesh on the CPU
for mesh in $meshes; do
  s="$work/gpu_${mesh}_straight" r="$work/gpu_${mesh}_resumed"
  train_on "$mesh" "$dev" "$s"
  [ -d "$(ckpt "$s" $steps)" ] || fail "$mesh: no checkpoint at step $steps"
  [ "$(losses "$s" | wc -l)" -eq $steps ] || fail "$mesh: the straight run logged $(losses "$s" | wc -l) steps"
  comm=nccl
  if [ "$(ranks "$mesh")" -gt "$ngpu" ]; then comm=staged; fi
  if [ "$mesh" = 1x1 ]; then comm=none
  elif [ $comm = staged ]; then
    grep -q "stage through host memory and MPI" "$s.log" ||
      fail "$mesh: $(ranks "$mesh") ranks on $ngpu GPU(s) but the run does not say it stages: $(tail -20 "$s.log")"
  elif grep -q "stage through host memory" "$s.log"; then fail "$mesh: a GPU per rank, yet the run staged"; fi
  "$bin" ckpt verify "$(ckpt "$s" $steps)" > "$s.verify" 2>&1 || fail "$mesh: ckpt verify: $(tail -20 "$s.verify")"
  if [ "$mesh" != 1x1 ]; then
    close_losses "$s" "$work/gpu_1x1_straight" 1 $steps || exit 1
    train_on "$mesh" cpu "$work/cpu_${mesh}"
    close_losses "$s" "$work/cpu_${mesh}" 1 $steps || exit 1
    echo "$mesh --device $dev ($comm): losses within 2e-3 of 1x1 on --device $dev and of $mesh on the CPU"
  fi
  train_on "$mesh" "$dev" "$r" --stop-at $half
  [ -d "$(ckpt "$r" $half)" ] || fail "$mesh: no checkpoint at the stop (step $half)"
  cp -a "$r" "$work/gpu_${mesh}_at_half"   # for the cross-device part
  train_on "$mesh" "$dev" "$r" --resume
  grep -q "resumed from .*step_0*$half at step $half" "$r.log" || fail "$mesh: the resume did not say so: $(tail -20 "$r.log")"
  losses "$s" > "$s.losses"; losses "$r" > "$r.losses"
  cmp -s "$s.losses" "$r.losses" || fail "$mesh: loss sequences differ: $(paste "$s.losses" "$r.losses")"
  "$bin" ckpt diff "$(ckpt "$s" $steps)" "$(ckpt "$r" $steps)" > "$work/diff_$mesh.txt" 2>&1 ||
    fail "$mesh: final checkpoints not bitwise equal: $(tail -20 "$work/diff_$mesh.txt")"
  echo "$mesh --device $dev: $steps steps straight = $half + resume $half, losses and checkpoint bitwise"
done

# 2. GPU -> CPU, from the largest mesh's mid-run checkpoint
g="$work/gpu_${big}_at_half"
"$bin" ckpt verify "$(ckpt "$g" $half)" > "$work/verify_gpu.txt" 2>&1 ||
  fail "ckpt verify of the GPU checkpoint: $(tail -20 "$work/verify_gpu.txt")"
lc=$(eval_loss cpu "$(ckpt "$g" $half)") || exit 1
lg=$(eval_loss "$dev" "$(ckpt "$g" $half)") || exit 1
"$py" -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 2e-3 * abs(a) else 1)" \
  "$lc" "$lg" || fail "eval of the GPU checkpoint: CPU $lc vs GPU $lg (beyond 2e-3 relative)"
echo "GPU checkpoint ($big, step $half): ckpt verify ok; eval CPU $lc, GPU $lg"
cp -a "$g" "$work/g2c"
train_on 1x1 cpu "$work/g2c" --resume
close_losses "$work/g2c" "$work/gpu_${big}_straight" $((half + 1)) $steps || exit 1
"$bin" ckpt diff --atol 2e-3 --rtol 0.1 "$(ckpt "$work/g2c" $steps)" "$(ckpt "$work/gpu_${big}_straight" $steps)" \
  > "$work/diff_g2c.txt" 2>&1 || fail "GPU -> CPU: final checkpoints differ beyond tolerance: $(tail -20 "$work/diff_g2c.txt")"
echo "GPU ($big) -> CPU (1x1) resume: losses and final checkpoint within tolerance of the GPU run"

# 3. CPU -> GPU: a CPU run's mid-run checkpoint resumed on the GPU mesh
c="$work/cpu_straight"
train_on 1x1 cpu "$c"
train_on 1x1 cpu "$work/c2g" --stop-at $half
train_on "$big" "$dev" "$work/c2g" --resume
close_losses "$work/c2g" "$c" $((half + 1)) $steps || exit 1
"$bin" ckpt diff --atol 2e-3 --rtol 0.1 "$(ckpt "$work/c2g" $steps)" "$(ckpt "$c" $steps)" \
  > "$work/diff_c2g.txt" 2>&1 || fail "CPU -> GPU: final checkpoints differ beyond tolerance: $(tail -20 "$work/diff_c2g.txt")"
echo "CPU (1x1) -> GPU ($big) resume: losses and final checkpoint within tolerance of the CPU run"

# 4. --recompute full is bitwise --recompute none on the device (docs/DESIGN_NOTES.md "Activation recomputation")
for mesh in $(echo "1x1 $big" | tr ' ' '\n' | sort -u); do
  s="$work/gpu_${mesh}_straight" f="$work/gpu_${mesh}_recompute"
  train_on "$mesh" "$dev" "$f" --recompute full
  losses "$f" > "$f.losses"
  cmp -s "$s.losses" "$f.losses" || fail "$mesh --recompute full: losses differ: $(paste "$s.losses" "$f.losses")"
  "$bin" ckpt diff "$(ckpt "$s" $steps)" "$(ckpt "$f" $steps)" > "$work/diff_recompute_$mesh.txt" 2>&1 ||
    fail "$mesh --recompute full: final checkpoint not bitwise the plain run's: $(tail -20 "$work/diff_recompute_$mesh.txt")"
  echo "$mesh --device $dev --recompute full: $steps losses and the final checkpoint bitwise --recompute none's"
done
echo "gpu_e2e: all passed on --device $dev (meshes: $meshes; $ngpu GPU(s): meshes of more ranks staged)"
