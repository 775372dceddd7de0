/*
 * core/cuda/k_attn_bwd.cu — causal grouped-query flash attention, backward: dq, dk, dv from q, k, v,
 * out, lse and dout, recomputing the probabilities block by block (contract: core/backend.h attn_bwd;
 * CPU twin: core/kernels_cpu_attn_bwd.c; layouts as in k_attn_fwd.cu: q, dq with row stride ldq, k, v,
 * dk, dv with ldkv, out and dout dense).
 *
 * Per query head, S = scale Q K^T, P = exp(S - lse) (causal), D = rowsum(dO * O) (= rowsum(P * dP)):
 *   dP = dO V^T,  dS = scale P (dP - D),  dQ = dS K,  dK = sum_h dS^T Q,  dV = sum_h P^T dO
 * (dK, dV summed over the H/KV query heads of a kv group).
 *
 * Determinism without atomics: FlashAttention-2 accumulates dQ across key blocks with float atomics;
 * here dQ gets its own pass instead, so every output element is owned by exactly one warp:
 *   1. D kernel: one warp per (b, t, h) row, D = fp32 dot of dO and O (xor-butterfly: fixed order),
 *      into scratch [B,H,T].
 *   2. dK/dV kernel: grid (key tile, b*KV + g); 8 warps, one per key row j. The block walks, in a fixed
 *      order, the query heads h of group g and the query tiles of 32 rows that can see its keys (from
 *      the tile holding its first key to T): the block copies the tile's Q and dO rows (fp32, rows
 *      padded to 129 floats, conflict-free) and their lse and D into shared memory; lane l takes query
 *      row t = t0 + l and, if t >= j, computes p = exp(scale q_t.k_j - lse_t), dp = dO_t.v_j,
 *      ds = scale p (dp - D_t); the warp then adds sum_l p_l dO_t and sum_l ds_l q_t into the dims its
 *      lanes own (p_l, ds_l by shuffle, l in order). One warp sums everything a dK/dV row receives, in a
 *      fixed order (heads, tiles, rows): bitwise repeatable.
 *   3. dQ kernel: grid (query tile, b*H + h); 8 warps, one per query row t, over the key tiles of the
 *      causal prefix (K, V tiles in shared memory, as the forward): lane l recomputes p, dp, ds for key
 *      k0 + l and the warp adds sum_l ds_l k_l into dq. Again one warp per output row.
 * Sliding window (window > 0, the forward's): key j is seen by queries j .. j + window - 1; the dK/dV
 * pass stops at the last query that sees its block's keys and skips tiles wholly past them, the dQ pass
 * starts at the key tile holding its block's first row's first key (mp_cu_attn_first_key); masked pairs
 * are exact zeros. Window 0 is the causal kernels, operation for operation.
 * The price is recomputing S and dP twice (once per pass): ~1.4x the FLOPs of the atomic version.
 * Scalar fp32 FMA (docs/CUDA.md); the launcher sends hd 64 / 128 to the tensor-core dK/dV and dQ passes
 * (k_attn_mma.cu) after the D pass unless MP_CUDA_ATTN=simt. Shared memory ~41 KB static per kernel.
 */
#include "core/cuda/k_common.cuh"

#define ATT_WARPS 8                    /* key rows (dK/dV) or query rows (dQ) per block, one per warp */
#define ATT_BT 32                      /* rows per streamed tile: one per lane */
#define MAX_HD MP_CUDA_ATTN_MAX_HD
#define HD_PER_LANE (MAX_HD / MP_WARP)
#define PAD (MAX_HD + 1)

static_assert(MAX_HD % MP_WARP == 0, "a lane owns MAX_HD / 32 dims");

/* fp32 dot of a shared-memory row and a warp-private shared-memory vector, d in order. */
__device__ __forceinline__ float row_dot(const float *a, const float *b, int hd) {
    float s = 0.0f;
    for (int d = 0; d < hd; d++) s += a[d] * b[d];
    return s;
}

/* D[b,h,t] = sum_d dO[b,t,h,d] O[b,t,h,d]; one warp per row, rows ordered (b, t, h). */
static __global__ void __launch_bounds__(ATT_WARPS * MP_WARP)
    attn_bwd_d_kernel(float *__restrict__ Dout, const mp_bf16 *__restrict__ dout, const mp_bf16 *__restrict__ out,
                      int T, int H, int hd, int64_t rows) {
    const int lane = threadIdx.x % MP_WARP;
    const int64_t row = (int64_t)blockIdx.x * ATT_WARPS + threadIdx.x / MP_WARP;   /* (b*T + t)*H + h */
    if (row >= rows) return;
    const mp_bf16 *a = dout + row * hd, *o = out + row * hd;
    float s = 0.0f;
    for (int d = lane; d < hd; d += MP_WARP) s += mp_bf2f(a[d]) * mp_bf2f(o[d]);
    s = mp_warp_sum(s);
    const int h = (int)(row % H);
    const int64_t bt = row / H, b = bt / T, t = bt % T;
    if (lane == 0) Dout[(b * H + h) * T + t] = s;
}

