/*
 * ckpt/plan.c — the collective open of a checkpoint for loading on a mesh (ckpt_open_planned): rank 0
 * reads index.h5 once and sends every rank only the part of the layout its reads need.
 *
 * ckpt_open makes every rank read all of index.h5: O(all boxes of all ranks) per rank to plan its own
 * few (docs/BENCH_SCALE.md). Here instead:
 *   1. every rank packs the regions it will read (tensor name, offset, shape) and gathers their size
 *      to rank 0;
 *   2. rank 0 reads the index with the real index reader (ck_index_read_runs: format, index checksum,
 *      every rule checked as ckpt_open does; a v3 index's runs are checked tensor by tensor and kept
 *      unexpanded), and for each rank finds the saved boxes its regions meet — on a v3 index's runs
 *      arithmetically (ck_runs_query: O(runs of the tensor) per region plus O(runs x log) per box
 *      found), on a v1/v2 layout's boxes by the interval index (ck_layout_query) — and cuts the layout
 *      down to them, in layout order (tensor, offset): those boxes, their tensors' rows (plus every
 *      requested tensor, found or not as in the index), the files they live in, their v1 slab
 *      checksums, and all metadata (small: config, run state);
 *   3. the result of rank 0's read (and of every rank's packing) is agreed over the world
 *      (mp_comm_agree), so a damaged index fails every rank with rank 0's message;
 *   4. in rounds of CK_OPEN_RANKS consecutive ranks (the save's mechanism: ck_gather_round,
 *      ck_scatter_round), the round's region lists go to rank 0, which plans and packs their parts
 *      (step 2) and scatters them (sizes first): rank 0 holds one round's lists and parts, however
 *      large the world. Each rank rebuilds a ck_layout from its part, indexes it and makes an
 *      ordinary reader over it (ck_reader_new): ckpt_read, its checksums and its coverage checks are
 *      unchanged. A read outside the planned regions fails the coverage check
 *      (the boxes are not in the rank's layout), never silently.
 * The parts travel as the in-memory structs (ck_box, ck_file) copied byte for byte: every rank runs the
 * same binary. Packing zeroes them first, so no uninitialised padding travels. The tensor rows travel
 * as plan_trow plus the name's bytes (a whole ck_tensor is 312 bytes, mostly an empty name buffer,
 * and every rank gets every tensor it asks for: they were most of a part). A format-v3
 * part carries its boxes as the ck_hit rank 0's planning found (tensor, file, k, offset, shape: 80
 * bytes, not a whole ck_box's 152; box 0): the receiver derives the paths from k, and its reader takes the checksums from the
 * rank files' /boxes tables, checked against the files' boxes_checksum the part carries. A v1/v2 part
 * carries its boxes' stored paths as a pool after the slabs (ck_box.path renumbered into it).
 *
 * Costs: rank 0 reads the index once, checks it in O(total boxes x log) time but holds only the runs
 * (v3; a v1/v2 layout is expanded), and plans each rank in O(its regions x runs + its boxes x runs x
 * log; its boxes x 1 for tensors no rank file holds two boxes of, as in every tp x dp save); every other rank reads no index table and receives O(own boxes + metadata) bytes. Rank 0 and
 * a test (tests/ckpt/test_ckpt_plan.c: the runs planner against the expanded one) share
 * ck_plan_src_open / ck_plan_pack.
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include <assert.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* A tensor row of a part, followed by its name's len bytes (no NUL): ~100 bytes for a 70B tensor, not
 * a whole ck_tensor's 312 (every rank gets every tensor's row: most of a part). box_first is not sent:
 * the part's boxes are grouped by tensor in tensor order, so it is the sum of the rows before. */
typedef struct {
    uint32_t len;
    int32_t dtype, ndim, pad;
    int64_t shape[CKPT_MAX_DIMS], nboxes;
} plan_trow;

typedef struct {
    int32_t version, world, zstd_level, ntensors, nboxes, nfiles, nmeta, pad;
    int64_t step, nslabs, meta_bytes, paths_bytes, tensors_bytes;
    char created_utc[32];
} plan_head;

/* ------------------------------------------------------------------------------- the requests */

/* The regions as bytes: per region a uint32 name length, the name, offset[4] and shape[4] (unused
 * dims: offset 0, shape 1). MP_EINPUT for a name longer than CKPT_NAME_MAX. */
