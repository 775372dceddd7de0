# scripts/gpu_verdict.sh — sourced by scripts/gpu-check.sh (and tests/gpu_check_verdicts.sh): the parts of a
# check under one time budget and their verdicts. The caller sets budget (seconds, against bash's
# SECONDS) and out (the log folder); then:
#   part NAME LIMIT REQ CMD...  runs CMD under `timeout` with min(LIMIT, time left), output in $out/NAME.log
#   finish                      prints the summary and exits 0 (every part passed or was optional) or 1
# Verdicts: PASS (exit 0); FAIL (another exit, or CMD hit its OWN LIMIT: a hang); NOT RUN (out of time)
# when the budget, not LIMIT, stopped it or left it under 10 s; NOT RUN (skipped) on exit 77. REQ 1 marks
# a required part: its NOT RUN fails the check as a FAIL does.
# MP_GPU_CHECK_PARTS (optional): names of the parts to run, separated by spaces or commas (a short
# diagnostic call on a lent machine); every other part is NOT RUN (skipped: not asked for), so a required
# one left out still fails the check: a partial run never reads as a whole one.
summary=()
failed=0
note() { summary+=("$1"); echo "== $1"; }
left() { echo $((budget - SECONDS)); }

# part NAME LIMIT REQ CMD...: as above.
part() {
  local name=$1 limit=$2 req=$3; shift 3
  local t0=$SECONDS rc l log="$out/$name.log" cut=0
  if [ -n "${MP_GPU_CHECK_PARTS:-}" ] && ! [[ " ${MP_GPU_CHECK_PARTS//,/ } " == *" $name "* ]]; then
    note "$name: NOT RUN (skipped: not in MP_GPU_CHECK_PARTS)"; [ "$req" = 0 ] || failed=1; return 0
  fi
  l=$(left)
  if [ "$l" -lt 10 ]; then
    note "$name: NOT RUN (out of time: ${l} s left of the ${budget} s budget)"; [ "$req" = 0 ] || failed=1; return 0
  fi
  if [ "$limit" -gt "$l" ]; then limit=$l; cut=1; fi
  timeout -k 5 "$limit" "$@" > "$log" 2>&1
  rc=$?
  tail -15 "$log"
  case $rc in
    0) note "$name: PASS ($((SECONDS - t0)) s)" ;;
    77) note "$name: NOT RUN (skipped: $(grep -v '^$' "$log" | tail -1 | cut -c1-200))"; [ "$req" = 0 ] || failed=1 ;;
    124|137)
      if [ $cut = 1 ]; then note "$name: NOT RUN (out of time: the budget stopped it after $limit s; log $log)"
        [ "$req" = 0 ] || failed=1
      else note "$name: FAIL (timed out after its own limit of $limit s: hung or far too slow; log $log)"; failed=1; fi ;;
    *) note "$name: FAIL (exit $rc, $((SECONDS - t0)) s; log $log)"; failed=1 ;;
  esac
}
# finish: the summary, then exit with the verdict.
finish() {
  echo
  echo "== summary ($SECONDS s of the ${budget} s budget; logs in $out)"
  for s in "${summary[@]}"; do echo "  $s"; done
  if [ $failed = 0 ]; then echo "gpu-check: PASS"; else echo "gpu-check: FAIL (a part failed or a required part did not run)"; fi
  exit $failed
}
