#!/bin/sh
# tests/resume_exact.sh MESHPOINT EQUAL_TOOL DATA CONFIG WORKDIR [TRAIN FLAGS...] — exact resume on
# tp 2 x dp 2: 8 steps straight vs 4 steps, stop, resume, 4 steps. The loss sequences must be bitwise
# identical (17 significant digits in metrics.jsonl) and so must the final checkpoints (parameters and
# both Adam moments); the resume runs no random init. Extra flags (e.g. --async-save, --compress zstd) go to every train command.
set -eu
bin=$1; equal=$2; data=$3; config=$4; work=$5; shift 5
mpi="mpiexec --allow-run-as-root --oversubscribe -np 4"
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --steps 8 --tp 2 --dp 2 --log-every 0"
$mpi "$bin" $common --run-dir "$work/straight" --ckpt-every 8 "$@"
$mpi "$bin" $common --run-dir "$work/resumed" --ckpt-every 8 --stop-at 4 "$@"
test -d "$work/resumed/checkpoints/step_00000004" || { echo "no checkpoint at the stop"; exit 1; }
# the resume skips the random init (every tensor comes from the checkpoint: a tensor it missed would be
# zero, and the losses below would differ) and logs its start-up beside the load inside it
$mpi "$bin" $common --run-dir "$work/resumed" --ckpt-every 8 --resume "$@" > "$work/resume.log" 2>&1 ||
    { cat "$work/resume.log"; exit 1; }
grep -q 'startup: [0-9.]* s from process start to the first step (checkpoint load [0-9.]* s, no random init)' \
    "$work/resume.log" || { echo "the resume logged no start-up line without the random init:"; cat "$work/resume.log"; exit 1; }
grep -o '"loss": [^,]*' "$work/straight/metrics.jsonl" > "$work/a.txt"
grep -o '"loss": [^,]*' "$work/resumed/metrics.jsonl" > "$work/b.txt"
test "$(wc -l < "$work/a.txt")" -eq 8 || { echo "straight run logged $(wc -l < "$work/a.txt") steps"; exit 1; }
if ! cmp -s "$work/a.txt" "$work/b.txt"; then
    echo "loss sequences differ:"; paste "$work/a.txt" "$work/b.txt"; exit 1
fi
echo "loss sequences bitwise identical over 8 steps"
"$equal" "$work/straight/checkpoints/step_00000008" "$work/resumed/checkpoints/step_00000008"
