#!/usr/bin/env bash
# scripts/setup.sh — installs every Debian package meshpoint needs (build, tests, demo, Python interop
# checks). Idempotent: packages already present are skipped quickly. Needs root (or sudo).
set -euo pipefail
# clang, libclang-rt-dev (libFuzzer and the sanitizer runtimes: only a recommendation of clang, which
# --no-install-recommends skips) and libomp-dev (clang's OpenMP) build the fuzz targets (scripts/fuzz.sh).
PKGS=(build-essential cmake pkg-config clang libclang-rt-dev libomp-dev
      libhdf5-dev hdf5-tools libzstd-dev libxxhash-dev
      libopenmpi-dev openmpi-bin libopenblas-dev
      libcriterion-dev libcjson-dev libplplot-dev plplot-driver-cairo
      libpcre2-dev
      python3-torch python3-h5py python3-numpy
      fortunes time)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PKGS[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
echo "setup: installing ${missing[*]}"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
