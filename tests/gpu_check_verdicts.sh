#!/usr/bin/env bash
# tests/gpu_check_verdicts.sh SRC WORK — the verdicts of scripts/gpu-check.sh's parts (scripts/gpu_verdict.sh),
# on plain commands in place of the GPU's programs, so that they are proven where no GPU is:
#   a passing part is PASS; a part that fails is FAIL; one that hits its OWN limit is FAIL (a hang); one the
#   budget cuts short is NOT RUN (out of time), never FAIL; one left under 10 s is NOT RUN (out of time);
#   exit 77 is NOT RUN (skipped, with its reason); a tool's refusal (refused_re) is NOT RUN (refused, its
#   line quoted) whatever its exit; a NOT RUN of a required part fails the check (exit 1), of an optional
#   part does not (exit 0); every line and the summary name the card.
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
# a sanitizer this device or runtime refuses (a fake compute-sanitizer printing the tool's own refusal, with
# gpu-check.sh's refused_re): NOT RUN (refused) quoting the line, whether it exits 1 or 0 (a refusal that
# "passes" checked nothing), never FAIL or PASS; a required one fails the check; a sanitizer that runs and
# finds an error is still FAIL, and the same regex on a clean run is PASS
cat > "$work/fake-sanitizer" <<'SAN'
#!/bin/sh
# fake-sanitizer MODE --tool T ...: refuse1/refuse0 (refuse, exit 1/0), error (a finding), clean
case $1 in
  refuse*) echo "========= COMPUTE-SANITIZER"; echo "========= Error: Device not supported. Please refer to the Supported Devices section."
           [ "$1" = refuse0 ] && exit 0; exit 1 ;;
  error) echo "========= Invalid __global__ write of size 4 bytes"; echo "========= ERROR SUMMARY: 1 error"; exit 1 ;;
  clean) echo "========= COMPUTE-SANITIZER"; echo "check_kernels_device: all checks passed"; echo "========= ERROR SUMMARY: 0 errors" ;;
esac
SAN
chmod +x "$work/fake-sanitizer"
san="$work/fake-sanitizer"
run_parts 60 "refused_re=\$mp_sanitizer_refused_re part san_r1 5 0 $san refuse1 --tool memcheck x; \
  refused_re=\$mp_sanitizer_refused_re part san_r0 5 0 $san refuse0 --tool racecheck x"
expect_line '^  san_r1: NOT RUN \(refused by the tool: "========= Error: Device not supported\.'
expect_line '^  san_r0: NOT RUN \(refused by the tool: "========= Error: Device not supported\.'
grep -Eq '^  san_r[01]: (FAIL|PASS)' "$work/out" && fail "a refused sanitizer was reported FAIL or PASS: $(cat "$work/out")"
expect_rc 0
run_parts 60 "refused_re=\$mp_sanitizer_refused_re part san_req 5 1 $san refuse0 --tool memcheck x"
expect_line '^  san_req: NOT RUN \(refused'; expect_rc 1
run_parts 60 "refused_re=\$mp_sanitizer_refused_re part san_err 5 0 $san error --tool memcheck x; \
  refused_re=\$mp_sanitizer_refused_re part san_ok 5 0 $san clean --tool memcheck x"
expect_line '^  san_err: FAIL \(exit 1'; expect_line '^  san_ok: PASS'; expect_rc 1
# the card: every result line and the summary name it
run_parts 60 'card="NVIDIA H100 80GB HBM3"; part ok 5 1 true; part opt 5 0 false'
expect_line '^  ok: PASS \([0-9]+ s\) \[NVIDIA H100 80GB HBM3\]$'; expect_line '^  opt: FAIL .*\[NVIDIA H100 80GB HBM3\]$'
expect_line '^== summary .* on NVIDIA H100 80GB HBM3$'; expect_line '^gpu-check: FAIL on NVIDIA H100 80GB HBM3 '
echo "gpu_check_verdicts: PASS, FAIL, own-limit FAIL, budget NOT RUN, skipped NOT RUN, refused NOT RUN, required vs optional, MP_GPU_CHECK_PARTS, the card: as specified"
