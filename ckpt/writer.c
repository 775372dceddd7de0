/*
 * ckpt/writer.c — saving a checkpoint: rank files, the collective commit, async writing.
 *
 * A save is a ckpt_save. ckpt_save_add only records boxes (pointer, no copy); the rank file is written
 * either by ckpt_save_commit on the caller's thread, or by a background pthread started with
 * ckpt_save_start. Every MPI-bound step (agreement, layout exchange) runs on the caller's thread, so
 * the communicator never sees a second thread (no MPI_THREAD_MULTIPLE needed).
 *
 * Rank file (ROOT/step_N.partial/rank_%05d.h5): one dataset per box at /<tensor name>/box_<k>, k
 * counting this rank's boxes of that tensor. Uncompressed boxes are CONTIGUOUS datasets written by
 * one H5Dwrite straight from the caller's buffer (file type = memory type: no conversion, no copy,
 * no fill). With zstd they are chunked (slab_rows x the box's other dims), shuffle then zstd 32015.
 * Before writing, each box is hashed in one pass: XXH3-64 of every slab (slab_rows rows of dim 0)
 * and, streaming over the same bytes, of the whole box.
 *
 * Commit (every rank, caller's thread):
 *   1. agree: all_reduce(max) of (size - rank) over failing ranks; the lowest failing rank then
 *      broadcasts its error, so every rank returns the same message. On failure rank 0 removes
 *      step_N.partial (all rank files are closed by then).
 *   2. exchange: each rank's box list (names, shapes, checksums) goes to rank 0 by one broadcast per
 *      rank (the lengths first, by an all_reduce of a vector with one slot per rank).
 *   3. rank 0: builds the layout, checks names and exact coverage, writes and fsyncs index.h5,
 *      renames step_N.partial -> step_N, fsyncs ROOT, replaces ROOT/latest durably, applies retention.
 *   4. agree again on rank 0's result.
 * Earlier checkpoints are never touched (only retention, after a successful commit, removes them).
 */
#define _GNU_SOURCE
#include "ckpt/ckpt_internal.h"
#include "ckpt/zstd_filter.h"
#include "core/alloc.h"
#include "core/log.h"
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

typedef struct wbox {
    char *name;
    mp_dtype dt;
    int ndim;
    int rank;                       /* writer (filled on rank 0 for received boxes) */
    int64_t gshape[CKPT_MAX_DIMS], off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
    const void *data;
    char dataset[CK_DSET_MAX];
    uint64_t checksum;
    int64_t slab_rows, nslabs;
    uint64_t *slabs;
} wbox;

enum { ST_OPEN = 0, ST_STARTED, ST_DONE };

struct ckpt_save {
    mp_comm *world;
    int rank, size;
    char *root, *dirname, *final, *partial;
    int64_t step;
    ckpt_save_opts o;
    wbox *b;
    int nb, capb;
    char **keys, **vals;
    int nmeta;
    mp_code lrc;                    /* first local error (add/meta/write) */
    mp_err lerr;
    int state;
    pthread_t th;
    int thread_live;
    atomic_int written;             /* the rank file is written (or failed) */
    mp_code wrc;
    mp_err werr;
    ckpt_stats st;
    mp_code frc;                    /* final result, once ST_DONE */
    mp_err ferr;
};

static pthread_mutex_t g_inflight_mu = PTHREAD_MUTEX_INITIALIZER;
static ckpt_save *g_inflight;       /* a started, uncommitted async save of this process */

static void set_inflight(ckpt_save *s, ckpt_save *expect) {
    pthread_mutex_lock(&g_inflight_mu);
    if (!expect || g_inflight == expect) g_inflight = s;
    pthread_mutex_unlock(&g_inflight_mu);
}

static ckpt_save *get_inflight(void) {
    pthread_mutex_lock(&g_inflight_mu);
    ckpt_save *s = g_inflight;
    pthread_mutex_unlock(&g_inflight_mu);
    return s;
}

/* Remembers the first local error. */
static mp_code remember(ckpt_save *s, mp_code rc, const mp_err *e) {
    if (rc != MP_OK && s->lrc == MP_OK) {
        s->lrc = rc;
        if (e) s->lerr = *e;
        else mp_err_set(&s->lerr, rc, "%s", mp_code_name(rc));
    }
    return rc;
}

