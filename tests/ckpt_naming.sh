#!/bin/bash
# tests/ckpt_naming.sh MESHPOINT DATA CONFIG WORKDIR CASE — one way to name a checkpoint (as `meshpoint ckpt`
# does, mp_ckpt_resolve): a run directory, a checkpoint root or a step directory, for train --resume-from
# and eval --checkpoint. Every case asserts exit codes and messages.
#   resume        --resume-from RUN and --resume-from RUN/checkpoints resume from the newest complete
#                 checkpoint, and finish equal to a straight run (ckpt diff)
#   eval_config   eval --checkpoint RUN without --config (the checkpoint's model_config) prints the same
#                 loss as with --config and as with the step directory
#   eval_refuse   eval with a --config that disagrees with the checkpoint exits 2 naming the field; eval
#                 with neither --config nor --checkpoint exits 2
#   eval_batches  eval --batches beyond the file says how many batches it used
#   odd_names     step_12abc, step_, step_-1, step_99x (and .partial) directories, a file named like a step,
#                 a step_notes in the run directory: ignored by ckpt ls (root and run directory, text and
#                 --json), ckpt show, eval --checkpoint, train --resume and its retention (--keep 1) and
#                 .partial cleanup (mp_fs_each_step_dir, the one scanner); leftover temp files
#                 (latest.tmp.<pid>, view.h5.tmp.<pid>) named by ckpt ls and ckpt verify, exit 0
#   ranks         (mpiexec -np 2) rank 0 resolves the name for every rank: --resume-from RUN/checkpoints and
#                 eval --checkpoint RUN without --config (same loss as with it)
set -u
bin=$1; data=$2; config=$3; work=$4; case=$5
rm -rf "$work"; mkdir -p "$work"
. "$(dirname "$0")/lib.sh"   # fail, train, expect
loss_of() { grep -o 'eval loss [0-9.]*' "$1"; }
ev=(--data "$data" --batch 4 --seq-len 16)

case $case in
resume)
    train --run-dir "$work/ref" --steps 6 --ckpt-every 6 >/dev/null 2>&1 || fail "reference run"
    for how in run root; do
        run=$work/$how
        train --run-dir "$run" --steps 6 --ckpt-every 2 --stop-at 4 >/dev/null 2>&1 || fail "first run ($how)"
        from=$run; [ $how = root ] && from=$run/checkpoints
        expect 0 "resumed from .*step_00000004 at step 4" "$work/log_$how" \
            train --run-dir "$run" --steps 6 --ckpt-every 2 --resume-from "$from"
        "$bin" ckpt diff "$work/ref/checkpoints/step_00000006" "$run/checkpoints/step_00000006" >"$work/diff" 2>&1 ||
            fail "--resume-from $from: step 6 differs from a straight run: $(cat "$work/diff")"
    done
    expect 2 "no-such-run" "$work/log_missing" train --run-dir "$work/x" --steps 6 --resume-from "$work/no-such-run"
    ;;
eval_config)
    train --run-dir "$work/run" --steps 4 --ckpt-every 2 >/dev/null 2>&1 || fail "training"
    expect 0 "weights: .*step_00000004" "$work/a" "$bin" eval --checkpoint "$work/run" "${ev[@]}" --batches 3
    expect 0 "weights: .*step_00000004" "$work/b" "$bin" eval --config "$config" --checkpoint "$work/run" "${ev[@]}" --batches 3
    expect 0 "weights: .*step_00000004" "$work/c" "$bin" eval --checkpoint "$work/run/checkpoints/step_00000004" "${ev[@]}" --batches 3
    expect 0 "weights: .*step_00000002" "$work/d" "$bin" eval --checkpoint "$work/run/checkpoints/step_00000002" "${ev[@]}" --batches 3
    [ -n "$(loss_of "$work/a")" ] || fail "no loss printed: $(cat "$work/a")"
    [ "$(loss_of "$work/a")" = "$(loss_of "$work/b")" ] || fail "without --config $(loss_of "$work/a"), with $(loss_of "$work/b")"
    [ "$(loss_of "$work/a")" = "$(loss_of "$work/c")" ] || fail "run dir $(loss_of "$work/a"), step dir $(loss_of "$work/c")"
    [ "$(loss_of "$work/a")" != "$(loss_of "$work/d")" ] || fail "step 2 and step 4 give the same loss"
    ;;
eval_refuse)
    train --run-dir "$work/run" --steps 2 --ckpt-every 2 >/dev/null 2>&1 || fail "training"
    sed 's/"hidden_size": 32/"hidden_size": 64/' "$config" >"$work/wide.json"
    expect 2 "hidden_size = 32, the config says 64" "$work/log" \
        "$bin" eval --config "$work/wide.json" --checkpoint "$work/run" "${ev[@]}" --batches 2
    sed 's/"num_hidden_layers": 2/"num_hidden_layers": 3/' "$config" >"$work/deep.json"
    expect 2 "num_hidden_layers = 2, the config says 3" "$work/log" \
        "$bin" eval --config "$work/deep.json" --checkpoint "$work/run/checkpoints" "${ev[@]}" --batches 2
    expect 2 "--config FILE / --checkpoint DIR" "$work/log" "$bin" eval "${ev[@]}"
    expect 2 "has no index.h5" "$work/log" "$bin" eval --checkpoint "$work" "${ev[@]}"
    ;;