static mp_code pack_regions(const ckpt_region *w, int n, ck_buf *b, mp_err *e) {
    for (int i = 0; i < n; i++) {
        size_t len = strlen(w[i].name);
        if (len > CKPT_NAME_MAX)
            return mp_err_set(e, MP_EINPUT, "tensor name of %zu bytes (at most %d): %.40s...", len, CKPT_NAME_MAX, w[i].name);
        uint32_t l = (uint32_t)len;
        ck_buf_put(b, &l, sizeof l);
        ck_buf_put(b, w[i].name, len);
        ck_buf_put(b, w[i].offset, sizeof w[i].offset);
        ck_buf_put(b, w[i].shape, sizeof w[i].shape);
    }
    return MP_OK;
}

char *ckpt_region_list(const ckpt_region *want, int n, size_t *bytes) {
    ck_buf b = {0};
    mp_err e;
    if (pack_regions(want, n, &b, &e) != MP_OK) {
        free(b.p);
        return NULL;
    }
    *bytes = b.n;
    return b.p ? b.p : mp_xmalloc(1);
}

/* A tensor as rank 0's planning reads it for every rank: its row of the layout (312 bytes, mostly an
 * empty name buffer) compacted, so that the rows of all tensors stay in cache across the ranks. */
typedef struct {
    int32_t ndim, dtype, one, pad;   /* one: (v3) no rank file holds two boxes of it: their k are 0 */
    uint32_t len;                    /* its name: len bytes at names + at */
    int64_t at, shape[CKPT_MAX_DIMS];
    int64_t row;                     /* its row of a part (plan_trow, nboxes 0, and name) at rows + row */
} plan_tinfo;

/* What ck_plan_pack keeps from rank to rank and from call to call (each array growing, mp_realloc): the rank's hits (hx[nh]
 * of cap) and a scratch for their ordering (tmp of tcap, count: per-tensor buckets), and the tensor
 * hints (hint[nhint], per region of the list). */
typedef struct {
    ck_hit *hx, *tmp;
    int nh, cap, tcap, *count;
    int *hint, nhint;
} plan_ctx;

/* What rank 0 plans on: the index's layout and, for a v3 index, its runs unexpanded. */
struct ck_plan_src {
    ck_layout L;          /* v3: tensors, files, metadata, no boxes; v1/v2: the whole layout */
    ck_run *runs;         /* v3: [nruns], grouped by tensor; NULL: L.b holds the boxes */
    int64_t nruns;
    int64_t *rfirst;      /* v3: tensor t's runs are runs[rfirst[t], rfirst[t + 1]) */
    int64_t *bound;       /* v3: [nruns][4], the runs' extents in dims 0 and 1 (ck_runs_bounds) */
    plan_tinfo *ti;       /* [ntensors]: what planning and packing read of a tensor, compactly */
    char *names;          /* the tensors' names, each ti[t].len bytes at ti[t].at */
    char *rows;           /* every tensor's row of a part, in tensor order (ti[t].row; ti[ntensors].row:
                             the end): a part's tensor rows are copied from it and their nboxes set */
    plan_ctx C;           /* ck_plan_pack's scratch and hints, kept across its calls (the rounds) */
};

/* S->ti and S->names from S->L; for a v3 index (S->runs) each tensor's `one` from the runs: each
 * member's file rank stamped, a rank met twice clears it. O(all boxes), no box expanded. */
