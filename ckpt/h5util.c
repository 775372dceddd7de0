/*
 * ckpt/h5util.c — HDF5 glue for the checkpoint code.
 *
 * Errors: HDF5's automatic error printing is replaced, for every thread that enters the library (the
 * error stack and the automatic handler are per thread in a thread-safe HDF5), by a silent handler,
 * cause_cb, that HDF5 calls as the failing API call returns. It snapshots the error stack and errno
 * of the FIRST failing call into a per-thread record (the cause) that later HDF5 calls cannot erase:
 * every API call clears the error stack when it is entered, so a successful H5Dclose / H5Sclose /
 * H5Fclose between a failed H5Dwrite and the report used to leave the report without its cause (a
 * disk-full save said "writing .../index.h5: /layout/tensors" and nothing else). ck_h5_err turns the
 * cause (or, without one, the current stack) into one line for an mp_err: the failing API call's
 * description, then the innermost record's (where the cause is: "file write failed ... errno = 28, error
 * message = 'No space left on device'" is shortened to its errno text), after the caller's context
 * (which names file, dataset and tensor); then it forgets both. Code that handles an HDF5 failure
 * itself (probes, optional lookups) calls ck_h5_clear instead, so that no stale cause is reported
 * for a later failure; the entry points of a save and of a read clear it too.
 *
 * Types: f32 and i32 map to the standard little-endian types; bf16 has no predefined HDF5 type, so it
 * is stored as a 16-bit IEEE-style float built from F32LE (sign bit 15, exponent bits 7..14 with bias
 * 127, mantissa bits 0..6): h5dump prints the values and h5py converts them with astype('f4').
 *
 * Property lists: the sec2 driver, file locking disabled (readers are never blocked, and nothing
 * writes a file another process reads before the commit), file format bounds fixed at v110 (object
 * headers with checksums; readable by HDF5 >= 1.10). Writers also aggregate metadata in 1 MiB blocks
 * and align datasets of 1 MiB or more to 4 KiB, so large H5Dwrite calls go to the disk as large
 * aligned writes.
 */
#include "ckpt/ckpt_internal.h"
#include "ckpt/zstd_filter.h"
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static __thread int t_h5_ready;

/* One line's worth of an HDF5 error stack: the record of the API call that failed ("H5Dwrite: can't
 * write data"; empty when the stack holds none, as after some failed closes) and the innermost record
 * (the cause), and how many records the stack held. */
typedef struct {
    char outer[256];
    char inner[512];
    int n;
} walk_ctx;

/* 1 if func names an HDF5 API function (H5Dwrite, H5Pset_virtual: "H5", the package's capitals, then
 * a lower-case letter), not an internal one (H5C_dest, H5F__close_cb, H5FD_sec2_write). */
static int is_api_func(const char *func) {
    if (!func || strncmp(func, "H5", 2) != 0) return 0;
    const char *p = func + 2;
    while (*p >= 'A' && *p <= 'Z') p++;
    return p > func + 2 && *p >= 'a' && *p <= 'z';
}

/* H5Ewalk2 callback (walking downward: outermost first). Keeps the first API record's function and
 * description and the last record's description. Never fails. */
static herr_t walk_cb(unsigned n, const H5E_error2_t *err, void *data) {
    (void)n;
    walk_ctx *c = data;
    const char *d = err->desc ? err->desc : "";
    if (!c->outer[0] && is_api_func(err->func_name)) snprintf(c->outer, sizeof c->outer, "%s: %s", err->func_name, d);
    snprintf(c->inner, sizeof c->inner, "%s", d);
    c->n++;
    return 0;
}

/* The cause of the first HDF5 failure of this thread since the last ck_h5_err / ck_h5_clear:
 * set (0/1), errno as the failing call returned, and its error stack. */
typedef struct {
    int set;
    int eno;
    walk_ctx c;
} h5_cause;

static __thread h5_cause t_cause;

/* HDF5's automatic error handler (H5Eset_auto2), called by HDF5 on this thread as a failing API call
 * returns, with that call's error stack still intact. Snapshots stack and errno into t_cause unless
 * a cause is already held (the first failure is the cause; later ones are mostly consequences, such
 * as a close failing after a write did). Prints nothing; preserves errno. */
