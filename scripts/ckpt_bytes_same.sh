#!/bin/sh
# scripts/ckpt_bytes_same.sh BASE NEW DATA CONFIG WORK — are the checkpoint files two builds write byte
# for byte the same? For a change that must not change what a save writes (a refactor of
# ckpt/writer*.c): BASE is meshpoint built at the previous commit, NEW at the new one. Each trains the same tiny
# model (CONFIG on DATA, 4 steps, a checkpoint every 2) on dp 2 under mpiexec, in four variants: a
# synchronous save, --async-save, --ckpt-files 2 (both ranks' boxes in rank 0's file: ckpt/group.c) and
# --compress zstd; then every file of every checkpoint directory (rank files, index.h5, view.h5, latest)
# is compared with cmp, and the two runs' lists of files must be the same.
#
# Two things in a checkpoint legitimately differ between two runs of the same build, both wall-clock
# times to the second: index.h5's root attribute created_utc (docs/FORMAT.md: informational, not
# checksummed; ckpt/index.c takes it from time(2)), and the access/modification/change times HDF5
# records in the object header of every dataset and group of every file (HDF5's default object time
# tracking; its H5_now() reads gettimeofday(2)), with the checksums of those headers. And one value the
# trainer saves differs: the "mesh" metadata's elapsed_s (the run's wall time, cli/train_ckpt.c), in
# index.h5 and its index_checksum. So both builds run with the clocks fixed by a small LD_PRELOAD shim
# built here: time(), HDF5's gettimeofday() and meshpoint's own clock_gettime() (core/log.c mp_time_s,
# so elapsed_s is 0 and the logged timings are 0). Without it two runs differ in index.h5 always and in
# every file when they write in different seconds (MP_BYTES_REAL_TIME=1 runs without the shim).
#
# Exit 0: every file identical; 1: a difference (each named); 2: usage. Needs mpiexec and cc.
set -eu
[ $# -eq 5 ] || { echo "usage: $0 BASE_MESHPOINT NEW_MESHPOINT DATA CONFIG WORKDIR" >&2; exit 2; }
base=$1; new=$2; data=$3; config=$4; work=$5
for f in "$base" "$new"; do [ -x "$f" ] || { echo "$0: $f is not an executable" >&2; exit 2; }; done
for f in "$data" "$config"; do [ -f "$f" ] || { echo "$0: $f does not exist" >&2; exit 2; }; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
    OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1
rm -rf "$work"; mkdir -p "$work"
preload=
if [ "${MP_BYTES_REAL_TIME:-0}" = 0 ]; then
    # fixed only for the callers in libhdf5 (gettimeofday: their object times), in meshpoint itself
    # (clock_gettime: mp_time_s) and time() (ckpt/index.c's created_utc); the libraries' other calls
    # (MPI, OpenBLAS) get the real clock
    cat > "$work/fixtime.c" <<'END'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#define FIXED 1700000000
static int from_hdf5(void *ret) {
    Dl_info di;
    return dladdr(ret, &di) && di.dli_fname && strstr(di.dli_fname, "hdf5");
}
time_t time(time_t *t) { if (t) *t = FIXED; return FIXED; }
int gettimeofday(struct timeval *tv, void *tz) {
    if (!from_hdf5(__builtin_return_address(0))) {
        int (*real)(struct timeval *, void *) = (int (*)(struct timeval *, void *))dlsym(RTLD_NEXT, "gettimeofday");
        return real(tv, tz);
    }
    if (tv) { tv->tv_sec = FIXED; tv->tv_usec = 0; }
    return 0;
}
int clock_gettime(clockid_t c, struct timespec *ts) {
    Dl_info di;
    void *ret = __builtin_return_address(0);
    if (!dladdr(ret, &di) || !di.dli_fname || strstr(di.dli_fname, ".so")) {
        int (*real)(clockid_t, struct timespec *) = (int (*)(clockid_t, struct timespec *))dlsym(RTLD_NEXT, "clock_gettime");
        return real(c, ts);
    }
    ts->tv_sec = FIXED;   /* meshpoint's own clock (core/log.c mp_time_s): every duration 0 */
    ts->tv_nsec = 0;
    return 0;
}
END
    cc -shared -fPIC -O2 -o "$work/fixtime.so" "$work/fixtime.c" -ldl
    preload="$work/fixtime.so"
fi
run() {   # run BIN TAG VARIANT: trains into WORK/TAG_VARIANT
    bin=$1; dir="$work/$2_$3"
    case $3 in
    sync) extra= ;;
    async) extra=--async-save ;;
    files2) extra="--ckpt-files 2" ;;
    zstd) extra="--compress zstd" ;;
    esac
    # shellcheck disable=SC2086
    if ! LD_PRELOAD=$preload mpiexec -x LD_PRELOAD -np 2 "$bin" train --config "$config" --train-data "$data" \
            --log-every 0 --steps 4 --ckpt-every 2 --dp 2 --run-dir "$dir" $extra >"$dir.log" 2>&1; then
        echo "FAIL: $2 $3: training failed:"; tail -20 "$dir.log"; exit 1
    fi
}
bad=0; nfiles=0
for v in sync async files2 zstd; do
    run "$base" base $v
    run "$new" new $v
    a="$work/base_$v/checkpoints"; b="$work/new_$v/checkpoints"
    # the checkpoints' files: step directories and latest (not the run's job lock .lock, which names a pid)
    (cd "$a" && find . -type f ! -name .lock | sort) > "$work/base_$v.files"
    (cd "$b" && find . -type f ! -name .lock | sort) > "$work/new_$v.files"
    if ! cmp -s "$work/base_$v.files" "$work/new_$v.files"; then
        echo "FAIL: $v: the checkpoints hold different files:"; diff "$work/base_$v.files" "$work/new_$v.files" || true
        bad=1; continue
    fi
    [ -s "$work/base_$v.files" ] || { echo "FAIL: $v: no checkpoint files"; bad=1; continue; }
    while read -r f; do
        nfiles=$((nfiles + 1))
        cmp "$a/$f" "$b/$f" || { echo "FAIL: $v: $f differs"; bad=1; }
    done < "$work/base_$v.files"
    echo "$v: $(wc -l < "$work/base_$v.files") files compared ($(cd "$a" && ls -d step_* | tr '\n' ' '))"
done
[ $bad -eq 0 ] || exit 1
echo "ckpt_bytes_same: all $nfiles checkpoint files byte-identical (sync, async, --ckpt-files 2, zstd; dp 2)"