static void plan_tinfo_build(ck_plan_src *S) {
    const ck_layout *L = &S->L;
    S->ti = mp_xcalloc(sizeof(plan_tinfo) * (size_t)(L->ntensors + 1));
    size_t pool = 1;
    for (int t = 0; t < L->ntensors; t++) pool += strlen(L->t[t].name);
    S->names = mp_xmalloc(pool);
    int64_t at = 0;
    for (int t = 0; t < L->ntensors; t++) {
        plan_tinfo *I = &S->ti[t];
        I->ndim = L->t[t].ndim;
        I->dtype = (int32_t)L->t[t].dtype;
        I->len = (uint32_t)strlen(L->t[t].name);
        I->at = at;
        memcpy(S->names + at, L->t[t].name, I->len);
        at += I->len;
        memcpy(I->shape, L->t[t].shape, sizeof I->shape);
    }
    ck_buf rows = {0};
    for (int t = 0; t < L->ntensors; t++) {
        plan_trow r;
        memset(&r, 0, sizeof r);
        const plan_tinfo *I = &S->ti[t];
        r.len = I->len;
        r.dtype = I->dtype;
        r.ndim = I->ndim;
        memcpy(r.shape, I->shape, sizeof r.shape);
        S->ti[t].row = (int64_t)rows.n;
        ck_buf_put(&rows, &r, sizeof r);
        ck_buf_put(&rows, S->names + I->at, r.len);
    }
    S->ti[L->ntensors].row = (int64_t)rows.n;
    S->rows = rows.p;
    if (!S->runs) return;
    int *stamp = mp_xmalloc(sizeof(int) * (size_t)(S->L.world + 1));
    for (int r = 0; r <= S->L.world; r++) stamp[r] = -1;
    for (int t = 0; t < S->L.ntensors; t++) {
        int one = 1;
        for (int64_t i = S->rfirst[t]; i < S->rfirst[t + 1] && one; i++) {
            const ck_run *R = &S->runs[i];
            for (int64_t c = 0; c < R->count && one; c++) {
                int64_t rank = (int64_t)R->rank0 + c * (int64_t)R->stride;   /* in [0, world): checked */
                one = stamp[rank] != t;
                stamp[rank] = t;
            }
        }
        S->ti[t].one = one;
    }
    free(stamp);
}

mp_code ck_plan_src_open(const char *dir, int expand, ck_plan_src **out, mp_err *e) {
    ck_plan_src *S = mp_xcalloc(sizeof *S);
    char *ip = ck_fmt("%s/index.h5", dir);
    mp_code rc = expand ? ck_index_read(ip, &S->L, e) : ck_index_read_runs(ip, &S->L, &S->runs, &S->nruns, e);
    free(ip);
    if (rc) {
        free(S);
        return rc;
    }
    if (S->runs) {
        S->rfirst = mp_xcalloc(sizeof(int64_t) * (size_t)(S->L.ntensors + 1));
        int64_t r = 0;
        for (int t = 0; t <= S->L.ntensors; t++) {
            S->rfirst[t] = r;
            while (t < S->L.ntensors && r < S->nruns && S->runs[r].tensor == t) r++;
        }
        S->bound = mp_xmalloc(sizeof(int64_t) * 4 * (size_t)(S->nruns + 1));
        ck_runs_bounds(S->runs, S->nruns, S->bound);
    }
    plan_tinfo_build(S);
    *out = S;
    return MP_OK;
}

void ck_plan_src_free(ck_plan_src *S) {
    if (!S) return;
    ck_layout_free(&S->L);
    free(S->runs);
    free(S->rfirst);
    free(S->bound);
    free(S->ti);
    free(S->names);
    free(S->rows);
    free(S->C.hx);
    free(S->C.tmp);
    free(S->C.count);
    free(S->C.hint);
    free(S);
}


/* Appends to C->hx the saved boxes of tensor t of S that the region (off, shp) meets: found on the runs
 * (v3) or, for a layout with its boxes, by the interval index (their hits name them: box). */
static void plan_find(const ck_plan_src *S, int t, const int64_t *off, const int64_t *shp, plan_ctx *C) {
    if (S->runs) {
        const plan_tinfo *I = &S->ti[t];
        ck_runs_query(&S->L, S->runs, S->bound, S->rfirst[t], S->rfirst[t + 1], t, I->ndim, I->shape, I->one, off,
                      shp, &C->hx, &C->nh, &C->cap);
        return;
    }
    int k = ck_layout_query(&S->L, t, off, shp, NULL, 0);
    int *ids = mp_xmalloc(sizeof(int) * (size_t)(k + 1));
    ck_layout_query(&S->L, t, off, shp, ids, k);
    if (C->nh + k > C->cap) {
        C->cap = (C->nh + k) * 2 + 16;
        C->hx = mp_realloc(C->hx, 0, sizeof(ck_hit) * (size_t)C->cap, MP_MEM_OTHER);
    }
    for (int i = 0; i < k; i++) {
        const ck_box *B = &S->L.b[ids[i]];
        ck_hit *H = &C->hx[C->nh++];
        H->tensor = B->tensor;
        H->file = B->file;
        H->k = (int32_t)B->k;
        H->box = ids[i];
        memcpy(H->off, B->off, sizeof H->off);
        memcpy(H->shp, B->shp, sizeof H->shp);
    }
    free(ids);
}

