/*
 * core/cuda/k_common.cuh — device helpers shared by the kernel files core/cuda/k_*.cu (private).
 *
 * Reductions here are fixed trees: a warp reduces with the xor butterfly (__shfl_xor_sync), in which
 * every level adds a pair of values that both partner lanes hold, so every lane ends with the same
 * bits, in an order fixed by the lane numbering; a block reduces its warps' results in warp order.
 * Nothing depends on scheduling, so the results are bitwise repeatable.
 */
#ifndef MP_K_COMMON_CUH
#define MP_K_COMMON_CUH

#include <assert.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <string.h>
#include "core/cuda/kernels_cuda.h"

#define MP_WARP 32
#define MP_FULL_MASK 0xffffffffu
/* The largest grid.x a launcher uses for grid-stride loops (far below the 2^31 - 1 limit; enough
 * blocks to fill any current GPU several times over). */
#define MP_MAX_GRID_X 65535

/* The attention grids: x the query (or key) tiles, y the head (or kv head), z the batch row; the kernels
 * read b = blockIdx.z, h = blockIdx.y. grid.y and grid.z are each limited to 65535, so heads and batch are
 * bounded apart: B H folded into grid.y alone aborted a batch of 2048 x 32 heads mid-run.
 * mp_attn_grid_ok: the launchers' precondition (check_kernels_host checks both, and that the grid covers every
 * (b, h) once). */
#define MP_MAX_GRID_YZ 65535
__host__ __device__ static inline dim3 mp_attn_grid(int64_t tiles, int heads, int B) {
    return dim3((unsigned)tiles, (unsigned)heads, (unsigned)B);
}
__host__ __device__ static inline bool mp_attn_grid_ok(int64_t tiles, int heads, int B) {
    return tiles >= 1 && tiles <= 0x7fffffff && heads >= 1 && heads <= MP_MAX_GRID_YZ && B >= 1 && B <= MP_MAX_GRID_YZ;
}

/* Before a loop whose trip count is known only at run time: on the device, unroll it 4 times (so one
 * thread keeps several iterations' loads in flight); nothing on the host (the host replays). */
#ifdef __CUDA_ARCH__
#define MP_DEVICE_UNROLL4 _Pragma("unroll 4")
#else
#define MP_DEVICE_UNROLL4
#endif

/* A product and a sum rounded on their own: never contracted into an FMA with a neighbour (on the device,
 * __fmul_rn / __fadd_rn; the host replay's compiler targets x86-64 without FMA). An expression evaluated
 * in two instantiations (e.g. a 16-byte and a one-element path) is contracted by nvcc as each context
 * allows, so the two can differ in the last bit: the H200 showed it for AdamW. Where the bits must not
 * depend on the path, spell the rounding out with these and fmaf. */
__host__ __device__ static inline float mp_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
__host__ __device__ static inline float mp_add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}

/* Blocks for a grid-stride loop over n items with `threads` per block: at least 1, at most MP_MAX_GRID_X. */
static inline unsigned mp_grid_for(int64_t n, int threads) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > MP_MAX_GRID_X) b = MP_MAX_GRID_X;
    return (unsigned)b;
}

/* Copies 16 bytes: one 128-bit access on the device (both pointers must be 16-byte aligned there), a
 * memcpy on the host (the host checks replay the vectorised kernels through the same code). */
__host__ __device__ static inline void mp_copy16(void *dst, const void *src) {
#ifdef __CUDA_ARCH__
    *(uint4 *)dst = *(const uint4 *)src;
#else
    memcpy(dst, src, 16);
#endif
}

