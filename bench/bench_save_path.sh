#!/usr/bin/env bash
# bench/bench_save_path.sh — what checkpoints cost a training run, measured on the run itself:
# memory, the step after a save, and a resume's start-up, each against its own limit in the same run.
#
#   bench/bench_save_path.sh [--bin build/meshpoint] [--config configs/bench_small.json] [--steps 8]
#                            [--every 2] [--threads N] [--out DIR] [--keep]
#
# Three runs of `meshpoint train` (one process, 1x1 mesh, CPU, OPENBLAS_NUM_THREADS=N), each under
# /usr/bin/time -v, on the same random tokens:
#   A. --steps S, no checkpoints                      peak RSS, median step
#   B. --steps S --ckpt-every E (sync saves)          peak RSS, every step, every save's time
#   C. B resumed for one more step (--resume --steps S+1), the page cache dropped before it (cold), and
#      nothing else changed: start-up (process start to the first step) and the load, from its log.
# Printed, with the goal of each:
#   1. memory of sync saves: (peak RSS of B - peak RSS of A) / the state (parameters + both AdamW moments,
#      the checkpoint's bytes): goal <= 0.05 (a sync save on the CPU writes straight from the shards);
#   2. the step after a save: the median of the steps right after a save / the median of the other
#      steps (the first step and the step after it are warm-up and left out): goal <= 1.2; the save's own
#      time is printed beside it, never inside a step (tokens_per_s in metrics.jsonl is the step alone);
#   3. resume start-up / the load inside it: goal <= 1.3 (a resume does not run the random init).
# A 4th run (B with --async-save) shows what the staging copy of an async save costs, for reference.
# Exit status: 0 all goals met, 1 a goal missed or a run failed, 2 bad usage.
# Timings on a shared machine are noisy; the ratios compare figures from the same minutes. About 5
# minutes with the defaults on 2 cores (bench_small: ~8 s a step).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
PY=/usr/bin/python3
bin=""
config="$root/configs/bench_small.json"
steps=8
every=2
threads="$(nproc)"
out=""
keep=0

usage() { sed -n '2,27p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --config) config="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --every) every="$2"; shift 2 ;;
    --threads) threads="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "bench_save_path.sh: unknown argument $1" >&2; usage >&2; exit 2 ;;
  esac
done
if [ -z "$bin" ]; then
  for b in "$root/build/meshpoint" "$root"/build-*/meshpoint; do
    if [ -x "$b" ]; then bin="$b"; break; fi
  done
fi
[ -n "$bin" ] && [ -x "$bin" ] || { echo "bench_save_path.sh: no meshpoint binary (build it, or pass --bin)" >&2; exit 2; }
[ -x /usr/bin/time ] || { echo "bench_save_path.sh: needs GNU time at /usr/bin/time (scripts/setup.sh installs it)" >&2; exit 2; }
[ -f "$config" ] || { echo "bench_save_path.sh: no config $config" >&2; exit 2; }
[ "$steps" -ge 4 ] && [ "$every" -ge 1 ] && [ "$every" -lt "$steps" ] ||
  { echo "bench_save_path.sh: needs --steps >= 4 and 1 <= --every < --steps" >&2; exit 2; }
out="${out:-$(mktemp -d /tmp/mp_bench_save_path.XXXXXX)}"
mkdir -p "$out"
for d in A B C D; do
  [ ! -e "$out/$d" ] || { echo "bench_save_path.sh: $out/$d exists (pass a fresh --out)" >&2; exit 2; }
done
export OPENBLAS_NUM_THREADS="$threads" OMP_NUM_THREADS="$threads"

data="$out/random_u16.bin"
"$PY" -c "import numpy as np; np.random.default_rng(1).integers(0, 32000, size=64*8*1024+1, dtype=np.uint16).tofile('$data')"
echo "meshpoint save-path benchmark: $bin, $(basename "$config"), $steps steps, save every $every, $threads threads"
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//'); out $out"

cold=1
drop() { sync; if ! { echo 1 > /proc/sys/vm/drop_caches; } 2> /dev/null; then cold=0; fi; }

# run NAME RUN_DIR ARGS...: meshpoint train under /usr/bin/time -v into $out/NAME.log / NAME.time.
run() {
  local name="$1" dir="$2"; shift 2
  if ! /usr/bin/time -v -o "$out/$name.time" "$bin" train --config "$config" --train-data "$data" --data-format u16 \
       --run-dir "$dir" "$@" > "$out/$name.log" 2>&1; then
    echo "bench_save_path.sh: run $name failed: $(tail -3 "$out/$name.log")" >&2
    exit 1
  fi
}
rss_kib() { awk -F': ' '/Maximum resident set size/ {print $2}' "$1"; }