static __global__ void __launch_bounds__(ATT_WARPS * MP_WARP)
    attn_bwd_dkdv_kernel(mp_bf16 *__restrict__ dk, mp_bf16 *__restrict__ dv, const float *__restrict__ Dsc,
                         const mp_bf16 *__restrict__ dout, const float *__restrict__ lse,
                         const mp_bf16 *__restrict__ q, const mp_bf16 *__restrict__ k,
                         const mp_bf16 *__restrict__ v, int T, int H, int KV, int hd, int ldq, int ldkv,
                         int window, float scale) {
    __shared__ float Qs[ATT_BT][PAD], dOs[ATT_BT][PAD], Kw[ATT_WARPS][MAX_HD], Vw[ATT_WARPS][MAX_HD];
    __shared__ float lse_s[ATT_BT], D_s[ATT_BT];
    const int lane = threadIdx.x % MP_WARP, w = threadIdx.x / MP_WARP;
    const int tile = gridDim.x - 1 - blockIdx.x;   /* early keys see the most queries: start them first */
    const int b = blockIdx.z, g = blockIdx.y, rep = H / KV;
    const int j0 = tile * ATT_WARPS, j = j0 + w;
    const bool row_ok = j < T;

    if (row_ok) {
        const int64_t off = ((int64_t)b * T + j) * ldkv + (int64_t)g * hd;
        for (int d = lane; d < hd; d += MP_WARP) Kw[w][d] = mp_bf2f(k[off + d]), Vw[w][d] = mp_bf2f(v[off + d]);
    }
    __syncwarp();

    float dkacc[HD_PER_LANE], dvacc[HD_PER_LANE];
    for (int i = 0; i < HD_PER_LANE; i++) dkacc[i] = 0.0f, dvacc[i] = 0.0f;

    /* the last query that sees the block's last key: the window's reach, or T - 1 */
    const int64_t reach = window > 0 ? (int64_t)j0 + ATT_WARPS - 1 + window : T;
    const int tend = reach < T ? (int)reach : T;
    for (int h = g * rep; h < (g + 1) * rep; h++) {
        for (int t0 = j0 / ATT_BT * ATT_BT; t0 < tend; t0 += ATT_BT) {
            __syncthreads();   /* the previous tile is no longer read */
            mp_load_tile_pair<ATT_BT, PAD>(Qs, dOs, q, ldq, dout, H * hd, b, T, h, hd, t0);
            if (threadIdx.x < ATT_BT) {
                const int t = t0 + threadIdx.x;
                const int64_t ri = ((int64_t)b * H + h) * T + t;
                lse_s[threadIdx.x] = t < T ? lse[ri] : 0.0f;
                D_s[threadIdx.x] = t < T ? Dsc[ri] : 0.0f;
            }
            __syncthreads();
            /* warp-uniform: no row of the tile sees key j (all before it, or all past its window) */
            if (!row_ok || t0 + ATT_BT - 1 < j || mp_cu_attn_first_key(t0, window) > j) continue;

            const int t = t0 + lane;
            float p = 0.0f, ds = 0.0f;
            if (t >= j && t < T && mp_cu_attn_first_key(t, window) <= j) {
                p = expf(scale * row_dot(Qs[lane], Kw[w], hd) - lse_s[lane]);
                const float dp = row_dot(dOs[lane], Vw[w], hd);
                ds = scale * p * (dp - D_s[lane]);
            }
            for (int l = 0; l < ATT_BT; l++) {
                const float pl = __shfl_sync(MP_FULL_MASK, p, l), dsl = __shfl_sync(MP_FULL_MASK, ds, l);
                for (int i = 0; i < HD_PER_LANE; i++) {
                    const int d = lane + i * MP_WARP;
                    if (d < hd) {
                        dvacc[i] += pl * dOs[l][d];
                        dkacc[i] += dsl * Qs[l][d];
                    }
                }
            }
        }
    }

    if (row_ok) {
        const int64_t off = ((int64_t)b * T + j) * ldkv + (int64_t)g * hd;
        for (int i = 0; i < HD_PER_LANE; i++) {
            const int d = lane + i * MP_WARP;
            if (d < hd) dk[off + d] = mp_f2bf(dkacc[i]), dv[off + d] = mp_f2bf(dvacc[i]);
        }
    }
}

