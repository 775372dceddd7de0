/*
 * ckpt/box.c — box arithmetic in the global index space of a tensor, the per-tensor interval index,
 * and coverage checks.
 *
 * A box is (offset, shape) over nd <= 4 dims. The saved boxes of a tensor are kept sorted by
 * offset[0]; next to them pmax_end[i] = max over boxes <= i of offset[0] + shape[0], which is
 * nondecreasing. The boxes that can meet the rows [q0, q1) are then the contiguous range between the
 * first i with pmax_end[i] > q0 and the first i with offset[0] >= q1, both found by binary search
 * (an interval index without a tree: the layout is immutable once written). The other dims are then
 * tested box by box.
 *
 * Coverage: boxes cover a region exactly once iff they lie inside it, no two overlap and their
 * volumes sum to its volume. When the sum falls short, ck_find_gap names a missing region by
 * subtracting the boxes from the region (each subtraction splits a fragment into at most 2*nd).
 *
 * Overflow: offsets and shapes may come from a crafted index or a caller's request before they are
 * validated (messages print them, geometry is computed from them), so every sum and product here
 * saturates at INT64_MAX instead of wrapping (signed overflow is undefined behaviour in C).
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include <assert.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a + b, saturated at INT64_MAX (or INT64_MIN, b < 0) where that overflows: end points of crafted
 * boxes compare as "past every tensor" instead of wrapping to a negative number. */
static int64_t add_sat(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) return b > 0 ? INT64_MAX : INT64_MIN;
    return r;
}

/* a * b for a, b >= 0, saturated at INT64_MAX. */
static int64_t mul_sat(int64_t a, int64_t b) {
    assert(a >= 0 && b >= 0);
    int64_t r;
    return __builtin_mul_overflow(a, b, &r) ? INT64_MAX : r;
}

/* The product of the dims, saturated at INT64_MAX where it overflows (so a crafted shape never wraps;
 * every volume it is compared with is a validated one, well below INT64_MAX). */
int64_t ck_volume(int nd, const int64_t *shp) {
    int64_t v = 1;
    for (int d = 0; d < nd; d++)
        if (__builtin_mul_overflow(v, shp[d], &v)) return INT64_MAX;
    return v;
}

int ck_off_cmp(const int64_t *a, const int64_t *b) {
    for (int d = 0; d < CKPT_MAX_DIMS; d++)
        if (a[d] != b[d]) return a[d] < b[d] ? -1 : 1;
    return 0;
}

int ck_intersect(int nd, const int64_t *ao, const int64_t *as, const int64_t *bo, const int64_t *bs,
                 int64_t *io, int64_t *is) {
    for (int d = 0; d < nd; d++) {
        int64_t lo = ao[d] > bo[d] ? ao[d] : bo[d];
        int64_t ae = add_sat(ao[d], as[d]), be = add_sat(bo[d], bs[d]);
        int64_t hi = ae < be ? ae : be;
        if (hi <= lo) return 0;
        if (io) io[d] = lo;
        if (is) is[d] = hi - lo;
    }
    return 1;
}

/* "[o0:e0, ...]" of a box; an end past INT64_MAX (a crafted box) prints as INT64_MAX. */
void ck_box_str(char *buf, size_t cap, int nd, const int64_t *off, const int64_t *shp) {
    assert(buf && cap > 0 && nd >= 0 && nd <= CKPT_MAX_DIMS);
    size_t at = 0;
    at += (size_t)snprintf(buf + at, cap - at, "[");
    for (int d = 0; d < nd && at < cap; d++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld:%lld", d ? ", " : "", (long long)off[d],
                               (long long)add_sat(off[d], shp[d]));
    if (at < cap) snprintf(buf + at, cap - at, "]");
}

