#!/usr/bin/env bash
# bench/bench_train.sh — training throughput of `meshpoint train` (CPU, one process, 1x1 mesh) against
# current PyTorch on the same machine in the same run, for configs/bench_tiny.json, bench_tiny_qwen3.json (the
# tiny shape as Qwen3: head_dim 128 > hidden/heads, q/k norms) and bench_small.json.
#
#   bench/bench_train.sh [--bin build/meshpoint] [--threads N] [--only tiny,qwen3,small] [--out DIR]
#                        [--tiny-steps 10] [--small-steps 2] [--peers eager,compile[,debian]]
#                        [--modes 1,N] [--repeat R] [--python PY] [--sgemm-bin PATH]
#                        [--data FILE --data-format u16|u32|llmc]
#
# Sides (bench/torch_train.py runs every PyTorch one; docs/BENCH_TRAIN.md has the method and results):
#   meshpoint      `meshpoint train`, OPENBLAS_NUM_THREADS=OMP_NUM_THREADS=threads;
#   torch-eager    transformers' LlamaForCausalLM (sdpa attention), float32, fused AdamW, torch 2.15 from
#                  the venv of scripts/bench_venv.sh (created on first use: ~6 GB, minutes);
#   torch-compile  the same under torch.compile (inductor); compile + warm-up steps are not timed;
#   torch1.13      (--peers ...,debian) tests/python/llama_torch.py on Debian's torch 1.13 (/usr/bin/python3).
# All: same batch (4) and sequence (256 tiny, 512 small), same tokens (random ids in [0, 32000) written
# once as a raw u16 file, unless --data), AdamW 0.9/0.95, eps 1e-8, weight decay 0.1 on matrices, clip
# 1.0, lr 3e-4. The first steps (tiny 2, small 1) are warm-up and not timed.
# Each side runs twice per config (--modes): on 1 thread, where the figure is tokens per CPU-second (user +
# sys time of the process over the timed steps: hardly moved by other processes on the cores) and the
# utilisation (model FLOP/s per CPU-second / OpenBLAS's 1-thread sgemm FLOP/s per CPU-second at the
# model's GEMM shapes, measured in the same run by bench/sgemm_rate.c); and on N threads (default nproc),
# where the figure is wall-clock tokens/s over the timed steps and of the median step. Ratios are
# meshpoint / peer. --repeat R alternates the sides R times and keeps each side's best run (1 thread: most
# tokens per CPU-second; N threads: best median step). Exit status: 0 done, 1 a run failed, 2 bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
SYSPY=/usr/bin/python3
bin="${MP_BIN:-}"
threads="$(nproc)"
only=""
out=""
tiny_steps=10
small_steps=2
peers="eager,compile"
modes="1,N"
data=""
fmt="u16"
repeat=1
venv_py=""
sgemm_bin=""

usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --tiny-steps) tiny_steps="$2"; shift 2 ;;
    --small-steps) small_steps="$2"; shift 2 ;;
    --peers) peers="$2"; shift 2 ;;
    --modes) modes="$2"; shift 2 ;;
    --data) data="$2"; shift 2 ;;
    --data-format) fmt="$2"; shift 2 ;;
    --repeat) repeat="$2"; shift 2 ;;
    --python) venv_py="$2"; shift 2 ;;
    --sgemm-bin) sgemm_bin="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_train.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
bad() { echo "bench_train.sh: $*" >&2; exit 2; }
if [ -z "$bin" ]; then
  for b in "$root/build/meshpoint" "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || bad "no meshpoint binary (build it, or pass --bin)"
