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
 * Blocks: queries are cut into blocks of MP_ATTN_BQ rows, keys into blocks of MP_ATTN_BK (a multiple
 * of BQ; both 64 by default, core/kernels_cpu.h). Query block [r0, r1) visits the key blocks [c0, c1)
 * of its causal prefix (c0 < r1, c1 clipped at r1; about half the flops of the full square at
 * T >> block): S = scale Q_r K_c^T by one sgemm into a BQ x BK scratch on the stack, then the online
 * softmax, row by row, in float:
 *   m' = max(m, max_j S_j),  alpha = exp(m - m'),  P_j = exp(S_j - m'),  l' = alpha l + sum_j P_j,
 *   O_r <- alpha O_r + P V_c   (the rescale in a loop, the product one more sgemm, into out itself)
 * and at the end O_r /= l, lse = m + log l. Columns right of the diagonal inside the diagonal block
 * are written as exact zeros, so they add nothing. Scratch is one block of scores per thread.
 *
 * Threads: the (b, h) loop runs under OpenMP with a static schedule; OpenBLAS is single-threaded (see
 * mp_cpu_threads), so each sgemm runs on its caller. Every work item writes disjoint outputs in a fixed
 * order, so results are bitwise reproducible whatever the thread count.
 */
#include "core/kernels_cpu.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>

/* The online-softmax update of one query row t against key block [c0, c1): s holds the row's nk
 * scores (already scaled); valid columns are c0..min(c1, t+1)-1 (at least one, as c0 <= t). On return
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

/* One (b, h): O = softmax(scale Q K^T, causal) V and lse[r] = log sum_j exp(scale q_r.k_j), query row r
 * at position p0 + r seeing keys 0 .. p0 + r (K and V hold at least p0 + T rows). With p0 = 0 this is the
 * training forward; with p0 > 0 the queries are new positions of a sequence whose earlier keys are
 * cached (attn_fwd_kv). Key blocks start at multiples of BK whatever p0 is, so a row visits the same
 * blocks, with the same valid columns, as it does in the whole-sequence forward. */
static void attn_fwd_head(float *O, int ldo, float *lse, const float *Q, int ldq, const float *K, const float *V,
                          int ldkv, int T, int p0, int hd, float scale) {
    enum { BQ = MP_ATTN_BQ, BK = MP_ATTN_BK };
    float S[BQ * BK];             /* scores, then unnormalised probabilities, of one block pair */
    float mrow[BQ], lrow[BQ];     /* running max and sum of each query row of the block */
    for (int r0 = 0; r0 < T; r0 += BQ) {
        const int r1 = r0 + BQ < T ? r0 + BQ : T, m = r1 - r0, end = p0 + r1;   /* keys [0, end) */
        float *Ob = O + (size_t)r0 * ldo;
        for (int i = 0; i < m; i++) mrow[i] = -INFINITY, lrow[i] = 0.0f;
        for (int c0 = 0; c0 < end; c0 += BK) {   /* with p0 = 0, c0 <= r0: BK is a multiple of BQ */
            const int c1 = c0 + BK < end ? c0 + BK : end, nk = c1 - c0;   /* no key past the block's rows */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nk, hd, scale, Q + (size_t)r0 * ldq, ldq,
                        K + (size_t)c0 * ldkv, ldkv, 0.0f, S, nk);
            for (int i = 0; i < m; i++) {
                const int t = p0 + r0 + i, nvalid = (c1 < t + 1 ? c1 : t + 1) - c0;
                float *srow = S + (size_t)i * nk;
                if (nvalid < 1) {   /* only with p0 % BQ != 0: a block wholly past this row adds nothing */
                    for (int j = 0; j < nk; j++) srow[j] = 0.0f;
                    continue;
                }
                float alpha = online_softmax_row(srow, nk, nvalid, &mrow[i], &lrow[i]);
                if (c0 > 0 && alpha != 1.0f) {
                    float *restrict o = Ob + (size_t)i * ldo;
                    for (int d = 0; d < hd; d++) o[d] *= alpha;
                }
            }
            /* O_r (+)= P V_c; the first key block writes (out may hold anything before) */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, nk, 1.0f, S, nk, V + (size_t)c0 * ldkv,
                        ldkv, c0 > 0 ? 1.0f : 0.0f, Ob, ldo);
        }
        for (int i = 0; i < m; i++) {
            float *restrict o = Ob + (size_t)i * ldo;
            const float inv = 1.0f / lrow[i];
            for (int d = 0; d < hd; d++) o[d] *= inv;
            lse[r0 + i] = mrow[i] + logf(lrow[i]);
        }
    }
}

/* attn_fwd_kv with the caller's p0 and strides (0, Tc = T: attn_fwd): every (b, h) under OpenMP, static
 * schedule. */
static void attn_fwd_rows(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T,
                          int p0, int Tc, int H, int KV, int hd, int ldq, int ldkv) {
    assert(B >= 0 && T >= 0 && p0 >= 0 && p0 + T <= Tc && H > 0 && KV > 0 && H % KV == 0 && hd > 0);
    assert(ldq >= H * hd && ldkv >= KV * hd);
    if (B == 0 || T == 0) return;
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * H;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(items))
    for (int it = 0; it < items; it++) {
        int b = it / H, h = it % H, g = h / rep;
        const float *Q = q + (size_t)b * T * ldq + (size_t)h * hd;
        const float *K = k + (size_t)b * Tc * ldkv + (size_t)g * hd;
        const float *V = v + (size_t)b * Tc * ldkv + (size_t)g * hd;
        float *O = out + ((size_t)b * T * H + h) * hd;
        attn_fwd_head(O, H * hd, lse + (size_t)it * T, Q, ldq, K, V, ldkv, T, p0, hd, scale);
    }
}

void mp_cpu_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int H,
                     int KV, int hd, int ldq, int ldkv) {
    attn_fwd_rows(out, lse, q, k, v, B, T, 0, T, H, KV, hd, ldq, ldkv);
}

void mp_cpu_attn_fwd_kv(float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq,
                        int pos0, int Tc, int H, int KV, int hd) {
    attn_fwd_rows(out, lse, q, k, v, B, Tq, pos0, Tc, H, KV, hd, H * hd, KV * hd);
}