drop; run A "$out/A" --steps "$steps"
drop; run B "$out/B" --steps "$steps" --ckpt-every "$every"
cp "$out/B/metrics.jsonl" "$out/B.metrics.jsonl"   # C appends its step to B's run directory
drop; run C "$out/B" --steps "$((steps + 1))" --resume
drop; run D "$out/D" --steps "$steps" --ckpt-every "$every" --async-save

status=0
"$PY" - "$out" "$steps" "$every" "$(rss_kib "$out/A.time")" "$(rss_kib "$out/B.time")" "$(rss_kib "$out/D.time")" "$cold" <<'EOF' || status=$?
import json, re, statistics, sys
out, steps, every, rss_a, rss_b, rss_d, cold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), \
    int(sys.argv[4]) * 1024, int(sys.argv[5]) * 1024, int(sys.argv[6]) * 1024, sys.argv[7] == "1"
MiB = 1048576.0

def rates(path):
    r = {}
    for line in open(path):
        o = json.loads(line)
        if "tokens_per_s" in o: r[o["step"]] = o["tokens_per_s"]
    return r

def log(name):
    return open(f"{out}/{name}.log").read()

a, b = rates(f"{out}/A/metrics.jsonl"), rates(f"{out}/B.metrics.jsonl")
warm = {1, 2}
after = [s for s in b if s not in warm and (s - 1) % every == 0 and s > 1]           # steps right after a save
other_b = [s for s in b if s not in warm and s not in after]
med_a = statistics.median(1 / a[s] for s in a if s not in warm)                      # seconds per token
med_b = statistics.median(1 / b[s] for s in other_b) if other_b else med_a
med_after = statistics.median(1 / b[s] for s in after)
tps = lambda spt: 1 / spt
saves = [float(x) for x in re.findall(r"checkpoint step \d+ saved: ([0-9.]+) s", log("B"))]
state = [float(x) for x in re.findall(r"saved: .*?([0-9.]+) MiB this rank", log("B"))][0] * MiB
m = re.search(r"startup: ([0-9.]+) s from process start to the first step \(checkpoint load ([0-9.]+) s", log("C"))
if not m: sys.exit("bench_save_path.sh: run C's log has no start-up line (was it resumed?)")
startup, load = float(m.group(1)), float(m.group(2))
a_startup = float(re.search(r"startup: ([0-9.]+) s", log("A")).group(1))

mem_ratio = (rss_b - rss_a) / state
step_ratio = med_after / med_b
start_ratio = startup / load
print()
print(f"state (parameters + 2 moments): {state / MiB:.1f} MiB")
print(f"{'run':<34} {'peak RSS MiB':>13} {'median tok/s':>13}")
print(f"{'A  no checkpoints':<34} {rss_a / MiB:>13.1f} {tps(med_a):>13.1f}")
print(f"{'B  sync save every %d' % every:<34} {rss_b / MiB:>13.1f} {tps(med_b):>13.1f}")
print(f"{'D  async save every %d (reference)' % every:<34} {rss_d / MiB:>13.1f}")
print(f"B: steps after a save {sorted(after)}: median {tps(med_after):.1f} tok/s; "
      f"saves {', '.join('%.2f' % s for s in saves)} s (median {statistics.median(saves):.2f} s, not in any step)")
print(f"C: resume ({'cold' if cold else 'WARM: page cache not dropped'}): start-up {startup:.2f} s, of which "
      f"load {load:.2f} s; a fresh run's start-up (A, random init) {a_startup:.2f} s")
print()
goals = [("sync-save memory: (peak B - peak A) / state", mem_ratio, 0.05),
         ("step after a save / median step", step_ratio, 1.2),
         ("resume start-up / its load", start_ratio, 1.3)]
missed = 0
for name, v, lim in goals:
    ok = v <= lim
    missed += not ok
    print(f"  {name:<46} {v:6.3f}  (goal <= {lim}: {'met' if ok else 'MISSED'})")
print(f"  async staging for reference: (peak D - peak A) / state {(rss_d - rss_a) / state:.3f}")
sys.exit(1 if missed else 0)
EOF
[ "$keep" = 1 ] || rm -rf "$out/A" "$out/B" "$out/D" "$data"
exit $status
