/*
 * ckpt/reader.c — reading any box of a saved tensor, with checksums and coverage checked.
 *
 * ckpt_read(name, Q) for a requested box Q:
 *   1. the interval index (ck_index_range) gives the saved boxes whose dim-0 extent meets Q's; those
 *      that meet Q in every dim are kept, with their intersections I;
 *   2. coverage: the intersections' volumes must sum to Q's (saved boxes never overlap: checked when
 *      the index is opened); otherwise a missing region is found by subtraction and named;
 *   3. each intersection is read from its rank file:
 *      - I is the whole saved box and its rows are contiguous in the caller's buffer (same-mesh
 *        loads): read straight into the buffer (in ~1 MiB pieces, see Overlap), checked against the
 *        whole-box checksum (no tile array);
 *      - otherwise only the checksum tiles I touches are read: the rectangle of touched tile rows x
 *        touched column blocks, in batches of whole tile rows of at most ~1 MiB and half the scratch
 *        bound (default 64 MiB, ckpt_reader_set_scratch; at least one tile row), each tile checked
 *        against its tile checksum, and I copied out. Batches of whole-width rows that lie inside I and
 *        are contiguous in the caller's buffer are read into it directly.
 *   Every byte copied to the caller has been checked against a checksum. Reads never go through the
 *   virtual views (a view's missing source would read as fill values).
 *
 * Overlap (the read/verify pipeline): the reads of step 3 are cut into pieces of about 1 MiB (whole
 * tile rows; rows of a whole-box read, whose box checksum is then computed by a streaming XXH3 state
 * piece by piece) and run through two stages: this thread fetches piece k+1 (pread or H5Dread: every
 * HDF5 call stays on this thread) while the worker thread of ckpt/read_pipe.c hashes piece k (if
 * the worker has not started it when it is needed, this thread hashes it: never slower than inline
 * hashing). Chunked boxes are cut at chunk boundaries. Piece k's verdict is taken before piece k+1
 * is handed to the worker, before anything of piece k is copied out of scratch into the caller's
 * buffer, and before ckpt_read returns: nothing unchecked is handed over, and the errors are the
 * same as without the overlap.
 * Scratch pieces use two halves of the scratch bound (double buffering, same total). The pipeline
 * spans the saved boxes of one request; small pieces (< 64 KiB) and the last piece of a request are
 * hashed inline. The worker is made on the first read that needs it and joined in ckpt_close; no
 * job is in flight when ckpt_read returns, on any path.
 *
 * One path for both format versions: a v2 box's tile checksums are the uint64 dataset tiles_dataset
 * next to it in its rank file, read whole on first need, checked against the index's tiles_checksum
 * and cached (the cache is dropped whole when it would pass an eighth of the scratch bound, at most
 * 32 MiB); a v1 box's slab checksums (in the index) are its tiles, tile_cols being the box's whole
 * dim 1.
 *
 * Fetching: a contiguous, unfiltered dataset (every uncompressed box) is read with pread on the rank
 * file's descriptor (sec2 driver, H5Fget_vfd_handle) at H5Dget_offset + byte offset: one pread for a
 * band of whole-width rows, one per row segment when only some column blocks are needed. So exactly
 * the tile bytes are read (HDF5's sieve buffer would read up to 64 KiB around each request). Chunked
 * (zstd) datasets, whose chunks are tiles, are read with H5Dread of the tile rectangle's hyperslab.
 *
 * Counters (ckpt_reader_io): bytes_needed += element size x volume of every ckpt_read request;
 * bytes_read += bytes fetched from rank files: tensor data (uncompressed size of what was fetched)
 * plus tile checksum arrays (8 bytes per tile), by ckpt_read and ckpt_verify alike. Index and HDF5
 * metadata reads are not counted. A read of whole tiles of a v2 box costs bytes_needed + the box's
 * tile array once (while cached).
 *
 * Rank files are opened on first use and kept open until ckpt_close.
 */
#define _GNU_SOURCE
#include "ckpt/ckpt_internal.h"
#include "ckpt/read_pipe.h"
#include "ckpt/zstd_filter.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include <assert.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* Bytes of cached tile checksum arrays: an eighth of the scratch bound (8 MiB at the default 64 MiB),
 * within [1, 32] MiB. Tied to the scratch so that a caller bounding memory (reshard --max-memory)
 * bounds the cache too, and so that the cache stops growing long before a large model's arrays
 * (~0.2% of its bytes) would fill it: memory stays flat however many tensors are read. */
static size_t tile_cache_max(const ckpt_reader *r);

#define CK_PIECE_BYTES ((size_t)1 << 20)   /* a read pipeline piece (see Overlap above) */

struct ckpt_reader {
    char *dir;
    ck_layout L;
    ckpt_tensor_info *ti;
    ckpt_box_info *bi;
    hid_t *files;         /* [nfiles], -1 until opened */
    int *fds;             /* [nfiles], the sec2 descriptor of files[i] (-1 unknown) */
    char *dsets;          /* the derived dataset paths of bi[] (a layout without a path pool) */
    uint64_t **tiles;     /* [nboxes], cached tile checksums of v2 boxes (NULL: not loaded) */
    unsigned char *ftab;  /* [nfiles], v3: 1 once the file's /boxes table is read and applied */
    int *fbox_first, *fbox;   /* v3: the boxes of each file in layout order (CSR; built on first need) */
    size_t tiles_bytes;   /* bytes held in tiles[] */
    size_t scratch;       /* scratch bound of partial reads and verify batches */
    int64_t bytes_read, bytes_needed;
    ckpt_progress_fn progress;   /* optional (ckpt_reader_set_progress) */
    void *progress_ctx;
    int64_t progress_read;       /* bytes delivered by ckpt_read since the callback was set */
    ck_worker *worker;           /* checks pieces while the next is read (made on first need) */
    XXH3_state_t *box_hs, *tile_hs;   /* ckpt_read's hashing states (made on first need) */
};

mp_code ckpt_open(ckpt_reader **out, const char *dir, mp_err *e) {
    assert(out);
    *out = NULL;
    ck_h5_init();
    MP_TRY(ck_dir_exists(dir, e));
    ck_layout L;
    char *ip = ck_fmt("%s/index.h5", dir);
    mp_code rc = ck_index_read(ip, &L, e);
    free(ip);
    if (rc != MP_OK) return rc;
    *out = ck_reader_new(dir, &L);
    return MP_OK;
}

static void fill_info(ckpt_reader *r, int j);
static void name_boxes(ckpt_reader *r);

ckpt_reader *ck_reader_new(const char *dir, ck_layout *from) {
    ck_h5_init();
    ckpt_reader *r = mp_xcalloc(sizeof *r);
    r->dir = ck_fmt("%s", dir);
    r->L = *from;
    memset(from, 0, sizeof *from);
    ck_layout *L = &r->L;
    r->ti = mp_xcalloc(sizeof *r->ti * (size_t)(L->ntensors + 1));
    r->bi = mp_xcalloc(sizeof *r->bi * (size_t)(L->nboxes + 1));
    r->files = mp_xmalloc(sizeof(hid_t) * (size_t)(L->nfiles + 1));
    r->fds = mp_xmalloc(sizeof(int) * (size_t)(L->nfiles + 1));
    r->tiles = mp_xcalloc(sizeof(uint64_t *) * (size_t)(L->nboxes + 1));
    r->ftab = mp_xcalloc((size_t)(L->nfiles + 1));
    r->scratch = CK_BATCH_BYTES;
    for (int i = 0; i < L->nfiles; i++) { r->files[i] = -1; r->fds[i] = -1; }
    for (int i = 0; i < L->ntensors; i++) {
        ckpt_tensor_info *T = &r->ti[i];
        T->name = L->t[i].name;
        T->dtype = L->t[i].dtype;
        T->ndim = L->t[i].ndim;
        memcpy(T->shape, L->t[i].shape, sizeof T->shape);
        T->box_first = (int)L->t[i].box_first;
        T->nboxes = (int)L->t[i].nboxes;
    }
    name_boxes(r);
    for (int j = 0; j < L->nboxes; j++) fill_info(r, j);
    return r;
}