static herr_t cause_cb(hid_t estack, void *data) {
    (void)data;
    int eno = errno;
    if (!t_cause.set) {
        memset(&t_cause, 0, sizeof t_cause);
        H5Ewalk2(estack, H5E_WALK_DOWNWARD, walk_cb, &t_cause.c);
        t_cause.eno = eno;
        t_cause.set = 1;
    }
    errno = eno;
    return 0;
}

void ck_h5_init(void) {
    ck_view_bg_wait();   /* HDF5 is used by one thread at a time: a background view write first ends */
    if (t_h5_ready) {
        /* someone (a test helper, another library) may have replaced the handler on this thread */
        H5E_auto2_t fn = NULL;
        void *data = NULL;
        if (H5Eget_auto2(H5E_DEFAULT, &fn, &data) < 0 || fn != cause_cb) H5Eset_auto2(H5E_DEFAULT, cause_cb, NULL);
        return;
    }
    /* HDF5's exit handler closes every file still open. After a write failed (disk full, EFBIG) a
     * rank file can be left half-closed — H5Fclose reports the error but keeps the ID — and closing it
     * again at exit crashes inside HDF5 1.10. Every file we open is closed explicitly, so the handler
     * has nothing to do but that: turn it off (it must precede the first HDF5 call to take effect). */
    H5dont_atexit();
    H5open();
    H5Eset_auto2(H5E_DEFAULT, cause_cb, NULL);
    ckpt_zstd_register();
    memset(&t_cause, 0, sizeof t_cause);
    t_h5_ready = 1;
}

int ck_h5_threadsafe(void) {
    hbool_t ts = 0;
    return H5is_library_threadsafe(&ts) >= 0 && ts;
}

void ck_h5_clear(void) {
    H5Eclear2(H5E_DEFAULT);
    memset(&t_cause, 0, sizeof t_cause);
}

/* Shortens "... errno = 28, error message = 'No space left on device', ..." to "No space left on device
 * (errno 28)", keeping the head before the first ':' ("file write failed: ..."). Leaves s as it is
 * when it carries no errno text. */
static void shorten_inner(char *s, size_t cap) {
    const char *m = strstr(s, "error message = '");
    if (!m) return;
    m += strlen("error message = '");
    const char *q = strchr(m, '\'');
    if (!q) return;
    int eno = -1;
    const char *en = strstr(s, "errno = ");
    if (en) sscanf(en + 8, "%d", &eno);
    char msg[256];
    snprintf(msg, sizeof msg, "%.*s", (int)(q - m), m);
    const char *head_end = strchr(s, ':');
    char head[128] = "";
    if (head_end) snprintf(head, sizeof head, "%.*s: ", (int)(head_end - s), s);
    if (eno >= 0) snprintf(s, cap, "%s%s (errno %d)", head, msg, eno);
    else snprintf(s, cap, "%s%s", head, msg);
}

/* 1 for the errno values that name why a file operation failed on a healthy system (space, quota,
 * size limit, permissions, read-only or failing media): worth adding to a message whose HDF5 stack
 * does not carry them. */
static int io_cause_errno(int eno) {
    return eno == ENOSPC || eno == EDQUOT || eno == EFBIG || eno == EACCES || eno == EPERM || eno == EROFS ||
           eno == EIO || eno == EISDIR;
}

/* The cause of the current HDF5 failure into *c and *eno: the one recorded at the failing call, else
 * the error stack as it stands now (eno 0). */
static void current_cause(walk_ctx *c, int *eno) {
    *c = (walk_ctx){.outer = "", .inner = "", .n = 0};
    *eno = 0;
    if (t_cause.set) {
        *c = t_cause.c;
        *eno = t_cause.eno;
    } else {
        H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, c);
    }
}

int ck_h5_cause_errno(void) {
    walk_ctx c;
    int eno;
    current_cause(&c, &eno);
    const char *en = strstr(c.inner, "errno = ");
    int v = 0;
    if (en && sscanf(en + 8, "%d", &v) == 1 && v > 0) return v;
    return io_cause_errno(eno) ? eno : 0;
}

