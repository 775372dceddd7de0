/*
 * ckpt/runs.c — boxes as runs: the layout of a format-v3 index (docs/FORMAT.md, "/layout/runs").
 *
 * The boxes of a tensor saved by a tp x dp mesh are regular: equal shapes at offsets in arithmetic
 * progression, in rank files whose ranks are in arithmetic progression too. A run stores such a
 * progression in one row: (tensor, count, rank0, stride, off, step, shape) means boxes i = 0..count-1
 * at off + i * step of rank file rank0 + i * stride. The index holds runs, not boxes, so it grows with
 * the number of runs (a few per tensor for a tp x dp save), not with the world.
 *
 * Building (rank 0 at the commit, and any tool that writes an index from a ck_layout): per tensor, its
 * boxes are merged greedily into maximal runs in two orders, offsets compared dim 0 first (as the
 * layout sorts them: column-parallel weights, one run per tp rank and uneven FSDP group) and dim 0
 * last (row-parallel weights, whose tp column blocks share rows: dim 0 first would give a run per dp
 * rank), and the order with fewer runs is stored. Any layout is representable (a run of one box).
 *
 * Expanding (the reader): every run is checked in O(1) (tensor, count, the first and last box inside
 * the tensor — offsets are linear in i, so all between are too —, the first and last file rank in the
 * world) and expanded; each box's rank must name a row of /layout/files. The boxes are then sorted per
 * tensor by offset, numbered for their derived dataset paths (/<name>/box_<k>, k counting the file's
 * boxes of the tensor in that order: the writer numbers them so; ck_box_path derives the path), and
 * the files' box counts and bytes checked against /layout/files. The no-overlap rule is the index reader's (ck_layout_check_tensor).
 */
#define _GNU_SOURCE
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* -------------------------------------------------------------------------------------- building */

/* Offsets compared dim 1, 2, 3 first and dim 0 last (qsort_r over indices into the layout ctx's boxes). */
static int cmp_last(const void *a, const void *b, void *ctx) {
    const ck_layout *L = ctx;
    const ck_box *x = &L->b[*(const int *)a], *y = &L->b[*(const int *)b];
    for (int k = 1; k <= CKPT_MAX_DIMS; k++) {
        int d = k % CKPT_MAX_DIMS;
        if (x->off[d] != y->off[d]) return x->off[d] < y->off[d] ? -1 : 1;
    }
    return 0;
}

/* Greedy merge of the boxes ids[n] of tensor t, in that order, into runs; appends them to out (when
 * not NULL) and returns their number. */
static int64_t merge(const ck_layout *L, int t, const int *ids, int64_t n, ck_run *out) {
    int64_t nr = 0;
    ck_run R;
    for (int64_t i = 0; i < n; i++) {
        const ck_box *B = &L->b[ids[i]];
        int rank = L->f[B->file].rank;
        int ext = nr > 0 && !memcmp(R.shp, B->shp, sizeof R.shp);
        if (ext && R.count == 1) {
            R.stride = (int32_t)((int64_t)rank - R.rank0);
            for (int d = 0; d < CKPT_MAX_DIMS; d++) R.step[d] = B->off[d] - R.off[d];
        } else if (ext) {
            ext = (int64_t)R.rank0 + R.count * (int64_t)R.stride == rank;
            for (int d = 0; ext && d < CKPT_MAX_DIMS; d++) ext = R.off[d] + R.count * R.step[d] == B->off[d];
        }
        if (ext) {
            R.count++;
        } else {
            if (nr > 0 && out) out[nr - 1] = R;
            memset(&R, 0, sizeof R);
            R.tensor = t;
            R.rank0 = rank;
            R.count = 1;
            memcpy(R.off, B->off, sizeof R.off);
            memcpy(R.shp, B->shp, sizeof R.shp);
            nr++;
        }
    }
    if (nr > 0 && out) out[nr - 1] = R;
    return nr;
}

void ck_runs_build(const ck_layout *L, ck_run **runs, int64_t *n) {
    ck_run *out = mp_xmalloc(sizeof *out * (size_t)(L->nboxes + 1));
    int *a = mp_xmalloc(sizeof(int) * (size_t)(L->nboxes + 1)), *b = mp_xmalloc(sizeof(int) * (size_t)(L->nboxes + 1));
    int64_t nr = 0;
    for (int t = 0; t < L->ntensors; t++) {
        const ck_tensor *T = &L->t[t];
        for (int64_t i = 0; i < T->nboxes; i++) a[i] = b[i] = (int)(T->box_first + i);
        qsort_r(b, (size_t)T->nboxes, sizeof(int), cmp_last, (void *)L);
        int64_t na = merge(L, t, a, T->nboxes, NULL), nb = merge(L, t, b, T->nboxes, NULL);
        nr += merge(L, t, nb < na ? b : a, T->nboxes, out + nr);
    }
    free(a);
    free(b);
    *runs = out;
    *n = nr;
}

