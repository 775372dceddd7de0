/*
 * tests/tool_ckpt_mpi.c — the checkpoint library under MPI (run by mpiexec; entries in
 * tests/ckpt.cmake and tests/python/ckpt_crash_mpi.py / test_ckpt_h5py.py).
 *
 *   tool_ckpt_mpi roundtrip ROOT          every rank writes its boxes of shared tensors (sharded on
 *                                         dim 0, on dim 1, on a 2-D grid, a replicated tensor written
 *                                         by the last rank only), commit; each rank reads back its own
 *                                         boxes, its neighbour's and whole tensors; then an async zstd
 *                                         save; then failures that one rank sees (a bad box on the last
 *                                         rank) or only rank 0 sees (an element written twice) must
 *                                         fail the save on every rank with the same message.
 *   tool_ckpt_mpi save ROOT STEP [--zstd L] [--async] [--files rank|node|G] [--big] [--fill BYTES]
 *                                         saves the tensor set as STEP (for interop and crash tests;
 *                                         the fault ckpt_crash_at applies); --files: ranks_per_file (node:
 *                                         CKPT_FILES_NODE); --big adds a tensor of 1024 rows per rank,
 *                                         --fill sets fill_bytes (bands of member boxes); on failure
 *                                         rank 0 prints "save failed: MESSAGE" on stdout
 *   tool_ckpt_mpi check ROOT STEP         ckpt_find_latest must pick STEP; every rank reads every
 *                                         tensor whole and the boxes a world of its size would own, and
 *                                         compares them with the generator; rank 0 runs ckpt_verify.
 *   tool_ckpt_mpi planned ROOT STEP       the collective open (ckpt_open_planned): every rank reads the
 *                                         boxes it and the next rank own; only rank 0 reads index.h5
 *   tool_ckpt_mpi planned-damaged ROOT STEP
 *                                         the collective open of a damaged index fails on every rank with
 *                                         rank 0's message (one line per rank on stdout)
 *   tool_ckpt_mpi planned-same DIR        the collective open of the checkpoint in DIR (any format
 *                                         version) plans and reads as ckpt_open of it: the same saved
 *                                         boxes per region, in order, and the same bytes
 * Values depend only on (tensor, global element index), so any world size can check any checkpoint.
 * Exit status: 0 all ranks passed, 1 a check failed, 2 bad usage.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "core/comm_mpi.h"
#include "core/log.h"
#include "tests/testutil.h"   /* the static inline tensor helpers only: not linked with testutil.c */

static int g_rank, g_size, g_fails;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "[rank %d] FAIL %s:%d: ", g_rank, __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, "\n");                                         \
            g_fails++;                                                     \
        }                                                                  \
    } while (0)

enum { T_EMB, T_Q, T_NORM, T_AVG, T_SQ, T_BF, NT };
static const tu_tdesc g_t[NT] = {
    {"model/model.embed_tokens.weight", MP_F32, 2, {37, 24}},
    {"model/model.layers.0.self_attn.q_proj.weight", MP_F32, 2, {32, 24}},
    {"model/model.norm.weight", MP_F32, 1, {24}},
    {"optim/exp_avg/model.embed_tokens.weight", MP_F32, 2, {37, 24}},
    {"optim/exp_avg_sq/model.layers.0.mlp.down_proj.weight", MP_F32, 3, {6, 10, 8}},
    {"model/lm_head.bf16", MP_BF16, 2, {20, 6}},
};

static void part(int64_t len, int n, int i, int64_t *o, int64_t *s) {
    *o = len * i / n;
    *s = len * (i + 1) / n - *o;
}

/* The box rank r of a world of p writes of tensor tid; returns 0 if it writes none. */
static int owned_box(int tid, int r, int p, int64_t *off, int64_t *shp) {
    const tu_tdesc *t = &g_t[tid];
    for (int d = 0; d < t->nd; d++) { off[d] = 0; shp[d] = t->shape[d]; }
    switch (tid) {
    case T_EMB: case T_BF: part(t->shape[0], p, r, &off[0], &shp[0]); break;
    case T_AVG: part(t->shape[0], p, p - 1 - r, &off[0], &shp[0]); break;      /* reversed owners */
    case T_Q: part(t->shape[1], p, r, &off[1], &shp[1]); break;                 /* column split */
    case T_NORM: if (r != p - 1) return 0; break;                               /* replicated: one writer */
    case T_SQ: {
        int a = p % 2 == 0 ? 2 : 1, b = p / a;
        part(t->shape[0], a, r % a, &off[0], &shp[0]);
        part(t->shape[2], b, r / a, &off[2], &shp[2]);
        break;
    }
    }
    for (int d = 0; d < t->nd; d++) if (shp[d] <= 0) return 0;
    return 1;
}

