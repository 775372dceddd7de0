# scripts/gpu_env.sh — sourced (bash) by scripts/gpu-check.sh inside a bundle made by scripts/gpu_bundle.sh:
#   mp_gpu_env BUNDLE_DIR
# sets up the process environment so that the bundle's programs load the bundle's libraries and THIS
# machine's CUDA (cudart, cuBLASLt, NCCL, ... as listed in BUNDLE_DIR/CUDA_NEEDED), found where they are
# installed here, never assumed:
#   1. $MP_CUDA_LIBS (colon-separated directories), when set;
#   2. $CUDA_HOME, $CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*: lib64, lib, targets/x86_64-linux/lib;
#   3. the Python wheels' nvidia/*/lib (and nvidia/cu*/lib) under every python3's site-packages;
#   4. the dynamic loader's cache (ldconfig -p).
# Each library is taken from the first directory that holds it; mp_gpu_env prints where each came from
# (MP_GPU_ENV_LOG), and fails (return 1) naming the library and the places it looked when one is missing,
# or when this machine's C library is older than BUNDLE_DIR/GLIBC_MIN. It also exports:
#   LD_LIBRARY_PATH  BUNDLE/lib, then the CUDA directories found, then BUNDLE/lib/compat when the machine
#                    has no libstdc++/libgcc_s of its own (NVIDIA's libraries are built against the
#                    machine's: the bundled ones are a fallback only);
#   OPAL_*, OMPI_MCA_mca_base_component_path, PMIX_*, HWLOC_PLUGINS_PATH
#                    Open MPI, PMIx and hwloc relocated into the bundle (their configured /usr paths do not
#                    exist there; hwloc's optional plugins, GL/OpenCL/PCI/XML, are not bundled);
#   OMPI_MCA_ess_singleton_isolated=1  one process initialises MPI on its own (no orted, no mpirun);
#   MP_GPU_SANITIZER compute-sanitizer's path, found under the CUDA directories, or empty;
#   MP_GPU_CUDA_DIRS the directories the CUDA libraries came from (for the self-test's load audit).
MP_GPU_ENV_LOG=""

# mp_gpu_python_nvidia_dirs: the lib folders of the nvidia-* wheels of every python3 found, one a line.
mp_gpu_python_nvidia_dirs() {
  local py sp
  for py in python3 /usr/bin/python3 /opt/*/.venv/bin/python3 /usr/local/bin/python3; do
    command -v "$py" > /dev/null 2>&1 || [ -x "$py" ] || continue
    "$py" - 2>/dev/null <<'EOF' || true
import site, sys, glob, os
dirs = set(site.getsitepackages() + [site.getusersitepackages()])
for d in sorted(dirs):
    for lib in sorted(glob.glob(os.path.join(d, "nvidia", "*", "lib")) + glob.glob(os.path.join(d, "nvidia", "*", "*", "lib"))):
        print(lib)
EOF
  done
  for sp in /opt/*/.venv/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages /usr/lib/python3/dist-packages; do
    [ -d "$sp/nvidia" ] && ls -d "$sp"/nvidia/*/lib "$sp"/nvidia/*/*/lib 2>/dev/null
  done
  return 0
}

# mp_gpu_cuda_candidates: directories that may hold CUDA's libraries, in order of preference.
mp_gpu_cuda_candidates() {
  local d
  if [ -n "${MP_CUDA_LIBS:-}" ]; then tr ':' '\n' <<< "$MP_CUDA_LIBS"; fi
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    [ -n "$d" ] && [ -d "$d" ] || continue
    echo "$d/lib64"; echo "$d/lib"; echo "$d/targets/x86_64-linux/lib"
  done
  mp_gpu_python_nvidia_dirs
}

