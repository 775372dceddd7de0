#!/bin/bash
# tests/tokenizer_carry_mpi.sh MESHPOINT DATA CONFIG WORKDIR CRAFT_TOOL — carried files (docs/FORMAT.md "Carried
# files") on 2 ranks, where only rank 0 writes them, through the real CLI, no Python:
#   1. a source checkpoint carrying tokenizer files (train -> export -> the files added -> import);
#   2. `train --init-from` on tp 2 (mpiexec -np 2): every checkpoint carries the files byte for byte and
#      verifies;
#   3. a save carrying files killed at each the fault ckpt_crash_at point: no step_4 (or a complete one after the
#      rename), step 2 intact (files and verify), and `--resume` finishes with the files in the last save;
#   4. `reshard` on 2 ranks (tp 1 x dp 2): the output carries the files and verifies;
#   6. a checkpoint whose list (checksum recomputed: tool_ckpt_craft) carries config.json, the name export
#      writes itself: export, reshard and train --init-from refuse it naming the file (exit 2), export
#      writes nothing, ckpt verify reports it (exit 1);
#   5. the free-disk checks of `export` and `reshard` count the carried bytes; the read-backs after writing
#      (import, export, reshard) check the carried files.
set -u
bin=$1; data=$2; config=$3; work=$4; craft=$5
case=tokenizer_carry_mpi
. "$(dirname "$0")/lib.sh"
mpi="mpiexec --allow-run-as-root --oversubscribe -np 2"
rm -rf "$work"; mkdir -p "$work"
names="tokenizer.json tokenizer_config.json generation_config.json"

# the files as the checkpoint must carry them, byte for byte (tokenizer.json: 200 KB of varied bytes)
same_files() {   # DIR: DIR holds every one of $names equal to the source's
    for n in $names; do cmp -s "$work/hf/$n" "$1/$n" || fail "$1/$n differs from the carried original"; done
}

train --steps 2 --ckpt-every 2 --run-dir "$work/run0" >"$work/run0.log" 2>&1 || fail "run0: $(cat "$work/run0.log")"
"$bin" export "$work/run0" --out "$work/hf" >"$work/export.log" 2>&1 || fail "export: $(cat "$work/export.log")"
"$bin" import "$work/hf" --out "$work/src0" >"$work/import0.log" 2>&1 || fail "import0: $(cat "$work/import0.log")"
head -c 200000 /dev/urandom | od -An -tx1 | tr -d '\n' | sed 's/^/{"blob": "/; s/$/"}/' >"$work/hf/tokenizer.json"
printf '{"eos_token": "</s>"}' >"$work/hf/tokenizer_config.json"
printf '{"eos_token_id": [1, 2]}\n' >"$work/hf/generation_config.json"
"$bin" import "$work/hf" --out "$work/src" >"$work/import.log" 2>&1 || fail "import: $(cat "$work/import.log")"
same_files "$work/src/files"
# the read-back after writing checks the carried files (import's, export's)
grep -q "verified .*every checksum and the coverage hold, 3 carried files" "$work/import.log" \
    || fail "import's read-back does not check the carried files: $(cat "$work/import.log")"
"$bin" export "$work/src" --out "$work/hf2" >"$work/export2.log" 2>&1 || fail "export: $(cat "$work/export2.log")"
grep -q "verified .*config.json and 3 carried files" "$work/export2.log" \
    || fail "export's read-back does not compare the carried files: $(cat "$work/export2.log")"
same_files "$work/hf2"

# the free-disk checks of export and reshard count the carried bytes (~600 KB here): the same model with
# and without the files needs that much more
need() {   # CKPT CMD...: the MiB the free-disk check asks for, with no space free
    MP_FAULT=free_bytes:0 "$bin" "$2" "$1" --out "$work/nospace" "${@:3}" >"$work/need.log" 2>&1 && fail "$2 ran with no space"
    grep -oE 'needs about [0-9.]+ MiB' "$work/need.log" | grep -oE '[0-9.]+' || fail "$2: $(cat "$work/need.log")"
}
carried=$(cat "$work/hf/tokenizer.json" "$work/hf/tokenizer_config.json" "$work/hf/generation_config.json" | wc -c)
for c in "export" "reshard --tp 1 --dp 1 --model-only"; do
    a=$(need "$work/src0" $c); b=$(need "$work/src" $c)
    awk -v a="$a" -v b="$b" -v c="$carried" 'BEGIN { exit !((b - a) * 1048576 > c - 0.1 * 1048576) }' \
        || fail "$c: the free-disk check does not count the carried files: $a MiB without, $b MiB with $carried bytes"
done