/* Points every bi[j].dataset at box j's dataset path: the layout's stored one, or one derived into
 * r->dsets (one allocation of the paths' bytes: ~50 per box, not a CK_DSET_MAX buffer each). */
static void name_boxes(ckpt_reader *r) {
    const ck_layout *L = &r->L;
    char buf[CK_DSET_MAX];
    if (L->paths) {
        for (int j = 0; j < L->nboxes; j++) r->bi[j].dataset = ck_box_path(L, &L->b[j], 0, buf);
        return;
    }
    size_t n = 0;
    for (int j = 0; j < L->nboxes; j++) n += strlen(ck_box_path(L, &L->b[j], 0, buf)) + 1;
    r->dsets = mp_xmalloc(n + 1);
    size_t at = 0;
    for (int j = 0; j < L->nboxes; j++) {
        size_t l = strlen(ck_box_path(L, &L->b[j], 0, buf)) + 1;
        memcpy(r->dsets + at, buf, l);
        r->bi[j].dataset = r->dsets + at;
        at += l;
    }
}

/* The public box info bi[j] from the layout's box j. */
static void fill_info(ckpt_reader *r, int j) {
    ckpt_box_info *B = &r->bi[j];
    const ck_box *S = &r->L.b[j];
    B->tensor = S->tensor;
    B->rank = r->L.f[S->file].rank;
    B->file = r->L.f[S->file].name;
    memcpy(B->offset, S->off, sizeof B->offset);
    memcpy(B->shape, S->shp, sizeof B->shape);
    B->checksum = S->checksum;
    B->tile_rows = S->tile_rows;
    B->tile_cols = S->tile_cols;
    B->ntiles = S->ntiles;
}

mp_code ckpt_open_latest(ckpt_reader **out, const char *root, mp_err *e) {
    char dir[4096];
    MP_TRY(ckpt_find_latest(root, dir, sizeof dir, NULL, e));
    return ckpt_open(out, dir, e);
}

/* Frees every cached tile array. */
static void drop_tiles(ckpt_reader *r) {
    for (int j = 0; j < r->L.nboxes; j++)
        if (r->tiles[j]) {
            mp_free_acct(r->tiles[j], sizeof(uint64_t) * (size_t)r->L.b[j].ntiles, MP_MEM_CKPT);
            r->tiles[j] = NULL;
        }
    r->tiles_bytes = 0;
}

void ckpt_close(ckpt_reader *r) {
    if (!r) return;
    for (int i = 0; i < r->L.nfiles; i++)
        if (r->files[i] >= 0) H5Fclose(r->files[i]);
    ck_h5_clear();
    ck_worker_free(r->worker);
    if (r->box_hs) XXH3_freeState(r->box_hs);
    if (r->tile_hs) XXH3_freeState(r->tile_hs);
    drop_tiles(r);
    free(r->tiles);
    free(r->ftab);
    free(r->fbox_first);
    free(r->fbox);
    free(r->files);
    free(r->fds);
    free(r->ti);
    free(r->bi);
    free(r->dsets);
    ck_layout_free(&r->L);
    free(r->dir);
    free(r);
}

const char *ckpt_reader_dir(const ckpt_reader *r) { return r->dir; }
int64_t ckpt_reader_step(const ckpt_reader *r) { return r->L.step; }
int ckpt_reader_version(const ckpt_reader *r) { return r->L.version; }
int ckpt_reader_world(const ckpt_reader *r) { return r->L.world; }
int ckpt_num_tensors(const ckpt_reader *r) { return r->L.ntensors; }
const ckpt_tensor_info *ckpt_tensor_at(const ckpt_reader *r, int i) {
    assert(i >= 0 && i < r->L.ntensors);
    return &r->ti[i];
}
int ckpt_num_boxes(const ckpt_reader *r) { return r->L.nboxes; }
static mp_code file_table(ckpt_reader *r, int fi, mp_err *e);

/* v3: reads the box's rank file's /boxes table first (the reader is logically const: a cache); if that
 * fails the box's checksum and tile fields stay 0, and ckpt_read / ckpt_verify report why. */
const ckpt_box_info *ckpt_box_at(const ckpt_reader *r, int j) {
    assert(j >= 0 && j < r->L.nboxes);
    mp_err e;
    if (file_table((ckpt_reader *)r, r->L.b[j].file, &e) != MP_OK) ck_h5_clear();
    return &r->bi[j];
}
int ckpt_num_meta(const ckpt_reader *r) { return r->L.nmeta; }
const char *ckpt_meta_key(const ckpt_reader *r, int i) { assert(i >= 0 && i < r->L.nmeta); return r->L.keys[i]; }
const char *ckpt_meta_value(const ckpt_reader *r, int i) { assert(i >= 0 && i < r->L.nmeta); return r->L.vals[i]; }

const char *ckpt_meta_get(const ckpt_reader *r, const char *key) {
    for (int i = 0; i < r->L.nmeta; i++)
        if (!strcmp(r->L.keys[i], key)) return r->L.vals[i];
    return NULL;
}

void ckpt_reader_io(const ckpt_reader *r, int64_t *bytes_read, int64_t *bytes_needed) {
    if (bytes_read) *bytes_read = r->bytes_read;
    if (bytes_needed) *bytes_needed = r->bytes_needed;
}

void ckpt_reader_io_reset(ckpt_reader *r) {
    r->bytes_read = 0;
    r->bytes_needed = 0;
}

void ckpt_reader_set_scratch(ckpt_reader *r, size_t bytes) { r->scratch = bytes; }

void ckpt_reader_set_progress(ckpt_reader *r, ckpt_progress_fn fn, void *ctx) {
    r->progress = fn;
    r->progress_ctx = ctx;
    r->progress_read = 0;
}

/* The tile cache's bound for a scratch bound of scratch bytes (see tile_cache_max). */
static size_t tile_cache_bound(size_t scratch) {
    size_t m = scratch / 8;
    return m < ((size_t)1 << 20) ? (size_t)1 << 20 : m > ((size_t)32 << 20) ? (size_t)32 << 20 : m;
}

static size_t tile_cache_max(const ckpt_reader *r) { return tile_cache_bound(r->scratch); }

size_t ckpt_reader_scratch_bytes(void) {
    size_t piece = CK_BATCH_BYTES / 2 < CK_PIECE_BYTES ? CK_BATCH_BYTES / 2 : CK_PIECE_BYTES;
    return 2 * piece + tile_cache_bound(CK_BATCH_BYTES);
}

int ckpt_tensor_find(const ckpt_reader *r, const char *name) { return ck_layout_find(&r->L, name); }

int ckpt_query(const ckpt_reader *r, int t, const int64_t *offset, const int64_t *shape, int *out, int cap) {
    return ck_layout_query(&r->L, t, offset, shape, out, cap);
}

/* ------------------------------------------------------------------------------------- data */

/* The open rank file fi (opened on first use) and its sec2 descriptor (*fd, -1 if the driver is not
 * sec2: then every read goes through HDF5). */