/* ------------------------------------------------------------------------------------- expanding */

/* Lexicographic order of the offsets of two boxes (within one tensor). */
static int cmp_box_off(const void *a, const void *b) {
    return ck_off_cmp(((const ck_box *)a)->off, ((const ck_box *)b)->off);
}

/* The row of L->f with rank `rank` (files sorted by rank), or -1. */
static int file_of_rank(const ck_layout *L, int64_t rank) {
    int lo = 0, hi = L->nfiles;
    while (lo < hi) {
        int m = lo + (hi - lo) / 2;
        if (L->f[m].rank == rank) return m;
        if (L->f[m].rank < rank) lo = m + 1; else hi = m;
    }
    return -1;
}

/* Checks run R (row i) against L's tensors and world, without overflow: O(1). */
static mp_code check_run(const ck_layout *L, const ck_run *R, int64_t i, const char *path, mp_err *e) {
    if (R->tensor < 0 || R->tensor >= L->ntensors || R->count < 1 || R->count > INT32_MAX)
        return mp_err_set(e, MP_ECHECK, "%s: runs[%lld]: tensor %d or count %lld out of range", path, (long long)i,
                          (int)R->tensor, (long long)R->count);
    const ck_tensor *T = &L->t[R->tensor];
    int64_t last_rank = (int64_t)R->rank0 + (R->count - 1) * (int64_t)R->stride;
    int ok = R->rank0 >= 0 && R->rank0 < L->world && last_rank >= 0 && last_rank < L->world;
    for (int d = 0; ok && d < CKPT_MAX_DIMS; d++) {
        int64_t lim = d < T->ndim ? T->shape[d] - R->shp[d] : 0, span, last;
        if (d >= T->ndim) {
            ok = R->off[d] == 0 && R->step[d] == 0 && R->shp[d] == 1;
            continue;
        }
        ok = R->shp[d] > 0 && R->shp[d] <= T->shape[d] && R->off[d] >= 0 && R->off[d] <= lim &&
             !__builtin_mul_overflow(R->count - 1, R->step[d], &span) && !__builtin_add_overflow(R->off[d], span, &last) &&
             last >= 0 && last <= lim;
    }
    if (!ok)
        return mp_err_set(e, MP_ECHECK, "%s: runs[%lld] (tensor %s): boxes outside the tensor or file ranks outside "
                          "the world of %d", path, (long long)i, T->name, L->world);
    return MP_OK;
}

/* Adds the boxes of run R (checked) to L->b from L->nboxes on; MP_ECHECK when a rank has no file row. */
static mp_code expand_run(ck_layout *L, const ck_run *R, int64_t i, const char *path, mp_err *e) {
    for (int64_t c = 0; c < R->count; c++) {
        ck_box *B = &L->b[L->nboxes];
        memset(B, 0, sizeof *B);
        B->tensor = R->tensor;
        B->file = file_of_rank(L, (int64_t)R->rank0 + c * (int64_t)R->stride);
        if (B->file < 0)
            return mp_err_set(e, MP_ECHECK, "%s: runs[%lld] (tensor %s): box %lld is in rank file %lld, which "
                              "/layout/files does not list", path, (long long)i, L->t[R->tensor].name, (long long)c,
                              (long long)((int64_t)R->rank0 + c * (int64_t)R->stride));
        for (int d = 0; d < CKPT_MAX_DIMS; d++) {
            B->off[d] = R->off[d] + c * R->step[d];
            B->shp[d] = R->shp[d];
        }
        L->nboxes++;
    }
    return MP_OK;
}

void ck_layout_derive_paths(ck_layout *L) {
    assert(!L->paths);
    int64_t *cnt = mp_xcalloc(sizeof(int64_t) * (size_t)(L->nfiles + 1));
    int *stamp = mp_xmalloc(sizeof(int) * (size_t)(L->nfiles + 1));
    for (int i = 0; i < L->nfiles; i++) stamp[i] = -1;
    for (int j = 0; j < L->nboxes; j++) {
        ck_box *B = &L->b[j];
        if (stamp[B->file] != B->tensor) { stamp[B->file] = B->tensor; cnt[B->file] = 0; }
        B->k = cnt[B->file]++;
    }
    free(cnt);
    free(stamp);
}