for o in ${only//,/ }; do case "$o" in tiny|small|qwen3) ;; *) bad "--only tiny|qwen3|small (or a comma list)" ;; esac; done
# wants NAME: whether --only asks for config NAME (no --only: every config)
wants() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
[[ "$tiny_steps" =~ ^[0-9]+$ && "$tiny_steps" -gt 2 ]] || bad "--tiny-steps must exceed the 2 warm-up steps"
[[ "$small_steps" =~ ^[0-9]+$ && "$small_steps" -gt 1 ]] || bad "--small-steps must exceed the 1 warm-up step"
[[ "$threads" =~ ^[0-9]+$ && "$threads" -ge 1 ]] || bad "--threads N"
[[ "$repeat" =~ ^[0-9]+$ && "$repeat" -ge 1 ]] || bad "--repeat R"
declare -a sides=(meshpoint) mode_list=()
for p in ${peers//,/ }; do
  case "$p" in
    eager) sides+=(torch-eager) ;; compile) sides+=(torch-compile) ;; debian) sides+=(torch1.13) ;;
    *) bad "--peers: eager, compile, debian" ;;
  esac
done
for m in ${modes//,/ }; do
  case "$m" in 1) mode_list+=(1) ;; N|n) mode_list+=("$threads") ;; *) bad "--modes: 1 and/or N" ;; esac
