/*
 * tests/ckpt/test_ckpt_write.c — the format-v2 writer of ckpt/ in one process (mp_comm_self): checksum
 * tile geometry, fill-callback boxes written in bands into the rank files of several ranks, and the
 * directory-mode commit (ckpt_save_begin_dir) with and without replacement.
 *
 * Values depend on (tensor, global element index) only, so expected data, box checksums and tile
 * checksums are computed here element by element, independently of the writer; the rank files are
 * also opened with HDF5 directly to check the tile arrays, their checksums and the attributes.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <hdf5.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>
#include "ckpt/ckpt.h"
#include "ckpt/read_pipe.h"
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------------------------- helpers */

/* Fill callback context: tensor tid of t; counts the bands and checks their shapes. */
typedef struct {
    int tid;
    const tu_tdesc *t;
    int64_t box_off[4], box_shp[4];   /* the box being filled (set by the test per box) */
    size_t fill_bytes;                /* the save's bound */
    int calls;
    int off_main;                     /* calls made on another thread than the test's */
    int first_off_main;               /* of which for the box's first band */
    int fail_at;                      /* > 0: the fail_at-th call fails */
} fillctx;

static pthread_t g_main;   /* the test's thread (set by save_fill) */

/* Sets c up for box off/shp of tensor tid (t), bound fill_bytes; fail_at > 0: that call fails. */
static void fillctx_init(fillctx *c, int tid, const tu_tdesc *t, const int64_t *off, const int64_t *shp,
                         size_t fill_bytes, int fail_at) {
    memset(c, 0, sizeof *c);
    c->tid = tid;
    c->t = t;
    memcpy(c->box_off, off, sizeof c->box_off);
    memcpy(c->box_shp, shp, sizeof c->box_shp);
    c->fill_bytes = fill_bytes;
    c->fail_at = fail_at;
}

/* One ctx per box, since fill calls do not say which box they are for beyond the coordinates. */
static mp_code fill_cb(void *vctx, const int64_t *off, const int64_t *shp, void *buf, mp_err *e) {
    fillctx *c = vctx;
    c->calls++;
    if (!pthread_equal(pthread_self(), g_main)) {
        c->off_main++;
        c->first_off_main += off[0] == c->box_off[0];
    }
    if (c->fail_at > 0 && c->calls == c->fail_at)
        return mp_err_set(e, MP_EIO, "synthetic source failure at row %lld", (long long)off[0]);
    /* a band of whole rows of the box, inside it */
    for (int d = 1; d < c->t->nd; d++) {
        cr_assert_eq(off[d], c->box_off[d]);
        cr_assert_eq(shp[d], c->box_shp[d]);
    }
    cr_assert(off[0] >= c->box_off[0] && off[0] + shp[0] <= c->box_off[0] + c->box_shp[0]);
    int64_t tr, tc;
    ckpt_tile_geometry(mp_dtype_size(c->t->dt), c->t->nd, c->box_shp, &tr, &tc);
    size_t rowb = (size_t)tu_numel(c->t->nd - 1, shp + 1) * mp_dtype_size(c->t->dt);
    int last = off[0] + shp[0] == c->box_off[0] + c->box_shp[0];
    cr_assert((off[0] - c->box_off[0]) % tr == 0, "band starts at row %lld, tile rows %lld", (long long)off[0],
              (long long)tr);
    if (!last) cr_assert(shp[0] % tr == 0, "band of %lld rows, tile rows %lld", (long long)shp[0], (long long)tr);
    cr_assert((size_t)shp[0] * rowb <= c->fill_bytes || shp[0] <= tr,
              "band of %lld rows (%zu bytes) over the bound %zu", (long long)shp[0], (size_t)shp[0] * rowb,
              c->fill_bytes);
    /* the band buffer is accounted as checkpoint memory */
    cr_assert(mp_mem_current(MP_MEM_CKPT) >= (int64_t)((size_t)shp[0] * rowb));
    tu_fill_box(TU_VALS_MAIN, c->tid, c->t, off, shp, buf);
    return MP_OK;
}

/* The 2x2 split of a 2-D (or more) tensor: part p (0..3) = row half p/2 x column half p%2. */
static void quarter(const tu_tdesc *t, int p, int64_t *off, int64_t *shp) {
    for (int d = 0; d < 4; d++) { off[d] = 0; shp[d] = d < t->nd ? t->shape[d] : 1; }
    int64_t h0 = t->shape[0] / 2, h1 = t->shape[1] / 2;
    off[0] = p / 2 ? h0 : 0;
    shp[0] = p / 2 ? t->shape[0] - h0 : h0;
    off[1] = p % 2 ? h1 : 0;
    shp[1] = p % 2 ? t->shape[1] - h1 : h1;
}

/* Reads the whole tensor tid and compares it with the expected values. */
static void expect_tensor(ckpt_reader *r, int tid, const tu_tdesc *t) {
    int64_t z[4] = {0};
    tu_expect_box(r, TU_VALS_MAIN, tid, t, z, t->shape);
}