/* Collective failure agreement (see the top of the file). rc/le: this rank's result. */
static mp_code agree(mp_comm *w, mp_code rc, const mp_err *le, mp_err *e) {
    float v = rc != MP_OK ? (float)(w->size - w->rank) : 0.0f;
    w->all_reduce(w, &v, 1, 1);
    if (v == 0.0f) return MP_OK;
    int src = w->size - (int)v;
    struct { int32_t code; char msg[MP_ERR_MSG_MAX]; } m;
    memset(&m, 0, sizeof m);
    if (w->rank == src) {
        m.code = (int32_t)rc;
        snprintf(m.msg, sizeof m.msg, "%s", le ? le->msg : mp_code_name(rc));
    }
    w->broadcast(w, &m, sizeof m, src);
    m.msg[sizeof m.msg - 1] = '\0';
    if (w->size > 1) return mp_err_set(e, (mp_code)m.code, "rank %d: %s", src, m.msg);
    return mp_err_set(e, (mp_code)m.code, "%s", m.msg);
}

/* ------------------------------------------------------------------------------------- begin */

static mp_code prepare_dir(ckpt_save *s, mp_err *e) {
    MP_TRY(ck_mkdirs(s->root, e));
    if (ck_exists(s->final))
        return mp_err_set(e, MP_EINPUT, "checkpoint %s already exists (step %lld was saved before)", s->final,
                          (long long)s->step);
    if (ck_exists(s->partial)) {
        mp_warn("ckpt: removing stale %s of an interrupted save", s->partial);
        MP_TRY(ck_rmtree(s->partial, e));
    }
    if (mkdir(s->partial, 0777) != 0)
        return mp_err_set(e, MP_EIO, "creating %s: %s", s->partial, strerror(errno));
    return ck_fsync_path(s->root, 1, e);
}

mp_code ckpt_save_begin(ckpt_save **out, mp_comm *world, const char *root, int64_t step,
                        const ckpt_save_opts *opts, mp_err *e) {
    assert(out && world);
    *out = NULL;
    double t0 = ck_now();
    ck_h5_init();
    double wait_prev = 0;
    ckpt_save *prev = get_inflight();
    if (prev) {
        mp_err pe;
        ckpt_save_wait(prev, NULL, &pe);   /* its result stays with its handle */
        wait_prev = ck_now() - t0;
    }
    mp_code lrc = MP_OK;
    mp_err le;
    mp_err_clear(&le);
    if (!root || !*root) lrc = mp_err_set(&le, MP_EINPUT, "checkpoint root directory is empty");
    else if (step < 0) lrc = mp_err_set(&le, MP_EINPUT, "checkpoint step %lld is negative", (long long)step);
    else if (opts && (opts->zstd_level < 0 || opts->zstd_level > 22))
        lrc = mp_err_set(&le, MP_EINPUT, "zstd level %d out of range 0..22", opts->zstd_level);
    ckpt_save *s = mp_xcalloc(sizeof *s);
    s->world = world;
    s->rank = world->rank;
    s->size = world->size;
    s->step = step;
    if (opts) s->o = *opts;
    s->root = ck_fmt("%s", root ? root : "");
    s->dirname = ck_fmt("step_%08lld", (long long)step);
    s->final = ck_fmt("%s/%s", s->root, s->dirname);
    s->partial = ck_fmt("%s.partial", s->final);
    atomic_init(&s->written, 0);
    if (lrc == MP_OK && s->rank == 0) lrc = prepare_dir(s, &le);
    mp_code rc = agree(world, lrc, &le, e);
    if (rc != MP_OK) {
        mp_err_wrap(e, "saving checkpoint step %lld in %s", (long long)step, s->root);
        ckpt_save_free(s);
        return rc;
    }
    ck_crash_point("begin", s->rank);
    s->st.wait_prev_s = wait_prev;
    s->st.stall_s = ck_now() - t0;
    *out = s;
    return MP_OK;
}

const char *ckpt_save_dir(const ckpt_save *s) { return s->final; }

/* --------------------------------------------------------------------------------- add / meta */

