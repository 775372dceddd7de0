/*
 * core/kernels_cpu_attn_fwd.c — causal grouped-query attention forward on the CPU, flash-style: the
 * output and the per-row log-sum-exp, and never a T x T matrix (the backward, in
 * core/kernels_cpu_attn_bwd.c, recomputes the probabilities from the lse).
 *
 * Layout: q is [B,T,H,hd] with row stride ldq (>= H*hd: q may be a column block of the fused [q | k | v]
 * projection), so query head h of batch b is a [T, hd] matrix starting at q + b*T*ldq + h*hd with row
 * stride ldq; k and v likewise with KV heads and row stride ldkv. out is dense (row stride H*hd). Query
 * head h reads kv head h / (H/KV). lse is [B,H,T]. Strides cost nothing here: every product is an
 * sgemm that takes a leading dimension anyway.
 *
 * Blocks (core/kernels_cpu.h): the query heads of a kv group are stacked time-major (fwd_rows: row
 * i ns + j is head j's time i, copied from q with one memcpy per time, as q keeps a time's heads
 * adjacent), so every product is one sgemm for all of them and K_c, V_c are packed once. A work item is
 * one query block [r0, r1) of MP_ATTN_BQ times of the stacked heads; it visits the key blocks [c0, c1)
 * of MP_ATTN_BK keys of its causal prefix: S = scale Q_r K_c^T (one sgemm), then the online softmax,
 * row by row, in float:
 *   m' = max(m, max_j S_j),  alpha = exp(m - m'),  P_j = exp(S_j - m'),  l' = alpha l + sum_j P_j,
 *   O_r <- alpha O_r + P V_c   (the rescale in a loop, the product one more sgemm, into a stacked copy)
 * and at the end O_r /= l, lse = m + log l, O_r copied into out. A key block every row sees whole is
 * one product of all the rows; the block holding the diagonal goes in bands of MP_ATTN_SUB times, each
 * only as wide as its last row's prefix, and columns right of a row's diagonal are exact zeros.
 * History (bench_attn-style A/B, one core, AVX2 EPYC): per (b, head) with 64 x 64 blocks this forward
 * ran at 34-42 GFLOP/s (useful causal FLOPs) at bench_tiny's, bench_small's and a T 2048 shape; the
 * stacked heads, 192-key blocks and bands run it at 45-58, 0.72-0.75x the CPU time.
 *
 * Sliding window (core/backend.h attn_fwd's window > 0): row t sees keys mp_attn_first_key(t, W) .. t; the
 * key walk starts at the block holding the query block's first key, and a row's scores left of its
 * window are exact zeros, as those right of its diagonal. Window 0 takes exactly the causal path.
 *
 * Threads: the work items (b, kv group, stack of heads, query block) go round-robin to the OpenMP team;
 * OpenBLAS is single-threaded (see mp_cpu_threads), so each sgemm runs on its caller. Every item writes
 * disjoint outputs in a fixed order and the stacking depends on the shape only, so results are bitwise
 * reproducible whatever the thread count.
 */
