/*
 * core/cuda/k_rmsnorm.cu — RMSNorm forward (saving rstd) and backward (dx accumulated into the residual
 * gradient, dweight reduced deterministically).
 *
 *   y = x * rstd * w,  rstd = 1 / sqrt(mean_i x_i^2 + eps)
 *   dx_i += rstd * (w_i dy_i - x_i rstd^2 mean_j(w_j dy_j x_j)),   dw_i += sum_n dy_i x_i rstd
 * (the same expressions as core/backend_cpu.c). x, y, dy, dx, w are bf16; rstd, dw and all sums fp32.
 *
 * Forward: one warp per row (8 rows per 256-thread block). Lane l sums x_i^2 over i = l, l+32, ...;
 * the warp adds the 32 lane sums with the xor butterfly (fixed order), then every lane writes its
 * strided y elements. D up to any size (a lane loops); rows re-read from cache for the second pass.
 *
 * Backward, two kernels, no atomics:
 *   1. chunk kernel: rows are cut into rmsnorm_plan(N) chunks of consecutive rows (a function of N
 *      alone); one 256-thread block per chunk walks its rows in order. Per row: the block sums
 *      w dy x (thread strides, then the fixed block tree), every thread updates dx for its strided
 *      columns i, and adds dy_i x_i rstd into partial[chunk, i] — a location only this thread touches,
 *      rows in order, so each partial is a fixed-order sum.
 *   2. column kernel: one thread per column i adds partial[0..nchunks-1, i] in chunk order and does the
 *      one dw[i] += total.
 * So dw is a fixed function of the inputs, bitwise repeatable; partial costs nchunks * D floats of
 * scratch (nchunks <= 256; e.g. 256 * 8192 * 4 B = 8.4 MB at D = 8192).
 */
#include "core/cuda/k_common.cuh"

#define FWD_ROWS_PER_BLOCK 8
#define BWD_THREADS 256
#define BWD_MIN_ROWS 32
#define BWD_MAX_CHUNKS 256

/* Rows per chunk and chunk count of the backward's dw reduction (host and device: hostcheck tests it). */
__host__ __device__ static inline void rmsnorm_plan(int N, int *rows_per_chunk, int *nchunks) {
    int rows = (N + BWD_MAX_CHUNKS - 1) / BWD_MAX_CHUNKS;
    if (rows < BWD_MIN_ROWS) rows = BWD_MIN_ROWS;
    *rows_per_chunk = rows;
    *nchunks = N > 0 ? (N + rows - 1) / rows : 0;
}

static __global__ void __launch_bounds__(FWD_ROWS_PER_BLOCK * MP_WARP)
    rmsnorm_fwd_kernel(mp_bf16 *__restrict__ y, float *__restrict__ rstd, const mp_bf16 *__restrict__ x,
                       const mp_bf16 *__restrict__ w, int N, int D, float eps) {
    const int lane = threadIdx.x % MP_WARP;
    const int64_t n = (int64_t)blockIdx.x * FWD_ROWS_PER_BLOCK + threadIdx.x / MP_WARP;
    if (n >= N) return;   /* warp-uniform: no block-level sync follows */
    const mp_bf16 *xr = x + n * D;
    mp_bf16 *yr = y + n * D;
    float ss = 0.0f;
    for (int i = lane; i < D; i += MP_WARP) {
        const float xi = mp_bf2f(xr[i]);
        ss += xi * xi;
    }
    ss = mp_warp_sum(ss);
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[n] = r;
    for (int i = lane; i < D; i += MP_WARP) yr[i] = mp_f2bf(mp_bf2f(xr[i]) * r * mp_bf2f(w[i]));
}

static __global__ void __launch_bounds__(BWD_THREADS)
    rmsnorm_bwd_chunk_kernel(mp_bf16 *__restrict__ dx, float *__restrict__ partial, const mp_bf16 *__restrict__ dy,
                             const mp_bf16 *__restrict__ x, const mp_bf16 *__restrict__ w,
                             const float *__restrict__ rstd, int N, int D, int rows_per_chunk) {
    __shared__ float buf[MP_WARP];
    const int c = blockIdx.x;
    const int64_t n0 = (int64_t)c * rows_per_chunk;
    const int64_t n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
    float *part = partial + (int64_t)c * D;
    for (int64_t n = n0; n < n1; n++) {   /* block-uniform loop: the block reduction below is safe */
        const mp_bf16 *xr = x + n * D, *g = dy + n * D;
        mp_bf16 *dxr = dx + n * D;
        const float r = rstd[n];
        float dot = 0.0f;
        for (int i = threadIdx.x; i < D; i += BWD_THREADS) dot += mp_bf2f(w[i]) * mp_bf2f(g[i]) * mp_bf2f(xr[i]);
        dot = mp_block_sum(dot, buf);
        const float cc = dot / (float)D * r * r;
        for (int i = threadIdx.x; i < D; i += BWD_THREADS) {
            const float xi = mp_bf2f(xr[i]), gi = mp_bf2f(g[i]);
            dxr[i] = mp_f2bf(mp_bf2f(dxr[i]) + r * (mp_bf2f(w[i]) * gi - xi * cc));
            const float dwi = gi * xi * r;
            part[i] = n == n0 ? dwi : part[i] + dwi;
        }
    }
}

static __global__ void rmsnorm_bwd_column_kernel(float *__restrict__ dw, const float *__restrict__ partial,
                                                 int nchunks, int D) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= D) return;
    float s = 0.0f;
    for (int c = 0; c < nchunks; c++) s += partial[(int64_t)c * D + i];
    dw[i] += s;
}

extern "C" void mp_cuda_rmsnorm_fwd(mp_bf16 *y, float *rstd, const mp_bf16 *x, const mp_bf16 *w, int N, int D,
                                    float eps, cudaStream_t s) {
    assert(N >= 0 && D > 0);
    if (N == 0) return;
    assert(y && rstd && x && w);
    const int blocks = (N + FWD_ROWS_PER_BLOCK - 1) / FWD_ROWS_PER_BLOCK;   /* <= 2^28: within grid.x */
    rmsnorm_fwd_kernel<<<blocks, FWD_ROWS_PER_BLOCK * MP_WARP, 0, s>>>(y, rstd, x, w, N, D, eps);
}

extern "C" size_t mp_cuda_rmsnorm_bwd_scratch_floats(int N, int D) {
    assert(N >= 0 && D >= 0);
    int rows, nchunks;
    rmsnorm_plan(N, &rows, &nchunks);
    return (size_t)nchunks * (size_t)D;
}

extern "C" void mp_cuda_rmsnorm_bwd(mp_bf16 *dx, float *dw, float *partial, const mp_bf16 *dy, const mp_bf16 *x,
                                    const mp_bf16 *w, const float *rstd, int N, int D, cudaStream_t s) {
    assert(N >= 0 && D > 0);
    if (N == 0) return;
    assert(dx && dw && partial && dy && x && w && rstd);
    assert((const void *)dx != (const void *)dy && (const void *)dx != (const void *)x);
    int rows, nchunks;
    rmsnorm_plan(N, &rows, &nchunks);
    assert(nchunks >= 1 && (int64_t)nchunks * rows >= N && (int64_t)(nchunks - 1) * rows < N);
    rmsnorm_bwd_chunk_kernel<<<nchunks, BWD_THREADS, 0, s>>>(dx, partial, dy, x, w, rstd, N, D, rows);
    rmsnorm_bwd_column_kernel<<<(D + 255) / 256, 256, 0, s>>>(dw, partial, nchunks, D);
}
