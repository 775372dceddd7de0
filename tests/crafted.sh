#!/bin/bash
# tests/crafted.sh MESHPOINT CRAFT DATA CONFIG WORKDIR CASE — crafted and hostile input reaching the CLI.
# Each case trains a tiny checkpoint itself (cli_tiny, a few steps), then
# rewrites one value with tests/ckpt/tool_ckpt_craft (CRAFT: index checksum recomputed, so the range check is
# what must refuse it; --stale: the checksum must catch it first), and asserts exit codes and messages.
#   config_inf   "rope_theta": 1e999 (a double overflowing to inf) and "lr": 1e999 refused (exit 2,
#                naming the key); before, it trained and every checkpoint stored null
#   step         metadata "step" -5 / 1e300 / 2^63-1 / 2^31-1: `train --resume-from` exits 2 naming
#                "step" (before: an assert in core/optim.c, or an undefined cast); with the old checksum
#                left in place the index checksum refuses it (exit 1); the index's step attribute -5 is
#                refused by the reader (verify and resume exit 1)
#   layers       model_config "num_hidden_layers": 2^31-1: `ckpt verify` exits 1, `ckpt show` shows the
#                config as not parsing (no parameter count), resume exits 2 — each naming the key
#   shape        a tensor's shape 2^62 (byte size past int64) and 2^60 in /layout/tensors: verify exits 1,
#                show / diff refuse (exit 2) naming the shape; nothing crashes
#   retention    a step directory that is a symbolic link to a checkpoint outside the root: `--keep 1`
#                removes the link only; the target (and its index.h5) stays whole and resumable
#   ls           a step_00000002 holding step 3: `ckpt ls` lists step 3 and flags the name (text and --json)
set -u
bin=$1; craft=$2; data=$3; config=$4; work=$5; case=$6
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
# A tiny run with checkpoints at steps 1..3 in $work/run.
make_run() { train --run-dir "$work/run" --steps 3 --ckpt-every 1 >"$work/run.log" 2>&1 || fail "training: $(cat "$work/run.log")"; }
ck=$work/run/checkpoints
# fresh copy of step 2 at $work/c
copy2() { rm -rf "$work/c"; cp -r "$ck/step_00000002" "$work/c"; }
# model_config of $work/c with one key replaced (python only formats the JSON; the tool writes it)
model_config_with() {
    /usr/bin/python3 -c "
import h5py, json, sys
f = h5py.File(sys.argv[1], 'r'); m = json.loads(f['meta/model_config'][()].decode()); m[sys.argv[2]] = int(sys.argv[3])
print(json.dumps(m))" "$work/c/index.h5" "$1" "$2"
}

case $case in
config_inf)
    sed 's/"rms_norm_eps": 1e-5/"rms_norm_eps": 1e-5, "rope_theta": 1e999/' "$config" >"$work/theta.json"
    expect 2 'rope_theta.*not a finite number' "$work/log1" \
        "$bin" train --config "$work/theta.json" --train-data "$data" --log-every 0 --run-dir "$work/r1" --steps 1
    [ ! -e "$work/r1/checkpoints" ] || fail "a run with rope_theta inf left checkpoints"
    sed 's/"lr": 1e-3/"lr": 1e999/' "$config" >"$work/lr.json"
    expect 2 '"lr".*not a finite number' "$work/log2" \
        "$bin" train --config "$work/lr.json" --train-data "$data" --log-every 0 --run-dir "$work/r2" --steps 1
    expect 2 '--lr.*not a finite number' "$work/log3" train --run-dir "$work/r3" --steps 1 --lr 1e999
    ;;
step)
    make_run
    for v in -5 1e300 9223372036854775807 2147483647; do
        copy2
        "$craft" "$work/c/index.h5" meta step "$v" || fail "crafting step $v"
        expect 2 'metadata "step".*(out of range|not an integer)' "$work/log_$v" \
            train --run-dir "$work/r_$v" --steps 4 --resume-from "$work/c"
        expect 1 'metadata "step"' "$work/verify_$v" "$bin" ckpt verify "$work/c"
        copy2
        "$craft" "$work/c/index.h5" meta step "$v" --stale || fail "crafting step $v (stale checksum)"
        expect 1 'index checksum mismatch' "$work/stale_$v" train --run-dir "$work/s_$v" --steps 4 --resume-from "$work/c"
    done
    # the index's own step attribute: the reader refuses a negative one (the writer never writes it)
    copy2
    "$craft" "$work/c/index.h5" step -5 || fail "crafting the step attribute"
    expect 1 'root attribute step = -5 out of range' "$work/verify_attr" "$bin" ckpt verify "$work/c"
    expect 1 'root attribute step = -5' "$work/resume_attr" train --run-dir "$work/ra" --steps 4 --resume-from "$work/c"
    ;;