eval_batches)
    train --run-dir "$work/run" --steps 2 --ckpt-every 2 >/dev/null 2>&1 || fail "training"
    bytes=$(stat -c %s "$data")
    expect 0 "holds only [0-9]+ batches .*used those [0-9]+" "$work/log" \
        "$bin" eval --checkpoint "$work/run" "${ev[@]}" --batches 1000000
    used=$(grep -o 'used those [0-9]*' "$work/log" | grep -o '[0-9]*$')
    grep -q "eval loss [0-9.]* ($used batches" "$work/log" || fail "the loss line does not say $used batches: $(cat "$work/log")"
    [ "$used" -gt 1 ] && [ "$used" -lt 1000000 ] && [ $((used * 4 * 16 * 2)) -le "$bytes" ] ||
        fail "$used batches of 4 x 16 tokens do not fit $bytes bytes"
    expect 0 "eval loss [0-9.]* \(3 batches" "$work/log3" "$bin" eval --checkpoint "$work/run" "${ev[@]}" --batches 3
    grep -q "holds only" "$work/log3" && fail "a warning for --batches within the file: $(cat "$work/log3")"
    ;;
ranks)
    mpi="mpiexec --allow-run-as-root --oversubscribe -np 2"
    train --run-dir "$work/run" --steps 4 --ckpt-every 2 --stop-at 2 >/dev/null 2>&1 || fail "first run"
    expect 0 "resumed from .*step_00000002 at step 2" "$work/log" \
        $mpi "$bin" train --config "$config" --train-data "$data" --log-every 0 --run-dir "$work/run" --steps 4 \
        --ckpt-every 2 --resume-from "$work/run/checkpoints"
    expect 0 "weights: .*step_00000004" "$work/a" $mpi "$bin" eval --checkpoint "$work/run" "${ev[@]}" --batches 3
    expect 0 "weights: .*step_00000004" "$work/b" $mpi "$bin" eval --config "$config" --checkpoint "$work/run" "${ev[@]}" --batches 3
    [ "$(loss_of "$work/a")" = "$(loss_of "$work/b")" ] || fail "without --config $(loss_of "$work/a"), with $(loss_of "$work/b")"
    expect 2 "has no index.h5" "$work/log" $mpi "$bin" eval --checkpoint "$work" "${ev[@]}"
    [ "$(grep -c "error" "$work/log")" = 1 ] || fail "not one agreed error: $(cat "$work/log")"
    ;;
odd_names)
    # directories whose names only look like steps, each a copy of a real checkpoint (a lax parser would
    # take step_12abc for step 12, the newest), a stray step_notes in the run directory itself (a prefix
    # match would take the run directory for a checkpoint root) and a file named like a step
    train --run-dir "$work/run" --steps 4 --ckpt-every 2 --stop-at 4 >/dev/null 2>&1 || fail "first run"
    root=$work/run/checkpoints
    odd="step_12abc step_ step_-1 step_99x step_12abc.partial step_.partial"
    for d in $odd; do cp -r "$root/step_00000002" "$root/$d"; done
    mkdir "$work/run/step_notes"; : >"$root/step_00000009"
    for at in "$root" "$work/run"; do
        expect 0 "step_00000004" "$work/ls" "$bin" ckpt ls "$at"
        [ "$(grep -cE '^ *[0-9]+ +step_' "$work/ls")" -eq 2 ] && ! grep 'step_' "$work/ls" | grep -qvE 'step_0000000[24]( |$)' ||
            fail "ckpt ls $at: not just steps 2 and 4: $(cat "$work/ls")"
        "$bin" ckpt ls --json "$at" >"$work/ls.json" 2>&1 || fail "ckpt ls --json $at: $(cat "$work/ls.json")"
        for d in $odd step_00000009; do grep -q "\"$d\"" "$work/ls.json" && fail "ckpt ls --json $at lists $d"; done
    done
    # temp files of interrupted writes (core/fsutil.h's convention): named by ls and verify, exit 0
    : >"$root/latest.tmp.4242"; : >"$root/step_00000004/view.h5.tmp.4242"
    expect 0 "^leftover temp files of interrupted writes .*: latest\.tmp\.4242$" "$work/ls" "$bin" ckpt ls "$work/run"
    expect 0 "^note: 1 leftover temp file .*step_00000004 .*: view\.h5\.tmp\.4242$" "$work/verify" \
        "$bin" ckpt verify "$root/step_00000004"
    expect 0 "step_00000004" "$work/show" "$bin" ckpt show "$work/run"
    expect 0 "weights: .*step_00000004" "$work/ev" "$bin" eval --checkpoint "$work/run" "${ev[@]}" --batches 1
    # resume, save, keep 1: the newest by name is step 4; retention and the .partial cleanup leave the odd ones
    expect 0 "resumed from .*step_00000004 at step 4" "$work/log" \
        train --run-dir "$work/run" --steps 6 --ckpt-every 2 --resume --keep 1
    [ -d "$root/step_00000006" ] && [ ! -e "$root/step_00000004" ] && [ ! -e "$root/step_00000002" ] ||
        fail "keep 1 did not leave step 6 alone: $(ls "$root")"
    for d in $odd; do [ -d "$root/$d" ] || fail "$d was removed: $(ls "$root")"; done
    [ -f "$root/step_00000009" ] && [ -d "$work/run/step_notes" ] || fail "a stray entry was removed"
    ;;
*) fail "unknown case" ;;
esac
echo "ok ($case)"
