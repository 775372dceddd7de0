/*
 * tests/ckpt/test_ckpt_plan.c — rank 0's planner of the collective open (ckpt/plan.c) on the runs of a
 * format-v3 index, without expanding them (ck_runs_query), against the planner on the expanded layout
 * (every box, the interval index: what ckpt_open's reader plans with): for layouts of every kind a tp x
 * dp save makes and some it does not (uneven FSDP groups, empty shares, replicated tensors, reversed
 * owners, several boxes of a tensor in one file, 1-D to 3-D tensors, worlds of 1 to 12), and the region
 * lists of simulated loaders on 1 to 8 ranks (their shards, column cuts, random boxes, empty regions,
 * absent tensors), the packed parts must be byte-identical.
 *
 * The checkpoints are indexes only (ckpt_save_commit_plan over one process standing for every rank:
 * ckpt_save_add_fill with file_rank, opts.world_size): the planner reads nothing else.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "core/comm.h"
#include "tests/testutil.h"

static mp_code no_fill(void *ctx, const int64_t *o, const int64_t *s, void *buf, mp_err *e) {
    (void)ctx; (void)o; (void)s; (void)buf; (void)e;
    return MP_OK;
}

static void cut(int64_t len, int n, int i, int64_t *o, int64_t *s) {
    *o = len * i / n;
    *s = len * (i + 1) / n - *o;
}

static void add(ckpt_save *s, int rank, const char *name, int nd, const int64_t *g, const int64_t *o, const int64_t *sh) {
    for (int d = 0; d < nd; d++)
        if (sh[d] <= 0) return;
    mp_err e;
    cr_assert_eq(ckpt_save_add_fill(s, rank, name, MP_F32, nd, g, o, sh, no_fill, NULL, &e), MP_OK, "%s: %s", name, e.msg);
}

/* The index of a save of world tp x dp (one process adding every rank's boxes): the tensor kinds of a
 * training save and odder ones. */
