#!/usr/bin/env bash
# scripts/gpu_bundle.sh [BUILD_DIR] — builds the CUDA variant HERE and packs it into BUILD_DIR/meshpoint-gpu, a
# folder that runs on a GPU machine that has CUDA and nothing of this project's packages (no HDF5, Open
# MPI, OpenBLAS, cJSON, zstd, xxHash, PLplot, no network to install them): the lent H200.
#
# What the bundle holds (BUILD_DIR defaults to build-gpu-bundle; the bundle is BUILD_DIR/meshpoint-gpu,
#            packed for travel as BUILD_DIR/meshpoint-gpu.tar.gz):
#   bin/       meshpoint, cuda_check_host, cuda_check_device, cuda_mma_probe, test_device_parity, gemm_probe, membound_probe (linked with an RPATH of
#              $ORIGIN/../lib, DT_RPATH so it also covers the libraries' own dependencies), the CUDA module
#              libmeshpoint-cuda.so beside them (the same RPATH; meshpoint and test_device_parity dlopen it
#              from their own folder for --device cuda, core/cuda_module.h; the cuda_check_* programs link
#              core/cuda/ statically), and Open MPI's mpiexec/orterun/orted for the tp x dp part on a host
#              with 2+ GPUs
#   lib/       every shared library those load (ldd, Open MPI's and PMIx's components included) that is
#              neither CUDA's (cudart, cuBLAS(Lt), NCCL, cuDNN, the driver) nor the C library's (glibc:
#              libc, libm, libdl, libpthread, librt, libresolv, the loader); libstdc++/libgcc_s go to
#              lib/compat/, used only where the machine has none (NVIDIA's libraries need the machine's own)
#   lib/openmpi3, lib/pmix, share/openmpi  Open MPI's components and help texts, relocated by
#              scripts/gpu_env.sh (OPAL_* variables); one process runs as an Open MPI singleton in isolated
#              mode (OMPI_MCA_ess_singleton_isolated=1: no orted, no mpirun)
#   scripts/gpu-check.sh, gpu_env.sh, gpu_selftest.sh, gpu_verdict.sh,
#   bench/bench_gpu.sh, tests/gpu_e2e.sh, tests/eval_sample_device.sh, tests/lib.sh,
#   tests/configs/, configs/, data/ (the text the check trains on): the check, run from the bundle
#   BUNDLE     the marker gpu-check.sh looks for; GLIBC_MIN the oldest C library the bundle needs (the
#              highest GLIBC_x.y symbol version any of its ELF files asks for); CUDA_NEEDED the CUDA
#              libraries it expects the machine to have; MANIFEST what was built, from which tree, sizes
#
# On the GPU machine: BUILD_DIR/meshpoint-gpu/scripts/gpu-check.sh (docs/CUDA.md has the one call); here, the
# bundle's CPU self-test is BUILD_DIR/meshpoint-gpu/scripts/gpu-check.sh --selftest, and tests/gpu_bundle.sh
# runs it with the project's packages hidden (ctest gpu_bundle_selftest).
# Exit: 0 built, 1 the build or packing failed, 2 bad usage (e.g. BUILD_DIR/meshpoint-gpu is not a bundle).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
bdir=${1:-build-gpu-bundle}
case "$bdir" in /*) ;; *) bdir="$root/$bdir" ;; esac
out="$bdir/meshpoint-gpu"
tarball="$bdir/meshpoint-gpu.tar.gz"
if [ -e "$out" ] && [ ! -f "$out/BUNDLE" ]; then
  echo "gpu_bundle.sh: $out exists and is not a bundle this script made (no BUNDLE file): not touching it" >&2
  exit 2
fi

mkdir -p "$bdir"
echo "gpu_bundle.sh: building the CUDA variant in $bdir (warnings as errors)"
# CMAKE_SKIP_RPATH: no build-tree RUNPATH (it would name this machine's directories); the one RPATH is ours.
cmake -S . -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DMP_CUDA=ON -DMP_WERROR=ON -DCMAKE_SKIP_RPATH=ON \
  "-DCMAKE_EXE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath,\\\$ORIGIN/../lib" \
  "-DCMAKE_MODULE_LINKER_FLAGS=-Wl,--disable-new-dtags -Wl,-rpath,\\\$ORIGIN/../lib" > "$bdir/gpu_bundle.configure.log" 2>&1 ||
  { tail -20 "$bdir/gpu_bundle.configure.log"; echo "gpu_bundle.sh: configuring failed (log $bdir/gpu_bundle.configure.log)" >&2; exit 1; }
progs="meshpoint cuda_check_host cuda_check_device cuda_mma_probe test_device_parity gemm_probe membound_probe"
module=libmeshpoint-cuda.so
# shellcheck disable=SC2086
cmake --build "$bdir" -j"$(nproc)" --target $progs meshpoint-cuda > "$bdir/gpu_bundle.build.log" 2>&1 ||
  { tail -30 "$bdir/gpu_bundle.build.log"; echo "gpu_bundle.sh: the build failed (log $bdir/gpu_bundle.build.log)" >&2; exit 1; }
for f in meshpoint $module; do
  rpath=$(objdump -p "$bdir/$f" | awk '$1 == "RPATH" { print $2 }')
  [ "$rpath" = '$ORIGIN/../lib' ] || { echo "gpu_bundle.sh: $f's RPATH is '$rpath', not \$ORIGIN/../lib" >&2; exit 1; }
done

rm -rf "$out"
mkdir -p "$out"/{bin,lib/compat,lib/openmpi3,lib/pmix,lib/hwloc,share,scripts,bench,tests/configs,configs,data,etc}
echo "meshpoint GPU bundle (scripts/gpu_bundle.sh)" > "$out/BUNDLE"
for p in $progs $module; do cp "$bdir/$p" "$out/bin/"; done

# Open MPI: the launcher for tp x dp (2+ GPUs), its components and help texts, PMIx's components.
ompi_lib=$(dirname "$(readlink -f "$(ldd "$bdir/meshpoint" | awk '$1 ~ /^libmpi\.so/ { print $3 }')")")
ompi_pkglib=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable 2>/dev/null | sed -n 's/^path:pkgdatadir://p')
[ -d "$ompi_pkglib" ] && [ -d "$ompi_pkgdata" ] ||
  { echo "gpu_bundle.sh: cannot find Open MPI's components/help texts (ompi_info --path; libmpi in $ompi_lib)" >&2; exit 1; }
# one host, shared memory and TCP: the fabric (OFI, UCX, verbs, PSM), OpenSHMEM, monitoring, batch-system
# and compression components are left out, with the libraries only they load (libfabric, UCX, ...)
for c in "$ompi_pkglib"/*.so; do
  case "$(basename "$c")" in
    *_ofi.so|*_openib.so|*_ucx.so|*_psm*.so|mca_mtl_*|mca_pml_cm.so|mca_atomic_*|mca_memheap_*|mca_scoll_*|\
    mca_spml_*|mca_sshmem_*|*monitoring*|*slurm*|*gridengine*|*flux*|*_jsm.so|mca_reachable_netlink.so|\
    mca_compress_*|mca_crs_*|mca_vprotocol_*|mca_topo_treematch.so|libompi_dbg_msgq.so) ;;
    *) cp "$c" "$out/lib/openmpi3/" ;;
  esac
done
cp -r "$ompi_pkgdata" "$out/share/openmpi"
for d in "$(dirname "$ompi_lib")"/../pmix2/lib/pmix /usr/lib/x86_64-linux-gnu/pmix2/lib/pmix; do
  if [ -d "$d" ]; then cp "$d"/*.so "$out/lib/pmix/" 2>/dev/null || true; break; fi
done
for b in orterun orted; do cp "$(readlink -f "$(command -v $b)")" "$out/bin/$b"; done
ln -s orterun "$out/bin/mpiexec"

# is_cuda_or_libc SONAME PATH: 0 for what the machine provides (CUDA's libraries, the driver, glibc).
is_cuda_or_libc() {
  case "$1" in
    linux-vdso.so*|ld-linux*|libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|\
    libutil.so.*|libanl.so.*|libmvec.so.*|libnsl.so.*|libBrokenLocale.so.*|libthread_db.so.*) return 0 ;;
    libcuda.so*|libnvidia-*|libcudart.so*|libcublas*|libnccl.so*|libcudnn*|libnvrtc*|libnvJitLink*|\
    libcufft*|libcurand*|libcusparse*|libcusolver*|libnvToolsExt*|libcupti*) return 0 ;;
  esac
  case "$2" in /usr/local/cuda*|*/site-packages/nvidia/*) return 0 ;; esac
  return 1
}
# the libraries that bin/ and the components load, transitively (ldd resolves the whole tree)
scan=("$out"/bin/* "$out"/lib/openmpi3/*.so "$out"/lib/pmix/*.so)
: > "$bdir/bundle.cuda_needed"
for f in "${scan[@]}"; do
  [ -L "$f" ] && continue
  ldd "$f" 2>/dev/null | awk '$2 == "=>" { print $1, $3 }' | while read -r so path; do
    if [ "$path" = "not" ]; then echo "gpu_bundle.sh: $f needs $so, not found here" >&2; exit 1; fi
    if is_cuda_or_libc "$so" "$path"; then
      case "$so" in libc.so.*|libm.so.*|libdl.so.*|libpthread.so.*|librt.so.*|libresolv.so.*|ld-linux*|\
                    libutil.so.*|libanl.so.*|libmvec.so.*|linux-vdso*) ;; *) echo "$so" >> "$bdir/bundle.cuda_needed" ;; esac
      continue
    fi
    case "$so" in libstdc++.so.*|libgcc_s.so.*) dest="$out/lib/compat" ;; *) dest="$out/lib" ;; esac
    [ -e "$dest/$so" ] || cp -L "$path" "$dest/$so"
  done
done
sort -u "$bdir/bundle.cuda_needed" > "$out/CUDA_NEEDED"

# the check's scripts and inputs, in the repository's layout (gpu-check.sh finds them beside itself)
cp scripts/gpu-check.sh scripts/gpu_env.sh scripts/gpu_selftest.sh scripts/gpu_verdict.sh "$out/scripts/"
cp bench/bench_gpu.sh bench/gpu_roofline.py "$out/bench/"
cp tests/gpu_e2e.sh tests/eval_sample_device.sh tests/lib.sh "$out/tests/"
cp tests/configs/*.json "$out/tests/configs/"
cp configs/*.json "$out/configs/"
cp docs/CLI.md core/config.c layers/llama.c "$out/data/"

# the oldest C library that every ELF file here accepts: the highest GLIBC_x.y version it asks for
glibc=$(find "$out/bin" "$out/lib" -type f -exec objdump -T {} + 2>/dev/null |
        grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
[ -n "$glibc" ] || { echo "gpu_bundle.sh: could not read the GLIBC versions the bundle needs" >&2; exit 1; }
echo "$glibc" > "$out/GLIBC_MIN"
size=$(du -sm "$out" | cut -f1)
{
  echo "built:      $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME"), glibc $(getconf GNU_LIBC_VERSION | cut -d' ' -f2)"
  echo "source:     $(git describe --always --dirty 2>/dev/null || echo 'no git')"
  echo "nvcc:       $(nvcc --version 2>/dev/null | sed -n 's/.*release \([0-9.]*\).*/\1/p' || grep -m1 CMAKE_CUDA_COMPILER_VERSION "$bdir/CMakeCache.txt")"
  echo "needs:      glibc >= $glibc; from the machine's CUDA: $(tr '\n' ' ' < "$out/CUDA_NEEDED")"
  echo "size:       $size MiB"
  echo "files:"
  (cd "$out" && find . -type f | sort | sed 's/^\.\//  /')
} > "$out/MANIFEST"
tar -C "$bdir" -czf "$tarball.part" meshpoint-gpu && mv "$tarball.part" "$tarball"
echo "gpu_bundle.sh: $out: $size MiB ($tarball: $(du -m "$tarball" | cut -f1) MiB), $(find "$out/lib" -name '*.so*' | wc -l) libraries; needs glibc >= $glibc and, from the machine, $(tr '\n' ' ' < "$out/CUDA_NEEDED")"