/* 1 when every pointer given is 16-byte aligned (NULLs count as aligned). */
static inline int mp_aligned16(const void *a, const void *b = NULL, const void *c = NULL, const void *d = NULL,
                               const void *e = NULL) {
    return (((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e) & 15) == 0;
}

/* fp32 views of either storage type, on host and device (the host checks replay kernels through them). */
__host__ __device__ static inline float mp_to_f32(float x) { return x; }
__host__ __device__ static inline float mp_to_f32(mp_bf16 x) { return __bfloat162float(x); }
__host__ __device__ static inline void mp_from_f32(float *d, float x) { *d = x; }
__host__ __device__ static inline void mp_from_f32(mp_bf16 *d, float x) { *d = __float2bfloat16_rn(x); }

/* VEC elements at p as fp32 (VEC > 1: 16-byte accesses, p 16-byte aligned), and the store back. */
template <int VEC, typename T>
__host__ __device__ static inline void mp_ld_vec(float *f, const T *p) {
    if constexpr (VEC > 1) {
        static_assert(VEC * sizeof(T) % 16 == 0, "whole 16-byte accesses");
        T t[VEC];
        for (int k = 0; k < (int)(VEC * sizeof(T) / 16); k++) mp_copy16((char *)t + 16 * k, (const char *)p + 16 * k);
        for (int k = 0; k < VEC; k++) f[k] = mp_to_f32(t[k]);
    } else {
        f[0] = mp_to_f32(p[0]);
    }
}
template <int VEC, typename T>
__host__ __device__ static inline void mp_st_vec(T *p, const float *f) {
    if constexpr (VEC > 1) {
        static_assert(VEC * sizeof(T) % 16 == 0, "whole 16-byte accesses");
        T t[VEC];
        for (int k = 0; k < VEC; k++) mp_from_f32(&t[k], f[k]);
        for (int k = 0; k < (int)(VEC * sizeof(T) / 16); k++) mp_copy16((char *)p + 16 * k, (const char *)t + 16 * k);
    } else {
        mp_from_f32(p, f[0]);
    }
}

/* The work of thread id of a grid of `stride` threads over n elements in chunks of VEC: chunks
 * j = id, id + stride, ... (f.template at<VEC>(j * VEC)), then, when VEC > 1, the tail element
 * n / VEC * VEC + id if it exists (f.template at<1>). Every element once; the host checks call it for
 * every id to replay a launch. */
template <int VEC, typename F>
__host__ __device__ static inline void mp_vec_run(int64_t n, int64_t id, int64_t stride, const F &f) {
    const int64_t nv = n / VEC;
    for (int64_t j = id; j < nv; j += stride) f.template at<VEC>(j * VEC);
    if constexpr (VEC > 1) {
        if (id < n - nv * VEC) f.template at<1>(nv * VEC + id);
    }
}

#ifdef __CUDACC__
template <int VEC, typename F>
static __global__ void mp_vec_kernel(int64_t n, F f) {
    mp_vec_run<VEC>(n, (int64_t)blockIdx.x * blockDim.x + threadIdx.x, (int64_t)gridDim.x * blockDim.x, f);
}
/* Launches f over n elements: chunks of VEC (16-byte accesses) when aligned16, else one element each. */
template <int VEC, typename F>
static inline void mp_vec_launch(int64_t n, int aligned16, const F &f, cudaStream_t s) {
    if (n <= 0) return;
    if (aligned16)
        mp_vec_kernel<VEC><<<mp_grid_for(n / VEC + 1, 256), 256, 0, s>>>(n, f);
    else
        mp_vec_kernel<1><<<mp_grid_for(n, 256), 256, 0, s>>>(n, f);
}
#endif

/* The row chunks of the deterministic column reductions (RMSNorm's dw, the per-head RMSNorm's dw, the bias
 * gradient db): M rows cut into *nchunks chunks of *rows_per_chunk consecutive rows (<= MP_CHUNK_MAX chunks
 * of >= MP_CHUNK_MIN_ROWS rows), a function of M alone (host and device: check_kernels_host tests it). Each chunk's
 * block sums its rows into partial[c, :] in a fixed order, then mp_chunk_sum_kernel adds the chunks in
 * order: no atomics, and the order of every sum is fixed by M and the row length. */
#define MP_CHUNK_MIN_ROWS 32
#define MP_CHUNK_MAX 512
__host__ __device__ static inline void mp_row_chunks(int64_t M, int *rows_per_chunk, int *nchunks) {
    int64_t rows = (M + MP_CHUNK_MAX - 1) / MP_CHUNK_MAX;
    if (rows < MP_CHUNK_MIN_ROWS) rows = MP_CHUNK_MIN_ROWS;
    *rows_per_chunk = (int)rows;
    *nchunks = M > 0 ? (int)((M + rows - 1) / rows) : 0;
}

#ifdef __CUDACC__
/* The second pass of those reductions: thread i adds partial[0..nchunks-1, i] in chunk order (from 0) and
 * does the one out[i] += total (one thread per column: one writer, one order). */
static __global__ void mp_chunk_sum_kernel(float *__restrict__ out, const float *__restrict__ partial, int nchunks,
                                           int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float s = 0.0f;
    for (int c = 0; c < nchunks; c++) s += partial[(int64_t)c * D + i];
    out[i] += s;
}
#endif

__device__ __forceinline__ float mp_bf2f(mp_bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ mp_bf16 mp_f2bf(float x) { return __float2bfloat16_rn(x); }
/* Loads of either storage type as fp32 (overloads, so templates read both). */
__device__ __forceinline__ float mp_ld(const float *p) { return *p; }
__device__ __forceinline__ float mp_ld(const mp_bf16 *p) { return __bfloat162float(*p); }
__device__ __forceinline__ void mp_st(float *p, float x) { *p = x; }
__device__ __forceinline__ void mp_st(mp_bf16 *p, float x) { *p = __float2bfloat16_rn(x); }

__device__ __forceinline__ float mp_warp_sum(float x) {
    for (int o = MP_WARP / 2; o > 0; o /= 2) x += __shfl_xor_sync(MP_FULL_MASK, x, o);
    return x;
}
__device__ __forceinline__ double mp_warp_sum_d(double x) {
    for (int o = MP_WARP / 2; o > 0; o /= 2) x += __shfl_xor_sync(MP_FULL_MASK, x, o);
    return x;
}
__device__ __forceinline__ float mp_warp_max(float x) {
    for (int o = MP_WARP / 2; o > 0; o /= 2) x = fmaxf(x, __shfl_xor_sync(MP_FULL_MASK, x, o));
    return x;
}

/* Block-wide sum / max for blockDim.x a multiple of 32 and <= 1024; every thread must call it, and
 * every thread gets the result. buf: __shared__ scratch of 32 elements, reused only after the call
 * returns (the trailing __syncthreads makes back-to-back calls safe). */
template <typename T, T (*WARP_OP)(T)>
__device__ __forceinline__ T mp_block_reduce(T x, T *buf, T identity) {
    const int lane = threadIdx.x % MP_WARP, warp = threadIdx.x / MP_WARP, nwarps = blockDim.x / MP_WARP;
    x = WARP_OP(x);
    if (lane == 0) buf[warp] = x;
    __syncthreads();
    T y = lane < nwarps ? buf[lane] : identity;
    y = WARP_OP(y);   /* every warp reduces the same 32 values in the same order */
    __syncthreads();
    return y;
}
__device__ __forceinline__ float mp_block_sum(float x, float *buf) {
    return mp_block_reduce<float, mp_warp_sum>(x, buf, 0.0f);
}
__device__ __forceinline__ double mp_block_sum_d(double x, double *buf) {
    return mp_block_reduce<double, mp_warp_sum_d>(x, buf, 0.0);
}
__device__ __forceinline__ float mp_block_max(float x, float *buf) {
    return mp_block_reduce<float, mp_warp_max>(x, buf, -INFINITY);
}

/* Flash attention's streamed tiles (k_attn_fwd.cu, k_attn_bwd.cu): rows t0 .. t0 + ROWS - 1 of head
 * `head` of two [B, T, heads, hd] bf16 tensors x and y (batch b) whose token rows are ldx and ldy elements
 * apart (a head's columns may be a block of wider rows: the fused [q | k | v]), widened into the fp32
 * shared tiles xs and ys (row stride LD); rows at or past T are zeros (a tile past the sequence's end is
 * masked later). Called by the whole block, between the __syncthreads that guard the tiles. */
template <int ROWS, int LD>
__device__ __forceinline__ void mp_load_tile_pair(float (*xs)[LD], float (*ys)[LD], const mp_bf16 *__restrict__ x,
                                                  int ldx, const mp_bf16 *__restrict__ y, int ldy, int b, int T,
                                                  int head, int hd, int t0) {
    for (int idx = threadIdx.x; idx < ROWS * hd; idx += blockDim.x) {
        const int r = idx / hd, d = idx % hd, t = t0 + r;
        const int64_t row = (int64_t)b * T + t, col = (int64_t)head * hd + d;
        xs[r][d] = t < T ? mp_bf2f(x[row * ldx + col]) : 0.0f;
        ys[r][d] = t < T ? mp_bf2f(y[row * ldy + col]) : 0.0f;
    }
}

/* The sliding-window rule of core/backend.h attn_fwd (the CPU kernels' mp_attn_first_key,
 * core/kernels_cpu.h, the same expression): the first key position query position t sees under a window of
 * `window` keys (t - window < j <= t); 0 when window is 0 (full causal) or reaches back past position 0.
 * Every attention kernel and its host replay masks and skips by it. */
__host__ __device__ static inline int mp_cu_attn_first_key(int t, int window) {
    return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}

#endif