typedef struct { void *bufs[NT]; } owned;

/* Adds this rank's boxes to s (buffers in *o, freed by free_owned). */
static void add_owned(ckpt_save *s, owned *o) {
    for (int t = 0; t < NT; t++) {
        int64_t off[4], shp[4];
        o->bufs[t] = NULL;
        if (!owned_box(t, g_rank, g_size, off, shp)) continue;
        o->bufs[t] = malloc((size_t)tu_numel(g_t[t].nd, shp) * mp_dtype_size(g_t[t].dt));
        tu_fill_box(TU_VALS_MAIN, t, &g_t[t], off, shp, o->bufs[t]);
        mp_err e;
        mp_code rc = ckpt_save_add(s, g_t[t].name, g_t[t].dt, g_t[t].nd, g_t[t].shape, off, shp, o->bufs[t], &e);
        CHECK(rc == MP_OK, "add %s: %s", g_t[t].name, e.msg);
    }
}

static void free_owned(owned *o) {
    for (int t = 0; t < NT; t++) free(o->bufs[t]);
}

static void add_meta(ckpt_save *s) {
    char who[32];
    snprintf(who, sizeof who, "rank%d", g_rank);
    ckpt_save_meta(s, "who", who, NULL);
    ckpt_save_meta(s, "model_config", "{\"hidden_size\": 24, \"vocab_size\": 37}", NULL);
    char mesh[64];
    snprintf(mesh, sizeof mesh, "{\"world\": %d}", g_size);
    ckpt_save_meta(s, "mesh", mesh, NULL);
}

static int expect_box(ckpt_reader *r, int tid, const int64_t *off, const int64_t *shp) {
    size_t n = (size_t)tu_numel(g_t[tid].nd, shp) * mp_dtype_size(g_t[tid].dt);
    char *got = malloc(n), *want = malloc(n);
    memset(got, 0x5a, n);
    tu_fill_box(TU_VALS_MAIN, tid, &g_t[tid], off, shp, want);
    mp_err e;
    mp_code rc = ckpt_read(r, g_t[tid].name, off, shp, got, &e);
    CHECK(rc == MP_OK, "read %s: %s", g_t[tid].name, e.msg);
    int ok = rc == MP_OK && memcmp(got, want, n) == 0;
    CHECK(rc != MP_OK || ok, "tensor %s: data differs", g_t[tid].name);
    free(got);
    free(want);
    return ok;
}

/* Reads back: whole tensors, the boxes ranks `r` and `(r+1) % p` own in a world of p. */
static void read_back(ckpt_reader *r, int p) {
    CHECK(ckpt_num_tensors(r) == NT, "%d tensors", ckpt_num_tensors(r));
    for (int t = 0; t < NT; t++) {
        int64_t z[4] = {0};
        expect_box(r, t, z, g_t[t].shape);
        int64_t off[4], shp[4];
        int mine = g_rank % p, next = (g_rank + 1) % p;
        if (owned_box(t, mine, p, off, shp)) expect_box(r, t, off, shp);
        if (owned_box(t, next, p, off, shp)) expect_box(r, t, off, shp);
    }
}

static mp_comm *g_w;

/* --big: a tensor of 1024 rows per rank x 64 (f32, split on dim 0), so that with a small --fill a box
 * is written (and, with --files, sent) in several bands. Checked by comparing checkpoints (h5py) and
 * ckpt_verify, not by check/read_back. */
static const tu_tdesc g_big = {"model/big.weight", MP_F32, 2, {0, 64}};