#include "core/kernels_cpu.h"
#include "core/alloc.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The online-softmax update of one query row t against key block [c0, c1): s holds the row's nk
 * scores (already scaled) from its first valid column on (the caller passes s + the columns left of the
 * row's window, which it zeroes itself); the first nvalid columns are valid (at least one). On return
 * s holds exp(score - m') on the valid columns and 0 beyond; *mrow, *lrow are updated; the factor
 * alpha that the row's output accumulator must be multiplied by is returned. */
static float online_softmax_row(float *restrict s, int nk, int nvalid, float *mrow, float *lrow) {
    assert(nvalid >= 1 && nvalid <= nk);
    float mx = s[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j < nvalid; j++) mx = s[j] > mx ? s[j] : mx;
    const float mnew = mx > *mrow ? mx : *mrow;
    const float alpha = mp_expf(*mrow - mnew);   /* first block: exp(-inf) = 0 */
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j < nvalid; j++) {
        float e = mp_expf(s[j] - mnew);
        s[j] = e;
        sum += e;
    }
    for (int j = nvalid; j < nk; j++) s[j] = 0.0f;
    *lrow = *lrow * alpha + sum;
    *mrow = mnew;
    return alpha;
}

/* One work item: query heads [j0, j0 + ns) of kv group g of batch row b (their Q rows at q, a column
 * block, row stride ldq; O rows at out, row stride ldo; lse rows at lse + j*T), the query block [r0, r1)
 * of the T rows, which sit at positions p0 + r (keys and values of the cache: K, V, row stride ldkv,
 * at least p0 + T rows). */
typedef struct {
    float *out, *lse;
    const float *q, *K, *V;
    int T, p0, ldq, ldo, ldkv, hd, window;
    float scale;
} fwd_item;

/* The item's stacked rows in its arena: row R = i ns + j is head j0 + j's query row r0 + i (time-major:
 * a range of times is one row range of every stacked head, as in the backward). Qs and Os (the output
 * accumulator) are rows x hd, S rows x BK scores, m and l each row's running max and sum. */
typedef struct {
    float *Qs, *Os, *S, *m, *l;
    int ns, r0;
} fwd_rows;

enum { BQ = MP_ATTN_BQ, BK = MP_ATTN_BK, SUB = MP_ATTN_SUB };

/* Rows [a, b) of the block (times r0 + a ..) against keys [c0, c1): S = scale Q K^T, the online softmax of
 * every row over its valid columns (keys <= its position and inside its window, mp_attn_first_key; a row
 * with none, as in a KV-cache call, where a key block can start past a query block's first positions, or
 * at a window's left edge, keeps its state and adds zeros), then O += P V_c. Without a window every valid
 * range starts at column 0: the call the kernel made before windows existed. */
static void fwd_pair(const fwd_item *it, const fwd_rows *s, int a, int b, int c0, int c1) {
    const int ns = s->ns, rows = (b - a) * ns, nk = c1 - c0, hd = it->hd;
    float *Q = s->Qs + (size_t)a * ns * hd, *O = s->Os + (size_t)a * ns * hd;
    assert(0 <= a && a < b && 0 <= c0 && c0 < c1 && nk <= BK);
    memset(s->S, 0, (size_t)rows * nk * sizeof(float));   /* beta = 1 on zeros: memset beats sgemm_beta */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, it->scale, Q, hd, it->K + (size_t)c0 * it->ldkv,
                it->ldkv, 1.0f, s->S, nk);
    for (int i = a; i < b; i++) {
        const int t = it->p0 + s->r0 + i, lo = mp_attn_first_key(t, it->window), jlo = lo > c0 ? lo - c0 : 0;
        const int nvalid = (c1 < t + 1 ? c1 : t + 1) - c0 - jlo;
        for (int j = 0; j < ns; j++) {
            const int R = i * ns + j;
            float *srow = s->S + (size_t)(R - a * ns) * nk;
            if (nvalid < 1) {
                memset(srow, 0, (size_t)nk * sizeof(float));
                continue;
            }
            if (jlo > 0) memset(srow, 0, (size_t)jlo * sizeof(float));   /* left of the window */
            const float alpha = online_softmax_row(srow + jlo, nk - jlo, nvalid, &s->m[R], &s->l[R]);
            if (alpha != 1.0f) {
                float *restrict o = s->Os + (size_t)R * hd;
                for (int d = 0; d < hd; d++) o[d] *= alpha;
            }
        }
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, nk, 1.0f, s->S, nk, it->V + (size_t)c0 * it->ldkv,
                it->ldkv, 1.0f, O, hd);
}

/* One item: O = softmax(scale Q K^T, causal) V and lse = log sum_j exp(scale q.k_j) for the stacked rows,
 * query row r at position t = p0 + r seeing keys mp_attn_first_key(t, window) .. t. Keys go in blocks of
 * BK starting at multiples of BK whatever p0 is, so a row visits the same blocks, with the same valid
 * columns, in a KV-cache call (p0 > 0) as in the whole-sequence forward. The walk starts at the block
 * holding the first row's first key: with a window, the blocks left of it (no row sees them) are never
 * touched, so a step costs O(T W), not O(T^2). A block every row of the query block sees whole is one
 * product of all rows; the others (the diagonal's, and with a window the left edge's) go in bands of SUB
 * rows, each only as wide as its last row's prefix (the square above the diagonal is not computed), and
 * a band none of whose rows reaches into the block (left of their windows) is skipped. arena: fwd_arena
 * floats. */