void ck_index_range(const ck_layout *L, int t, int64_t q0, int64_t q1, int64_t *lo, int64_t *hi) {
    assert(L->pmax_end && t >= 0 && t < L->ntensors);
    const ck_tensor *T = &L->t[t];
    int64_t a = T->box_first, b = T->box_first + T->nboxes;
    /* first i in [a, b) with pmax_end[i] > q0 */
    int64_t l = a, h = b;
    while (l < h) {
        int64_t m = l + (h - l) / 2;
        if (L->pmax_end[m] > q0) h = m; else l = m + 1;
    }
    *lo = l;
    /* first i in [lo, b) with off[0] >= q1 */
    h = b;
    while (l < h) {
        int64_t m = l + (h - l) / 2;
        if (L->b[m].off[0] >= q1) h = m; else l = m + 1;
    }
    *hi = l;
}

int ck_layout_find(const ck_layout *L, const char *name) {
    int lo = 0, hi = L->ntensors;
    while (lo < hi) {
        int m = lo + (hi - lo) / 2;
        int c = strcmp(L->t[m].name, name);
        if (c == 0) return m;
        if (c < 0) lo = m + 1; else hi = m;
    }
    return -1;
}

int ck_layout_query(const ck_layout *L, int t, const int64_t *offset, const int64_t *shape, int *out, int cap) {
    assert(t >= 0 && t < L->ntensors);
    const ck_tensor *T = &L->t[t];
    int64_t lo, hi;
    ck_index_range(L, t, offset[0], add_sat(offset[0], shape[0]), &lo, &hi);
    int n = 0;
    for (int64_t j = lo; j < hi; j++)
        if (ck_intersect(T->ndim, offset, shape, L->b[j].off, L->b[j].shp, NULL, NULL)) {
            if (n < cap && out) out[n] = (int)j;
            n++;
        }
    return n;
}

void ck_layout_index(ck_layout *L) {
    free(L->pmax_end);
    L->pmax_end = mp_xmalloc((size_t)(L->nboxes ? L->nboxes : 1) * sizeof(int64_t));
    for (int t = 0; t < L->ntensors; t++) {
        int64_t run = INT64_MIN;
        for (int64_t i = L->t[t].box_first; i < L->t[t].box_first + L->t[t].nboxes; i++) {
            assert(i == L->t[t].box_first || L->b[i].off[0] >= L->b[i - 1].off[0]);
            int64_t end = add_sat(L->b[i].off[0], L->b[i].shp[0]);
            if (end > run) run = end;
            L->pmax_end[i] = run;
        }
    }
}

/* Subtracts box (bo, bs) from the fragment list frags (n of them, capacity *cap) in place. */
typedef struct { int64_t o[CKPT_MAX_DIMS], s[CKPT_MAX_DIMS]; } frag;

static frag *subtract(int nd, frag *fr, int *n, int *cap, const int64_t *bo, const int64_t *bs) {
    int m = *n;
    for (int i = 0; i < m; i++) {
        int64_t io[CKPT_MAX_DIMS], is[CKPT_MAX_DIMS];
        if (!ck_intersect(nd, fr[i].o, fr[i].s, bo, bs, io, is)) continue;
        frag rest = fr[i];
        /* split rest along each dim: the parts before and after the intersection */
        for (int d = 0; d < nd; d++) {
            int64_t lo = rest.o[d], hi = add_sat(rest.o[d], rest.s[d]);
            int64_t ilo = io[d], ihi = add_sat(io[d], is[d]);
            if (ilo > lo || ihi < hi) {
                if (*n + 2 > *cap) {
                    int c = *cap * 2 + 8;
                    fr = mp_realloc(fr, (size_t)*cap * sizeof *fr, (size_t)c * sizeof *fr, MP_MEM_OTHER);
                    *cap = c;
                }
            }
            if (ilo > lo) {
                frag p = rest;
                p.s[d] = ilo - lo;
                fr[(*n)++] = p;
            }
            if (ihi < hi) {
                frag p = rest;
                p.o[d] = ihi;
                p.s[d] = hi - ihi;
                fr[(*n)++] = p;
            }
            rest.o[d] = ilo;
            rest.s[d] = is[d];
        }
        fr[i].s[0] = 0;   /* consumed: the intersection itself */
    }
    /* compact */
    int k = 0;
    for (int i = 0; i < *n; i++)
        if (fr[i].s[0] > 0) fr[k++] = fr[i];
    *n = k;
    return fr;
}

