#!/usr/bin/env bash
# tests/scale_exchange.sh BENCH_SCALE WORKDIR — the save's layout exchange is a gather to rank 0,
# checked on bench_scale's simulated world of 64 ranks (Llama-2-7B shapes, tp 8 x dp 8;
# bench/bench_scale.c runs the real writer for one rank at a time):
#   - every rank but 0 receives only the commit's agreements (a few floats), never a box list: its
#     received bytes stay under its own list's size / 1000, on the first non-zero rank and the last;
#   - rank 0 receives every other rank's list: at least the sum of the lists of the ranks it
#     simulates here (1 and 63, and 62 more of at least the smallest of those two) plus their lengths;
#   - the index rank 0 writes opens, and every rank's boxes (two sampled) are found and planned.
set -uo pipefail
case=scale_exchange
. "$(dirname "$0")/lib.sh"
bin=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
kv() { sed -n "s/.* $1=\([^ ]*\).*/\1/p" <<<"$2"; }
lmin=
for r in 1 63; do
    out=$("$bin" save 7b 8 8 $r "$work" 2>&1) || fail "save rank $r: $out"
    recv=$(kv recv_bytes "$out"); list=$(kv list_bytes "$out")
    [ -n "$recv" ] && [ -n "$list" ] || fail "no figures from: $out"
    [ "$list" -gt 100000 ] || fail "rank $r: a box list of only $list bytes: $out"
    [ $((recv * 1000)) -lt "$list" ] || fail "rank $r received $recv bytes during the save (its own list: $list): $out"
    if [ -z "$lmin" ] || [ "$list" -lt "$lmin" ]; then lmin=$list; fi
done
out=$("$bin" save 7b 8 8 0 "$work" 2>&1) || fail "save rank 0: $out"
recv=$(kv recv_bytes "$out")
[ "$recv" -ge $((63 * lmin + 63 * 8)) ] || fail "rank 0 received $recv bytes, less than 63 lists of >= $lmin: $out"
[ "$(kv index_bytes "$out")" -gt 0 ] || fail "rank 0 wrote no index: $out"
for r in 5 63; do
    out=$("$bin" load 7b 8 8 $r "$work" 2>&1) || fail "load rank $r: $out"
    [ "$(kv boxes "$out")" -gt 0 ] || fail "load rank $r planned nothing: $out"
done
echo "ok: non-zero ranks receive no list; rank 0 receives them all ($recv bytes); the index loads"
rm -rf "$work"
