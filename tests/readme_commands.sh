#!/usr/bin/env bash
# tests/readme_commands.sh SRCDIR — the README's two commands (the fenced block under "## Two commands")
# are what .ci/run runs: the same scripts, each once, with only settings the README documents in front
# (e.g. DEMO_STEPS=200). An edit of either side that breaks this fails here until the other follows.
set -uo pipefail
src=$1 case=readme_commands
source "$(dirname "$0")/lib.sh"
readme=$src/README.md ci=$src/.ci/run
[ -f "$readme" ] && [ -f "$ci" ] || fail "missing $readme or $ci"

# The README's commands: the block's lines, comments and blank lines dropped.
block=$(awk '/^## Two commands/ { on = 1; next } on && /^```/ { if (inb) exit; inb = 1; next }
             inb { sub(/#.*/, ""); gsub(/^[ \t]+|[ \t]+$/, ""); if ($0 != "") print }' "$readme")
[ "$(printf '%s\n' "$block" | grep -c .)" -eq 2 ] || fail "README's Two commands block should hold 2 commands, holds: $block"
# .ci/run's commands: its lines that run a script of the repository, leading VAR=value settings apart.
runs=$(grep -E '^[[:space:]]*([A-Z_]+=[^ ]+[[:space:]]+)*\./scripts/' "$ci" | sed -E 's/^[[:space:]]+//')
settings=$(printf '%s\n' "$runs" | grep -oE '^([A-Z_]+=[^ ]+[[:space:]]+)+' | grep -oE '[A-Z_]+=' | tr -d = | sort -u)
cmds=$(printf '%s\n' "$runs" | sed -E 's/^([A-Z_]+=[^ ]+[[:space:]]+)+//')
[ "$(printf '%s\n' "$block" | sort)" = "$(printf '%s\n' "$cmds" | sort)" ] ||
    fail "README's commands and .ci/run's differ: README: [$(echo $block)] .ci/run: [$(echo $cmds)]"
for s in $settings; do
    grep -q "\`$s\`" "$readme" || fail ".ci/run sets $s, which the README does not document"
done
echo "PASS: README and .ci/run both run: $(echo $cmds) (settings: ${settings:-none})"