mp_code ckpt_save_add(ckpt_save *s, const char *name, mp_dtype dt, int ndim, const int64_t *gshape,
                      const int64_t *offset, const int64_t *shape, const void *data, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    mp_err le;
    mp_code rc = MP_OK;
    if (s->state != ST_OPEN) {
        rc = mp_err_set(&le, MP_EINTERNAL, "ckpt_save_add after the save was started or committed");
        goto out;
    }
    if ((rc = ck_check_name(name, &le)) != MP_OK) goto out;
    if (dt != MP_F32 && dt != MP_BF16 && dt != MP_I32) {
        rc = mp_err_set(&le, MP_EINPUT, "tensor %s: unsupported dtype %d", name, (int)dt);
        goto out;
    }
    if (ndim < 1 || ndim > CKPT_MAX_DIMS) {
        rc = mp_err_set(&le, MP_EINPUT, "tensor %s: ndim %d not in 1..%d", name, ndim, CKPT_MAX_DIMS);
        goto out;
    }
    if (!gshape || !offset || !shape || !data) {
        rc = mp_err_set(&le, MP_EINPUT, "tensor %s: NULL shape, offset or data", name);
        goto out;
    }
    for (int d = 0; d < ndim; d++) {
        if (gshape[d] <= 0 || shape[d] <= 0 || offset[d] < 0 || offset[d] + shape[d] > gshape[d]) {
            char bs[256], gs[256];
            int64_t z[CKPT_MAX_DIMS] = {0};
            ck_box_str(bs, sizeof bs, ndim, offset, shape);
            ck_box_str(gs, sizeof gs, ndim, z, gshape);
            rc = mp_err_set(&le, MP_EINPUT, "tensor %s: box %s is empty or outside the tensor %s", name, bs, gs);
            goto out;
        }
    }
    int k = 0;
    for (int i = 0; i < s->nb; i++) {
        if (strcmp(s->b[i].name, name) != 0) continue;
        k++;
        int same = s->b[i].dt == dt && s->b[i].ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = s->b[i].gshape[d] == gshape[d];
        if (!same) {
            rc = mp_err_set(&le, MP_EINPUT, "tensor %s: added again with a different dtype or global shape", name);
            goto out;
        }
    }
    if (s->nb == s->capb) {
        s->capb = s->capb * 2 + 16;
        s->b = realloc(s->b, sizeof *s->b * (size_t)s->capb);
        if (!s->b) abort();
    }
    wbox *B = &s->b[s->nb++];
    memset(B, 0, sizeof *B);
    B->name = mp_strdup(name);
    B->dt = dt;
    B->ndim = ndim;
    B->rank = s->rank;
    for (int d = 0; d < CKPT_MAX_DIMS; d++) {
        B->gshape[d] = d < ndim ? gshape[d] : 1;
        B->off[d] = d < ndim ? offset[d] : 0;
        B->shp[d] = d < ndim ? shape[d] : 1;
    }
    B->data = data;
    snprintf(B->dataset, sizeof B->dataset, "/%s/box_%d", name, k);
out:
    s->st.stall_s += ck_now() - t0;
    if (rc != MP_OK) {
        remember(s, rc, &le);
        if (e) *e = le;
    }
    return rc;
}

mp_code ckpt_save_meta(ckpt_save *s, const char *key, const char *value, mp_err *e) {
    mp_err le;
    mp_code rc = ck_check_key(key, &le);
    if (rc == MP_OK && !value) rc = mp_err_set(&le, MP_EINPUT, "metadata %s: NULL value", key);
    if (rc != MP_OK) {
        remember(s, rc, &le);
        if (e) *e = le;
        return rc;
    }
    for (int i = 0; i < s->nmeta; i++)
        if (!strcmp(s->keys[i], key)) {
            free(s->vals[i]);
            s->vals[i] = mp_strdup(value);
            return MP_OK;
        }
    s->keys = realloc(s->keys, sizeof(char *) * (size_t)(s->nmeta + 1));
    s->vals = realloc(s->vals, sizeof(char *) * (size_t)(s->nmeta + 1));
    if (!s->keys || !s->vals) abort();
    s->keys[s->nmeta] = mp_strdup(key);
    s->vals[s->nmeta] = mp_strdup(value);
    s->nmeta++;
    return MP_OK;
}

/* ------------------------------------------------------------------------------- rank file */

/* Hashes box B's data: slab checksums into B->slabs and the whole-box checksum. */
static void hash_box(wbox *B) {
    size_t es = mp_dtype_size(B->dt);
    int64_t row = (int64_t)es * ck_volume(B->ndim - 1, B->shp + 1);
    int64_t rows = B->shp[0];
    B->slab_rows = ck_slab_rows(rows, row);
    B->nslabs = (rows + B->slab_rows - 1) / B->slab_rows;
    free(B->slabs);
    B->slabs = mp_xmalloc(sizeof(uint64_t) * (size_t)B->nslabs);
    XXH3_state_t *st = XXH3_createState();
    if (!st) abort();
    XXH3_64bits_reset(st);
    const char *p = B->data;
    for (int64_t k = 0; k < B->nslabs; k++) {
        int64_t r0 = k * B->slab_rows, r1 = r0 + B->slab_rows < rows ? r0 + B->slab_rows : rows;
        size_t n = (size_t)((r1 - r0) * row);
        B->slabs[k] = XXH3_64bits(p + (size_t)(r0 * row), n);
        XXH3_64bits_update(st, p + (size_t)(r0 * row), n);
    }
    B->checksum = XXH3_64bits_digest(st);
    XXH3_freeState(st);
}

