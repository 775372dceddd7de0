/*
 * core/kernels_cpu_attn.c — causal grouped-query attention on the CPU: OpenBLAS sgemm per
 * (batch, head) on strided views, the causal softmax in plain loops.
 *
 * Layout: q is [B,T,H,hd], so query head h of batch b is a [T, hd] matrix starting at
 * q + (b*T*H + h)*hd with row stride H*hd; k and v likewise with KV heads. Query head h reads kv head
 * h / (H/KV). att is [B,H,T,T]: the softmax probabilities, upper triangle zero.
 *
 * Causality is exploited in row blocks of MP_ATTN_BLOCK query rows: block [r0, r1) only sees keys
 * [0, r1), so every product is restricted to that prefix (about half the flops of the full square
 * at T >> block). Entries of att above the diagonal inside a block are written as exact zeros by the
 * softmax, those right of the block are zeroed explicitly, so the stored att is the full causal matrix.
 *
 * Backward, per query head, with P = att, S = scale * Q K^T:
 *   dP = dO V^T,  dS = P * (dP - rowsum(P * dP)),  dQ = scale * dS K,
 *   dK += scale * dS^T Q,  dV += P^T dO   (summed over the H/KV query heads that share a kv head).
 * The products are restricted to the causal prefix the same way.
 *
 * Threads: the (b, h) loop (forward) and the (b, kv head) loop (backward: the query heads of one group
 * add into the same dK/dV, so a group is one work item, done in a fixed head order) run under OpenMP
 * with a static schedule; OpenBLAS itself is single-threaded (see mp_cpu_threads), so each sgemm runs
 * on the thread that calls it. Every work item writes disjoint outputs in a fixed order, so results
 * are bitwise reproducible whatever the thread count. (Measured on 2 cores, B=4 T=256 H=4 hd=64:
 * switching OpenBLAS between 1 and 2 threads around the loop instead cost ~40%.)
 */
#include "core/kernels_cpu.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MP_ATTN_BLOCK 64

/* Team size for a loop of `items` work items. */
static int team_size(int items) {
    int n = mp_cpu_threads();
    return items < n ? (items > 0 ? items : 1) : n;
}

/* Softmax of row t of S (cols 0..t, already scaled) in place; cols t+1..ncols-1 set to 0. The simd
 * reductions fix one summation order for the binary (vector lanes, then lanes added), so they stay
 * deterministic. */
static void causal_softmax_row(float *restrict s, int t, int ncols) {
    float mx = s[0];
#pragma omp simd reduction(max : mx)
    for (int j = 1; j <= t; j++) mx = s[j] > mx ? s[j] : mx;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int j = 0; j <= t; j++) {
        float e = mp_expf(s[j] - mx);
        s[j] = e;
        sum += e;
    }
    float inv = 1.0f / sum;
    for (int j = 0; j <= t; j++) s[j] *= inv;
    for (int j = t + 1; j < ncols; j++) s[j] = 0.0f;
}

/* One (b, h): out_bh = softmax(scale * Q K^T, causal) V; P (T x T, row stride T) receives the probs. */
static void attn_fwd_head(float *O, int ldo, float *P, const float *Q, int ldq, const float *K,
                          const float *V, int ldkv, int T, int hd, float scale) {
    for (int r0 = 0; r0 < T; r0 += MP_ATTN_BLOCK) {
        int r1 = r0 + MP_ATTN_BLOCK < T ? r0 + MP_ATTN_BLOCK : T;
        int m = r1 - r0;
        float *Pb = P + (size_t)r0 * T;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hd, scale, Q + (size_t)r0 * ldq, ldq,
                    K, ldkv, 0.0f, Pb, T);
        for (int t = r0; t < r1; t++) causal_softmax_row(P + (size_t)t * T, t, T);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, r1, 1.0f, Pb, T, V, ldkv, 0.0f,
                    O + (size_t)r0 * ldo, ldo);
    }
}