layers)
    make_run
    copy2
    "$craft" "$work/c/index.h5" meta model_config "$(model_config_with num_hidden_layers 2147483647)" || fail "crafting"
    expect 1 'num_hidden_layers.*above the limit' "$work/verify" "$bin" ckpt verify "$work/c"
    expect 0 'does not parse: .*num_hidden_layers' "$work/show" "$bin" ckpt show "$work/c"
    ! grep -Eq 'parameters +-' "$work/show" || fail "a negative parameter count: $(cat "$work/show")"
    expect 2 'num_hidden_layers.*above the limit' "$work/resume" train --run-dir "$work/r" --steps 4 --resume-from "$work/c"
    ;;
shape)
    make_run
    copy2
    "$craft" "$work/c/index.h5" shape model/model.norm.weight 0 4611686018427387904 || fail "crafting 2^62"
    expect 1 'model.norm.weight: bad shape: shape\[0\] = 4611686018427387904' "$work/verify1" "$bin" ckpt verify "$work/c"
    expect 2 'model.norm.weight: bad shape' "$work/show1" "$bin" ckpt show "$work/c"
    expect 2 'model.norm.weight: bad shape' "$work/diff1" "$bin" ckpt diff "$work/c" "$ck/step_00000002"
    expect 1 'model.norm.weight: bad shape' "$work/resume1" train --run-dir "$work/r1" --steps 4 --resume-from "$work/c"
    copy2
    "$craft" "$work/c/index.h5" shape model/model.norm.weight 0 1152921504606846976 || fail "crafting 2^60"
    expect 1 'model.norm.weight has shape \[1152921504606846976\], the model config needs \[32\]' "$work/verify2" \
        "$bin" ckpt verify "$work/c"
    expect 2 'model.norm.weight' "$work/stats2" "$bin" ckpt show --stats "$work/c"
    expect 1 'model.norm.weight has shape \[1152921504606846976' "$work/resume2" \
        train --run-dir "$work/r2" --steps 4 --resume-from "$work/c"
    ;;
retention)
    make_run
    mkdir -p "$work/outside"
    cp -r "$ck/step_00000001" "$work/outside/kept"
    train --run-dir "$work/rt" --steps 1 --ckpt-every 1 >"$work/rt1.log" 2>&1 || fail "training: $(cat "$work/rt1.log")"
    ln -s "$work/outside/kept" "$work/rt/checkpoints/step_00000000"
    expect 0 'step_00000000 is a symbolic link .*removing the link only' "$work/rt2.log" \
        train --run-dir "$work/rt" --steps 3 --ckpt-every 1 --keep 1 --resume
    [ ! -L "$work/rt/checkpoints/step_00000000" ] || fail "retention left the link"
    [ -f "$work/outside/kept/index.h5" ] || fail "retention deleted the link target's index.h5 (outside the root)"
    [ -f "$work/outside/kept/rank_00000.h5" ] || fail "retention deleted the link target's rank file"
    # the target still loads whole (every box read against its checksums)
    expect 0 "resumed from .*outside/kept at step 1" "$work/resume" \
        train --run-dir "$work/rk" --steps 2 --resume-from "$work/outside/kept"
    [ "$(ls "$work/rt/checkpoints" | grep -c '^step_')" = 1 ] || fail "keep 1 kept: $(ls "$work/rt/checkpoints")"
    ;;
ls)
    make_run
    mkdir -p "$work/root"
    cp -r "$ck/step_00000001" "$work/root/step_00000001"
    cp -r "$ck/step_00000003" "$work/root/step_00000002"   # step 3 under the name of step 2
    expect 0 '^  3 +step_00000002 .*step mismatch' "$work/ls" "$bin" ckpt ls "$work/root"
    grep -q 'directory name says step 2, the index says step 3' "$work/ls" || fail "no explanation: $(cat "$work/ls")"
    grep -Eq '^  1 +step_00000001 ' "$work/ls" || fail "step 1 not listed: $(cat "$work/ls")"
    ! grep -Eq '^  1 .*mismatch' "$work/ls" || fail "step 1 flagged: $(cat "$work/ls")"
    expect 0 '"step_mismatch":[[:space:]]*true' "$work/json" "$bin" ckpt ls --json "$work/root"
    /usr/bin/python3 -c "
import json, sys
j = json.load(open(sys.argv[1]))
c = {x['dir']: x for x in j['checkpoints']}
assert c['step_00000002']['step'] == 3 and c['step_00000002']['name_step'] == 2, c
assert c['step_00000002']['step_mismatch'] is True and c['step_00000001']['step_mismatch'] is False, c
" "$work/json" || fail "ckpt ls --json: $(cat "$work/json")"
    ;;
*) fail "unknown case $case" ;;
esac
echo "PASS ($case)"
