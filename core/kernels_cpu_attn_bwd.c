/*
 * core/kernels_cpu_attn_bwd.c — causal grouped-query attention backward on the CPU, flash-style: the
 * probabilities are recomputed block by block from q, k and the forward's log-sum-exp, so no T x T
 * matrix exists (layout as in core/kernels_cpu_attn_fwd.c: q, dq with row stride ldq, k, v, dk, dv with
 * ldkv, out and dout dense).
 *
 * Per query head, with S = scale Q K^T, P = exp(S - lse) (causal) and D = rowsum(dO * O) (which equals
 * rowsum(P * dP), as O = P V):
 *   dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK += scale dS^T Q,  dV += P^T dO
 * (dK, dV summed over the H/KV query heads that share a kv head). The query heads of a kv group are
 * stacked (bwd_heads): for every query block [r0, r1) of MP_ATTN_BQ rows their Q and dO rows are copied
 * into one tall matrix each, time-major, and for every key block [c0, c1) of MP_ATTN_BK keys of the
 * causal prefix each of the five products is one sgemm for all the stacked heads (bwd_pair: K_c and V_c
 * packed once, dK_c and dV_c summed over the heads inside one product); the key block that holds the
 * diagonal is cut into bands of MP_ATTN_SUB rows, each only as wide as its last row's prefix. S and
 * dP are summed into zeroed blocks and one vectorised pass turns them into P and dS (p_ds_row). D is
 * computed per head into the caller's scratch ([B,H,T] floats), once per row.
 * Compared with keeping P from the forward this costs one more product (S) and the exps. History, CPU
 * time against the old T x T backward (bench/bench_attn.sh runs it beside this one): 1.5-1.7x with 64-key
 * blocks; 1.10-1.24x with 256-key blocks (on an AVX-512 EPYC; 1.40-1.65x on an AVX2 one, where the exps
 * turned out scalar); 0.92-0.97x after a second pass: exps vectorised (-fno-trapping-math),
 * the fused P/dS pass, memset instead of OpenBLAS's beta = 0 pass, the stacked heads
 * (docs/BENCH_TRAIN.md); 0.96-1.05x a day later on the same machine with a faster sgemm: the five
 * products are 1.25x the T x T version's FLOPs, so the ratio follows the GEMM speed; ~3.5% less at T 256
 * and 512 with the diagonal bands (time-major stacking keeps a band one row range for all heads, so its
 * products stay as tall as ns SUB rows; per-head strips, tried before the stacking, gained nothing).
 * Beating it by more needs a packing-free fused kernel (OpenBLAS packing is 13% of this one's time).
 *
 * Sliding window (attn_bwd's window > 0, the forward's): row t's probabilities are those of keys
 * mp_attn_first_key(t, W) .. t, the rest exact zeros; key blocks no row of a query block sees are
 * skipped. Window 0 takes exactly the causal path.
 *
 * Threads: the (b, kv head) loop runs under OpenMP with a static schedule: the query heads of one group
 * add into the same dK/dV, so a group is one work item, its heads and blocks done in a fixed order. Every
 * work item writes disjoint outputs (its dK, dV and its heads' dQ, D), so results are bitwise
 * reproducible whatever the thread count.
 */
#include "core/kernels_cpu.h"
#include "core/alloc.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* D[t] = sum_d dO[t,d] O[t,d] for the T rows of one head (row stride ld). */
static void rowdot(float *D, const float *dO, const float *O, int ld, int T, int hd) {
    for (int t = 0; t < T; t++) {
        const float *restrict a = dO + (size_t)t * ld, *restrict b = O + (size_t)t * ld;
        float s = 0.0f;
#pragma omp simd reduction(+ : s)
        for (int d = 0; d < hd; d++) s += a[d] * b[d];
        D[t] = s;
    }
}

/* One row of a block pair, in place: s holds the row's nk scaled scores, dp its dO V^T, from the row's
 * first valid column on (the caller zeroes the columns left of its window and passes s, dp past them);
 * the first nvalid columns (those at or left of the diagonal) become p = exp(s - l) and ds = scale p
 * (dp - Dt), the rest exact zeros. One fused, vectorised pass (omp simd: mp_expf is branch-free). */