mp_code ck_h5_err(mp_err *e, mp_code code, const char *fmt, ...) {
    assert(fmt && code != MP_OK);
    walk_ctx c;
    int eno;
    current_cause(&c, &eno);
    ck_h5_clear();
    if (!e) return code;
    char ctx[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    if (c.n == 0) return mp_err_set(e, code, "%s", ctx);
    shorten_inner(c.inner, sizeof c.inner);
    /* the stack of the sec2 driver carries errno's text; where a failing call's stack does not (a
     * cause below HDF5's own records), errno as that call returned names it */
    char extra[160] = "";
    if (io_cause_errno(eno) && !strstr(c.inner, "errno") && !strstr(c.outer, "errno"))
        snprintf(extra, sizeof extra, ": %s (errno %d)", strerror(eno), eno);
    if (!c.outer[0]) return mp_err_set(e, code, "%s: %s%s", ctx, c.inner, extra);
    if (c.n == 1) return mp_err_set(e, code, "%s: %s%s", ctx, c.outer, extra);
    return mp_err_set(e, code, "%s: %s (%s%s)", ctx, c.outer, c.inner, extra);
}

hid_t ck_h5_type(mp_dtype dt) {
    switch (dt) {
    case MP_F32: return H5Tcopy(H5T_IEEE_F32LE);
    case MP_I32: return H5Tcopy(H5T_STD_I32LE);
    case MP_BF16: {
        hid_t t = H5Tcopy(H5T_IEEE_F32LE);
        if (t < 0) return t;
        /* shrink F32LE to its upper 16 bits: move the fields down by 16, then cut the size */
        if (H5Tset_fields(t, 15, 7, 8, 0, 7) < 0 || H5Tset_precision(t, 16) < 0 || H5Tset_offset(t, 0) < 0 ||
            H5Tset_size(t, 2) < 0 || H5Tset_ebias(t, 127) < 0) {
            H5Tclose(t);
            return -1;
        }
        return t;
    }
    }
    return -1;
}

hid_t ck_h5_str_type(size_t n) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, n);
    H5Tset_strpad(t, H5T_STR_NULLPAD);
    H5Tset_cset(t, H5T_CSET_ASCII);
    return t;
}

hid_t ck_h5_dims_type(hid_t base) {
    hsize_t n[1] = {CKPT_MAX_DIMS};
    return H5Tarray_create2(base, 1, n);
}

hid_t ck_h5_fapl(int for_write) {
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    if (p < 0) return p;
    if (H5Pset_fapl_sec2(p) < 0 || H5Pset_file_locking(p, 0, 1) < 0 ||
        H5Pset_libver_bounds(p, H5F_LIBVER_V110, H5F_LIBVER_V110) < 0) {
        H5Pclose(p);
        return -1;
    }
    /* STRONG: closing the file closes whatever is still open in it, also after a failed write */
    if (for_write && (H5Pset_meta_block_size(p, 1 << 20) < 0 || H5Pset_alignment(p, 1 << 20, 4096) < 0 ||
                      H5Pset_fclose_degree(p, H5F_CLOSE_STRONG) < 0)) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

/* A file creation list whose root group, and ck_group_create's groups: links and attributes stay
 * compact, i.e. messages in the object header, which v110 object headers checksum. Dense storage (HDF5's
 * default past 8 links or attributes) keeps them in a fractal heap whose blocks carry no checksum, and
 * libhdf5 1.10 crashes (free() of a wild pointer in H5Literate) on a flipped byte there: the corruption
 * campaign found it. Readers need nothing: compact and dense storage read alike. */
static hid_t h5_compact(hid_t p, int is_file) {
    if (p < 0) return -1;
    if (H5Pset_link_phase_change(p, 65535, 65535) < 0 || (is_file && H5Pset_attr_phase_change(p, 65535, 65535) < 0)) {
        H5Pclose(p);
        return -1;
    }
    return p;
}

hid_t ck_h5_fcpl(void) { return h5_compact(H5Pcreate(H5P_FILE_CREATE), 1); }

hid_t ck_group_create(hid_t loc, const char *name) {
    hid_t gcpl = h5_compact(H5Pcreate(H5P_GROUP_CREATE), 0);
    hid_t g = gcpl < 0 ? -1 : H5Gcreate2(loc, name, H5P_DEFAULT, gcpl, H5P_DEFAULT);
    if (gcpl >= 0) H5Pclose(gcpl);
    return g;
}

herr_t ck_h5_make_parents(hid_t loc, const char *path) {
    char buf[1024];
    size_t n = strlen(path);
    if (n >= sizeof buf) return -1;
    memcpy(buf, path, n + 1);
    for (char *s = strchr(buf + (buf[0] == '/'), '/'); s; s = strchr(s + 1, '/')) {
        *s = 0;
        htri_t there = H5Lexists(loc, buf, H5P_DEFAULT);
        if (there < 0) return -1;
        if (!there) {
            hid_t g = ck_group_create(loc, buf);
            if (g < 0 || H5Gclose(g) < 0) return -1;
        }
        *s = '/';
    }
    return 0;
}

herr_t ck_attr_write_str(hid_t obj, const char *name, const char *s) {
    hid_t t = H5Tcopy(H5T_C_S1);
    size_t n = strlen(s);
    herr_t rc = -1;
    hid_t sp = -1, a = -1;
    if (t < 0) return -1;
    if (H5Tset_size(t, n ? n : 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLPAD) < 0 || H5Tset_cset(t, H5T_CSET_UTF8) < 0)
        goto done;
    if ((sp = H5Screate(H5S_SCALAR)) < 0) goto done;
    if ((a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT)) < 0) goto done;
    char pad[1] = {0};
    rc = H5Awrite(a, t, n ? s : pad);
done:
    if (a >= 0 && H5Aclose(a) < 0) rc = -1;
    if (sp >= 0) H5Sclose(sp);
    H5Tclose(t);
    return rc;
}

