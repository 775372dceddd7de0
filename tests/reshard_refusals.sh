#!/bin/bash
# tests/reshard_refusals.sh MESHPOINT EQUAL_TOOL DATA WORKDIR — what `meshpoint reshard` refuses before
# writing anything (exit 2, the message naming what is wrong, no output directory left behind), a corrupt
# source (exit 1 naming file, tensor and region; nothing left), SIGKILL at several points of the write
# (never a complete-looking destination; a rerun succeeds and equals a clean run), and --force (the old
# destination survives a failed replacement and is swapped out by a successful one).
set -u
bin=$1; equal=$2; data=$3; work=$4
src_dir=$(cd "$(dirname "$0")/.." && pwd)
cfg=$src_dir/tests/configs/reshard_gqa.json
mpi="mpiexec --allow-run-as-root --oversubscribe"
case=reshard_refusals; . "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
$mpi -np 4 "$bin" train --config "$cfg" --train-data "$data" --steps 3 --log-every 0 --run-dir "$work/src" --tp 2 --dp 2 \
    --ckpt-every 3 >"$work/src.log" 2>&1 || fail "training the source: $(cat "$work/src.log")"
ck=$work/src/checkpoints/step_00000003
out=$work/out
# refused CODE PATTERN CMD...: exit code and message; the output directory must not exist afterwards
refused() {
    local code=$1 pat=$2; shift 2
    local o; o=$("$@" 2>&1); local rc=$?
    [ $rc -eq "$code" ] || fail "expected exit $code, got $rc from: $*
$o"
    printf '%s\n' "$o" | grep -Eq -- "$pat" || fail "output does not match /$pat/: $o"
    [ ! -e "$out" ] && [ ! -e "$out.partial" ] || fail "a refused reshard left $out or $out.partial behind ($*)"
    echo "ok: exit $rc /$pat/"
}
refused 2 "num_key_value_heads \(4\) is not divisible by tp \(3\)" "$bin" reshard "$ck" --tp 3 --dp 1 --out "$out"
refused 2 "tp \(128\) exceeds" "$bin" reshard "$ck" --tp 128 --dp 1 --out "$out"
refused 2 "--tp N and --dp N" "$bin" reshard "$ck" --tp 2 --out "$out"
refused 2 "--out DIR is required" "$bin" reshard "$ck" --tp 2 --dp 1
refused 2 "SRC .* is missing" "$bin" reshard --tp 2 --dp 1 --out "$out"
refused 2 "max-memory.*not a size" "$bin" reshard "$ck" --tp 2 --dp 1 --out "$out" --max-memory lots
refused 2 "no such file" "$bin" reshard "$work/nowhere" --tp 2 --dp 1 --out "$out"
mkdir -p "$work/empty"
refused 2 "no index.h5|not a complete checkpoint|no complete checkpoint" "$bin" reshard "$work/empty" --tp 2 --dp 1 --out "$out"
# a checkpoint whose rank file is missing is not complete
cp -r "$ck" "$work/incomplete"; rm "$work/incomplete/rank_00003.h5"
refused 2 "not a complete checkpoint.*rank_00003" "$bin" reshard "$work/incomplete" --tp 2 --dp 1 --out "$out"
refused 2 "MiB free, the output needs" env MP_FAULT=free_bytes:100000 "$bin" reshard "$ck" --tp 2 --dp 1 --out "$out"
# a source that fails on one rank only (node-local storage): every rank agrees, one message, exit 2,
# nothing written, and no rank left waiting in a collective (timeout: a hang fails the test)
for r in 0 1; do
    refused 2 "\[rank $r\] reshard: source: simulated failure on rank $r" \
        timeout 60 env MP_FAULT=fail_rank:$r $mpi -np 2 -x MP_FAULT "$bin" reshard "$ck" --tp 2 --dp 1 --out "$out"
    n=$(MP_FAULT=fail_rank:$r timeout 60 $mpi -np 2 -x MP_FAULT "$bin" reshard "$ck" --tp 2 --dp 1 --out "$out" 2>&1 \
        | grep -c "error:")
    [ "$n" -eq 1 ] || fail "rank-$r source failure: $n error lines, expected 1"
