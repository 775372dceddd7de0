# scripts/venv_lib.sh — the one way the project makes a pinned Python virtual environment from PyPI,
# sourced by scripts/bench_venv.sh (the benchmarks' PyTorch peers), scripts/test_venv.sh (the
# tokenizer tests' `tokenizers`) and scripts/titan_venv.sh (torchtitan over the bench venv).
#
# mp_venv TAG ENVVAR VENV PINS CHECK APT_PKG...
#   Installs APT_PKG... with apt-get when Debian's /usr/bin/python3 cannot make a venv (the venv module
#   and ensurepip are split out of python3), or, when APT_PKG lists python3-dev, lacks Python.h. Then, unless
#   VENV already holds a venv made for exactly PINS (its stamp file .meshpoint-pins), creates it (refusing,
#   exit 2, a non-empty VENV this function did not make, naming ENVVAR, which moves it), pip-installs PINS, runs the Python statement CHECK
#   in it and writes the stamp. Prints the venv's python on stdout; everything else, prefixed TAG, on stderr.
#   With MP_VENV_UNDER set to another venv's site-packages directory, the new venv also sees that one's
#   packages, after its own (a .pth file naming it, written before PINS install), and the stamp records it.
mp_venv() {
  local tag=$1 envvar=$2 venv=$3 pins=$4 check=$5; shift 5
  local need=0 minor stamp="$pins${MP_VENV_UNDER:+ under $MP_VENV_UNDER}"
  [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import ensurepip, venv' 2>/dev/null || need=1
  if [[ " $* " == *" python3-dev "* ]]; then
    minor=$(/usr/bin/python3 -c 'import sys; print(sys.version_info[1])' 2>/dev/null || echo x)
    [ -e "/usr/include/python3.$minor/Python.h" ] || need=1
  fi
  if [ $need -eq 1 ]; then
    local sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
    echo "$tag: installing $*" >&2
    $sudo apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "$@" >&2
  fi
  if [ -f "$venv/.meshpoint-pins" ] && [ "$(cat "$venv/.meshpoint-pins")" = "$stamp" ] && [ -x "$venv/bin/python" ]; then
    echo "$venv/bin/python"
    return 0
  fi
  # one maker at a time: tests running side by side that need the same venv (or one built over it, as
  # MP_VENV_UNDER's) wait here for the first to finish, then find its stamp
  mkdir -p "$(dirname "$venv")"
  local lock
  exec {lock}>"$venv.lock"
  flock "$lock"
  if [ -f "$venv/.meshpoint-pins" ] && [ "$(cat "$venv/.meshpoint-pins")" = "$stamp" ] && [ -x "$venv/bin/python" ]; then
    exec {lock}>&-
    echo "$venv/bin/python"
    return 0
  fi
  if [ -e "$venv" ] && [ ! -f "$venv/.meshpoint-pins" ] && [ -n "$(ls -A "$venv" 2>/dev/null)" ] &&
     [ ! -f "$venv/pyvenv.cfg" ]; then
    echo "$tag: error: $venv exists and is not a virtual environment this script made; set $envvar" >&2
    exec {lock}>&-
    return 2
  fi
  echo "$tag: creating $venv ($pins)" >&2
  mkdir -p "$(dirname "$venv")"
  /usr/bin/python3 -m venv --clear "$venv" >&2
  if [ -n "${MP_VENV_UNDER:-}" ]; then
    "$venv/bin/python" -c 'import sys, sysconfig; open(sysconfig.get_paths()["purelib"] + "/meshpoint-under.pth", "w").write(sys.argv[1] + "\n")' "$MP_VENV_UNDER" >&2
  fi
  # shellcheck disable=SC2086  # PINS is a list of requirement specifiers
  "$venv/bin/pip" install --quiet --disable-pip-version-check $pins >&2
  "$venv/bin/python" -c "$check" >&2
  echo "$stamp" > "$venv/.meshpoint-pins"
  exec {lock}>&-
  echo "$venv/bin/python"
}
