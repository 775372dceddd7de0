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
 * boxes of the tensor in that order: the writer numbers them so; ck_box_path derives the path).
 *
 * Checking (ck_runs_check, the index reader's every rule of a v3 layout's boxes) needs no expansion of
 * the whole: tensor by tensor, its runs are expanded into one scratch buffer, sorted, and checked for
 * files listed and no overlap (ck_layout_check_tensor); the files' box counts and bytes are summed
 * on the way. O(all boxes) time, O(largest tensor + files) memory.
 *
 * Querying (ck_runs_query, the collective open's rank 0): the members of a run that meet a region are
 * an interval of i (per dim an inequality linear in i), and a box's k is the number of the tensor's
 * boxes in its file at smaller offsets, counted run by run (a run of stride 0 keeps its boxes in one
 * file at offsets monotone in i: a binary search). Nothing is expanded: rank 0 holds the runs, not
 * the world's boxes. A run whose members' extent in dims 0 and 1 (ck_runs_bounds: 32 bytes a run,
 * kept by the caller) misses the region is passed over without reading its 120-byte row, and the boxes
 * found are written as 80-byte ck_hit records (what a part carries), not whole ck_box records.
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
    if (rank >= 0 && rank < L->nfiles && L->f[rank].rank == rank) return (int)rank;   /* every rank has a file */
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

/* Adds the boxes of run R (checked; its tensor's boxes go in as tensor `as`) to L->b from L->nboxes on:
 * their tensor, file, offset and shape; the other fields of those L->b entries are left as they are,
 * which must be 0 (a calloc'd array, or one that only boxes expanded so held: zeroing 152 bytes per
 * box was most of the index check's expansion). MP_ECHECK when a rank has no file row (row i of path
 * names it). */
static mp_code expand_run(ck_layout *L, const ck_run *R, int as, int64_t i, const char *path, mp_err *e) {
    for (int64_t c = 0; c < R->count; c++) {
        ck_box *B = &L->b[L->nboxes];
        B->tensor = as;
        B->file = file_of_rank(L, (int64_t)R->rank0 + c * (int64_t)R->stride);
        if (B->file < 0)
            return mp_err_set(e, MP_ECHECK, "%s: runs[%lld] (tensor %s): box %lld is in rank file %lld, which "
                              "/layout/files does not list", path, (long long)i, L->t[as].name, (long long)c,
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

/* Every run checked in O(1) (check_run), the runs grouped by tensor in tensor order, and as many boxes
 * in them (at most INT32_MAX) as /layout/files lists: before anything is allocated for the boxes (a
 * crafted count is refused here unless the file rows tell the same lie; then the memory is what the
 * index claims, and running out of it is a message, not a crash). */
static mp_code check_runs(const ck_layout *L, const ck_run *runs, int64_t n, const char *path, mp_err *e) {
    int64_t total = 0, listed = 0;
    for (int64_t i = 0; i < n; i++) {
        MP_TRY(check_run(L, &runs[i], i, path, e));
        if (i > 0 && runs[i].tensor < runs[i - 1].tensor)
            return mp_err_set(e, MP_ECHECK, "%s: /layout/runs is not grouped by tensor in tensor order", path);
        total += runs[i].count;
        if (total > INT32_MAX)
            return mp_err_set(e, MP_ECHECK, "%s: /layout/runs holds more than %d boxes", path, INT32_MAX);
    }
    for (int i = 0; i < L->nfiles; i++)
        if (L->f[i].nboxes < 0 || __builtin_add_overflow(listed, L->f[i].nboxes, &listed))
            return mp_err_set(e, MP_ECHECK, "%s: /layout/files: bad box count in %s", path, L->f[i].name);
    if (listed != total)
        return mp_err_set(e, MP_ECHECK, "%s: /layout/runs holds %lld boxes, /layout/files lists %lld", path,
                          (long long)total, (long long)listed);
    return MP_OK;
}

/* Expands runs[a, b) (all of tensor t's, checked) into S (S->t: the one tensor t of L, S->f: L's files;
 * S->b holds at least their count), its boxes sorted by offset and numbered (k), S->ntensors 1. */
static mp_code expand_tensor(const ck_layout *L, int t, const ck_run *runs, int64_t a, int64_t b, ck_layout *S,
                             const char *path, mp_err *e) {
    S->t[0] = L->t[t];
    S->t[0].box_first = 0;
    S->nboxes = 0;
    for (int64_t i = a; i < b; i++) MP_TRY(expand_run(S, &runs[i], 0, i, path, e));
    S->t[0].nboxes = S->nboxes;
    int sorted = 1;   /* runs merged in offset order expand sorted: no sort needed */
    for (int j = 1; j < S->nboxes && sorted; j++) sorted = ck_off_cmp(S->b[j - 1].off, S->b[j].off) <= 0;
    if (!sorted) qsort(S->b, (size_t)S->nboxes, sizeof(ck_box), cmp_box_off);
    ck_layout_derive_paths(S);
    return MP_OK;
}

/* The files' box counts and bytes (nb, by: summed over all tensors) against /layout/files. */
static mp_code check_files(const ck_layout *L, const int64_t *nb, const int64_t *by, const char *path, mp_err *e) {
    for (int i = 0; i < L->nfiles; i++)
        if (nb[i] != L->f[i].nboxes || by[i] != L->f[i].bytes)
            return mp_err_set(e, MP_ECHECK, "%s: /layout/files lists %lld boxes (%lld bytes) in %s, the runs %lld (%lld "
                              "bytes)", path, (long long)L->f[i].nboxes, (long long)L->f[i].bytes, L->f[i].name,
                              (long long)nb[i], (long long)by[i]);
    return MP_OK;
}

/* Checks tensor t, expanded in S, against the box range the tensor table stores for it (first, from the
 * boxes of the tensors before it) and the no-overlap rule; adds its boxes to the files' counts. */
static mp_code check_tensor(const ck_layout *L, int t, ck_layout *S, int64_t first, int64_t *nb, int64_t *by,
                            const char *path, mp_err *e) {
    const ck_tensor *T = &L->t[t];
    if (T->box_first != first || T->nboxes != S->nboxes)
        return mp_err_set(e, MP_ECHECK, "%s: tensor %s: boxes [%lld, +%lld) in the table, [%lld, +%lld) in the runs",
                          path, T->name, (long long)T->box_first, (long long)T->nboxes, (long long)first,
                          (long long)S->nboxes);
    int64_t esize = (int64_t)mp_dtype_size(T->dtype);
    for (int j = 0; j < S->nboxes; j++) {
        nb[S->b[j].file]++;
        by[S->b[j].file] += ck_volume(T->ndim, S->b[j].shp) * esize;
    }
    if (ck_layout_check_tensor(S, 0, 0, e) != MP_OK) return mp_err_wrap(e, "%s", path);
    return MP_OK;
}

mp_code ck_runs_check(const ck_layout *L, const ck_run *runs, int64_t n, const char *path, mp_err *e) {
    MP_TRY(check_runs(L, runs, n, path, e));
    int64_t most = 0;   /* the largest tensor's boxes: the scratch */
    for (int64_t a = 0, b = 0; a < n; a = b) {
        int64_t c = 0;
        for (b = a; b < n && runs[b].tensor == runs[a].tensor; b++) c += runs[b].count;
        if (c > most) most = c;
    }
    ck_tensor one;
    ck_layout S = {.version = L->version, .world = L->world, .ntensors = 1, .t = &one, .f = L->f, .nfiles = L->nfiles};
    S.b = mp_xcalloc(sizeof(ck_box) * (size_t)(most + 1));   /* expand_run writes only what it sets */
    int64_t *nb = mp_xcalloc(sizeof(int64_t) * (size_t)(L->nfiles + 1));
    int64_t *by = mp_xcalloc(sizeof(int64_t) * (size_t)(L->nfiles + 1));
    mp_code rc = MP_OK;
    int64_t a = 0, first = 0;
    for (int t = 0; t < L->ntensors && rc == MP_OK; t++) {
        int64_t b = a;
        while (b < n && runs[b].tensor == t) b++;
        rc = expand_tensor(L, t, runs, a, b, &S, path, e);
        if (rc == MP_OK) rc = check_tensor(L, t, &S, first, nb, by, path, e);
        first += S.nboxes;
        a = b;
    }
    if (rc == MP_OK) rc = check_files(L, nb, by, path, e);
    free(S.b);
    free(nb);
    free(by);
    return rc;
}

void ck_runs_expand(ck_layout *L, const ck_run *runs, int64_t n) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) total += runs[i].count;
    free(L->b);
    L->b = mp_xcalloc(sizeof *L->b * (size_t)(total + 1));
    L->nboxes = 0;
    mp_err e;
    for (int64_t i = 0; i < n; i++) {
        mp_code rc = expand_run(L, &runs[i], runs[i].tensor, i, "", &e);
        assert(rc == MP_OK);   /* checked by ck_runs_check */
        (void)rc;
    }
    for (int t = 0, j = 0; t < L->ntensors; t++) {   /* grouped by tensor (checked): sort each group */
        ck_tensor *T = &L->t[t];
        T->box_first = j;
        while (j < L->nboxes && L->b[j].tensor == t) j++;
        T->nboxes = j - T->box_first;
        qsort(L->b + T->box_first, (size_t)T->nboxes, sizeof(ck_box), cmp_box_off);
    }
    ck_layout_derive_paths(L);
}

/* ------------------------------------------------------------------------------------- querying */

/* floor(a / b) for b > 0. */
static int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}

/* The members [*lo, *hi) of run R (checked against its tensor, of nd dims) that meet the region
 * [q0, q1) (clipped to the tensor by the caller: the boxes lie inside it, so they meet the same
 * members; non-empty in every dim). Per dim box i is [o + i s, o + i s + w) (w > 0), which meets
 * [q0, q1) iff i s < q1 - o and i s > q0 - o - w: an interval of i, intersected over the dims. After
 * the clip 0 <= q0 < q1 <= shape and 0 <= o, o + w <= shape, and |s| <= shape (a run of one box: its
 * step is ignored), so every term fits in int64. */
static void run_range(int nd, const ck_run *R, const int64_t *q0, const int64_t *q1, int64_t *lo, int64_t *hi) {
    int64_t a = 0, b = R->count;
    for (int d = 0; d < nd && a < b; d++) {
        int64_t s = R->count > 1 ? R->step[d] : 0, x = q1[d] - R->off[d], y = q0[d] - R->off[d] - R->shp[d];
        if (s == 0 && !(0 < x && 0 > y)) { b = a; break; }
        if (s == 0) continue;
        int64_t span = (R->count - 1) * s;   /* the members' extent: most runs miss a region, no division */
        if (x <= (span < 0 ? span : 0) || y >= (span > 0 ? span : 0)) { b = a; break; }
        if (s < 0) {   /* i s < x, i s > y  <=>  i |s| < -y, i |s| > -x */
            int64_t t = x;
            s = -s;
            x = -y;
            y = -t;
        }
        int64_t l = floor_div(y, s) + 1, h = -floor_div(-x, s);   /* i > y / s, i < x / s */
        if (l > a) a = l;
        if (h < b) b = h;
    }
    *lo = a;
    *hi = b > a ? b : a;
}

/* The offset of member i of run R into o. */
static void run_member(const ck_run *R, int64_t i, int64_t *o) {
    for (int d = 0; d < CKPT_MAX_DIMS; d++) o[d] = R->off[d] + i * R->step[d];
}

/* How many boxes of run R lie in rank file `rank` at offsets sorting before off (ck_off_cmp). A run
 * with stride 0 keeps all its boxes in one file, at offsets that are strictly monotone in the order
 * (the first dim with a nonzero step decides): a binary search; else at most one member is in it. */
static int64_t run_before(const ck_run *R, int64_t rank, const int64_t *off) {
    int64_t o[CKPT_MAX_DIMS];
    if (R->stride != 0) {
        int64_t diff = rank - R->rank0, i = diff / R->stride;
        if (diff % R->stride != 0 || i < 0 || i >= R->count) return 0;
        run_member(R, i, o);
        return ck_off_cmp(o, off) < 0;
    }
    if (R->rank0 != rank) return 0;
    int dir = 0;
    for (int d = 0; d < CKPT_MAX_DIMS && !dir; d++) dir = R->step[d] > 0 ? 1 : R->step[d] < 0 ? -1 : 0;
    int64_t l = 0, h = R->count;   /* the first i whose member is on the far side of off */
    while (l < h) {
        int64_t m = l + (h - l) / 2;
        run_member(R, m, o);
        int c = ck_off_cmp(o, off);
        if (dir >= 0 ? c >= 0 : c < 0) h = m; else l = m + 1;
    }
    return dir >= 0 ? l : R->count - l;
}

void ck_runs_bounds(const ck_run *runs, int64_t n, int64_t *bound) {
    for (int64_t r = 0; r < n; r++)
        for (int d = 0; d < 2; d++) {
            const ck_run *R = &runs[r];
            int64_t span = R->count > 1 ? (R->count - 1) * R->step[d] : 0;   /* inside the tensor: checked */
            bound[4 * r + 2 * d] = R->off[d] + (span < 0 ? span : 0);
            bound[4 * r + 2 * d + 1] = R->off[d] + (span > 0 ? span : 0) + R->shp[d];
        }
}

/* The region (off, shp) clipped to a tensor of nd dims and the shape given, into [q0, q1); 0 when it
 * is empty in some dim (any values: no overflow). */
static int clip_region(int nd, const int64_t *shape, const int64_t *off, const int64_t *shp, int64_t *q0, int64_t *q1) {
    for (int d = 0; d < nd; d++) {
        int64_t qe, lim = shape[d];
        if (shp[d] <= 0 || __builtin_add_overflow(off[d], shp[d], &qe)) qe = shp[d] <= 0 ? off[d] : INT64_MAX;
        q0[d] = off[d] < 0 ? 0 : off[d] > lim ? lim : off[d];
        q1[d] = qe < 0 ? 0 : qe > lim ? lim : qe;
        if (q0[d] >= q1[d]) return 0;
    }
    return 1;
}

/* Whether the bounds bd (ck_runs_bounds) of a run of a tensor of nd dims miss the clipped region [q0, q1). */
static int run_missed(const int64_t *bd, int nd, const int64_t *q0, const int64_t *q1) {
    return nd > 0 && (q1[0] <= bd[0] || q0[0] >= bd[1] || (nd > 1 && (q1[1] <= bd[2] || q0[1] >= bd[3])));
}

void ck_runs_query(const ck_layout *L, const ck_run *runs, const int64_t *bound, int64_t a, int64_t b, int t, int nd,
                   const int64_t *shape, int one_per_file, const int64_t *off, const int64_t *shp, ck_hit **out,
                   int *n, int *cap) {
    int64_t q0[CKPT_MAX_DIMS], q1[CKPT_MAX_DIMS];
    if (!clip_region(nd, shape, off, shp, q0, q1)) return;
    for (int64_t r = a; r < b; r++) {
        if (bound && run_missed(bound + 4 * r, nd, q0, q1)) continue;   /* 32 bytes read, not the 120-byte row */
        const ck_run *R = &runs[r];
        int64_t lo, hi;
        run_range(nd, R, q0, q1, &lo, &hi);
        if (*n + (hi - lo) > *cap) {
            *cap = (int)(*n + (hi - lo)) * 2 + 16;
            *out = mp_realloc(*out, 0, sizeof(ck_hit) * (size_t)*cap, MP_MEM_OTHER);
        }
        for (int64_t i = lo; i < hi; i++) {
            ck_hit *H = &(*out)[(*n)++];   /* every field written: no padding in a ck_hit */
            int64_t rank = (int64_t)R->rank0 + i * (int64_t)R->stride, k = 0;
            H->tensor = t;
            H->file = file_of_rank(L, rank);
            H->box = -1;
            run_member(R, i, H->off);
            memcpy(H->shp, R->shp, sizeof H->shp);
            for (int64_t r2 = a; r2 < b && !one_per_file; r2++) k += run_before(&runs[r2], rank, H->off);
            H->k = (int32_t)k;   /* < INT32_MAX: the runs hold at most that many boxes (checked) */
        }
    }
}