/* The tensor of S named by the l bytes at name (not NUL-terminated), or -1. *hint: the tensor found
 * for the same region of the rank before (every rank asks for its tensors in the same order): tried
 * first, one comparison instead of a search. */
static int plan_tensor(const ck_plan_src *S, const char *name, uint32_t l, int *hint) {
    const plan_tinfo *I = *hint >= 0 && *hint < S->L.ntensors ? &S->ti[*hint] : NULL;
    if (I && I->len == l && !memcmp(S->names + I->at, name, l)) return *hint;
    char z[CKPT_NAME_MAX + 1];
    memcpy(z, name, l);
    z[l] = 0;
    return *hint = ck_layout_find(&S->L, z);
}

/* Sets C->hx to the saved boxes of S that the regions packed in p[0, n) meet (plan_find per region),
 * and marks their tensors (and every requested tensor present) in want_t. A region of a tensor S does
 * not have is left to the loader's own lookup, which reports it. MP_EINTERNAL if the bytes do not
 * parse. */
static mp_code plan_regions(const ck_plan_src *S, const char *p, int64_t n, char *want_t, plan_ctx *C, mp_err *e) {
    int64_t at = 0;
    int j = 0;
    C->nh = 0;
    while (at < n) {
        uint32_t l;
        if (n - at < (int64_t)sizeof l) return mp_err_set(e, MP_EINTERNAL, "planned open: a region list is cut short");
        memcpy(&l, p + at, sizeof l);
        at += (int64_t)sizeof l;
        int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
        if (l > CKPT_NAME_MAX || n - at < (int64_t)(l + sizeof off + sizeof shp))
            return mp_err_set(e, MP_EINTERNAL, "planned open: a region list is cut short");
        if (j == C->nhint) {
            C->hint = mp_realloc(C->hint, sizeof(int) * (size_t)C->nhint, sizeof(int) * (size_t)(C->nhint * 2 + 64), MP_MEM_OTHER);
            for (int k = C->nhint; k < C->nhint * 2 + 64; k++) C->hint[k] = -1;
            C->nhint = C->nhint * 2 + 64;
        }
        int t = plan_tensor(S, p + at, l, &C->hint[j++]);
        memcpy(off, p + at + l, sizeof off);
        memcpy(shp, p + at + l + sizeof off, sizeof shp);
        at += (int64_t)(l + sizeof off + sizeof shp);
        if (t < 0) continue;
        want_t[t] = 1;
        plan_find(S, t, off, shp, C);
    }
    return MP_OK;
}

/* The layout order of boxes: tensor, then offset (ck_off_cmp). */
static int cmp_hit(const void *a, const void *b) {
    const ck_hit *x = a, *y = b;
    if (x->tensor != y->tensor) return x->tensor < y->tensor ? -1 : 1;
    return ck_off_cmp(x->off, y->off);
}

/* Sorts the hits (*hx)[n] into layout order (cmp_hit): bucketed by tensor (a stable counting sort into
 * *tmp, which then trades places with *hx, capacities *cap / *tcap with them; *count: the buckets;
 * all kept by the caller for the next rank), then each tensor's hits sorted by offset unless they
 * already are (one region's boxes usually are). O(n + ntensors) in the usual case, where a comparison
 * sort of a rank's ~1,400 boxes was most of the packing. */
static void plan_order(int ntensors, ck_hit **hx, int *cap, int n, ck_hit **tmp, int *tcap, int **count) {
    if (n < 2) return;
    if (!*count) *count = mp_xmalloc(sizeof(int) * (size_t)(ntensors + 1));
    if (*tcap < n) {
        *tcap = *cap;
        *tmp = mp_realloc(*tmp, 0, sizeof(ck_hit) * (size_t)*tcap, MP_MEM_OTHER);
    }
    int *c = *count;
    memset(c, 0, sizeof(int) * (size_t)(ntensors + 1));
    for (int k = 0; k < n; k++) c[(*hx)[k].tensor + 1]++;
    for (int t = 0; t < ntensors; t++) c[t + 1] += c[t];   /* c[t]: where tensor t's hits start */
    for (int k = 0; k < n; k++) (*tmp)[c[(*hx)[k].tensor]++] = (*hx)[k];
    ck_hit *sw = *hx;
    *hx = *tmp;
    *tmp = sw;
    int ic = *cap;
    *cap = *tcap;
    *tcap = ic;
    ck_hit *H = *hx;
    for (int a = 0, b; a < n; a = b) {
        int sorted = 1;
        for (b = a + 1; b < n && H[b].tensor == H[a].tensor; b++) sorted = sorted && cmp_hit(&H[b - 1], &H[b]) <= 0;
        if (!sorted) qsort(H + a, (size_t)(b - a), sizeof *H, cmp_hit);
    }
}

