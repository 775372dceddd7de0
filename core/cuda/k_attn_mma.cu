/*
 * core/cuda/k_attn_mma.cu — causal GQA flash attention forward on tensor cores (mma.sync m16n8k16, bf16
 * inputs, fp32 accumulate) for head dims 64 and 128 (contract: core/backend.h attn_fwd, as
 * k_attn_fwd.cu; that file's launcher dispatches here, see mp_cuda_attn_fwd_mma_ok).
 *
 * The tile logic lives in k_attn_mma.cuh, shared with the host replay (check_kernels_host.cu): this file
 * is only the block driver — grid (query tile of FA_BQ = 64 rows, b*H + h), query tiles scheduled
 * last-first (longest causal prefix first), FA_WARPS = 4 warps of 16 rows each; per key tile of its causal
 * prefix the block loads K / V^T into shared memory between two barriers and each warp runs
 * fa_fwd_step. No cross-block reduction, every sum in a fixed order: deterministic.
 * Not yet done (docs/CUDA.md): ldmatrix, cp.async double buffering, 16-byte global loads, exp2 with a
 * folded log2(e) scale; the backward still runs on the SIMT kernels (k_attn_bwd.cu).
 */
#include <stdlib.h>
#include <string.h>
#include "core/cuda/k_attn_mma.cuh"

template <int HD>
static __global__ void __launch_bounds__(FA_THREADS)
    attn_fwd_mma_kernel(mp_bf16 *__restrict__ out, float *__restrict__ lse, const mp_bf16 *__restrict__ q,
                        const mp_bf16 *__restrict__ k, const mp_bf16 *__restrict__ v, int T, int H, int KV,
                        float scale) {
    __shared__ fa_smem<HD> s;
    const int tid = threadIdx.x, lane = tid % MP_WARP, w = tid / MP_WARP;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int bh = blockIdx.y, b = bh / H, h = bh % H, g = h / (H / KV);
    const int q0 = tile * FA_BQ, r0 = q0 + 16 * w;
    fa_fwd_state<HD, 1> st;
    fa_fwd_init<HD, 1>(st, q, b, T, H, h, r0, lane);
    for (int k0 = 0; k0 <= q0; k0 += FA_BK) {   /* key tiles aligned with query tiles: the last is the diagonal */
        __syncthreads();                          /* the previous tile is no longer read */
        fa_load_kv<HD>(s, k, v, b, T, KV, g, k0, tid);
        __syncthreads();
        fa_fwd_step<HD, 1>(st, s, k0, r0, scale, lane);
    }
    fa_fwd_finish<HD, 1>(st, out, lse, b, T, H, h, r0, lane);
}

/* 1 when the tensor-core forward takes this call: hd 64 or 128, every pointer 4-byte aligned (pair
 * loads), and MP_CUDA_ATTN is not "simt" (the CUDA-core kernels, kept for comparison). */
extern "C" int mp_cuda_attn_fwd_mma_ok(const void *out, const void *q, const void *k, const void *v, int hd) {
    static int simt = -1;
    if (simt < 0) {
        const char *e = getenv("MP_CUDA_ATTN");
        simt = e && strcmp(e, "simt") == 0;
    }
    return !simt && (hd == 64 || hd == 128) && (((uintptr_t)out | (uintptr_t)q | (uintptr_t)k | (uintptr_t)v) & 3) == 0;
}

extern "C" void mp_cuda_attn_fwd_mma(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v,
                                     int B, int T, int H, int KV, int hd, cudaStream_t s) {
    assert(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0 && (hd == 64 || hd == 128));
    assert((int64_t)B * H <= 65535);   /* grid.y */
    const dim3 grid((unsigned)((T + FA_BQ - 1) / FA_BQ), (unsigned)(B * H));
    const float scale = 1.0f / sqrtf((float)hd);
    if (hd == 64) attn_fwd_mma_kernel<64><<<grid, FA_THREADS, 0, s>>>(out, lse, q, k, v, T, H, KV, scale);
    else attn_fwd_mma_kernel<128><<<grid, FA_THREADS, 0, s>>>(out, lse, q, k, v, T, H, KV, scale);
}