/* Opens a rank file read-only with the reader's access properties (the reader may hold it open). */
static hid_t open_ro(const char *fp) {
    hid_t fapl = ck_h5_fapl(0);
    cr_assert(fapl >= 0);
    hid_t f = H5Fopen(fp, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    return f;
}

/* Reads attribute name of obj as memory type mt into v (H5T_NATIVE_INT64 / _UINT64); < 0 on failure. */
static herr_t read_attr(hid_t obj, const char *name, hid_t mt, void *v) {
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    if (a < 0) return -1;
    herr_t rc = H5Aread(a, mt, v);
    H5Aclose(a);
    return rc;
}

/* The tile checksums of a row-major box (shape shp of t's dtype) computed tile by tile. */
static uint64_t *expected_tiles(const tu_tdesc *t, const int64_t *shp, const void *data, int64_t *ntiles) {
    size_t es = mp_dtype_size(t->dt);
    int64_t tr, tc;
    ckpt_tile_geometry(es, t->nd, shp, &tr, &tc);
    int64_t rows = shp[0], cols = t->nd >= 2 ? shp[1] : 1, inner = tu_numel(t->nd, shp) / (rows * cols);
    int64_t nrb = (rows + tr - 1) / tr, ncb = (cols + tc - 1) / tc;
    *ntiles = nrb * ncb;
    cr_assert_eq(*ntiles, ck_tile_count(t->nd, shp, tr, tc));
    uint64_t *out = malloc(sizeof(uint64_t) * (size_t)*ntiles);
    char *tile = malloc((size_t)(tr * tc * inner) * es);
    for (int64_t i = 0; i < nrb; i++)
        for (int64_t j = 0; j < ncb; j++) {
            size_t at = 0;
            int64_t r1 = (i + 1) * tr < rows ? (i + 1) * tr : rows, c1 = (j + 1) * tc < cols ? (j + 1) * tc : cols;
            for (int64_t r = i * tr; r < r1; r++) {
                size_t seg = (size_t)((c1 - j * tc) * inner) * es;
                memcpy(tile + at, (const char *)data + (size_t)((r * cols + j * tc) * inner) * es, seg);
                at += seg;
            }
            out[i * ncb + j] = XXH3_64bits(tile, at);
        }
    free(tile);
    return out;
}

/* Checks box j of the checkpoint in dir against the expected data of tensor tid: the box checksum in
 * the index, the rank file's root attributes, the box dataset's attributes, the tile array (its
 * content computed here and its hash = tiles_checksum), and the chunking under zstd. */
static void check_box_on_disk(const char *dir, ckpt_reader *r, int j, int tid, const tu_tdesc *t, int world, int zstd) {
    const ckpt_box_info *B = ckpt_box_at(r, j);
    size_t n;
    void *want = tu_expected_box(TU_VALS_MAIN, tid, t, B->offset, B->shape, &n);
    cr_assert_eq(B->checksum, XXH3_64bits(want, n), "tensor %s box %d: checksum is not XXH3 of its data", t->name, j);
    int64_t tr, tc;
    ckpt_tile_geometry(mp_dtype_size(t->dt), t->nd, B->shape, &tr, &tc);
    cr_assert_eq(B->tile_rows, tr);
    cr_assert_eq(B->tile_cols, tc);
    char *fp = tu_path(dir, B->file);
    hid_t f = open_ro(fp);
    cr_assert(f >= 0, "opening %s", fp);
    int64_t v;
    cr_assert(read_attr(f, "format_version", H5T_NATIVE_INT64, &v) >= 0 && v == ckpt_reader_version(r),
              "%s: format_version %lld, the index's %d", fp, (long long)v, ckpt_reader_version(r));
    cr_assert(read_attr(f, "rank", H5T_NATIVE_INT64, &v) >= 0 && v == B->rank, "%s: rank attribute %lld, box rank %d",
              fp, (long long)v, B->rank);
    cr_assert(read_attr(f, "world_size", H5T_NATIVE_INT64, &v) >= 0 && v == world);
    hid_t d = H5Dopen2(f, B->dataset, H5P_DEFAULT);
    cr_assert(d >= 0, "%s: no dataset %s", fp, B->dataset);
    uint64_t ck, tck;
    cr_assert(read_attr(d, "checksum", H5T_NATIVE_UINT64, &ck) >= 0 && ck == B->checksum);
    cr_assert(read_attr(d, "tile_rows", H5T_NATIVE_INT64, &v) >= 0 && v == tr);
    cr_assert(read_attr(d, "tile_cols", H5T_NATIVE_INT64, &v) >= 0 && v == tc);
    cr_assert(read_attr(d, "tiles_checksum", H5T_NATIVE_UINT64, &tck) >= 0);
    cr_assert(H5Aexists(d, "slab_rows") == 0 && H5Aexists(d, "slab_checksums") == 0, "v2 box with slab attributes");
    hid_t dcpl = H5Dget_create_plist(d);
    if (zstd) {
        hsize_t ch[4];
        cr_assert_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
        cr_assert_eq(H5Pget_chunk(dcpl, 4, ch), t->nd);
        /* whole tile rows of one column block, about CK_CHUNK_BYTES (docs/FORMAT.md) */
        int64_t tile_bytes = (int64_t)mp_dtype_size(t->dt) * tr * (t->nd >= 2 ? tc : 1);
        for (int k = 2; k < t->nd; k++) tile_bytes *= B->shape[k];
        int64_t per = CK_CHUNK_BYTES / tile_bytes, crows = tr * (per > 1 ? per : 1);
        cr_assert_eq((int64_t)ch[0], crows < B->shape[0] ? crows : B->shape[0]);
        cr_assert_eq((int64_t)ch[0] % tr == 0 || (int64_t)ch[0] == B->shape[0], 1, "chunks cut tiles");
        if (t->nd >= 2) cr_assert_eq((int64_t)ch[1], tc);
    } else {
        cr_assert_eq(H5Pget_layout(dcpl), H5D_CONTIGUOUS);
    }
    H5Pclose(dcpl);
    H5Dclose(d);
    /* the tile array */
    char tname[CK_DSET_MAX];
    const char *bx = strrchr(B->dataset, '/');
    cr_assert(bx && !strncmp(bx, "/box_", 5));
    snprintf(tname, sizeof tname, "%.*s/tiles_%s", (int)(bx - B->dataset), B->dataset, bx + 5);
    hid_t td = H5Dopen2(f, tname, H5P_DEFAULT);
    cr_assert(td >= 0, "%s: no tile dataset %s", fp, tname);
    hid_t tt = H5Dget_type(td), ts = H5Dget_space(td);
    cr_assert(H5Tequal(tt, H5T_STD_U64LE) > 0);
    cr_assert_eq(H5Sget_simple_extent_ndims(ts), 1);
    hsize_t nt;
    H5Sget_simple_extent_dims(ts, &nt, NULL);
    int64_t want_nt;
    uint64_t *want_tiles = expected_tiles(t, B->shape, want, &want_nt);
    cr_assert_eq((int64_t)nt, want_nt);
    cr_assert_eq(B->ntiles, want_nt);
    uint64_t *tiles = malloc(sizeof(uint64_t) * nt);
    cr_assert(H5Dread(td, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, tiles) >= 0);
    cr_assert(memcmp(tiles, want_tiles, sizeof(uint64_t) * nt) == 0, "%s %s: tile checksums differ", fp, tname);
    cr_assert_eq(XXH3_64bits(tiles, sizeof(uint64_t) * nt), tck, "%s: tiles_checksum is not XXH3 of %s", fp, tname);
    hid_t tp = H5Dget_create_plist(td);
    cr_assert_eq(H5Pget_layout(tp), H5D_CONTIGUOUS);
    H5Pclose(tp);
    H5Tclose(tt);
    H5Sclose(ts);
    H5Dclose(td);
    H5Fclose(f);
    free(tiles);
    free(want_tiles);
    free(want);
    free(fp);
}

/* ------------------------------------------------------------------------------------- geometry */

Test(ckpt_write, tile_geometry) {
    struct { size_t es; int nd; int64_t shp[4]; int64_t tr, tc, nt; } c[] = {
        {4, 2, {4096, 4096}, 2, 512, 2048 * 8},          /* b = 8: 2 KiB segments, 4 KiB tiles */
        {4, 1, {64}, 64, 1, 1},                           /* 1-D: 256 B tiles = 64 rows, the whole box */
        {4, 1, {100000}, 64, 1, 1563},                    /* 1-D: 256 B of rows per tile */
        {4, 2, {1000, 258}, 8, 129, 125 * 2},            /* 258 = 2 * 129: b = 2, 516 B segments */
        {4, 2, {100, 64}, 16, 64, 7},                     /* 64/2 * 4 B = 128 < 256: b = 1 */
        {4, 2, {100, 128}, 16, 64, 7 * 2},                /* 128/2 * 4 = 256: b = 2 (4 and 8 too small) */
        {2, 2, {10, 1024}, 10, 128, 8},                   /* bf16: 128 * 2 = 256: b = 8 */
        {4, 3, {5, 16, 8}, 5, 8, 2},                      /* inner 8: 8 entries * 32 B = 256: b = 2 */
        {4, 2, {3, 100000}, 1, 12500, 3 * 8},             /* a segment over 4 KiB: one row per tile */
        {4, 2, {7, 1}, 7, 1, 1},                          /* one column */
        {4, 2, {50, 7}, 50, 7, 1},                        /* odd cols: b = 1 */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        int64_t tr = -1, tc = -1;
        ckpt_tile_geometry(c[i].es, c[i].nd, c[i].shp, &tr, &tc);
        cr_assert_eq(tc, c[i].tc, "case %zu: tile_cols %lld, want %lld", i, (long long)tc, (long long)c[i].tc);
        cr_assert_eq(tr, c[i].tr, "case %zu: tile_rows %lld, want %lld", i, (long long)tr, (long long)c[i].tr);
        int64_t nt = ck_tile_count(c[i].nd, c[i].shp, tr, tc);
        cr_assert_eq(nt, c[i].nt, "case %zu: %lld tiles, want %lld", i, (long long)nt, (long long)c[i].nt);
    }
}

/* ------------------------------------------------------------------------------------- fill boxes */

static const tu_tdesc g_t[] = {
    {"model/w", MP_F32, 2, {300, 1024}},          /* quarters of 150 x 512: 64-row tiles, 8 col blocks */
    {"model/b", MP_F32, 1, {1000}},               /* 4 row ranges: one column block */
    {"model/h.bf16", MP_BF16, 3, {21, 10, 6}},    /* quarters: 3-D, bf16 */
    {"extra/i", MP_I32, 2, {40, 3}},              /* row halves into file ranks 1 and 3 */
};
#define NT ((int)(sizeof g_t / sizeof g_t[0]))

/* Box p of tensor ti and its file rank: quarters of 2-D+ tensors into ranks 0..3, 1-D in 4 row
 * ranges, extra/i in two halves (ranks 1 and 3). Returns 0 when tensor ti has no box p. */
static int plan_box(int ti, int p, int64_t *off, int64_t *shp, int *file_rank) {
    const tu_tdesc *t = &g_t[ti];
    if (ti == 3) {
        if (p >= 2) return 0;
        for (int d = 0; d < 4; d++) { off[d] = 0; shp[d] = d < t->nd ? t->shape[d] : 1; }
        off[0] = p ? 17 : 0;
        shp[0] = p ? t->shape[0] - 17 : 17;
        *file_rank = p ? 3 : 1;
        return 1;
    }
    if (p >= 4) return 0;
    if (t->nd == 1) {
        for (int d = 0; d < 4; d++) { off[d] = 0; shp[d] = 1; }
        off[0] = p * 250;
        shp[0] = 250;
    } else {
        quarter(t, p, off, shp);
    }
    *file_rank = p;
    return 1;
}

/* Saves all of g_t as fill boxes from one process (world_size 4) into dir; ctxs receives the fill
 * contexts (32 of them). fail_box/fail_call: make that box's fail_call-th call fail (-1: none).
 * any_thread: opts.fill_any_thread. */
static mp_code save_fill(const char *dir, size_t fill_bytes, int zstd, int any_thread, int fail_box, int fail_call,
                         fillctx *ctxs, int *nctx, mp_err *e) {
    mp_comm *w = mp_comm_self();
    g_main = pthread_self();
    /* fills allowed off the caller's thread run on the helper, never taken back by a wait that finds
     * one not yet started: on a loaded machine (ctest -j2 beside MPI tests) the helper could otherwise
     * lose every race and the "some fills ran on the helper" checks below fail by chance */
    ck_worker_set_stealing(!any_thread);
    ckpt_save_opts o = {0};
    o.world_size = 4;
    o.fill_any_thread = any_thread;
    o.fill_bytes = fill_bytes;
    o.zstd_level = zstd;
    ckpt_save *s;
    mp_code rc = ckpt_save_begin_dir(&s, w, dir, 7, &o, 0, e);
    if (rc != MP_OK) { w->ops->destroy(w); return rc; }
    int nb = 0;
    for (int ti = 0; ti < NT; ti++) {
        int64_t off[4], shp[4];
        int fr;
        for (int p = 0; plan_box(ti, p, off, shp, &fr); p++) {
            fillctx *c = &ctxs[nb];
            fillctx_init(c, ti, &g_t[ti], off, shp, fill_bytes, nb == fail_box ? fail_call : 0);
            mp_err ae;
            cr_assert_eq(ckpt_save_add_fill(s, fr, g_t[ti].name, g_t[ti].dt, g_t[ti].nd, g_t[ti].shape, off, shp, fill_cb,
                                            c, &ae), MP_OK, "%s", ae.msg);
            nb++;
        }
    }
    *nctx = nb;
    ckpt_save_meta(s, "note", "fill test", NULL);
    ckpt_stats st;
    rc = ckpt_save_commit(s, &st, e);
    ckpt_save_free(s);
    w->ops->destroy(w);
    return rc;
}

static void check_fill_save(int zstd, int any_thread) {
    char *tmp = tu_mkdtemp("ckw_fill");
    char *dir = tu_path(tmp, "out/ckpt");   /* parents created */
    fillctx ctxs[32];
    int nctx = 0;
    size_t fill_bytes = 100 << 10;   /* 100 KiB: three 16-row tile rows of model/w (32 KiB each): bands of 48 rows */
    int64_t mem0 = mp_mem_current(MP_MEM_CKPT);
    mp_err e;
    mp_code rc = save_fill(dir, fill_bytes, zstd, any_thread, -1, 0, ctxs, &nctx, &e);
    cr_assert_eq(rc, MP_OK, "%s", e.msg);
    /* fills stay on the caller's thread unless the save allows others (group.c's receive over MPI);
     * allowed, the helper produces the bands after the first of each file (save_fill turned off the
     * waits' stealing, so they all run there) */
    int off = 0, first = 0;
    for (int i = 0; i < nctx; i++) off += ctxs[i].off_main, first += ctxs[i].first_off_main;
    if (!any_thread || !ck_h5_threadsafe()) cr_assert_eq(off, 0, "%d fills ran off the caller's thread", off);
    else cr_assert(off > 0 && first > 0, "fill_any_thread: %d fills on the helper, %d of them a box's first band "
                   "(produced while the file's previous box was written)", off, first);
    cr_assert_eq(mp_mem_current(MP_MEM_CKPT), mem0, "band buffer not given back");
    /* model/w quarters are 150 rows: bands 48 + 48 + 48 + 6 */
    for (int i = 0; i < 4; i++) cr_assert_eq(ctxs[i].calls, 4, "box %d: %d bands", i, ctxs[i].calls);
    char *partial = tu_path(tmp, "out/ckpt.partial"), *latest = tu_path(tmp, "out/latest");
    cr_assert(!mp_fs_exists(partial) && !mp_fs_exists(latest));
    for (int r = 0; r < 4; r++) {
        char name[32];
        snprintf(name, sizeof name, "rank_%05d.h5", r);
        char *fp = tu_path(dir, name);
        cr_assert(mp_fs_exists(fp), "%s missing", fp);
        free(fp);
    }
    ckpt_reader *rd;
    cr_assert_eq(ckpt_open(&rd, dir, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_reader_world(rd), 4);
    cr_assert_eq(ckpt_reader_version(rd), CKPT_FORMAT_VERSION);
    cr_assert_eq(ckpt_reader_step(rd), 7);
    for (int ti = 0; ti < NT; ti++) {
        expect_tensor(rd, ti, &g_t[ti]);
        int t = ckpt_tensor_find(rd, g_t[ti].name);
        cr_assert(t >= 0);
        const ckpt_tensor_info *T = ckpt_tensor_at(rd, t);
        for (int j = T->box_first; j < T->box_first + T->nboxes; j++) check_box_on_disk(dir, rd, j, ti, &g_t[ti], 4, zstd);
    }
    cr_assert_eq(ckpt_verify(rd, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_close(rd);
    tu_rm_rf(tmp);
    free(partial);
    free(latest);
    free(dir);
    free(tmp);
}

Test(ckpt_write, fill_boxes_four_file_ranks_one_process) { check_fill_save(0, 0); }
Test(ckpt_write, fill_boxes_four_file_ranks_zstd) { check_fill_save(3, 0); }
Test(ckpt_write, fill_boxes_produced_on_the_helper) { check_fill_save(0, 1); }
Test(ckpt_write, fill_boxes_produced_on_the_helper_zstd) { check_fill_save(3, 1); }

/* Saves model/w (g_t[0]) into dir, all on rank 0: as pointer boxes, or as fill boxes; version: the
 * format_version option (0: the default). */
static void save_w(const char *dir, int as_fill, int zstd, int version) {
    mp_comm *w = mp_comm_self();
    ckpt_save_opts o = {0};
    o.zstd_level = zstd;
    o.format_version = version;
    o.fill_bytes = 50 << 10;
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 1, &o, 0, &e), MP_OK, "%s", e.msg);
    void *bufs[4] = {0};
    fillctx ctxs[4];
    for (int p = 0; p < 4; p++) {
        int64_t off[4], shp[4];
        quarter(&g_t[0], p, off, shp);
        if (as_fill) {
            fillctx_init(&ctxs[p], 0, &g_t[0], off, shp, o.fill_bytes, 0);
            cr_assert_eq(ckpt_save_add_fill(s, 0, g_t[0].name, MP_F32, 2, g_t[0].shape, off, shp, fill_cb, &ctxs[p], &e),
                         MP_OK, "%s", e.msg);
        } else {
            bufs[p] = tu_expected_box(TU_VALS_MAIN, 0, &g_t[0], off, shp, NULL);
            cr_assert_eq(ckpt_save_add(s, g_t[0].name, MP_F32, 2, g_t[0].shape, off, shp, bufs[p], &e), MP_OK, "%s",
                         e.msg);
        }
    }
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    for (int p = 0; p < 4; p++) free(bufs[p]);
    w->ops->destroy(w);
}

/* The raw bytes (decompressed) of dataset ds of file fp, and its attribute attr (u64 or i64). */
static void *read_dataset(const char *fp, const char *ds, hid_t mt, size_t *n) {
    hid_t f = open_ro(fp);
    cr_assert(f >= 0, "%s", fp);
    hid_t d = H5Dopen2(f, ds, H5P_DEFAULT);
    cr_assert(d >= 0, "%s: %s", fp, ds);
    hid_t t = mt >= 0 ? mt : H5Dget_type(d);
    hid_t sp = H5Dget_space(d);
    *n = (size_t)H5Sget_simple_extent_npoints(sp) * H5Tget_size(t);
    void *b = malloc(*n);
    cr_assert(H5Dread(d, t, H5S_ALL, H5S_ALL, H5P_DEFAULT, b) >= 0);
    if (mt < 0) H5Tclose(t);
    H5Sclose(sp);
    H5Dclose(d);
    H5Fclose(f);
    return b;
}

static void pointer_vs_fill(int zstd) {
    char *tmp = tu_mkdtemp("ckw_same");
    char *a = tu_path(tmp, "ptr"), *b = tu_path(tmp, "fill");
    save_w(a, 0, zstd, 0);
    save_w(b, 1, zstd, 0);
    char *fa = tu_path(a, "rank_00000.h5"), *fb = tu_path(b, "rank_00000.h5");
    for (int k = 0; k < 4; k++) {
        char ds[64], ts[64];
        snprintf(ds, sizeof ds, "/model/w/box_%d", k);
        snprintf(ts, sizeof ts, "/model/w/tiles_%d", k);
        size_t na, nb;
        void *da = read_dataset(fa, ds, -1, &na), *db = read_dataset(fb, ds, -1, &nb);
        cr_assert_eq(na, nb);
        cr_assert(memcmp(da, db, na) == 0, "%s differs between pointer and fill boxes", ds);
        free(da);
        free(db);
        da = read_dataset(fa, ts, H5T_NATIVE_UINT64, &na);
        db = read_dataset(fb, ts, H5T_NATIVE_UINT64, &nb);
        cr_assert(na == nb && memcmp(da, db, na) == 0, "%s differs between pointer and fill boxes", ts);
        free(da);
        free(db);
    }
    ckpt_reader *ra, *rb;
    mp_err e;
    cr_assert_eq(ckpt_open(&ra, a, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_open(&rb, b, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_num_boxes(ra), 4);
    cr_assert_eq(ckpt_num_boxes(rb), 4);
    for (int j = 0; j < 4; j++) {
        cr_assert_eq(ckpt_box_at(ra, j)->checksum, ckpt_box_at(rb, j)->checksum);
        cr_assert_str_eq(ckpt_box_at(ra, j)->dataset, ckpt_box_at(rb, j)->dataset);
        check_box_on_disk(a, ra, j, 0, &g_t[0], 1, zstd);
    }
    expect_tensor(rb, 0, &g_t[0]);
    ckpt_close(ra);
    ckpt_close(rb);
    tu_rm_rf(tmp);
    free(fa);
    free(fb);
    free(a);
    free(b);
    free(tmp);
}

Test(ckpt_write, pointer_and_fill_boxes_write_the_same_datasets) { pointer_vs_fill(0); }
Test(ckpt_write, pointer_and_fill_boxes_write_the_same_datasets_zstd) { pointer_vs_fill(2); }

/* The uint64 root attribute index_checksum of dir/index.h5. */
static uint64_t index_checksum(const char *dir) {
    char *ip = tu_path(dir, "index.h5");
    hid_t f = open_ro(ip);
    uint64_t h = 0;
    cr_assert(f >= 0 && read_attr(f, "index_checksum", H5T_NATIVE_UINT64, &h) >= 0, "%s", ip);
    H5Fclose(f);
    free(ip);
    return h;
}

/* Version 4 on request (ckpt_save_opts.format_version): the same layout as 3, read back and verified, the
 * number in index.h5 and the rank file (check_box_on_disk) and in the index checksum; a reader that knows 3
 * at most (what every build before version 4 is) refuses it with the message those builds print; versions
 * this build does not write are refused at begin. */
Test(ckpt_write, format_version_4_on_request) {
    char *tmp = tu_mkdtemp("ckw_v4");
    char *d3 = tu_path(tmp, "v3"), *d4 = tu_path(tmp, "v4");
    save_w(d3, 0, 0, 0);
    save_w(d4, 0, 0, 4);
    ckpt_reader *r3, *r4;
    mp_err e;
    cr_assert_eq(ckpt_open(&r3, d3, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_open(&r4, d4, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_reader_version(r3), 3);
    cr_assert_eq(ckpt_reader_version(r4), 4);
    cr_assert_eq(ckpt_num_boxes(r4), 4);
    for (int j = 0; j < 4; j++) {
        cr_assert_eq(ckpt_box_at(r4, j)->checksum, ckpt_box_at(r3, j)->checksum);
        check_box_on_disk(d4, r4, j, 0, &g_t[0], 1, 0);
    }
    expect_tensor(r4, 0, &g_t[0]);
    cr_assert_eq(ckpt_verify(r4, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_close(r3);
    ckpt_close(r4);
    cr_assert_neq(index_checksum(d3), index_checksum(d4), "the index checksum does not cover the version");
    ck_read_version_max = 3;   /* a build of format version 3 */
    mp_code rc = ckpt_open(&r4, d4, &e);
    mp_err e3;
    mp_code rc3 = ckpt_open(&r3, d3, &e3);
    ck_read_version_max = CKPT_FORMAT_VERSION_MAX;
    cr_assert_eq(rc, MP_ECHECK);
    cr_assert(strstr(e.msg, "index.h5: format version 4; this build reads versions 1..3 (a newer meshpoint wrote it?)"),
              "%s", e.msg);
    cr_assert_eq(rc3, MP_OK, "%s", e3.msg);
    ckpt_close(r3);
    mp_comm *w = mp_comm_self();
    int bad[] = {2, 5, -1};
    for (int i = 0; i < 3; i++) {
        ckpt_save_opts o = {.format_version = bad[i]};
        ckpt_save *s;
        char *d = tu_path(tmp, "bad");
        cr_assert_eq(ckpt_save_begin_dir(&s, w, d, 1, &o, 0, &e), MP_EINPUT, "format_version %d", bad[i]);
        char want[64];
        snprintf(want, sizeof want, "format version %d: this build writes versions 3..4", bad[i]);
        cr_assert(strstr(e.msg, want), "%s", e.msg);
        cr_assert(!mp_fs_exists(d));
        free(d);
    }
    w->ops->destroy(w);
    tu_rm_rf(tmp);
    free(d3);
    free(d4);
    free(tmp);
}

/* A fill failing at box fail_box's fail_call-th band fails the save with the callback's message,
 * the tensor and the rank file, and leaves nothing behind. */
static void fill_error_case(int any_thread, int fail_box, int fail_call, const char *want_row, const char *want_tensor,
                            const char *want_file) {
    char *tmp = tu_mkdtemp("ckw_ferr");
    char *dir = tu_path(tmp, "ckpt"), *partial = tu_path(tmp, "ckpt.partial");
    fillctx ctxs[32];
    int nctx;
    mp_err e;
    int64_t mem0 = mp_mem_current(MP_MEM_CKPT);
    mp_code rc = save_fill(dir, 100 << 10, 0, any_thread, fail_box, fail_call, ctxs, &nctx, &e);
    cr_assert_eq(rc, MP_EIO, "rc %d: %s", rc, e.msg);
    cr_assert(strstr(e.msg, want_row), "%s", e.msg);
    cr_assert(strstr(e.msg, want_tensor), "%s", e.msg);
    cr_assert(strstr(e.msg, want_file), "%s", e.msg);
    cr_assert(strstr(e.msg, "producing rows"), "%s", e.msg);
    cr_assert(!mp_fs_exists(dir) && !mp_fs_exists(partial), "a failed save left %s or its .partial", dir);
    cr_assert_eq(mp_mem_current(MP_MEM_CKPT), mem0);
    tu_rm_rf(tmp);
    free(dir);
    free(partial);
    free(tmp);
}

/* box 2 (model/w, rank 2), band 2 */
Test(ckpt_write, fill_error_fails_the_save_and_leaves_nothing) {
    fill_error_case(0, 2, 2, "synthetic source failure at row 198", "model/w", "rank_00002.h5");
}
Test(ckpt_write, fill_error_on_the_helper) {
    fill_error_case(1, 2, 2, "synthetic source failure at row 198", "model/w", "rank_00002.h5");
}
/* box 4 (model/b rows 0..250, rank 0), its first band: on the helper, produced while box 0's last band
 * (model/w, the same file) is written */
Test(ckpt_write, fill_error_across_boxes_on_the_helper) {
    fill_error_case(1, 4, 1, "synthetic source failure at row 0", "model/b", "rank_00000.h5");
}

/* The context of model/b (g_t[1]) as one whole box of 1000 rows under the bound fill_bytes. */
static fillctx ctx_model_b(size_t fill_bytes) {
    int64_t off[4] = {0}, shp[4] = {1000};
    fillctx c;
    fillctx_init(&c, 0, &g_t[1], off, shp, fill_bytes, 0);
    return c;
}

/* Ends a refused save: frees s and w, asserts that dir was never created, removes tmp, frees both. */
static void refused_end(ckpt_save *s, mp_comm *w, char *tmp, char *dir) {
    ckpt_save_free(s);
    w->ops->destroy(w);
    cr_assert(!mp_fs_exists(dir));
    tu_rm_rf(tmp);
    free(dir);
    free(tmp);
}

Test(ckpt_write, file_rank_out_of_range_is_refused) {
    char *tmp = tu_mkdtemp("ckw_frank");
    char *dir = tu_path(tmp, "ckpt");
    mp_comm *w = mp_comm_self();
    ckpt_save_opts o = {0};
    o.world_size = 4;
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 0, &o, 0, &e), MP_OK, "%s", e.msg);
    fillctx c = ctx_model_b(1 << 20);
    int64_t off[1] = {0}, shp[1] = {1000};
    mp_code rc = ckpt_save_add_fill(s, 4, "model/b", MP_F32, 1, g_t[1].shape, off, shp, fill_cb, &c, &e);
    cr_assert_eq(rc, MP_EINPUT);
    cr_assert(strstr(e.msg, "model/b") && strstr(e.msg, "4"), "%s", e.msg);
    rc = ckpt_save_add_fill(s, -1, "model/b", MP_F32, 1, g_t[1].shape, off, shp, fill_cb, &c, &e);
    cr_assert_eq(rc, MP_EINPUT);
    cr_assert_eq(ckpt_save_add_fill(s, 3, "model/b", MP_F32, 1, g_t[1].shape, off, shp, fill_cb, &c, &e), MP_OK);
    /* the refusal is remembered: the commit fails and leaves nothing */
    rc = ckpt_save_commit(s, NULL, &e);
    cr_assert_eq(rc, MP_EINPUT, "%s", e.msg);
    cr_assert(strstr(e.msg, "model/b"), "%s", e.msg);
    cr_assert_eq(c.calls, 0, "nothing is written after a refused box");
    refused_end(s, w, tmp, dir);
}

/* A save keeps the first error of this process (ck_stage_set: the first error wins), whatever failed
 * after it, and its agreed result stays with the handle: a later wait or poll returns the same. */
Test(ckpt_write, first_error_of_a_save_wins) {
    char *tmp = tu_mkdtemp("ckw_first");
    char *dir = tu_path(tmp, "ckpt");
    mp_comm *w = mp_comm_self();
    ckpt_save_opts o = {0};
    o.world_size = 4;
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 0, &o, 0, &e), MP_OK, "%s", e.msg);
    fillctx c = ctx_model_b(1 << 20);
    int64_t off[1] = {0}, shp[1] = {1000};
    float x[1000] = {0};
    cr_assert_eq(ckpt_save_add(s, "model/a", (mp_dtype)99, 1, g_t[1].shape, off, shp, x, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "unsupported dtype"), "%s", e.msg);
    cr_assert_eq(ckpt_save_add_fill(s, 4, "model/b", MP_F32, 1, g_t[1].shape, off, shp, fill_cb, &c, &e), MP_EINPUT);
    mp_err later;
    mp_err_set(&later, MP_EIO, "a later failure");
    ckpt_save_fail(s, MP_EIO, &later);
    mp_code rc = ckpt_save_commit(s, NULL, &e);
    cr_assert_eq(rc, MP_EINPUT, "%s", e.msg);
    cr_assert(strstr(e.msg, "model/a") && strstr(e.msg, "unsupported dtype"), "%s", e.msg);
    cr_assert(!strstr(e.msg, "model/b") && !strstr(e.msg, "later"), "%s", e.msg);
    mp_err again;
    cr_assert_eq(ckpt_save_wait(s, NULL, &again), MP_EINPUT);
    cr_assert_str_eq(again.msg, e.msg);
    int done = 0;
    cr_assert_eq(ckpt_save_poll(s, &done, NULL, &again), MP_EINPUT);
    cr_assert(done);
    cr_assert_str_eq(again.msg, e.msg);
    refused_end(s, w, tmp, dir);
}

Test(ckpt_write, async_save_refuses_fill_boxes) {
    char *tmp = tu_mkdtemp("ckw_async");
    char *dir = tu_path(tmp, "ckpt");
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 0, NULL, 0, &e), MP_OK, "%s", e.msg);
    fillctx c = ctx_model_b(16 << 20);
    int64_t off[1] = {0}, shp[1] = {1000};
    cr_assert_eq(ckpt_save_add_fill(s, 0, "model/b", MP_F32, 1, g_t[1].shape, off, shp, fill_cb, &c, &e), MP_OK);
    cr_assert_eq(ckpt_save_start(s, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "model/b"), "%s", e.msg);
    cr_assert_eq(ckpt_save_wait(s, NULL, &e), MP_EINPUT);
    refused_end(s, w, tmp, dir);
}

/* ------------------------------------------------------------------------------------- dir mode */

static void replace_case(int fallback) {
    if (fallback) setenv("MP_FAULT", "no_rename_exchange", 1);
    char *tmp = tu_mkdtemp("ckw_repl");
    char *dir = tu_path(tmp, "ckpt"), *marker = tu_path(tmp, "ckpt/old_marker");
    char *partial = tu_path(tmp, "ckpt.partial"), *aside = tu_path(tmp, "ckpt.replaced");
    cr_assert_eq(mkdir(dir, 0777), 0);
    tu_write_file(marker, "old\n");
    /* without replace: refused on begin, the old directory untouched */
    mp_comm *w = mp_comm_self();
    ckpt_save *s = NULL;
    mp_err e;
    mp_code rc = ckpt_save_begin_dir(&s, w, dir, 3, NULL, 0, &e);
    cr_assert_eq(rc, MP_EINPUT);
    cr_assert(s == NULL);
    cr_assert(strstr(e.msg, "already exists") && strstr(e.msg, "--force") && strstr(e.msg, dir), "%s", e.msg);
    cr_assert(mp_fs_exists(marker) && !mp_fs_exists(partial));
    w->ops->destroy(w);
    /* with replace: the old content stays until the commit, then is gone */
    w = mp_comm_self();
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 3, NULL, 1, &e), MP_OK, "%s", e.msg);
    cr_assert(mp_fs_exists(marker) && mp_fs_is_dir(partial));
    int64_t off[1] = {0};
    size_t n;
    void *data = tu_expected_box(TU_VALS_MAIN, 1, &g_t[1], off, g_t[1].shape, &n);
    cr_assert_eq(ckpt_save_add(s, g_t[1].name, MP_F32, 1, g_t[1].shape, off, g_t[1].shape, data, &e), MP_OK);
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    w->ops->destroy(w);
    free(data);
    cr_assert(!mp_fs_exists(marker), "old content survived the replacement");
    cr_assert(!mp_fs_exists(partial) && !mp_fs_exists(aside));
    ckpt_reader *r;
    cr_assert_eq(ckpt_open(&r, dir, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_reader_step(r), 3);
    expect_tensor(r, 1, &g_t[1]);
    ckpt_close(r);
    tu_rm_rf(tmp);
    free(dir);
    free(marker);
    free(partial);
    free(aside);
    free(tmp);
}

Test(ckpt_write, begin_dir_refuses_existing_and_replaces_atomically) { replace_case(0); }
Test(ckpt_write, begin_dir_replace_without_rename_exchange) { replace_case(1); }

Test(ckpt_write, begin_dir_refuses_unusable_names) {
    const char *bad[] = {"", "/", "a/..", "."};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_comm *w = mp_comm_self();
        ckpt_save *s = NULL;
        mp_err e;
        mp_code rc = ckpt_save_begin_dir(&s, w, bad[i], 0, NULL, 1, &e);
        cr_assert_eq(rc, MP_EINPUT, "'%s': rc %d %s", bad[i], rc, e.msg);
        cr_assert(s == NULL);
        w->ops->destroy(w);
    }
}