/* ---------------------------------------------------------------------------------- the parts */

/* The bytes of box B's two stored paths in L's pool (both NUL-terminated). */
static size_t path_bytes(const ck_layout *L, const ck_box *B) {
    const char *p = L->paths + B->path;
    size_t l = strlen(p) + 1;
    return l + strlen(p + l) + 1;
}

/* Appends the boxes hx[n] of a part to b, tensors and files renumbered by tmap / fmap: a v3 part's
 * as ck_hit rows (box 0: its paths derive from k), renumbered in hx (which is left so) and copied at
 * once; a v1/v2 part's as their whole ck_box (L's box hx[k].box: slab_first and path renumbered to
 * the part's). */
static void pack_boxes(const ck_layout *L, ck_hit *hx, int n, const int *tmap, const int *fmap, ck_buf *b) {
    if (L->version >= 3) {
        for (int k = 0; k < n; k++) {
            hx[k].tensor = tmap[hx[k].tensor];
            hx[k].file = fmap[hx[k].file];
            hx[k].box = 0;
        }
        ck_buf_put(b, hx, sizeof(ck_hit) * (size_t)n);
        return;
    }
    int64_t slab_at = 0, path_at = 0;
    for (int k = 0; k < n; k++) {
        ck_box x = L->b[hx[k].box];
        x.tensor = tmap[x.tensor];
        x.file = fmap[x.file];
        x.slab_first = slab_at;
        slab_at += x.nslabs;
        if (L->paths) {
            x.path = path_at;
            path_at += (int64_t)path_bytes(L, &L->b[hx[k].box]);
        }
        ck_buf_put(b, &x, sizeof x);
    }
}

/* Packs the part of S's layout L of the boxes hx[n] (L's, in layout order, unique) and the tensors
 * marked in want_t into b: head, tensors, boxes (pack_boxes), files, slabs, the boxes' stored paths (a
 * v1/v2 layout's pool), metadata. Indices and path offsets are renumbered to the part's (a v3 part's
 * in hx itself: its hits are spent). */
static void pack_part(const ck_plan_src *S, ck_hit *hx, int n, const char *want_t, ck_buf *b) {
    const ck_layout *L = &S->L;
    int *tmap = mp_xmalloc(sizeof(int) * (size_t)(L->ntensors + 1)), *fmap = mp_xmalloc(sizeof(int) * (size_t)(L->nfiles + 1));
    plan_head h;
    memset(&h, 0, sizeof h);
    for (int i = 0; i < L->ntensors; i++) tmap[i] = want_t[i] ? h.ntensors++ : -1;
    for (int i = 0; i < L->nfiles; i++) fmap[i] = -1;
    for (int k = 0; k < n; k++) {
        fmap[hx[k].file] = 0;
        if (hx[k].box < 0) continue;   /* found on the runs: no slabs, no stored paths */
        h.nslabs += L->b[hx[k].box].nslabs;
        if (L->paths) h.paths_bytes += (int64_t)path_bytes(L, &L->b[hx[k].box]);
    }
    for (int i = 0; i < L->nfiles; i++)
        if (fmap[i] == 0) fmap[i] = h.nfiles++;
    for (int i = 0; i < L->nmeta; i++) h.meta_bytes += (int64_t)(strlen(L->keys[i]) + strlen(L->vals[i]) + 2);
    h.version = L->version; h.world = L->world; h.zstd_level = L->zstd_level;
    h.nboxes = n; h.nmeta = L->nmeta; h.step = L->step;
    memcpy(h.created_utc, L->created_utc, sizeof h.created_utc);
    size_t head_at = b->n, rows_at;
    ck_buf_put(b, &h, sizeof h);   /* tensors_bytes patched in below */
    rows_at = b->n;
    for (int i = 0, j; i < L->ntensors; i = j) {   /* the rows of the tensors wanted: runs of S->rows */
        for (j = i; j < L->ntensors && (tmap[j] >= 0) == (tmap[i] >= 0); j++) {}
        if (tmap[i] >= 0) ck_buf_put(b, S->rows + S->ti[i].row, (size_t)(S->ti[j].row - S->ti[i].row));
    }
    int k0 = 0;   /* the boxes are grouped by tensor in tensor order: each tensor's run starts at k0 */
    for (int i = 0, at = (int)rows_at; i < L->ntensors; i++) {   /* each row's nboxes */
        if (tmap[i] < 0) continue;
        int first = k0;
        while (k0 < n && hx[k0].tensor == i) k0++;
        int64_t nb = k0 - first;
        memcpy(b->p + at + offsetof(plan_trow, nboxes), &nb, sizeof nb);
        at += (int)(S->ti[i + 1].row - S->ti[i].row);
    }
    assert(k0 == n);
    h.tensors_bytes = (int64_t)(b->n - rows_at);
    memcpy(b->p + head_at, &h, sizeof h);
    pack_boxes(L, hx, n, tmap, fmap, b);
    for (int i = 0; i < L->nfiles; i++)
        if (fmap[i] >= 0) ck_buf_put(b, &L->f[i], sizeof L->f[i]);
    for (int k = 0; k < n && h.nslabs > 0; k++) {
        const ck_box *B = &L->b[hx[k].box];
        if (B->nslabs > 0) ck_buf_put(b, L->slabs + B->slab_first, sizeof(uint64_t) * (size_t)B->nslabs);
    }
    for (int k = 0; k < n && L->paths; k++)
        ck_buf_put(b, L->paths + L->b[hx[k].box].path, path_bytes(L, &L->b[hx[k].box]));
    for (int i = 0; i < L->nmeta; i++) {
        ck_buf_put(b, L->keys[i], strlen(L->keys[i]) + 1);
        ck_buf_put(b, L->vals[i], strlen(L->vals[i]) + 1);
    }
    free(tmap);
    free(fmap);
}

