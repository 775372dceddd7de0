#!/bin/bash
# tests/sample.sh MESHPOINT DATA CONFIG WORKDIR — `meshpoint sample` (issue 10 item 5): with a fixed seed the
# continuation is deterministic and identical on 1 process, tp 2 and dp 2 (mpiexec -np 2); temperature 0 is
# greedy; --ids round-trips ids; every bad input exits 2 naming the problem.
set -u
bin=$1; data=$2; config=$3; work=$4; case=sample
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
mpi="mpiexec --allow-run-as-root --oversubscribe -np 2"
train --run-dir "$work/run" --steps 20 --ckpt-every 20 >/dev/null 2>&1 || fail "training the model"
s() { "$@" 2>"$work/err" || fail "exit $? from $*: $(cat "$work/err")"; }
a=$(s "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 24 --seed 7)
b=$(s "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 24 --seed 7)
[ "$a" = "$b" ] || fail "two runs with --seed 7 differ"
[ "$(printf %s "$a" | wc -c)" -ge 28 ] && [ "${a:0:4}" = "the " ] || fail "not the prompt and 24 tokens: '$a'"
c=$(s "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 24 --seed 8)
[ "$a" != "$c" ] || fail "--seed 8 gives the same text as --seed 7"
t=$(s $mpi "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 24 --seed 7 --tp 2)
[ "$a" = "$t" ] || fail "tp 2 differs: '$a' vs '$t'"
d=$(s $mpi "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 24 --seed 7 --dp 2)
[ "$a" = "$d" ] || fail "dp 2 differs: '$a' vs '$d'"
g1=$(s "$bin" sample --checkpoint "$work/run" --prompt "116 104 101 32" --ids --tokens 12 --temperature 0 --seed 1)
g2=$(s "$bin" sample --checkpoint "$work/run" --prompt "116 104 101 32" --ids --tokens 12 --temperature 0 --seed 2)
[ "$g1" = "$g2" ] || fail "greedy sampling depends on the seed"
[ "$(echo "$g1" | wc -w)" -eq 16 ] && [ "$(echo "$g1" | cut -d' ' -f1-4)" = "116 104 101 32" ] || fail "--ids output: '$g1'"
gt=$(s $mpi "$bin" sample --checkpoint "$work/run" --prompt "116 104 101 32" --ids --tokens 12 --temperature 0 --tp 2)
[ "$g1" = "$gt" ] || fail "greedy on tp 2 differs"
expect 2 "meshpoint sample: error: --temperature must be >= 0" "$work/e1" "$bin" sample --checkpoint "$work/run" --prompt x --temperature -1
expect 2 "--prompt: \"300\" is not a token id below vocab_size 256" "$work/e2" "$bin" sample --checkpoint "$work/run" --prompt "1 300" --ids
expect 2 "pass max_position_embeddings \(128\)" "$work/e3" "$bin" sample --checkpoint "$work/run" --prompt x --tokens 200
expect 2 "--checkpoint DIR and --prompt TEXT are required" "$work/e4" "$bin" sample --checkpoint "$work/run"
expect 2 "--top-k must be >= 0" "$work/e5" "$bin" sample --checkpoint "$work/run" --prompt x --top-k -2
k1=$(s "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 16 --seed 7 --top-k 1)
k0=$(s "$bin" sample --checkpoint "$work/run" --prompt "the " --tokens 16 --temperature 0)
[ "$k1" = "$k0" ] || fail "--top-k 1 is not greedy: '$k1' vs '$k0'"
echo "ok: '$a' on every mesh; greedy '$g1'"