static void p_ds_row(float *restrict s, float *restrict dp, int nk, int nvalid, float l, float Dt, float scale) {
    assert(nvalid >= 1 && nvalid <= nk);
#pragma omp simd
    for (int j = 0; j < nvalid; j++) {
        const float p = mp_expf(s[j] - l);
        s[j] = p;
        dp[j] = scale * p * (dp[j] - Dt);
    }
    for (int j = nvalid; j < nk; j++) s[j] = 0.0f, dp[j] = 0.0f;
}

/* One (batch row, kv head) group: query head j of the group (j < rep) is at dq/dout/q + j*hd and its D
 * and lse rows at D/lse + j*T; Q, dQ have row stride ldq (q may be a column block of the fused
 * [q | k | v] buffer), dO ldo (dense), K, V, dK, dV ldkv. dQ is written, dK and dV accumulate (the caller
 * zeroed them). */
typedef struct {
    float *dq, *dK, *dV;
    const float *D, *lse, *dout, *q, *K, *V;
    int T, ldq, ldo, ldkv, hd, window;
    float scale;
} bwd_group;

enum { BQ = MP_ATTN_BQ, BK = MP_ATTN_BK, SUB = MP_ATTN_SUB, ARENA = MP_ATTN_BWD_ARENA };
_Static_assert(ARENA >= 2 * BQ * BK, "the arena holds at least one head's P and dS");

/* How many of a group's rep heads bwd_heads stacks at once: as many as the arena holds (P and dS of
 * BQ x BK each, the copies of Q, dO, dQ of BQ x hd each, per head), at least 1 (which copies nothing). */
static int bwd_stack(int rep, int hd) { return mp_attn_stack(rep, (size_t)BQ * (2 * BK + 3 * (size_t)hd), ARENA); }

/* The stacked rows of a query block: row R = i ns + j is head j0 + j's query row r0 + i (time-major, so
 * the rows of a range of times are one contiguous range of rows, whichever heads are stacked). Q, dO, dQ
 * point at stacked row 0 with row strides ld (Q, dQ) and ldd (dO). */
typedef struct {
    const float *Q, *dO;
    float *dQ;
    int ld, ldd, ns, j0, r0;
} bwd_rows;

/* One block pair: the stacked rows of times [r0 + a, r0 + b) against keys [c0, c1), where c1 <= r0 + b
 * (no key past the last row): S = scale Q K^T into P and dP = dO V^T into dS, one pass turning them
 * into P and dS (columns right of a row's diagonal, or left of its window, exact zeros), then dV_c += P^T dO, dK_c += dS^T Q
 * (summed over the rows, so over the stacked heads too) and dQ += dS K_c. P, dS: room for rows x nk. */
