/*
 * core/cuda/k_rmsnorm.cu — RMSNorm forward (saving rstd) and backward (dx accumulated into the residual
 * gradient, dweight reduced deterministically).
 *
 *   y = x * rstd * w,  rstd = 1 / sqrt(mean_i x_i^2 + eps)
 *   dx_i += rstd * (w_i dy_i - x_i rstd^2 mean_j(w_j dy_j x_j)),   dw_i += sum_n dy_i x_i rstd
 * (the same expressions as core/backend_cpu.c). x, y, dy, dx, w are bf16; rstd, dw and all sums fp32.
 *
 * Lanes and columns: lane l of a row's warp owns the groups of VEC consecutive columns starting at
 * i = VEC l, VEC (l + 32), ..., VEC = 8 when D % 8 == 0, else 1; its sums run over those columns in
 * increasing order. The order is a function of D alone: alignment changes only the access width — one
 * 16-byte access per group (V16) when every pointer is 16-byte aligned (then every row is, D % 8 == 0),
 * else 2-byte accesses (rms_ld, rms_st) — never a bit of a result. The lane functions below are
 * __host__ __device__ so that core/cuda/hostcheck/check_kernels_host.cu replays the launches lane by
 * lane (only the xor butterfly mp_warp_sum is emulated there, with the same pairings).
 *
 * Forward: one warp per row (8 rows per 256-thread block). Lane sums of x_i^2, the warp's butterfly
 * (fixed order), then every lane writes its y vectors. Rows are re-read from L1 for the second pass.
 *
 * Backward, two kernels, no atomics, the plan a function of N and D alone:
 *   1. chunk kernel: rows are cut into rmsnorm_plan(N) chunks of consecutive rows (<= 512 chunks of
 *      >= 32 rows); one block of W = rms_bwd_warps(D) warps per chunk (W = 12288 / D clamped to 1..8:
 *      the block's shared accumulators, W x D floats, fit the 48 KB a block gets without opting in).
 *      Warp w of the chunk takes rows n0 + w, n0 + w + W, ... in order. Per row: the lanes' dot sums of
 *      w dy x, the butterfly (no block barrier), then each lane updates dx for its vectors (16-byte
 *      read-modify-write) and adds dy_i x_i rstd into its warp's accumulator acc[w][i] in shared memory
 *      — a slot only this lane touches. acc is stored column-transposed within the vector
 *      (rms_acc_slot: element k of group j at k * D / VEC + j), so the 32 lanes of a warp hit 32
 *      distinct banks. After a barrier the block folds the warps in warp order, partial[c, i] =
 *      acc[0][i] + acc[1][i] + ... + acc[W-1][i] (rms_bwd_fold).
 *   2. column kernel: one thread per column i adds partial[0..nchunks-1, i] in chunk order and does the
 *      one dw[i] += total.
 * So every dw[i] is a fixed-order sum: within a warp its rows in order, then the warps in order, then
 * the chunks in order — bitwise repeatable run to run, whatever the alignment. D > 12288 (one
 * warp's accumulator would not fit): rmsnorm_bwd_wide_kernel, one 256-thread block per chunk walking
 * its rows in order with a block reduction per row (the previous design; thread t owns columns t,
 * t + 256, ... of partial[c, :]). Scratch: nchunks * D floats (e.g. 512 * 2048 * 4 B = 4 MB).
 */
#include "core/cuda/k_common.cuh"

#define FWD_ROWS_PER_BLOCK 8
#define BWD_THREADS 256
#define BWD_MIN_ROWS 32
#define BWD_MAX_CHUNKS 512
#define BWD_MAX_WARPS 8
#define BWD_SMEM_FLOATS 12288   /* 48 KB of fp32 accumulators per block */

/* Rows per chunk and chunk count of the backward's dw reduction (host and device: hostcheck tests it). */
__host__ __device__ static inline void rmsnorm_plan(int N, int *rows_per_chunk, int *nchunks) {
    int rows = (N + BWD_MAX_CHUNKS - 1) / BWD_MAX_CHUNKS;
    if (rows < BWD_MIN_ROWS) rows = BWD_MIN_ROWS;
    *rows_per_chunk = rows;
    *nchunks = N > 0 ? (N + rows - 1) / rows : 0;
}

/* Warps per chunk block of the backward for row length D (0: D too wide, the wide kernel runs). */
__host__ __device__ static inline int rms_bwd_warps(int D) {
    if (D > BWD_SMEM_FLOATS) return 0;
    const int w = BWD_SMEM_FLOATS / D;
    return w > BWD_MAX_WARPS ? BWD_MAX_WARPS : w;
}

/* Shared-memory slot of column i in a warp's accumulator (VEC-element vectors stored transposed). */
template <int VEC>
__host__ __device__ static inline int rms_acc_slot(int i, int D) {
    return (i % VEC) * (D / VEC) + i / VEC;
}