/* Takes n bytes from p at *at into dst; 0 when fewer are left. */
static int take(const char *p, int64_t n, int64_t *at, void *dst, size_t len) {
    if (n - *at < (int64_t)len) return 0;
    if (len) memcpy(dst, p + *at, len);
    *at += (int64_t)len;
    return 1;
}

/* Reads the L->ntensors rows of a part (plan_trow + name) from p[*at, end) into L->t, box_first
 * summed; 0 unless they parse, end exactly there and count L->nboxes boxes. */
static int unpack_tensors(const char *p, int64_t end, int64_t *at, ck_layout *L) {
    int64_t first = 0;
    for (int i = 0; i < L->ntensors; i++) {
        plan_trow r;
        ck_tensor *T = &L->t[i];
        memset(T, 0, sizeof *T);
        if (!take(p, end, at, &r, sizeof r) || r.len > CKPT_NAME_MAX || !take(p, end, at, T->name, r.len) ||
            r.nboxes < 0 || r.nboxes > L->nboxes - first)
            return 0;
        T->dtype = (mp_dtype)r.dtype;
        T->ndim = r.ndim;
        memcpy(T->shape, r.shape, sizeof T->shape);
        T->box_first = first;
        T->nboxes = r.nboxes;
        first += r.nboxes;
    }
    return *at == end && first == L->nboxes;
}

/* Rebuilds a layout from a part packed by pack_part (p[0, n)) and indexes it. MP_EINTERNAL if the
 * bytes do not parse (they come from rank 0 of the same binary: a bug, not a user's file). */
