#!/usr/bin/env bash
# tests/cli_docs.sh MESHPOINT SRCDIR — docs/CLI.md documents every command and every flag: each command
# `meshpoint --help` lists (and each subcommand `meshpoint ckpt --help` lists) has its section there,
# headed "## `meshpoint CMD`" (or "### `meshpoint ckpt SUB`"), and every option its own `--help` lists
# under "options:" is named in backquotes in that section (the negation of a "--x, --no-x" pair goes with
# --x; --help and --version are documented once, under "Everywhere"). A flag added to a command without
# a line in its section fails here, naming both.
set -uo pipefail
bin=$1 src=$2 case=cli_docs
source "$(dirname "$0")/lib.sh"
doc=$src/docs/CLI.md
[ -f "$doc" ] || fail "missing $doc"

# section CMD: the lines of docs/CLI.md from CMD's heading to the next heading of another command.
section() {
    awk -v h="\`meshpoint $1\`" '
        /^#+ / && index($0, "`meshpoint ") { if (on) exit; if (index($0, h)) { on = 1; next } }
        on' "$doc"
}
# flags CMD...: the first flag of each option line of CMD's --help, --help and --version left out.
flags() {
    "$bin" "$@" --help | awk '/^options:/ { on = 1; next } on && /^  --/ { print $1 }' |
        sed 's/,$//' | grep -vxE -- '--help|--version'
}
cmds=$("$bin" --help | awk '/^commands:/ { on = 1; next } on && /^  [a-z]/ { print $1 } on && /^$/ { exit }')
[ "$(echo "$cmds" | wc -w)" -ge 10 ] || fail "meshpoint --help lists only: $cmds"
subs=$("$bin" ckpt --help | sed -n 's/^usage: meshpoint ckpt <\([a-z|-]*\)>.*/\1/p' | tr '|' ' ')
[ "$(echo "$subs" | wc -w)" -ge 5 ] || fail "meshpoint ckpt --help lists only: $subs"
everywhere=$(awk '/^## Everywhere/ { on = 1; next } on && /^## / { exit } on' "$doc")
for f in --help --version; do
    grep -q -- "$f" <<<"$everywhere" || fail "docs/CLI.md's Everywhere section does not name $f"
done
checked=0 missing=""
for c in $cmds; do
    list=("$c")
    [ "$c" = ckpt ] && { list=(); for s in $subs; do list+=("ckpt $s"); done; }
    for cmd in "${list[@]}"; do
        text=$(section "$cmd")
        [ -n "$text" ] || { missing+=" [no section for meshpoint $cmd]"; continue; }
        for f in $(flags $cmd); do
            checked=$((checked + 1))
            grep -qE -- "\`$f([^a-z0-9-]|\$)" <<<"$text" || missing+=" [meshpoint $cmd $f]"
        done
    done
done
[ -z "$missing" ] || fail "not documented in docs/CLI.md:$missing"
[ $checked -ge 100 ] || fail "only $checked flags found in the --help texts: the parser above is broken"
echo "PASS: $(echo $cmds | wc -w) commands, $(echo $subs | wc -w) ckpt subcommands, $checked flags, each documented in docs/CLI.md"
