/*
 * tests/ckpt/test_ckpt_read.c — the checkpoint reader (ckpt/reader.c, ckpt/index.c) on format v2 and on
 * the format-v1 fixture of tests/data/ckpt_v1 (written by the v1 library, see its README.txt).
 *
 * v2: partial reads along dim 1 and dim 0 read only the checksum tiles they touch (the reader's byte
 * counters must say exactly how many), a flipped byte inside one tile fails every read touching that
 * tile and no other, a flipped byte in a box's tile checksum array fails partial reads and verify,
 * crafted index values (tile fields, overflowing offsets and shapes) are refused. v1: every tensor of
 * the fixture reads whole and in boxes across its saved boxes' and slabs' boundaries with the values
 * its generator wrote, ckpt_verify passes, and damage in a copy is caught.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "core/comm.h"
#include "tests/testutil.h"

/* ------------------------------------------------------------------------------------- helpers */

/* Saves tensors ts (ids 0.., values TU_VALS_V1FIX) as ONE box per tensor into root/step_<step>. */
static void save_whole(const char *root, int64_t step, const tu_tdesc *ts, int nt, int zstd) {
    mp_comm *w = mp_comm_self();
    ckpt_save_opts o = {.zstd_level = zstd};
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin(&s, w, root, step, &o, &e), MP_OK, "%s", e.msg);
    void *bufs[16];
    cr_assert(nt <= 16);
    for (int t = 0; t < nt; t++) {
        int64_t z[4] = {0};
        bufs[t] = tu_expected_box(TU_VALS_V1FIX, t, &ts[t], z, ts[t].shape, NULL);
        cr_assert_eq(ckpt_save_add(s, ts[t].name, ts[t].dt, ts[t].nd, ts[t].shape, z, ts[t].shape, bufs[t], &e), MP_OK,
                     "%s", e.msg);
    }
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    for (int t = 0; t < nt; t++) free(bufs[t]);
    w->ops->destroy(w);
}

/* Bytes read since the last call (resets the counters); *needed (may be NULL) gets bytes needed. */
static int64_t io_take(ckpt_reader *r, int64_t *needed) {
    int64_t got, need;
    ckpt_reader_io(r, &got, &need);
    ckpt_reader_io_reset(r);
    if (needed) *needed = need;
    return got;
}

/* ---------------------------------------------------------------------------- v2: partial reads */

/* The tile geometry of a box of t of shape shp (ckpt_tile_geometry: the writer's rule). */
static void geometry(const tu_tdesc *t, const int64_t *shp, int64_t *tr, int64_t *tc) {
    ckpt_tile_geometry(mp_dtype_size(t->dt), t->nd, shp, tr, tc);
}

/* Bytes of the tiles of t, saved as ONE box, that the region (qo, qs) touches: the rectangle of
 * touched tile rows x touched column blocks (what the reader must fetch, no more). With chunked
 * (zstd) datasets, HDF5 decompresses whole chunks (whole tile rows of one column block, about
 * CK_CHUNK_BYTES): the rows are rounded to those. */
static int64_t touched_bytes(const tu_tdesc *t, const int64_t *qo, const int64_t *qs, int chunked) {
    int64_t tr, tc;
    geometry(t, t->shape, &tr, &tc);
    int64_t rows = t->shape[0], cols = t->nd >= 2 ? t->shape[1] : 1;
    int64_t unit = (int64_t)mp_dtype_size(t->dt) * (t->nd > 2 ? tu_numel(t->nd - 2, t->shape + 2) : 1);
    int64_t rr = tr;
    if (chunked) {
        int64_t per = CK_CHUNK_BYTES / (tr * tc * unit);
        rr = tr * (per > 1 ? per : 1);
    }
    int64_t a = qo[0] / rr * rr, b = (qo[0] + qs[0] + rr - 1) / rr * rr;
    int64_t c0 = t->nd >= 2 ? qo[1] : 0, c1 = t->nd >= 2 ? qo[1] + qs[1] : 1;
    int64_t ca = c0 / tc * tc, cb = (c1 + tc - 1) / tc * tc;
    if (b > rows) b = rows;
    if (cb > cols) cb = cols;
    return (b - a) * (cb - ca) * unit;
}

/* 1 MiB, saved as one box: column blocks of 128 (the tp-8 split, 512-byte row segments). */
static const tu_tdesc g_w[] = {{"model/w", MP_F32, 2, {256, 1024}}};