static mp_code unpack_part(const char *p, int64_t n, ck_layout *L, mp_err *e) {
    memset(L, 0, sizeof *L);
    plan_head h;
    int64_t at = 0;
    int ok = take(p, n, &at, &h, sizeof h);
    size_t brec = h.version >= 3 ? sizeof(ck_hit) : sizeof(ck_box);
    ok = ok && h.ntensors >= 0 && h.nboxes >= 0 && h.nfiles >= 0 && h.nmeta >= 0 && h.nslabs >= 0 && h.meta_bytes >= 0 &&
         h.paths_bytes >= 0 && (h.version < 3 || h.paths_bytes == 0) && h.tensors_bytes >= 0 &&
         n - at == (int64_t)(brec * (size_t)h.nboxes + sizeof(ck_file) * (size_t)h.nfiles +
                             sizeof(uint64_t) * (size_t)h.nslabs) +
                       h.tensors_bytes + h.paths_bytes + h.meta_bytes;
    if (!ok) return mp_err_set(e, MP_EINTERNAL, "planned open: the plan received has %lld bytes that do not parse", (long long)n);
    L->version = h.version; L->world = h.world; L->zstd_level = h.zstd_level; L->step = h.step;
    L->ntensors = h.ntensors; L->nboxes = h.nboxes; L->nfiles = h.nfiles; L->nmeta = h.nmeta; L->nslabs = h.nslabs;
    memcpy(L->created_utc, h.created_utc, sizeof L->created_utc);
    L->t = mp_xmalloc(sizeof(ck_tensor) * (size_t)(h.ntensors + 1));
    L->b = mp_xmalloc(sizeof(ck_box) * (size_t)(h.nboxes + 1));
    L->f = mp_xmalloc(sizeof(ck_file) * (size_t)(h.nfiles + 1));
    L->slabs = h.nslabs ? mp_xmalloc(sizeof(uint64_t) * (size_t)h.nslabs) : NULL;
    L->keys = mp_xcalloc(sizeof(char *) * (size_t)(h.nmeta + 1));
    L->vals = mp_xcalloc(sizeof(char *) * (size_t)(h.nmeta + 1));
    ok = unpack_tensors(p, at + h.tensors_bytes, &at, L);
    if (h.version >= 3) {
        for (int j = 0; j < h.nboxes; j++) {
            ck_hit c;
            memset(&c, 0, sizeof c);
            take(p, n, &at, &c, sizeof c);
            ck_box *B = &L->b[j];
            memset(B, 0, sizeof *B);
            B->tensor = c.tensor;
            B->file = c.file;
            memcpy(B->off, c.off, sizeof B->off);
            memcpy(B->shp, c.shp, sizeof B->shp);
            B->k = c.k;   /* no path pool: its paths are derived from k */
            ok = ok && c.tensor >= 0 && c.tensor < h.ntensors && c.file >= 0 && c.file < h.nfiles && c.k >= 0;
        }
    } else {
        take(p, n, &at, L->b, sizeof(ck_box) * (size_t)h.nboxes);
    }
    take(p, n, &at, L->f, sizeof(ck_file) * (size_t)h.nfiles);
    take(p, n, &at, L->slabs, sizeof(uint64_t) * (size_t)h.nslabs);
    if (h.version < 3 && h.nboxes > 0) {   /* the stored paths: every box's two inside the pool */
        L->paths = mp_xmalloc((size_t)h.paths_bytes + 1);
        L->paths_bytes = (size_t)h.paths_bytes;
        take(p, n, &at, L->paths, (size_t)h.paths_bytes);
        L->paths[h.paths_bytes] = 0;
        for (int j = 0; j < h.nboxes && ok; j++) {
            int64_t q = L->b[j].path;
            ok = q >= 0 && q < h.paths_bytes;
            if (ok) q += (int64_t)strlen(L->paths + q) + 1;
            ok = ok && q < h.paths_bytes;
        }
    }
    for (int i = 0; i < h.nmeta && ok; i++) {
        const char *k = p + at, *v = memchr(k, 0, (size_t)(n - at));
        const char *end = v ? memchr(v + 1, 0, (size_t)(n - (v + 1 - p))) : NULL;
        if (!end) { ok = 0; break; }
        L->keys[i] = mp_strdup(k);
        L->vals[i] = mp_strdup(v + 1);
        at = end + 1 - p;
    }
    if (!ok || at != n) {
        ck_layout_free(L);
        return mp_err_set(e, MP_EINTERNAL, "planned open: the metadata of the plan received does not parse");
    }
    ck_layout_index(L);
    return MP_OK;
}

mp_code ck_plan_pack(ck_plan_src *S, int nq, const char *req, const int64_t *rcount, ck_buf *parts,
                     int64_t *pcount, mp_err *e) {
    const ck_layout *L = &S->L;
    char *want_t = mp_xmalloc((size_t)L->ntensors + 1);
    plan_ctx *C = &S->C;
    mp_code rc = MP_OK;
    int64_t at = 0;
    for (int q = 0; q < nq && !rc; q++) {
        memset(want_t, 0, (size_t)L->ntensors + 1);
        rc = plan_regions(S, req + at, rcount[q], want_t, C, e);
        at += rcount[q];
        if (rc) break;
        plan_order(L->ntensors, &C->hx, &C->cap, C->nh, &C->tmp, &C->tcap, &C->count);
        int u = 0;   /* unique: regions of one rank may meet the same saved box */
        for (int k = 0; k < C->nh; k++)
            if (!u || cmp_hit(&C->hx[u - 1], &C->hx[k])) {
                if (u != k) C->hx[u] = C->hx[k];
                u++;
            }
        size_t before = parts->n;
        pack_part(S, C->hx, u, want_t, parts);
        pcount[q] = (int64_t)(parts->n - before);
    }
    free(want_t);
    return rc;
}