done
# --sp is not a layout property: said, and the reshard goes on
o=$("$bin" reshard "$ck" --tp 2 --dp 1 --out "$out" --sp 2>&1) || fail "--sp: $o"
printf '%s' "$o" | grep -q "sequence parallelism is chosen when training" || fail "--sp not explained: $o"
# an existing destination: refused, untouched; --force replaces it
before=$(cat "$out"/index.h5 | cksum)
expect_keep() { o=$("$@" 2>&1); rc=$?; [ $rc -eq 2 ] || fail "expected 2, got $rc: $o"; printf '%s' "$o" | grep -q "already exists (use --force" || fail "$o"; }
expect_keep "$bin" reshard "$ck" --tp 1 --dp 1 --out "$out"
[ "$(cat "$out"/index.h5 | cksum)" = "$before" ] || fail "a refused reshard touched the existing destination"
expect_self() { o=$("$@" 2>&1); rc=$?; [ $rc -eq 2 ] || fail "expected 2, got $rc: $o"; printf '%s' "$o" | grep -q "source checkpoint itself" || fail "$o"; }
expect_self "$bin" reshard "$ck" --tp 2 --dp 2 --out "$ck" --force
# corrupt source: one flipped byte in the data of rank 1's file (past the HDF5 metadata)
cp -r "$ck" "$work/bad"
/usr/bin/python3 - "$work/bad/rank_00001.h5" <<'PY'
import sys, h5py, numpy as np
p = sys.argv[1]
with h5py.File(p, "r") as f:
    ds = f["model/model.layers.1.mlp.down_proj.weight/box_0"]
    off = ds.id.get_offset()
with open(p, "r+b") as f:
    f.seek(off + 40); b = f.read(1); f.seek(off + 40); f.write(bytes([b[0] ^ 0x10]))
PY
# --force: a failed replacement leaves the old destination as it was
o=$("$bin" reshard "$work/bad" --tp 1 --dp 1 --out "$out" --force 2>&1); rc=$?
[ $rc -eq 1 ] || fail "corrupt source with --force: expected exit 1, got $rc: $o"
printf '%s' "$o" | grep -Eq "rank_00001.h5.*checksum mismatch.*down_proj" || fail "the corruption is not named: $o"
[ "$(cat "$out"/index.h5 | cksum)" = "$before" ] || fail "a failed --force replacement damaged the old destination"
[ ! -e "$out.partial" ] || fail "a failed reshard left $out.partial"
"$bin" reshard "$ck" --tp 1 --dp 1 --out "$out" --force >"$work/force.log" 2>&1 || fail "--force: $(cat "$work/force.log")"
grep -Eq '"tp":[[:space:]]*1' <("$bin" ckpt show "$out" --json) || fail "--force did not replace the destination"
"$equal" "$ck" "$out" >/dev/null || fail "--force output differs from the source"
rm -rf "$out"
o=$("$bin" reshard "$work/bad" --tp 1 --dp 1 --out "$out" 2>&1); rc=$?
[ $rc -eq 1 ] && [ ! -e "$out" ] && [ ! -e "$out.partial" ] || fail "corrupt source: rc $rc, leftovers: $(ls "$work")"
echo "ok: corrupt source refused, nothing left"
# SIGKILL at several points: never a complete destination; a rerun succeeds
"$bin" reshard "$ck" --tp 4 --dp 1 --out "$work/clean" >/dev/null 2>&1 || fail "clean reshard"
# (the output is a step directory of a checkpoint root, so `ckpt ls` and `train --resume` would see it)
for point in begin during_rank_files after_rank_files before_index after_index; do
    kr=$work/root_$point; k=$kr/step_00000003
    mkdir -p "$kr"
    MP_FAULT=ckpt_crash_at:$point "$bin" reshard "$ck" --tp 4 --dp 1 --out "$k" >"$kr.log" 2>&1; rc=$?
    [ $rc -ne 0 ] || fail "$point: the reshard was not killed"
    [ ! -e "$k" ] || fail "$point: a killed reshard left $k"
    "$bin" ckpt ls "$kr" --json >"$kr.ls" 2>&1 || fail "$point: ckpt ls: $(cat "$kr.ls")"
    /usr/bin/python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert not j["checkpoints"] and j["newest_complete"] is None, j' "$kr.ls" \
        || fail "$point: ckpt ls takes the killed output as complete: $(cat "$kr.ls")"
    "$bin" reshard "$ck" --tp 4 --dp 1 --out "$k" >"$kr.rerun.log" 2>&1 || fail "$point: rerun: $(cat "$kr.rerun.log")"
    [ ! -e "$k.partial" ] || fail "$point: the rerun left $k.partial"
    "$equal" "$work/clean" "$k" >/dev/null || fail "$point: the rerun differs from a clean run"
    echo "ok: killed at $point, rerun equal"
done
echo "ok: all refusals"