static mp_code rank_file(ckpt_reader *r, int fi, hid_t *out, int *fd, mp_err *e) {
    if (r->files[fi] < 0) {
        char *p = ck_fmt("%s/%s", r->dir, r->L.f[fi].name);
        if (!mp_fs_exists(p)) {
            mp_code rc = mp_err_set(e, MP_ECHECK, "rank file %s is missing (it holds %lld boxes)", p,
                                    (long long)r->L.f[fi].nboxes);
            free(p);
            return rc;
        }
        hid_t fapl = ck_h5_fapl(0);
        hid_t f = fapl < 0 ? -1 : H5Fopen(p, H5F_ACC_RDONLY, fapl);
        if (fapl >= 0) H5Pclose(fapl);
        if (f < 0) {
            /* permission, I/O error, a directory in its place: the cause says it; else the file is damaged */
            mp_code rc = ck_h5_cause_errno() ? ck_h5_err(e, MP_ECHECK, "rank file %s cannot be opened", p)
                                             : ck_h5_err(e, MP_ECHECK, "rank file %s cannot be opened (truncated or corrupt)", p);
            free(p);
            return rc;
        }
        int dfd = -1;
        hid_t ap = H5Fget_access_plist(f);
        void *h = NULL;
        if (ap >= 0 && H5Pget_driver(ap) == H5FD_SEC2 && H5Fget_vfd_handle(f, H5P_DEFAULT, &h) >= 0 && h)
            dfd = *(int *)h;
        if (ap >= 0) H5Pclose(ap);
        ck_h5_clear();
        free(p);
        r->files[fi] = f;
        r->fds[fi] = dfd;
    }
    *out = r->files[fi];
    if (fd) *fd = r->fds[fi];
    return MP_OK;
}

/* The boxes of each file in layout order (r->fbox_first / r->fbox), by a counting sort. */
static void build_file_boxes(ckpt_reader *r) {
    const ck_layout *L = &r->L;
    r->fbox_first = mp_xcalloc(sizeof(int) * (size_t)(L->nfiles + 2));
    r->fbox = mp_xmalloc(sizeof(int) * (size_t)(L->nboxes + 1));
    for (int j = 0; j < L->nboxes; j++) r->fbox_first[L->b[j].file + 2]++;
    for (int i = 0; i < L->nfiles; i++) r->fbox_first[i + 2] += r->fbox_first[i + 1];
    for (int j = 0; j < L->nboxes; j++) r->fbox[r->fbox_first[L->b[j].file + 1]++] = j;
}

/* v3: reads rank file fi's /boxes table once, checks it against the index and the runs and fills in its
 * boxes' checksums and tile fields (ckpt/boxtab.c). MP_OK at once for v1/v2 and for a table read. */
static mp_code file_table(ckpt_reader *r, int fi, mp_err *e) {
    if (r->L.version < 3 || r->ftab[fi]) return MP_OK;
    hid_t f;
    MP_TRY(rank_file(r, fi, &f, NULL, e));
    if (!r->fbox) build_file_boxes(r);
    char *p = ck_fmt("%s/%s", r->dir, r->L.f[fi].name);
    void *rows = NULL;
    int64_t n = 0;
    const int *ids = r->fbox + r->fbox_first[fi];
    int nids = r->fbox_first[fi + 1] - r->fbox_first[fi];
    mp_code rc = ck_boxtab_read(f, p, &rows, &n, e);
    if (rc == MP_OK) rc = ck_boxtab_apply(&r->L, fi, ids, nids, rows, n, p, e);
    if (rc == MP_OK) {
        r->ftab[fi] = 1;
        for (int k = 0; k < nids; k++) fill_info(r, ids[k]);
    }
    free(rows);
    free(p);
    return rc;
}

/* A dataset of a rank file being read: its HDF5 handles and, when it is contiguous and unfiltered
 * with allocated storage, where its bytes start in the file (then it is read with pread on fd). */
typedef struct {
    hid_t d, ft;
    int fd;          /* >= 0: pread at base + byte offset; -1: H5Dread */
    int64_t base;
    int64_t chunk_rows;   /* chunked datasets: rows of dim 0 per chunk (HDF5 reads whole chunks) */
} src_t;

static void src_close(src_t *s) {
    if (s->ft >= 0) H5Tclose(s->ft);
    if (s->d >= 0) H5Dclose(s->d);
    s->d = s->ft = -1;
}

/* Fills s->fd / s->base for dataset s->d of a file with descriptor fd. */
static void src_locate(src_t *s, int fd) {
    s->fd = -1;
    s->base = 0;
    s->chunk_rows = 0;
    hid_t dcpl = H5Dget_create_plist(s->d);
    hsize_t cd[CKPT_MAX_DIMS];
    if (dcpl >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED && H5Pget_chunk(dcpl, CKPT_MAX_DIMS, cd) >= 1)
        s->chunk_rows = (int64_t)cd[0];
    if (dcpl >= 0 && fd >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS && H5Pget_nfilters(dcpl) == 0) {
        haddr_t a = H5Dget_offset(s->d);
        if (a != HADDR_UNDEF && a <= (haddr_t)INT64_MAX) {
            s->fd = fd;
            s->base = (int64_t)a;
        }
    }
    if (dcpl >= 0) H5Pclose(dcpl);
    ck_h5_clear();
}

/* Opens box j's dataset and checks its shape and type against the index. */
static mp_code open_box(ckpt_reader *r, int64_t j, src_t *s, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    const char *fname = r->L.f[B->file].name;
    hid_t f = -1;
    int fd = -1;
    s->d = s->ft = -1;
    MP_TRY(rank_file(r, B->file, &f, &fd, e));
    MP_TRY(file_table(r, B->file, e));
    hid_t d = H5Dopen2(f, r->bi[j].dataset, H5P_DEFAULT);
    if (d < 0) return ck_h5_err(e, MP_ECHECK, "%s/%s: dataset %s of tensor %s is missing", r->dir, fname, r->bi[j].dataset, T->name);
    hid_t want = ck_h5_type(T->dtype);
    hid_t ft = H5Dget_type(d), sp = H5Dget_space(d);
    int ok = want >= 0 && ft >= 0 && sp >= 0 && H5Tequal(ft, want) > 0 && H5Sget_simple_extent_ndims(sp) == T->ndim;
    if (ok) {
        hsize_t dims[CKPT_MAX_DIMS];
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d2 = 0; d2 < T->ndim; d2++) ok = ok && dims[d2] == (hsize_t)B->shp[d2];
    }
    if (sp >= 0) H5Sclose(sp);
    if (want >= 0) H5Tclose(want);
    if (!ok) {
        if (ft >= 0) H5Tclose(ft);
        H5Dclose(d);
        ck_h5_clear();
        return mp_err_set(e, MP_ECHECK, "%s/%s: dataset %s (tensor %s) has a type or shape other than the index says",
                          r->dir, fname, r->bi[j].dataset, T->name);
    }
    s->d = d;
    s->ft = ft;
    src_locate(s, fd);
    return MP_OK;
}

/* pread of exactly n bytes at off, for box j's dataset `what`; a short read or an error is MP_ECHECK
 * (a truncated rank file) naming the file, the dataset and the tensor. */
static mp_code pread_all(ckpt_reader *r, int64_t j, const char *what, int fd, void *dst, size_t n, int64_t off,
                         mp_err *e) {
    const ck_box *B = &r->L.b[j];
    size_t got = 0;
    while (got < n) {
        ssize_t k = pread(fd, (char *)dst + got, n - got, (off_t)(off + (int64_t)got));
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0)
            return mp_err_set(e, MP_ECHECK,
                              "%s/%s: short read of dataset %s (tensor %s): %zu of %zu bytes at file offset %lld%s%s "
                              "(truncated or corrupt rank file)",
                              r->dir, r->L.f[B->file].name, what, r->L.t[B->tensor].name, got, n, (long long)off,
                              k < 0 ? ": " : "", k < 0 ? strerror(errno) : "");
        got += (size_t)k;
    }
    r->bytes_read += (int64_t)n;
    return MP_OK;
}