done
[ ${#mode_list[@]} -gt 0 ] || bad "--modes: 1 and/or N"
[ "${mode_list[*]}" != "1 1" ] || mode_list=(1)
out="${out:-$(mktemp -d /tmp/mp_bench_train.XXXXXX)}"
mkdir -p "$out"

# The venv's python (torch 2.15 + transformers) when a current-torch peer runs.
if [[ " ${sides[*]} " == *" torch-eager "* || " ${sides[*]} " == *" torch-compile "* ]] && [ -z "$venv_py" ]; then
  venv_py="$("$root/scripts/bench_venv.sh")" || { echo "bench_train.sh: scripts/bench_venv.sh failed" >&2; exit 1; }
fi
# bench/sgemm_rate: next to the meshpoint binary (the CMake target), else compiled here against OpenBLAS.
if [ -z "$sgemm_bin" ]; then
  sgemm_bin="$(dirname "$bin")/sgemm_rate"
  if [ ! -x "$sgemm_bin" ]; then
    sgemm_bin="$out/sgemm_rate"
    # shellcheck disable=SC2046
    cc -O2 -o "$sgemm_bin" "$here/sgemm_rate.c" $(pkg-config --cflags --libs openblas) ||
      { echo "bench_train.sh: cannot build bench/sgemm_rate.c (make the sgemm_rate target, or --sgemm-bin)" >&2; exit 1; }
  fi
fi

if [ -z "$data" ]; then
  data="$out/random_u16.bin"
  fmt="u16"
  # 64 batches of the larger config: enough that no step of any run rereads a batch.
  "$SYSPY" -c "import numpy as np; np.random.default_rng(1).integers(0, 32000, size=64*4*512+1, dtype=np.uint16).tofile('$data')"
fi

echo "meshpoint training benchmark: $bin; threads 1 and $threads; data $data ($fmt); logs in $out"
echo "host: $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u '+%Y-%m-%d %H:%M UTC')"
[ -z "$venv_py" ] || echo "torch-eager/compile: $("$venv_py" -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)') ($venv_py)"
[[ " ${sides[*]} " != *" torch1.13 "* ]] || echo "torch1.13: torch $("$SYSPY" -c 'import torch; print(torch.__version__)') ($SYSPY)"

# model_shapes CONFIG B T: "FLOPS_PER_TOKEN N_MATMUL SPEC..." — the training FLOPs per token by the
# standard 6N + 12*L*H*hd*T (N: the parameters that multiply, i.e. every linear weight with the LM head,
# not the embedding table or norms; attention over the full T x T square), and the model's linear-layer
# GEMMs as bench/sgemm_rate specs with their counts per step: forward x W^T (nt), input gradient dy W (nn),
# weight gradient dy^T x (tn), as layers/llama.c calls them.
model_shapes() {
  "$SYSPY" - "$1" "$2" "$3" <<'EOF'
import json, sys
c = json.load(open(sys.argv[1])); B, T = int(sys.argv[2]), int(sys.argv[3])
D, I, L, H, V = (c[k] for k in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"))
KV = c.get("num_key_value_heads", H); hd = c.get("head_dim") or D // H; qd, kd, N = H * hd, KV * hd, B * T
lin = [(D, qd, L), (D, kd, 2 * L), (qd, D, L), (D, I, 2 * L), (I, D, L), (D, V, 1)]   # (in, out, count)
nmm = sum(i * o * k for i, o, k in lin)
specs = {}
for i, o, k in lin:
    for s in (f"nt:{N}x{o}x{i}", f"nn:{N}x{i}x{o}", f"tn:{o}x{i}x{N}"):
        specs[s] = specs.get(s, 0) + k
print(6 * nmm + 12 * L * H * hd * T, nmm, " ".join(f"{s}*{k}" for s, k in specs.items()))
EOF
}

# run_meshpoint NAME CONFIG STEPS WARMUP B T THREADS TAG: runs `meshpoint train`, samples the process's CPU
# time (/proc/PID/stat utime + stime) when the metrics line of the last warm-up step and of the last step
# appear; prints "TOK_PER_S MEDIAN TOK_PER_CPU_S CPU_S WARMUP_S".
run_meshpoint() {
  local name="$1" cfg="$2" steps="$3" warm="$4" B="$5" T="$6" th="$7" tag="$8"
  local run="$out/run_${name}_$tag"
  rm -rf "$run"
  OPENBLAS_NUM_THREADS="$th" OMP_NUM_THREADS="$th" "$SYSPY" - "$run/metrics.jsonl" "$warm" "$steps" $((B * T)) \
      "$out/meshpoint_${name}_$tag.log" "$bin" train --config "$cfg" --steps "$steps" --batch "$B" --seq-len "$T" \
      --lr 3e-4 --warmup 0 --seed 1337 --train-data "$data" --data-format "$fmt" --run-dir "$run" <<'EOF'
import json, os, statistics, subprocess, sys, time
metrics, warm, steps, tps, log = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
tick = os.sysconf("SC_CLK_TCK")
with open(log, "w") as lf:
    p = subprocess.Popen(sys.argv[6:], stdin=subprocess.DEVNULL, stdout=lf, stderr=subprocess.STDOUT)
def cpu():
    s = open(f"/proc/{p.pid}/stat").read()
    f = s[s.rindex(")") + 2:].split()
    return (int(f[11]) + int(f[12])) / tick
def exited():   # without reaping it: an exited child's /proc/PID/stat still holds its final times
    return os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
mark = {}
while len(mark) < 2:
    done = exited()
    try:
        with open(metrics) as f:
            n = sum(1 for l in f if l.endswith("\n") and '"tokens_per_s"' in l)
    except FileNotFoundError:
        n = 0
    for k in (warm, steps):
        if n >= k and k not in mark:
            mark[k] = (n, cpu())
    if done:
        break
    time.sleep(0.005)
if p.wait() != 0:
    sys.exit(f"meshpoint train failed (exit {p.returncode}); see {log}")
if any(mark.get(k, (-1,))[0] != k for k in (warm, steps)):
    sys.exit(f"missed a step boundary while sampling CPU time ({mark}); rerun")
rows = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l]
times = [tps / r["tokens_per_s"] for r in rows]
timed = times[warm:]
cpu_s = mark[steps][1] - mark[warm][1]
print(f"{tps * len(timed) / sum(timed):.1f} {tps / statistics.median(timed):.1f} {tps * len(timed) / cpu_s:.1f} "
      f"{cpu_s:.2f} {sum(times[:warm]):.1f}")
EOF
}

# run_torch SIDE NAME CONFIG STEPS WARMUP B T THREADS TAG: prints "TOK_PER_S MEDIAN TOK_PER_CPU_S CPU_S WARMUP_S".
run_torch() {
  local side="$1" name="$2" cfg="$3" steps="$4" warm="$5" B="$6" T="$7" th="$8" tag="$9" py res
  local -a extra=()
  case "$side" in
    torch-eager) py="$venv_py"; extra=(--model hf --adamw fused) ;;
    torch-compile) py="$venv_py"; extra=(--model hf --adamw fused --compile) ;;
    torch1.13) py="$SYSPY"; extra=(--model ref) ;;
  esac
  local log="$out/${side}_${name}_$tag.log"
  if ! res="$("$py" "$here/torch_train.py" --config "$cfg" --steps "$steps" --warmup "$warm" --batch "$B" \
       --seq-len "$T" --threads "$th" --lr 3e-4 --seed 1337 --train-data "$data" --data-format "$fmt" \
       "${extra[@]}" 2> "$log" | tail -1)"; then
    echo "torch_train.py ($side) failed; see $log:" >&2; tail -5 "$log" >&2; return 1
  fi
  local f v
  for f in tok_per_s tok_per_s_median tok_per_cpu_s cpu_s warmup_s; do
    v="$(sed -n "s/.* $f=\([0-9.]*\).*/\1/p" <<< "$res")"
    [ -n "$v" ] || { echo "torch_train.py ($side) printed no $f; see $log" >&2; return 1; }
    printf '%s ' "$v"
  done
  echo
}

