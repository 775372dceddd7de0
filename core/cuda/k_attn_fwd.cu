/*
 * core/cuda/k_attn_fwd.cu — causal grouped-query flash attention, forward: the output and the per-row
 * log-sum-exp, never a T x T matrix (contract: core/backend.h attn_fwd; CPU twin:
 * core/kernels_cpu_attn_fwd.c).
 *
 * Layout: q [B,T,H,hd] (row stride ldq), k, v [B,T,KV,hd] (row stride ldkv) bf16, column blocks of the
 * fused [q | k | v] rows in training; query head h reads kv head g = h / (H/KV); out
 * [B,T,H,hd] bf16; lse [B,H,T] fp32, lse[b,h,t] = log sum_{j<=t} exp(scale q_t.k_j), scale = 1/sqrt(hd).
 *
 * The launcher sends head dims 64 and 128 to the tensor-core kernel (k_attn_mma.cu) unless
 * MP_CUDA_ATTN=simt; this scalar kernel is the fallback for other head dims and the comparison point.
 * Design (scalar fp32 FMA, no tensor cores: correctness and clarity first, see docs/CUDA.md):
 *   - grid (query tile, b*H + h); a block of ATT_WARPS = 8 warps owns the 8 consecutive query rows of
 *     its tile, one row per warp. Tiles are visited in reverse order (the last query tiles have the
 *     longest causal prefix, so they start first).
 *   - the block walks the key tiles of its causal prefix, ATT_BK = 32 keys each: the whole block copies
 *     the tile's K and V rows into shared memory as fp32 (rows padded to MAX_HD + 1 floats, so lane l
 *     reading row l column d hits bank (l + d) % 32: no conflicts), then each warp handles its row:
 *       lane l scores key k0 + l:  s_l = scale * q . k_l  (fp32, d in order; -inf beyond the diagonal)
 *       m' = max(m, warp max s),  alpha = exp(m - m'),  p_l = exp(s_l - m'),  l' = alpha l + warp sum p
 *       o_d <- alpha o_d + sum_j p_j v_j[d]   (lane owns d = lane, lane+32, ...; p_j by shuffle)
 *     the online softmax of the CPU kernel, one key tile at a time. A warp skips tiles that start past
 *     its row or end before its window (warp-uniform), but still meets the block's barriers.
 *   - sliding window (window > 0): keys of row t are mp_cu_attn_first_key(t, window) .. t; the block's
 *     walk starts at the tile holding its first row's first key; lanes left of the window score -inf
 *     like those past the diagonal. Window 0 is the causal kernel, operation for operation.
 *   - at the end o /= l, lse = m + log l. Every tile a warp processes holds key k0 <= t, so m is finite
 *     after the first tile and exp(m - m') never sees inf - inf.
 * Shared memory: 2 * 32 * 129 * 4 (K, V) + 8 * 128 * 4 (q rows) = 37 KB, static.
 * No reductions across blocks; every output element is one warp's fixed sequence: deterministic.
 */
#include "core/cuda/k_common.cuh"

#define ATT_WARPS 8                    /* query rows per block, one per warp */
#define ATT_BK 32                      /* keys per tile: one per lane */
#define MAX_HD MP_CUDA_ATTN_MAX_HD
#define HD_PER_LANE (MAX_HD / MP_WARP) /* output dims a lane owns */
#define PAD (MAX_HD + 1)               /* padded smem row */

static_assert(MAX_HD % MP_WARP == 0, "a lane owns MAX_HD / 32 output dims");