/* Writes box B as a dataset of file f. */
static mp_code write_box(ckpt_save *s, hid_t f, hid_t lcpl, wbox *B, const char *path, mp_err *e) {
    hash_box(B);
    hsize_t dims[CKPT_MAX_DIMS], chunk[CKPT_MAX_DIMS];
    for (int d = 0; d < B->ndim; d++) { dims[d] = (hsize_t)B->shp[d]; chunk[d] = dims[d]; }
    chunk[0] = (hsize_t)B->slab_rows;
    hid_t ft = ck_h5_type(B->dt);
    hid_t sp = H5Screate_simple(B->ndim, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hid_t d = -1;
    mp_code rc = MP_OK;
    herr_t hr = (ft < 0 || sp < 0 || dcpl < 0) ? -1 : 0;
    if (hr >= 0) hr = H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    if (hr >= 0 && s->o.zstd_level > 0) {
        double cbytes = (double)mp_dtype_size(B->dt) * (double)ck_volume(B->ndim, B->shp) / (double)B->shp[0] *
                        (double)B->slab_rows;
        if (cbytes >= 4294967295.0) {
            rc = mp_err_set(e, MP_EINPUT, "writing %s: tensor %s: a row of %.0f bytes is too large for a chunk",
                            path, B->name, cbytes);
            goto done;
        }
        unsigned lvl = (unsigned)s->o.zstd_level;
        hr = H5Pset_chunk(dcpl, B->ndim, chunk);
        if (hr >= 0) hr = H5Pset_shuffle(dcpl);
        if (hr >= 0) hr = H5Pset_filter(dcpl, CKPT_ZSTD_FILTER_ID, H5Z_FLAG_MANDATORY, 1, &lvl);
    } else if (hr >= 0) {
        hr = H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    }
    if (hr < 0) { rc = ck_h5_err(e, MP_EIO, "writing %s: dataset %s: creation properties", path, B->dataset); goto done; }
    d = H5Dcreate2(f, B->dataset, ft, sp, lcpl, dcpl, H5P_DEFAULT);
    if (d < 0) { rc = ck_h5_err(e, MP_EIO, "writing %s: creating dataset %s", path, B->dataset); goto done; }
    if (H5Dwrite(d, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, B->data) < 0) {
        rc = ck_h5_err(e, MP_EIO, "writing %s: dataset %s (tensor %s)", path, B->dataset, B->name);
        goto done;
    }
    hr = ck_attr_write_str(d, "tensor", B->name);
    if (hr >= 0) hr = ck_attr_write_str(d, "dtype", mp_dtype_name(B->dt));
    if (hr >= 0) hr = ck_attr_write_i64(d, "global_offset", B->off, B->ndim);
    if (hr >= 0) hr = ck_attr_write_i64(d, "global_shape", B->gshape, B->ndim);
    if (hr >= 0) hr = ck_attr_write_u64s(d, "checksum", B->checksum);
    if (hr >= 0) hr = ck_attr_write_i64s(d, "slab_rows", B->slab_rows);
    if (hr >= 0) hr = ck_attr_write_u64(d, "slab_checksums", B->slabs, (int)B->nslabs);
    if (hr < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: attributes of dataset %s", path, B->dataset);
done:
    if (d >= 0 && H5Dclose(d) < 0 && rc == MP_OK)
        rc = ck_h5_err(e, MP_EIO, "writing %s: closing dataset %s", path, B->dataset);
    if (dcpl >= 0) H5Pclose(dcpl);
    if (sp >= 0) H5Sclose(sp);
    if (ft >= 0) H5Tclose(ft);
    return rc;
}

/* Writes, closes and fsyncs this rank's file (nothing if it has no boxes). Any thread. */
static mp_code write_rank_file(ckpt_save *s, mp_err *e) {
    double t0 = ck_now();
    ck_h5_init();
    if (s->nb == 0) return MP_OK;
    char *path = ck_fmt("%s/rank_%05d.h5", s->partial, s->rank);
    mp_code rc = MP_OK;
    hid_t fapl = ck_h5_fapl(1);
    hid_t f = fapl < 0 ? -1 : H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    if (fapl >= 0) H5Pclose(fapl);
    if (f < 0) {
        rc = ck_h5_err(e, MP_EIO, "creating %s", path);
        free(path);
        return rc;
    }
    herr_t hr = ck_attr_write_str(f, "format", CK_RANK_FORMAT_NAME);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "format_version", CKPT_FORMAT_VERSION);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "rank", s->rank);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "world_size", s->size);
    if (hr >= 0) hr = ck_attr_write_i64s(f, "step", s->step);
    if (hr < 0) rc = ck_h5_err(e, MP_EIO, "writing %s: root attributes", path);
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    int64_t bytes = 0;
    /* The disk should work while the next box is hashed: after each box, start writeback of what is
     * written so far (sync_file_range does not wait); the fsync at the end then only waits for the
     * tail. Without it the page cache holds everything until that fsync and hashing never overlaps
     * with I/O (docs/BENCH_CKPT.md). */
    int *fdp = NULL;
    if (H5Fget_vfd_handle(f, H5P_DEFAULT, (void **)&fdp) < 0) fdp = NULL;
    for (int i = 0; i < s->nb && rc == MP_OK; i++) {
        rc = write_box(s, f, lcpl, &s->b[i], path, e);
        if (rc == MP_OK && fdp) sync_file_range(*fdp, 0, 0, SYNC_FILE_RANGE_WRITE);
        bytes += (int64_t)mp_dtype_size(s->b[i].dt) * ck_volume(s->b[i].ndim, s->b[i].shp);
        if (i == 0) ck_crash_point("during_rank_files", s->rank);
    }
    H5Pclose(lcpl);
    if (H5Fclose(f) < 0 && rc == MP_OK) rc = ck_h5_err(e, MP_EIO, "closing %s", path);
    H5Eclear2(H5E_DEFAULT);
    if (rc == MP_OK) rc = ck_fsync_path(path, 0, e);
    if (rc == MP_OK) rc = ck_fsync_path(s->partial, 1, e);
    struct stat st;
    if (rc == MP_OK && stat(path, &st) == 0) s->st.file_bytes = (int64_t)st.st_size;
    s->st.bytes = bytes;
    free(path);
    s->st.write_s = ck_now() - t0;
    return rc;
}