Test(ckpt_write, begin_dir_stale_partial_is_replaced) {
    char *tmp = tu_mkdtemp("ckw_stale");
    char *dir = tu_path(tmp, "ckpt"), *partial = tu_path(tmp, "ckpt.partial");
    char *junk = tu_path(tmp, "ckpt.partial/junk");
    cr_assert_eq(mkdir(partial, 0777), 0);
    tu_write_file(junk, "x");
    save_w(dir, 1, 0, 0);
    cr_assert(!mp_fs_exists(partial));
    ckpt_reader *r;
    mp_err e;
    cr_assert_eq(ckpt_open(&r, dir, &e), MP_OK, "%s", e.msg);
    expect_tensor(r, 0, &g_t[0]);
    ckpt_close(r);
    tu_rm_rf(tmp);
    free(dir);
    free(partial);
    free(junk);
    free(tmp);
}

/* ------------------------------------------------------------------------- compact link storage */

/* Visitor: fails the test at any group whose links live in dense storage (a fractal heap). */
static herr_t expect_compact(hid_t o, const char *name, const H5O_info_t *info, void *ctx) {
    if (info->type != H5O_TYPE_GROUP) return 0;
    H5G_info_t gi;
    cr_assert(H5Gget_info_by_name(o, name, &gi, H5P_DEFAULT) >= 0, "%s: %s", (const char *)ctx, name);
    cr_assert_eq(gi.storage_type, H5G_STORAGE_TYPE_COMPACT, "%s: group %s (%llu links) is stored densely",
                 (const char *)ctx, name, (unsigned long long)gi.nlinks);
    return 0;
}

