#!/usr/bin/env bash
# scripts/demo_stages.sh — the demo's stages (scripts/demo.sh installs and builds, then runs this), each
# checked: a stage whose command exits non-zero, or whose promised result is missing (a checkpoint, the
# resharded checkpoint, the loss falling, the evaluation, the sampled text, the PNG), ends the demo with
# "demo: FAILED at stage ...: why" on stderr and exit 1. Every stage's output is also kept in
# $DEMO_RUN/logs/STAGE.log.
#
# Environment: MP_BIN the meshpoint binary (required); DEMO_STEPS (default 1000, at least 8) and DEMO_RUN
# (default runs/demo) as scripts/demo.sh describes; MPIRUN (default mpirun) the launcher.
# Exit status: 0 all stages passed, 1 a stage failed, 2 a bad setting or a directory the demo did not make.
set -euo pipefail
bin=${MP_BIN:?demo: set MP_BIN to the meshpoint binary}
run=${DEMO_RUN:-runs/demo}
steps=${DEMO_STEPS:-1000}
mpirun=${MPIRUN:-mpirun}
marker=.meshpoint-demo      # written into every directory the demo makes; only such directories are replaced
export OPENBLAS_NUM_THREADS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_mpi_yield_when_idle=1

usage_error() { echo "demo: error: $*" >&2; exit 2; }
failed() { echo "demo: FAILED at stage $stage: $*" >&2; exit 1; }
[[ $steps =~ ^[0-9]+$ ]] && [ "$steps" -ge 8 ] || usage_error "DEMO_STEPS must be a whole number >= 8, got '$steps'"
[ -x "$bin" ] || usage_error "MP_BIN: $bin is not an executable"

# A fresh directory for this demo run: an earlier demo's (it carries the marker) is replaced, anything
# else at that path is left alone and refused.
fresh_dir() {
    if [ -e "$1" ] || [ -L "$1" ]; then
        [ -d "$1" ] && [ ! -L "$1" ] && [ -f "$1/$marker" ] ||
            usage_error "$1 exists and was not made by the demo (no $1/$marker): move it away or set DEMO_RUN"
        rm -rf -- "$1"
    fi
    mkdir -p "$1/logs"
    echo "made by scripts/demo.sh; replaced by the next demo run" >"$1/$marker"
}

# stage NAME CMD...: runs CMD, its output shown and kept in $run/logs/NAME.log; fails the demo on a
# non-zero exit.
stage() {
    stage=$1; shift
    local rc=0
    "$@" 2>&1 | tee "$run/logs/$stage.log" || rc=$?
    [ $rc -eq 0 ] || failed "'$*' exited $rc (log: $run/logs/$stage.log)"
}
# complete STEPDIR: the checkpoint exists and every checksum and its coverage verify.
complete() {
    [ -f "$1/index.h5" ] || failed "no checkpoint at $1"
    "$bin" ckpt verify "$1" >"$run/logs/$stage.verify.log" 2>&1 ||
        failed "$1 does not verify: $(tail -n 3 "$run/logs/$stage.verify.log")"
}
# The loss of the first and of the last training step in a metrics.jsonl.
loss_at() { grep -E '"step": [0-9]+, "loss"' "$1" | sed -n "$2" | sed -E 's/.*"loss": ([-0-9.eE+naif]+).*/\1/'; }

half=$((steps / 2)) every=$((steps / 4))
extra=$((steps >= 200 ? 100 : steps / 2))   # steps of the 2-process continuation
warmup=$((steps >= 120 ? 30 : steps / 4))   # the config's 30 warmup steps, shortened for short demos
small=$run/resharded_tp1_dp2
step_dir() { printf '%s/checkpoints/step_%08d' "$1" "$2"; }

fresh_dir "$run"
fresh_dir "${run}_dp2"

stage data ./scripts/make_demo_data.sh "$run/data"
for f in "$run/data/fortunes_train.bin" "$run/data/fortunes_val.bin"; do [ -s "$f" ] || failed "no token file $f"; done