Test(ckpt_read, v2_dim1_and_dim0_partial_reads_read_only_their_tiles) {
    char *root = tu_mkdtemp("ckpt_tiles");
    save_whole(root, 1, g_w, 1, 0);
    ckpt_reader *r = tu_open_step(root, 1);
    cr_assert_eq(ckpt_reader_version(r), CKPT_FORMAT_VERSION);
    const ckpt_box_info *b = ckpt_box_at(r, 0);
    int64_t tr, tc;
    geometry(&g_w[0], g_w[0].shape, &tr, &tc);
    cr_assert_eq(b->tile_rows, tr);
    cr_assert_eq(b->tile_cols, tc);
    cr_assert_eq(b->tile_cols, 128, "tile_cols %lld", (long long)b->tile_cols);
    cr_assert(tr >= 1 && tr <= 64 && 256 % tr == 0, "tile_rows %lld", (long long)tr);
    cr_assert_eq(b->ntiles, ck_tile_count(2, g_w[0].shape, tr, tc));
    cr_assert_eq(b->ntiles, (256 / tr) * 8);
    const int64_t tiles_bytes = b->ntiles * 8;
    int64_t need, got;
    /* the column blocks of a tp-8 split: exactly their tiles, plus the tile array once */
    for (int k = 0; k < 8; k++) {
        int64_t o[2] = {0, 128 * k}, s[2] = {256, 128};
        tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o, s);
        got = io_take(r, &need);
        cr_assert_eq(need, 256 * 128 * 4);
        cr_assert_eq(got, need + (k == 0 ? tiles_bytes : 0), "block %d: read %lld, needed %lld", k, (long long)got,
                     (long long)need);
    }
    /* a misaligned column range: only the touched tile rows x column blocks */
    int64_t o1[2] = {10, 100}, s1[2] = {40, 200};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o1, s1);
    got = io_take(r, &need);
    cr_assert_eq(need, 40 * 200 * 4);
    cr_assert_eq(got, touched_bytes(&g_w[0], o1, s1, 0), "read %lld", (long long)got);
    cr_assert(got <= (40 + 2 * tr) * 384 * 4);   /* rows rounded out to tiles, blocks 0..2 */
    /* along dim 0: rows 100..140, whole width */
    int64_t o2[2] = {100, 0}, s2[2] = {40, 1024};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o2, s2);
    got = io_take(r, &need);
    cr_assert_eq(need, 40 * 4096);
    cr_assert_eq(got, touched_bytes(&g_w[0], o2, s2, 0), "read %lld", (long long)got);
    cr_assert(got <= (40 + 2 * tr) * 4096);
    /* rows aligned to tiles: straight into the caller's buffer, nothing more than needed */
    int64_t o3[2] = {2 * tr, 0}, s3[2] = {2 * tr, 1024};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o3, s3);
    got = io_take(r, &need);
    cr_assert_eq(got, need);
    /* one element: one tile */
    int64_t o4[2] = {255, 1023}, s4[2] = {1, 1};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o4, s4);
    got = io_take(r, &need);
    cr_assert_eq(need, 4);
    cr_assert_eq(got, tr * 128 * 4);
    ckpt_close(r);
    /* a fresh reader: the whole box in one read, box checksum only (no tile array) */
    r = tu_open_step(root, 1);
    int64_t z[2] = {0, 0};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], z, g_w[0].shape);
    got = io_take(r, &need);
    cr_assert_eq(need, 256 * 1024 * 4);
    cr_assert_eq(got, need);
    /* a scratch bound below one tile row still reads (one tile row per batch) */
    ckpt_reader_set_scratch(r, 1);
    int64_t o5[2] = {3, 500}, s5[2] = {250, 300};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o5, s5);
    got = io_take(r, &need);
    cr_assert_eq(got, touched_bytes(&g_w[0], o5, s5, 0) + tiles_bytes, "read %lld", (long long)got);
    int64_t vb = 0;
    mp_err e;
    cr_assert_eq(ckpt_verify(r, &vb, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(vb, 256 * 1024 * 4 + tiles_bytes);
    got = io_take(r, &need);
    cr_assert_eq(got, vb, "verify's reads are counted too");
    cr_assert_eq(need, 0);
    ckpt_close(r);
    tu_rm_rf(root);
    free(root);
}

/* 1-D, 3-D and bf16 tensors, plain and zstd (chunks = tiles). */
static const tu_tdesc g_nd[] = {
    {"model/vec", MP_F32, 1, {100000}},
    {"model/cube", MP_F32, 3, {64, 16, 32}},
    {"model/half", MP_BF16, 2, {300, 2048}},
    {"model/w", MP_F32, 2, {256, 1024}},
};

/* Reads (o, s) of g_nd[t] (a fresh box of the reader: its tile array is fetched too) and checks the
 * bytes read. */
static void nd_read(ckpt_reader *r, int t, const int64_t *o, const int64_t *s, int chunked) {
    const tu_tdesc *d = &g_nd[t];
    const ckpt_box_info *b = ckpt_box_at(r, ckpt_tensor_at(r, ckpt_tensor_find(r, d->name))->box_first);
    int64_t tr, tc;
    geometry(d, d->shape, &tr, &tc);
    cr_assert(b->tile_rows == tr && b->tile_cols == tc && b->ntiles == ck_tile_count(d->nd, d->shape, tr, tc),
              "%s: tiles %lld x %lld (%lld)", d->name, (long long)b->tile_rows, (long long)b->tile_cols,
              (long long)b->ntiles);
    ckpt_reader_io_reset(r);
    tu_expect_box(r, TU_VALS_V1FIX, t, d, o, s);
    int64_t need, got = io_take(r, &need);
    cr_assert_eq(need, tu_numel(d->nd, s) * (int64_t)mp_dtype_size(d->dt));
    cr_assert_eq(got, touched_bytes(d, o, s, chunked) + b->ntiles * 8, "%s: read %lld, needed %lld", d->name, (long long)got,
                 (long long)need);
}

static void nd_reads(ckpt_reader *r, int chunked) {
    const ckpt_box_info *bv = ckpt_box_at(r, ckpt_tensor_at(r, ckpt_tensor_find(r, "model/vec"))->box_first);
    cr_assert_eq(bv->tile_cols, 1);
    cr_assert(bv->ntiles > 1);
    int64_t o1[1] = {5000}, s1[1] = {4000};
    nd_read(r, 0, o1, s1, chunked);
    const ckpt_box_info *bc = ckpt_box_at(r, ckpt_tensor_at(r, ckpt_tensor_find(r, "model/cube"))->box_first);
    cr_assert(bc->tile_cols < 16, "cube: tile_cols %lld", (long long)bc->tile_cols);   /* dim 1 is cut */
    int64_t o2[3] = {10, 3, 5}, s2[3] = {40, 6, 15};
    nd_read(r, 1, o2, s2, chunked);
    int64_t o3[2] = {31, 256}, s3[2] = {2, 256};
    nd_read(r, 2, o3, s3, chunked);
    int64_t o4[2] = {0, 384}, s4[2] = {256, 128};   /* a tp-8 column block: needed + the tile array */
    nd_read(r, 3, o4, s4, chunked);
    cr_assert_eq(touched_bytes(&g_nd[3], o4, s4, chunked), 256 * 128 * 4);
    for (int t = 0; t < 4; t++) {
        int64_t z[4] = {0};
        tu_expect_box(r, TU_VALS_V1FIX, t, &g_nd[t], z, g_nd[t].shape);
    }
    mp_err e;
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_OK, "%s", e.msg);
}