/* ---------------------------------------------------------------------------------- exchange */

typedef struct { char *p; size_t n, cap; } buf_t;

static void put(buf_t *b, const void *v, size_t n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->n, v, n);
    b->n += n;
}

static void put_i64(buf_t *b, int64_t v) { put(b, &v, sizeof v); }
static void put_str(buf_t *b, const char *s) { int64_t n = (int64_t)strlen(s); put_i64(b, n); put(b, s, (size_t)n); }

static void serialize(const ckpt_save *s, buf_t *b) {
    put_i64(b, s->nb);
    for (int i = 0; i < s->nb; i++) {
        const wbox *B = &s->b[i];
        put_str(b, B->name);
        put_str(b, B->dataset);
        put_i64(b, B->dt);
        put_i64(b, B->ndim);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) put_i64(b, B->gshape[d]);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) put_i64(b, B->off[d]);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) put_i64(b, B->shp[d]);
        put_i64(b, (int64_t)B->checksum);
        put_i64(b, B->slab_rows);
        put_i64(b, B->nslabs);
        put(b, B->slabs, sizeof(uint64_t) * (size_t)B->nslabs);
    }
}

typedef struct { const char *p; size_t n, at; int bad; } rd_t;

static void get(rd_t *r, void *v, size_t n) {
    if (r->bad || r->at + n > r->n) { r->bad = 1; memset(v, 0, n); return; }
    memcpy(v, r->p + r->at, n);
    r->at += n;
}

static int64_t get_i64(rd_t *r) { int64_t v; get(r, &v, sizeof v); return v; }

static char *get_str(rd_t *r) {
    int64_t n = get_i64(r);
    if (r->bad || n < 0 || (size_t)n > r->n - r->at) { r->bad = 1; return mp_strdup(""); }
    char *s = mp_xmalloc((size_t)n + 1);
    get(r, s, (size_t)n);
    s[n] = '\0';
    return s;
}

/* Appends the boxes of rank `rank` from its serialized list to *all. Returns 0 on a malformed list. */
static int deserialize(const char *p, size_t n, int rank, wbox **all, int *nall, int *cap) {
    rd_t r = {p, n, 0, 0};
    int64_t nb = get_i64(&r);
    for (int64_t i = 0; i < nb && !r.bad; i++) {
        if (*nall == *cap) {
            *cap = *cap * 2 + 64;
            *all = realloc(*all, sizeof **all * (size_t)*cap);
            if (!*all) abort();
        }
        wbox *B = &(*all)[(*nall)++];
        memset(B, 0, sizeof *B);
        B->name = get_str(&r);
        char *ds = get_str(&r);
        snprintf(B->dataset, sizeof B->dataset, "%s", ds);
        free(ds);
        B->dt = (mp_dtype)get_i64(&r);
        B->ndim = (int)get_i64(&r);
        B->rank = rank;
        for (int d = 0; d < CKPT_MAX_DIMS; d++) B->gshape[d] = get_i64(&r);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) B->off[d] = get_i64(&r);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) B->shp[d] = get_i64(&r);
        B->checksum = (uint64_t)get_i64(&r);
        B->slab_rows = get_i64(&r);
        B->nslabs = get_i64(&r);
        if (B->nslabs < 0 || (size_t)B->nslabs > (r.n - r.at) / sizeof(uint64_t)) { r.bad = 1; break; }
        B->slabs = mp_xmalloc(sizeof(uint64_t) * (size_t)(B->nslabs + 1));
        get(&r, B->slabs, sizeof(uint64_t) * (size_t)B->nslabs);
    }
    return !r.bad && r.at == r.n;
}

