#!/bin/bash
# tests/cli_scripting.sh MESHPOINT DATA CONFIG WORKDIR CASE — the CLI for people and scripts.
# Every case asserts exit codes and output, and fails if its feature is gone.
#   version   `meshpoint --version` and `meshpoint <cmd> --version`: program version (CMake project
#             version, git describe when known) and the checkpoint format version, exit 0
#   help      --help shows the defaults actually used: `--sp, --no-sp` with "auto", the
#             `--no-reshard-after-forward` form with "on", plain values, and "required" for reshard's --tp
#   errors    bad input to train, eval, data, reshard, init and every ckpt subcommand: exit 2 and exactly
#             one line `meshpoint <cmd>: error: ...` (never the old bare `meshpoint: error:`)
#   json      eval --json, ckpt verify --json (good and damaged checkpoint) and ckpt diff --json (equal and
#             different checkpoints) print one JSON object on stdout, parsed with python3 and its fields
#             checked, with the text mode's exit status
#   progress  MP_PROGRESS=1 draws the bar for a save, a load, ckpt verify, ckpt diff and ckpt show --stats;
#             without it (stderr is a file here, not a terminal) no bar is drawn
#   eta       train's step lines give the run's wall time and an ETA; a line comes before the load
set -u
bin=$1; data=$2; config=$3; work=$4; case=$5
py=/usr/bin/python3
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
unset MP_PROGRESS
# a 4-step run with checkpoints at steps 2 and 4 in $work/run
make_run() { train --run-dir "$work/run" --steps 4 --ckpt-every 2 >"$work/train.log" 2>&1 || fail "training: $(cat "$work/train.log")"; }
ck2=$work/run/checkpoints/step_00000002
ck4=$work/run/checkpoints/step_00000004
# json_check FILE PYTHON-EXPR: FILE holds exactly one JSON object d for which EXPR is true
json_check() {
    "$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
if not eval(sys.argv[2]): sys.exit("false: " + sys.argv[2] + "\n" + json.dumps(d, indent=1)[:3000])' "$1" "$2" \
        || fail "JSON check failed on $1: $(head -c 3000 "$1")"
}

case "$case" in
version)
    for cmd in "" train "ckpt verify" reshard; do
        # shellcheck disable=SC2086
        expect 0 "^meshpoint [0-9]+\.[0-9]+\.[0-9]+" "$work/v" "$bin" $cmd --version
        grep -Eq "^checkpoint format: meshpoint-checkpoint v[0-9]+" "$work/v" || fail "no format version: $(cat "$work/v")"
    done
    # OpenBLAS's kernels as OpenBLAS reports them (openblas_get_corename), marked when OPENBLAS_CORETYPE
    # chose them (Prescott: a core every x86-64 OpenBLAS build has)
    grep -Eq "^blas: OpenBLAS, [A-Za-z0-9]+( \(OPENBLAS_CORETYPE\))? kernels$" "$work/v" || fail "no blas line: $(cat "$work/v")"
    OPENBLAS_CORETYPE=Prescott "$bin" --version > "$work/vb" || fail "--version with OPENBLAS_CORETYPE exited $?"
    grep -q "^blas: OpenBLAS, Prescott (OPENBLAS_CORETYPE) kernels$" "$work/vb" || fail "OPENBLAS_CORETYPE not reported: $(cat "$work/vb")"
    grep -q "v$(grep -o 'CKPT_FORMAT_VERSION [0-9]*' "$(dirname "$0")/../ckpt/ckpt.h" | grep -o '[0-9]*$') " "$work/v" \
        || fail "the format version is not ckpt.h's: $(cat "$work/v")"
    if git -C "$(dirname "$0")" rev-parse --git-dir >/dev/null 2>&1; then
        grep -q "(git [0-9a-f]" "$work/v" || fail "built from a git checkout, but no git describe: $(cat "$work/v")"
    fi
    echo "ok ($case): $(head -1 "$work/v")"
    ;;
help)
    expect 0 "--sp, --no-sp" "$work/h" "$bin" train --help
    grep -Eq -- "--sp, --no-sp .*\[default: auto\]" "$work/h" || fail "--sp does not show auto: $(cat "$work/h")"
    grep -q -- "--no-reshard-after-forward" "$work/h" || fail "no --no-reshard-after-forward form: $(cat "$work/h")"
    grep -A1 -- "--reshard-after-forward, --no-reshard-after-forward" "$work/h" | grep -q "\[default: on\]" \
        || fail "--reshard-after-forward does not show its default on: $(cat "$work/h")"
    grep -Eq -- "--steps N .*\[default: 100\]" "$work/h" || fail "--steps default: $(cat "$work/h")"
    grep -Eq -- "--ckpt-dir DIR .*\[default: RUN/checkpoints\]" "$work/h" || fail "--ckpt-dir default: $(cat "$work/h")"
    grep -q "\[default: \]" "$work/h" && fail "an empty default is shown: $(cat "$work/h")"
    grep -q -- "--version" "$work/h" || fail "--version not listed"
    expect 0 "--tp N .*\[default: required\]" "$work/h" "$bin" reshard --help
    grep -q -- "--no-verify, --no-no-verify" "$work/h" && fail "a switch named no-X shows --no-no-X"
    expect 0 "--json, --no-json" "$work/h" "$bin" ckpt verify --help
    echo "ok ($case)"
    ;;
