# tests/lib.sh — shell helpers sourced by the shell test scripts (tests/*.sh) after they set case (the
# name in failure messages) and, for train(), bin, data and config:
#   fail MSG...            prints "FAIL (case): MSG" (and the file $fail_log names, if set and present)
#                          and exits 1
#   train ARGS...          meshpoint train with the script's config and data, no step logging
#   expect CODE PATTERN LOG CMD...
#                          runs CMD into LOG; its exit status must be CODE and LOG must match the
#                          extended regular expression PATTERN, else fail (with the log)
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