static void *add_big(ckpt_save *s) {
    tu_tdesc t = g_big;
    t.shape[0] = 1024 * (int64_t)g_size;
    int64_t off[2] = {1024 * (int64_t)g_rank, 0}, shp[2] = {1024, 64};
    void *buf = malloc((size_t)tu_numel(2, shp) * sizeof(float));
    tu_fill_box(TU_VALS_MAIN, NT, &t, off, shp, buf);
    mp_err e;
    mp_code rc = ckpt_save_add(s, t.name, t.dt, 2, t.shape, off, shp, buf, &e);
    CHECK(rc == MP_OK, "add %s: %s", t.name, e.msg);
    return buf;
}

static int cmd_save(const char *root, int64_t step, int zstd, int async, int files, int big, size_t fill) {
    ckpt_save_opts o = {.zstd_level = zstd, .ranks_per_file = files, .fill_bytes = fill};
    ckpt_save *s;
    mp_err e;
    mp_code rc = ckpt_save_begin(&s, g_w, root, step, &o, &e);
    CHECK(rc == MP_OK, "begin: %s", e.msg);
    if (rc != MP_OK) return 1;
    owned ow;
    add_owned(s, &ow);
    void *bigbuf = big ? add_big(s) : NULL;
    add_meta(s);
    ckpt_stats st;
    if (async) {
        rc = ckpt_save_start(s, &e);
        int done = 0, polls = 0;
        while (rc == MP_OK && !done) {
            rc = ckpt_save_poll(s, &done, &st, &e);
            if (!done) usleep(500);
            polls++;
        }
    } else {
        rc = ckpt_save_commit(s, &st, &e);
    }
    CHECK(rc == MP_OK, "save step %lld: %s", (long long)step, e.msg);
    if (rc != MP_OK && g_rank == 0) printf("save failed: %s\n", e.msg);   /* the agreed message, for the tests */
    if (rc == MP_OK && g_rank == 0)   /* for bench/bench_nodefiles.sh */
        fprintf(stderr, "tool_ckpt_mpi: rank 0 saved step %lld in %.4f s (write %.4f s, commit %.4f s)\n",
                (long long)step, st.stall_s, st.write_s, st.commit_s);
    ckpt_save_free(s);
    free_owned(&ow);
    free(bigbuf);
    return rc == MP_OK ? 0 : 1;
}

static void cmd_check(const char *root, int64_t want_step) {
    char dir[4096];
    int64_t step = -1;
    mp_err e;
    mp_code rc = ckpt_find_latest(root, dir, sizeof dir, &step, &e);
    CHECK(rc == MP_OK && step == want_step, "find_latest: rc %d step %lld (want %lld): %s", rc, (long long)step,
          (long long)want_step, rc == MP_OK ? "" : e.msg);
    if (rc != MP_OK) return;
    ckpt_reader *r;
    rc = ckpt_open(&r, dir, &e);
    CHECK(rc == MP_OK, "open %s: %s", dir, e.msg);
    if (rc != MP_OK) return;
    read_back(r, g_size);
    CHECK(ckpt_meta_get(r, "who") && !strcmp(ckpt_meta_get(r, "who"), "rank0"), "meta who");
    if (g_rank == 0) {
        rc = ckpt_verify(r, NULL, &e);
        CHECK(rc == MP_OK, "verify: %s", e.msg);
    }
    ckpt_close(r);
}

/* planned ROOT STEP: the collective open (ckpt_open_planned) of step STEP with the boxes this rank and
 * the next own in a world of this size: every one reads back equal to the generator, the reader holds
 * only the tensors asked for, a whole tensor the regions do not cover fails its coverage check, and
 * only rank 0's process read an index.h5 (ckpt_index_reads). */
