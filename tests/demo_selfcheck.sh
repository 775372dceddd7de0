#!/usr/bin/env bash
# tests/demo_selfcheck.sh BIN WORKDIR CASE — the demo's stages (scripts/demo_stages.sh) check their own
# outcome. CASE "pass" runs the whole short demo (DEMO_STEPS=8) and expects exit 0 and every promised file;
# the other cases run it through a wrapper binary that breaks one stage the way a regression would
# (resume: `train --resume` fails; reshard: `reshard --out` exits 0 having written nothing; sample: prints
# no text; plot: writes no PNG) and expect exit 1 with "FAILED at stage <that stage>"; "foreign": a
# DEMO_RUN directory the demo did not make is refused with exit 2 and left as it was.
# Run from the repository root (the demo's relative paths); the caller (tests/demo.cmake) sets that.
set -uo pipefail
bin=$1 work=$2 case=$3
source "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work"
export DEMO_STEPS=8 DEMO_RUN=$work/demo MP_BIN=$bin

# A stand-in binary: the real one, except for the stage this case breaks.
cat >"$work/meshpoint" <<WRAP
#!/usr/bin/env bash
case "$case:\$1 \$*" in
  "resume:train "*--resume\ *|"resume:train "*--resume) echo "broken on purpose" >&2; exit 1 ;;
  "reshard:reshard "*--out*) exit 0 ;;
  "sample:sample "*) exit 0 ;;
  "plot:plot "*) exit 0 ;;
esac
exec "$bin" "\$@"
WRAP
chmod +x "$work/meshpoint"

case $case in
  pass)
    expect 0 "== demo passed" "$work/out.log" ./scripts/demo_stages.sh
    for f in demo/checkpoints/step_00000008/index.h5 demo/resharded_tp1_dp2/index.h5 \
             demo_dp2/checkpoints/step_00000012/index.h5 demo/curves.png demo/logs/sample.log; do
        [ -s "$work/$f" ] || fail "the demo passed but $f is missing"
    done ;;
  resume)  expect 1 "FAILED at stage train_resumed: .* exited 1" "$work/out.log" env MP_BIN="$work/meshpoint" ./scripts/demo_stages.sh ;;
  reshard) expect 1 "FAILED at stage reshard: no checkpoint at .*resharded_tp1_dp2" "$work/out.log" env MP_BIN="$work/meshpoint" ./scripts/demo_stages.sh ;;
  sample)  expect 1 "FAILED at stage sample: no sampled text" "$work/out.log" env MP_BIN="$work/meshpoint" ./scripts/demo_stages.sh ;;
  plot)    expect 1 "FAILED at stage plot: .*curves.png is missing or not a PNG" "$work/out.log" env MP_BIN="$work/meshpoint" ./scripts/demo_stages.sh ;;
  foreign)
    mkdir -p "$work/demo" && echo precious >"$work/demo/notes.txt"
    expect 2 "demo: error: .*/demo exists and was not made by the demo" "$work/out.log" ./scripts/demo_stages.sh
    [ "$(cat "$work/demo/notes.txt")" = precious ] || fail "the demo touched a directory it did not make"
    expect 2 "DEMO_STEPS must be a whole number >= 8, got '5'" "$work/out.log" env DEMO_STEPS=5 ./scripts/demo_stages.sh ;;
  *) fail "unknown case" ;;
esac
echo "PASS ($case)"
