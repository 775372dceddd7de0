/*
 * tests/test_ckpt.c — the checkpoint library (ckpt/) in one process (mp_comm_self).
 *
 * Tensors are filled with values that depend on (tensor, global element index), split into boxes on
 * a grid (uneven parts), saved, and read back in several layouts; expected data is computed
 * element by element here, independently of the library's own box copy code. Integrity tests damage
 * the files on disk (flipped byte found through H5Dget_offset, truncation, removal) and check that
 * the reader refuses with a message naming what is wrong. Crash and disk-full tests fork a child
 * that saves and dies (SIGKILL from MP_FAULT=ckpt_crash_at:POINT) or hits RLIMIT_FSIZE.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <fcntl.h>
#include <hdf5.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "core/comm.h"
#include "tests/testutil.h"

/* Box i of the grid of t: part p[d] of t->parts[d] along each dim. */
static int grid_box(const tu_tdesc *t, int i, int64_t *off, int64_t *shp) {
    int total = 1;
    for (int d = 0; d < t->nd; d++) total *= t->parts[d] ? t->parts[d] : 1;
    if (i >= total) return 0;
    for (int d = t->nd - 1; d >= 0; d--) {
        int n = t->parts[d] ? t->parts[d] : 1, p = i % n;
        i /= n;
        /* uneven: the first part is one row shorter when possible */
        int64_t a = (int64_t)p * t->shape[d] / n, b = (int64_t)(p + 1) * t->shape[d] / n;
        off[d] = a;
        shp[d] = b - a;
    }
    return 1;
}

static ckpt_save_opts g_noopts;

/* Saves the tensors (split on their grids) as step into root; returns the commit's code. Buffers are
 * kept until the commit. */
static mp_code save_tensors(const char *root, int64_t step, const tu_tdesc *ts, int nt, const ckpt_save_opts *o,
                            mp_err *e) {
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_code rc = ckpt_save_begin(&s, w, root, step, o ? o : &g_noopts, e);
    if (rc != MP_OK) { w->ops->destroy(w); return rc; }
    void *bufs[256];
    int nb = 0;
    for (int t = 0; t < nt; t++) {
        int64_t off[4], shp[4];
        for (int i = 0; grid_box(&ts[t], i, off, shp); i++) {
            void *b = tu_expected_box(TU_VALS_MAIN, t, &ts[t], off, shp, NULL);
            bufs[nb++] = b;
            cr_assert(nb < 256);
            ckpt_save_add(s, ts[t].name, ts[t].dt, ts[t].nd, ts[t].shape, off, shp, b, NULL);
        }
    }
    char stepjson[64];
    snprintf(stepjson, sizeof stepjson, "{\"step\": %lld}", (long long)step);
    ckpt_save_meta(s, "train_state", stepjson, NULL);
    ckpt_save_meta(s, "model_config", "{\"hidden_size\": 16}", NULL);
    rc = ckpt_save_commit(s, NULL, e);
    ckpt_save_free(s);
    for (int i = 0; i < nb; i++) free(bufs[i]);
    w->ops->destroy(w);
    return rc;
}

static void expect_all(ckpt_reader *r, const tu_tdesc *ts, int nt) {
    cr_assert_eq(ckpt_num_tensors(r), nt);
    for (int t = 0; t < nt; t++) {
        int64_t z[4] = {0};
        tu_expect_box(r, TU_VALS_MAIN, t, &ts[t], z, ts[t].shape);
        int64_t off[4], shp[4];
        for (int i = 0; grid_box(&ts[t], i, off, shp); i++) tu_expect_box(r, TU_VALS_MAIN, t, &ts[t], off, shp);
    }
}

static const tu_tdesc g_mix[] = {
    {"model/model.embed_tokens.weight", MP_F32, 2, {37, 16}, {3, 1}},
    {"model/model.layers.0.self_attn.q_proj.weight", MP_F32, 2, {24, 20}, {2, 2}},
    {"model/model.norm.weight", MP_F32, 1, {16}, {1}},
    {"optim/exp_avg/model.layers.0.mlp.up_proj.weight", MP_F32, 3, {5, 6, 7}, {2, 1, 3}},
    {"model/bf16.t4", MP_BF16, 4, {2, 3, 4, 5}, {2, 1, 2, 1}},
    {"extra/counts", MP_I32, 1, {10}, {3}},
};
#define NMIX ((int)(sizeof g_mix / sizeof g_mix[0]))

