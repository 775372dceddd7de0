/*
 * tests/ckpt/test_ckpt_errors.c — HDF5 failures keep their cause: the cause of the first
 * failing HDF5 call (its error stack and errno) is recorded as the call returns, so the cleanup calls
 * that run before the error is reported (H5Dclose, H5Sclose, H5Fclose, H5Pclose: every API call clears
 * HDF5's error stack when it is entered) can no longer erase it; ck_h5_clear forgets a handled failure;
 * ck_h5_cause_errno tells an operating-system cause from a damaged file. /dev/full gives a real ENOSPC
 * without a small file system (tests/diskfull_sweep.sh sweeps a whole save on a tmpfs).
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <errno.h>
#include <hdf5.h>
#include <string.h>
#include <unistd.h>
#include "ckpt/ckpt_internal.h"

static const char *missing = "/nonexistent-meshpoint-dir/x.h5";

/* A failing H5Fopen (ENOENT in the sec2 driver's record). */
static void fail_open(void) {
    hid_t f = H5Fopen(missing, H5F_ACC_RDONLY, H5P_DEFAULT);
    cr_assert(f < 0, "%s opened", missing);
}

/* Successful HDF5 calls, as the cleanup of a failed operation makes them. */
static void cleanup_calls(void) {
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    cr_assert(p >= 0);
    cr_assert(H5Pclose(p) >= 0);
    hid_t s = H5Screate(H5S_SCALAR);
    cr_assert(s >= 0);
    cr_assert(H5Sclose(s) >= 0);
}

Test(ckpt_errors, cause_survives_cleanup) {
    ck_h5_init();
    ck_h5_clear();
    fail_open();
    cleanup_calls();
    mp_err e;
    cr_assert_eq(ck_h5_err(&e, MP_EIO, "opening %s", missing), MP_EIO);
    cr_assert_eq(e.code, MP_EIO);
    cr_assert(strstr(e.msg, missing), "%s", e.msg);
    cr_assert(strstr(e.msg, "No such file or directory"), "the cause was lost: %s", e.msg);
    cr_assert(strstr(e.msg, "H5Fopen"), "the failing call is not named: %s", e.msg);
}

Test(ckpt_errors, first_failure_is_the_cause) {
    ck_h5_init();
    ck_h5_clear();
    fail_open();
    cr_assert(H5Dopen2(-1, "/x", H5P_DEFAULT) < 0);   /* a later failure, as a close after a failed write */
    mp_err e;
    ck_h5_err(&e, MP_EIO, "context");
    cr_assert(strstr(e.msg, "No such file or directory") && strstr(e.msg, "H5Fopen"), "%s", e.msg);
    cr_assert(!strstr(e.msg, "H5Dopen"), "%s", e.msg);
}

Test(ckpt_errors, reported_or_cleared_causes_are_forgotten) {
    ck_h5_init();
    fail_open();
    mp_err e;
    ck_h5_err(&e, MP_EIO, "first");
    cleanup_calls();
    ck_h5_err(&e, MP_EIO, "second");
    cr_assert_str_eq(e.msg, "second", "a reported cause was reported again: %s", e.msg);
    fail_open();
    ck_h5_clear();
    ck_h5_err(&e, MP_ECHECK, "third");
    cr_assert_str_eq(e.msg, "third", "a cleared cause was reported: %s", e.msg);
    cr_assert_eq(e.code, MP_ECHECK);
}

Test(ckpt_errors, cause_errno) {
    ck_h5_init();
    ck_h5_clear();
    cr_assert_eq(ck_h5_cause_errno(), 0);
    fail_open();
    cleanup_calls();
    cr_assert_eq(ck_h5_cause_errno(), ENOENT);
    ck_h5_clear();
    /* not a file-system cause: an invalid identifier */
    errno = 0;
    cr_assert(H5Dopen2(-1, "/x", H5P_DEFAULT) < 0);
    cr_assert_eq(ck_h5_cause_errno(), 0);
    ck_h5_clear();
}

/* A handler replaced behind our back (tests/testutil.c's tu_h5_open silences HDF5 its own way):
 * ck_h5_init puts the recording one back. */
Test(ckpt_errors, handler_reinstalled) {
    ck_h5_init();
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    ck_h5_init();
    fail_open();
    cleanup_calls();
    mp_err e;
    ck_h5_err(&e, MP_EIO, "x");
    cr_assert(strstr(e.msg, "No such file or directory"), "%s", e.msg);
}

/* A real ENOSPC: every write to /dev/full fails with it. The first failing call (create, write or
 * close, depending on what HDF5 flushes when) names it, after successful cleanup calls. */
Test(ckpt_errors, enospc_from_dev_full) {
    if (access("/dev/full", W_OK) != 0) cr_skip_test("no writable /dev/full");
    ck_h5_init();
    ck_h5_clear();
    hid_t fapl = ck_h5_fapl(1);
    hid_t f = H5Fcreate("/dev/full", H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    herr_t hr = f < 0 ? -1 : 0;
    if (f >= 0) {
        hsize_t n = 1 << 16;
        hid_t sp = H5Screate_simple(1, &n, NULL);
        hid_t d = H5Dcreate2(f, "d", H5T_STD_I32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        static int32_t buf[1 << 16];
        if (d < 0 || H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) hr = -1;
        if (d >= 0 && H5Dclose(d) < 0) hr = -1;
        H5Sclose(sp);
        if (H5Fclose(f) < 0) hr = -1;
    }
    cr_assert(hr < 0, "writing /dev/full succeeded");
    cleanup_calls();
    mp_err e;
    ck_h5_err(&e, MP_EIO, "writing /dev/full");
    cr_assert(strstr(e.msg, "No space left on device"), "the cause was lost: %s", e.msg);
}