declare -A best=() sgemm=() sgemm_span=() fpt=()
sgemm_rate=""
declare -a names=()

# sgemm_at NAME WHEN SPECS: runs bench/sgemm_rate on 1 thread, sets sgemm_rate (GFLOP/s per CPU-second).
sgemm_at() {
  local t0=$SECONDS log="$out/sgemm_${1}_$2.log" line
  # shellcheck disable=SC2086
  OPENBLAS_NUM_THREADS=1 "$sgemm_bin" --min-time 0.2 $3 > "$log" || { echo "sgemm_rate failed" >&2; exit 1; }
  line="$(tail -1 "$log")"
  sgemm_rate="$(sed -n 's/.*gflops_cpu=\([0-9.]*\).*/\1/p' <<< "$line")"
  echo "OpenBLAS sgemm ($2), 1 thread, the model's GEMM shapes: $sgemm_rate GFLOP/s per CPU-second" \
       "($(sed -n 's/.*\(core=.*\)/\1/p' <<< "$line"), $((SECONDS - t0)) s; $log)"
}

bench_config() {   # NAME CONFIG STEPS WARMUP B T
  local name="$1" cfg="$2" steps="$3" warm="$4" B="$5" T="$6" f nmm specs line
  names+=("$name")
  echo
  echo "== $name: $cfg, batch $B x seq $T, $steps steps ($warm warm-up), $repeat round(s)"
  read -r f nmm specs < <(model_shapes "$cfg" "$B" "$T")
  fpt[$name]="$f"
  echo "model: $(awk -v n="$nmm" -v f="$f" 'BEGIN { printf "%.1fM matmul parameters, %.1f MFLOP per token (6N + 12*L*H*hd*T)", n / 1e6, f / 1e6 }')"
  # OpenBLAS's 1-thread rate at these shapes, before and after the config's runs (the mean is the limit:
  # load from other processes moves even CPU-time rates a little, and the two show by how much).
  local before after
  sgemm_at "$name" before "$specs"; before="$sgemm_rate"
  local r th side res key t m c s w t0
  for ((r = 1; r <= repeat; r++)); do
    for th in "${mode_list[@]}"; do
      for side in "${sides[@]}"; do
        t0=$SECONDS
        if [ "$side" = meshpoint ]; then
          res="$(run_meshpoint "$name" "$cfg" "$steps" "$warm" "$B" "$T" "$th" "t${th}_$r")" || exit 1
        else
          res="$(run_torch "$side" "$name" "$cfg" "$steps" "$warm" "$B" "$T" "$th" "t${th}_$r")" || exit 1
        fi
        read -r t m c s w <<< "$res"
        printf 'round %d %-14s %2d thr: %9s tok/s (median step %9s), %9s tok/CPU-s (%6s CPU-s), warm-up %5s s, %3d s in all\n' \
          "$r" "$side" "$th" "$t" "$m" "$c" "$s" "$w" $((SECONDS - t0))
        key="$name/$side/$th"
        if [ -z "${best[$key]:-}" ]; then best[$key]="$res"; continue; fi
        # keep the better run: on 1 thread by tokens per CPU-second, else by the median step
        read -r _ bm bc _ _ <<< "${best[$key]}"
        if awk -v th="$th" -v m="$m" -v c="$c" -v bm="$bm" -v bc="$bc" \
             'BEGIN { exit !((th == 1 && c > bc) || (th != 1 && m > bm)) }'; then best[$key]="$res"; fi
      done
    done
  done
  sgemm_at "$name" after "$specs"; after="$sgemm_rate"
  sgemm[$name]="$(awk -v a="$before" -v b="$after" 'BEGIN { printf "%.2f", (a + b) / 2 }')"
  sgemm_span[$name]="$before -> $after"
}

