/*
 * core/cuda/k_attn_kv.cu — causal grouped-query attention of new queries against a KV cache (contract:
 * core/backend.h attn_fwd_kv; CPU twin: core/kernels_cpu_attn_fwd.c's p0 > 0 case). Forward only: it
 * serves generation, where a step adds one query row (or a prompt's rows) to a cached sequence.
 *
 * Layout: q [B,Tq,H,hd] at positions pos0 .. pos0+Tq-1; k, v [B,Tc,KV,hd] bf16 (cache capacity Tc)
 * holding positions 0 .. pos0+Tq-1; out [B,Tq,H,hd] bf16; lse [B,H,Tq] fp32.
 *
 * Design (decode-shaped: a few query rows against a long cache; scalar fp32 FMA, simple first):
 *   - grid (Tq, B*H), one warp per (query row, head). The warp keeps the query row in shared memory as
 *     fp32 and walks the keys 32 at a time, lane l scoring key k0 + l (s = scale * q . k, d in order,
 *     -inf past the row's position), then the online softmax of k_attn_fwd.cu:
 *       m' = max(m, warp max s), alpha = exp(m - m'), p = exp(s - m'), l' = alpha l + warp sum p,
 *       o_d <- alpha o_d + sum_j p_j v_j[d]   (lane owns d = lane, lane + 32, ...; p_j by shuffle)
 *   - at the end o /= l, lse = m + log l. Keys are read from global memory (the cache rows of one kv
 *     head are reused by its H/KV query heads through L2); no shared tiles, no barriers across warps.
 * Sliding window (window > 0): row t's keys are mp_cu_attn_first_key(t, window) .. t, the walk starting
 * at the 32-key chunk that holds the first (cache rows before it are never read).
 * A prefill from position 0 of one sequence is the whole-sequence forward (backend_cuda.c calls
 * attn_fwd for it). Every output element is one warp's fixed sequence: deterministic.
 */
#include "core/cuda/k_common.cuh"

#define KV_MAX_HD MP_CUDA_ATTN_MAX_HD
#define KV_HD_PER_LANE (KV_MAX_HD / MP_WARP)

static __global__ void __launch_bounds__(MP_WARP)
    attn_kv_kernel(mp_bf16 *__restrict__ out, float *__restrict__ lse, const mp_bf16 *__restrict__ q,
                   const mp_bf16 *__restrict__ k, const mp_bf16 *__restrict__ v, int Tq, int pos0, int Tc, int H,
                   int KV, int hd, int window, float scale) {
    __shared__ float Qs[KV_MAX_HD];
    const int lane = threadIdx.x, r = blockIdx.x, b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int t = pos0 + r, lo = mp_cu_attn_first_key(t, window);   /* this row's position: keys lo .. t */
    const mp_bf16 *qr = q + (((int64_t)b * Tq + r) * H + h) * hd;
    for (int d = lane; d < hd; d += MP_WARP) Qs[d] = mp_bf2f(qr[d]);
    __syncwarp();
    float o[KV_HD_PER_LANE];
    for (int i = 0; i < KV_HD_PER_LANE; i++) o[i] = 0.0f;
    float m = -INFINITY, l = 0.0f;
    const int64_t kstride = (int64_t)KV * hd;
    const mp_bf16 *kb = k + ((int64_t)b * Tc * KV + g) * hd, *vb = v + ((int64_t)b * Tc * KV + g) * hd;
    for (int k0 = lo / MP_WARP * MP_WARP; k0 <= t; k0 += MP_WARP) {
        const int key = k0 + lane;
        float s = -INFINITY;
        if (key <= t && key >= lo) {
            const mp_bf16 *kr = kb + key * kstride;
            float dot = 0.0f;
            for (int d = 0; d < hd; d++) dot += Qs[d] * mp_bf2f(kr[d]);
            s = scale * dot;
        }
        const float m_new = fmaxf(m, mp_warp_max(s));   /* finite: the chunk holds a key of [lo, t] */
        const float alpha = expf(m - m_new);            /* first chunk: exp(-inf) = 0 */
        const float p = key <= t && key >= lo ? expf(s - m_new) : 0.0f;
        l = l * alpha + mp_warp_sum(p);
        m = m_new;
        const int nj = t - k0 + 1 < MP_WARP ? t - k0 + 1 : MP_WARP;
        for (int i = 0; i < KV_HD_PER_LANE; i++) o[i] *= alpha;
        for (int j = 0; j < nj; j++) {
            const float pj = __shfl_sync(MP_FULL_MASK, p, j);
            const mp_bf16 *vr = vb + (k0 + j) * kstride;
            for (int i = 0; i < KV_HD_PER_LANE; i++) {
                const int d = lane + i * MP_WARP;
                if (d < hd) o[i] += pj * mp_bf2f(vr[d]);
            }
        }
    }
    const float inv = 1.0f / l;   /* l >= 1: the max term contributes exp(0) */
    mp_bf16 *orow = out + (((int64_t)b * Tq + r) * H + h) * hd;
    for (int i = 0; i < KV_HD_PER_LANE; i++) {
        const int d = lane + i * MP_WARP;
        if (d < hd) orow[d] = mp_f2bf(o[i] * inv);
    }
    if (lane == 0) lse[((int64_t)b * H + h) * Tq + r] = m + logf(l);
}

extern "C" void mp_cuda_attn_fwd_kv(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v,
                                    int B, int Tq, int pos0, int Tc, int H, int KV, int hd, int window,
                                    cudaStream_t s) {
    assert(B >= 0 && Tq >= 0 && pos0 >= 0 && pos0 + Tq <= Tc && H > 0 && KV > 0 && H % KV == 0 && window >= 0);
    assert(hd >= 1 && hd <= KV_MAX_HD);
    if (B == 0 || Tq == 0) return;
    assert(out && lse && q && k && v);
    assert(mp_attn_grid_ok(Tq, H, B));
    const dim3 grid = mp_attn_grid(Tq, H, B);
    attn_kv_kernel<<<grid, MP_WARP, 0, s>>>(out, lse, q, k, v, Tq, pos0, Tc, H, KV, hd, window,
                                            1.0f / sqrtf((float)hd));
}