common="--steps 6 --tp 2 --ckpt-every 2"
run="$work/run"
$mpi "$bin" train --config "$config" --train-data "$data" --log-every 0 $common --run-dir "$run" --init-from "$work/src" \
    --stop-at 3 >"$work/p1.log" 2>&1 || fail "init-from on 2 ranks: $(cat "$work/p1.log")"
for s in 2 3; do
    d="$run/checkpoints/step_0000000$s"
    same_files "$d/files"
    expect 0 "3 carried files verified" "$work/v$s.log" "$bin" ckpt verify "$d"
done
rm -rf "$run/checkpoints/step_00000003"; echo step_00000002 > "$run/checkpoints/latest"
cp -a "$run/checkpoints" "$work/saved"

for point in during_rank_files after_rank_files before_index after_index after_rename; do
    rm -rf "$run/checkpoints"; cp -a "$work/saved" "$run/checkpoints"
    MP_FAULT=ckpt_crash_at:$point $mpi "$bin" train --config "$config" --train-data "$data" --log-every 0 $common \
        --run-dir "$run" --resume >"$work/crash.log" 2>&1
    [ $? -ne 0 ] || fail "$point: the job was to be killed"
    grep -q "fault ckpt_crash_at:$point" "$work/crash.log" || fail "$point: not reached: $(cat "$work/crash.log")"
    if [ "$point" = after_rename ]; then
        same_files "$run/checkpoints/step_00000004/files"
    else
        [ -d "$run/checkpoints/step_00000004" ] && fail "$point: a killed save left step_00000004"
    fi
    same_files "$run/checkpoints/step_00000002/files"
    expect 0 "3 carried files verified" "$work/v2.log" "$bin" ckpt verify "$run/checkpoints/step_00000002"
    $mpi "$bin" train --config "$config" --train-data "$data" --log-every 0 $common --run-dir "$run" --resume \
        >"$work/resume.log" 2>&1 || fail "$point: resume: $(cat "$work/resume.log")"
    same_files "$run/checkpoints/step_00000006/files"
    expect 0 "3 carried files verified" "$work/v6.log" "$bin" ckpt verify "$run/checkpoints/step_00000006"
done

$mpi "$bin" reshard "$run" --tp 1 --dp 2 --out "$work/rs" >"$work/rs.log" 2>&1 || fail "reshard on 2 ranks: $(cat "$work/rs.log")"
same_files "$work/rs/files"
grep -q "every checksum and the coverage hold, 3 carried files" "$work/rs.log" || fail "reshard's read-back: $(cat "$work/rs.log")"
expect 0 "3 carried files verified" "$work/vrs.log" "$bin" ckpt verify "$work/rs"
ls "$work/rs/files" | grep -qv -e '^tokenizer.json$' -e '^tokenizer_config.json$' -e '^generation_config.json$' \
    && fail "reshard left more in files/: $(ls "$work/rs/files")"
cp -a "$work/src" "$work/evil"
printf '{"architectures": ["Evil"]}' >"$work/evil/files/config.json"
"$craft" "$work/evil/index.h5" meta files \
    '{"config.json":{"bytes":27,"xxh3":"0123456789abcdef"},"tokenizer.json":{"bytes":1,"xxh3":"0123456789abcdef"}}' \
    || fail "crafting the list"
expect 2 'config.json.* is not a file a checkpoint carries' "$work/evil_export.log" "$bin" export "$work/evil" --out "$work/evil_hf"
[ -e "$work/evil_hf" ] && fail "export of a list naming config.json wrote $work/evil_hf"
expect 2 'config.json' "$work/evil_rs.log" "$bin" reshard "$work/evil" --tp 1 --dp 1 --model-only --out "$work/evil_rs"
expect 2 'config.json' "$work/evil_tr.log" "$bin" train --config "$config" --train-data "$data" --log-every 0 --steps 1 \
    --run-dir "$work/evil_run" --init-from "$work/evil"
for mode in "--ids" ""; do   # not "no tokenizer": the list is refused either way
    expect 2 'config.json.* is not a file a checkpoint carries' "$work/evil_s.log" "$bin" sample --checkpoint "$work/evil" \
        --prompt "1 2" --tokens 1 $mode
done
expect 0 'tokenizer +\(does not load: .*config.json' "$work/evil_show.log" "$bin" ckpt show "$work/evil"
expect 1 'problem: .*config.json.* is not a file a checkpoint carries' "$work/evil_v.log" "$bin" ckpt verify "$work/evil" --format-only
[ "$(grep -c '^problem' "$work/evil_v.log")" -eq 1 ] || fail "ckpt verify: one problem expected: $(cat "$work/evil_v.log")"
echo "tokenizer_carry_mpi: ok"
