# bench/bench_lib.sh — helpers shared by bench/bench_reshard.sh and bench/bench_convert.sh (sourced).
# Expects: $work (the work directory), $prime_on (1: prime), $PY (python3 with numpy), $me (the script's
# name, for messages). Sets $cold (1 while the page cache can be dropped).
cold=1
drop() { sync; if [ "$cold" = 1 ] && ! { echo 3 > /proc/sys/vm/drop_caches; } 2> /dev/null; then cold=0; fi; }
now() { date +%s.%N; }
mib() { awk -v b="$1" 'BEGIN { printf "%.0f", b / 1048576 }'; }
gb() { awk -v b="$1" 'BEGIN { printf "%.2f", b / 1e9 }'; }
avail_bytes() { echo $(( $(df -Pk "$work" | awk 'NR == 2 { print $4 }') * 1024 )); }
# fits BYTES WHAT: refuses the step unless the work filesystem has BYTES + 1 GiB free.
fits() {
  local a; a="$(avail_bytes)"
  if [ "$a" -lt $(( $1 + (1 << 30) )) ]; then
    echo "$me: $2 needs about $(mib "$1") MiB on $work, $(mib "$a") MiB free (+1 GiB margin): refused" >&2
    echo "  (df -h: $(df -h "$work" | awk 'NR == 2 { print $4 " free of " $2 }'); use fewer --layers or --dir elsewhere)" >&2
    exit 1
  fi
}
# prime BYTES: touch and free fresh memory (capped at MemAvailable - 2 GiB), see the header.
prime() {
  [ "$prime_on" = 1 ] || return 0
  local avail n
  avail=$(( $(awk '/^MemAvailable:/ { print $2 }' /proc/meminfo) * 1024 ))
  n=$(( $1 < avail - (2 << 30) ? $1 : avail - (2 << 30) ))
  [ "$n" -gt 0 ] || return 0
  # only a warm-up: if other programs took the memory meanwhile (the OOM killer ends it), go on
  "$PY" -c 'import sys, numpy as np; a = np.ones(int(sys.argv[1]), np.uint8)' "$n" 2> /dev/null ||
    echo "$me: priming $(mib "$n") MiB failed (memory taken meanwhile?); the next part may pay first touches" >&2
}
rss_mib() { awk -F': ' '/Maximum resident set size/ { printf "%.0f", $2 / 1024 }' "$1"; }
# run_timed LOG TIMEFILE CMD...: runs CMD under /usr/bin/time -v, stderr (and stdout) to LOG; sets T_S.
run_timed() {
  local log="$1" tf="$2" t0 t1; shift 2
  t0="$(now)"
  if ! /usr/bin/time -v -o "$tf" "$@" > "$log" 2>&1; then
    echo "$me: failed: $*" >&2; tail -n 20 "$log" >&2; exit 1
  fi
  t1="$(now)"
  T_S="$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')"
}
dir_bytes() { local s=0 f; for f in "$1"/rank_*.h5; do s=$(( s + $(stat -c %s "$f") )); done; echo "$s"; }

