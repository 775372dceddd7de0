#!/usr/bin/env bash
# scripts/test_venv.sh — creates (once) the Python virtual environment the tokenizer tests compare against
# (Hugging Face's `tokenizers` library from PyPI, pinned), and prints its interpreter's path on stdout
# (everything else goes to stderr). Modelled on scripts/bench_venv.sh.
#
#   scripts/test_venv.sh            # path of the venv's python, creating the venv if needed
#   MP_TEST_VENV=DIR scripts/test_venv.sh
#
# Default location: $XDG_CACHE_HOME/meshpoint/test-venv-<pins> (else ~/.cache/...). A stamp file records
# the pins; a venv without it (a failed or older install) is rebuilt. About 20 MB, seconds to install.
set -euo pipefail
TOKENIZERS_PIN="tokenizers==0.23.3"
PINS="$TOKENIZERS_PIN"
TAG="tokenizers0.23.3"
cache="${XDG_CACHE_HOME:-$HOME/.cache}/meshpoint"
VENV="${MP_TEST_VENV:-$cache/test-venv-$TAG}"

# python3-venv: Debian's (the venv module and ensurepip are split out of python3)
if [ ! -x /usr/bin/python3 ] || ! /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "test_venv: installing python3-venv" >&2
  $SUDO apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends python3-venv >&2
fi

if [ -f "$VENV/.meshpoint-pins" ] && [ "$(cat "$VENV/.meshpoint-pins")" = "$PINS" ] && [ -x "$VENV/bin/python" ]; then
  echo "$VENV/bin/python"
  exit 0
fi
if [ -e "$VENV" ] && [ ! -f "$VENV/.meshpoint-pins" ] && [ -n "$(ls -A "$VENV" 2>/dev/null)" ] &&
   [ ! -f "$VENV/pyvenv.cfg" ]; then
  echo "test_venv: error: $VENV exists and is not a virtual environment this script made; set MP_TEST_VENV" >&2
  exit 2
fi
echo "test_venv: creating $VENV ($PINS)" >&2
mkdir -p "$(dirname "$VENV")"
/usr/bin/python3 -m venv --clear "$VENV" >&2
"$VENV/bin/pip" install --quiet --disable-pip-version-check $PINS >&2
"$VENV/bin/python" -c 'import tokenizers' >&2
echo "$PINS" > "$VENV/.meshpoint-pins"
echo "$VENV/bin/python"
