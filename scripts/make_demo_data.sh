#!/bin/sh
# scripts/make_demo_data.sh OUTDIR — builds the demo dataset from the Debian `fortunes` package.
#
# Writes OUTDIR/fortunes_train.bin and OUTDIR/fortunes_val.bin (llm.c token files, byte-level, vocab 256)
# by running `meshpoint data` on the plain text files in /usr/share/games/fortunes/ (sorted by name in
# the C locale, so the result is the same on every machine): the .dat index files, the .u8 duplicates
# (symlinks to the same text), symlinks in general and the off/ (offensive) folder are skipped.
#
# The meshpoint binary is taken from $MP_BIN if set, else build/meshpoint next to this script's
# repository, else `meshpoint` on PATH. $FORTUNES_DIR overrides the fortunes folder (for tests).
# Exit status: 0 ok, 2 bad usage, 1 missing fortunes package / binary or a failed `meshpoint data`.
set -eu

if [ $# -ne 1 ] || [ "$1" = "-h" ] || [ "$1" = "--help" ]; then
    echo "usage: $0 OUTDIR   (meshpoint binary from \$MP_BIN, default build/meshpoint)" >&2
    [ $# -eq 1 ] && exit 0
    exit 2
fi
out=$1
src=${FORTUNES_DIR:-/usr/share/games/fortunes}

here=$(cd "$(dirname "$0")" && pwd)
bin=${MP_BIN:-}
if [ -z "$bin" ]; then
    if [ -x "$here/../build/meshpoint" ]; then bin=$here/../build/meshpoint
    elif command -v meshpoint >/dev/null 2>&1; then bin=$(command -v meshpoint)
    fi
fi
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "$0: error: meshpoint binary not found (${bin:-none}); build it or set MP_BIN" >&2
    exit 1
fi

LC_ALL=C; export LC_ALL
set --
if [ -d "$src" ]; then
    for f in "$src"/*; do
        case $f in *.dat|*.u8) continue ;; esac
        [ -f "$f" ] && [ ! -L "$f" ] || continue
        set -- "$@" "$f"
    done
fi
if [ $# -eq 0 ]; then
    echo "$0: error: no fortune text files in $src: the Debian 'fortunes' package is missing" >&2
    echo "$0: install it with: apt-get install fortunes   (the project's setup script does this)" >&2
    exit 1
fi

exec "$bin" data --out "$out" --name fortunes --val-fraction 0.1 "$@"
