#!/usr/bin/env bash
# tests/cli_protocols.sh BIN DATA CONFIG WORKDIR — the two failure protocols of the commands' phases
# (cli/runtime.h: mp_alike, mp_agreed) on 2 ranks, each rank's stderr and exit status captured apart (a
# wrapper per rank). For every case: exactly one "error:" line over both ranks, on the rank that should
# print it, with the message expected, and the same exit status on both ranks.
#   agreed, failing on rank 1, on rank 0, on both: a --train-data / --data file missing on those ranks
#     only (train's open_data, eval's plan_and_open): the lowest failing rank prints "[rank N] ...".
#   alike, found by both ranks: a batch the mesh cannot split (train's setup_mesh), --batches 0 (eval's
#     flags), a checkpoint that does not exist (sample: rank 0 resolves it and the answer is agreed):
#     rank 0 prints it, without a rank prefix where every rank found it.
set -uo pipefail
bin=$1 data=$2 config=$3 work=$4
case=cli_protocols
source "$(dirname "$0")/lib.sh"
rm -rf "$work" && mkdir -p "$work"

# run2 R WANT_RC PRINTER PATTERN ARGS...: runs `meshpoint ARGS` on 2 ranks; the argument @DATA@ becomes a
# missing file on rank R (0, 1 or both; "none": on no rank) and DATA elsewhere. Fails unless both ranks
# exit WANT_RC and only rank PRINTER prints, one "error:" line matching PATTERN.
run2() {
    local r=$1 want=$2 printer=$3 pattern=$4; shift 4
    rm -f "$work"/err.* "$work"/rc.*
    timeout 120 mpiexec --allow-run-as-root --oversubscribe -np 2 -x R=$r -x W="$work" -x D="$data" sh -c '
        k=$OMPI_COMM_WORLD_RANK; b=$0
        for a do
            shift
            if [ "$a" = @DATA@ ]; then
                if [ "$R" = both ] || [ "$R" = "$k" ]; then a=$W/missing_on_rank_$k.bin; else a=$D; fi
            fi
            set -- "$@" "$a"
        done
        "$b" "$@" 2>"$W/err.$k" >/dev/null; echo $? >"$W/rc.$k"' "$bin" "$@" >"$work/log" 2>&1
    local all="$*: $(cat "$work/log" "$work"/err.* 2>/dev/null)"
    for k in 0 1; do
        [ "$(cat "$work/rc.$k" 2>/dev/null)" = "$want" ] ||
            fail "rank $k exited $(cat "$work/rc.$k" 2>/dev/null), expected $want (both ranks alike): $all"
        local n
        n=$(grep -c 'error:' "$work/err.$k")
        if [ "$k" = "$printer" ]; then
            [ "$n" -eq 1 ] || fail "rank $k printed $n error lines, expected 1: $all"
            grep -Eq -- "$pattern" "$work/err.$k" || fail "rank $k's message does not match /$pattern/: $all"
        else
            [ "$n" -eq 0 ] || fail "rank $k printed $n error lines, expected none (rank $printer prints): $all"
        fi
    done
}

tr=(train --config "$config" --steps 1 --log-every 0 --run-dir "$work/run" --dp 2 --batch 4)
ev=(eval --config "$config" --batches 1 --dp 2 --batch 2)

# agreed (train's open_data): the lowest failing rank prints, "[rank N] " once
run2 1 2 1 "^meshpoint train: error: \[rank 1\] [^[]*missing_on_rank_1" "${tr[@]}" --train-data @DATA@
run2 0 2 0 "^meshpoint train: error: \[rank 0\] [^[]*missing_on_rank_0" "${tr[@]}" --train-data @DATA@
run2 both 2 0 "^meshpoint train: error: \[rank 0\] [^[]*missing_on_rank_0" "${tr[@]}" --train-data @DATA@
# alike (train's setup_mesh): found by every rank, printed by rank 0 without a rank prefix
run2 none 2 0 "^meshpoint train: error: [^[]*batch" "${tr[@]}" --train-data @DATA@ --batch 3
# eval: agreed (the data file) and alike (a flag)
run2 1 2 1 "^meshpoint eval: error: \[rank 1\] [^[]*missing_on_rank_1" "${ev[@]}" --data @DATA@
run2 both 2 0 "^meshpoint eval: error: \[rank 0\] [^[]*missing_on_rank_0" "${ev[@]}" --data @DATA@
run2 none 2 0 "^meshpoint eval: error: --batches must be > 0" "${ev[@]}" --data @DATA@ --batches 0
# sample: a flag every rank refuses (alike), a checkpoint rank 0 cannot resolve (agreed, rank 0 prints)
run2 none 2 0 "^meshpoint sample: error: .*--top-p" sample --checkpoint "$work/none" --prompt x --dp 2 --top-p 7
run2 none 2 0 "^meshpoint sample: error: \[rank 0\] .*$work/none" sample --checkpoint "$work/none" --prompt x --dp 2
echo "ok: each protocol, failing on one rank or on all, prints one message and exits alike on every rank"