const char *ck_box_path(const ck_layout *L, const ck_box *B, int tiles, char *buf) {
    if (L->paths) {
        const char *p = L->paths + B->path;
        return tiles ? p + strlen(p) + 1 : p;
    }
    snprintf(buf, CK_DSET_MAX, "/%s/%s_%lld", L->t[B->tensor].name, tiles ? "tiles" : "box", (long long)B->k);
    return buf;
}

/* Sorts each tensor's boxes by offset (runs may list them in another order) and sets box_first and
 * nboxes of the tensors; the runs are grouped by tensor in tensor order (checked). */
static mp_code group_boxes(ck_layout *L, const char *path, mp_err *e) {
    int64_t j = 0;
    for (int t = 0; t < L->ntensors; t++) {
        ck_tensor *T = &L->t[t];
        T->box_first = j;
        while (j < L->nboxes && L->b[j].tensor == t) j++;
        T->nboxes = j - T->box_first;
        qsort(L->b + T->box_first, (size_t)T->nboxes, sizeof(ck_box), cmp_box_off);
    }
    if (j != L->nboxes) return mp_err_set(e, MP_ECHECK, "%s: /layout/runs is not grouped by tensor in tensor order", path);
    return MP_OK;
}

/* The files' box counts and bytes against /layout/files. */
static mp_code check_files(const ck_layout *L, const char *path, mp_err *e) {
    int64_t *nb = mp_xcalloc(sizeof(int64_t) * (size_t)(L->nfiles + 1));
    int64_t *by = mp_xcalloc(sizeof(int64_t) * (size_t)(L->nfiles + 1));
    for (int j = 0; j < L->nboxes; j++) {
        const ck_box *B = &L->b[j];
        nb[B->file]++;
        by[B->file] += ck_volume(L->t[B->tensor].ndim, B->shp) * (int64_t)mp_dtype_size(L->t[B->tensor].dtype);
    }
    mp_code rc = MP_OK;
    for (int i = 0; i < L->nfiles && rc == MP_OK; i++)
        if (nb[i] != L->f[i].nboxes || by[i] != L->f[i].bytes)
            rc = mp_err_set(e, MP_ECHECK, "%s: /layout/files lists %lld boxes (%lld bytes) in %s, the runs %lld (%lld "
                            "bytes)", path, (long long)L->f[i].nboxes, (long long)L->f[i].bytes, L->f[i].name,
                            (long long)nb[i], (long long)by[i]);
    free(nb);
    free(by);
    return rc;
}

mp_code ck_runs_expand(ck_layout *L, const ck_run *runs, int64_t n, const char *path, mp_err *e) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        MP_TRY(check_run(L, &runs[i], i, path, e));
        if (i > 0 && runs[i].tensor < runs[i - 1].tensor)
            return mp_err_set(e, MP_ECHECK, "%s: /layout/runs is not grouped by tensor in tensor order", path);
        total += runs[i].count;
        if (total > INT32_MAX)
            return mp_err_set(e, MP_ECHECK, "%s: /layout/runs holds more than %d boxes", path, INT32_MAX);
    }
    /* before allocating: the runs must claim as many boxes as the file table lists (a crafted count is
     * refused here unless the file rows tell the same lie; then the expansion's memory is what the index
     * claims, and running out of it is a message, not a crash) */
    int64_t listed = 0;
    for (int i = 0; i < L->nfiles; i++)
        if (L->f[i].nboxes < 0 || __builtin_add_overflow(listed, L->f[i].nboxes, &listed))
            return mp_err_set(e, MP_ECHECK, "%s: /layout/files: bad box count in %s", path, L->f[i].name);
    if (listed != total)
        return mp_err_set(e, MP_ECHECK, "%s: /layout/runs holds %lld boxes, /layout/files lists %lld", path,
                          (long long)total, (long long)listed);
    free(L->b);
    L->b = mp_xcalloc(sizeof *L->b * (size_t)(total + 1));
    L->nboxes = 0;
    for (int64_t i = 0; i < n; i++) MP_TRY(expand_run(L, &runs[i], i, path, e));
    MP_TRY(group_boxes(L, path, e));
    ck_layout_derive_paths(L);
    return check_files(L, path, e);
}