# mp_gpu_glibc_ok BUNDLE: 0 when this machine's glibc is at least the bundle's GLIBC_MIN.
mp_gpu_glibc_ok() {
  local need have
  need=$(cat "$1/GLIBC_MIN")
  have=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{print $2}')
  [ -n "$have" ] || have=$(ldd --version 2>/dev/null | head -1 | grep -o '[0-9][0-9.]*$')
  if [ -z "$have" ]; then echo "gpu_env: cannot read this machine's glibc version (need >= $need)" >&2; return 1; fi
  if [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    echo "gpu_env: this machine's glibc is $have; the bundle needs >= $need (rebuild it on an older system)" >&2
    return 1
  fi
  MP_GPU_ENV_LOG+="glibc $have (bundle needs >= $need)"$'\n'
}

# mp_gpu_find_sanitizer: exports MP_GPU_SANITIZER, compute-sanitizer under the CUDA directories
# ($CUDA_HOME, $CUDA_PATH, /usr/local/cuda*: bin/ or compute-sanitizer/), else on PATH, else empty.
mp_gpu_find_sanitizer() {
  local d f
  MP_GPU_SANITIZER=""
  for d in "${CUDA_HOME:-}" "${CUDA_PATH:-}" /usr/local/cuda /usr/local/cuda-*; do
    [ -n "$d" ] || continue
    for f in "$d/bin/compute-sanitizer" "$d/compute-sanitizer/compute-sanitizer"; do
      if [ -x "$f" ]; then MP_GPU_SANITIZER=$f; break 2; fi
    done
  done
  [ -n "$MP_GPU_SANITIZER" ] || MP_GPU_SANITIZER=$(command -v compute-sanitizer 2>/dev/null || true)
  export MP_GPU_SANITIZER
}

# mp_gpu_env BUNDLE: the environment described above; 1 with the reason on stderr when it cannot be had.
mp_gpu_env() {
  local b=$1 so d found dirs="" missing="" cands
  [ -f "$b/BUNDLE" ] || { echo "gpu_env: $b is not a bundle (no BUNDLE file)" >&2; return 1; }
  mp_gpu_glibc_ok "$b" || return 1
  cands=$(mp_gpu_cuda_candidates | awk '!seen[$0]++')
  while read -r so; do
    [ -n "$so" ] || continue
    found=""
    while read -r d; do
      if [ -n "$d" ] && [ -e "$d/$so" ]; then found=$d; break; fi
    done <<< "$cands"
    if [ -z "$found" ]; then
      found=$(ldconfig -p 2>/dev/null | awk -v so="$so" '$1 == so && /x86-64/ { print $NF; exit }')
      if [ -n "$found" ] && [ -e "$found" ]; then found=$(dirname "$found"); else found=""; fi
    fi
    if [ -z "$found" ]; then missing+=" $so"; continue; fi
    MP_GPU_ENV_LOG+="$so: $found"$'\n'
    case ":$dirs:" in *":$found:"*) ;; *) dirs="${dirs:+$dirs:}$found" ;; esac
  done < "$b/CUDA_NEEDED"
  if [ -n "$missing" ]; then
    echo "gpu_env: this machine lacks CUDA libraries the bundle needs:$missing (looked in \$MP_CUDA_LIBS," \
         "\$CUDA_HOME, /usr/local/cuda*, the python3 nvidia-* wheels and ldconfig; set MP_CUDA_LIBS to their directory)" >&2
    return 1
  fi
  local ld="$b/lib${dirs:+:$dirs}"
  for so in libstdc++.so.6 libgcc_s.so.1; do
    if ! ldconfig -p 2>/dev/null | grep -q "^[[:space:]]*$so .*x86-64"; then
      ld+=":$b/lib/compat"; MP_GPU_ENV_LOG+="$so: none on this machine, the bundle's (lib/compat)"$'\n'; break
    fi
  done
  export LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export MP_GPU_CUDA_DIRS="$dirs"
  export OPAL_PREFIX="$b" OPAL_EXEC_PREFIX="$b" OPAL_BINDIR="$b/bin" OPAL_SBINDIR="$b/bin" OPAL_LIBEXECDIR="$b/bin"
  export OPAL_LIBDIR="$b/lib" OPAL_PKGLIBDIR="$b/lib/openmpi3" OPAL_DATAROOTDIR="$b/share" OPAL_DATADIR="$b/share"
  export OPAL_PKGDATADIR="$b/share/openmpi" OPAL_SYSCONFDIR="$b/etc"
  export OMPI_MCA_mca_base_component_path="$b/lib/openmpi3" PMIX_MCA_mca_base_component_path="$b/lib/pmix"
  export PMIX_PREFIX="$b" PMIX_LIBDIR="$b/lib" PMIX_PKGLIBDIR="$b/lib/pmix"
  export HWLOC_PLUGINS_PATH="$b/lib/hwloc"   # none bundled: hwloc's built-in Linux discovery is enough
  export OMPI_MCA_ess_singleton_isolated=1
  export PATH="$b/bin:$PATH"
  mp_gpu_find_sanitizer
  return 0
}