int ck_find_gap(int nd, const int64_t *qo, const int64_t *qs, int n, const int64_t (*bo)[CKPT_MAX_DIMS],
                const int64_t (*bs)[CKPT_MAX_DIMS], int64_t *mo, int64_t *ms) {
    int cap = 16, nf = 1;
    frag *fr = mp_xcalloc((size_t)cap * sizeof *fr);
    for (int d = 0; d < nd; d++) { fr[0].o[d] = qo[d]; fr[0].s[d] = qs[d]; }
    for (int i = 0; i < n && nf > 0; i++) fr = subtract(nd, fr, &nf, &cap, bo[i], bs[i]);
    int found = nf > 0;
    if (found) {
        memcpy(mo, fr[0].o, sizeof(int64_t) * (size_t)nd);
        memcpy(ms, fr[0].s, sizeof(int64_t) * (size_t)nd);
    }
    free(fr);
    return found;
}

void ck_copy_sub(int nd, size_t esize, const int64_t *sub_off, const int64_t *sub_shp, const void *src,
                 const int64_t *src_off, const int64_t *src_shp, void *dst, const int64_t *dst_off,
                 const int64_t *dst_shp) {
    /* pad to 4 dims (leading dims of size 1 keep the row-major strides) */
    int64_t ss[4] = {1, 1, 1, 1}, S[4] = {1, 1, 1, 1}, D[4] = {1, 1, 1, 1};
    int64_t sa[4] = {0}, da[4] = {0};
    int pad = 4 - nd;
    for (int d = 0; d < nd; d++) {
        ss[pad + d] = sub_shp[d];
        S[pad + d] = src_shp[d];
        D[pad + d] = dst_shp[d];
        sa[pad + d] = sub_off[d] - src_off[d];
        da[pad + d] = sub_off[d] - dst_off[d];
        assert(sa[pad + d] >= 0 && sa[pad + d] + sub_shp[d] <= src_shp[d]);
        assert(da[pad + d] >= 0 && da[pad + d] + sub_shp[d] <= dst_shp[d]);
    }
    size_t row = (size_t)ss[3] * esize;
    const char *s = src;
    char *o = dst;
    for (int64_t i0 = 0; i0 < ss[0]; i0++)
        for (int64_t i1 = 0; i1 < ss[1]; i1++)
            for (int64_t i2 = 0; i2 < ss[2]; i2++) {
                int64_t si = (((sa[0] + i0) * S[1] + sa[1] + i1) * S[2] + sa[2] + i2) * S[3] + sa[3];
                int64_t di = (((da[0] + i0) * D[1] + da[1] + i1) * D[2] + da[2] + i2) * D[3] + da[3];
                memcpy(o + (size_t)di * esize, s + (size_t)si * esize, row);
            }
}

mp_code ck_check_name(const char *name, mp_err *e) {
    if (!name || !*name) return mp_err_set(e, MP_EINPUT, "empty tensor name");
    size_t n = strlen(name);
    if (n > CKPT_NAME_MAX)
        return mp_err_set(e, MP_EINPUT, "tensor name '%.40s...' is %zu bytes (at most %d)", name, n,
                          CKPT_NAME_MAX);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x21 || c > 0x7e)
            return mp_err_set(e, MP_EINPUT, "tensor name '%s': byte %zu is not printable ASCII", name, i);
    }
    const char *p = name;
    for (;;) {
        const char *q = strchr(p, '/');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0)
            return mp_err_set(e, MP_EINPUT, "tensor name '%s' has an empty '/' component", name);
        if ((len == 1 && p[0] == '.') || (len == 2 && p[0] == '.' && p[1] == '.'))
            return mp_err_set(e, MP_EINPUT, "tensor name '%s' has a '.' or '..' component", name);
        if (!q) break;
        p = q + 1;
    }
    return MP_OK;
}