static void cmd_planned(const char *root, int64_t step) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step_%08lld", root, (long long)step);
    ckpt_region want[2 * NT];
    int tid[2 * NT], n = 0, ntens = 0;
    memset(want, 0, sizeof want);
    for (int t = 0; t < NT; t++) {
        int before = n;
        for (int k = 0; k < 2; k++) {
            want[n].name = g_t[t].name;
            for (int d = 0; d < CKPT_MAX_DIMS; d++) want[n].shape[d] = 1;
            tid[n] = t;
            if (owned_box(t, (g_rank + k) % g_size, g_size, want[n].offset, want[n].shape)) n++;
        }
        ntens += n > before;
    }
    ckpt_reader *r = NULL;
    mp_err e;
    mp_code rc = ckpt_open_planned(&r, g_w, dir, want, n, &e);
    CHECK(rc == MP_OK, "planned open of %s: %s", dir, e.msg);
    if (rc == MP_OK) {
        for (int i = 0; i < n; i++) expect_box(r, tid[i], want[i].offset, want[i].shape);
        CHECK(ckpt_num_tensors(r) == ntens, "%d tensors in the plan, %d asked for", ckpt_num_tensors(r), ntens);
        CHECK(ckpt_meta_get(r, "who") && !strcmp(ckpt_meta_get(r, "who"), "rank0"), "meta who");
        int64_t z[4] = {0};
        float *all = malloc(sizeof(float) * 37 * 24);
        mp_code whole = ckpt_read(r, g_t[T_EMB].name, z, g_t[T_EMB].shape, all, &e);
        CHECK(g_size < 3 ? whole == MP_OK : whole == MP_ECHECK, "whole %s outside the plan: rc %d", g_t[T_EMB].name,
              whole);
        free(all);
        ckpt_close(r);
    }
    int64_t reads = -1, bytes = -1;
    ckpt_index_reads(&reads, &bytes);
    CHECK(g_rank == 0 ? reads == 1 && bytes > 0 : reads == 0 && bytes == 0, "index.h5 read %lld times (%lld bytes)",
          (long long)reads, (long long)bytes);
    printf("rank %d: %d regions, index reads %lld (%lld bytes)\n", g_rank, n, (long long)reads, (long long)bytes);
}

/* planned-damaged ROOT STEP: the collective open of a checkpoint whose index.h5 is damaged must fail
 * on every rank with MP_ECHECK and rank 0's message, "[rank 0] " once on every rank; prints it per rank
 * so the test can check that every line is the same. */
static void cmd_planned_damaged(const char *root, int64_t step) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s/step_%08lld", root, (long long)step);
    ckpt_region want = {g_t[T_EMB].name, {0, 0, 0, 0}, {1, 1, 1, 1}};
    ckpt_reader *r = NULL;
    mp_err e;
    mp_err_clear(&e);
    mp_code rc = ckpt_open_planned(&r, g_w, dir, &want, 1, &e);
    CHECK(rc == MP_ECHECK && !r, "planned open of a damaged index: rc %d", rc);
    /* mp_comm_agree's one rule: rank 0's message on every rank (rank 0 too), with one "[rank 0] " */
    const char *msg = e.msg;
    CHECK(g_size == 1 || (strncmp(msg, "[rank 0] ", 9) == 0 && !strstr(msg + 9, "[rank ")),
          "one [rank 0] prefix on rank %d: %s", g_rank, msg);
    CHECK(strstr(msg, "index.h5") != NULL, "the message names the index: %s", msg);
    int64_t reads = -1;
    ckpt_index_reads(&reads, NULL);
    CHECK(reads == (g_rank == 0), "index.h5 read %lld times", (long long)reads);
    printf("planned open: code %d: %s\n", (int)rc, msg);
}

/* The regions rank q of a world of p asks for in planned-same, for tensor T: rows part q of p (all of
 * the other dims), and for 2-D+ tensors rows part (q + 1) % p x dim-1 columns part q % 3 of 3 (cuts
 * that fall inside saved boxes). Returns their number (0..2) in w[]. */
static int same_regions(const ckpt_tensor_info *T, int q, int p, ckpt_region *w) {
    int n = 0;
    for (int k = 0; k < 2; k++) {
        ckpt_region *x = &w[n];
        x->name = T->name;
        for (int d = 0; d < CKPT_MAX_DIMS; d++) { x->offset[d] = 0; x->shape[d] = d < T->ndim ? T->shape[d] : 1; }
        if (k == 1 && T->ndim < 2) break;
        part(T->shape[0], p, (q + k) % p, &x->offset[0], &x->shape[0]);
        if (k == 1) part(T->shape[1], 3, q % 3, &x->offset[1], &x->shape[1]);
        int ok = 1;
        for (int d = 0; d < T->ndim; d++) ok = ok && x->shape[d] > 0;
        n += ok;
    }
    return n;
}