/* G consecutive elements at p as fp32 / stored from fp32: one 16-byte access per 8 when V16 (p 16-byte
 * aligned), else one 2-byte access each. The values and their order are the same either way. */
template <int G, bool V16>
__host__ __device__ static inline void rms_ld(float *f, const mp_bf16 *p) {
    if constexpr (V16) mp_ld_vec<G>(f, p);
    else
        for (int k = 0; k < G; k++) mp_ld_vec<1>(f + k, p + k);
}
template <int G, bool V16>
__host__ __device__ static inline void rms_st(mp_bf16 *p, const float *f) {
    if constexpr (V16) mp_st_vec<G>(p, f);
    else
        for (int k = 0; k < G; k++) mp_st_vec<1>(p + k, f + k);
}

/* Lane `lane`'s sum of x_i^2 over its vectors of row xr (forward). */
template <int VEC, bool V16>
__host__ __device__ static inline float rms_fwd_lane_ss(const mp_bf16 *xr, int D, int lane) {
    float ss = 0.0f;
    MP_DEVICE_UNROLL4
    for (int i = VEC * lane; i < D; i += VEC * MP_WARP) {
        float xv[VEC];
        rms_ld<VEC, V16>(xv, xr + i);
        for (int k = 0; k < VEC; k++) ss += xv[k] * xv[k];
    }
    return ss;
}

/* Lane `lane` writes its vectors of y = x * r * w (forward). */
template <int VEC, bool V16>
__host__ __device__ static inline void rms_fwd_lane_store(mp_bf16 *yr, const mp_bf16 *xr, const mp_bf16 *w, float r,
                                                          int D, int lane) {
    for (int i = VEC * lane; i < D; i += VEC * MP_WARP) {
        float xv[VEC], wv[VEC], yv[VEC];
        rms_ld<VEC, V16>(xv, xr + i);
        rms_ld<VEC, V16>(wv, w + i);
        for (int k = 0; k < VEC; k++) yv[k] = xv[k] * r * wv[k];
        rms_st<VEC, V16>(yr + i, yv);
    }
}

/* Lane `lane`'s sum of w_i dy_i x_i over its vectors of one row (backward). */
template <int VEC, bool V16>
__host__ __device__ static inline float rms_bwd_lane_dot(const mp_bf16 *g, const mp_bf16 *xr, const mp_bf16 *w, int D,
                                                         int lane) {
    float dot = 0.0f;
    MP_DEVICE_UNROLL4
    for (int i = VEC * lane; i < D; i += VEC * MP_WARP) {
        float xv[VEC], gv[VEC], wv[VEC];
        rms_ld<VEC, V16>(xv, xr + i);
        rms_ld<VEC, V16>(gv, g + i);
        rms_ld<VEC, V16>(wv, w + i);
        for (int k = 0; k < VEC; k++) dot += wv[k] * gv[k] * xv[k];
    }
    return dot;
}

/* Lane `lane` updates its vectors of one row: dx_i += r (w_i dy_i - x_i cc), acc[slot(i)] += dy_i x_i r
 * (acc: its warp's accumulator, D floats). */
template <int VEC, bool V16>
__host__ __device__ static inline void rms_bwd_lane_update(mp_bf16 *dxr, float *acc, const mp_bf16 *g,
                                                           const mp_bf16 *xr, const mp_bf16 *w, float r, float cc,
                                                           int D, int lane) {
    MP_DEVICE_UNROLL4
    for (int i = VEC * lane; i < D; i += VEC * MP_WARP) {
        float xv[VEC], gv[VEC], wv[VEC], dv[VEC];
        rms_ld<VEC, V16>(xv, xr + i);
        rms_ld<VEC, V16>(gv, g + i);
        rms_ld<VEC, V16>(wv, w + i);
        rms_ld<VEC, V16>(dv, dxr + i);
        for (int k = 0; k < VEC; k++) {
            dv[k] = dv[k] + r * (wv[k] * gv[k] - xv[k] * cc);
            float *a = acc + rms_acc_slot<VEC>(i + k, D);
            *a = *a + gv[k] * xv[k] * r;
        }
        rms_st<VEC, V16>(dxr + i, dv);
    }
}

/* Thread tid of nthreads folds the W warp accumulators (acc: W x D slots) into part (D floats, natural
 * column order) in warp order; it takes slots p = tid, tid + nthreads, ... (bank-conflict-free reads). */
template <int VEC>
__host__ __device__ static inline void rms_bwd_fold(float *part, const float *acc, int W, int D, int tid, int nthreads) {
    const int per = D / VEC;
    for (int p = tid; p < D; p += nthreads) {
        float s = acc[p];
        for (int wi = 1; wi < W; wi++) s += acc[(int64_t)wi * D + p];
        part[(p % per) * VEC + p / per] = s;
    }
}