Test(ckpt, round_trip_mixed) {
    char *root = tu_mkdtemp("ckpt_rt");
    mp_err e;
    cr_assert_eq(save_tensors(root, 7, g_mix, NMIX, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_reader *r;
    cr_assert_eq(ckpt_open_latest(&r, root, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_reader_step(r), 7);
    cr_assert_eq(ckpt_reader_world(r), 1);
    expect_all(r, g_mix, NMIX);
    /* listing */
    int t = ckpt_tensor_find(r, "optim/exp_avg/model.layers.0.mlp.up_proj.weight");
    cr_assert(t >= 0);
    const ckpt_tensor_info *ti = ckpt_tensor_at(r, t);
    cr_assert_eq(ti->ndim, 3);
    cr_assert_eq(ti->shape[2], 7);
    cr_assert_eq(ti->nboxes, 6);
    cr_assert_eq(ti->dtype, MP_F32);
    cr_assert_eq(ckpt_tensor_at(r, ckpt_tensor_find(r, "model/bf16.t4"))->dtype, MP_BF16);
    cr_assert_eq(ckpt_tensor_find(r, "model/nope"), -1);
    cr_assert_str_eq(ckpt_meta_get(r, "model_config"), "{\"hidden_size\": 16}");
    cr_assert_str_eq(ckpt_meta_get(r, "train_state"), "{\"step\": 7}");
    cr_assert_null(ckpt_meta_get(r, "absent"));
    int64_t nread = 0;
    cr_assert_eq(ckpt_verify(r, &nread, &e), MP_OK, "%s", e.msg);
    cr_assert(nread > 0);
    ckpt_close(r);
    /* the latest file and no leftovers */
    char *lp = tu_path(root, "latest");
    FILE *f = fopen(lp, "r");
    cr_assert(f);
    char buf[64] = "";
    cr_assert(fgets(buf, sizeof buf, f));
    fclose(f);
    cr_assert_str_eq(buf, "step_00000007\n");
    char *pp = tu_path(root, "step_00000007.partial");
    cr_assert(access(pp, F_OK) != 0);
    free(lp);
    free(pp);
    tu_rm_rf(root);
    free(root);
}

/* A tensor of many checksum tiles per box along both dims, saved in 2 x 2 boxes of 3000 x 256 (box rows
 * of 1 KiB: tiles of 64 rows x 64 columns, 4 column blocks). */
static const tu_tdesc g_big[] = {{"model/big.weight", MP_F32, 2, {6000, 512}, {2, 2}}};

Test(ckpt, read_box_straddling_saved_boxes) {
    char *root = tu_mkdtemp("ckpt_straddle");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_big, 1, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_reader *r = tu_open_step(root, 1);
    const ckpt_tensor_info *ti = ckpt_tensor_at(r, 0);
    const ckpt_box_info *b0 = ckpt_box_at(r, ti->box_first);
    cr_assert(b0->ntiles >= 2 && b0->tile_rows < b0->shape[0] && b0->tile_cols < b0->shape[1],
              "expected several tiles along dims 0 and 1, got %lld of %lld x %lld", (long long)b0->ntiles,
              (long long)b0->tile_rows, (long long)b0->tile_cols);
    cr_assert_eq(b0->ntiles, ((b0->shape[0] + b0->tile_rows - 1) / b0->tile_rows) *
                                 ((b0->shape[1] + b0->tile_cols - 1) / b0->tile_cols));
    /* rows 1000..5000 x cols 100..400: four saved boxes, partial tiles, scattered columns */
    int64_t o1[2] = {1000, 100}, s1[2] = {4000, 300};
    tu_expect_box(r, TU_VALS_MAIN, 0, &g_big[0], o1, s1);
    int hits[8];
    cr_assert_eq(ckpt_query(r, 0, o1, s1, hits, 8), 4);
    /* the saved boxes' columns, rows straddling the dim-0 split: whole tile rows go straight into the
     * caller's buffer, partial ones through scratch */
    int64_t o2[2] = {1000, 0}, s2[2] = {4000, 256};
    tu_expect_box(r, TU_VALS_MAIN, 0, &g_big[0], o2, s2);
    cr_assert_eq(ckpt_query(r, 0, o2, s2, hits, 8), 2);
    int64_t o3[2] = {2999, 255}, s3[2] = {2, 2};
    tu_expect_box(r, TU_VALS_MAIN, 0, &g_big[0], o3, s3);
    cr_assert_eq(ckpt_query(r, 0, o3, s3, hits, 8), 4);
    int64_t o4[2] = {0, 0}, s4[2] = {10, 10};
    cr_assert_eq(ckpt_query(r, 0, o4, s4, hits, 8), 1);
    /* a whole tensor, all four boxes */
    int64_t z[2] = {0, 0};
    tu_expect_box(r, TU_VALS_MAIN, 0, &g_big[0], z, g_big[0].shape);
    ckpt_close(r);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, save_rejects_overlap_and_gap) {
    char *root = tu_mkdtemp("ckpt_cover");
    mp_comm *w = mp_comm_self();
    float data[64];
    for (int i = 0; i < 64; i++) data[i] = (float)i;
    int64_t g[2] = {8, 8}, o1[2] = {0, 0}, s1[2] = {5, 8}, o2[2] = {4, 0}, s2[2] = {4, 8};
    mp_err e;
    ckpt_save *s;
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_add(s, "w", MP_F32, 2, g, o1, s1, data, NULL);
    ckpt_save_add(s, "w", MP_F32, 2, g, o2, s2, data, NULL);
    mp_code rc = ckpt_save_commit(s, NULL, &e);
    ckpt_save_free(s);
    cr_assert_eq(rc, MP_ECHECK);
    cr_assert(strstr(e.msg, "tensor w") && strstr(e.msg, "written twice") && strstr(e.msg, "[4:5, 0:8]"), "%s", e.msg);
    char *d1 = tu_path(root, "step_00000001"), *p1 = tu_path(root, "step_00000001.partial");
    cr_assert(access(d1, F_OK) != 0 && access(p1, F_OK) != 0, "a failed save must leave nothing");
    /* a gap: rows 5..8 missing */
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_add(s, "w", MP_F32, 2, g, o1, s1, data, NULL);
    rc = ckpt_save_commit(s, NULL, &e);
    ckpt_save_free(s);
    cr_assert_eq(rc, MP_ECHECK);
    cr_assert(strstr(e.msg, "written by no rank") && strstr(e.msg, "[5:8, 0:8]"), "%s", e.msg);
    cr_assert(access(d1, F_OK) != 0 && access(p1, F_OK) != 0);
    /* bad inputs are refused at add time and fail the commit */
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    int64_t bad[2] = {6, 0};
    cr_assert_eq(ckpt_save_add(s, "w", MP_F32, 2, g, bad, s1, data, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "outside"), "%s", e.msg);
    cr_assert_eq(ckpt_save_add(s, "a//b", MP_F32, 2, g, o1, s1, data, &e), MP_EINPUT);
    cr_assert_eq(ckpt_save_add(s, "a/../b", MP_F32, 2, g, o1, s1, data, &e), MP_EINPUT);
    cr_assert_eq(ckpt_save_meta(s, "bad key", "x", &e), MP_EINPUT);
    rc = ckpt_save_commit(s, NULL, &e);
    ckpt_save_free(s);
    cr_assert_eq(rc, MP_EINPUT, "%s", e.msg);
    /* a name that is a '/'-prefix of another */
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    int64_t g1[1] = {4}, z1[1] = {0};
    ckpt_save_add(s, "a/b", MP_F32, 1, g1, z1, g1, data, NULL);
    ckpt_save_add(s, "a/b/c", MP_F32, 1, g1, z1, g1, data, NULL);
    rc = ckpt_save_commit(s, NULL, &e);
    ckpt_save_free(s);
    cr_assert_eq(rc, MP_EINPUT);
    cr_assert(strstr(e.msg, "prefix"), "%s", e.msg);
    w->ops->destroy(w);
    free(d1);
    free(p1);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, load_refuses_box_missing_from_layout) {
    char *root = tu_mkdtemp("ckpt_gap");
    mp_comm *w = mp_comm_self();
    float data[80];
    for (int i = 0; i < 80; i++) data[i] = (float)i;
    int64_t g[2] = {10, 8}, o1[2] = {0, 0}, s1[2] = {4, 8}, o2[2] = {6, 0}, s2[2] = {4, 8};
    ckpt_save_opts o = {.unchecked_coverage = 1};
    mp_err e;
    ckpt_save *s;
    cr_assert_eq(ckpt_save_begin(&s, w, root, 3, &o, &e), MP_OK, "%s", e.msg);
    ckpt_save_add(s, "model/w", MP_F32, 2, g, o1, s1, data, NULL);
    ckpt_save_add(s, "model/w", MP_F32, 2, g, o2, s2, data + 32, NULL);
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    w->ops->destroy(w);
    ckpt_reader *r = tu_open_step(root, 3);
    float out[80];
    int64_t z[2] = {0, 0};
    cr_assert_eq(ckpt_read(r, "model/w", z, g, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "tensor model/w") && strstr(e.msg, "[4:6, 0:8]") && strstr(e.msg, "no saved box"), "%s",
              e.msg);
    int64_t oq[2] = {3, 2}, sq[2] = {2, 3};   /* rows 3..5 touch the gap */
    cr_assert_eq(ckpt_read(r, "model/w", oq, sq, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "[4:5, 2:5]"), "%s", e.msg);
    /* the covered parts still read */
    int64_t ok_o[2] = {6, 1}, ok_s[2] = {3, 5};
    cr_assert_eq(ckpt_read(r, "model/w", ok_o, ok_s, out, &e), MP_OK, "%s", e.msg);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 5; j++) cr_assert_eq(out[i * 5 + j], data[32 + i * 8 + 1 + j]);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "written by no rank"), "%s", e.msg);
    /* out of bounds and unknown tensor */
    int64_t big[2] = {11, 8};
    cr_assert_eq(ckpt_read(r, "model/w", z, big, out, &e), MP_EINPUT);
    cr_assert_eq(ckpt_read(r, "model/x", z, g, out, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "model/x"), "%s", e.msg);
    ckpt_close(r);
    tu_rm_rf(root);
    free(root);
}

