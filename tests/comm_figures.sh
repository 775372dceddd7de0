#!/bin/sh
# tests/comm_figures.sh MPIRUN... -- MESHPOINT DATA VAL CONFIG WORKDIR — the `comm:` line of a tp 2 x dp 2
# run counts the optimizer steps' own collectives only: a run that also evaluates and
# checkpoints after every step reports the same tp and dp MiB/step as the same run without, to the
# digit. (Before, evaluation forwards and checkpoint exchanges were added in, and the time share was of
# the run's wall time.)
set -u
mpi=""
while [ "$1" != "--" ]; do mpi="$mpi $1"; shift; done
shift
bin=$1; data=$2; val=$3; config=$4; work=$5
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --steps 3 --tp 2 --dp 2 --log-every 0"
$mpi -np 4 "$bin" $common --run-dir "$work/plain" > "$work/plain.log" 2>&1 || { cat "$work/plain.log"; exit 1; }
$mpi -np 4 "$bin" $common --run-dir "$work/busy" --val-data "$val" --eval-every 1 --eval-batches 2 --ckpt-every 1 \
    > "$work/busy.log" 2>&1 || { cat "$work/busy.log"; exit 1; }
a=$(grep -o 'comm: tp [0-9.]* MiB/step, dp [0-9.]* MiB/step' "$work/plain.log")
b=$(grep -o 'comm: tp [0-9.]* MiB/step, dp [0-9.]* MiB/step' "$work/busy.log")
grep -q 'of the step time in collectives' "$work/plain.log" || { echo "no share of the step time: $(grep comm: "$work/plain.log")"; exit 1; }
[ -n "$a" ] || { echo "no comm: line"; cat "$work/plain.log"; exit 1; }
grep -q "val loss" "$work/busy.log" && grep -q "checkpoint step 3" "$work/busy.log" ||
    { echo "the busy run did not evaluate and save"; cat "$work/busy.log"; exit 1; }
[ "$a" = "$b" ] || { echo "comm figures differ: plain '$a', with evaluations and saves '$b'"; exit 1; }
echo "the same figures with and without evaluations and saves: $a"
