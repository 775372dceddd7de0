/*
 * core/cuda/k_attn_mma.cu — causal GQA flash attention forward and backward on tensor cores (mma.sync m16n8k16, bf16
 * inputs, fp32 accumulate) for head dims 64 and 128 (contract: core/backend.h attn_fwd, as
 * attn_bwd, as k_attn_fwd.cu / k_attn_bwd.cu; their launchers dispatch here, see mp_cuda_attn_mma_ok).
 *
 * The tile logic lives in k_attn_mma.cuh, shared with the host replay (check_kernels_host.cu): this file
 * is only the block driver — grid (query tile of FA_BQ = 64 rows, b*H + h), query tiles scheduled
 * last-first (longest causal prefix first), FA_WARPS = 4 warps of 16 rows each; per key tile of its causal
 * prefix the block loads K / V^T into shared memory between two barriers and each warp runs
 * fa_fwd_step. No cross-block reduction, every sum in a fixed order: deterministic. The tile loads are
 * 16-byte and batched (k_attn_mma.cuh, fa_fetch_rows); at hd 64 the forward and the dQ pass prefetch the
 * next tile into registers while the warps compute (the kernels' comments say why not the others). Not
 * yet: cp.async double buffering, ldmatrix (docs/CUDA.md). The backward's D pass stays in k_attn_bwd.cu
 * (a row sum, memory-bound); its launcher calls mp_cuda_attn_bwd_mma for the dK/dV and dQ passes
 * (k_attn_mma.cuh's backward section).
 */
#include <stdlib.h>
#include <string.h>
#include "core/cuda/k_attn_mma.cuh"

/* Forward. hd 64 prefetches: the next key tile's loads are issued (into registers, fa_fetch_kv) before
 * the warps compute on the current one, and put into shared memory after the next barrier. hd 128 has no
 * registers for a tile in flight: it loads each tile in parts between the barriers (fa_load_kv). The
 * launch bound asks 3 blocks per SM for hd 64 (at most 170 registers) and 2 for hd 128 (at 3, ptxas
 * spills hoisted addresses that the tile loop reloads). nvcc 13.0, sm_90: 168 and 224 registers, no
 * spill. */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS, HD == 64 ? 3 : 2)
    attn_fwd_mma_kernel(mp_bf16 *__restrict__ out, float *__restrict__ lse, const mp_bf16 *__restrict__ q,
                        const mp_bf16 *__restrict__ k, const mp_bf16 *__restrict__ v, int T, int H, int KV,
                        int ldq, int ldkv, int window, float scale) {
    __shared__ fa_smem<HD> s;
    const int tid = threadIdx.x, lane = tid % MP_WARP, w = tid / MP_WARP;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int q0 = tile * FA_BQ, r0 = q0 + 16 * w;
    fa_fwd_state<HD, 1> st;
    fa_fwd_init<HD, 1>(st, q, b, T, ldq, h, r0, lane);
    /* key tiles aligned with query tiles: the last is the diagonal; the first holds the block's first
     * row's first key (0 without a window); a warp whose rows all start their windows past a tile skips
     * its step (warp-uniform, no barrier inside) */
    const int kstart = mp_cu_attn_first_key(q0, window) / FA_BK * FA_BK, wlo = mp_cu_attn_first_key(r0, window);
    if constexpr (HD == 64) {
        fa_kv_stage<HD> ld;   /* the next tile, in flight */
        fa_fetch_kv(ld, k, v, b, T, ldkv, g, kstart, tid);
        for (int k0 = kstart; k0 <= q0; k0 += FA_BK) {
            __syncthreads();   /* the previous tile is no longer read */
            fa_put_kv(s, ld, tid);
            __syncthreads();
            if (k0 + FA_BK <= q0) fa_fetch_kv(ld, k, v, b, T, ldkv, g, k0 + FA_BK, tid);
            if (k0 + FA_BK > wlo) fa_fwd_step<HD, 1>(st, s, k0, r0, scale, window, lane);
        }
    } else {
        for (int k0 = kstart; k0 <= q0; k0 += FA_BK) {
            __syncthreads();
            fa_load_kv<HD>(s, k, v, b, T, ldkv, g, k0, tid);
            __syncthreads();
            if (k0 + FA_BK > wlo) fa_fwd_step<HD, 1>(st, s, k0, r0, scale, window, lane);
        }
    }
    fa_fwd_finish<HD, 1>(st, out, lse, b, T, H, h, r0, lane);
}

