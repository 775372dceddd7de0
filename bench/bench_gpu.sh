#!/usr/bin/env bash
# bench/bench_gpu.sh — training throughput and model-FLOPs utilisation of `meshpoint train --device cuda`
# on ONE GPU, for the 1B shape (configs/llama_1b.json: hidden 2048, 16 layers, 32 heads / 8 KV heads,
# intermediate 8192, vocab 32000, untied; seq 2048). docs/BENCH_GPU.md has the method and the results.
#
#   bench/bench_gpu.sh [--bin BUILD/meshpoint] [--config configs/llama_1b.json] [--batch 8] [--seq-len 2048]
#                      [--steps 6] [--warmup 2] [--peak 989e12] [--out DIR] [--data FILE --data-format u16|u32|llmc]
#                      [--min-mfu 35] [--profile-steps 2]
#
# One process, 1x1 mesh, batch = micro-batch (no gradient accumulation): 8 x 2048 tokens per step by
# default (the CPU memory plan of this shape is 58 GiB at micro-batch 8 with fp32 activations; bf16
# activations on the GPU need about half the activation part, well inside an H200's 141 GB). Tokens are
# random ids in [0, vocab) written once as a raw u16 file (as bench/bench_train.sh does), unless --data.
# AdamW lr 3e-4, no warm-up of the schedule, seed 1337, no checkpoints. The first --warmup steps (CUDA
# context, cuBLASLt heuristics, first-touch allocations) are not timed.
#
# tokens/s = tokens of the timed steps / their summed step times (from metrics.jsonl's tokens_per_s).
# Model FLOPs per token, the standard PaLM count (Chowdhery et al. 2022, appendix B):
#   6 N + 12 L H hd T
# N = the parameters that multiply (every linear weight including the LM head; not the embedding table,
# a lookup, nor the norms); 12 L H hd T = the attention score and value matmuls, forward and backward,
# over the FULL T x T square: causal masking is NOT halved (as PaLM counts), and the attention backward's
# recomputation is not counted (model FLOPs, not hardware FLOPs). MFU = FLOPs/token x tokens/s / peak,
# peak = 989e12 (H200 / H100 SXM dense bf16 tensor-core FLOP/s, without sparsity; --peak for another GPU).
# Prints one summary line:
#   bench_gpu: <gpu> | llama_1b (N=1.039G matmul params) | batch B x seq T | ... tokens/s ... | MFU ...%
# The floor: the run FAILS when any step's loss is not finite or when the MFU is below
# --min-mfu percent (default 35; the goal is 45). A dry run (MP_BENCH_GPU_DEVICE=cpu*) has no floor unless
# --min-mfu is given (tests/bench_gpu_floor.sh checks the floor that way).
# Per-kernel times: then two short runs with MP_CUDA_PROFILE (core/cuda/prof_cuda.h: cudaEvent pairs around
# every op of the backend) and CUDA_MODULE_LOADING=EAGER: one of 1 step, whose op count N is the sum of its
# calls column (gpu_roofline.py --count-ops), then one of 1 + --profile-steps steps (0: none) with MP_CUDA_PROFILE_SKIP=N, so it profiles
# the steady steps alone (the first step's cuBLASLt heuristics and first-touch allocations inflated the
# first GEMMs that paid for them 12x, and vary from run to run: subtracting the 1-step run's times instead
# gave negative ones on the H200), whose per-op times bench/gpu_roofline.py prints beside the roofline's (docs/CUDA.md):
# the table of FLOPs, bytes, roofline ms, measured ms per step and their ratio, and the projected MFU.
# CPU threads: a --device cuda run is one process, so OPENBLAS_NUM_THREADS (which caps meshpoint's CPU
# threads, and which scripts/gpu-check.sh sets for its multi-rank parts) is dropped for it: the random
# initialisation of 1.1 G parameters runs on the host (62 s on one core of the H200 machine).
# Exit status: 0 done and above the floor, 1 the run failed, a loss was not finite or the MFU is below the
# floor, 2 bad usage, 77 no usable GPU here (or a build without CUDA): nothing was run.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
bin="${MP_BIN:-}"
config="$root/configs/llama_1b.json"
batch=8
seq=2048
steps=6
warm=2
peak=989e12
out=""
data=""
fmt="u16"
min_mfu=35
min_mfu_given=0
prof_steps=2

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
bad() { echo "bench_gpu.sh: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --batch) batch="$2"; shift 2 ;;
    --seq-len) seq="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warm="$2"; shift 2 ;;
    --peak) peak="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --data-format) fmt="$2"; shift 2 ;;
    --min-mfu) min_mfu="$2"; min_mfu_given=1; shift 2 ;;
    --profile-steps) prof_steps="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_gpu.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  for b in "$root/build-gpu/meshpoint" "$root/build/meshpoint" "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then bad "no meshpoint binary (build it, or pass --bin)"; fi