Test(ckpt_read, v2_partial_reads_1d_3d_bf16_plain_and_zstd) {
    char *root = tu_mkdtemp("ckpt_tiles_nd");
    save_whole(root, 1, g_nd, 4, 0);
    save_whole(root, 2, g_nd, 4, 3);
    ckpt_reader *r = tu_open_step(root, 1);
    nd_reads(r, 0);
    ckpt_close(r);
    r = tu_open_step(root, 2);
    nd_reads(r, 1);
    ckpt_close(r);
    /* the zstd datasets are chunked in whole tiles */
    char *rf = tu_path(root, "step_00000002/rank_00000.h5");
    hid_t f = tu_h5_open(rf, H5F_ACC_RDONLY);
    hid_t d = H5Dopen2(f, "/model/w/box_0", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    hsize_t ch[2];
    int64_t tr, tc;
    geometry(&g_nd[3], g_nd[3].shape, &tr, &tc);
    cr_assert_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
    cr_assert_eq(H5Pget_chunk(dcpl, 2, ch), 2);
    /* [256, 1024] f32: tiles 8 x 128 (4 KiB), chunks of 64 tile rows (256 KiB) x one column block */
    int64_t crows = tr * (CK_CHUNK_BYTES / (tr * tc * 4));
    cr_assert(ch[0] == (hsize_t)(crows < 256 ? crows : 256) && ch[1] == (hsize_t)tc, "chunk %llu x %llu",
              (unsigned long long)ch[0], (unsigned long long)ch[1]);
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(f);
    free(rf);
    tu_rm_rf(root);
    free(root);
}

/* A box split in 2 x 2 and read across all four saved boxes: every intersection goes through tiles. */
Test(ckpt_read, v2_read_across_saved_boxes) {
    char *root = tu_mkdtemp("ckpt_tiles_grid");
    static const tu_tdesc t = {"model/g", MP_F32, 2, {300, 1000}};
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    void *bufs[4];
    for (int i = 0; i < 4; i++) {
        int64_t off[2] = {i / 2 ? 130 : 0, i % 2 ? 600 : 0}, shp[2] = {i / 2 ? 170 : 130, i % 2 ? 400 : 600};
        bufs[i] = tu_expected_box(TU_VALS_V1FIX, 0, &t, off, shp, NULL);
        cr_assert_eq(ckpt_save_add(s, t.name, MP_F32, 2, t.shape, off, shp, bufs[i], &e), MP_OK, "%s", e.msg);
    }
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    for (int i = 0; i < 4; i++) free(bufs[i]);
    w->ops->destroy(w);
    ckpt_reader *r = tu_open_step(root, 1);
    uint32_t seed = 12345;
    for (int k = 0; k < 60; k++) {
        int64_t o[2], sh[2];
        for (int d = 0; d < 2; d++) {
            seed = seed * 1103515245u + 12345u;
            o[d] = (int64_t)(seed >> 8) % t.shape[d];
            seed = seed * 1103515245u + 12345u;
            sh[d] = 1 + (int64_t)(seed >> 8) % (t.shape[d] - o[d]);
        }
        tu_expect_box(r, TU_VALS_V1FIX, 0, &t, o, sh);
    }
    int64_t z[2] = {0, 0};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &t, z, t.shape);
    ckpt_close(r);
    tu_rm_rf(root);
    free(root);
}

/* ------------------------------------------------------------------------------- v2: integrity */

/* A damage case: g_w saved whole as step 1 under a fresh root, its rank file rf, and out, a buffer
 * for the whole tensor. wcase_end closes r and removes and frees it all. */
typedef struct {
    char *root, *rf;
    float *out;
} wcase;

static wcase wcase_begin(const char *tag) {
    wcase c;
    c.root = tu_mkdtemp(tag);
    save_whole(c.root, 1, g_w, 1, 0);
    c.rf = tu_path(c.root, "step_00000001/rank_00000.h5");
    c.out = malloc(256 * 1024 * 4);
    return c;
}

static void wcase_end(wcase *c, ckpt_reader *r) {
    ckpt_close(r);
    free(c->out);
    free(c->rf);
    tu_rm_rf(c->root);
    free(c->root);
}

Test(ckpt_read, v2_flipped_byte_in_one_tile) {
    wcase c = wcase_begin("ckpt_tile_flip");
    /* element (70, 400), in the tile of rows [ta, tb) x columns [tca, tcb) */
    int64_t tr, tc;
    geometry(&g_w[0], g_w[0].shape, &tr, &tc);
    int64_t ta = 70 / tr * tr, tb = ta + tr, tca = 400 / tc * tc, tcb = tca + tc;
    cr_assert(ta > 0 && tb < 256 && tca > 0 && tcb < 1024);
    char tile[128];
    snprintf(tile, sizeof tile, "[%lld:%lld, %lld:%lld]", (long long)ta, (long long)tb, (long long)tca, (long long)tcb);
    tu_flip_byte(c.rf, tu_h5_data_offset(c.rf, "/model/w/box_0") + (70 * 1024 + 400) * 4 + 1);
    ckpt_reader *r = tu_open_step(c.root, 1);
    mp_err e;
    int64_t o1[2] = {60, 390}, s1[2] = {20, 20};
    cr_assert_eq(ckpt_read(r, "model/w", o1, s1, c.out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "rank_00000.h5") && strstr(e.msg, "/model/w/box_0") &&
              strstr(e.msg, "tensor model/w") && strstr(e.msg, tile), "want %s: %s", tile, e.msg);
    /* reads touching that tile fail; the same tile row's other blocks and the other tile rows read */
    int64_t o2[2] = {70, 400}, s2[2] = {1, 1};
    cr_assert_eq(ckpt_read(r, "model/w", o2, s2, c.out, &e), MP_ECHECK);
    int64_t o2b[2] = {tb - 1, tcb - 1}, s2b[2] = {1, 1};   /* another element of the tile */
    cr_assert_eq(ckpt_read(r, "model/w", o2b, s2b, c.out, &e), MP_ECHECK);
    int64_t o3[2] = {0, 0}, s3[2] = {ta, 1024};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o3, s3);
    int64_t o4[2] = {ta, 0}, s4[2] = {tr, tca};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o4, s4);
    int64_t o5[2] = {ta, tcb}, s5[2] = {256 - ta, 1024 - tcb};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o5, s5);
    int64_t o6[2] = {tb, 0}, s6[2] = {256 - tb, 1024};
    tu_expect_box(r, TU_VALS_V1FIX, 0, &g_w[0], o6, s6);
    /* whole reads fail on the box checksum; verify on the tile */
    int64_t z[2] = {0, 0};
    cr_assert_eq(ckpt_read(r, "model/w", z, g_w[0].shape, c.out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "[0:256, 0:1024]"), "%s", e.msg);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch") && strstr(e.msg, tile), "want %s: %s", tile, e.msg);
    wcase_end(&c, r);
}