/* 1 if box a of reader ra and box b of rb are the same saved box: rank file, dataset, place, checksums. */
static int same_box(const ckpt_box_info *a, const ckpt_box_info *b) {
    return a->rank == b->rank && !strcmp(a->file, b->file) && !strcmp(a->dataset, b->dataset) &&
           !memcmp(a->offset, b->offset, sizeof a->offset) && !memcmp(a->shape, b->shape, sizeof a->shape) &&
           a->checksum == b->checksum && a->tile_rows == b->tile_rows && a->tile_cols == b->tile_cols &&
           a->ntiles == b->ntiles;
}

/* Compares, for region w, the planned reader rp with the full reader rf (ckpt_open: the oracle): the
 * same saved boxes in the same order (ckpt_query), and the same bytes read. Returns the boxes compared. */
static int same_region(ckpt_reader *rp, ckpt_reader *rf, const ckpt_region *w) {
    int tf = ckpt_tensor_find(rf, w->name), tp = ckpt_tensor_find(rp, w->name);
    CHECK((tf < 0) == (tp < 0), "tensor %s: in the plan %d, in the checkpoint %d", w->name, tp >= 0, tf >= 0);
    if (tf < 0 || tp < 0) return 0;
    int nf = ckpt_query(rf, tf, w->offset, w->shape, NULL, 0), np_ = ckpt_query(rp, tp, w->offset, w->shape, NULL, 0);
    CHECK(nf == np_ && nf > 0, "tensor %s: %d saved boxes met in the plan, %d in the checkpoint", w->name, np_, nf);
    if (nf != np_ || nf == 0) return 0;
    int *jf = malloc(sizeof(int) * (size_t)nf), *jp = malloc(sizeof(int) * (size_t)nf);
    ckpt_query(rf, tf, w->offset, w->shape, jf, nf);
    ckpt_query(rp, tp, w->offset, w->shape, jp, nf);
    for (int i = 0; i < nf; i++)
        CHECK(same_box(ckpt_box_at(rp, jp[i]), ckpt_box_at(rf, jf[i])), "tensor %s: box %d of the region differs "
              "(%s %s in the plan, %s %s in the checkpoint)", w->name, i, ckpt_box_at(rp, jp[i])->file,
              ckpt_box_at(rp, jp[i])->dataset, ckpt_box_at(rf, jf[i])->file, ckpt_box_at(rf, jf[i])->dataset);
    free(jf);
    free(jp);
    const ckpt_tensor_info *T = ckpt_tensor_at(rf, tf);
    size_t n = (size_t)tu_numel(T->ndim, w->shape) * mp_dtype_size(T->dtype);
    char *a = malloc(n + 1), *b = malloc(n + 1);
    memset(a, 0x11, n);
    memset(b, 0x22, n);
    mp_err e1, e2;
    mp_code c1 = ckpt_read(rp, w->name, w->offset, w->shape, a, &e1), c2 = ckpt_read(rf, w->name, w->offset, w->shape, b, &e2);
    CHECK(c1 == MP_OK && c2 == MP_OK, "tensor %s: read %d (%s) / %d (%s)", w->name, c1, c1 ? e1.msg : "",
          c2, c2 ? e2.msg : "");
    CHECK(c1 != MP_OK || c2 != MP_OK || !memcmp(a, b, n), "tensor %s: the planned reader reads other bytes", w->name);
    free(a);
    free(b);
    return nf;
}

/* planned-same DIR: the collective open of the checkpoint in DIR (any format version) against
 * ckpt_open of it on every rank: for every tensor, the regions of same_regions (and a tensor the
 * checkpoint lacks) give the same saved boxes in the same order and the same bytes, the metadata is
 * the same. */