[ -f "$config" ] || bad "no config $config"
for v in "$batch" "$seq" "$steps" "$warm"; do [[ "$v" =~ ^[0-9]+$ ]] || bad "--batch, --seq-len, --steps, --warmup: whole numbers"; done
if [ "$batch" -lt 1 ] || [ "$seq" -lt 1 ]; then bad "--batch and --seq-len must be >= 1"; fi
[ "$steps" -gt "$warm" ] || bad "--steps ($steps) must exceed --warmup ($warm)"
[[ "$peak" =~ ^[0-9.]+([eE][0-9]+)?$ ]] || bad "--peak FLOP/s (e.g. 989e12)"
[[ "$min_mfu" =~ ^[0-9]+(\.[0-9]+)?$ ]] || bad "--min-mfu: a percentage (e.g. 35)"
[[ "$prof_steps" =~ ^[0-9]+$ ]] || bad "--profile-steps: a whole number (0: no profile run)"

# Refuse cleanly where there is no GPU: the devices line of --version says why. (MP_BENCH_GPU_DEVICE=cpu
# or cpu-bf16 runs the script's logic on the CPU with a small --config: a dry run, no GPU figure.)
device="${MP_BENCH_GPU_DEVICE:-cuda}"
devices="$("$bin" --version 2>&1 | grep '^devices:' || true)"
case "$device:$devices" in
  cuda:*"cuda ("*|cpu:*|cpu-bf16:*) ;;
  *) echo "bench_gpu.sh: no usable GPU here, nothing run: ${devices:-$bin --version names no devices}" >&2; exit 77 ;;
esac
gpu="$(nvidia-smi --query-gpu=name --format=csv,noheader -i 0 2>/dev/null | head -1 || true)"
gpu="${gpu:-GPU 0}"
[ "$device" = cuda ] || gpu="$device (dry run, not a GPU figure)"

out="${out:-$(mktemp -d /tmp/mp_bench_gpu.XXXXXX)}"
mkdir -p "$out"
if [ -z "$data" ]; then
  data="$out/random_u16.bin"
  fmt="u16"
  vocab="$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['vocab_size'])" "$config")"
  [ "$vocab" -le 65536 ] || bad "vocab $vocab does not fit u16 tokens: pass --data with --data-format u32"
  # enough tokens that no step rereads a batch (stdlib only: the lent machine may lack numpy)
  "$PY" - "$data" $((steps * batch * seq + 1)) "$vocab" <<'EOF'
import array, random, sys
path, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(1)
array.array("H", (rng.randrange(vocab) for _ in range(n))).tofile(open(path, "wb"))
EOF
fi

# FLOPs per token (6N + 12 L H hd T) and the parameter counts.
read -r fpt nmm ntotal < <("$PY" - "$config" "$seq" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); T = int(sys.argv[2])
D, I, L, H, V = (c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
KV = c.get("num_key_value_heads", H); hd = D // H
nmm = L * (D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I) + D * V   # linear weights + LM head
ntotal = nmm + (0 if c.get("tie_word_embeddings") else V * D) + (2 * L + 1) * D   # + embedding table, norms
print(6 * nmm + 12 * L * H * hd * T, nmm, ntotal)
EOF
)
[ -n "${ntotal:-}" ] || bad "cannot read the model shape from $config"

[ "$device" != cuda ] || unset OPENBLAS_NUM_THREADS   # one process: every core for the random init
run="$out/run"
log="$out/train.log"
rm -rf "$run"
echo "bench_gpu: $bin on $gpu; $config, batch $batch x seq $seq, $steps steps ($warm warm-up); logs in $out"
echo "host: $(uname -m), $(nproc) cores, $(date -u '+%Y-%m-%d %H:%M UTC'); $devices"
t0=$SECONDS
if ! "$bin" train --config "$config" --device "$device" --steps "$steps" --batch "$batch" --grad-accum 1 --seq-len "$seq" \
     --lr 3e-4 --warmup 0 --seed 1337 --log-every 1 --train-data "$data" --data-format "$fmt" --run-dir "$run" \
     > "$log" 2>&1; then
  tail -20 "$log" >&2
  echo "bench_gpu.sh: meshpoint train --device $device failed; see $log" >&2
  exit 1
