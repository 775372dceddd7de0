# scripts/gpu_verdict.sh — sourced by scripts/gpu-check.sh (and tests/gpu_check_verdicts.sh): the parts of a
# check under one time budget and their verdicts. The caller sets budget (seconds, against bash's
# SECONDS) and out (the log folder); then:
#   part NAME LIMIT REQ CMD...  runs CMD under `timeout` with min(LIMIT, time left), output in $out/NAME.log
#   finish                      prints the summary and exits 0 (every part passed or was optional) or 1
# Verdicts: PASS (exit 0); FAIL (another exit, or CMD hit its OWN LIMIT: a hang); NOT RUN (out of time)
# when the budget, not LIMIT, stopped it or left it under 10 s; NOT RUN (skipped) on exit 77; NOT RUN
# (refused) when refused_re (an extended regex, set for the one call: refused_re=RE part ...) matches a
# line of its output, whatever its exit: the tool would not run here (compute-sanitizer on a device it does
# not support), so it neither passed nor failed; the verdict quotes the tool's line. REQ 1 marks a
# required part: its NOT RUN fails the check as a FAIL does.
# card (optional): the device every result line and the summary name (gpu-check.sh sets it from nvidia-smi
# or meshpoint's device line), so that no figure is read as another card's.
# MP_GPU_CHECK_PARTS (optional): names of the parts to run, separated by spaces or commas (a short
# diagnostic call on a lent machine); every other part is NOT RUN (skipped: not asked for), so a required
# one left out still fails the check: a partial run never reads as a whole one.
summary=()
failed=0
# compute-sanitizer's own lines (prefixed =========) saying it will not run on this device or runtime
# ("Error: Device not supported", a confidential-computing or MIG refusal, "Target application terminated
# before first instrumented API call"): refused_re for the sanitizer parts
mp_sanitizer_refused_re='^=+ .*(not supported|unsupported|before first instrumented)'

note() { local l="$1${card:+ [$card]}"; summary+=("$l"); echo "== $l"; }
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
  local refusal=""
  [ -n "${refused_re:-}" ] && refusal=$(grep -Ei -m1 -- "$refused_re" "$log" | tr -s ' \t' ' ' | cut -c1-200)
  if [ -n "$refusal" ] && [ $rc != 124 ] && [ $rc != 137 ]; then
    note "$name: NOT RUN (refused by the tool: \"$refusal\"; log $log)"; [ "$req" = 0 ] || failed=1; return 0
  fi
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
  echo "== summary ($SECONDS s of the ${budget} s budget; logs in $out)${card:+ on $card}"
  for s in "${summary[@]}"; do echo "  $s"; done
  if [ $failed = 0 ]; then echo "gpu-check: PASS${card:+ on $card}"
  else echo "gpu-check: FAIL${card:+ on $card} (a part failed or a required part did not run)"; fi
  exit $failed
}