static void cmd_planned_same(const char *dir) {
    ckpt_reader *rf = NULL, *rp = NULL;
    mp_err e;
    mp_code rc = ckpt_open(&rf, dir, &e);
    CHECK(rc == MP_OK, "open %s: %s", dir, e.msg);
    if (rc != MP_OK) return;
    int nt = ckpt_num_tensors(rf), n = 0;
    ckpt_region *w = calloc((size_t)(2 * nt + 1), sizeof *w);
    for (int t = 0; t < nt; t++) n += same_regions(ckpt_tensor_at(rf, t), g_rank, g_size, w + n);
    w[n].name = "no/such/tensor";
    for (int d = 0; d < CKPT_MAX_DIMS; d++) w[n].shape[d] = 1;
    rc = ckpt_open_planned(&rp, g_w, dir, w, n + 1, &e);
    CHECK(rc == MP_OK, "planned open of %s: %s", dir, e.msg);
    int boxes = 0;
    for (int i = 0; rc == MP_OK && i <= n; i++) boxes += same_region(rp, rf, &w[i]);
    CHECK(rc != MP_OK || ckpt_num_meta(rp) == ckpt_num_meta(rf), "metadata entries differ");
    for (int i = 0; rc == MP_OK && i < ckpt_num_meta(rf) && i < ckpt_num_meta(rp); i++)
        CHECK(!strcmp(ckpt_meta_key(rp, i), ckpt_meta_key(rf, i)) && !strcmp(ckpt_meta_value(rp, i), ckpt_meta_value(rf, i)),
              "metadata %s differs", ckpt_meta_key(rf, i));
    printf("rank %d: %d regions, %d saved boxes the same as ckpt_open's\n", g_rank, n, boxes);
    if (rp) ckpt_close(rp);
    ckpt_close(rf);
    free(w);
}