train=("$mpirun" --oversubscribe -np 4 "$bin" train --config configs/demo.json
       --train-data "$run/data/fortunes_train.bin" --val-data "$run/data/fortunes_val.bin"
       --run-dir "$run" --tp 2 --dp 2 --steps "$steps" --warmup "$warmup" --ckpt-every "$every" --keep 2)
echo "== training on 4 processes (tp 2 x dp 2); stopping after step $half as if preempted"
stage train_preempted "${train[@]}" --stop-at "$half"
complete "$(step_dir "$run" "$half")"
echo "== checkpoints: $(ls "$run/checkpoints" | tr '\n' ' ')"

echo "== resuming from the newest checkpoint"
stage train_resumed "${train[@]}" --resume
grep -q "resumed from .*step_$(printf %08d "$half")" "$run/logs/$stage.log" || failed "the run did not resume from step $half"
newest=$(step_dir "$run" "$steps")
complete "$newest"
[ "$(cat "$run/checkpoints/latest")" = "$(basename "$newest")" ] || failed "latest does not name $(basename "$newest")"
kept=$(find "$run/checkpoints" -maxdepth 1 -name 'step_*' -type d | wc -l)
[ "$kept" -eq 2 ] || failed "--keep 2 left $kept checkpoints"
first=$(loss_at "$run/metrics.jsonl" 1p) last=$(loss_at "$run/metrics.jsonl" '$p')
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b + 0 < 0.9 * a) }' ||
    failed "the training loss did not fall: step 1 $first, step $steps $last"
echo "== training loss: step 1 $first -> step $steps $last"

echo "== the cluster shrinks to 2 processes: resharding $newest offline to tp 1 x dp 2 (the plan first)"
stage reshard_plan "$bin" reshard "$newest" --tp 1 --dp 2 --plan
stage reshard "$bin" reshard "$newest" --tp 1 --dp 2 --out "$small"
complete "$small"

echo "== resuming on 2 processes from the resharded checkpoint for $extra more steps (at the schedule's floor lr)"
# --decay-steps keeps the finished run's schedule (warmup, cosine to step $steps): the extra steps run at min_lr
stage train_dp2 "$mpirun" --oversubscribe -np 2 "$bin" train --config configs/demo.json \
    --train-data "$run/data/fortunes_train.bin" --val-data "$run/data/fortunes_val.bin" \
    --run-dir "${run}_dp2" --dp 2 --steps $((steps + extra)) --warmup "$warmup" --decay-steps $((steps - warmup)) \
    --resume-from "$small" --eval-every "$extra" --ckpt-every "$extra"
grep -q "resumed from $small at step $steps" "$run/logs/$stage.log" || failed "the 2-process run did not resume from $small"
complete "$(step_dir "${run}_dp2" $((steps + extra)))"

echo "== load-time resharding: the tp 2 x dp 2 checkpoint evaluated on 1 process"
stage eval "$bin" eval --config configs/demo.json --data "$run/data/fortunes_val.bin" --checkpoint "$newest" --batches 4
grep -Eq '^eval loss [0-9]+\.[0-9]+' "$run/logs/$stage.log" || failed "no evaluation loss printed"

echo "== sampling from the model trained on 2 processes (the same text on any mesh for a given --seed)"
prompt="The secret of "
stage sample "$bin" sample --checkpoint "${run}_dp2" --prompt "$prompt" --tokens 160 --temperature 0.7 --top-k 20 --seed 1
text=$(grep -F -- "$prompt" "$run/logs/$stage.log" | head -n 1 || true)
[ -n "$text" ] && [ -n "$(printf '%s' "${text#*"$prompt"}" | tr -d '[:space:]')" ] || failed "no sampled text after the prompt"

stage plot "$bin" plot "$run" --out "$run/curves.png"
[ "$(head -c 8 "$run/curves.png" 2>/dev/null | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    failed "$run/curves.png is missing or not a PNG"

echo "== demo passed: metrics $run/metrics.jsonl, ${run}_dp2/metrics.jsonl; checkpoints $run/checkpoints," \
     "$small, ${run}_dp2/checkpoints (open index.h5 with h5py); curves $run/curves.png; logs $run/logs"
