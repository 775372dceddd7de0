#!/bin/sh
# tests/resume_planned.sh MESHPOINT DATA CONFIG WORKDIR — train --resume through the collective load open
# (ckpt_open_planned): a run saved on tp 2 x dp 2 at step 3 resumes on dp 2, tp 2 x dp 2 and tp 2 x dp 4;
# each run's load log must say that index.h5 was read by 1 of its ranks (rank 0), and eval of the
# checkpoint on 4 ranks likewise. Then, with index.h5 damaged, a 4-rank eval of it must fail (exit 1)
# naming the index. (A damaged newest checkpoint under --resume is skipped by rank 0's search for the
# newest complete one before any load: tests elsewhere.)
set -u
bin=$1; data=$2; config=$3; work=$4
case=resume_planned
. "$(dirname "$0")/lib.sh"
mpi="mpiexec --allow-run-as-root --oversubscribe"
rm -rf "$work"; mkdir -p "$work"
common="train --config $config --train-data $data --steps 4 --log-every 0"
fail_log="$work/save.log"
$mpi -np 4 "$bin" $common --run-dir "$work/saved" --tp 2 --dp 2 --stop-at 3 > "$fail_log" 2>&1 || fail "save"
for mesh in "2 1 2" "4 2 2" "8 2 4"; do
    set -- $mesh
    rm -rf "$work/run$1"; cp -r "$work/saved" "$work/run$1"
    fail_log="$work/resume_np$1.log"
    $mpi -np $1 "$bin" $common --run-dir "$work/run$1" --tp $2 --dp $3 --resume > "$fail_log" 2>&1 || fail "resume on $1 ranks"
    grep -q "resumed from .*step_00000003 at step 3: .*index.h5 read by 1 of $1 ranks" "$fail_log" ||
        fail "resume on $1 ranks: no line saying index.h5 was read by rank 0 only"
done
ck="$work/saved/checkpoints/step_00000003"
fail_log="$work/eval.log"
$mpi -np 4 "$bin" eval --checkpoint "$ck" --data "$data" --tp 2 --dp 2 --batches 1 --batch 4 --seq-len 16 > "$fail_log" 2>&1 || fail "eval on 4 ranks"
grep -q "index.h5 read by 1 of 4 ranks" "$fail_log" || fail "eval: no line saying index.h5 was read by rank 0 only"
head -c 2000 "$ck/index.h5" > "$work/idx" && mv "$work/idx" "$ck/index.h5"
expect 1 "index.h5.*(corrupt|truncated)" "$work/damaged.log" $mpi -np 4 "$bin" eval --checkpoint "$ck" --data "$data" \
    --tp 2 --dp 2 --batches 1 --batch 4 --seq-len 16
echo "ok: resumed on 2, 4 and 8 ranks and evaluated on 4 with index.h5 read by rank 0 only; a damaged index fails the resume"