/* Geometry of box B: cols = entries of dim 1 (1 for 1-D), unit = bytes of one dim-1 entry (all of
 * dims 2..), row = bytes of one dim-0 row. */
typedef struct { int64_t rows, cols, unit, row; } geom;

static geom box_geom(const ck_layout *L, const ck_box *B) {
    const ck_tensor *T = &L->t[B->tensor];
    geom g;
    g.rows = B->shp[0];
    g.cols = T->ndim >= 2 ? B->shp[1] : 1;
    g.unit = (int64_t)mp_dtype_size(T->dtype) * (T->ndim > 2 ? ck_volume(T->ndim - 2, B->shp + 2) : 1);
    g.row = g.cols * g.unit;
    return g;
}

/* Reads rows [a, b) x dim-1 entries [ca, cb) (all of dims 2..) of box j's dataset into dst, row-major
 * ((b - a) x (cb - ca) x ...): pread for contiguous datasets (one call for whole-width rows, else one
 * per row segment), H5Dread of the hyperslab otherwise. Counts the bytes in r->bytes_read. */
static mp_code fetch(ckpt_reader *r, int64_t j, const src_t *s, int64_t a, int64_t b, int64_t ca, int64_t cb, void *dst,
                     mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    geom g = box_geom(&r->L, B);
    assert(0 <= a && a < b && b <= g.rows && 0 <= ca && ca < cb && cb <= g.cols);
    size_t seg = (size_t)((cb - ca) * g.unit);
    if (s->fd >= 0) {
        if (ca == 0 && cb == g.cols) return pread_all(r, j, r->bi[j].dataset, s->fd, dst, (size_t)(b - a) * seg, s->base + a * g.row, e);
        for (int64_t i = a; i < b; i++)
            MP_TRY(pread_all(r, j, r->bi[j].dataset, s->fd, (char *)dst + (size_t)(i - a) * seg, seg,
                             s->base + i * g.row + ca * g.unit, e));
        return MP_OK;
    }
    hsize_t st[CKPT_MAX_DIMS] = {0}, cnt[CKPT_MAX_DIMS];
    for (int k = 0; k < T->ndim; k++) cnt[k] = (hsize_t)B->shp[k];
    st[0] = (hsize_t)a;
    cnt[0] = (hsize_t)(b - a);
    if (T->ndim >= 2) {
        st[1] = (hsize_t)ca;
        cnt[1] = (hsize_t)(cb - ca);
    }
    hid_t fs = H5Dget_space(s->d);
    hid_t ms = H5Screate_simple(T->ndim, cnt, NULL);
    herr_t hr = (fs < 0 || ms < 0) ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (hr >= 0) hr = ckpt_zstd_read(s->d, s->ft, ms, fs, H5P_DEFAULT, dst);   /* zstd: chunk size checked */
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (hr < 0)
        return ck_h5_err(e, MP_ECHECK, "%s/%s: reading rows %lld:%lld, columns %lld:%lld of dataset %s (tensor %s)",
                         r->dir, r->L.f[B->file].name, (long long)a, (long long)b, (long long)ca, (long long)cb,
                         r->bi[j].dataset, T->name);
    /* HDF5 decompresses whole chunks: count the rows of every chunk the hyperslab meets (the chunk
     * columns are the tile columns) */
    int64_t ra = a, rb = b;
    if (s->chunk_rows > 0) {
        ra = a / s->chunk_rows * s->chunk_rows;
        rb = (b + s->chunk_rows - 1) / s->chunk_rows * s->chunk_rows;
        if (rb > g.rows) rb = g.rows;
    }
    r->bytes_read += (int64_t)((size_t)(rb - ra) * seg);
    return MP_OK;
}

/* "checksum mismatch" for rows [a, b) x dim-1 entries [ca, cb) of box j (box coordinates). */
static mp_code checksum_error(ckpt_reader *r, int64_t j, int64_t a, int64_t b, int64_t ca, int64_t cb, uint64_t want,
                              uint64_t got, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
    memcpy(off, B->off, sizeof off);
    memcpy(shp, B->shp, sizeof shp);
    off[0] += a;
    shp[0] = b - a;
    if (T->ndim >= 2) {
        off[1] += ca;
        shp[1] = cb - ca;
    }
    char reg[256];
    ck_box_str(reg, sizeof reg, T->ndim, off, shp);
    return mp_err_set(e, MP_ECHECK,
                      "%s/%s: checksum mismatch in dataset %s (tensor %s, region %s): stored %016llx, data %016llx: "
                      "the rank file is corrupt",
                      r->dir, r->L.f[B->file].name, r->bi[j].dataset, T->name, reg, (unsigned long long)want,
                      (unsigned long long)got);
}

/* Reads the tile checksum array of v2 box j from its rank file into buf (ntiles, native order) and
 * checks it against the index's tiles_checksum (XXH3-64 of the array as little-endian uint64s). */
