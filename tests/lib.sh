# tests/lib.sh — shell helpers sourced by the CLI test scripts (tests/run_dir.sh, train_nonfinite.sh,
# ckpt_naming.sh) after they set bin, data, config and case:
#   fail MSG...            prints "FAIL (case): MSG" and exits 1
#   train ARGS...          meshpoint train with the script's config and data, no step logging
#   expect CODE PATTERN LOG CMD...
#                          runs CMD into LOG; its exit status must be CODE and LOG must match the
#                          extended regular expression PATTERN, else fail (with the log)
fail() { echo "FAIL ($case): $*"; exit 1; }
train() { "$bin" train --config "$config" --train-data "$data" --log-every 0 "$@"; }
expect() {
    local code=$1 pattern=$2 log=$3; shift 3
    "$@" >"$log" 2>&1; local rc=$?
    [ $rc -eq "$code" ] || fail "expected exit $code, got $rc from: $*: $(cat "$log")"
    grep -Eq -- "$pattern" "$log" || fail "output does not match /$pattern/: $(cat "$log")"
}
