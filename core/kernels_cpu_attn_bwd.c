/*
 * core/kernels_cpu_attn_bwd.c — causal grouped-query attention backward on the CPU, flash-style: the
 * probabilities are recomputed block by block from q, k and the forward's log-sum-exp, so no T x T
 * matrix exists (layout as in core/kernels_cpu_attn_fwd.c).
 *
 * Per query head, with S = scale Q K^T, P = exp(S - lse) (causal) and D = rowsum(dO * O) (which equals
 * rowsum(P * dP), as O = P V):
 *   dP = dO V^T,  dS = P * (dP - D),  dQ = scale dS K,  dK += scale dS^T Q,  dV += P^T dO
 * (dK, dV summed over the H/KV query heads that share a kv head). For every query block [r0, r1) of
 * MP_ATTN_BQ rows and every key block [c0, c1) of MP_ATTN_BWD_BK keys of its causal prefix, each of the
 * five products is one sgemm on a block pair; P and dS live in two MP_ATTN_BQ x MP_ATTN_BWD_BK stack
 * buffers. D is computed per head into the caller's scratch ([B,H,T] floats), once per row.
 * Compared with keeping P from the forward this costs one more product (S) and the exps: with 64-key
 * blocks 1.5-1.7x the CPU time of the old T x T backward; with 256-key blocks (issue 21) 1.10-1.24x at
 * the bench shapes (bench/bench_attn.sh runs the old one beside this one). Its sgemm calls already run
 * at OpenBLAS's rate: what is left over the T x T version is the fifth product (docs/BENCH_TRAIN.md).
 *
 * Threads: the (b, kv head) loop runs under OpenMP with a static schedule: the query heads of one group
 * add into the same dK/dV, so a group is one work item, its heads and blocks done in a fixed order. Every
 * work item writes disjoint outputs (its dK, dV and its heads' dQ, D), so results are bitwise
 * reproducible whatever the thread count.
 */
#include "core/kernels_cpu.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
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

/* One row of a block pair, in place: s holds the row's nk scaled scores, dp its dO V^T; the first
 * nvalid columns (those at or left of the diagonal) become p = exp(s - l) and ds = scale p (dp - Dt),
 * the rest exact zeros. One fused, vectorised pass (omp simd: mp_expf is branch-free). */
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

/* One query head; dQ is written, dK and dV accumulate (the caller zeroed them for the group). */
static void attn_bwd_head(float *dQ, float *dK, float *dV, int ldq, int ldkv, const float *D, const float *lse,
                          const float *dO, const float *Q, const float *K, const float *V, int T, int hd,
                          float scale) {
    enum { BQ = MP_ATTN_BQ, BK = MP_ATTN_BWD_BK };
    float P[BQ * BK], dS[BQ * BK];   /* one block pair: probabilities, then dP -> dS */
    for (int r0 = 0; r0 < T; r0 += BQ) {
        const int r1 = r0 + BQ < T ? r0 + BQ : T, m = r1 - r0;
        const float *Qr = Q + (size_t)r0 * ldq, *dOr = dO + (size_t)r0 * ldq;
        for (int c0 = 0; c0 < r1; c0 += BK) {   /* c0 <= r0: BK is a multiple of BQ */
            const int c1 = c0 + BK < r1 ? c0 + BK : r1, nk = c1 - c0;   /* no key past the block's rows */
            const float *Kc = K + (size_t)c0 * ldkv, *Vc = V + (size_t)c0 * ldkv;
            /* S = scale Q_r K_c^T into P, dP = dO_r V_c^T into dS; then one pass turns them into P and dS.
             * Zeroed here and added with beta = 1: OpenBLAS's beta = 0 pass (sgemm_beta) is slower than
             * memset (these products ran ~15% faster so; the same sums, so the same results). */
            memset(P, 0, (size_t)m * nk * sizeof(float));
            memset(dS, 0, (size_t)m * nk * sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nk, hd, scale, Qr, ldq, Kc, ldkv, 1.0f, P, nk);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, nk, hd, 1.0f, dOr, ldq, Vc, ldkv, 1.0f, dS, nk);
            for (int i = 0; i < m; i++) {
                const int t = r0 + i;
                p_ds_row(P + (size_t)i * nk, dS + (size_t)i * nk, nk, (c1 < t + 1 ? c1 : t + 1) - c0, lse[t], D[t],
                         scale);
            }
            /* dV_c += P^T dO_r */
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, m, 1.0f, P, nk, dOr, ldq, 1.0f,
                        dV + (size_t)c0 * ldkv, ldkv);
            /* dQ_r += dS K_c (zeroed before the first key block, as above);  dK_c += dS^T Q_r */
            if (c0 == 0)
                for (int i = 0; i < m; i++) memset(dQ + (size_t)(r0 + i) * ldq, 0, (size_t)hd * sizeof(float));
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, nk, 1.0f, dS, nk, Kc, ldkv, 1.0f,
                        dQ + (size_t)r0 * ldq, ldq);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, hd, m, 1.0f, dS, nk, Qr, ldq, 1.0f,
                        dK + (size_t)c0 * ldkv, ldkv);
        }
    }
}

void mp_cpu_attn_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                     const float *lse, const float *q, const float *k, const float *v, int B, int T, int H, int KV,
                     int hd) {
    assert(B >= 0 && T >= 0 && H > 0 && KV > 0 && H % KV == 0 && hd > 0);
    if (B == 0 || T == 0) return;
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * KV;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(items))
    for (int it = 0; it < items; it++) {
        int b = it / KV, g = it % KV;
        const size_t kvoff = ((size_t)b * T * KV + g) * hd;
        float *dK = dk + kvoff, *dV = dv + kvoff;
        for (int t = 0; t < T; t++) {
            memset(dK + (size_t)t * KV * hd, 0, (size_t)hd * sizeof(float));
            memset(dV + (size_t)t * KV * hd, 0, (size_t)hd * sizeof(float));
        }
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const size_t qoff = ((size_t)b * T * H + h) * hd, roff = ((size_t)b * H + h) * T;
            rowdot(scratch + roff, dout + qoff, out + qoff, H * hd, T, hd);
            attn_bwd_head(dq + qoff, dK, dV, H * hd, KV * hd, scratch + roff, lse + roff, dout + qoff, q + qoff,
                          k + kvoff, v + kvoff, T, hd, scale);
        }
    }
}
