#!/usr/bin/env bash
# tests/gpu_bundle.sh SRC WORK MESHPOINT — the GPU bundle (scripts/gpu_bundle.sh) runs where the project's packages
# are absent, as on the lent GPU machine:
#   1. builds the bundle into WORK/build (the CUDA variant, warnings as errors) and unpacks its tarball
#      into WORK/x (what travels is what runs);
#   2. in a private mount namespace (unshare --mount) hides HDF5, Open MPI, PMIx, hwloc, libevent,
#      OpenBLAS/LAPACK, libgfortran, cJSON, xxHash, zstd, PLplot, Criterion, libaec/szip and libgomp (their
#      library files and folders overmounted with /dev/null and an empty folder, the mpiexec/orted programs
#      too), and checks they are gone: MESHPOINT (the ordinary build) no longer loads there;
#   3. runs the unpacked bundle's `scripts/gpu-check.sh --selftest` there (kernels_host, the mma probe's
#      "no GPU" exit, a CPU training run with a compressed checkpoint verified and evaluated, tp 2 under the
#      bundled mpiexec, the audit that every library loaded is the bundle's, CUDA's or glibc's, the
#      head-dim-64 parity program on cpu-bf16);
#   4. runs the bundle's `scripts/gpu-check.sh` (the GPU check) there: on this machine without a GPU it
#      must exit 2 naming "no GPU", having checked nothing; with /usr/local/cuda-* hidden too, it must
#      exit 1 naming the CUDA library it lacks.
# Skipped (77) where unshare --mount is not permitted (not root, no user namespaces), saying so.
set -u
src=$1; work=$2; sysbin=$3
case=gpu_bundle; . "$src/tests/lib.sh"
if ! unshare --mount true 2> "$work.unshare.err"; then
  echo "SKIP: unshare --mount is not permitted here ($(cat "$work.unshare.err")): the hidden-packages run needs it"
  exit 77
fi
rm -rf "$work"; mkdir -p "$work/x" "$work/empty"
"$src/scripts/gpu_bundle.sh" "$work/build" > "$work/bundle.log" 2>&1 || fail "gpu_bundle.sh failed: $(tail -30 "$work/bundle.log")"
tail -1 "$work/bundle.log"
tar -C "$work/x" -xzf "$work/build/meshpoint-gpu.tar.gz" || fail "cannot unpack the bundle's tarball"
b="$work/x/meshpoint-gpu"
grep -Eq '^[0-9]+\.[0-9]+$' "$b/GLIBC_MIN" || fail "GLIBC_MIN is not a version: $(cat "$b/GLIBC_MIN")"
size=$(du -sm "$work/build/meshpoint-gpu.tar.gz" | cut -f1)
[ "$size" -le 48 ] || fail "the tarball is $size MiB: too big to travel with the tree (64 MiB in all)"

# the script run inside the namespace: hide, prove hidden, run the bundle
cat > "$work/hidden.sh" <<'EOF'
set -u
work=$1 b=$2 sysbin=$3
lib=/usr/lib/x86_64-linux-gnu
for d in $lib/openmpi $lib/hdf5 $lib/openblas-pthread $lib/pmix2 $lib/hwloc $lib/blas $lib/lapack /usr/share/openmpi /etc/openmpi; do
  [ -d "$d" ] && mount --bind "$work/empty" "$d"
done
n=0
for f in $lib/lib{hdf5,mpi,open-rte,open-pal,oshmem,pmix,hwloc,event,openblas,blas,lapack,gfortran,quadmath,cjson,xxhash,zstd,plplot,csiro,qsastime,shp,criterion,sz,aec,gomp,mca_common}*.so* \
         /usr/bin/{orterun,orted,mpiexec,mpirun,ompi_info}; do
  [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f" && n=$((n + 1))
done
echo "hidden: $n files and the package folders"
if "$sysbin" --version > "$work/sysbin.log" 2>&1; then echo "FAIL: the system build still runs: packages not hidden"; exit 1; fi
echo "the system build no longer loads: $(grep -m1 -o 'error while loading[^:]*: [^:]*' "$work/sysbin.log")"
MP_GPU_CHECK_OUT="$work/selftest" "$b/scripts/gpu-check.sh" --selftest > "$work/selftest.log" 2>&1
echo "selftest exit $?"
MP_GPU_CHECK_OUT="$work/gpucheck" "$b/scripts/gpu-check.sh" > "$work/gpucheck.log" 2>&1
echo "gpu-check exit $?"
# and without CUDA's libraries: a missing prerequisite, named
for d in /usr/local/cuda-*; do [ -d "$d" ] && mount --bind "$work/empty" "$d"; done
for f in /usr/local/lib/libcudart* /usr/local/lib/libcublas* /usr/local/lib/libnccl*; do
  [ -f "$f" ] && [ ! -L "$f" ] && mount --bind /dev/null "$f"
done
MP_GPU_CHECK_OUT="$work/nocuda" "$b/scripts/gpu-check.sh" > "$work/nocuda.log" 2>&1
echo "no-CUDA gpu-check exit $?"
EOF
unshare --mount --propagation private bash "$work/hidden.sh" "$work" "$b" "$sysbin" \
  > "$work/hidden.log" 2>&1
cat "$work/hidden.log"
grep -q '^the system build no longer loads' "$work/hidden.log" || fail "the packages could not be hidden: $(cat "$work/hidden.log")"
grep -q '^selftest exit 0$' "$work/hidden.log" || fail "the bundle's self-test failed without the packages: $(tail -40 "$work/selftest.log")"
grep -q 'load_audit: PASS' "$work/selftest.log" || fail "the self-test ran no load audit: $(tail -20 "$work/selftest.log")"
grep -q 'mma_probe: PASS' "$work/selftest.log" || fail "the self-test did not run the mma probe (no GPU: exit 77 naming it): $(tail -20 "$work/selftest.log")"
grep -q '^gpu-check exit 2$' "$work/hidden.log" || fail "gpu-check without a GPU did not exit 2: $(tail -20 "$work/gpucheck.log")"
grep -q '^no-CUDA gpu-check exit 1$' "$work/hidden.log" || fail "gpu-check without CUDA's libraries did not exit 1: $(tail -20 "$work/nocuda.log")"
grep -Eq 'libcudart.so|libcublasLt.so|libnccl.so' "$work/nocuda.log" || fail "gpu-check without CUDA named no CUDA library: $(tail -20 "$work/nocuda.log")"
grep -q 'no GPU' "$work/gpucheck.log" || fail "gpu-check without a GPU did not say 'no GPU': $(tail -20 "$work/gpucheck.log")"
sed -n '/== summary/,$p' "$work/selftest.log"
echo "gpu_bundle: the bundle ($size MiB packed, glibc >= $(cat "$b/GLIBC_MIN")) runs its self-test with the packages hidden; gpu-check says: $(grep -m1 'no GPU' "$work/gpucheck.log")"