static void bwd_pair(const bwd_group *g, const bwd_rows *s, int a, int b, int c0, int c1, float *P, float *dS) {
    const int ns = s->ns, rows = (b - a) * ns, nk = c1 - c0, hd = g->hd, ldkv = g->ldkv;
    const float *Q = s->Q + (size_t)a * ns * s->ld, *dO = s->dO + (size_t)a * ns * s->ldd;
    const float *Kc = g->K + (size_t)c0 * ldkv, *Vc = g->V + (size_t)c0 * ldkv;
    assert(0 <= a && a < b && 0 <= c0 && c0 < c1 && c1 <= s->r0 + b);
    assert((size_t)rows * nk <= (size_t)ns * BQ * BK);   /* the arena's P and dS blocks */
    /* Zeroed here and added with beta = 1: OpenBLAS's beta = 0 pass (sgemm_beta) is slower than memset
     * (these products ran ~15% faster so; the same sums, so the same results). */
    memset(P, 0, (size_t)rows * nk * sizeof(float));
    memset(dS, 0, (size_t)rows * nk * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, g->scale, Q, s->ld, Kc, ldkv, 1.0f, P, nk);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, nk, hd, 1.0f, dO, s->ldd, Vc, ldkv, 1.0f, dS, nk);
    for (int i = a; i < b; i++) {
        const int t = s->r0 + i, lo = mp_attn_first_key(t, g->window), jlo = lo > c0 ? lo - c0 : 0;
        const int nvalid = (c1 < t + 1 ? c1 : t + 1) - c0 - jlo;
        for (int j = 0; j < ns; j++) {
            const size_t row = (size_t)((i - a) * ns + j) * nk, hr = (size_t)(s->j0 + j) * g->T + t;
            if (nvalid < 1) {   /* the whole block left of the row's window */
                memset(P + row, 0, (size_t)nk * sizeof(float));
                memset(dS + row, 0, (size_t)nk * sizeof(float));
                continue;
            }
            if (jlo > 0) {   /* left of the row's window */
                memset(P + row, 0, (size_t)jlo * sizeof(float));
                memset(dS + row, 0, (size_t)jlo * sizeof(float));
            }
            p_ds_row(P + row + jlo, dS + row + jlo, nk - jlo, nvalid, g->lse[hr], g->D[hr], g->scale);
        }
    }
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, rows, 1.0f, P, nk, dO, s->ldd, 1.0f,
                g->dV + (size_t)c0 * ldkv, ldkv);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, rows, 1.0f, dS, nk, Q, s->ld, 1.0f,
                g->dK + (size_t)c0 * ldkv, ldkv);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, hd, nk, 1.0f, dS, nk, Kc, ldkv, 1.0f,
                s->dQ + (size_t)a * ns * s->ld, s->ld);
}

/* Heads [j0, j0 + ns) of group g, stacked: for each query block [r0, r1) their Q and dO rows are
 * copied into one (ns m) x hd matrix each, time-major (bwd_rows; one memcpy of ns hd floats per time, as
 * the heads of a time are adjacent in q and dout), so each of the five products is one call for the ns
 * heads: K_c and V_c are packed once for all of them, and dK_c, dV_c take the heads' sum in one product
 * of depth ns m (separate calls per head were 8-15% slower in the products, on one core). For ns = 1
 * the products read and write the head's rows in place. The key blocks left of the block's first row
 * are whole rectangles; the block that holds the diagonal is cut into bands of MP_ATTN_SUB rows,
 * each only as wide as its last row needs: the square above the diagonal, which every row of the block
 * would otherwise compute and discard, shrinks from BQ^2/2 to BQ SUB/2 entries (bench_tiny's products
 * 10% fewer FLOPs, bench_small's 6%). With a window the walk starts at the key block holding the query
 * block's first key (no row sees the blocks left of it), and a rectangle takes only the rows that reach
 * into it (its first rows: later ones start their windows further right). arena: ARENA floats. */