static mp_code load_tiles(ckpt_reader *r, int64_t j, uint64_t *buf, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    const char *fname = r->L.f[B->file].name;
    assert(r->L.version >= 2 && B->ntiles > 0);
    char tb[CK_DSET_MAX];
    const char *tds = ck_box_path(&r->L, B, 1, tb);
    hid_t f = -1;
    int fd = -1;
    MP_TRY(rank_file(r, B->file, &f, &fd, e));
    src_t s = {.d = H5Dopen2(f, tds, H5P_DEFAULT), .ft = -1};
    if (s.d < 0)
        return ck_h5_err(e, MP_ECHECK, "%s/%s: tile checksums dataset %s of dataset %s (tensor %s) is missing", r->dir,
                         fname, tds, r->bi[j].dataset, T->name);
    s.ft = H5Dget_type(s.d);
    hid_t sp = H5Dget_space(s.d);
    hsize_t n = 0;
    int ok = s.ft >= 0 && sp >= 0 && H5Tget_class(s.ft) == H5T_INTEGER && H5Tget_size(s.ft) == 8 &&
             H5Tget_sign(s.ft) == H5T_SGN_NONE && H5Sget_simple_extent_ndims(sp) == 1 &&
             H5Sget_simple_extent_dims(sp, &n, NULL) == 1 && n == (hsize_t)B->ntiles;
    if (sp >= 0) H5Sclose(sp);
    mp_code rc = MP_OK;
    size_t bytes = sizeof(uint64_t) * (size_t)B->ntiles;
    if (!ok) {
        ck_h5_clear();
        rc = mp_err_set(e, MP_ECHECK,
                        "%s/%s: tile checksums dataset %s of dataset %s (tensor %s) is not a uint64[%lld] array", r->dir,
                        fname, tds, r->bi[j].dataset, T->name, (long long)B->ntiles);
    } else {
        src_locate(&s, fd);
        if (s.fd >= 0) {
            rc = pread_all(r, j, tds, s.fd, buf, bytes, s.base, e);
        } else if (H5Dread(s.d, H5T_STD_U64LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) {
            rc = ck_h5_err(e, MP_ECHECK, "%s/%s: reading tile checksums dataset %s (tensor %s)", r->dir, fname,
                           tds, T->name);
        } else {
            r->bytes_read += (int64_t)bytes;
        }
    }
    src_close(&s);
    if (rc != MP_OK) return rc;
    uint64_t h = XXH3_64bits(buf, bytes);   /* buf holds the little-endian bytes */
    if (h != B->tiles_checksum)
        return mp_err_set(e, MP_ECHECK,
                          "%s/%s: tile checksums dataset %s of dataset %s (tensor %s) is corrupt: XXH3 %016llx, the "
                          "index says %016llx",
                          r->dir, fname, tds, r->bi[j].dataset, T->name, (unsigned long long)h,
                          (unsigned long long)B->tiles_checksum);
    for (int64_t k = 0; k < B->ntiles; k++) buf[k] = le64toh(buf[k]);
    return MP_OK;
}

/* The tile checksums of box j: v1 slab checksums from the index, v2 the cached array (loaded and
 * checked on first need; the whole cache is dropped when it would pass tile_cache_max). */
static mp_code tiles_of(ckpt_reader *r, int64_t j, const uint64_t **out, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    if (r->L.version == 1) {
        assert(B->slab_first + B->ntiles <= r->L.nslabs);
        *out = r->L.slabs + B->slab_first;
        return MP_OK;
    }
    if (!r->tiles[j]) {
        size_t bytes = sizeof(uint64_t) * (size_t)B->ntiles;
        if (r->tiles_bytes + bytes > tile_cache_max(r)) drop_tiles(r);
        uint64_t *buf = mp_malloc(bytes, MP_MEM_CKPT);
        mp_code rc = load_tiles(r, j, buf, e);
        if (rc != MP_OK) {
            mp_free_acct(buf, bytes, MP_MEM_CKPT);
            return rc;
        }
        r->tiles[j] = buf;
        r->tiles_bytes += bytes;
    }
    *out = r->tiles[j];
    return MP_OK;
}

/* A checksum verdict: bad = 0 (all matched), or the first mismatching region, rows [a, b) x dim-1
 * entries [ca, cb) in box coordinates, with the stored and the computed hash. */
typedef struct {
    int bad;
    int64_t a, b, ca, cb;
    uint64_t want, got;
} verdict;

/* Hashes the tiles held in p, rows [a, b) x dim-1 entries [ca, cb) of a box of geometry g cut into
 * tr x tc tiles, row-major, where a and ca are tile boundaries and b, cb tile boundaries or the box's
 * end, and compares them with tiles (the box's tile array). Pure: touches only its arguments and the
 * scratch state hs, so it runs on the verification worker. */
static verdict tiles_verdict(geom g, int64_t tr, int64_t tc, const uint64_t *tiles, const char *p, int64_t a,
                             int64_t b, int64_t ca, int64_t cb, XXH3_state_t *hs) {
    int64_t ncb = (g.cols + tc - 1) / tc;
    assert(a % tr == 0 && ca % tc == 0 && (b % tr == 0 || b == g.rows) && (cb % tc == 0 || cb == g.cols));
    size_t w = (size_t)((cb - ca) * g.unit);   /* bytes of one row in p */
    verdict v = {0};
    for (int64_t i = a / tr; i * tr < b; i++) {
        int64_t ta = i * tr, tb = ta + tr < g.rows ? ta + tr : g.rows;
        for (int64_t k = ca / tc; k * tc < cb; k++) {
            int64_t tca = k * tc, tcb = tca + tc < g.cols ? tca + tc : g.cols;
            size_t seg = (size_t)((tcb - tca) * g.unit);
            const char *q = p + (size_t)(ta - a) * w + (size_t)((tca - ca) * g.unit);
            uint64_t h;
            if (seg == w) {
                h = XXH3_64bits(q, (size_t)(tb - ta) * seg);
            } else {
                XXH3_64bits_reset(hs);
                for (int64_t x = ta; x < tb; x++, q += w) XXH3_64bits_update(hs, q, seg);
                h = XXH3_64bits_digest(hs);
            }
            uint64_t want = tiles[i * ncb + k];
            if (h != want) return (verdict){1, ta, tb, tca, tcb, want, h};
        }
    }
    return v;
}

/* Checks the tiles held in p: rows [a, b) x dim-1 entries [ca, cb) of box j (see tiles_verdict);
 * a mismatch is the checksum error naming the tile. hs is a scratch XXH3 state. */
static mp_code check_tiles(ckpt_reader *r, int64_t j, const uint64_t *tiles, const char *p, int64_t a, int64_t b,
                           int64_t ca, int64_t cb, XXH3_state_t *hs, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    verdict v = tiles_verdict(box_geom(&r->L, B), B->tile_rows, B->tile_cols, tiles, p, a, b, ca, cb, hs);
    return v.bad ? checksum_error(r, j, v.a, v.b, v.ca, v.cb, v.want, v.got, e) : MP_OK;
}

/* Grows the scratch buffer *p (*cap bytes) to at least n bytes. */
static void scratch_grow(char **p, size_t *cap, size_t n) {
    if (n <= *cap) return;
    mp_free_acct(*p, *cap, MP_MEM_CKPT);
    *p = mp_malloc(n, MP_MEM_CKPT);
    *cap = n;
}

/* Tile rows per batch for box B (ckpt_verify): the scratch bound over the bytes of one tile row of
 * width w bytes, at least 1, at most all of the box's tile rows. */
static int64_t batch_tile_rows(const ckpt_reader *r, const ck_box *B, int64_t w) {
    int64_t all = (B->shp[0] + B->tile_rows - 1) / B->tile_rows;
    size_t per = r->scratch / (size_t)(B->tile_rows * w);
    return per < 1 ? 1 : per > (size_t)all ? all : (int64_t)per;
}

/* ------------------------------------------------------------- the read/verify pipeline */

/* A ckpt_read is a sequence of pieces of about CK_PIECE_BYTES (whole tile rows; rows of a whole-box
 * read), each fetched by the caller's thread and checked on the worker (ckpt/read_pipe.c) while the
 * caller's thread fetches the next. Pieces below CK_PIPE_MIN_BYTES, and the last piece of a read, are
 * checked inline (handing them over would cost more than it hides). */
#define CK_PIPE_MIN_BYTES ((size_t)64 << 10)

/* One piece: rows [a, b) x dim-1 entries [ca, cb) of saved box j, fetched into p. Everything the
 * check needs is copied in, so that check_piece never touches the reader. */
typedef struct {
    int64_t j, a, b, ca, cb;
    char *p;                    /* the caller's buffer, or a scratch half (out = 1) */
    size_t bytes;
    geom g;
    int64_t tr, tc;
    const uint64_t *tiles;      /* the box's tile checksums; NULL: rows of a whole-box read */
    uint64_t box_sum;           /* whole-box pieces: the box checksum, compared by the last piece */
    int first, last;            /* whole-box pieces: holds the box's first / last row */
    int out;                    /* p is scratch: after the check, copy the part of I in it to the caller */
    const int64_t *io, *is;     /* out pieces: the intersection I being read */
    XXH3_state_t *box_hs, *tile_hs;
    verdict v;                  /* check_piece's result */
} piece;

/* Checks piece arg (a piece *) and writes its verdict: its tiles, or (whole-box pieces) its rows into
 * the streaming box hash, compared with the box checksum at the last piece. Runs on the worker or
 * inline; pieces of one whole box are checked in order (at most one in flight). */
static void check_piece(void *arg) {
    piece *q = arg;
    if (q->tiles) {
        q->v = tiles_verdict(q->g, q->tr, q->tc, q->tiles, q->p, q->a, q->b, q->ca, q->cb, q->tile_hs);
        return;
    }
    assert(q->ca == 0 && q->cb == q->g.cols);
    if (q->first) XXH3_64bits_reset(q->box_hs);
    XXH3_64bits_update(q->box_hs, q->p, q->bytes);
    q->v = (verdict){0};
    if (q->last) {
        uint64_t h = XXH3_64bits_digest(q->box_hs);
        if (h != q->box_sum) q->v = (verdict){1, 0, q->g.rows, 0, q->g.cols, q->box_sum, h};
    }
}

/* The pipeline of one ckpt_read: pieces pushed in order; piece k in slot pc[k & 1] and, when it is
 * fetched into scratch, in tmp[k & 1] (two halves: together within the reader's scratch bound). */
typedef struct {
    ckpt_reader *r;
    piece pc[2];
    int64_t n, done;        /* pieces pushed; pieces finished (verdict taken, copied out): n - done <= 1 */
    char *tmp[2];
    size_t tmp_n[2];
    const int64_t *qo, *qs; /* the request */
    char *buf;
    mp_err *e;
} pipe_t;

static void pipe_begin(pipe_t *pp, ckpt_reader *r, const int64_t *qo, const int64_t *qs, char *buf, mp_err *e) {
    memset(pp, 0, sizeof *pp);
    pp->r = r;
    pp->qo = qo;
    pp->qs = qs;
    pp->buf = buf;
    pp->e = e;
    if (!r->box_hs) r->box_hs = XXH3_createState();
    if (!r->tile_hs) r->tile_hs = XXH3_createState();
    if (!r->box_hs || !r->tile_hs) mp_oom(0, MP_MEM_CKPT, "a checksum state");
}

/* The slot of the next piece (the caller fills it whole). Its scratch half is free: the piece that
 * used it last is finished (n - done <= 1). */
static piece *pipe_slot(pipe_t *pp) {
    assert(pp->n - pp->done <= 1);
    return &pp->pc[pp->n & 1];
}

/* The next piece's scratch half, grown to n bytes. */
static char *pipe_scratch(pipe_t *pp, size_t n) {
    int k = (int)(pp->n & 1);
    scratch_grow(&pp->tmp[k], &pp->tmp_n[k], n);
    return pp->tmp[k];
}

/* Finishes the last piece pushed, if not yet: waits for its check, and on a match copies its part of
 * I out of scratch into the caller's buffer; a mismatch is the checksum error naming the tile (or the
 * box). Nothing of a piece reaches the caller's buffer from scratch before its check. */
static mp_code pipe_finish(pipe_t *pp) {
    if (pp->done == pp->n) return MP_OK;
    assert(pp->n - pp->done == 1);
    ckpt_reader *r = pp->r;
    piece *q = &pp->pc[(pp->n - 1) & 1];
    if (r->worker) ck_worker_wait(r->worker);
    pp->done = pp->n;
    if (q->v.bad) return checksum_error(r, q->j, q->v.a, q->v.b, q->v.ca, q->v.cb, q->v.want, q->v.got, pp->e);
    if (q->out) {
        const ck_box *B = &r->L.b[q->j];
        const ck_tensor *T = &r->L.t[B->tensor];
        int nd = T->ndim;
        int64_t so[CKPT_MAX_DIMS], ss[CKPT_MAX_DIMS], co[CKPT_MAX_DIMS], cs[CKPT_MAX_DIMS];
        memcpy(so, B->off, sizeof so);
        memcpy(ss, B->shp, sizeof ss);
        so[0] += q->a;
        ss[0] = q->b - q->a;
        if (nd >= 2) {
            so[1] += q->ca;
            ss[1] = q->cb - q->ca;
        }
        if (ck_intersect(nd, so, ss, q->io, q->is, co, cs))
            ck_copy_sub(nd, mp_dtype_size(T->dtype), co, cs, q->p, so, ss, pp->buf, pp->qo, pp->qs);
    }
    return MP_OK;
}

/* Pushes the piece just filled in pipe_slot and fetched: finishes the previous piece (whose check ran
 * while this one was fetched), then hands this one to the worker, or checks and finishes it inline
 * when it is small or `more` is 0 (no fetch follows to overlap). */
static mp_code pipe_push(pipe_t *pp, int more) {
    ckpt_reader *r = pp->r;
    piece *q = &pp->pc[pp->n & 1];
    q->box_hs = r->box_hs;
    q->tile_hs = r->tile_hs;
    mp_code rc = pipe_finish(pp);
    pp->n++;
    if (rc != MP_OK) {
        pp->done = pp->n;   /* dropped: never checked, never copied out */
        return rc;
    }
    if (!more || q->bytes < CK_PIPE_MIN_BYTES) {
        check_piece(q);
        return pipe_finish(pp);
    }
    if (r->worker && !ck_worker_usable(r->worker)) {   /* made before a fork: no thread here */
        ck_worker_free(r->worker);
        r->worker = NULL;
    }
    if (!r->worker) r->worker = ck_worker_new();
    ck_worker_post(r->worker, check_piece, q);
    return MP_OK;
}

/* Ends the pipeline on every path: with rc == MP_OK finishes the last piece (its verdict is the
 * result); otherwise waits for a check in flight and drops it. Frees the scratch halves. On return no
 * job of this read is on the worker. */
static mp_code pipe_end(pipe_t *pp, mp_code rc) {
    if (rc == MP_OK) {
        rc = pipe_finish(pp);
    } else if (pp->done < pp->n) {
        if (pp->r->worker) ck_worker_wait(pp->r->worker);
        pp->done = pp->n;
    }
    assert(!ck_worker_busy(pp->r->worker));
    for (int k = 0; k < 2; k++) mp_free_acct(pp->tmp[k], pp->tmp_n[k], MP_MEM_CKPT);
    return rc;
}

/* Rows per piece: about `bytes` bytes of rows of w bytes, a multiple of `step` rows (a tile row, or 1)
 * and, for a chunked dataset, of its chunk rows (so no chunk is decompressed for two pieces); at least
 * one such multiple. Pieces start at multiples of it (box rows). */
static int64_t piece_rows(const src_t *s, int64_t step, int64_t w, size_t bytes) {
    assert(step > 0 && w > 0);
    int64_t q = step;
    if (s->chunk_rows > 0) q = s->chunk_rows % step == 0 ? s->chunk_rows : s->chunk_rows * step;
    int64_t n = (int64_t)(bytes / (size_t)(q * w));
    return (n < 1 ? 1 : n) * q;
}

/* Reads the intersection (io, is) of saved box j into the request of pipeline pp, piece by piece;
 * `more`: other intersections follow in this read. On return the box's pieces are fetched and pushed;
 * the last one may still be in check (pipe_end or the next push finishes it). */
static mp_code read_part(pipe_t *pp, int64_t j, const int64_t *io, const int64_t *is, int more) {
    ckpt_reader *r = pp->r;
    mp_err *e = pp->e;
    const int64_t *qo = pp->qo, *qs = pp->qs;
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int nd = T->ndim;
    geom g = box_geom(&r->L, B);
    int contig = 1;                                                /* I's rows: whole rows of B, contiguous in buf */
    for (int d = 1; d < nd; d++) contig = contig && is[d] == B->shp[d] && is[d] == qs[d];
    int64_t r0 = io[0] - B->off[0], r1 = r0 + is[0];               /* rows of B that I covers */
    int64_t c0 = nd >= 2 ? io[1] - B->off[1] : 0, c1 = nd >= 2 ? c0 + is[1] : 1;
    mp_code rc = MP_OK;
    if (!contig || r0 != 0 || r1 != g.rows) {
        /* tiles_of may drop the tile cache, which the piece in check may be using */
        if (r->L.version >= 2 && !r->tiles[j]) MP_TRY(pipe_finish(pp));
    }
    src_t s;
    MP_TRY(open_box(r, j, &s, e));
    if (contig && r0 == 0 && r1 == g.rows) {
        /* the whole box, straight into buf, in pieces of whole rows checked by the streaming box hash */
        char *dst = pp->buf + (size_t)((io[0] - qo[0]) * g.row);
        int64_t per = piece_rows(&s, 1, g.row, CK_PIECE_BYTES);
        /* the kernel reads the rest of the box ahead while the pieces before it are read and hashed: a
         * box read piece by piece otherwise waits for each piece's I/O in turn */
        if (s.fd >= 0 && per < g.rows)
            posix_fadvise(s.fd, (off_t)s.base, (off_t)(g.rows * g.row), POSIX_FADV_WILLNEED);
        for (int64_t a = 0; a < g.rows && rc == MP_OK; a += per) {
            int64_t b = a + per < g.rows ? a + per : g.rows;
            piece *q = pipe_slot(pp);
            *q = (piece){.j = j, .a = a, .b = b, .ca = 0, .cb = g.cols, .p = dst + (size_t)(a * g.row),
                         .bytes = (size_t)((b - a) * g.row), .g = g, .box_sum = B->checksum, .first = a == 0,
                         .last = b == g.rows};
            rc = fetch(r, j, &s, a, b, 0, g.cols, q->p, e);
            if (rc == MP_OK) rc = pipe_push(pp, more || b < g.rows);
        }
        src_close(&s);
        return rc;
    }
    const uint64_t *tiles = NULL;
    rc = tiles_of(r, j, &tiles, e);
    if (rc != MP_OK) {
        src_close(&s);
        return rc;
    }
    int64_t TR = B->tile_rows, TC = B->tile_cols;
    int64_t ra = r0 / TR * TR, rb = (r1 + TR - 1) / TR * TR;       /* touched tile rows */
    if (rb > g.rows) rb = g.rows;
    int64_t ca = c0 / TC * TC, cb = (c1 + TC - 1) / TC * TC;       /* touched column blocks */
    if (cb > g.cols) cb = g.cols;
    int64_t w = (cb - ca) * g.unit;
    size_t bound = r->scratch / 2 < CK_PIECE_BYTES ? r->scratch / 2 : CK_PIECE_BYTES;
    int64_t per = piece_rows(&s, TR, w, bound);
    for (int64_t a = ra, b; a < rb && rc == MP_OK; a = b) {
        b = (a / per + 1) * per < rb ? (a / per + 1) * per : rb;
        piece *q = pipe_slot(pp);
        *q = (piece){.j = j, .a = a, .b = b, .ca = ca, .cb = cb, .bytes = (size_t)((b - a) * w), .g = g, .tr = TR,
                     .tc = TC, .tiles = tiles, .io = io, .is = is};
        if (contig && a >= r0 && b <= r1) {                         /* whole-width rows inside I: straight in */
            assert(ca == 0 && cb == g.cols);
            q->p = pp->buf + (size_t)((B->off[0] + a - qo[0]) * g.row);
        } else {
            q->p = pipe_scratch(pp, q->bytes);
            q->out = 1;
        }
        rc = fetch(r, j, &s, a, b, ca, cb, q->p, e);
        if (rc == MP_OK) rc = pipe_push(pp, more || b < rb);
    }
    src_close(&s);
    return rc;
}

int64_t ckpt_box_read_cost(const ckpt_reader *r, int j, const int64_t *offset, const int64_t *shape) {
    assert(j >= 0 && j < r->L.nboxes);
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int nd = T->ndim;
    int64_t io[CKPT_MAX_DIMS], is[CKPT_MAX_DIMS];
    if (!ck_intersect(nd, offset, shape, B->off, B->shp, io, is)) return 0;
    geom g = box_geom(&r->L, B);
    /* read_part's decision: a whole saved box whose rows are whole rows of the request is one read */
    int contig = 1;
    for (int d = 1; d < nd; d++) contig = contig && is[d] == B->shp[d] && is[d] == shape[d];
    int64_t r0 = io[0] - B->off[0], r1 = r0 + is[0];
    if (contig && r0 == 0 && r1 == g.rows) return g.rows * g.row;
    mp_err fe;
    if (file_table((ckpt_reader *)r, B->file, &fe) != MP_OK) {   /* v3: tile fields unknown; the read reports it */
        ck_h5_clear();
        return g.rows * g.row;
    }
    int64_t c0 = nd >= 2 ? io[1] - B->off[1] : 0, c1 = nd >= 2 ? c0 + is[1] : 1;
    int64_t TR = B->tile_rows, TC = B->tile_cols;
    int64_t a = r0 / TR * TR, b = (r1 + TR - 1) / TR * TR, ca = c0 / TC * TC, cb = (c1 + TC - 1) / TC * TC;
    if (b > g.rows) b = g.rows;
    if (cb > g.cols) cb = g.cols;
    int64_t tiles = r->L.version >= 2 && !(r->tiles && r->tiles[j]) ? 8 * B->ntiles : 0;
    return (b - a) * (cb - ca) * g.unit + tiles;
}

void ckpt_prefetch(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape) {
    ck_h5_init();
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return;
    const ck_tensor *T = &r->L.t[t];
    int nd = T->ndim;
    for (int d = 0; d < nd; d++)
        if (offset[d] < 0 || shape[d] <= 0 || offset[d] > T->shape[d] - shape[d]) return;
    int64_t lo, hi;
    ck_index_range(&r->L, t, offset[0], offset[0] + shape[0], &lo, &hi);
    for (int64_t j = lo; j < hi; j++) {
        const ck_box *B = &r->L.b[j];
        int64_t io[CKPT_MAX_DIMS], is[CKPT_MAX_DIMS];
        if (!ck_intersect(nd, offset, shape, B->off, B->shp, io, is)) continue;
        int whole_width = 1;   /* only whole rows: a column block's bytes are strided, and a hint for
                                  the gaps between them would read what ckpt_read never counts */
        for (int d = 1; d < nd; d++) whole_width = whole_width && is[d] == B->shp[d];
        if (!whole_width) continue;
        src_t s;
        mp_err e;
        if (open_box(r, j, &s, &e) != MP_OK) {
            ck_h5_clear();
            continue;   /* the read itself reports it */
        }
        if (s.fd >= 0) {
            geom g = box_geom(&r->L, B);
            int64_t a = (io[0] - B->off[0]) / B->tile_rows * B->tile_rows;
            int64_t b = io[0] - B->off[0] + is[0];
            posix_fadvise(s.fd, (off_t)(s.base + a * g.row), (off_t)((b - a) * g.row), POSIX_FADV_WILLNEED);
        }
        src_close(&s);
    }
}

mp_code ckpt_read(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape, void *buf,
                  mp_err *e) {
    assert(r && name && offset && shape && buf);
    ck_h5_init();
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return mp_err_set(e, MP_EINPUT, "tensor %s is not in checkpoint %s", name, r->dir);
    const ck_tensor *T = &r->L.t[t];
    int nd = T->ndim;
    int64_t zero[CKPT_MAX_DIMS] = {0};
    char qstr[256], tstr[256];
    ck_box_str(qstr, sizeof qstr, nd, offset, shape);
    for (int d = 0; d < nd; d++)
        if (offset[d] < 0 || shape[d] <= 0 || offset[d] > T->shape[d] - shape[d]) {
            ck_box_str(tstr, sizeof tstr, nd, zero, T->shape);
            return mp_err_set(e, MP_EINPUT, "tensor %s: requested box %s is empty or outside the tensor %s", name, qstr,
                              tstr);
        }
    int64_t want = ck_volume(nd, shape);
    r->bytes_needed += want * (int64_t)mp_dtype_size(T->dtype);
    int64_t lo, hi;
    ck_index_range(&r->L, t, offset[0], offset[0] + shape[0], &lo, &hi);
    int n = 0;
    int64_t *hit = mp_xmalloc(sizeof(int64_t) * (size_t)(hi - lo + 1));
    int64_t (*io)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *io * (size_t)(hi - lo + 1));
    int64_t (*is)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *is * (size_t)(hi - lo + 1));
    int64_t covered = 0;
    for (int64_t j = lo; j < hi; j++)
        if (ck_intersect(nd, offset, shape, r->L.b[j].off, r->L.b[j].shp, io[n], is[n])) {
            covered += ck_volume(nd, is[n]);
            hit[n++] = j;
        }
    mp_code rc = MP_OK;
    if (covered != want) {
        int64_t mo[CKPT_MAX_DIMS], ms[CKPT_MAX_DIMS];
        char reg[256] = "?";
        if (ck_find_gap(nd, offset, shape, n, (const int64_t(*)[CKPT_MAX_DIMS])io, (const int64_t(*)[CKPT_MAX_DIMS])is,
                        mo, ms))
            ck_box_str(reg, sizeof reg, nd, mo, ms);
        rc = mp_err_set(e, MP_ECHECK,
                        "tensor %s: region %s of the requested box %s is in no saved box of checkpoint %s (%lld of %lld "
                        "elements found)",
                        name, reg, qstr, r->dir, (long long)covered, (long long)want);
    }
    pipe_t pp;
    pipe_begin(&pp, r, offset, shape, buf, e);
    for (int k = 0; k < n && rc == MP_OK; k++) rc = read_part(&pp, hit[k], io[k], is[k], k + 1 < n);
    rc = pipe_end(&pp, rc);
    if (rc == MP_OK && r->progress) {
        r->progress_read += want * (int64_t)mp_dtype_size(T->dtype);
        r->progress(r->progress_ctx, r->progress_read, 0);
    }
    free(hit);
    free(io);
    free(is);
    return rc;
}