static __global__ void __launch_bounds__(ATT_WARPS * MP_WARP)
    attn_bwd_dq_kernel(mp_bf16 *__restrict__ dq, const float *__restrict__ Dsc, const mp_bf16 *__restrict__ dout,
                       const float *__restrict__ lse, const mp_bf16 *__restrict__ q, const mp_bf16 *__restrict__ k,
                       const mp_bf16 *__restrict__ v, int T, int H, int KV, int hd, int ldq, int ldkv, int window,
                       float scale) {
    __shared__ float Ks[ATT_BT][PAD], Vs[ATT_BT][PAD], Qw[ATT_WARPS][MAX_HD], dOw[ATT_WARPS][MAX_HD];
    const int lane = threadIdx.x % MP_WARP, w = threadIdx.x / MP_WARP;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int q0 = tile * ATT_WARPS, t = q0 + w;
    const bool row_ok = t < T;

    float lse_t = 0.0f, D_t = 0.0f;
    if (row_ok) {
        const int64_t off = ((int64_t)b * T + t) * ldq + (int64_t)h * hd, doff = (((int64_t)b * T + t) * H + h) * hd;
        for (int d = lane; d < hd; d += MP_WARP) Qw[w][d] = mp_bf2f(q[off + d]), dOw[w][d] = mp_bf2f(dout[doff + d]);
        const int64_t ri = ((int64_t)b * H + h) * T + t;
        lse_t = lse[ri];
        D_t = Dsc[ri];
    }
    __syncwarp();

    float dqacc[HD_PER_LANE];
    for (int i = 0; i < HD_PER_LANE; i++) dqacc[i] = 0.0f;

    const int last_key = (q0 + ATT_WARPS < T ? q0 + ATT_WARPS : T) - 1, lo = mp_cu_attn_first_key(t, window);
    for (int k0 = mp_cu_attn_first_key(q0, window) / ATT_BT * ATT_BT; k0 <= last_key; k0 += ATT_BT) {
        __syncthreads();
        mp_load_tile_pair<ATT_BT, PAD>(Ks, Vs, k, ldkv, v, ldkv, b, T, g, hd, k0);
        __syncthreads();
        if (!row_ok || k0 > t || k0 + ATT_BT <= lo) continue;   /* warp-uniform */

        const int key = k0 + lane;
        float ds = 0.0f;
        if (key <= t && key >= lo) {
            const float p = expf(scale * row_dot(Qw[w], Ks[lane], hd) - lse_t);
            const float dp = row_dot(dOw[w], Vs[lane], hd);
            ds = scale * p * (dp - D_t);
        }
        const int nj = t - k0 + 1 < ATT_BT ? t - k0 + 1 : ATT_BT;   /* valid keys (warp-uniform) */
        for (int jj = 0; jj < nj; jj++) {
            const float dsj = __shfl_sync(MP_FULL_MASK, ds, jj);
            for (int i = 0; i < HD_PER_LANE; i++) {
                const int d = lane + i * MP_WARP;
                if (d < hd) dqacc[i] += dsj * Ks[jj][d];
            }
        }
    }

    if (row_ok) {
        const int64_t off = ((int64_t)b * T + t) * ldq + (int64_t)h * hd;
        for (int i = 0; i < HD_PER_LANE; i++) {
            const int d = lane + i * MP_WARP;
            if (d < hd) dq[off + d] = mp_f2bf(dqacc[i]);
        }
    }
}

extern "C" void mp_cuda_attn_bwd(mp_bf16 *dq, mp_bf16 *dk, mp_bf16 *dv, float *scratch, const mp_bf16 *dout,
                                 const mp_bf16 *out, const float *lse, const mp_bf16 *q, const mp_bf16 *k,
                                 const mp_bf16 *v, int B, int T, int H, int KV, int hd, int ldq, int ldkv,
                                 int window, cudaStream_t s) {
    assert(B >= 0 && T >= 0 && H > 0 && KV > 0 && H % KV == 0 && window >= 0);
    assert(hd >= 1 && hd <= MAX_HD && ldq >= H * hd && ldkv >= KV * hd);
    if (B == 0 || T == 0) return;
    assert(dq && dk && dv && scratch && dout && out && lse && q && k && v);
    const float scale = 1.0f / sqrtf((float)hd);
    const int64_t rows = (int64_t)B * T * H;
    assert((rows + ATT_WARPS - 1) / ATT_WARPS <= 0x7fffffff);   /* grid.x */
    attn_bwd_d_kernel<<<(unsigned)((rows + ATT_WARPS - 1) / ATT_WARPS), ATT_WARPS * MP_WARP, 0, s>>>(scratch, dout,
                                                                                                   out, T, H, hd, rows);
    if (mp_cuda_attn_mma_ok(dq, dk, dv, dout, hd, ldq, ldkv) && mp_cuda_attn_mma_ok(out, q, k, v, hd, ldq, ldkv)) {
        mp_cuda_attn_bwd_mma(dq, dk, dv, scratch, dout, lse, q, k, v, B, T, H, KV, hd, ldq, ldkv, window,
                             s);   /* tensor cores */
        return;
    }
    const int64_t tiles = (T + ATT_WARPS - 1) / ATT_WARPS;
    assert(mp_attn_grid_ok(tiles, H, B));   /* KV <= H */
    attn_bwd_dkdv_kernel<<<mp_attn_grid(tiles, KV, B), ATT_WARPS * MP_WARP, 0, s>>>(dk, dv, scratch, dout, lse, q,
                                                                                         k, v, T, H, KV, hd, ldq, ldkv,
                                                                                         window, scale);
    attn_bwd_dq_kernel<<<mp_attn_grid(tiles, H, B), ATT_WARPS * MP_WARP, 0, s>>>(dq, scratch, dout, lse, q, k, v,
                                                                                      T, H, KV, hd, ldq, ldkv, window,
                                                                                      scale);
}