/* Every rank's box list to every rank (rank 0 keeps them): lengths by an all_reduce of 2 floats per
 * rank (24-bit halves, exact in a float), then one broadcast per rank with boxes. */
static void exchange(ckpt_save *s, wbox **all, int *nall, int *bad_rank) {
    mp_comm *w = s->world;
    buf_t mine = {0};
    serialize(s, &mine);
    float *len = mp_xcalloc(sizeof(float) * 2 * (size_t)w->size);
    len[2 * w->rank] = (float)(mine.n >> 24);
    len[2 * w->rank + 1] = (float)(mine.n & 0xffffff);
    w->all_reduce(w, len, 2 * (int64_t)w->size, 0);
    int cap = 0;
    *nall = 0;
    *all = NULL;
    *bad_rank = -1;
    for (int r = 0; r < w->size; r++) {
        size_t n = ((size_t)len[2 * r] << 24) | (size_t)len[2 * r + 1];
        char *buf = r == w->rank ? mine.p : mp_xmalloc(n ? n : 1);
        w->broadcast(w, buf, n, r);
        if (w->rank == 0 && !deserialize(buf, n, r, all, nall, &cap) && *bad_rank < 0) *bad_rank = r;
        if (r != w->rank) free(buf);
    }
    free(len);
    free(mine.p);
}

/* ------------------------------------------------------------------------------- rank 0 */