/* The dataset attributes of box j (open in s) agree with the index: tensor, dtype, global_offset,
 * global_shape, checksum; v2 also tile_rows, tile_cols, tiles_checksum. */
static mp_code check_attrs(ckpt_reader *r, int64_t j, const src_t *s, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    char tn[CKPT_NAME_MAX + 2] = "", dt[16] = "";
    int64_t go[CKPT_MAX_DIMS], gs[CKPT_MAX_DIMS], tr = 0, tc = 0;
    uint64_t ck = 0, tck = 0;
    int ok = ck_attr_read_str(s->d, "tensor", tn, sizeof tn) >= 0 && !strcmp(tn, T->name) &&
             ck_attr_read_str(s->d, "dtype", dt, sizeof dt) >= 0 && !strcmp(dt, mp_dtype_name(T->dtype)) &&
             ck_attr_read_i64(s->d, "global_offset", go, T->ndim) >= 0 &&
             ck_attr_read_i64(s->d, "global_shape", gs, T->ndim) >= 0 && ck_attr_read_u64(s->d, "checksum", &ck, 1) >= 0 &&
             ck == B->checksum;
    for (int k = 0; ok && k < T->ndim; k++) ok = go[k] == B->off[k] && gs[k] == T->shape[k];
    if (ok && r->L.version >= 2)
        ok = ck_attr_read_i64(s->d, "tile_rows", &tr, 1) >= 0 && tr == B->tile_rows &&
             ck_attr_read_i64(s->d, "tile_cols", &tc, 1) >= 0 && tc == B->tile_cols &&
             ck_attr_read_u64(s->d, "tiles_checksum", &tck, 1) >= 0 && tck == B->tiles_checksum;
    if (ok) return MP_OK;
    ck_h5_clear();
    return mp_err_set(e, MP_ECHECK, "%s/%s: attributes of dataset %s disagree with the index (tensor %s)", r->dir,
                      r->L.f[B->file].name, r->bi[j].dataset, T->name);
}