Test(ckpt_read, v2_flipped_byte_in_tiles_dataset) {
    wcase c = wcase_begin("ckpt_tiles_flip");
    tu_flip_byte(c.rf, tu_h5_data_offset(c.rf, "/model/w/tiles_0") + 8 * 5 + 2);
    ckpt_reader *r = tu_open_step(c.root, 1);
    mp_err e;
    int64_t o1[2] = {0, 0}, s1[2] = {10, 10};
    cr_assert_eq(ckpt_read(r, "model/w", o1, s1, c.out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "tile checksums") && strstr(e.msg, "/model/w/tiles_0") && strstr(e.msg, "rank_00000.h5") &&
              strstr(e.msg, "tensor model/w") && strstr(e.msg, "corrupt"), "%s", e.msg);
    /* a whole-box read needs no tile array: its box checksum covers every byte */
    int64_t z[2] = {0, 0};
    cr_assert_eq(ckpt_read(r, "model/w", z, g_w[0].shape, c.out, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "tile checksums") && strstr(e.msg, "/model/w/tiles_0"), "%s", e.msg);
    wcase_end(&c, r);
}

Test(ckpt_read, v2_truncated_rank_file_is_a_short_read) {
    wcase c = wcase_begin("ckpt_tiles_trunc");
    long long at = tu_h5_data_offset(c.rf, "/model/w/box_0");
    /* keep HDF5's metadata readable: cut inside the box's data, past its first rows */
    ckpt_reader *r = tu_open_step(c.root, 1);
    mp_err e;
    int64_t o1[2] = {0, 0}, s1[2] = {1, 1};
    cr_assert_eq(ckpt_read(r, "model/w", o1, s1, c.out, &e), MP_OK, "%s", e.msg);   /* file open, tiles cached */
    cr_assert_eq(truncate(c.rf, at + 100 * 4096), 0);
    int64_t o2[2] = {200, 0}, s2[2] = {10, 1024};
    cr_assert_eq(ckpt_read(r, "model/w", o2, s2, c.out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "short read") && strstr(e.msg, "rank_00000.h5") && strstr(e.msg, "/model/w/box_0") &&
              strstr(e.msg, "tensor model/w"), "%s", e.msg);
    wcase_end(&c, r);
}

/* Box and tensor columns that the crafted-index cases edit (a subset of the table's compound: HDF5
 * writes just these members, keeping the others). */
typedef struct {
    int64_t offset[CKPT_MAX_DIMS];
    int64_t tile_rows, tile_cols, ntiles;
    char tiles_dataset[CK_DSET_MAX];
} box_cols;

/* Copies index.h5 of dir to index_edited.h5, applies edit() to its layout there (box and tensor
 * columns written in place, index_checksum recomputed: crafted values under a valid checksum) and
 * returns ck_index_read's code on it, message in *e. */
static mp_code reread_edited(const char *dir, void (*edit)(ck_layout *), mp_err *e) {
    char *ip = tu_path(dir, "index.h5"), *np = tu_path(dir, "index_edited.h5"), *cmd;
    cr_assert(asprintf(&cmd, "cp '%s' '%s'", ip, np) > 0);
    cr_assert_eq(tu_run(cmd, NULL), 0);
    ck_layout L;
    mp_err le;
    cr_assert_eq(ck_index_read(ip, &L, &le), MP_OK, "%s", le.msg);
    edit(&L);
    uint64_t h = ck_layout_hash(&L);
    hid_t f = tu_h5_open(np, H5F_ACC_RDWR);
    cr_assert(f >= 0);
    hsize_t four = CKPT_MAX_DIMS;
    hid_t a64 = H5Tarray_create2(H5T_NATIVE_INT64, 1, &four);
    hid_t str = H5Tcopy(H5T_C_S1);
    H5Tset_size(str, CK_DSET_MAX);
    H5Tset_strpad(str, H5T_STR_NULLPAD);
    hid_t bt = H5Tcreate(H5T_COMPOUND, sizeof(box_cols));
    H5Tinsert(bt, "offset", HOFFSET(box_cols, offset), a64);
    H5Tinsert(bt, "tile_rows", HOFFSET(box_cols, tile_rows), H5T_NATIVE_INT64);
    H5Tinsert(bt, "tile_cols", HOFFSET(box_cols, tile_cols), H5T_NATIVE_INT64);
    H5Tinsert(bt, "ntiles", HOFFSET(box_cols, ntiles), H5T_NATIVE_INT64);
    H5Tinsert(bt, "tiles_dataset", HOFFSET(box_cols, tiles_dataset), str);
    hid_t tt = H5Tcreate(H5T_COMPOUND, sizeof(int64_t) * CKPT_MAX_DIMS);
    H5Tinsert(tt, "shape", 0, a64);
    box_cols *bc = calloc((size_t)L.nboxes, sizeof *bc);
    int64_t (*ts)[CKPT_MAX_DIMS] = calloc((size_t)L.ntensors, sizeof *ts);
    for (int i = 0; i < L.nboxes; i++) {
        memcpy(bc[i].offset, L.b[i].off, sizeof bc[i].offset);
        bc[i].tile_rows = L.b[i].tile_rows;
        bc[i].tile_cols = L.b[i].tile_cols;
        bc[i].ntiles = L.b[i].ntiles;
        char pb[CK_DSET_MAX];
        snprintf(bc[i].tiles_dataset, CK_DSET_MAX, "%s", ck_box_path(&L, &L.b[i], 1, pb));
    }
    for (int i = 0; i < L.ntensors; i++) memcpy(ts[i], L.t[i].shape, sizeof ts[i]);
    hid_t d = H5Dopen2(f, "layout/boxes", H5P_DEFAULT);
    cr_assert(d >= 0 && H5Dwrite(d, bt, H5S_ALL, H5S_ALL, H5P_DEFAULT, bc) >= 0);
    H5Dclose(d);
    d = H5Dopen2(f, "layout/tensors", H5P_DEFAULT);
    cr_assert(d >= 0 && H5Dwrite(d, tt, H5S_ALL, H5S_ALL, H5P_DEFAULT, ts) >= 0);
    H5Dclose(d);
    hid_t at = H5Aopen(f, "index_checksum", H5P_DEFAULT);
    cr_assert(at >= 0 && H5Awrite(at, H5T_NATIVE_UINT64, &h) >= 0);
    H5Aclose(at);
    H5Tclose(bt); H5Tclose(tt); H5Tclose(str); H5Tclose(a64);
    cr_assert(H5Fclose(f) >= 0);
    free(bc);
    free(ts);
    ck_layout_free(&L);
    mp_code rc = ck_index_read(np, &L, e);
    if (rc == MP_OK) ck_layout_free(&L);
    free(cmd);
    free(ip);
    free(np);
    return rc;
}