/* n < 0: a scalar; otherwise a 1-D array of n. */
static herr_t attr_write_n(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *v, int n) {
    hsize_t dims[1] = {(hsize_t)(n < 0 ? 1 : n)};
    hid_t sp = n < 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, dims, NULL);
    if (sp < 0) return -1;
    hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = -1;
    if (a >= 0) {
        rc = H5Awrite(a, mtype, v);
        if (H5Aclose(a) < 0) rc = -1;
    }
    H5Sclose(sp);
    return rc;
}

herr_t ck_attr_write_i64(hid_t obj, const char *name, const int64_t *v, int n) {
    return attr_write_n(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, v, n);
}

herr_t ck_attr_write_i64s(hid_t obj, const char *name, int64_t v) {
    return attr_write_n(obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &v, -1);
}

herr_t ck_attr_write_u64s(hid_t obj, const char *name, uint64_t v) {
    return attr_write_n(obj, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &v, -1);
}

herr_t ck_attr_read_str(hid_t obj, const char *name, char *buf, size_t cap) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t rc = -1;
    hid_t ft = H5Aget_type(a), mt = -1;
    if (ft < 0 || H5Tget_class(ft) != H5T_STRING || H5Tis_variable_str(ft) > 0) goto done;
    size_t n = H5Tget_size(ft);
    if (n + 1 > cap) goto done;
    mt = H5Tcopy(ft);   /* same character set: HDF5 does not convert between them */
    if (mt < 0 || H5Tset_size(mt, n + 1) < 0 || H5Tset_strpad(mt, H5T_STR_NULLTERM) < 0) goto done;
    rc = H5Aread(a, mt, buf);
    buf[n] = '\0';
done:
    if (mt >= 0) H5Tclose(mt);
    if (ft >= 0) H5Tclose(ft);
    H5Aclose(a);
    return rc;
}

static herr_t attr_read_n(hid_t obj, const char *name, hid_t mtype, void *v, int n) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t rc = -1;
    hid_t sp = H5Aget_space(a);
    if (sp >= 0 && H5Sget_simple_extent_npoints(sp) == n) rc = H5Aread(a, mtype, v);
    if (sp >= 0) H5Sclose(sp);
    H5Aclose(a);
    return rc;
}

herr_t ck_attr_read_i64(hid_t obj, const char *name, int64_t *v, int n) {
    return attr_read_n(obj, name, H5T_NATIVE_INT64, v, n);
}

herr_t ck_attr_read_u64(hid_t obj, const char *name, uint64_t *v, int n) {
    return attr_read_n(obj, name, H5T_NATIVE_UINT64, v, n);
}