static const tu_tdesc g_small[] = {
    {"model/a.weight", MP_F32, 2, {40, 12}, {2, 1}},
    {"model/b.bias", MP_F32, 1, {9}, {1}},
};

Test(ckpt, integrity_flipped_byte_in_rank_file) {
    char *root = tu_mkdtemp("ckpt_flip");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    char *rf = tu_path(root, "step_00000001/rank_00000.h5");
    tu_flip_byte(rf, tu_h5_data_offset(rf, "/model/a.weight/box_1") + 17);
    ckpt_reader *r = tu_open_step(root, 1);
    float out[480];
    int64_t z[2] = {0, 0};
    cr_assert_eq(ckpt_read(r, "model/a.weight", z, g_small[0].shape, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch") && strstr(e.msg, "rank_00000.h5") && strstr(e.msg, "model/a.weight") &&
              strstr(e.msg, "/model/a.weight/box_1"), "%s", e.msg);
    /* a partial read of the damaged box is refused too (tile checksum); the intact box reads */
    int64_t po[2] = {25, 3}, ps[2] = {2, 4};
    cr_assert_eq(ckpt_read(r, "model/a.weight", po, ps, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch"), "%s", e.msg);
    int64_t ok_s[2] = {20, 12};
    cr_assert_eq(ckpt_read(r, "model/a.weight", z, ok_s, out, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "checksum mismatch"), "%s", e.msg);
    ckpt_close(r);
    free(rf);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, integrity_truncated_and_missing_rank_file) {
    char *root = tu_mkdtemp("ckpt_trunc");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(save_tensors(root, 2, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    char *rf1 = tu_path(root, "step_00000001/rank_00000.h5"), *rf2 = tu_path(root, "step_00000002/rank_00000.h5");
    struct stat st;
    cr_assert_eq(stat(rf1, &st), 0);
    cr_assert_eq(truncate(rf1, st.st_size / 2), 0);
    ckpt_reader *r = tu_open_step(root, 1);
    float out[480];
    int64_t z[2] = {0, 0};
    cr_assert_eq(ckpt_read(r, "model/a.weight", z, g_small[0].shape, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "rank_00000.h5") && (strstr(e.msg, "truncated") || strstr(e.msg, "cannot")), "%s", e.msg);
    ckpt_close(r);
    cr_assert_eq(unlink(rf2), 0);
    r = tu_open_step(root, 2);
    cr_assert_eq(ckpt_read(r, "model/b.bias", z, g_small[1].shape, out, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "rank_00000.h5") && strstr(e.msg, "missing"), "%s", e.msg);
    ckpt_close(r);
    char *d2 = tu_path(root, "step_00000002");
    cr_assert_eq(ckpt_check_complete(d2, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "missing"), "%s", e.msg);
    free(d2);
    free(rf1);
    free(rf2);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, integrity_missing_and_corrupt_index) {
    char *root = tu_mkdtemp("ckpt_idx");
    mp_err e;
    for (int s = 1; s <= 4; s++) cr_assert_eq(save_tensors(root, s, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    /* step 4: index missing */
    char *i4 = tu_path(root, "step_00000004/index.h5");
    cr_assert_eq(unlink(i4), 0);
    ckpt_reader *r;
    char *d4 = tu_path(root, "step_00000004");
    cr_assert_eq(ckpt_open(&r, d4, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "index.h5 is missing"), "%s", e.msg);
    /* step 3: garbage over the superblock */
    char *i3 = tu_path(root, "step_00000003/index.h5");
    int fd = open(i3, O_WRONLY);
    cr_assert(fd >= 0);
    char junk[512];
    memset(junk, 'x', sizeof junk);
    cr_assert_eq(pwrite(fd, junk, sizeof junk, 0), (ssize_t)sizeof junk);
    close(fd);
    char *d3 = tu_path(root, "step_00000003");
    cr_assert_eq(ckpt_open(&r, d3, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "index.h5") && strstr(e.msg, "corrupt"), "%s", e.msg);
    /* step 2: one flipped byte in the box table's raw data (HDF5 has no checksum there) */
    char *i2 = tu_path(root, "step_00000002/index.h5");
    tu_flip_byte(i2, tu_h5_data_offset(i2, "/layout/runs") + 30);
    char *d2 = tu_path(root, "step_00000002");
    cr_assert_eq(ckpt_open(&r, d2, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "index checksum mismatch") && strstr(e.msg, "step_00000002/index.h5"), "%s", e.msg);
    /* find_latest skips all three and lands on step 1 */
    char dir[4096];
    int64_t step = -1;
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 1);
    r = tu_open_step(root, 1);
    expect_all(r, g_small, 2);
    ckpt_close(r);
    free(i4); free(d4); free(i3); free(d3); free(i2); free(d2);
    tu_rm_rf(root);
    free(root);
}

static void write_text(const char *root, const char *name, const char *text) {
    char *p = tu_path(root, name);
    tu_write_file(p, text);
    free(p);
}

Test(ckpt, latest_fallback) {
    char *root = tu_mkdtemp("ckpt_latest");
    mp_err e;
    char dir[4096];
    int64_t step = -1;
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "no complete checkpoint"), "%s", e.msg);
    for (int s = 1; s <= 3; s++) cr_assert_eq(save_tensors(root, s * 10, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 30);
    char *want = tu_path(root, "step_00000030");
    cr_assert_str_eq(dir, want);
    write_text(root, "latest", "garbage\n");
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 30);
    write_text(root, "latest", "step_00000010\n");   /* stale */
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 30);
    char *lp = tu_path(root, "latest");
    unlink(lp);
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 30);
    /* latest names the newest, but it is damaged: fall back to 20 */
    write_text(root, "latest", "step_00000030\n");
    char *ip = tu_path(root, "step_00000030/index.h5");
    unlink(ip);
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 20);
    /* a .partial dir and a stray file are never candidates */
    char *pd = tu_path(root, "step_00000099.partial");
    mkdir(pd, 0777);
    write_text(root, "step_00000098", "not a dir");
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 20);
    int64_t *steps;
    int n;
    cr_assert_eq(ckpt_list(root, &steps, &n, &e), MP_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(steps[0], 10);
    cr_assert_eq(steps[1], 20);
    free(steps);
    free(want); free(lp); free(ip); free(pd);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, cleanup_partials_and_retention) {
    char *root = tu_mkdtemp("ckpt_retain");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    char *pd = tu_path(root, "step_00000002.partial");
    cr_assert_eq(mkdir(pd, 0777), 0);
    char *pf = tu_path(pd, "rank_00000.h5");
    tu_write_file(pf, "half a file");
    int removed = -1;
    cr_assert_eq(ckpt_cleanup_partials(root, &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, 1);
    cr_assert(access(pd, F_OK) != 0);
    char *d1 = tu_path(root, "step_00000001");
    cr_assert_eq(ckpt_check_complete(d1, &e), MP_OK, "%s", e.msg);
    /* a stale partial of the same step is replaced by a new save */
    char *pd3 = tu_path(root, "step_00000003.partial");
    cr_assert_eq(mkdir(pd3, 0777), 0);
    cr_assert_eq(save_tensors(root, 3, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert(access(pd3, F_OK) != 0);
    /* saving a step that exists is refused and changes nothing */
    cr_assert_eq(save_tensors(root, 3, g_small, 2, NULL, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "already exists"), "%s", e.msg);
    /* retention through the save option: keep 2 */
    ckpt_save_opts o = {.keep = 2};
    for (int s = 4; s <= 6; s++) cr_assert_eq(save_tensors(root, s, g_small, 2, &o, &e), MP_OK, "%s", e.msg);
    int64_t *steps;
    int n;
    cr_assert_eq(ckpt_list(root, &steps, &n, &e), MP_OK);
    cr_assert_eq(n, 2);
    cr_assert_eq(steps[0], 5);
    cr_assert_eq(steps[1], 6);
    free(steps);
    cr_assert(access(d1, F_OK) != 0, "step 1 should be gone");
    cr_assert_eq(ckpt_retain(root, 1, &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, 1);
    cr_assert_eq(ckpt_list(root, &steps, &n, &e), MP_OK);
    cr_assert_eq(n, 1);
    cr_assert_eq(steps[0], 6);
    free(steps);
    ckpt_reader *r = tu_open_step(root, 6);
    expect_all(r, g_small, 2);
    ckpt_close(r);
    free(pd); free(pf); free(d1); free(pd3);
    tu_rm_rf(root);
    free(root);
}

/* A 4 MiB tensor: more than the file-size limit of the disk-full test. */
static const tu_tdesc g_4m[] = {{"model/huge.weight", MP_F32, 2, {1024, 1024}, {2, 1}}};

Test(ckpt, disk_full_fails_cleanly) {
    char *root = tu_mkdtemp("ckpt_full");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    int pfd[2];
    cr_assert_eq(pipe(pfd), 0);
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        close(pfd[0]);
        signal(SIGXFSZ, SIG_IGN);
        struct rlimit rl = {1 << 20, 1 << 20};
        setrlimit(RLIMIT_FSIZE, &rl);
        mp_err ce;
        mp_code rc = save_tensors(root, 2, g_4m, 1, NULL, &ce);
        dprintf(pfd[1], "%d %s", (int)rc, rc == MP_OK ? "" : ce.msg);
        close(pfd[1]);
        _exit(0);
    }
    close(pfd[1]);
    char msg[4096] = "";
    ssize_t n, at = 0;
    while ((n = read(pfd[0], msg + at, sizeof msg - 1 - (size_t)at)) > 0) at += n;
    msg[at] = '\0';
    close(pfd[0]);
    int st;
    waitpid(pid, &st, 0);
    cr_assert(WIFEXITED(st), "child died: %s", msg);
    cr_assert(atoi(msg) == MP_EIO, "save should fail with an i/o error: %s", msg);
    cr_assert(strstr(msg, "rank_00000.h5") && strstr(msg, "File too large"), "%s", msg);
    char *d2 = tu_path(root, "step_00000002"), *p2 = tu_path(root, "step_00000002.partial");
    cr_assert(access(d2, F_OK) != 0 && access(p2, F_OK) != 0, "the failed save must remove its .partial dir");
    char dir[4096];
    int64_t step = -1;
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(step, 1);
    ckpt_reader *r = tu_open_step(root, 1);
    expect_all(r, g_small, 2);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_close(r);
    free(d2); free(p2);
    tu_rm_rf(root);
    free(root);
}

/* Saves step 2 in a child with MP_FAULT=ckpt_crash_at:point; returns the child's wait status. */
static int crash_child(const char *root, const char *point, int async) {
    pid_t pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        char fault[128];
        snprintf(fault, sizeof fault, "ckpt_crash_at:%s", point);
        setenv("MP_FAULT", fault, 1);
        mp_err ce;
        if (!async) {
            save_tensors(root, 2, g_small, 2, NULL, &ce);
        } else {
            mp_comm *w = mp_comm_self();
            ckpt_save *s;
            static float a[480], b[9];
            if (ckpt_save_begin(&s, w, root, 2, NULL, &ce) == MP_OK) {
                int64_t z[2] = {0, 0};
                ckpt_save_add(s, "model/a.weight", MP_F32, 2, g_small[0].shape, z, g_small[0].shape, a, NULL);
                ckpt_save_add(s, "model/b.bias", MP_F32, 1, g_small[1].shape, z, g_small[1].shape, b, NULL);
                ckpt_save_start(s, NULL);
                ckpt_save_wait(s, NULL, &ce);
            }
        }
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    return st;
}

static void crash_case(const char *point, int64_t want_step, int async) {
    char *root = tu_mkdtemp("ckpt_crash");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    int st = crash_child(root, point, async);
    cr_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "%s: the child should be killed", point);
    char dir[4096];
    int64_t step = -1;
    cr_assert_eq(ckpt_find_latest(root, dir, sizeof dir, &step, &e), MP_OK, "%s: %s", point, e.msg);
    cr_assert_eq(step, want_step, "%s: picked step %lld", point, (long long)step);
    ckpt_reader *r;
    cr_assert_eq(ckpt_open(&r, dir, &e), MP_OK, "%s", e.msg);
    if (want_step == 1) expect_all(r, g_small, 2);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_OK, "%s: %s", point, e.msg);
    ckpt_close(r);
    int removed = 0;
    cr_assert_eq(ckpt_cleanup_partials(root, &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, want_step == 1 ? 1 : 0, "%s: %d partial dirs removed", point, removed);
    /* the next save of step 2 works after a crash before the rename */
    if (want_step == 1) cr_assert_eq(save_tensors(root, 2, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, crash_during_rank_files) { crash_case("during_rank_files", 1, 0); }
Test(ckpt, crash_after_rank_files) { crash_case("after_rank_files", 1, 0); }
Test(ckpt, crash_before_index) { crash_case("before_index", 1, 0); }
Test(ckpt, crash_after_index) { crash_case("after_index", 1, 0); }
Test(ckpt, crash_after_rename) { crash_case("after_rename", 2, 0); }
Test(ckpt, crash_after_latest) { crash_case("after_latest", 2, 0); }
Test(ckpt, crash_async_during_rank_files) { crash_case("during_rank_files", 1, 1); }

/* Compressible data: a smooth function of the index. */
static const tu_tdesc g_z[] = {
    {"model/z.weight", MP_F32, 2, {2048, 384}, {2, 2}},
    {"model/z16", MP_BF16, 3, {30, 20, 10}, {2, 1, 1}},
};

Test(ckpt, zstd_round_trip) {
    char *root = tu_mkdtemp("ckpt_zstd");
    mp_err e;
    ckpt_save_opts o = {.zstd_level = 3};
    cr_assert_eq(save_tensors(root, 1, g_z, 2, &o, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(save_tensors(root, 2, g_z, 2, NULL, &e), MP_OK, "%s", e.msg);
    char *zf = tu_path(root, "step_00000001/rank_00000.h5"), *pf = tu_path(root, "step_00000002/rank_00000.h5");
    struct stat zs, ps;
    cr_assert_eq(stat(zf, &zs), 0);
    cr_assert_eq(stat(pf, &ps), 0);
    cr_assert(zs.st_size < ps.st_size / 2, "compressed %lld vs plain %lld", (long long)zs.st_size, (long long)ps.st_size);
    ckpt_reader *r = tu_open_step(root, 1);
    expect_all(r, g_z, 2);
    int64_t o1[2] = {700, 50}, s1[2] = {900, 300};
    tu_expect_box(r, TU_VALS_MAIN, 0, &g_z[0], o1, s1);
    cr_assert_eq(ckpt_verify(r, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_close(r);
    /* the dataset really is chunked with shuffle + zstd (32015) */
    hid_t f = tu_h5_open(zf, H5F_ACC_RDONLY);
    hid_t d = H5Dopen2(f, "/model/z.weight/box_0", H5P_DEFAULT);
    hid_t dcpl = H5Dget_create_plist(d);
    cr_assert_eq(H5Pget_layout(dcpl), H5D_CHUNKED);
    cr_assert_eq(H5Pget_nfilters(dcpl), 2);
    unsigned flags, cd[4];
    size_t ncd = 4;
    cr_assert_eq(H5Pget_filter2(dcpl, 0, &flags, &ncd, cd, 0, NULL, NULL), H5Z_FILTER_SHUFFLE);
    ncd = 4;
    cr_assert_eq(H5Pget_filter2(dcpl, 1, &flags, &ncd, cd, 0, NULL, NULL), 32015);
    cr_assert_eq(ncd, 3);   /* {level, tag "MPZ1", chunk bytes}: docs/FORMAT.md "Compression" */
    cr_assert_eq(cd[0], 3);
    cr_assert_eq(cd[1], 0x4D505A31u);
    hsize_t cdims[2];
    hid_t zt = H5Dget_type(d);
    cr_assert_eq(H5Pget_chunk(dcpl, 2, cdims), 2);
    cr_assert_eq((hsize_t)cd[2], cdims[0] * cdims[1] * H5Tget_size(zt));
    H5Tclose(zt);
    H5Pclose(dcpl);
    H5Dclose(d);
    H5Fclose(f);
    free(zf);
    free(pf);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, async_save_round_trip) {
    char *root = tu_mkdtemp("ckpt_async");
    mp_comm *w = mp_comm_self();
    mp_err e;
    /* two saves: the second begins while the first may still be writing and must wait for it */
    ckpt_save *s[2];
    void *bufs[2][16];
    int nb[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(ckpt_save_begin(&s[k], w, root, 10 + k, NULL, &e), MP_OK, "%s", e.msg);
        for (int t = 0; t < 2; t++) {
            int64_t off[4], shp[4];
            for (int i = 0; grid_box(&g_big[0], i, off, shp) && t == 0; i++) {
                void *b = tu_expected_box(TU_VALS_MAIN, 0, &g_big[0], off, shp, NULL);
                bufs[k][nb[k]++] = b;
                cr_assert_eq(ckpt_save_add(s[k], g_big[0].name, MP_F32, 2, g_big[0].shape, off, shp, b, &e), MP_OK);
            }
        }
        ckpt_save_meta(s[k], "k", k ? "second" : "first", NULL);
        cr_assert_eq(ckpt_save_start(s[k], &e), MP_OK, "%s", e.msg);
    }
    int done = 0;
    ckpt_stats st0;
    cr_assert_eq(ckpt_save_poll(s[0], &done, &st0, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(done, 1, "the first save is finished once the second has begun");
    int polls = 0;
    ckpt_stats st;
    memset(&st, 0, sizeof st);
    done = 0;
    while (!done) {
        cr_assert_eq(ckpt_save_poll(s[1], &done, &st, &e), MP_OK, "%s", e.msg);
        if (!done) usleep(1000);
        polls++;
    }
    cr_assert_eq(ckpt_save_wait(s[1], &st, &e), MP_OK, "%s", e.msg);   /* idempotent */
    cr_assert_eq(st.bytes, 6000 * 512 * 4);
    cr_assert(st.write_s > 0 && st.file_bytes >= st.bytes, "write %g s, %lld bytes", st.write_s,
              (long long)st.file_bytes);
    cr_assert(st.stall_s >= 0 && st.commit_s > 0);
    for (int k = 0; k < 2; k++) {
        ckpt_save_free(s[k]);
        for (int i = 0; i < nb[k]; i++) free(bufs[k][i]);
    }
    w->ops->destroy(w);
    for (int k = 0; k < 2; k++) {
        ckpt_reader *r = tu_open_step(root, 10 + k);
        expect_all(r, g_big, 1);
        cr_assert_str_eq(ckpt_meta_get(r, "k"), k ? "second" : "first");
        ckpt_close(r);
    }
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, async_error_reported_by_poll) {
    char *root = tu_mkdtemp("ckpt_async_err");
    mp_comm *w = mp_comm_self();
    mp_err e;
    ckpt_save *s;
    float data[16] = {0};
    int64_t g[1] = {16}, o1[1] = {0}, s1[1] = {8};
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_add(s, "half", MP_F32, 1, g, o1, s1, data, NULL);
    cr_assert_eq(ckpt_save_start(s, &e), MP_OK);
    cr_assert_eq(ckpt_save_wait(s, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "written by no rank"), "%s", e.msg);
    int done = 0;
    cr_assert_eq(ckpt_save_poll(s, &done, NULL, &e), MP_ECHECK);
    cr_assert_eq(done, 1);
    ckpt_save_free(s);
    w->ops->destroy(w);
    int64_t *steps;
    int n;
    cr_assert_eq(ckpt_list(root, &steps, &n, &e), MP_OK);
    cr_assert_eq(n, 0);
    free(steps);
    tu_rm_rf(root);
    free(root);
}

Test(ckpt, save_into_unusable_root_fails_with_path) {
    char *base = tu_mkdtemp("ckpt_badroot");
    char *file = tu_path(base, "plainfile");
    tu_write_file(file, "x");
    char *root = tu_path(file, "checkpoints");   /* below a regular file: ENOTDIR */
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_EIO);
    cr_assert(strstr(e.msg, "plainfile") && strstr(e.msg, "Not a directory"), "%s", e.msg);
    free(root);
    free(file);
    tu_rm_rf(base);
    free(base);
}

Test(ckpt, newer_format_version_is_refused) {
    char *root = tu_mkdtemp("ckpt_version");
    mp_err e;
    cr_assert_eq(save_tensors(root, 1, g_small, 2, NULL, &e), MP_OK, "%s", e.msg);
    char *ip = tu_path(root, "step_00000001/index.h5");
    hid_t f = tu_h5_open(ip, H5F_ACC_RDWR);
    cr_assert(f >= 0);
    hid_t a = H5Aopen(f, "format_version", H5P_DEFAULT);
    int64_t v = CKPT_FORMAT_VERSION_MAX + 1;
    cr_assert(H5Awrite(a, H5T_NATIVE_INT64, &v) >= 0);
    H5Aclose(a);
    H5Fclose(f);
    ckpt_reader *r;
    char *d = tu_path(root, "step_00000001");
    cr_assert_eq(ckpt_open(&r, d, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "format version 5") && strstr(e.msg, "reads versions 1..4"), "%s", e.msg);
    free(d);
    free(ip);
    tu_rm_rf(root);
    free(root);
}