fi
wall=$((SECONDS - t0))
grep -E '^(memory|startup|model):' "$log" || true
floor=$min_mfu
[ "$device" = cuda ] || [ $min_mfu_given = 1 ] || floor=0
verdict=0
"$PY" - "$run/metrics.jsonl" "$warm" "$((batch * seq))" "$fpt" "$nmm" "$ntotal" "$peak" "$gpu" "$batch" "$seq" "$wall" \
  "$(basename "$config" .json)" "$floor" "$steps" <<'EOF' || verdict=1
import json, math, statistics, sys
metrics, warm, tokens, fpt, nmm, ntotal, peak, gpu, B, T, wall, name, floor, nsteps = sys.argv[1:]
warm, tokens, fpt, nmm, ntotal, peak = int(warm), int(tokens), float(fpt), int(nmm), int(ntotal), float(peak)
rows = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l]
bad = [r["step"] for r in rows if not math.isfinite(float(r["loss"]))]
if bad:
    sys.exit(f"bench_gpu.sh: FAIL: the loss is not finite at step(s) {bad}")
if len(rows) != int(nsteps):
    sys.exit(f"bench_gpu.sh: FAIL: {len(rows)} step lines in {metrics}, expected {nsteps}")
if len(rows) <= warm:
    sys.exit(f"bench_gpu.sh: {len(rows)} step lines in {metrics}, expected more than {warm}")
times = [tokens / r["tokens_per_s"] for r in rows]
timed = times[warm:]
tps = tokens * len(timed) / sum(timed)
med = tokens / statistics.median(timed)
mfu = fpt * tps / peak
for r, t in zip(rows, times):
    print(f"step {r['step']}: {t:.3f} s, {tokens / t:,.0f} tok/s, loss {r['loss']:.4f}")
print(f"FLOPs per token: {fpt / 1e9:.3f} G (6N + 12*L*H*hd*T, N = {nmm / 1e9:.3f} G matmul parameters of "
      f"{ntotal / 1e9:.3f} G in all; attention over the full T x T square, causal not halved)")
print(f"bench_gpu: {gpu} | {name} (N={nmm / 1e9:.3f}G matmul params) | batch {B} x seq {T} | "
      f"{tps:,.0f} tokens/s over {len(timed)} timed steps (median step {med:,.0f}) | "
      f"{fpt * tps / 1e12:.1f} TFLOP/s model | MFU {100 * mfu:.1f}% of {peak / 1e12:.0f} TFLOP/s bf16 dense | "
      f"{wall} s in all")
if 100 * mfu < float(floor):
    sys.exit(f"bench_gpu.sh: FAIL: MFU {100 * mfu:.1f}% is below the floor of {float(floor):g}%")
EOF
# per-kernel times beside the roofline (a CUDA run only: the profiler is the CUDA backend's)
if [ "$device" = cuda ] && [ "$prof_steps" -gt 0 ]; then
  # profile_run NAME STEPS SKIP: a profiled run of STEPS steps, its first SKIP ops not profiled; per-op file $out/NAME.tsv
  profile_run() {
    rm -rf "$run.$1"
    MP_CUDA_PROFILE="$out/$1.tsv" MP_CUDA_PROFILE_SKIP="$3" CUDA_MODULE_LOADING=EAGER "$bin" train --config "$config" --device cuda \
      --steps "$2" --batch "$batch" --grad-accum 1 --seq-len "$seq" --lr 3e-4 --warmup 0 --seed 1337 \
      --log-every 1 --train-data "$data" --data-format "$fmt" --run-dir "$run.$1" > "$out/$1.log" 2>&1 &&
      [ -s "$out/$1.tsv" ] || { tail -5 "$out/$1.log" >&2; false; }
  }
  if profile_run profile_first 1 0 && first_ops=$("$PY" "$here/gpu_roofline.py" --count-ops "$out/profile_first.tsv") &&
     profile_run profile $((1 + prof_steps)) "$first_ops"; then
    echo "per-op device time per step ($prof_steps profiled steps after the first, whose $first_ops ops are skipped; cudaEvent pairs) against the roofline:"
    "$PY" "$here/gpu_roofline.py" "$config" --batch "$batch" --seq-len "$seq" --peak "$peak" \
      --profile "$out/profile.tsv" --profile-steps "$prof_steps" || verdict=1
  else
    echo "bench_gpu.sh: FAIL: a profiled run failed or wrote no per-op file (logs $out/profile*.log)" >&2
    verdict=1
  fi
else
  echo "roofline of this shape (no per-op times: a $device run):"
  "$PY" "$here/gpu_roofline.py" "$config" --batch "$batch" --seq-len "$seq" --peak "$peak" || verdict=1
fi
exit $verdict
