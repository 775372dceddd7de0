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
 * Overlap (the read/verify pipeline): ckpt/reader_read.c. Fetching and the tile checksums of
 * both format versions: ckpt/reader_box.c.
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
#include "ckpt/reader_internal.h"
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
void ck_rd_drop_tiles(ckpt_reader *r) {
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
    ck_rd_drop_tiles(r);
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

/* v3: reads the box's rank file's /boxes table first (the reader is logically const: a cache); if that
 * fails the box's checksum and tile fields stay 0, and ckpt_read / ckpt_verify report why. */
const ckpt_box_info *ckpt_box_at(const ckpt_reader *r, int j) {
    assert(j >= 0 && j < r->L.nboxes);
    mp_err e;
    if (ck_rd_file_table((ckpt_reader *)r, r->L.b[j].file, &e) != MP_OK) ck_h5_clear();
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

/* The tile cache's bound for a scratch bound of scratch bytes (see ck_rd_tile_cache_max). */
static size_t tile_cache_bound(size_t scratch) {
    size_t m = scratch / 8;
    return m < ((size_t)1 << 20) ? (size_t)1 << 20 : m > ((size_t)32 << 20) ? (size_t)32 << 20 : m;
}

size_t ck_rd_tile_cache_max(const ckpt_reader *r) { return tile_cache_bound(r->scratch); }

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
mp_code ck_rd_rank_file(ckpt_reader *r, int fi, hid_t *out, int *fd, mp_err *e) {
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
mp_code ck_rd_file_table(ckpt_reader *r, int fi, mp_err *e) {
    if (r->L.version < 3 || r->ftab[fi]) return MP_OK;
    hid_t f;
    MP_TRY(ck_rd_rank_file(r, fi, &f, NULL, e));
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
