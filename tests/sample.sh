#!/bin/bash
# tests/sample.sh MESHPOINT DATA CONFIG WORKDIR — `meshpoint sample`: with a
# fixed seed the continuation is deterministic and identical on 1 process, tp 2 and dp 2 (mpiexec -np 2);
# temperature 0 is greedy; --ids round-trips ids; every bad input exits 2 naming the problem. The KV cache
# gives exactly the tokens of the whole-sequence path (--no-kv-cache), greedy and seeded (temperature, top-k,
# top-p), on 1x1, tp 2 and tp 2 x dp 2, with sequences that cross the attention's 64-row blocks; generation
# stops after the config's eos_token_id (an int or a list) unless --ignore-eos.
set -u
bin=$1; data=$2; config=$3; work=$4; case=sample
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
mpi="mpiexec --allow-run-as-root --oversubscribe -np 2"
train --run-dir "$work/run" --steps 20 --ckpt-every 20 >/dev/null 2>&1 || fail "training the model"
# s CMD...: CMD's stdout, NUL bytes shown as \001: the model is byte-level, so a sample may hold a 0 byte,
# which bash drops from $(...) (the text then looked short: the corpus is docs/CLI.md, so any edit of it
# could make this test fail).
s() { "$@" 2>"$work/err" >"$work/out" || fail "exit $? from $*: $(cat "$work/err")"; tr '\000' '\001' <"$work/out"; }
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
expect 2 "--top-p must be in \(0, 1\]" "$work/e6" "$bin" sample --checkpoint "$work/run" --prompt x --top-p 0
expect 0 "activations .* \(KV cache [0-9.]+ [KM]?i?B of them\)" "$work/plan" "$bin" sample --checkpoint "$work/run" --prompt x --tokens 2

# the KV cache against the whole-sequence oracle: prompt 42 bytes + 70 tokens crosses the 64-row blocks
long="the quick brown fox jumps over the lazy do"
mpi4="mpiexec --allow-run-as-root --oversubscribe -np 4"
p=$(printf %s "$long" | od -An -tu1 | xargs)
for opts in "--temperature 0" "--seed 11" "--seed 5 --temperature 1.3 --top-k 40 --top-p 0.9" "--seed 3 --top-p 0.6"; do
  ref=$(s "$bin" sample --checkpoint "$work/run" --prompt "$p" --ids --tokens 70 $opts --no-kv-cache)
  [ "$(echo "$ref" | wc -w)" -eq 112 ] || fail "not 42 + 70 ids ($opts): $ref"
  for mesh in 1x1 tp2 tp2xdp2; do
    case $mesh in
      1x1) pre=(); m=() ;;
      tp2) pre=($mpi); m=(--tp 2) ;;
      tp2xdp2) pre=($mpi4); m=(--tp 2 --dp 2) ;;
    esac
    kv=$(s "${pre[@]}" "$bin" sample --checkpoint "$work/run" --prompt "$p" --ids --tokens 70 $opts "${m[@]}")
    [ "$kv" = "$ref" ] || fail "KV cache on $mesh ($opts) differs from the whole-sequence 1x1 run:\n$kv\n$ref"
    [ $mesh = 1x1 ] && continue
    nokv=$(s "${pre[@]}" "$bin" sample --checkpoint "$work/run" --prompt "$p" --ids --tokens 70 $opts "${m[@]}" --no-kv-cache)
    [ "$nokv" = "$ref" ] || fail "--no-kv-cache on $mesh ($opts) differs from 1x1:\n$nokv\n$ref"
  done
done

# the same on the CPU emulation of the GPU's bf16 precision (the cache holds bf16 keys and values)
b1=$(s "$bin" sample --checkpoint "$work/run" --prompt "$p" --ids --tokens 70 --seed 4 --device cpu-bf16)
b2=$(s "$bin" sample --checkpoint "$work/run" --prompt "$p" --ids --tokens 70 --seed 4 --device cpu-bf16 --no-kv-cache)
[ "$b1" = "$b2" ] || fail "cpu-bf16: the KV cache differs from --no-kv-cache:\n$b1\n$b2"

# end of sequence: the same model (same seed and data) with eos_token_id set to a token that sampling with
# --seed 7 makes (the first that is not a repeat), as an int and in a list
g=$(s "$bin" sample --checkpoint "$work/run" --prompt "116 104 101 32" --ids --tokens 30 --seed 7)
gen=($(echo "$g" | cut -d' ' -f5-))
k=2; while [ $k -lt 30 ] && printf ' %s ' "${gen[@]:0:k}" | grep -q " ${gen[k]} "; do k=$((k + 1)); done
[ $k -lt 30 ] || fail "sampled output repeats its tokens: $g"
eos=${gen[k]} other=0
while echo " $g " | grep -q " $other "; do other=$((other + 1)); done
want="116 104 101 32 ${gen[*]:0:k+1}"
for spec in "$eos" "[$other, $eos]"; do
  sed "s/\"vocab_size\"/\"eos_token_id\": $spec, \"vocab_size\"/" "$config" > "$work/eos.json"
  rm -rf "$work/run_eos"
  "$bin" train --config "$work/eos.json" --train-data "$data" --log-every 0 --run-dir "$work/run_eos" --steps 20 \
    --ckpt-every 20 >/dev/null 2>&1 || fail "training the eos_token_id $spec model"
  e=$(s "$bin" sample --checkpoint "$work/run_eos" --prompt "116 104 101 32" --ids --tokens 30 --seed 7)
  [ "$e" = "$want" ] || fail "eos_token_id $spec: expected a stop after the first $eos: '$want', got '$e'"
  e=$(s $mpi "$bin" sample --checkpoint "$work/run_eos" --prompt "116 104 101 32" --ids --tokens 30 --seed 7 --tp 2)
  [ "$e" = "$want" ] || fail "eos_token_id $spec on tp 2: expected '$want', got '$e'"
  i=$(s "$bin" sample --checkpoint "$work/run_eos" --prompt "116 104 101 32" --ids --tokens 30 --seed 7 --ignore-eos)
  [ "$i" = "$g" ] || fail "--ignore-eos: expected all 30 tokens '$g', got '$i'"
done
echo "ok: '$a' on every mesh; greedy '$g1'; the KV cache gives the whole-sequence tokens on 1x1, tp 2, tp 2 x dp 2; stops at eos $eos"