static __global__ void __launch_bounds__(ATT_WARPS * MP_WARP)
    attn_fwd_kernel(mp_bf16 *__restrict__ out, float *__restrict__ lse, const mp_bf16 *__restrict__ q,
                    const mp_bf16 *__restrict__ k, const mp_bf16 *__restrict__ v, int T, int H, int KV, int hd,
                    int ldq, int ldkv, int window, float scale) {
    __shared__ float Ks[ATT_BK][PAD], Vs[ATT_BK][PAD], Qs[ATT_WARPS][MAX_HD];
    const int lane = threadIdx.x % MP_WARP, w = threadIdx.x / MP_WARP;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int q0 = tile * ATT_WARPS, t = q0 + w;
    const bool row_ok = t < T;

    if (row_ok) {
        const mp_bf16 *qr = q + ((int64_t)b * T + t) * ldq + (int64_t)h * hd;
        for (int d = lane; d < hd; d += MP_WARP) Qs[w][d] = mp_bf2f(qr[d]);
    }
    __syncwarp();

    float o[HD_PER_LANE];
    for (int i = 0; i < HD_PER_LANE; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;

    const int last_key = (q0 + ATT_WARPS < T ? q0 + ATT_WARPS : T) - 1;   /* the block's causal horizon */
    const int lo = mp_cu_attn_first_key(t, window);                       /* the row's first key */
    for (int k0 = mp_cu_attn_first_key(q0, window) / ATT_BK * ATT_BK; k0 <= last_key; k0 += ATT_BK) {
        __syncthreads();   /* the previous tile is no longer read */
        mp_load_tile_pair<ATT_BK, PAD>(Ks, Vs, k, ldkv, v, ldkv, b, T, g, hd, k0);
        __syncthreads();
        if (!row_ok || k0 > t || k0 + ATT_BK <= lo) continue;   /* warp-uniform: no key of the row's */

        const int key = k0 + lane;
        float s = -INFINITY;
        if (key <= t && key >= lo) {
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += Qs[w][d] * Ks[lane][d];
            s = scale * dot;
        }
        const float m_new = fmaxf(m, mp_warp_max(s));   /* finite: the tile holds a key of [lo, t] */
        const float alpha = expf(m - m_new);            /* first tile: exp(-inf) = 0 */
        const float p = key <= t && key >= lo ? expf(s - m_new) : 0.0f;
        l = l * alpha + mp_warp_sum(p);
        m = m_new;
        const int nj = t - k0 + 1 < ATT_BK ? t - k0 + 1 : ATT_BK;   /* valid keys of this tile (warp-uniform) */
        for (int i = 0; i < HD_PER_LANE; i++) o[i] *= alpha;
        for (int j = 0; j < nj; j++) {
            const float pj = __shfl_sync(MP_FULL_MASK, p, j);
            for (int i = 0; i < HD_PER_LANE; i++) {
                const int d = lane + i * MP_WARP;
                if (d < hd) o[i] += pj * Vs[j][d];
            }
        }
    }

    if (row_ok) {
        const float inv = 1.0f / l;   /* l >= 1: the max term contributes exp(0) */
        mp_bf16 *orow = out + (((int64_t)b * T + t) * H + h) * hd;
        for (int i = 0; i < HD_PER_LANE; i++) {
            const int d = lane + i * MP_WARP;
            if (d < hd) orow[d] = mp_f2bf(o[i] * inv);
        }
        if (lane == 0) lse[((int64_t)b * H + h) * T + t] = m + logf(l);
    }
}

extern "C" void mp_cuda_attn_fwd(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v,
                                 int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window, cudaStream_t s) {
    assert(B >= 0 && T >= 0 && H > 0 && KV > 0 && H % KV == 0 && window >= 0);
    assert(hd >= 1 && hd <= MAX_HD && ldq >= H * hd && ldkv >= KV * hd);
    if (B == 0 || T == 0) return;
    assert(out && lse && q && k && v);
    if (mp_cuda_attn_mma_ok(out, q, k, v, hd, ldq, ldkv)) {   /* tensor cores (k_attn_mma.cu) */
        mp_cuda_attn_fwd_mma(out, lse, q, k, v, B, T, H, KV, hd, ldq, ldkv, window, s);
        return;
    }
    const int64_t tiles = (T + ATT_WARPS - 1) / ATT_WARPS;
    assert(mp_attn_grid_ok(tiles, H, B));
    const dim3 grid = mp_attn_grid(tiles, H, B);
    attn_fwd_kernel<<<grid, ATT_WARPS * MP_WARP, 0, s>>>(out, lse, q, k, v, T, H, KV, hd, ldq, ldkv, window,
                                                         1.0f / sqrtf((float)hd));
}