void mp_cpu_attn_fwd(float *out, float *att, const float *q, const float *k, const float *v, int B, int T,
                     int H, int KV, int hd) {
    assert(B >= 0 && T >= 0 && H > 0 && KV > 0 && H % KV == 0 && hd > 0);
    if (B == 0 || T == 0) return;
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * H;
#pragma omp parallel for schedule(static) num_threads(team_size(items))
    for (int it = 0; it < items; it++) {
        int b = it / H, h = it % H, g = h / rep;
        const float *Q = q + ((size_t)b * T * H + h) * hd;
        const float *K = k + ((size_t)b * T * KV + g) * hd;
        const float *V = v + ((size_t)b * T * KV + g) * hd;
        float *O = out + ((size_t)b * T * H + h) * hd;
        float *P = att + ((size_t)b * H + h) * T * T;
        attn_fwd_head(O, H * hd, P, Q, H * hd, K, V, KV * hd, T, hd, scale);
    }
}

/* One query head of the backward; dK, dV accumulate (the caller zeroed them for the group). */
static void attn_bwd_head(float *dQ, float *dK, float *dV, int ldq, int ldkv, float *D, const float *dO,
                          const float *P, const float *Q, const float *K, const float *V, int T, int hd,
                          float scale) {
    for (int r0 = 0; r0 < T; r0 += MP_ATTN_BLOCK) {
        int r1 = r0 + MP_ATTN_BLOCK < T ? r0 + MP_ATTN_BLOCK : T;
        int m = r1 - r0;
        const float *Pb = P + (size_t)r0 * T;
        float *Db = D + (size_t)r0 * T;
        const float *dOb = dO + (size_t)r0 * ldq;
        /* dP = dO V^T over the causal prefix */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hd, 1.0f, dOb, ldq, V, ldkv, 0.0f, Db, T);
        /* dS = P * (dP - rowsum(P*dP)), times scale; exact zeros above the diagonal */
        for (int t = r0; t < r1; t++) {
            const float *restrict p = P + (size_t)t * T;
            float *restrict d = D + (size_t)t * T;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j <= t; j++) dot += p[j] * d[j];
            for (int j = 0; j <= t; j++) d[j] = scale * p[j] * (d[j] - dot);
            for (int j = t + 1; j < r1; j++) d[j] = 0.0f;
        }
        /* dQ = dS K;  dK += dS^T Q;  dV += P^T dO */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, r1, 1.0f, Db, T, K, ldkv, 0.0f,
                    dQ + (size_t)r0 * ldq, ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, m, 1.0f, Db, T, Q + (size_t)r0 * ldq, ldq,
                    1.0f, dK, ldkv);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, m, 1.0f, Pb, T, dOb, ldq, 1.0f, dV, ldkv);
    }
}

void mp_cpu_attn_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *att,
                     const float *q, const float *k, const float *v, int B, int T, int H, int KV, int hd) {
    assert(B >= 0 && T >= 0 && H > 0 && KV > 0 && H % KV == 0 && hd > 0);
    if (B == 0 || T == 0) return;
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * KV;
#pragma omp parallel for schedule(static) num_threads(team_size(items))
    for (int it = 0; it < items; it++) {
        int b = it / KV, g = it % KV;
        const size_t kvoff = ((size_t)b * T * KV + g) * hd;
        float *dK = dk + kvoff, *dV = dv + kvoff;
        for (int t = 0; t < T; t++) {
            memset(dK + (size_t)t * KV * hd, 0, (size_t)hd * sizeof(float));
            memset(dV + (size_t)t * KV * hd, 0, (size_t)hd * sizeof(float));
        }
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const size_t qoff = ((size_t)b * T * H + h) * hd;
            const size_t poff = ((size_t)b * H + h) * T * T;
            attn_bwd_head(dq + qoff, dK, dV, H * hd, KV * hd, scratch + poff, dout + qoff, att + poff,
                          q + qoff, k + kvoff, v + kvoff, T, hd, scale);
        }
    }
}
