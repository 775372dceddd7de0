#!/usr/bin/env bash
# tests/readme_tour.sh MESHPOINT SRCDIR WORKDIR — the README's tour (the fenced block after "<!-- tour")
# is ten lines and runs as written, command by command, in WORKDIR, with three substitutions:
# configs/demo.json becomes the same config with a tiny model (its "train" object, 1000 steps, kept),
# corpus.txt becomes docs/CLI.md, and `mpirun` becomes mpiexec with the flags a container's root needs.
# Every command exits 0 and does what its comment says: the first run stops at step 500 with a
# checkpoint, the second resumes it on tp 2 x dp 2 to step 1000, `ckpt ls` shows both meshes and
# `latest` at 1000, `verify` is ok, `diff` finds the resharded checkpoint bitwise equal, export/import
# write an HF directory and a tp 2 checkpoint, and `sample` continues the prompt.
set -uo pipefail
bin=$1 src=$2 work=$3 case=readme_tour
source "$(dirname "$0")/lib.sh"
rm -rf "$work"; mkdir -p "$work"
block=$(awk '/^<!-- tour/ { on = 1; next } on && /^```/ { if (inb) exit; inb = 1; next } inb' "$src/README.md")
[ "$(printf '%s\n' "$block" | grep -c .)" -eq 10 ] || fail "the README's tour should be 10 lines: $block"
# the commands: continuation lines joined, comments dropped
mapfile -t cmds < <(printf '%s\n' "$block" | sed -E 's/[[:space:]]+#.*$//' |
                     awk '/\\$/ { sub(/[[:space:]]*\\$/, " "); acc = acc $0; next } { print acc $0; acc = "" }')
[ ${#cmds[@]} -eq 9 ] || fail "expected 9 commands in the tour, found ${#cmds[@]}: ${cmds[*]}"
grep -q '"steps": 1000' "$src/configs/demo.json" || fail "configs/demo.json no longer trains 1000 steps (the tour says so)"
/usr/bin/python3 - "$src/configs/demo.json" "$work/tiny.json" <<'PY' || fail "writing the tiny config"
import json, sys
c = json.load(open(sys.argv[1]))
c.update(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
         num_key_value_heads=2, max_position_embeddings=128)
c["train"].update(batch_size=4, seq_len=16)
json.dump(c, open(sys.argv[2], "w"))
PY
export PATH="$(cd "$(dirname "$bin")" && pwd):$PATH" OMP_NUM_THREADS=1
# run I: command I of the tour, substituted, in WORKDIR; its stdout in WORKDIR/I.out, stderr in I.err.
run() {
    local c=${cmds[$1]}
    c=${c//configs\/demo.json/$work/tiny.json}; c=${c//corpus.txt/$src/docs/CLI.md}
    c=$(sed -E 's/^mpirun /mpiexec --allow-run-as-root --oversubscribe /' <<<"$c")
    (cd "$work" && eval "$c") >"$work/$1.out" 2>"$work/$1.err" || fail "tour line: $c: exit $?: $(tail -n 5 "$work/$1.err")"
}
has() { cat "$work/$1.out" "$work/$1.err" | grep -qE -- "$2" || fail "tour command ${cmds[$1]}: no /$2/ in: $(tail -n 5 "$work/$1.out" "$work/$1.err")"; }
for i in "${!cmds[@]}"; do run $i; done
[ -s "$work/tok/en_train.bin" ] || fail "data wrote no tok/en_train.bin"
has 1 "stopped after step 500; checkpoint saved"
has 2 "done: 1000 steps"
has 4 "tp 1 x dp 1" ; has 4 "tp 2 x dp 2"; has 4 "latest: step_00001000"
has 5 "^ok: "
has 6 "result: equal \(bitwise\)"
[ -f "$work/hf/config.json" ] && [ -f "$work/back/index.h5" ] || fail "export/import wrote no hf/config.json or back/index.h5"
"$bin" ckpt show "$work/back" 2>&1 | grep -qE "^mesh +tp 2 x dp 1" || fail "import --tp 2 did not write a tp 2 checkpoint"
[ "$(head -c 4 "$work/8.out")" = "The " ] && [ "$(wc -c < "$work/8.out")" -gt 20 ] ||
    fail "sample does not continue the prompt: $(head -c 100 "$work/8.out")"
echo "PASS: the README's tour, ${#cmds[@]} commands, each as its comment says"