/* dK/dV: grid (key tile of FA_BQ = 64, b*KV + g); each warp 16 keys; the group's query heads in order,
 * then query tiles of FB_BQ from the block's first key on, in order: one fixed sum per element. */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS)
    attn_bwd_dkdv_mma_kernel(mp_bf16 *__restrict__ dk, mp_bf16 *__restrict__ dv, const float *__restrict__ D,
                             const mp_bf16 *__restrict__ dout, const float *__restrict__ lse,
                             const mp_bf16 *__restrict__ q, const mp_bf16 *__restrict__ k,
                             const mp_bf16 *__restrict__ v, int T, int H, int KV, int ldq, int ldkv, int window,
                             float scale) {
    __shared__ fb_kv_smem<HD> s;
    const int tid = threadIdx.x, lane = tid % MP_WARP, w = tid / MP_WARP;
    const int b = blockIdx.z, g = blockIdx.y, rep = H / KV;
    const int j0 = blockIdx.x * FA_BQ, r0 = j0 + 16 * w;
    fb_kv_state<HD, 1> st;
    fb_kv_init<HD, 1>(st, k, v, b, T, ldkv, g, r0, lane);
    /* with a window the queries that see the block's keys end at its last key + window - 1 */
    const int64_t reach = window > 0 ? (int64_t)j0 + FA_BQ - 1 + window : T;
    const int tend = reach < T ? (int)reach : T;
    for (int h = g * rep; h < (g + 1) * rep; h++)
        for (int t0 = j0; t0 < tend; t0 += FB_BQ) {
            __syncthreads();
            fb_load_qtile<HD>(s, q, dout, lse, D, b, T, H, ldq, h, t0, tid);
            __syncthreads();
            /* warp-uniform: skip a tile whose first query's window starts past the warp's last key */
            if (mp_cu_attn_first_key(t0, window) <= r0 + 15) fb_dkdv_step<HD, 1>(st, s, t0, r0, T, scale, window, lane);
        }
    fb_store<HD, 1>(dk, st.dk, b, T, ldkv, g, r0, lane);
    fb_store<HD, 1>(dv, st.dv, b, T, ldkv, g, r0, lane);
}

/* dQ: grid (query tile of FA_BQ = 64, b*H + h), last tiles first; each warp 16 query rows; the key tiles
 * of FB_BK of the block's causal prefix in order. hd 64 prefetches the next key tile as the forward does
 * (3 blocks per SM by the launch bound: 168 registers, no spill); hd 128 loads between the barriers. (The
 * dK/dV kernel does not prefetch: at 3 blocks per SM ptxas spills in its tile loop.) */
template <int HD>
static __global__ void __launch_bounds__(FA_THREADS, HD == 64 ? 3 : 1)
    attn_bwd_dq_mma_kernel(mp_bf16 *__restrict__ dq, const float *__restrict__ D, const mp_bf16 *__restrict__ dout,
                           const float *__restrict__ lse, const mp_bf16 *__restrict__ q,
                           const mp_bf16 *__restrict__ k, const mp_bf16 *__restrict__ v, int T, int H, int KV,
                           int ldq, int ldkv, int window, float scale) {
    __shared__ fb_q_smem<HD> s;
    const int tid = threadIdx.x, lane = tid % MP_WARP, w = tid / MP_WARP;
    const int tile = gridDim.x - 1 - blockIdx.x;
    const int b = blockIdx.z, h = blockIdx.y, g = h / (H / KV);
    const int q0 = tile * FA_BQ, r0 = q0 + 16 * w, end = q0 + FA_BQ < T ? q0 + FA_BQ : T;
    fb_q_state<HD, 1> st;
    fb_q_init<HD, 1>(st, q, dout, lse, D, b, T, H, ldq, h, r0, lane);
    /* from the key tile holding the block's first row's first key (0 without a window); a warp skips a
     * tile left of all its rows' windows (warp-uniform) */
    const int kstart = mp_cu_attn_first_key(q0, window) / FB_BK * FB_BK, wlo = mp_cu_attn_first_key(r0, window);
    if constexpr (HD == 64) {
        fb_k_stage<HD> ld;   /* the next tile, in flight */
        fa_fetch_kv(ld, k, v, b, T, ldkv, g, kstart, tid);
        for (int k0 = kstart; k0 < end; k0 += FB_BK) {
            __syncthreads();
            fb_put_ktile(s, ld, tid);
            __syncthreads();
            if (k0 + FB_BK < end) fa_fetch_kv(ld, k, v, b, T, ldkv, g, k0 + FB_BK, tid);
            if (k0 + FB_BK > wlo) fb_dq_step<HD, 1>(st, s, k0, r0, T, scale, window, lane);
        }
    } else {
        for (int k0 = kstart; k0 < end; k0 += FB_BK) {
            __syncthreads();
            fb_load_ktile<HD>(s, k, v, b, T, ldkv, g, k0, tid);
            __syncthreads();
            if (k0 + FB_BK > wlo) fb_dq_step<HD, 1>(st, s, k0, r0, T, scale, window, lane);
        }
    }
    fb_store<HD, 1>(dq, st.dq, b, T, ldq, h, r0, lane);
}