static void fwd_block(const fwd_item *it, int ns, int r0, float *arena) {
    const int hd = it->hd, r1 = r0 + BQ < it->T ? r0 + BQ : it->T, m = r1 - r0, rows = ns * m;
    const int first = it->p0 + r0, end = it->p0 + r1;   /* the block's first position; keys [.., end) */
    const int lo_last = mp_attn_first_key(end - 1, it->window);   /* the last row's first key */
    const size_t nf = (size_t)ns * hd;   /* one time's stacked row group */
    fwd_rows s = {arena, arena + (size_t)rows * hd, arena + (size_t)2 * rows * hd, NULL, NULL, ns, r0};
    s.m = s.S + (size_t)rows * BK, s.l = s.m + rows;
    mp_cpu_copy_rows(s.Qs, nf, it->q + (size_t)r0 * it->ldq, (size_t)it->ldq, m, (int)nf);
    memset(s.Os, 0, (size_t)rows * hd * sizeof(float));
    for (int R = 0; R < rows; R++) s.m[R] = -INFINITY, s.l[R] = 0.0f;
    for (int c0 = mp_attn_first_key(first, it->window) / BK * BK; c0 < end; c0 += BK) {
        const int c1 = c0 + BK < end ? c0 + BK : end;
        if (c1 <= first + 1 && c0 >= lo_last) {   /* every row sees the whole block */
            fwd_pair(it, &s, 0, m, c0, c1);
            continue;
        }
        for (int a = 0; a < m; a += SUB) {
            const int b = a + SUB < m ? a + SUB : m, ce = c1 < first + b ? c1 : first + b;
            /* else no row of the band reaches the block (right of their diagonal, or left of windows) */
            if (ce > c0 && mp_attn_first_key(first + a, it->window) < ce) fwd_pair(it, &s, a, b, c0, ce);
        }
    }
    for (int i = 0; i < m; i++) {
        for (int j = 0; j < ns; j++) {
            const int R = i * ns + j;
            float *restrict o = s.Os + (size_t)R * hd;
            const float inv = 1.0f / s.l[R];
            for (int d = 0; d < hd; d++) o[d] *= inv;
            it->lse[(size_t)j * it->T + r0 + i] = s.m[R] + logf(s.l[R]);
        }
        memcpy(it->out + (size_t)(r0 + i) * it->ldo, s.Os + i * nf, nf * sizeof(float));
    }
}

/* Floats of an item's arena for ns stacked heads and query blocks of at most mq rows: Qs, Os, S, m, l. */
static size_t fwd_arena(int ns, int mq, int hd) { return (size_t)ns * mq * (2 * (size_t)hd + BK + 2); }

/* How many of a group's rep query heads one item stacks: all of them while their arena stays within
 * MP_ATTN_FWD_ARENA floats for a full query block, at least 1 (mp_attn_stack). */
static int fwd_stack(int rep, int hd) { return mp_attn_stack(rep, fwd_arena(1, BQ, hd), MP_ATTN_FWD_ARENA); }

/* attn_fwd_kv with the caller's p0 and strides (0, Tc = T: attn_fwd). The work items are (b, kv group,
 * stack of heads, query block): every item writes its own rows of out and lse, so results are bitwise the
 * same whatever the thread count; round-robin (static, 1), as later query blocks cost more. Each thread
 * has one arena on the heap for the call, sized for the call's query blocks (a decode row: a few KiB). */
static void attn_fwd_rows(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                          int p0, int Tc, int H, int KV, int hd, int ldq, int ldkv, int window) {
    assert(B >= 0 && T >= 0 && p0 >= 0 && p0 + T <= Tc && H > 0 && KV > 0 && H % KV == 0 && hd > 0);
    assert(window >= 0);
    assert(ldq >= H * hd && ldkv >= KV * hd);
    if (B == 0 || T == 0) return;
    const int rep = H / KV, ns = fwd_stack(rep, hd), nstacks = (rep + ns - 1) / ns, nblocks = (T + BQ - 1) / BQ;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * KV * nstacks * nblocks;
    const size_t arena_floats = fwd_arena(ns, T < BQ ? T : BQ, hd);
#pragma omp parallel num_threads(mp_cpu_team(items))
    {
    float *arena = malloc(sizeof(float) * arena_floats);
    if (!arena) mp_oom(sizeof(float) * arena_floats, MP_MEM_OTHER, "attention forward scratch");
#pragma omp for schedule(static, 1)
    for (int it = 0; it < items; it++) {
        const int rb = it % nblocks, st = it / nblocks % nstacks, g = it / nblocks / nstacks % KV;
        const int b = it / nblocks / nstacks / KV, j0 = st * ns, h0 = g * rep + j0;
        const int n = rep - j0 < ns ? rep - j0 : ns;
        const fwd_item item = {out + ((size_t)b * T * H + h0) * hd, lse + ((size_t)b * H + h0) * T,
                               q + (size_t)b * T * ldq + (size_t)h0 * hd, k + (size_t)b * Tc * ldkv + (size_t)g * hd,
                               v + (size_t)b * Tc * ldkv + (size_t)g * hd, T, p0, ldq, H * hd, ldkv, hd, window,
                               scale};
        fwd_block(&item, n, rb * BQ, arena);
    }
    free(arena);
    }
}

void mp_cpu_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int H,
                     int KV, int hd, int ldq, int ldkv, int window) {
    attn_fwd_rows(out, lse, q, k, v, B, T, 0, T, H, KV, hd, ldq, ldkv, window);
}

void mp_cpu_attn_fwd_kv(float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq,
                        int pos0, int Tc, int H, int KV, int hd, int window) {
    attn_fwd_rows(out, lse, q, k, v, B, Tq, pos0, Tc, H, KV, hd, H * hd, KV * hd, window);
}
