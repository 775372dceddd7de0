#!/bin/sh
# tests/expect.sh CODE PATTERN CMD... — runs CMD, passes if it exits with CODE and its combined output
# matches the extended regular expression PATTERN. Used by ctest entries that launch mpiexec.
code=$1; pattern=$2; shift 2
out=$("$@" 2>&1); rc=$?
if [ "$rc" -ne "$code" ]; then
    printf 'expected exit %s, got %s from: %s\n%s\n' "$code" "$rc" "$*" "$out"; exit 1
fi
if ! printf '%s\n' "$out" | grep -Eq -- "$pattern"; then
    printf 'output does not match /%s/:\n%s\n' "$pattern" "$out"; exit 1
fi
# an error found by every rank is reported once (by rank 0), not once per rank
n=$(printf '%s\n' "$out" | grep -c 'meshpoint [a-z ]*: error:')
if [ "$code" -eq 2 ] && [ "$n" -gt 1 ]; then
    printf 'the error was printed %s times (expected once):\n%s\n' "$n" "$out"; exit 1
fi
echo "ok: exit $rc, output matches /$pattern/"