static void ed_none(ck_layout *L) { (void)L; }
static void ed_tile_rows0(ck_layout *L) { L->b[0].tile_rows = 0; }
static void ed_tile_rows_big(ck_layout *L) { L->b[0].tile_rows = L->b[0].shp[0] + 1; }
static void ed_tile_cols_big(ck_layout *L) { L->b[0].tile_cols = L->b[0].shp[1] + 1; }
static void ed_ntiles(ck_layout *L) { L->b[0].ntiles += 1; }
/* the v2 fixture's layout keeps its stored paths in its pool: box 0's tiles path follows its dataset path */
static void ed_tiles_path(ck_layout *L) {
    cr_assert(L->paths);
    char *p = L->paths + L->b[0].path;
    p[strlen(p) + 1] = 'x';
}
static void ed_offset_overflow(ck_layout *L) { L->b[0].off[1] = INT64_MAX - 1; }
static void ed_offset_min(ck_layout *L) { L->b[0].off[0] = INT64_MIN; }
static void ed_ntiles_max(ck_layout *L) { L->b[0].ntiles = INT64_MAX; }
static void ed_shape_overflow(ck_layout *L) {
    L->t[0].shape[0] = INT64_MAX / 2;
    L->t[0].shape[1] = 1024;
}

/* On a copy of the v2 fixture tests/data/ckpt_v2/init_tp2dp1 (written by the v2 writer, see its
 * README.txt): since version 3 nothing writes a v2 box table. */