static int cmp_wbox(const void *a, const void *b) {
    const wbox *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        if (x->off[d] != y->off[d]) return x->off[d] < y->off[d] ? -1 : 1;
    return x->rank - y->rank;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Builds the layout from all boxes (sorted here) and rank 0's metadata; checks it. */
static mp_code build_layout(ckpt_save *s, wbox *all, int nall, ck_layout *L, mp_err *e) {
    memset(L, 0, sizeof *L);
    if (nall > 1) qsort(all, (size_t)nall, sizeof *all, cmp_wbox);
    L->step = s->step;
    L->world = s->size;
    L->zstd_level = s->o.zstd_level;
    /* files: ranks that wrote boxes */
    int *file_of = mp_xmalloc(sizeof(int) * (size_t)s->size);
    for (int r = 0; r < s->size; r++) file_of[r] = -1;
    for (int i = 0; i < nall; i++) file_of[all[i].rank] = 0;
    L->f = mp_xcalloc(sizeof *L->f * (size_t)(s->size + 1));
    for (int r = 0; r < s->size; r++)
        if (file_of[r] == 0) {
            file_of[r] = L->nfiles;
            ck_file *F = &L->f[L->nfiles++];
            F->rank = r;
            snprintf(F->name, sizeof F->name, "rank_%05d.h5", r);
        }
    L->t = mp_xcalloc(sizeof *L->t * (size_t)(nall + 1));
    L->b = mp_xcalloc(sizeof *L->b * (size_t)(nall + 1));
    L->nboxes = nall;
    for (int i = 0; i < nall; i++) L->nslabs += all[i].nslabs;
    L->slabs = mp_xmalloc(sizeof(uint64_t) * (size_t)(L->nslabs + 1));
    int64_t at = 0;
    mp_code rc = MP_OK;
    for (int i = 0; i < nall && rc == MP_OK; i++) {
        const wbox *W = &all[i];
        if (i == 0 || strcmp(W->name, all[i - 1].name) != 0) {
            ck_tensor *T = &L->t[L->ntensors++];
            snprintf(T->name, sizeof T->name, "%s", W->name);
            T->dtype = W->dt;
            T->ndim = W->ndim;
            memcpy(T->shape, W->gshape, sizeof T->shape);
            T->box_first = i;
        } else {
            const wbox *P = &all[i - 1];
            int same = P->dt == W->dt && P->ndim == W->ndim;
            for (int d = 0; same && d < CKPT_MAX_DIMS; d++) same = P->gshape[d] == W->gshape[d];
            if (!same) {
                char a[256], b[256];
                int64_t z[CKPT_MAX_DIMS] = {0};
                ck_box_str(a, sizeof a, P->ndim, z, P->gshape);
                ck_box_str(b, sizeof b, W->ndim, z, W->gshape);
                rc = mp_err_set(e, MP_EINPUT, "tensor %s: rank %d writes it as %s %s, rank %d as %s %s", W->name,
                                P->rank, mp_dtype_name(P->dt), a, W->rank, mp_dtype_name(W->dt), b);
                break;
            }
        }
        ck_tensor *T = &L->t[L->ntensors - 1];
        T->nboxes++;
        ck_box *B = &L->b[i];
        B->tensor = L->ntensors - 1;
        B->file = file_of[W->rank];
        snprintf(B->dataset, sizeof B->dataset, "%s", W->dataset);
        memcpy(B->off, W->off, sizeof B->off);
        memcpy(B->shp, W->shp, sizeof B->shp);
        B->checksum = W->checksum;
        B->slab_rows = W->slab_rows;
        B->nslabs = W->nslabs;
        B->slab_first = at;
        memcpy(L->slabs + at, W->slabs, sizeof(uint64_t) * (size_t)W->nslabs);
        at += W->nslabs;
        L->f[B->file].nboxes++;
        L->f[B->file].bytes += (int64_t)mp_dtype_size(W->dt) * ck_volume(W->ndim, W->shp);
    }
    free(file_of);
    /* metadata, sorted by key */
    L->keys = mp_xmalloc(sizeof(char *) * (size_t)(s->nmeta + 1));
    L->vals = mp_xmalloc(sizeof(char *) * (size_t)(s->nmeta + 1));
    {
        char **pairs = mp_xmalloc(sizeof(char *) * 2 * (size_t)(s->nmeta + 1));
        for (int i = 0; i < s->nmeta; i++) { pairs[2 * i] = s->keys[i]; pairs[2 * i + 1] = s->vals[i]; }
        qsort(pairs, (size_t)s->nmeta, 2 * sizeof(char *), cmp_cstr);
        for (int i = 0; i < s->nmeta; i++) {
            L->keys[i] = mp_strdup(pairs[2 * i]);
            L->vals[i] = mp_strdup(pairs[2 * i + 1]);
        }
        L->nmeta = s->nmeta;
        free(pairs);
    }
    if (rc != MP_OK) return rc;
    /* a name may not be a '/'-prefix of another: view/<a> cannot be a dataset and a group */
    for (int i = 0; i < L->ntensors; i++) {
        char pre[CKPT_NAME_MAX + 2];
        snprintf(pre, sizeof pre, "%s/", L->t[i].name);
        size_t n = strlen(pre);
        int lo = i + 1, hi = L->ntensors;
        while (lo < hi) {
            int m = lo + (hi - lo) / 2;
            if (strcmp(L->t[m].name, pre) < 0) lo = m + 1; else hi = m;
        }
        if (lo < L->ntensors && strncmp(L->t[lo].name, pre, n) == 0)
            return mp_err_set(e, MP_EINPUT, "tensor names %s and %s: a name may not be a '/'-prefix of another",
                              L->t[i].name, L->t[lo].name);
    }
    ck_layout_index(L);
    if (!s->o.unchecked_coverage)
        for (int t = 0; t < L->ntensors; t++) MP_TRY(ck_layout_check_tensor(L, t, 1, e));
    return MP_OK;
}

/* Rank 0's part of the commit after the exchange. */
static mp_code commit_rank0(ckpt_save *s, wbox *all, int nall, mp_err *e) {
    ck_layout L;
    mp_code rc = build_layout(s, all, nall, &L, e);
    int renamed = 0;
    if (rc == MP_OK) {
        ck_crash_point("before_index", s->rank);
        char *ip = ck_fmt("%s/index.h5", s->partial);
        rc = ck_index_write(&L, ip, e);
        free(ip);
    }
    ck_layout_free(&L);
    if (rc == MP_OK) {
        ck_crash_point("after_index", s->rank);
        rc = ck_rename_durable(s->partial, s->final, s->root, e);
        renamed = rc == MP_OK;
    }
    if (rc == MP_OK) {
        ck_crash_point("after_rename", s->rank);
        char *txt = ck_fmt("%s\n", s->dirname);
        rc = ck_write_text_durable(s->root, "latest", txt, e);
        free(txt);
        if (rc != MP_OK) mp_err_wrap(e, "checkpoint %s is complete, but updating %s/latest failed", s->final, s->root);
    }
    if (rc == MP_OK) {
        ck_crash_point("after_latest", s->rank);
        if (s->o.keep > 0) {
            mp_err re;
            int removed = 0;
            if (ckpt_retain(s->root, s->o.keep, &removed, &re) != MP_OK)
                mp_warn("ckpt: retention (keep %d) in %s failed: %s", s->o.keep, s->root, re.msg);
        }
    }
    if (rc != MP_OK && !renamed) {
        mp_err ce;
        if (ck_rmtree(s->partial, &ce) != MP_OK) mp_warn("ckpt: %s", ce.msg);
    }
    return rc;
}

/* Frees box records (names and slab checksums; never the data, which the caller owns). */
static void free_boxes(wbox *b, int n) {
    for (int i = 0; i < n; i++) {
        free(b[i].name);
        free(b[i].slabs);
    }
    free(b);
}

/* The collective commit (after this rank's file is written or failed). Sets the final result. */
static mp_code commit(ckpt_save *s, mp_err *e) {
    double t0 = ck_now();
    mp_comm *w = s->world;
    mp_code rc = agree(w, s->lrc, &s->lerr, e);
    if (rc != MP_OK) {
        if (s->rank == 0) {
            mp_err ce;
            if (ck_rmtree(s->partial, &ce) != MP_OK) mp_warn("ckpt: %s", ce.msg);
        }
    } else {
        ck_crash_point("after_rank_files", s->rank);
        wbox *all = NULL;
        int nall = 0, bad = -1;
        exchange(s, &all, &nall, &bad);
        mp_code r0 = MP_OK;
        mp_err e0;
        if (s->rank == 0) {
            if (bad >= 0) {
                r0 = mp_err_set(&e0, MP_EINTERNAL, "malformed box list from rank %d", bad);
                mp_err ce;
                ck_rmtree(s->partial, &ce);
            } else {
                r0 = commit_rank0(s, all, nall, &e0);
            }
        }
        free_boxes(all, nall);
        rc = agree(w, r0, &e0, e);
    }
    if (rc != MP_OK) mp_err_wrap(e, "saving checkpoint step %lld in %s", (long long)s->step, s->root);
    s->st.commit_s = ck_now() - t0;
    s->frc = rc;
    if (rc != MP_OK && e) s->ferr = *e;
    else mp_err_clear(&s->ferr);
    s->state = ST_DONE;
    set_inflight(NULL, s);
    return rc;
}

/* --------------------------------------------------------------------------------- public */

mp_code ckpt_save_commit(ckpt_save *s, ckpt_stats *st, mp_err *e) {
    assert(s);
    if (s->state != ST_OPEN) return ckpt_save_wait(s, st, e);
    double t0 = ck_now();
    mp_err we;
    if (s->lrc == MP_OK) {
        mp_code rc = write_rank_file(s, &we);
        remember(s, rc, &we);
    }
    mp_code rc = commit(s, e);
    s->st.stall_s += ck_now() - t0;
    if (st) *st = s->st;
    return rc;
}

static void *writer_main(void *arg) {
    ckpt_save *s = arg;
    mp_err_clear(&s->werr);
    s->wrc = write_rank_file(s, &s->werr);
    atomic_store(&s->written, 1);
    return NULL;
}

mp_code ckpt_save_start(ckpt_save *s, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    if (s->state != ST_OPEN) return mp_err_set(e, MP_EINTERNAL, "ckpt_save_start: save already started");
    s->state = ST_STARTED;
    if (s->lrc != MP_OK) {
        atomic_store(&s->written, 1);   /* nothing to write: the commit reports the error */
    } else if (pthread_create(&s->th, NULL, writer_main, s) != 0) {
        mp_err_set(&s->werr, MP_EIO, "cannot start the checkpoint writer thread");
        s->wrc = MP_EIO;
        atomic_store(&s->written, 1);
    } else {
        s->thread_live = 1;
    }
    set_inflight(s, NULL);
    s->st.stall_s += ck_now() - t0;
    return MP_OK;
}

static void join_writer(ckpt_save *s) {
    if (!s->thread_live) return;
    pthread_join(s->th, NULL);
    s->thread_live = 0;
    remember(s, s->wrc, &s->werr);
}

mp_code ckpt_save_poll(ckpt_save *s, int *done, ckpt_stats *st, mp_err *e) {
    assert(s && done);
    if (s->state == ST_DONE) {
        *done = 1;
        if (st) *st = s->st;
        if (s->frc != MP_OK && e) *e = s->ferr;
        return s->frc;
    }
    if (s->state == ST_OPEN) return mp_err_set(e, MP_EINTERNAL, "ckpt_save_poll: save not started");
    double t0 = ck_now();
    float busy = atomic_load(&s->written) ? 0.0f : 1.0f;
    s->world->all_reduce(s->world, &busy, 1, 1);
    *done = 0;
    mp_code rc = MP_OK;
    if (busy == 0.0f) {
        join_writer(s);
        rc = commit(s, e);
        *done = 1;
    }
    s->st.stall_s += ck_now() - t0;
    if (*done && st) *st = s->st;
    return rc;
}

mp_code ckpt_save_wait(ckpt_save *s, ckpt_stats *st, mp_err *e) {
    assert(s);
    if (s->state == ST_OPEN) return ckpt_save_commit(s, st, e);
    double t0 = ck_now();
    if (s->state != ST_DONE) join_writer(s);
    s->st.stall_s += ck_now() - t0;
    int done = 0;
    mp_code rc = ckpt_save_poll(s, &done, st, e);
    assert(done);
    return rc;
}

void ckpt_save_free(ckpt_save *s) {
    if (!s) return;
    join_writer(s);
    set_inflight(NULL, s);
    free_boxes(s->b, s->nb);
    for (int i = 0; i < s->nmeta; i++) { free(s->keys[i]); free(s->vals[i]); }
    free(s->keys);
    free(s->vals);
    free(s->root);
    free(s->dirname);
    free(s->final);
    free(s->partial);
    free(s);
}