! wants tiny || bench_config tiny "$root/configs/bench_tiny.json" "$tiny_steps" 2 4 256
! wants qwen3 || bench_config qwen3 "$root/configs/bench_tiny_qwen3.json" "$tiny_steps" 2 4 256
! wants small || bench_config small "$root/configs/bench_small.json" "$small_steps" 1 4 512

# The table. Ratio columns: meshpoint / that side (blank on meshpoint's own row).
has1=0; hasN=0
for th in "${mode_list[@]}"; do if [ "$th" = 1 ]; then has1=1; else hasN=1; fi; done
echo
echo "summary (best of $repeat; ratio = meshpoint / that side):"
[ $has1 = 0 ] || echo "  1 thread:  tokens per CPU-second (user+sys over the timed steps); util = model FLOP/s per CPU-s / OpenBLAS 1-thread sgemm FLOP/s per CPU-s"
[ $hasN = 0 ] || echo "  $threads threads: wall-clock tokens/s over the timed steps and of the median step (noisy on a shared machine)"
hdr="$(printf '%-6s %-14s' config side)"
for th in "${mode_list[@]}"; do
  if [ "$th" = 1 ]; then hdr+="$(printf ' %10s %6s %6s %7s' tok/CPU-s ratio util warm-s)"
  else hdr+="$(printf ' %9s %6s %9s %6s %7s' "tok/s" ratio median ratio warm-s)"; fi
done
echo "$hdr"
for name in "${names[@]}"; do
  for side in "${sides[@]}"; do
    row="$(printf '%-6s %-14s' "$name" "$side")"
    for th in "${mode_list[@]}"; do
      read -r t m c s w <<< "${best[$name/$side/$th]}"
      read -r mt mm mc _ _ <<< "${best[$name/meshpoint/$th]}"
      if [ "$th" = 1 ]; then
        row+="$(awk -v c="$c" -v mc="$mc" -v f="${fpt[$name]}" -v g="${sgemm[$name]}" -v w="$w" -v me="$side" \
          'BEGIN { printf " %10.1f %6s %5.1f%% %7.1f", c, me == "meshpoint" ? "" : sprintf("%.2fx", mc / c), 100 * c * f / (g * 1e9), w }')"
      else
        row+="$(awk -v t="$t" -v m="$m" -v mt="$mt" -v mm="$mm" -v w="$w" -v me="$side" \
          'BEGIN { printf " %9.1f %6s %9.1f %6s %7.1f", t, me == "meshpoint" ? "" : sprintf("%.2fx", mt / t), m, me == "meshpoint" ? "" : sprintf("%.2fx", mm / m), w }')"
      fi
    done
    echo "$row"
  done
done
for name in "${names[@]}"; do
  echo "$name: $(awk -v f="${fpt[$name]}" 'BEGIN { printf "%.1f", f / 1e6 }') MFLOP/token (6N + 12*L*H*hd*T); OpenBLAS sgemm ${sgemm[$name]} GFLOP/s per CPU-s (1 thread, the model's GEMM shapes; before -> after the runs: ${sgemm_span[$name]})"
done