mp_code ck_check_key(const char *key, mp_err *e) {
    if (!key || !*key) return mp_err_set(e, MP_EINPUT, "empty metadata key");
    size_t n = strlen(key);
    if (n > CKPT_KEY_MAX) return mp_err_set(e, MP_EINPUT, "metadata key '%.20s...' longer than %d", key, CKPT_KEY_MAX);
    for (size_t i = 0; i < n; i++) {
        char c = key[i];
        if (!isalnum((unsigned char)c) && c != '_' && c != '.' && c != '-')
            return mp_err_set(e, MP_EINPUT, "metadata key '%s': character '%c' not in [A-Za-z0-9_.-]", key, c);
    }
    if (!strcmp(key, ".") || !strcmp(key, ".."))
        return mp_err_set(e, MP_EINPUT, "metadata key '%s' is reserved", key);
    return MP_OK;
}

/* Describes box i of L for messages: "box [..] (rank_00001.h5 /name/box_0)". */
static void box_desc(const ck_layout *L, int64_t i, char *buf, size_t cap) {
    /* truncation is fine: a message */
    const ck_box *B = &L->b[i];
    char r[256], pb[CK_DSET_MAX];
    ck_box_str(r, sizeof r, L->t[B->tensor].ndim, B->off, B->shp);
    snprintf(buf, cap, "box %s (%s %s)", r, B->file >= 0 && B->file < L->nfiles ? L->f[B->file].name : "?",
             ck_box_path(L, B, 0, pb));
}

mp_code ck_layout_check_tensor(const ck_layout *L, int t, int need_full, mp_err *e) {
    const ck_tensor *T = &L->t[t];
    int nd = T->ndim;
    assert(nd >= 1 && nd <= CKPT_MAX_DIMS);
    int64_t zero[CKPT_MAX_DIMS] = {0};
    int64_t total = 0;
    char d1[1024], d2[1024], reg[256];
    for (int64_t i = T->box_first; i < T->box_first + T->nboxes; i++) {
        const ck_box *B = &L->b[i];
        for (int d = 0; d < nd; d++)
            if (B->off[d] < 0 || B->shp[d] <= 0 || B->off[d] > T->shape[d] - B->shp[d]) {   /* no overflow */
                box_desc(L, i, d1, sizeof d1);
                ck_box_str(reg, sizeof reg, nd, zero, T->shape);
                return mp_err_set(e, MP_ECHECK, "tensor %s: %s lies outside the tensor %s", T->name, d1, reg);
            }
        total = add_sat(total, ck_volume(nd, B->shp));
        /* Only the boxes after i that start in its dim-0 span: the first box with an overlap has every
         * partner after it (an earlier partner would have failed first), so the first pair found, and
         * its message, are those of a search over all candidates; O(boxes x boxes per dim-0 band). */
        int64_t end0 = B->off[0] + B->shp[0], last = T->box_first + T->nboxes;   /* nd >= 1, inside: no overflow */
        for (int64_t j = i + 1; j < last && L->b[j].off[0] < end0; j++) {
            int64_t io[CKPT_MAX_DIMS], is[CKPT_MAX_DIMS];
            if (ck_intersect(nd, B->off, B->shp, L->b[j].off, L->b[j].shp, io, is)) {
                box_desc(L, i, d1, sizeof d1);
                box_desc(L, j, d2, sizeof d2);
                ck_box_str(reg, sizeof reg, nd, io, is);
                return mp_err_set(e, MP_ECHECK, "tensor %s: region %s is written twice: by %s and by %s",
                                  T->name, reg, d1, d2);
            }
        }
    }
    int64_t want = ck_volume(nd, T->shape);
    if (need_full && total != want) {
        int n = (int)T->nboxes;
        int64_t (*bo)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *bo * (size_t)(n ? n : 1));
        int64_t (*bs)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *bs * (size_t)(n ? n : 1));
        for (int k = 0; k < n; k++) {
            memcpy(bo[k], L->b[T->box_first + k].off, sizeof bo[k]);
            memcpy(bs[k], L->b[T->box_first + k].shp, sizeof bs[k]);
        }
        int64_t mo[CKPT_MAX_DIMS], ms[CKPT_MAX_DIMS];
        int gap = ck_find_gap(nd, zero, T->shape, n, (const int64_t(*)[CKPT_MAX_DIMS])bo,
                              (const int64_t(*)[CKPT_MAX_DIMS])bs, mo, ms);
        free(bo);
        free(bs);
        if (gap) ck_box_str(reg, sizeof reg, nd, mo, ms);
        else snprintf(reg, sizeof reg, "?");
        return mp_err_set(e, MP_ECHECK,
                          "tensor %s: the boxes cover %lld of its %lld elements; region %s is written by no rank",
                          T->name, (long long)total, (long long)want, reg);
    }
    return MP_OK;
}

