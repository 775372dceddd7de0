# tests/lib.sh — shell helpers sourced by the shell test scripts (tests/*.sh) after they set case (the
# name in failure messages) and, for train(), bin, data and config:
#   fail MSG...            prints "FAIL (case): MSG" (and the file $fail_log names, if set and present)
#                          and exits 1
#   train ARGS...          meshpoint train with the script's config and data, no step logging
#   expect CODE PATTERN LOG CMD...
#                          runs CMD into LOG; its exit status must be CODE and LOG must match the
#                          extended regular expression PATTERN, else fail (with the log)
#   peak_within_plan NAME LOG [NP]
#                          LOG holds a "memory: peak" line (of NP ranks, if given) whose peak is within its
#                          plan plus the 16 MiB library allowance (docs/DESIGN_NOTES.md, "The memory plan is
#                          an upper bound"); the bound is not asserted in the sanitizer build (MP_SANITIZED,
#                          tests/sanitize.cmake: ASan's quarantine and shadow pages add tens of MiB)
fail() {
    echo "FAIL ($case): $*"
    [ -n "${fail_log:-}" ] && [ -f "$fail_log" ] && cat "$fail_log"
    exit 1
}
train() { "$bin" train --config "$config" --train-data "$data" --log-every 0 "$@"; }
expect() {
    local code=$1 pattern=$2 log=$3; shift 3
    "$@" >"$log" 2>&1; local rc=$?
    [ $rc -eq "$code" ] || fail "expected exit $code, got $rc from: $*: $(cat "$log")"
    grep -Eq -- "$pattern" "$log" || fail "output does not match /$pattern/: $(cat "$log")"
}
peak_within_plan() {
    local line peak plan allowance=$((16 * 1048576))
    line=$(grep 'memory: peak' "$2") || fail "$1: no 'memory: peak' line: $(cat "$2")"
    peak=$(echo "$line" | sed -n 's/.*memory: peak [^(]*(\([0-9]*\) bytes).*/\1/p')
    plan=$(echo "$line" | sed -n 's/.*, plan [^(]*(\([0-9]*\) bytes).*/\1/p')
    [ -n "$peak" ] && [ -n "$plan" ] || fail "$1: cannot read the figures of: $line"
    [ -z "${3:-}" ] || echo "$line" | grep -q " on rank [0-9]* of $3 " || fail "$1: not the line of $3 ranks: $line"
    if [ -n "${MP_SANITIZED:-}" ]; then
        echo "$1: peak $peak, plan $plan bytes (bound not asserted in the sanitizer build)"
        return
    fi
    [ "$peak" -le $((plan + allowance)) ] ||
        fail "$1: peak $peak bytes is $(((peak - plan) / 1048576)) MiB above the plan ($plan bytes): $line"
    echo "$1: peak $((peak / 1048576)) MiB, plan $((plan / 1048576)) MiB"
}