/* Groups of more than 8 links (HDF5's dense threshold) in index.h5 and the rank file, /meta included,
 * keep their links in checksummed object headers: a flipped byte in dense storage's fractal heap
 * crashed libhdf5 inside ckpt_open (the corruption campaign, seed 61786). */
Test(ckpt_write, groups_stay_compact_past_eight_links) {
    char *tmp = tu_mkdtemp("ckw_compact");
    char *dir = tu_path(tmp, "ckpt");
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 3, NULL, 0, &e), MP_OK, "%s", e.msg);
    float v[4] = {1, 2, 3, 4};
    int64_t shape[1] = {4}, off[1] = {0};
    char name[64];
    for (int i = 0; i < 20; i++) {
        snprintf(name, sizeof name, "model/t%02d", i);
        cr_assert_eq(ckpt_save_add(s, name, MP_F32, 1, shape, off, shape, v, &e), MP_OK, "%s", e.msg);
        snprintf(name, sizeof name, "key%02d", i);
        ckpt_save_meta(s, name, "value", NULL);
    }
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    w->ops->destroy(w);
    const char *files[] = {"index.h5", "rank_00000.h5"};
    for (int i = 0; i < 2; i++) {
        char *fp = tu_path(dir, files[i]);
        hid_t f = tu_h5_open(fp, H5F_ACC_RDONLY);
        cr_assert(f >= 0, "%s", fp);
        expect_compact(f, ".", &(H5O_info_t){.type = H5O_TYPE_GROUP}, fp);
        cr_assert(H5Ovisit2(f, H5_INDEX_NAME, H5_ITER_INC, expect_compact, fp, H5O_INFO_BASIC) >= 0, "%s", fp);
        H5Fclose(f);
        free(fp);
    }
    ckpt_reader *r;
    cr_assert_eq(ckpt_open(&r, dir, &e), MP_OK, "%s", e.msg);
    ckpt_close(r);
    tu_rm_rf(tmp);
    free(dir);
    free(tmp);
}
