#!/usr/bin/env bash
# tests/inference.sh BIN DATA WORKDIR CASE — eval and sample are forward-only:
#   plan      their memory plans hold no gradients and no optimizer moments (0 B), on 1 and 2 ranks (the
#             model allocates what the plan says: mpi_llama checks plan == allocator on every mesh)
#   eval_tp3  a model with 3 kv heads evaluated on tp 3 at --seq-len 128 (not a multiple of 3): runs with
#             SP left to eval (off there), equals the 1-process loss; --no-sp the same; an explicit --sp
#             is refused naming the sequence length
set -uo pipefail
bin=$1 data=$2 work=$3 case=$4
. "$(dirname "$0")/lib.sh"
src=$(cd "$(dirname "$0")/.." && pwd)
cfg=$src/tests/configs/eval_kv3.json
mpi="mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work" && mkdir -p "$work"
loss_of() { sed -nE 's/^eval loss ([0-9.]+) .*/\1/p' "$1"; }

case $case in
  plan)
    "$bin" train --config "$cfg" --train-data "$data" --steps 2 --log-every 0 --run-dir "$work/run" --ckpt-every 2 \
        >"$work/train.log" 2>&1 || fail "training: $(cat "$work/train.log")"
    grep -Eq "memory plan, rank 0: parameters [0-9.]+ [KM]iB, gradients [0-9.]+ [KM]iB, optimizer [0-9.]+ [KM]iB" "$work/train.log" ||
        fail "the training plan should hold gradients and moments: $(grep 'memory plan' "$work/train.log")"
    expect 0 "memory plan, rank 0: parameters [0-9.]+ [KM]iB, gradients 0 B, optimizer 0 B" "$work/eval.log" \
        "$bin" eval --checkpoint "$work/run" --data "$data" --batches 1
    expect 0 "memory plan, rank 0: parameters [0-9.]+ [KM]iB, gradients 0 B, optimizer 0 B" "$work/sample.log" \
        "$bin" sample --checkpoint "$work/run" --prompt "Hello" --tokens 8
    expect 0 "memory plan, rank 0: parameters [0-9.]+ [KM]iB, gradients 0 B, optimizer 0 B" "$work/eval2.log" \
        $mpi -np 2 "$bin" eval --checkpoint "$work/run" --data "$data" --batches 1 --dp 2 ;;
  eval_tp3)
    expect 0 "^eval loss [0-9.]+ " "$work/one.log" "$bin" eval --config "$cfg" --data "$data" --seq-len 128 --batch 3 --batches 2
    expect 0 "^eval loss [0-9.]+ " "$work/tp3.log" $mpi -np 3 "$bin" eval --config "$cfg" --data "$data" --seq-len 128 \
        --batch 3 --batches 2 --tp 3
    expect 0 "^eval loss [0-9.]+ " "$work/tp3n.log" $mpi -np 3 "$bin" eval --config "$cfg" --data "$data" --seq-len 128 \
        --batch 3 --batches 2 --tp 3 --no-sp
    a=$(loss_of "$work/one.log") b=$(loss_of "$work/tp3.log") c=$(loss_of "$work/tp3n.log")
    awk -v a="$a" -v b="$b" -v c="$c" 'BEGIN { d1 = a - b; d2 = a - c; if (d1 < 0) d1 = -d1; if (d2 < 0) d2 = -d2;
        exit !(a > 0 && d1 <= 1e-5 * a && d2 <= 1e-5 * a) }' || fail "tp 3 losses $b / $c differ from 1 process's $a"
    expect 2 "seq_len.*128.*(divisible|multiple).*3|sequence parallel" "$work/sp.log" $mpi -np 3 "$bin" eval --config "$cfg" \
        --data "$data" --seq-len 128 --batch 3 --batches 2 --tp 3 --sp ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case)"