/* Tile geometry of a box of shape shp (nd dims, elements of esize bytes), per the rule in
 * ckpt_internal.h (docs/FORMAT.md "Checksum tiles"): column blocks of tile_cols = cols / b entries of
 * dim 1, b the largest of 8, 4, 2, 1 dividing cols whose segment (tile_cols * inner * esize bytes) is
 * at least CK_TILE_MIN_SEG; tile_rows rows so that a tile holds about CK_TILE_BYTES, in [1, rows]. */
void ckpt_tile_geometry(size_t esize, int nd, const int64_t *shp, int64_t *tile_rows, int64_t *tile_cols) {
    assert(esize > 0 && nd >= 1 && nd <= CKPT_MAX_DIMS && tile_rows && tile_cols);
    int64_t rows = shp[0];
    int64_t cols = nd >= 2 ? shp[1] : 1;
    int64_t inner = 1;
    for (int d = 2; d < nd; d++) { assert(shp[d] > 0); inner = mul_sat(inner, shp[d]); }
    assert(rows > 0 && cols > 0 && inner > 0);
    /* saturating: a huge box (a segment beyond INT64_MAX bytes) still gets a valid geometry (1 row) */
    int64_t unit = mul_sat(inner, (int64_t)esize);   /* bytes of one dim-1 entry */
    int64_t b = 1;
    static const int64_t cand[] = {8, 4, 2};
    for (int k = 0; k < 3; k++)
        if (cols % cand[k] == 0 && mul_sat(cols / cand[k], unit) >= CK_TILE_MIN_SEG) { b = cand[k]; break; }
    int64_t tc = cols / b;
    int64_t seg = mul_sat(tc, unit);
    /* 1-D tensors (norm weights) are small and split by dp alone: CK_TILE_MIN_SEG-byte tiles keep a
     * partial read of one within a few elements of what it needs */
    int64_t target = nd == 1 ? CK_TILE_MIN_SEG : CK_TILE_BYTES;
    int64_t tr = target / seg + (target % seg != 0);   /* ceil, without the overflow of target + seg - 1 */
    if (tr < 1) tr = 1;
    if (tr > rows) tr = rows;
    *tile_rows = tr;
    *tile_cols = tc;
}

/* Number of tiles of a box of shape shp cut into tile_rows x tile_cols tiles (both > 0):
 * ceil(rows / tile_rows) * ceil(cols / tile_cols), cols = shp[1] (1 for 1-D). */
int64_t ck_tile_count(int nd, const int64_t *shp, int64_t tile_rows, int64_t tile_cols) {
    assert(nd >= 1 && nd <= CKPT_MAX_DIMS && tile_rows > 0 && tile_cols > 0);
    int64_t cols = nd >= 2 ? shp[1] : 1;
    /* ceil without the overflow of shp + tile - 1; the product saturates (a crafted ntiles never equals it) */
    int64_t nr = shp[0] / tile_rows + (shp[0] % tile_rows != 0), nc = cols / tile_cols + (cols % tile_cols != 0), n;
    return __builtin_mul_overflow(nr, nc, &n) ? INT64_MAX : n;
}