/* The rounds of the open: per CK_OPEN_RANKS consecutive ranks (ck_round_ranks), their region lists
 * (req, rlen[size] on rank 0) to rank 0 (ck_gather_round), their parts planned on S (rank 0) and sent
 * back (a scatter of the sizes, then of the parts: ck_scatter_round). *part (malloc'd) gets this rank's part, *mine
 * its bytes. A failed planning on rank 0 (the lists come from the same binary: a bug) sends the
 * remaining ranks empty parts and returns the error (the caller's agreement fails every rank with it). */
static mp_code rounds(mp_comm *w, ck_plan_src *S, const ck_buf *req, const int64_t *rlen, char **part,
                      int64_t *mine, mp_err *e) {
    const int me = w->rank, size = w->size, per = ck_round_ranks(CK_OPEN_RANKS);
    int64_t *plen = me == 0 ? mp_xcalloc(sizeof(int64_t) * (size_t)size) : NULL;
    int64_t *eight = me == 0 ? mp_xmalloc(sizeof(int64_t) * (size_t)size) : NULL;
    for (int q = 0; me == 0 && q < size; q++) eight[q] = (int64_t)sizeof(int64_t);
    mp_code rc = MP_OK;
    *part = NULL;
    *mine = 0;
    ck_buf parts = {0};   /* one buffer for every round's parts: grown once, not faulted in again */
    for (int r0 = 0; r0 < size; r0 += per) {
        int r1 = size - r0 < per ? size : r0 + per, in = me >= r0 && me < r1;
        char *lists = ck_gather_round(w, req->p, (int64_t)req->n, rlen, r0, r1);
        parts.n = 0;
        if (me == 0 && !rc) rc = ck_plan_pack(S, r1 - r0, lists, rlen + r0, &parts, plen + r0, e);
        if (me == 0 && rc) {
            parts.n = 0;
            for (int q = r0; q < r1; q++) plen[q] = 0;
        }
        free(lists);
        ck_scatter_round(w, mine, (int64_t)sizeof *mine, plen ? plen + r0 : NULL, eight, r0, r1);
        if (in) *part = mp_xmalloc((size_t)*mine + 1);
        ck_scatter_round(w, in ? *part : NULL, *mine, parts.p, plen, r0, r1);
    }
    free(parts.p);
    free(plen);
    free(eight);
    return rc;
}

mp_code ckpt_open_planned(ckpt_reader **out, mp_comm *world, const char *dir, const ckpt_region *want, int nwant,
                          mp_err *e) {
    assert(out && world && dir && (want || nwant == 0));
    *out = NULL;
    ck_h5_init();
    const int me = world->rank;
    ck_buf req = {0};
    mp_code local = pack_regions(want, nwant, &req, e);
    /* every rank must see the directory it will read rank files from (node-local storage: only rank
     * 0's host may have it); the same error as ckpt_open's, agreed below */
    if (!local) local = ck_dir_exists(dir, e);
    int64_t n = (int64_t)req.n;
    int64_t *rlen = me == 0 ? mp_xcalloc(sizeof(int64_t) * (size_t)world->size) : NULL;
    world->ops->gather(world, rlen, &n, sizeof n, 0);
    ck_plan_src *S = NULL;
    if (me == 0 && !local) local = ck_plan_src_open(dir, 0, &S, e);
    mp_code rc = mp_comm_agree(world, local, e, NULL);   /* rank 0's bad index: the same error everywhere */
    int64_t mine = 0;
    char *part = NULL;
    if (!rc) local = rounds(world, S, &req, rlen, &part, &mine, e);
    ck_plan_src_free(S);
    free(rlen);
    free(req.p);
    if (rc) return rc;
    ck_layout L;
    if (!local) local = unpack_part(part, mine, &L, e);
    free(part);
    rc = mp_comm_agree(world, local, e, NULL);   /* a failed round on rank 0: its message (the lowest failing rank's) */
    if (rc) {
        if (!local) ck_layout_free(&L);
        return rc;
    }
    *out = ck_reader_new(dir, &L);
    return MP_OK;
}