mp_code ckpt_verify(ckpt_reader *r, int64_t *bytes_read, mp_err *e) {
    ck_h5_init();
    int64_t start = r->bytes_read;
    mp_code rc = MP_OK;
    for (int t = 0; t < r->L.ntensors && rc == MP_OK; t++) rc = ck_layout_check_tensor(&r->L, t, 1, e);
    if (rc != MP_OK) return mp_err_wrap(e, "checkpoint %s", r->dir);
    char *tmp = NULL;
    size_t tmp_n = 0;
    XXH3_state_t *hs = XXH3_createState(), *ts = XXH3_createState();
    if (!hs || !ts) mp_oom(0, MP_MEM_CKPT, "a checksum state");
    int64_t pg_total = 0, pg_done = 0;   /* progress: tensor bytes of all boxes, of those checked */
    for (int64_t j = 0; j < r->L.nboxes && r->progress; j++)
        pg_total += ck_volume(r->L.t[r->L.b[j].tensor].ndim, r->L.b[j].shp) *
                    (int64_t)mp_dtype_size(r->L.t[r->L.b[j].tensor].dtype);
    for (int64_t j = 0; j < r->L.nboxes && rc == MP_OK; j++) {
        const ck_box *B = &r->L.b[j];
        geom g = box_geom(&r->L, B);
        src_t s;
        rc = open_box(r, j, &s, e);
        if (rc != MP_OK) break;
        rc = check_attrs(r, j, &s, e);
        /* the tile checksums: v2 read from the rank file (not cached: verify reads each box once) */
        uint64_t *own = NULL;
        size_t own_n = sizeof(uint64_t) * (size_t)B->ntiles;
        const uint64_t *tiles = r->L.version == 1 ? r->L.slabs + B->slab_first : NULL;
        if (rc == MP_OK && !tiles) {
            own = mp_malloc(own_n, MP_MEM_CKPT);
            rc = load_tiles(r, j, own, e);
            tiles = own;
        }
        int64_t per = batch_tile_rows(r, B, g.row);
        XXH3_64bits_reset(hs);
        for (int64_t a = 0; a < g.rows && rc == MP_OK; a += per * B->tile_rows) {
            int64_t b = a + per * B->tile_rows < g.rows ? a + per * B->tile_rows : g.rows;
            size_t need = (size_t)((b - a) * g.row);
            scratch_grow(&tmp, &tmp_n, need);
            rc = fetch(r, j, &s, a, b, 0, g.cols, tmp, e);
            if (rc == MP_OK) rc = check_tiles(r, j, tiles, tmp, a, b, 0, g.cols, ts, e);
            if (rc == MP_OK) XXH3_64bits_update(hs, tmp, need);
        }
        if (rc == MP_OK) {
            uint64_t h = XXH3_64bits_digest(hs);
            if (h != B->checksum) rc = checksum_error(r, j, 0, g.rows, 0, g.cols, B->checksum, h, e);
        }
        if (own) mp_free_acct(own, own_n, MP_MEM_CKPT);
        src_close(&s);
        if (rc == MP_OK && r->progress) {
            pg_done += ck_volume(r->L.t[B->tensor].ndim, B->shp) * (int64_t)mp_dtype_size(r->L.t[B->tensor].dtype);
            r->progress(r->progress_ctx, pg_done, pg_total);
        }
    }
    XXH3_freeState(hs);
    XXH3_freeState(ts);
    mp_free_acct(tmp, tmp_n, MP_MEM_CKPT);
    if (bytes_read) *bytes_read = r->bytes_read - start;
    return rc;
}