errors)
    make_run
    # every refusal: exit 2 and one line with the command's own prefix
    one() {
        local prefix=$1; shift
        expect 2 "^$prefix: error: " "$work/e" "$@"
        [ "$(grep -c 'error:' "$work/e")" -eq 1 ] || fail "not one error line: $(cat "$work/e")"
        [ "$prefix" != meshpoint ] && grep -q "^meshpoint: error" "$work/e" && fail "the old bare prefix: $(cat "$work/e")"
        return 0
    }
    one "meshpoint train" "$bin" train --config "$config" --train-data "$data" --steps -3
    one "meshpoint train" "$bin" train --steps 3
    one "meshpoint eval" "$bin" eval --data "$data"
    one "meshpoint eval" "$bin" eval --checkpoint "$work/nothere" --data "$data"
    one "meshpoint data" "$bin" data --val-fraction 2 "$data"
    one "meshpoint reshard" "$bin" reshard "$ck4" --tp 0 --dp 1 --out "$work/x"
    one "meshpoint init" "$bin" init --tp 1 --dp 1 --out "$work/x"
    one "meshpoint ckpt verify" "$bin" ckpt verify "$work/nothere"
    one "meshpoint ckpt diff" "$bin" ckpt diff "$ck4"
    one "meshpoint ckpt show" "$bin" ckpt show --bogus "$ck4"
    one "meshpoint ckpt ls" "$bin" ckpt ls "$work/nothere"
    one "meshpoint ckpt" "$bin" ckpt nosuchsub
    one "meshpoint" "$bin" nosuchcommand
    echo "ok ($case)"
    ;;
json)
    make_run
    # eval: the same loss as the text line, exit 0
    expect 0 "eval loss" "$work/eval.txt" "$bin" eval --checkpoint "$work/run" --data "$data" --batches 2
    "$bin" eval --checkpoint "$work/run" --data "$data" --batches 2 --json >"$work/eval.json" 2>"$work/eval.err" \
        || fail "eval --json: exit $?: $(cat "$work/eval.err")"
    txt=$(grep -o 'eval loss [0-9.]*' "$work/eval.txt" | grep -o '[0-9.]*$')
    json_check "$work/eval.json" "abs(d['loss'] - $txt) < 5e-7 and d['batches'] == 2 and d['batches_requested'] == 2 and \
d['step'] == 4 and d['checkpoint'].endswith('step_00000004') and d['tokens'] == 2 * d['batch_size'] * d['seq_len'] \
and d['tp'] == 1 and d['dp'] == 1"
    "$bin" eval --config "$config" --data "$data" --batches 1 --json >"$work/eval0.json" 2>/dev/null || fail "eval --json (init)"
    json_check "$work/eval0.json" "d['checkpoint'] is None and d['step'] is None and d['weights'] == 'initialisation'"
    # verify: ok
    "$bin" ckpt verify "$ck4" --json >"$work/v.json" 2>"$work/v.err" || fail "verify --json: exit $?: $(cat "$work/v.err")"
    json_check "$work/v.json" "d['ok'] is True and d['problems'] == [] and d['tensors'] > 0 and \
d['bytes_read'] >= d['tensor_bytes'] > 0 and d['checkpoint'].endswith('step_00000004') and d['format_only'] is False"
    # verify: a damaged checkpoint (a byte flipped in a tensor's data), exit 1 as in text mode
    cp -r "$ck4" "$work/bad"
    "$py" - "$work/bad/rank_00000.h5" <<'PY' || fail "could not damage the copy"
import sys, h5py
path = sys.argv[1]
with h5py.File(path, "r") as f:
    name = []
    f.visititems(lambda n, o: name.append(n) if isinstance(o, h5py.Dataset) and "down_proj" in n and not name else None)
    off = f[name[0]].id.get_offset()
with open(path, "r+b") as g:
    g.seek(off + 5); b = g.read(1); g.seek(off + 5); g.write(bytes([b[0] ^ 0x10]))