static void cmd_roundtrip(const char *root) {
    mp_err e;
    if (g_rank == 0) {
        char *cmd;
        if (asprintf(&cmd, "rm -rf '%s'", root) > 0) { if (system(cmd) != 0) g_fails++; free(cmd); }
    }
    MPI_Barrier(MPI_COMM_WORLD);
    /* 1. synchronous save, read back */
    cmd_save(root, 1, 0, 0, 0, 0, 0);
    ckpt_reader *r;
    mp_code rc = ckpt_open_latest(&r, root, &e);
    CHECK(rc == MP_OK, "open: %s", e.msg);
    if (rc == MP_OK) {
        CHECK(ckpt_reader_world(r) == g_size, "world %d", ckpt_reader_world(r));
        CHECK(!strcmp(ckpt_meta_get(r, "who"), "rank0"), "rank 0's metadata is stored, got %s", ckpt_meta_get(r, "who"));
        read_back(r, g_size);
        /* the replicated tensor has one box, from the last rank; files: one per rank */
        int t = ckpt_tensor_find(r, g_t[T_NORM].name);
        CHECK(t >= 0 && ckpt_tensor_at(r, t)->nboxes == 1, "replicated tensor boxes");
        if (t >= 0) CHECK(ckpt_box_at(r, ckpt_tensor_at(r, t)->box_first)->rank == g_size - 1, "writer of norm");
        ckpt_close(r);
    }
    /* 2. async + zstd */
    cmd_save(root, 2, 3, 1, 0, 0, 0);
    rc = ckpt_open_latest(&r, root, &e);
    CHECK(rc == MP_OK, "open: %s", e.msg);
    if (rc == MP_OK) {
        CHECK(ckpt_reader_step(r) == 2, "step %lld", (long long)ckpt_reader_step(r));
        read_back(r, g_size);
        if (g_rank == 0) CHECK(ckpt_verify(r, NULL, &e) == MP_OK, "verify: %s", e.msg);
        ckpt_close(r);
    }
    /* 3. a failure on the last rank only: every rank fails with its message */
    ckpt_save *s;
    rc = ckpt_save_begin(&s, g_w, root, 3, NULL, &e);
    CHECK(rc == MP_OK, "begin 3: %s", e.msg);
    if (rc == MP_OK) {
        owned ow;
        add_owned(s, &ow);
        if (g_rank == g_size - 1) {
            int64_t off[2] = {30, 0}, shp[2] = {10, 24};
            float junk[240] = {0};
            CHECK(ckpt_save_add(s, g_t[T_EMB].name, MP_F32, 2, g_t[T_EMB].shape, off, shp, junk, NULL) == MP_EINPUT,
                  "bad box accepted");
        }
        rc = ckpt_save_commit(s, NULL, &e);
        char want[64];
        snprintf(want, sizeof want, "[rank %d] ", g_size - 1);
        CHECK(rc == MP_EINPUT && (g_size == 1 || strstr(e.msg, want)) && strstr(e.msg, "outside"),
              "step 3 should fail everywhere naming rank %d: rc %d %s", g_size - 1, rc, e.msg);
        ckpt_save_free(s);
        free_owned(&ow);
    }
    /* 4. a failure only rank 0 can see: the replicated tensor written by two ranks */
    rc = ckpt_save_begin(&s, g_w, root, 4, NULL, &e);
    CHECK(rc == MP_OK, "begin 4: %s", e.msg);
    if (rc == MP_OK) {
        owned ow;
        add_owned(s, &ow);
        float norm[24] = {0};
        int64_t z[1] = {0};
        if (g_rank == 0) ckpt_save_add(s, g_t[T_NORM].name, MP_F32, 1, g_t[T_NORM].shape, z, g_t[T_NORM].shape, norm, NULL);
        rc = ckpt_save_commit(s, NULL, &e);
        CHECK(rc == MP_ECHECK && strstr(e.msg, "written twice") && strstr(e.msg, g_t[T_NORM].name),
              "step 4 should fail everywhere: rc %d %s", rc, e.msg);
        ckpt_save_free(s);
        free_owned(&ow);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    cmd_check(root, 2);
    if (g_rank == 0) {
        char p3[4096], p4[4096];
        snprintf(p3, sizeof p3, "%s/step_00000003.partial", root);
        snprintf(p4, sizeof p4, "%s/step_00000004.partial", root);
        CHECK(access(p3, F_OK) != 0 && access(p4, F_OK) != 0, "failed saves left .partial dirs");
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    mp_log_set_rank(g_rank, g_size);
    g_w = mp_comm_mpi_create(MPI_COMM_WORLD);
    int usage = 0;
    if (argc >= 3 && !strcmp(argv[1], "roundtrip")) {
        cmd_roundtrip(argv[2]);
    } else if (argc >= 4 && !strcmp(argv[1], "save")) {
        int zstd = 0, async = 0, files = 0, big = 0;
        size_t fill = 0;
        for (int i = 4; i < argc; i++) {
            if (!strcmp(argv[i], "--zstd") && i + 1 < argc) zstd = atoi(argv[++i]);
            else if (!strcmp(argv[i], "--async")) async = 1;
            else if (!strcmp(argv[i], "--big")) big = 1;
            else if (!strcmp(argv[i], "--fill") && i + 1 < argc) fill = (size_t)atoll(argv[++i]);
            else if (!strcmp(argv[i], "--files") && i + 1 < argc) {
                mp_err fe;
                if (ckpt_files_parse(argv[++i], &files, &fe) != MP_OK) usage = 1;
            } else usage = 1;
        }
        if (!usage) cmd_save(argv[2], atoll(argv[3]), zstd, async, files, big, fill);
    } else if (argc >= 4 && !strcmp(argv[1], "check")) {
        cmd_check(argv[2], atoll(argv[3]));
    } else if (argc >= 4 && !strcmp(argv[1], "planned")) {
        cmd_planned(argv[2], atoll(argv[3]));
    } else if (argc >= 3 && !strcmp(argv[1], "planned-same")) {
        cmd_planned_same(argv[2]);
    } else if (argc >= 4 && !strcmp(argv[1], "planned-damaged")) {
        cmd_planned_damaged(argv[2], atoll(argv[3]));
    } else {
        usage = 1;
    }
    int fails = g_fails;
    MPI_Allreduce(MPI_IN_PLACE, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (usage && g_rank == 0)
        fprintf(stderr, "usage: tool_ckpt_mpi roundtrip ROOT | save ROOT STEP [--zstd L] [--async] [--files rank|node|G] [--big] [--fill BYTES] | check ROOT STEP | planned ROOT STEP | planned-damaged ROOT STEP | planned-same DIR\n");
    if (!usage && g_rank == 0) fprintf(stderr, "tool_ckpt_mpi %s: %s (%d failures)\n", argv[1], fails ? "FAILED" : "ok", fails);
    g_w->ops->destroy(g_w);
    MPI_Finalize();
    return usage ? 2 : fails ? 1 : 0;
}