static void make_index(const char *root, int tp, int dp) {
    int W = tp * dp;
    mp_comm *w = mp_comm_self();
    ckpt_save_opts opts = {.world_size = W};
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, &opts, &e), MP_OK, "%s", e.msg);
    for (int r = 0; r < W; r++) {
        int ti = r % tp, di = r / tp;
        int64_t o[4] = {0}, sh[4];
        /* column-parallel weight: tp rows blocks, each FSDP-cut over dp (uneven: 37 rows per tp block) */
        int64_t gc[2] = {37 * tp, 24};
        int64_t bo, bs;
        cut(37, dp, di, &bo, &bs);
        o[0] = 37 * ti + bo; o[1] = 0; sh[0] = bs; sh[1] = 24;
        add(s, r, "model/col", 2, gc, o, sh);
        /* row-parallel weight: tp column blocks, rows FSDP-cut over dp */
        int64_t gr[2] = {40, 8 * tp};
        cut(40, dp, di, &o[0], &sh[0]);
        o[1] = 8 * ti; sh[1] = 8;
        add(s, r, "model/row", 2, gr, o, sh);
        /* few rows (k/v of few heads): row i in rank i % W; ranks past the rows get nothing */
        int64_t gk[2] = {3, 16};
        for (int i = r; i < 3; i += W) { o[0] = i; o[1] = 0; sh[0] = 1; sh[1] = 16; add(s, r, "model/kv", 2, gk, o, sh); }
        /* replicated 1-D tensor, written by the last rank */
        int64_t gn[1] = {24};
        if (r == W - 1) { o[0] = 0; sh[0] = 24; add(s, r, "model/norm", 1, gn, o, sh); }
        /* reversed owners over the world, 1-D */
        int64_t gv[1] = {5 * W + 3};
        cut(gv[0], W, W - 1 - r, &o[0], &sh[0]);
        add(s, r, "optim/rev", 1, gv, o, sh);
        /* several boxes per file: 2 W row blocks, rank r holds blocks 2r and 2r + 1 (runs of stride 0) */
        int64_t gb[2] = {4 * W, 6};
        for (int k = 0; k < 2; k++) { o[0] = 4 * r + 2 * k; o[1] = 0; sh[0] = 2; sh[1] = 6; add(s, r, "optim/two", 2, gb, o, sh); }
        /* blocks interleaved over the files: block b in rank b % W (3 per rank, stride 1) */
        int64_t gi[2] = {3 * W, 5};
        for (int k = 0; k < 3; k++) { o[0] = k * W + r; o[1] = 0; sh[0] = 1; sh[1] = 5; add(s, r, "optim/inter", 2, gi, o, sh); }
        /* 3-D: a tp x dp grid on dims 2 and 0, dim 1 whole */
        int64_t g3[3] = {7, 3, 4 * tp};
        cut(7, dp, di, &o[0], &sh[0]);
        o[1] = 0; sh[1] = 3; o[2] = 4 * ti; sh[2] = 4;
        add(s, r, "optim/three", 3, g3, o, sh);
        /* descending columns within a file: rank r's two boxes of dim-1 blocks, the higher added first */
        int64_t gd[2] = {W, 4};
        for (int k = 1; k >= 0; k--) { o[0] = r; o[1] = 2 * k; sh[0] = 1; sh[1] = 2; add(s, r, "optim/desc", 2, gd, o, sh); }
    }
    ckpt_save_meta(s, "who", "test_ckpt_plan", NULL);
    cr_assert_eq(ckpt_save_commit_plan(s, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    w->ops->destroy(w);
}

/* Appends region (name, off, shp) of nd dims to the list. */
static void region(ckpt_region *w, int *n, const char *name, int nd, const int64_t *o, const int64_t *s) {
    ckpt_region *x = &w[(*n)++];
    x->name = name;
    for (int d = 0; d < CKPT_MAX_DIMS; d++) {
        x->offset[d] = d < nd ? o[d] : 0;
        x->shape[d] = d < nd ? s[d] : 1;
    }
}

/* The region lists of simulated loaders on nq ranks over the tensors of the index in dir, one after
 * another (*req, rcount[nq]): per tensor the rank's row shard, a column cut of another shard, a random
 * box, an empty region; a tensor the checkpoint lacks. */
static char *loader_lists(const char *dir, int nq, int64_t *rcount, unsigned *seed) {
    ckpt_reader *r;
    mp_err e;
    cr_assert_eq(ckpt_open(&r, dir, &e), MP_OK, "%s", e.msg);
    int nt = ckpt_num_tensors(r);
    ck_buf all = {0};
    for (int q = 0; q < nq; q++) {
        ckpt_region *w = calloc((size_t)(4 * nt + 1), sizeof *w);
        int n = 0;
        for (int t = 0; t < nt; t++) {
            const ckpt_tensor_info *T = ckpt_tensor_at(r, t);
            int64_t o[4] = {0}, s[4];
            for (int d = 0; d < T->ndim; d++) s[d] = T->shape[d];
            cut(T->shape[0], nq, q, &o[0], &s[0]);
            region(w, &n, T->name, T->ndim, o, s);
            if (T->ndim >= 2) {
                cut(T->shape[0], nq, (q + 1) % nq, &o[0], &s[0]);
                cut(T->shape[1], 3, q % 3, &o[1], &s[1]);
                region(w, &n, T->name, T->ndim, o, s);
            }
            for (int d = 0; d < T->ndim; d++) {
                o[d] = rand_r(seed) % T->shape[d];
                s[d] = 1 + rand_r(seed) % (T->shape[d] - o[d]);
            }
            region(w, &n, T->name, T->ndim, o, s);
            s[0] = 0;
            region(w, &n, T->name, T->ndim, o, s);
        }
        int64_t z[1] = {0}, one[1] = {1};
        region(w, &n, "model/absent", 1, z, one);
        size_t bytes;
        char *l = ckpt_region_list(w, n, &bytes);
        cr_assert(l);
        rcount[q] = (int64_t)bytes;
        ck_buf_put(&all, l, bytes);
        free(l);
        free(w);
    }
    ckpt_close(r);
    return all.p;
}

/* The parts of nq loaders planned on the runs and on the expanded layout of the index in dir: equal. */
static void same_parts(const char *dir, int nq, unsigned *seed) {
    int64_t *rcount = calloc((size_t)nq, sizeof *rcount), *pa = calloc((size_t)nq, sizeof *pa),
            *pb = calloc((size_t)nq, sizeof *pb);
    char *req = loader_lists(dir, nq, rcount, seed);
    ck_plan_src *runs, *boxes;
    mp_err e;
    cr_assert_eq(ck_plan_src_open(dir, 0, &runs, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ck_plan_src_open(dir, 1, &boxes, &e), MP_OK, "%s", e.msg);
    ck_buf a = {0}, b = {0};
    cr_assert_eq(ck_plan_pack(runs, nq, req, rcount, &a, pa, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ck_plan_pack(boxes, nq, req, rcount, &b, pb, &e), MP_OK, "%s", e.msg);
    for (int q = 0; q < nq; q++) cr_assert_eq(pa[q], pb[q], "%s, %d loaders: rank %d's part: %lld bytes on the runs, "
                                              "%lld on the boxes", dir, nq, q, (long long)pa[q], (long long)pb[q]);
    cr_assert(a.n == b.n && a.n > 0 && !memcmp(a.p, b.p, a.n), "%s, %d loaders: the parts differ", dir, nq);
    ck_plan_src_free(runs);
    ck_plan_src_free(boxes);
    free(a.p); free(b.p); free(req); free(rcount); free(pa); free(pb);
}

Test(ckpt_plan, runs_plan_as_the_expanded_layout) {
    static const int mesh[][2] = {{1, 1}, {2, 1}, {1, 3}, {2, 2}, {2, 3}, {3, 2}, {4, 3}, {1, 7}, {8, 1}};
    unsigned seed = 23;
    for (size_t m = 0; m < sizeof mesh / sizeof mesh[0]; m++) {
        char *root = tu_mkdtemp("ckpt_plan");
        make_index(root, mesh[m][0], mesh[m][1]);
        char *dir = tu_path(root, "step_00000001");
        for (int nq = 1; nq <= 8; nq++) same_parts(dir, nq, &seed);
        free(dir);
        tu_rm_rf(root);
        free(root);
    }
}

/* The box order of the parts: offset (one tensor). */
static int cmp_off(const void *a, const void *b) { return ck_off_cmp(((const ck_box *)a)->off, ((const ck_box *)b)->off); }
static int cmp_hit_off(const void *a, const void *b) { return ck_off_cmp(((const ck_hit *)a)->off, ((const ck_hit *)b)->off); }

/* ck_runs_query on random runs (any valid run an index may hold, also those no writer makes: negative
 * steps and strides, a file's boxes at offsets descending in the order) against brute force: every
 * member expanded, intersected with the region, its k counted over all boxes of its file. */
Test(ckpt_plan, runs_query_against_brute_force) {
    unsigned seed = 7;
    enum { W = 5 };
    ck_file files[W];
    memset(files, 0, sizeof files);
    for (int i = 0; i < W; i++) files[i].rank = i;
    for (int round = 0; round < 400; round++) {
        ck_tensor T;
        memset(&T, 0, sizeof T);
        snprintf(T.name, sizeof T.name, "t");
        T.ndim = 1 + (int)(rand_r(&seed) % 3);
        for (int d = 0; d < CKPT_MAX_DIMS; d++) T.shape[d] = d < T.ndim ? 1 + rand_r(&seed) % 12 : 1;
        ck_layout L = {.version = 3, .world = W, .ntensors = 1, .t = &T, .nfiles = W, .f = files};
        ck_run runs[6];
        int nr = 1 + (int)(rand_r(&seed) % 6);
        int64_t total = 0;
        for (int r = 0; r < nr; r++) {
            ck_run *R = &runs[r];
            memset(R, 0, sizeof *R);
            R->count = 1 + rand_r(&seed) % 4;
            R->stride = (int32_t)(rand_r(&seed) % 3) - 1;
            R->rank0 = R->stride < 0 ? (int32_t)(W - 1) : R->stride > 0 ? 0 : (int32_t)(rand_r(&seed) % W);
            if (R->count > W) R->count = W;
            for (int d = 0; d < CKPT_MAX_DIMS; d++) {
                if (d >= T.ndim) { R->shp[d] = 1; continue; }
                R->shp[d] = 1 + rand_r(&seed) % T.shape[d];
                int64_t room = T.shape[d] - R->shp[d];   /* off + i step in [0, room] for i < count */
                int64_t maxs = R->count > 1 ? room / (R->count - 1) : 0;
                R->step[d] = maxs ? (int64_t)(rand_r(&seed) % (2 * maxs + 1)) - maxs : 0;
                int64_t lo = R->step[d] < 0 ? -R->step[d] * (R->count - 1) : 0;
                int64_t hi = room - (R->step[d] > 0 ? R->step[d] * (R->count - 1) : 0);
                R->off[d] = lo + rand_r(&seed) % (hi - lo + 1);
            }
            total += R->count;
        }
        int64_t bound[6 * 4];   /* odd queries pass the runs' bounds (ck_runs_bounds), even ones none */
        ck_runs_bounds(runs, nr, bound);
        ck_box *all = calloc((size_t)total, sizeof *all);
        int na = 0;
        for (int r = 0; r < nr; r++)
            for (int64_t i = 0; i < runs[r].count; i++, na++) {
                all[na].file = runs[r].rank0 + (int)i * runs[r].stride;
                for (int d = 0; d < CKPT_MAX_DIMS; d++) {
                    all[na].off[d] = runs[r].off[d] + i * runs[r].step[d];
                    all[na].shp[d] = runs[r].shp[d];
                }
            }
        for (int qn = 0; qn < 8; qn++) {
            int64_t qo[CKPT_MAX_DIMS] = {0}, qs[CKPT_MAX_DIMS] = {1, 1, 1, 1};
            for (int d = 0; d < T.ndim; d++) {
                qo[d] = (int64_t)(rand_r(&seed) % (T.shape[d] + 2)) - 1;
                qs[d] = (int64_t)(rand_r(&seed) % (T.shape[d] + 2));
            }
            if (qn >= 6)   /* extreme regions: the query clips them to the tensor without overflow */
                for (int d = 0; d < T.ndim; d++) {
                    qo[d] = qn == 6 ? INT64_MIN / 2 + d : (d == 0 ? qo[d] : INT64_MAX - 3);
                    qs[d] = INT64_MAX - (int64_t)(rand_r(&seed) % 2);
                }
            ck_hit *got = NULL;
            ck_box *want = calloc((size_t)total + 1, sizeof *want);
            int ng = 0, cap = 0, nw = 0;
            ck_runs_query(&L, runs, qn % 2 ? bound : NULL, 0, nr, 0, T.ndim, T.shape, 0, qo, qs, &got, &ng, &cap);
            for (int j = 0; j < na; j++) {
                if (!ck_intersect(T.ndim, qo, qs, all[j].off, all[j].shp, NULL, NULL)) continue;
                want[nw] = all[j];
                for (int m = 0; m < na; m++)
                    want[nw].k += all[m].file == all[j].file && ck_off_cmp(all[m].off, all[j].off) < 0;
                nw++;
            }
            cr_assert_eq(ng, nw, "round %d: %d boxes found on the runs, %d by brute force", round, ng, nw);
            if (ng > 1) qsort(got, (size_t)ng, sizeof *got, cmp_hit_off);   /* got is NULL when nothing was found */
            if (nw > 1) qsort(want, (size_t)nw, sizeof *want, cmp_off);
            for (int j = 0; j < nw; j++)
                cr_assert(got[j].file == want[j].file && got[j].k == want[j].k && got[j].tensor == 0 && got[j].box == -1 &&
                          !memcmp(got[j].off, want[j].off, sizeof got[j].off) &&
                          !memcmp(got[j].shp, want[j].shp, sizeof got[j].shp),
                          "round %d, box %d: file %d k %lld on the runs, file %d k %lld by brute force", round, j,
                          got[j].file, (long long)got[j].k, want[j].file, (long long)want[j].k);
            free(got);
            free(want);
        }
        free(all);
    }
}
