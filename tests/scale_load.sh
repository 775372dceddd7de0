#!/usr/bin/env bash
# tests/scale_load.sh BENCH_SCALE WORKDIR — the collective load open (ckpt_open_planned) on
# bench_scale's simulated world of 64 ranks (Llama-2-7B shapes, tp 8 x dp 8; bench/bench_scale.c):
#   - rank 0 opens index.h5 once and reads it; ranks 5 and 63 open no index.h5 (ckpt_index_reads 0) and
#     read under 4 KiB from any file during the open (rchar; the index is ~1 MiB at format v3, ~50 MiB before);
#   - what ranks 5 and 63 receive is at most 2x their share of the index: format v3 (docs/FORMAT.md) keeps
#     one row per tensor, which every rank needs (it loads every tensor), and one per run of boxes, of
#     which it needs about 1/64: share = tensor table + (runs + files tables) / 64 (before v3, with one
#     row per box: index bytes / 64);
#   - on every rank the reader it gets plans all its boxes (each found and covered).
set -uo pipefail
case=scale_load
. "$(dirname "$0")/lib.sh"
bin=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
out=$("$bin" save 7b 8 8 0 "$work" 2>&1) || fail "save rank 0: $out"
index=$(kv index_bytes "$out")
[ "$index" -gt 100000 ] || fail "an index of only $index bytes: $out"
share=$(/usr/bin/python3 -c '
import sys, glob, h5py
f = h5py.File(glob.glob(sys.argv[1] + "/*/index.h5")[0], "r")
size = lambda n: f[n].id.get_storage_size()
print(size("layout/tensors") + (size("layout/runs") + size("layout/files")) // 64)' "$work") || fail "reading the table sizes"
out=$("$bin" planned 7b 8 8 0 "$work" 2>&1) || fail "planned rank 0: $out"
[ "$(kv index_reads "$out")" = 1 ] || fail "rank 0 did not open index.h5 once: $out"
[ "$(kv index_read_bytes "$out")" -gt $((index / 2)) ] || fail "rank 0 read less than half the index: $out"
for r in 5 63; do
    out=$("$bin" planned 7b 8 8 $r "$work" 2>&1) || fail "planned rank $r: $out"
    [ "$(kv index_reads "$out")" = 0 ] || fail "rank $r opened index.h5: $out"
    [ "$(kv index_read_bytes "$out")" -lt 4096 ] || fail "rank $r read $(kv index_read_bytes "$out") bytes: $out"
    recv=$(kv recv_bytes "$out")
    [ "$recv" -gt 0 ] && [ "$recv" -le $((2 * share)) ] || fail "rank $r received $recv bytes (share of the index $share): $out"
    [ "$(kv boxes "$out")" -gt 0 ] && [ "$(kv sources "$out")" -ge "$(kv boxes "$out")" ] || fail "rank $r planned nothing: $out"
done
echo "ok: only rank 0 reads index.h5 ($index bytes); ranks 5 and 63 receive <= 2x their share ($recv of $share bytes) and plan every box"
rm -rf "$work"
