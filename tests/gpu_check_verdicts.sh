#!/usr/bin/env bash
# tests/gpu_check_verdicts.sh SRC WORK — the verdicts of scripts/gpu-check.sh's parts (scripts/gpu_verdict.sh),
# on plain commands in place of the GPU's programs, so that they are proven where no GPU is:
#   a passing part is PASS; a part that fails is FAIL; one that hits its OWN limit is FAIL (a hang); one the
#   budget cuts short is NOT RUN (out of time), never FAIL; one left under 10 s is NOT RUN (out of time);
#   exit 77 is NOT RUN (skipped, with its reason); a NOT RUN of a required part fails the check (exit 1),
#   of an optional part does not (exit 0).
set -u
src=$1; work=$2
case=gpu_check_verdicts; . "$src/tests/lib.sh"
rm -rf "$work"; mkdir -p "$work"
# run_parts BUDGET 'PART...;...': a fresh shell sources gpu_verdict.sh, runs the parts, then finish
run_parts() {
  bash -c 'budget=$1 out=$2; SECONDS=0; . "$3/scripts/gpu_verdict.sh"; eval "$4"; finish' _ "$1" "$work" "$src" "$2" > "$work/out" 2>&1
  echo $? > "$work/rc"
}
expect_line() { grep -Eq -- "$1" "$work/out" || fail "no line /$1/ in: $(cat "$work/out")"; }
expect_rc() { [ "$(cat "$work/rc")" = "$1" ] || fail "exit $(cat "$work/rc"), expected $1: $(cat "$work/out")"; }

run_parts 60 'part ok 5 1 true; part opt_skip 5 0 sh -c "echo SKIP: no thing; exit 77"'
expect_line '^  ok: PASS'; expect_line '^  opt_skip: NOT RUN \(skipped: SKIP: no thing\)'; expect_rc 0

run_parts 60 'part ok 5 1 true; part bad 5 1 false'
expect_line '^  bad: FAIL \(exit 1'; expect_rc 1

run_parts 60 'part hang 2 1 sleep 30'
expect_line '^  hang: FAIL \(timed out after its own limit of 2 s'; expect_rc 1

run_parts 60 'part req_skip 5 1 sh -c "echo SKIP: refused; exit 77"'
expect_line '^  req_skip: NOT RUN \(skipped: SKIP: refused\)'; expect_rc 1

# budget 12 s: the part may run 12 s against its own 100; stopped by the budget, it is NOT RUN, and the
# next part, with no time left, is NOT RUN too; an optional part cut short does not fail the check
run_parts 12 'part long 100 1 sleep 60; part next 5 1 true'
expect_line '^  long: NOT RUN \(out of time: the budget stopped it'; expect_line '^  next: NOT RUN \(out of time'
grep -Eq '^  (long|next): FAIL' "$work/out" && fail "a part cut by the budget was reported FAIL: $(cat "$work/out")"
expect_rc 1
run_parts 12 'part opt_long 100 0 sleep 60'
expect_line '^  opt_long: NOT RUN \(out of time'; expect_rc 0
# MP_GPU_CHECK_PARTS runs only the parts it names: the others are NOT RUN (skipped), and a required
# one left out fails the check
MP_GPU_CHECK_PARTS="b, opt" run_parts 60 'part a 5 1 true; part b 5 1 true; part opt 5 0 true; part opt2 5 0 false'
expect_line '^  a: NOT RUN \(skipped: not in MP_GPU_CHECK_PARTS\)'; expect_line '^  b: PASS'; expect_line '^  opt: PASS'
expect_line '^  opt2: NOT RUN \(skipped'; expect_rc 1
MP_GPU_CHECK_PARTS=opt run_parts 60 'part opt 5 0 true; part opt2 5 0 false'
expect_line '^  opt: PASS'; expect_line '^  opt2: NOT RUN \(skipped'; expect_rc 0
echo "gpu_check_verdicts: PASS, FAIL, own-limit FAIL, budget NOT RUN, skipped NOT RUN, required vs optional, MP_GPU_CHECK_PARTS: as specified"