/* Forward: warp w of block b normalises row 8 b + w (y, and rstd by lane 0). */
template <int VEC, bool V16>
static __global__ void __launch_bounds__(FWD_ROWS_PER_BLOCK * MP_WARP)
    rmsnorm_fwd_kernel(mp_bf16 *__restrict__ y, float *__restrict__ rstd, const mp_bf16 *__restrict__ x,
                       const mp_bf16 *__restrict__ w, int N, int D, float eps) {
    const int lane = threadIdx.x % MP_WARP;
    const int64_t n = (int64_t)blockIdx.x * FWD_ROWS_PER_BLOCK + threadIdx.x / MP_WARP;
    if (n >= N) return;   /* warp-uniform: no block-level sync follows */
    const float ss = mp_warp_sum(rms_fwd_lane_ss<VEC, V16>(x + n * D, D, lane));
    const float r = 1.0f / sqrtf(ss / (float)D + eps);
    if (lane == 0) rstd[n] = r;
    rms_fwd_lane_store<VEC, V16>(y + n * D, x + n * D, w, r, D, lane);
}

/* Backward, chunk blockIdx.x of rows_per_chunk rows, blockDim.x / 32 = rms_bwd_warps(D) warps, W x D
 * floats of dynamic shared memory: dx of its rows updated, partial[chunk, :] written (top comment). */
template <int VEC, bool V16>
static __global__ void __launch_bounds__(BWD_MAX_WARPS * MP_WARP)
    rmsnorm_bwd_chunk_kernel(mp_bf16 *__restrict__ dx, float *__restrict__ partial, const mp_bf16 *__restrict__ dy,
                             const mp_bf16 *__restrict__ x, const mp_bf16 *__restrict__ w,
                             const float *__restrict__ rstd, int N, int D, int rows_per_chunk) {
    extern __shared__ float acc[];   /* W x D: warp w's accumulator at acc + w * D */
    const int W = blockDim.x / MP_WARP, warp = threadIdx.x / MP_WARP, lane = threadIdx.x % MP_WARP;
    for (int p = threadIdx.x; p < W * D; p += blockDim.x) acc[p] = 0.0f;
    __syncthreads();
    const int64_t n0 = (int64_t)blockIdx.x * rows_per_chunk;
    const int64_t n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
    for (int64_t n = n0 + warp; n < n1; n += W) {   /* warp-uniform: only shuffles inside */
        const mp_bf16 *xr = x + n * D, *g = dy + n * D;
        const float r = rstd[n];
        const float dot = mp_warp_sum(rms_bwd_lane_dot<VEC, V16>(g, xr, w, D, lane));
        rms_bwd_lane_update<VEC, V16>(dx + n * D, acc + warp * D, g, xr, w, r, dot / (float)D * r * r, D, lane);
    }
    __syncthreads();
    rms_bwd_fold<VEC>(partial + (int64_t)blockIdx.x * D, acc, W, D, threadIdx.x, blockDim.x);
}

/* The wide rows' chunk kernel (D > BWD_SMEM_FLOATS): one 256-thread block per chunk, rows in order. */
static __global__ void __launch_bounds__(BWD_THREADS)
    rmsnorm_bwd_wide_kernel(mp_bf16 *__restrict__ dx, float *__restrict__ partial, const mp_bf16 *__restrict__ dy,
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
    const int threads = FWD_ROWS_PER_BLOCK * MP_WARP;
    if (D % 8)
        rmsnorm_fwd_kernel<1, false><<<blocks, threads, 0, s>>>(y, rstd, x, w, N, D, eps);
    else if (mp_aligned16(y, x, w))
        rmsnorm_fwd_kernel<8, true><<<blocks, threads, 0, s>>>(y, rstd, x, w, N, D, eps);
    else
        rmsnorm_fwd_kernel<8, false><<<blocks, threads, 0, s>>>(y, rstd, x, w, N, D, eps);
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
    const int W = rms_bwd_warps(D);
    const size_t smem = (size_t)W * D * sizeof(float);   /* <= 48 KB: no opt-in needed */
    if (W == 0)
        rmsnorm_bwd_wide_kernel<<<nchunks, BWD_THREADS, 0, s>>>(dx, partial, dy, x, w, rstd, N, D, rows);
    else if (D % 8)
        rmsnorm_bwd_chunk_kernel<1, false><<<nchunks, W * MP_WARP, smem, s>>>(dx, partial, dy, x, w, rstd, N, D, rows);
    else if (mp_aligned16(dx, dy, x, w))
        rmsnorm_bwd_chunk_kernel<8, true><<<nchunks, W * MP_WARP, smem, s>>>(dx, partial, dy, x, w, rstd, N, D, rows);
    else
        rmsnorm_bwd_chunk_kernel<8, false><<<nchunks, W * MP_WARP, smem, s>>>(dx, partial, dy, x, w, rstd, N, D, rows);
    rmsnorm_bwd_column_kernel<<<(D + 255) / 256, 256, 0, s>>>(dw, partial, nchunks, D);
}
