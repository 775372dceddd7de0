/*
 * make_v1_fixture.c — writes the format-v1 checkpoint fixture of tests/data/ckpt_v1 (see README.txt
 * there). Built against the v1 library (commit 019f3c3, the parent of the format-v2 declarations) as
 * tests/tool_make_v1.c of that tree, and run on 2 ranks:
 *
 *   mpirun --allow-run-as-root --oversubscribe -np 2 build/tool_make_v1 OUT_ROOT
 *
 * Step 1 (plain, contiguous datasets): small tensors of every dtype and 1..4 dims, split on dim 0, on
 * dim 1, on dim 2, on a 2 x 2 grid with two boxes per rank file, and one written by rank 1 only.
 * Step 2 (zstd level 3, chunked by slab): two compressible 5 MiB tensors whose boxes have several slabs
 * (split on dim 0 and on dim 1), and two small ones.
 * Values depend only on (tensor id, global element index g):
 *   f32  tid * 1000 + (g % 61) * 0.5 - 7        bf16  the same, rounded to bf16      i32  g * 3 - 5 + tid
 * tests/ckpt/test_ckpt_read.c has the same table and formula.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt.h"
#include "core/comm_mpi.h"

typedef struct {
    const char *name;
    mp_dtype dt;
    int nd;
    int64_t shape[4];
    int step;
} tdesc;

enum { T_EMB, T_Q, T_NORM, T_SQ, T_BF, T_CNT, T_GRID, T_TWO, T_BIG, T_WIDE, T_NORM2, T_CNT2, NT };
static const tdesc g_t[NT] = {
    {"model/emb", MP_F32, 2, {37, 24}, 1},
    {"model/q", MP_F32, 2, {32, 24}, 1},
    {"model/norm", MP_F32, 1, {24}, 1},
    {"optim/sq", MP_F32, 3, {6, 10, 8}, 1},
    {"model/bf", MP_BF16, 2, {20, 6}, 1},
    {"extra/counts", MP_I32, 1, {10}, 1},
    {"model/grid", MP_F32, 4, {2, 3, 4, 5}, 1},
    {"model/two", MP_F32, 2, {16, 8}, 1},
    {"model/big", MP_F32, 2, {1280, 1024}, 2},
    {"model/wide", MP_F32, 2, {2048, 640}, 2},
    {"model/norm", MP_F32, 1, {24}, 2},
    {"extra/counts", MP_I32, 1, {10}, 2},
};

static int64_t numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

static void value(int tid, int64_t g, mp_dtype dt, void *out) {
    float f = (float)tid * 1000.0f + (float)(g % 61) * 0.5f - 7.0f;
    if (dt == MP_F32) memcpy(out, &f, 4);
    else if (dt == MP_BF16) { uint16_t h = mp_f32_to_bf16(f); memcpy(out, &h, 2); }
    else { int32_t v = (int32_t)(g * 3 - 5 + tid); memcpy(out, &v, 4); }
}

static void *make_box(int tid, const int64_t *off, const int64_t *shp) {
    const tdesc *t = &g_t[tid];
    size_t es = mp_dtype_size(t->dt);
    int64_t n = numel(t->nd, shp);
    char *buf = malloc((size_t)n * es);
    for (int64_t k = 0; k < n; k++) {
        int64_t rem = k, g = 0, mul = 1, idx[4];
        for (int d = t->nd - 1; d >= 0; d--) { idx[d] = rem % shp[d]; rem /= shp[d]; }
        for (int d = t->nd - 1; d >= 0; d--) { g += (off[d] + idx[d]) * mul; mul *= t->shape[d]; }
        value(tid, g, t->dt, buf + (size_t)k * es);
    }
    return buf;
}

/* Boxes of tensor tid written by rank r (of 2): up to 2, returns the count. */
static int boxes(int tid, int r, int64_t off[2][4], int64_t shp[2][4]) {
    const tdesc *t = &g_t[tid];
    for (int k = 0; k < 2; k++)
        for (int d = 0; d < 4; d++) { off[k][d] = 0; shp[k][d] = d < t->nd ? t->shape[d] : 1; }
    switch (tid) {
    case T_EMB: case T_BF: case T_GRID: case T_BIG: {
        int64_t h = t->shape[0] / 2;
        off[0][0] = r ? h : 0;
        shp[0][0] = r ? t->shape[0] - h : h;
        return 1;
    }
    case T_Q: case T_WIDE: {
        int64_t h = t->shape[1] / 2;
        off[0][1] = r ? h : 0;
        shp[0][1] = r ? t->shape[1] - h : h;
        return 1;
    }
    case T_SQ: off[0][2] = r ? 4 : 0; shp[0][2] = 4; return 1;
    case T_CNT: case T_CNT2: off[0][0] = r ? 4 : 0; shp[0][0] = r ? 6 : 4; return 1;
    case T_NORM: case T_NORM2: return r == 1;
    case T_TWO: /* 2 x 2 grid of 8 x 4 boxes: rank 0 holds (0,0) and (1,1), rank 1 (0,1) and (1,0) */
        for (int k = 0; k < 2; k++) {
            int bi = k, bj = r ? 1 - k : k;
            off[k][0] = bi * 8; shp[k][0] = 8;
            off[k][1] = bj * 4; shp[k][1] = 4;
        }
        return 2;
    }
    return 0;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 2 || size != 2) {
        if (!rank) fprintf(stderr, "usage: mpirun -np 2 %s OUT_ROOT\n", argv[0]);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    mp_comm *w = mp_comm_mpi_create(MPI_COMM_WORLD);
    int fails = 0;
    for (int step = 1; step <= 2; step++) {
        ckpt_save_opts o = {.zstd_level = step == 2 ? 3 : 0};
        ckpt_save *s;
        mp_err e;
        if (ckpt_save_begin(&s, w, argv[1], step, &o, &e) != MP_OK) { fprintf(stderr, "%s\n", e.msg); MPI_Abort(MPI_COMM_WORLD, 1); }
        void *bufs[2 * NT];
        int nb = 0;
        for (int t = 0; t < NT; t++) {
            if (g_t[t].step != step) continue;
            int64_t off[2][4], shp[2][4];
            int n = boxes(t, rank, off, shp);
            for (int k = 0; k < n; k++) {
                bufs[nb] = make_box(t, off[k], shp[k]);
                if (ckpt_save_add(s, g_t[t].name, g_t[t].dt, g_t[t].nd, g_t[t].shape, off[k], shp[k], bufs[nb], &e) != MP_OK) {
                    fprintf(stderr, "%s\n", e.msg);
                    fails++;
                }
                nb++;
            }
        }
        ckpt_save_meta(s, "fixture", "format v1, tests/data/ckpt_v1/make_v1_fixture.c", NULL);
        ckpt_save_meta(s, "mesh", "{\"world\": 2, \"tp\": 1, \"dp\": 2, \"sp\": 1}", NULL);
        if (ckpt_save_commit(s, NULL, &e) != MP_OK) { fprintf(stderr, "%s\n", e.msg); fails++; }
        ckpt_save_free(s);
        for (int i = 0; i < nb; i++) free(bufs[i]);
    }
    w->ops->destroy(w);
    MPI_Finalize();
    return fails ? 1 : 0;
}