Test(ckpt_read, v2_index_refuses_crafted_tile_fields_and_overflows) {
    char *root = tu_mkdtemp("ckpt_tiles_idx"), *cmd;
    cr_assert(asprintf(&cmd, "cp -r '%s/tests/data/ckpt_v2/init_tp2dp1' '%s/v2'", tu_src(), root) > 0);
    cr_assert_eq(tu_run(cmd, NULL), 0);
    free(cmd);
    char *d = tu_path(root, "v2");
    mp_err e;
    cr_assert_eq(reread_edited(d, ed_none, &e), MP_OK, "%s", e.msg);
    static const struct { void (*f)(ck_layout *); const char *want; } cases[] = {
        {ed_tile_rows0, "bad checksum tile fields"},   {ed_tile_rows_big, "bad checksum tile fields"},
        {ed_tile_cols_big, "bad checksum tile fields"}, {ed_ntiles, "bad checksum tile fields"},
        {ed_tiles_path, "bad tiles dataset path"},      {ed_offset_overflow, "outside the tensor"},
        {ed_shape_overflow, "bad shape"},              {ed_offset_min, "outside the tensor"},
        {ed_ntiles_max, "bad checksum tile fields"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(reread_edited(d, cases[i].f, &e), MP_ECHECK, "case %zu accepted", i);
        cr_assert(strstr(e.msg, cases[i].want) && strstr(e.msg, "index_edited.h5"), "case %zu: %s", i, e.msg);
    }
    free(d);
    tu_rm_rf(root);
    free(root);
}

/* Box arithmetic on crafted values saturates instead of wrapping: a volume or an end point that
 * overflows int64 compares as larger than any tensor's, never as a small or negative number. */
Test(ckpt_read, box_arithmetic_saturates_on_crafted_values) {
    int64_t big[2] = {INT64_MAX / 2, 4}, one[2] = {1, 1};
    cr_assert_eq(ck_volume(2, big), INT64_MAX);
    cr_assert_eq(ck_volume(2, one), 1);
    int64_t ao[2] = {INT64_MAX - 1, 0}, as[2] = {INT64_MAX - 1, 1}, bo[2] = {0, 0}, bs[2] = {8, 8};
    int64_t io[2], is[2];
    cr_assert_eq(ck_intersect(2, ao, as, bo, bs, io, is), 0, "a box past INT64_MAX wrapped into [0, 8)");
    int64_t far[2] = {INT64_MAX - 4, 0};
    cr_assert_eq(ck_intersect(2, far, as, far, bs, io, is), 1);
    cr_assert(io[0] == INT64_MAX - 4 && is[0] == 4, "intersection %lld +%lld", (long long)io[0], (long long)is[0]);
    int64_t huge[2] = {INT64_MAX, INT64_MAX};
    cr_assert_eq(ck_tile_count(2, huge, 1, 1), INT64_MAX);
    cr_assert_eq(ck_tile_count(2, huge, INT64_MAX, INT64_MAX), 1);
    int64_t odd[2] = {7, 10};
    cr_assert_eq(ck_tile_count(2, odd, 2, 3), 4 * 4);
}

/* ------------------------------------------------------------------------------ the v1 fixture */

/* tests/data/ckpt_v1/make_v1_fixture.c's tensors; id = the generator's tensor id (its value formula). */
typedef struct {
    tu_tdesc t;
    int id;
    int step;
} v1desc;

static const v1desc g_v1[] = {
    {{"model/emb", MP_F32, 2, {37, 24}}, 0, 1},
    {{"model/q", MP_F32, 2, {32, 24}}, 1, 1},
    {{"model/norm", MP_F32, 1, {24}}, 2, 1},
    {{"optim/sq", MP_F32, 3, {6, 10, 8}}, 3, 1},
    {{"model/bf", MP_BF16, 2, {20, 6}}, 4, 1},
    {{"extra/counts", MP_I32, 1, {10}}, 5, 1},
    {{"model/grid", MP_F32, 4, {2, 3, 4, 5}}, 6, 1},
    {{"model/two", MP_F32, 2, {16, 8}}, 7, 1},
    {{"model/big", MP_F32, 2, {1280, 1024}}, 8, 2},
    {{"model/wide", MP_F32, 2, {2048, 640}}, 9, 2},
    {{"model/norm", MP_F32, 1, {24}}, 10, 2},
    {{"extra/counts", MP_I32, 1, {10}}, 11, 2},
};
#define NV1 ((int)(sizeof g_v1 / sizeof g_v1[0]))

static char *v1_dir(int step) {
    char *d;
    cr_assert(asprintf(&d, "%s/tests/data/ckpt_v1/step_%08d", tu_src(), step) > 0);
    return d;
}

/* Reads box (off, shp) of fixture tensor v: equal to the generator's values and to the same region
 * of a whole read (whole). */
static void v1_expect(ckpt_reader *r, const v1desc *v, const char *whole, const int64_t *off, const int64_t *shp) {
    const tu_tdesc *t = &v->t;
    size_t es = mp_dtype_size(t->dt);
    size_t n = (size_t)tu_numel(t->nd, shp) * es;
    char *got = malloc(n), *want = malloc(n), *from_whole = malloc(n);
    memset(got, 0xAB, n);
    tu_fill_box(TU_VALS_V1FIX, v->id, t, off, shp, want);
    int64_t z[4] = {0};
    ck_copy_sub(t->nd, es, off, shp, whole, z, t->shape, from_whole, off, shp);
    mp_err e;
    char reg[256];
    ck_box_str(reg, sizeof reg, t->nd, off, shp);
    cr_assert_eq(ckpt_read(r, t->name, off, shp, got, &e), MP_OK, "v1 %s %s: %s", t->name, reg, e.msg);
    cr_assert(memcmp(got, want, n) == 0, "v1 %s %s: differs from the generator's values", t->name, reg);
    cr_assert(memcmp(got, from_whole, n) == 0, "v1 %s %s: differs from the whole read", t->name, reg);
    free(got);
    free(want);
    free(from_whole);
}

Test(ckpt_read, v1_fixture_reads_whole_and_partial) {
    for (int step = 1; step <= 2; step++) {
        char *d = v1_dir(step);
        ckpt_reader *r = tu_open_dir(d);
        cr_assert_eq(ckpt_reader_version(r), 1);
        cr_assert_eq(ckpt_reader_step(r), step);
        cr_assert_eq(ckpt_reader_world(r), 2);
        cr_assert_str_eq(ckpt_meta_get(r, "mesh"), "{\"world\": 2, \"tp\": 1, \"dp\": 2, \"sp\": 1}");
        int nt = 0;
        for (int i = 0; i < NV1; i++) {
            const v1desc *v = &g_v1[i];
            if (v->step != step) continue;
            nt++;
            const tu_tdesc *t = &v->t;
            int ti = ckpt_tensor_find(r, t->name);
            cr_assert(ti >= 0, "%s missing", t->name);
            const ckpt_tensor_info *info = ckpt_tensor_at(r, ti);
            cr_assert_eq(info->ndim, t->nd);
            cr_assert_eq(info->dtype, t->dt);
            for (int dd = 0; dd < t->nd; dd++) cr_assert_eq(info->shape[dd], t->shape[dd]);
            /* whole */
            size_t es = mp_dtype_size(t->dt);
            size_t n = (size_t)tu_numel(t->nd, t->shape) * es;
            char *whole = malloc(n), *want = malloc(n);
            int64_t z[4] = {0};
            tu_fill_box(TU_VALS_V1FIX, v->id, t, z, t->shape, want);
            mp_err e;
            cr_assert_eq(ckpt_read(r, t->name, z, t->shape, whole, &e), MP_OK, "%s", e.msg);
            cr_assert(memcmp(whole, want, n) == 0, "v1 %s: whole read differs", t->name);
            /* every saved box, with v1 tiles = slabs, and the boxes grown by one element each way */
            for (int k = info->box_first; k < info->box_first + info->nboxes; k++) {
                const ckpt_box_info *b = ckpt_box_at(r, k);
                cr_assert_eq(b->tile_cols, t->nd >= 2 ? b->shape[1] : 1, "%s: tile_cols", t->name);
                cr_assert(b->tile_rows >= 1 && b->tile_rows <= b->shape[0]);
                cr_assert_eq(b->ntiles, (b->shape[0] + b->tile_rows - 1) / b->tile_rows);
                v1_expect(r, v, whole, b->offset, b->shape);
                int64_t o[4], s[4];
                for (int dd = 0; dd < t->nd; dd++) {
                    o[dd] = b->offset[dd] > 0 ? b->offset[dd] - 1 : 0;
                    int64_t end = b->offset[dd] + b->shape[dd] + 1;
                    if (end > t->shape[dd]) end = t->shape[dd];
                    s[dd] = end - o[dd];
                }
                v1_expect(r, v, whole, o, s);
            }
            /* boxes across the saved boxes' (and slabs') boundaries, pseudo-random */
            uint32_t seed = 777u + (uint32_t)i;
            for (int k = 0; k < 25; k++) {
                int64_t o[4], s[4];
                for (int dd = 0; dd < t->nd; dd++) {
                    seed = seed * 1103515245u + 12345u;
                    o[dd] = (int64_t)(seed >> 8) % t->shape[dd];
                    seed = seed * 1103515245u + 12345u;
                    s[dd] = 1 + (int64_t)(seed >> 8) % (t->shape[dd] - o[dd]);
                }
                v1_expect(r, v, whole, o, s);
            }
            free(whole);
            free(want);
        }
        cr_assert_eq(ckpt_num_tensors(r), nt);
        ckpt_close(r);
        free(d);
    }
}

Test(ckpt_read, v1_fixture_slabs_are_tiles) {
    char *d = v1_dir(2);
    ckpt_reader *r = tu_open_dir(d);
    int ti = ckpt_tensor_find(r, "model/big");
    const ckpt_tensor_info *info = ckpt_tensor_at(r, ti);
    cr_assert_eq(info->nboxes, 2);
    const ckpt_box_info *b = ckpt_box_at(r, info->box_first);
    cr_assert_eq(b->tile_rows, 512);   /* v1: 2 MiB slabs of 4 KiB rows */
    cr_assert_eq(b->tile_cols, 1024);
    cr_assert_eq(b->ntiles, 2);
    const v1desc *v = &g_v1[8];
    /* across the slab boundary (row 512) and the box boundary (row 640), a column range */
    size_t n = (size_t)1280 * 1024 * 4;
    char *whole = malloc(n);
    int64_t z[2] = {0, 0};
    mp_err e;
    cr_assert_eq(ckpt_read(r, "model/big", z, v->t.shape, whole, &e), MP_OK, "%s", e.msg);
    ckpt_reader_io_reset(r);
    int64_t o[2] = {500, 100}, s[2] = {200, 800};
    v1_expect(r, v, whole, o, s);
    int64_t need;
    int64_t got = io_take(r, &need);
    /* slabs 0 and 1 of box 0 (rows 0..640) and slab 0 of box 1 (rows 640..1152), whole width; v1 has
     * no tile array to fetch */
    cr_assert_eq(need, 200 * 800 * 4);
    cr_assert_eq(got, (int64_t)(640 + 512) * 4096, "read %lld", (long long)got);
    /* dim-1 split tensor across its column boundary and its slab boundary (1638 rows) */
    const v1desc *vw = &g_v1[9];
    char *whole2 = malloc((size_t)2048 * 640 * 4);
    cr_assert_eq(ckpt_read(r, "model/wide", z, vw->t.shape, whole2, &e), MP_OK, "%s", e.msg);
    int64_t o2[2] = {1600, 300}, s2[2] = {100, 40};
    v1_expect(r, vw, whole2, o2, s2);
    free(whole);
    free(whole2);
    ckpt_close(r);
    free(d);
}

Test(ckpt_read, v1_fixture_verifies) {
    for (int step = 1; step <= 2; step++) {
        char *d = v1_dir(step);
        ckpt_reader *r = tu_open_dir(d);
        int64_t nb = 0;
        mp_err e;
        cr_assert_eq(ckpt_verify(r, &nb, &e), MP_OK, "step %d: %s", step, e.msg);
        cr_assert(nb >= (step == 1 ? 1000 : 10 << 20), "step %d: %lld bytes", step, (long long)nb);
        ckpt_close(r);
        cr_assert_eq(ckpt_check_complete(d, &e), MP_OK, "%s", e.msg);
        free(d);
    }
    char dir[4096];
    int64_t step = -1;
    mp_err e;
    char *root;
    cr_assert(asprintf(&root, "%s/tests/data/ckpt_v1", tu_src()) > 0);
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 2);
    free(root);
}