PY
    "$bin" ckpt verify "$work/bad" >"$work/bad.txt" 2>&1; rc_text=$?
    "$bin" ckpt verify "$work/bad" --json >"$work/bad.json" 2>/dev/null; rc=$?
    [ $rc -eq 1 ] && [ $rc_text -eq 1 ] || fail "damaged: verify exit $rc (--json) / $rc_text (text), expected 1"
    json_check "$work/bad.json" "d['ok'] is False and len(d['problems']) >= 1"
    # diff: equal (exit 0) and different (exit 1)
    "$bin" ckpt diff "$ck4" "$ck4" --json >"$work/d0.json" 2>/dev/null || fail "diff --json of equal checkpoints: exit $?"
    json_check "$work/d0.json" "d['equal'] is True and d['tolerance'] is None and d['summary']['differ'] == 0 and \
d['summary']['bitwise_equal'] == d['a']['tensors'] and d['tensors'] == []"
    "$bin" ckpt diff "$ck2" "$ck4" --json >"$work/d1.json" 2>/dev/null; rc=$?
    [ $rc -eq 1 ] || fail "diff --json of different checkpoints: exit $rc, expected 1"
    json_check "$work/d1.json" "d['equal'] is False and d['summary']['differ'] > 0 and \
any(t['status'] == 'differs' and t['max_abs_diff'] > 0 for t in d['tensors']) and d['a']['step'] == 2 and \
d['b']['step'] == 4 and any('step' in m for m in d['metadata_differences'])"
    "$bin" ckpt diff "$ck2" "$ck4" --json --atol 100 --rtol 0 >"$work/d2.json" 2>/dev/null
    json_check "$work/d2.json" "d['tolerance'] == {'atol': 100, 'rtol': 0} and d['summary']['within_tolerance'] > 0"
    echo "ok ($case)"
    ;;
progress)
    make_run
    grep -q "checkpoint \[" "$work/train.log" && fail "a bar was drawn without a terminal: $(cat "$work/train.log")"
    for c in "ckpt verify $ck4" "ckpt diff $ck2 $ck4" "ckpt show --stats $ck4"; do
        # shellcheck disable=SC2086
        "$bin" $c >/dev/null 2>"$work/quiet.err"
        [ -s "$work/quiet.err" ] && fail "$c drew on stderr, which is no terminal: $(cat -A "$work/quiet.err")"
        # shellcheck disable=SC2086
        MP_PROGRESS=1 "$bin" $c >/dev/null 2>"$work/bar.err"
        label=${c% *}; label=${label% $ck2}
        grep -q "$label \[#*\.*\] *[0-9]*%" "$work/bar.err" || fail "no bar for $c: $(cat -A "$work/bar.err")"
        grep -q "100%" "$work/bar.err" || fail "the bar for $c does not reach 100%: $(cat -A "$work/bar.err")"
        MP_PROGRESS=0 "$bin" $c >/dev/null 2>"$work/off.err"
        [ -s "$work/off.err" ] && fail "MP_PROGRESS=0 still drew for $c"
    done
    # a save and a load during training
    MP_PROGRESS=1 train --run-dir "$work/run2" --steps 2 --ckpt-every 2 >"$work/save.log" 2>&1 || fail "train: $(cat "$work/save.log")"
    grep -q "saving checkpoint \[" "$work/save.log" || fail "no bar for a save: $(cat -A "$work/save.log")"
    MP_PROGRESS=1 train --run-dir "$work/run2" --steps 3 --resume >"$work/load.log" 2>&1 || fail "resume: $(cat "$work/load.log")"
    grep -q "loading checkpoint \[.*100%" "$work/load.log" || fail "no bar for a load: $(cat -A "$work/load.log")"
    echo "ok ($case)"
    ;;
eta)
    "$bin" train --config "$config" --train-data "$data" --run-dir "$work/run" --steps 4 --ckpt-every 4 \
        >"$work/log" 2>&1 || fail "training: $(cat "$work/log")"
    [ "$(grep -Ec '^step +[0-9]+/4 \|.*\| time [0-9.hms]+ \| ETA [0-9.hms]+$' "$work/log")" -eq 4 ] \
        || fail "step lines without time and ETA: $(cat "$work/log")"
    grep -Eq '^step +4/4 .*ETA 0\.0s$' "$work/log" || fail "the last step's ETA is not 0: $(cat "$work/log")"
    # a resumed run's time continues (the checkpoint carries the run's wall time); a line before the load
    "$bin" train --config "$config" --train-data "$data" --run-dir "$work/run" --steps 5 --resume \
        >"$work/log2" 2>&1 || fail "resume: $(cat "$work/log2")"
    grep -q "^loading checkpoint .*step_00000004" "$work/log2" || fail "no line before the load: $(cat "$work/log2")"
    grep -Eq '^step +5/5 \|.*\| time [0-9.hms]+ \| ETA 0\.0s$' "$work/log2" || fail "resumed step line: $(cat "$work/log2")"
    echo "ok ($case)"
    ;;
*) fail "unknown case" ;;
esac