/* 1 when the tensor-core kernels take this call: hd 64 or 128, every pointer 16-byte aligned and the row
 * strides ldq, ldkv multiples of 8 elements (the tile loaders' 16-byte accesses, fa_load_rows; heads are
 * hd * 2 = 128 or 256 bytes, so every head of every row is then aligned; cudaMalloc gives 256; the fused
 * [q | k | v] rows of layers/llama.c are (H + 2 KV) hd wide, k and v hd-multiples in), and ld < 2^23
 * (fa_ld_chunk's 32-bit offsets), unless the environment says MP_CUDA_ATTN=simt (the CUDA-core kernels,
 * k_attn_fwd.cu / k_attn_bwd.cu, kept as the fallback for other head dims and as the comparison point).
 * The default since their second H200 run (2026-12-04, docs/BENCH_GPU.md): mma_probe, check_kernels_device and the hd-64
 * parity passed on the device after the fix of the pair store (fa_st32), and the 1B step ran 5.2x faster
 * than on the CUDA-core kernels (MFU 33.4% against 6.4%). */
extern "C" int mp_cuda_attn_mma_ok(const void *a, const void *b, const void *c, const void *d, int hd, int ldq,
                                   int ldkv) {
    static int mma = -1;
    if (mma < 0) {
        const char *e = getenv("MP_CUDA_ATTN");
        mma = !(e && strcmp(e, "simt") == 0);
    }
    return mma && (hd == 64 || hd == 128) && mp_aligned16(a, b, c, d) && fa_strides_ok(ldq, ldkv);
}

extern "C" void mp_cuda_attn_fwd_mma(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v,
                                     int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window,
                                     cudaStream_t s) {
    assert(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0 && (hd == 64 || hd == 128) && window >= 0);
    assert(mp_aligned16(q, k, v) && fa_strides_ok(ldq, ldkv));   /* the tile loaders' 16-byte loads (_ok) */
    assert(ldq >= H * hd && ldkv >= KV * hd);
    const int64_t tiles = (T + FA_BQ - 1) / FA_BQ;
    assert(mp_attn_grid_ok(tiles, H, B));
    const dim3 grid = mp_attn_grid(tiles, H, B);
    const float scale = 1.0f / sqrtf((float)hd);
    if (hd == 64) attn_fwd_mma_kernel<64><<<grid, FA_THREADS, 0, s>>>(out, lse, q, k, v, T, H, KV, ldq, ldkv, window, scale);
    else attn_fwd_mma_kernel<128><<<grid, FA_THREADS, 0, s>>>(out, lse, q, k, v, T, H, KV, ldq, ldkv, window, scale);
}

extern "C" void mp_cuda_attn_bwd_mma(mp_bf16 *dq, mp_bf16 *dk, mp_bf16 *dv, const float *D, const mp_bf16 *dout,
                                     const float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v, int B,
                                     int T, int H, int KV, int hd, int ldq, int ldkv, int window, cudaStream_t s) {
    assert(B > 0 && T > 0 && H > 0 && KV > 0 && H % KV == 0 && (hd == 64 || hd == 128) && window >= 0);
    assert(mp_aligned16(q, k, v, dout) && fa_strides_ok(ldq, ldkv));   /* 16-byte tile loads (_ok) */
    assert(ldq >= H * hd && ldkv >= KV * hd);
    const int64_t tiles = (T + FA_BQ - 1) / FA_BQ;
    assert(mp_attn_grid_ok(tiles, H, B));   /* KV <= H */
    const float scale = 1.0f / sqrtf((float)hd);
    if (hd == 64) {
        attn_bwd_dkdv_mma_kernel<64><<<mp_attn_grid(tiles, KV, B), FA_THREADS, 0, s>>>(dk, dv, D, dout, lse, q, k, v, T, H, KV,
                                                                                ldq, ldkv, window, scale);
        attn_bwd_dq_mma_kernel<64><<<mp_attn_grid(tiles, H, B), FA_THREADS, 0, s>>>(dq, D, dout, lse, q, k, v, T, H, KV, ldq,
                                                                             ldkv, window, scale);
    } else {
        attn_bwd_dkdv_mma_kernel<128><<<mp_attn_grid(tiles, KV, B), FA_THREADS, 0, s>>>(dk, dv, D, dout, lse, q, k, v, T, H,
                                                                                 KV, ldq, ldkv, window, scale);
        attn_bwd_dq_mma_kernel<128><<<mp_attn_grid(tiles, H, B), FA_THREADS, 0, s>>>(dq, D, dout, lse, q, k, v, T, H, KV, ldq,
                                                                              ldkv, window, scale);
    }
}