/* A copy of fixture step `step` under a new temporary directory; returns the step directory. */
static char *v1_copy(int step, char **tmp) {
    *tmp = tu_mkdtemp("ckpt_v1copy");
    char *src = v1_dir(step), *cmd;
    cr_assert(asprintf(&cmd, "cp -r '%s' '%s/'", src, *tmp) > 0);
    cr_assert_eq(tu_run(cmd, NULL), 0);
    char *d;
    cr_assert(asprintf(&d, "%s/step_%08d", *tmp, step) > 0);
    free(cmd);
    free(src);
    return d;
}

Test(ckpt_read, v1_fixture_damage_is_caught) {
    char *tmp;
    char *d = v1_copy(1, &tmp);
    char *rf = tu_path(d, "rank_00001.h5");
    /* model/emb rows 18..37 are rank 1's box_0; flip a byte in its row 20 */
    tu_flip_byte(rf, tu_h5_data_offset(rf, "/model/emb/box_0") + 2 * 24 * 4 + 5);
    ckpt_reader *r = tu_open_dir(d);
    float out[37 * 24];
    mp_err e;
    int64_t z[2] = {0, 0}, g[2] = {37, 24};
    cr_assert_eq(ckpt_read(r, "model/emb", z, g, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "rank_00001.h5") && strstr(e.msg, "/model/emb/box_0") &&
              strstr(e.msg, "tensor model/emb"), "%s", e.msg);
    int64_t o1[2] = {19, 3}, s1[2] = {3, 3};   /* partial, through the (single) slab */
    cr_assert_eq(ckpt_read(r, "model/emb", o1, s1, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch"), "%s", e.msg);
    int64_t s2[2] = {18, 24};                  /* rank 0's box is intact */
    cr_assert_eq(ckpt_read(r, "model/emb", z, s2, out, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "/model/emb/box_0"), "%s", e.msg);
    ckpt_close(r);
    /* a flipped byte in the index's slab checksum table: the index checksum catches it */
    char *ip = tu_path(d, "index.h5");
    tu_flip_byte(ip, tu_h5_data_offset(ip, "/layout/slab_checksums") + 3);
    cr_assert_eq(ckpt_open(&r, d, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "index checksum mismatch"), "%s", e.msg);
    free(ip);
    free(rf);
    free(d);
    tu_rm_rf(tmp);
    free(tmp);
    /* zstd (step 2): a flipped byte in a compressed chunk fails the read of that slab, not the other */
    d = v1_copy(2, &tmp);
    rf = tu_path(d, "rank_00000.h5");
    hid_t f = tu_h5_open(rf, H5F_ACC_RDONLY);
    hid_t ds = H5Dopen2(f, "/model/big/box_0", H5P_DEFAULT);
    hsize_t coff[2] = {512, 0};
    haddr_t ca;
    hsize_t csz;
    cr_assert(H5Dget_chunk_info_by_coord(ds, coff, NULL, &ca, &csz) >= 0);
    H5Dclose(ds);
    H5Fclose(f);
    tu_flip_byte(rf, (long long)ca + (long long)csz / 2);
    r = tu_open_dir(d);
    float *big = malloc((size_t)200 * 1024 * 4);
    int64_t o3[2] = {600, 0}, s3[2] = {10, 1024};
    cr_assert_eq(ckpt_read(r, "model/big", o3, s3, big, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "rank_00000.h5") && strstr(e.msg, "/model/big/box_0"), "%s", e.msg);
    int64_t o4[2] = {0, 0}, s4[2] = {200, 1024};
    cr_assert_eq(ckpt_read(r, "model/big", o4, s4, big, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_ECHECK);
    ckpt_close(r);
    free(big);
    free(rf);
    free(d);
    tu_rm_rf(tmp);
    free(tmp);
}

/* ---------------------------------------------------------------- format v3: crafted runs */

/* model/w [256, 1024] saved as 4 row blocks by one process: one run of 4 boxes in rank_00000.h5. */
static void save_rows(const char *root) {
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    int64_t sz[2] = {64, 1024};
    void *bufs[4];
    for (int k = 0; k < 4; k++) {
        int64_t off[2] = {64 * k, 0};
        bufs[k] = tu_expected_box(TU_VALS_V1FIX, 0, &g_w[0], off, sz, NULL);
        cr_assert_eq(ckpt_save_add(s, "model/w", MP_F32, 2, g_w[0].shape, off, sz, bufs[k], &e), MP_OK, "%s", e.msg);
    }
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    for (int k = 0; k < 4; k++) free(bufs[k]);
    w->ops->destroy(w);
}

/* The bytes of the file at path (malloc'd; *n its size). */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "%s", path);
    cr_assert_eq(fseek(f, 0, SEEK_END), 0);
    long len = ftell(f);
    cr_assert(len > 0);
    rewind(f);
    char *buf = malloc((size_t)len);
    cr_assert(buf && fread(buf, 1, (size_t)len, f) == (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return buf;
}

/* A copy of dir/index.h5 whose /layout/runs went through edit(), read by ck_index_read_image with the
 * index checksum computed but not compared (as tests/fuzz does), so that the crafted runs reach the
 * structural validation. Returns its code, message in *e. */
static mp_code reread_runs(const char *dir, void (*edit)(ck_run *), mp_err *e) {
    char *ip = tu_path(dir, "index.h5"), *np = tu_path(dir, "index_edited.h5"), *cmd;
    cr_assert(asprintf(&cmd, "cp '%s' '%s'", ip, np) > 0);
    cr_assert_eq(tu_run(cmd, NULL), 0);
    hsize_t four = CKPT_MAX_DIMS;
    hid_t a64 = H5Tarray_create2(H5T_NATIVE_INT64, 1, &four);
    hid_t rt = H5Tcreate(H5T_COMPOUND, sizeof(ck_run));   /* the row as docs/FORMAT.md lists it */
    H5Tinsert(rt, "tensor_index", HOFFSET(ck_run, tensor), H5T_NATIVE_INT32);
    H5Tinsert(rt, "count", HOFFSET(ck_run, count), H5T_NATIVE_INT64);
    H5Tinsert(rt, "rank", HOFFSET(ck_run, rank0), H5T_NATIVE_INT32);
    H5Tinsert(rt, "rank_stride", HOFFSET(ck_run, stride), H5T_NATIVE_INT32);
    H5Tinsert(rt, "offset", HOFFSET(ck_run, off), a64);
    H5Tinsert(rt, "offset_step", HOFFSET(ck_run, step), a64);
    H5Tinsert(rt, "shape", HOFFSET(ck_run, shp), a64);
    hid_t f = tu_h5_open(np, H5F_ACC_RDWR);
    cr_assert(f >= 0);
    hid_t d = H5Dopen2(f, "layout/runs", H5P_DEFAULT);
    ck_run run[1];
    cr_assert(d >= 0 && H5Sget_simple_extent_npoints(H5Dget_space(d)) == 1, "one run expected");
    cr_assert(H5Dread(d, rt, H5S_ALL, H5S_ALL, H5P_DEFAULT, run) >= 0);
    cr_assert_eq(run[0].count, 4);
    edit(run);
    cr_assert(H5Dwrite(d, rt, H5S_ALL, H5S_ALL, H5P_DEFAULT, run) >= 0);
    H5Dclose(d);
    H5Tclose(rt);
    H5Tclose(a64);
    cr_assert(H5Fclose(f) >= 0);
    size_t n = 0;
    char *img = slurp(np, &n);
    ck_layout L;
    mp_code rc = ck_index_read_image(img, n, "index_edited.h5", 0, &L, e);
    if (rc == MP_OK) ck_layout_free(&L);
    free(img);
    free(cmd);
    free(ip);
    free(np);
    return rc;
}

static void rn_none(ck_run *r) { (void)r; }
static void rn_count0(ck_run *r) { r->count = 0; }
static void rn_count_huge(ck_run *r) { r->count = INT64_MAX; }
static void rn_count_more(ck_run *r) { r->count = 5; }
static void rn_tensor(ck_run *r) { r->tensor = 7; }
static void rn_rank(ck_run *r) { r->rank0 = 1; }
static void rn_stride(ck_run *r) { r->stride = 1; }
static void rn_offset(ck_run *r) { r->off[0] = -1; }
static void rn_step_overflow(ck_run *r) { r->step[0] = INT64_MAX; }
static void rn_overlap(ck_run *r) { r->step[0] = 32; }
static void rn_shape(ck_run *r) { r->shp[0] = 0; }
static void rn_past_ndim(ck_run *r) { r->step[2] = 1; }

Test(ckpt_read, v3_index_refuses_crafted_runs) {
    char *root = tu_mkdtemp("ckpt_runs_idx");
    save_rows(root);
    char *d = tu_path(root, "step_00000001");
    mp_err e;
    cr_assert_eq(reread_runs(d, rn_none, &e), MP_OK, "%s", e.msg);
    static const struct { void (*f)(ck_run *); const char *want; } cases[] = {
        {rn_count0, "count 0 out of range"},        {rn_count_huge, "out of range"},
        {rn_count_more, "outside the tensor"},       {rn_tensor, "tensor 7"},
        {rn_rank, "outside the world"},              {rn_stride, "outside the world"},
        {rn_offset, "outside the tensor"},           {rn_step_overflow, "outside the tensor"},
        {rn_overlap, "written twice"},               {rn_shape, "outside the tensor"},
        {rn_past_ndim, "outside the tensor"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cr_assert_eq(reread_runs(d, cases[i].f, &e), MP_ECHECK, "case %zu accepted", i);
        cr_assert(strstr(e.msg, cases[i].want) && strstr(e.msg, "index_edited.h5"), "case %zu: %s", i, e.msg);
    }
    free(d);
    tu_rm_rf(root);
    free(root);
}