static void bwd_heads(const bwd_group *g, int j0, int ns, float *arena) {
    const int T = g->T, hd = g->hd;
    float *P = arena, *dS = P + (size_t)ns * BQ * BK;   /* one block pair: probabilities, then dP -> dS */
    float *Qs = ns > 1 ? dS + (size_t)ns * BQ * BK : NULL;   /* ns > 1: stacked copies of Q_r, dO_r, dQ_r */
    float *dOs = ns > 1 ? Qs + (size_t)ns * BQ * hd : NULL, *dQs = ns > 1 ? dOs + (size_t)ns * BQ * hd : NULL;
    const size_t nf = (size_t)ns * hd;   /* floats of one time's stacked row group */
    for (int r0 = 0; r0 < T; r0 += BQ) {
        const int r1 = r0 + BQ < T ? r0 + BQ : T, m = r1 - r0;
        const float *Qr = g->q + (size_t)j0 * hd + (size_t)r0 * g->ldq;
        const float *dOr = g->dout + (size_t)j0 * hd + (size_t)r0 * g->ldo;
        float *dQr = g->dq + (size_t)j0 * hd + (size_t)r0 * g->ldq;
        bwd_rows s = {Qr, dOr, dQr, g->ldq, g->ldo, ns, j0, r0};
        if (ns > 1) {   /* stacked copies: row i ns + j is head j0 + j's row r0 + i */
            mp_cpu_copy_rows(Qs, nf, Qr, g->ldq, m, (int)nf);
            mp_cpu_copy_rows(dOs, nf, dOr, g->ldo, m, (int)nf);
            s = (bwd_rows){Qs, dOs, dQs, hd, hd, ns, j0, r0};
        }
        for (int i = 0; i < m * ns; i++) memset(s.dQ + (size_t)i * s.ld, 0, (size_t)hd * sizeof(float));
        int c0 = mp_attn_first_key(r0, g->window) / BK * BK;
        for (; c0 + BK <= r0; c0 += BK) {   /* whole rectangles: rows r0 + i with first key < c0 + BK */
            const int64_t reach = g->window > 0 ? (int64_t)c0 + BK + g->window - 1 - r0 : m;
            bwd_pair(g, &s, 0, reach < m ? (int)reach : m, c0, c0 + BK, P, dS);
        }
        for (int a = 0; a < m; a += SUB) {   /* the diagonal's block, in bands of SUB rows */
            const int b = a + SUB < m ? a + SUB : m;
            bwd_pair(g, &s, a, b, c0, r0 + b, P, dS);
        }
        if (ns > 1) mp_cpu_copy_rows(g->dq + (size_t)j0 * hd + (size_t)r0 * g->ldq, g->ldq, dQs, nf, m, (int)nf);
    }
}

void mp_cpu_attn_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                     const float *lse, const float *q, const float *k, const float *v, int B, int T, int H, int KV,
                     int hd, int ldq, int ldkv, int window) {
    assert(B >= 0 && T >= 0 && H > 0 && KV > 0 && H % KV == 0 && hd > 0 && window >= 0);
    assert(ldq >= H * hd && ldkv >= KV * hd);
    if (B == 0 || T == 0) return;
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * KV, ns = bwd_stack(rep, hd);
    /* the arena is on the heap, one per thread of the team for the call: 432 KiB on a thread's stack
     * would overflow under a small `ulimit -s` or OMP_STACKSIZE. A call's scratch, like a stack frame:
     * not charged to the allocator's categories (they report what a rank holds), a failure still
     * reported and ended by mp_oom */
#pragma omp parallel num_threads(mp_cpu_team(items))
    {
    float *arena = malloc(sizeof(float) * ARENA);
    if (!arena) mp_oom(sizeof(float) * ARENA, MP_MEM_OTHER, "attention backward scratch");
#pragma omp for schedule(static)
    for (int it = 0; it < items; it++) {
        int b = it / KV, g = it % KV;
        const size_t kvoff = (size_t)b * T * ldkv + (size_t)g * hd;
        float *dK = dk + kvoff, *dV = dv + kvoff;
        for (int t = 0; t < T; t++) {
            memset(dK + (size_t)t * ldkv, 0, (size_t)hd * sizeof(float));
            memset(dV + (size_t)t * ldkv, 0, (size_t)hd * sizeof(float));
        }
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const size_t qoff = ((size_t)b * T * H + h) * hd, roff = ((size_t)b * H + h) * T;
            rowdot(scratch + roff, dout + qoff, out + qoff, H * hd, T, hd);
        }
        const size_t ooff = ((size_t)b * T * H + g * rep) * hd, roff = ((size_t)b * H + g * rep) * T;
        const size_t qoff = (size_t)b * T * ldq + (size_t)g * rep * hd;
        const bwd_group grp = {dq + qoff, dK, dV, scratch + roff, lse + roff, dout + ooff, q + qoff, k + kvoff,
                               v + kvoff, T, ldq, H * hd, ldkv, hd, window, scale};
        for (int j0 = 0; j0 < rep; j0 += ns) bwd_heads(&grp, j0, rep - j0 < ns ? rep - j0 : ns, arena);
    }
    free(arena);
    }
}
