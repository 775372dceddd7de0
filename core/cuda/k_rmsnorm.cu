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
 * __host__ __device__ so that tests/cuda/check_kernels_host.cu replays the launches lane by
 * lane (only the xor butterfly mp_warp_sum is emulated there, with the same pairings).
 *
 * Forward: one warp per row (8 rows per 256-thread block). Lane sums of x_i^2, the warp's butterfly
 * (fixed order), then every lane writes its y vectors. Rows are re-read from L1 for the second pass.
 *
 * Backward, two kernels, no atomics, the plan a function of N and D alone:
 *   1. chunk kernel: rows are cut into mp_row_chunks(N) chunks of consecutive rows (k_common.cuh: <= 512
 *      chunks of >= 32 rows); one block of W = rms_bwd_warps(D) warps per chunk (W = 12288 / D clamped
 *      to 1..8: the block's shared accumulators, W x D floats, fit the 48 KB a block gets without opting
 *      in).
 *      Warp w of the chunk takes rows n0 + w, n0 + w + W, ... in order. Per row: the lanes' dot sums of
 *      w dy x, the butterfly (no block barrier), then each lane updates dx for its vectors (16-byte
 *      read-modify-write) and adds dy_i x_i rstd into its warp's accumulator acc[w][i] in shared memory
 *      — a slot only this lane touches. acc is stored column-transposed within the vector
 *      (rms_acc_slot: element k of group j at k * D / VEC + j), so the 32 lanes of a warp hit 32
 *      distinct banks. After a barrier the block folds the warps in warp order, partial[c, i] =
 *      acc[0][i] + acc[1][i] + ... + acc[W-1][i] (rms_bwd_fold).
 *   2. column kernel (mp_chunk_sum_kernel): one thread per column i adds partial[0..nchunks-1, i] in
 *      chunk order and does the one dw[i] += total.
 * So every dw[i] is a fixed-order sum: within a warp its rows in order, then the warps in order, then
 * the chunks in order — bitwise repeatable run to run, whatever the alignment. D > 12288 (one
 * warp's accumulator would not fit): rmsnorm_bwd_wide_kernel, one 256-thread block per chunk walking
 * its rows in order with a block reduction per row (the previous design; thread t owns columns t,
 * t + 256, ... of partial[c, :]). Scratch: nchunks * D floats (e.g. 512 * 2048 * 4 B = 4 MB).
 *
 * Per-head RMSNorm (Qwen3's q_norm / k_norm: head_rmsnorm_fwd/bwd): the same kernels with the M = N H
 * (row, head) pairs m = n H + h as their rows of D = hd columns, each at x + n ldx + h hd (a column block
 * of the fused [q | k | v] rows), in place. Forward: one warp per pair; each lane first copies its
 * vectors of the input to x_save[m] (when given), then the sum of squares and the in-place store, every
 * element read by the lane that writes it. Backward: the chunk kernel over M pairs (warps take pairs
 * m0 + w, m0 + w + W, ...), dy read from dx and the input gradient written over it (=, not +=), dw
 * partials and the column pass exactly as above: the order is fixed by M and hd. hd <= 128 in the
 * families (Phi-3's 96 has no head norm) gives W = 8 warps; a head of 64 keeps 8 lanes of 32 busy in
 * 16-byte groups: the op is tiny next to the projections around it, so no lane packing.
 */
#include "core/cuda/k_common.cuh"

#define FWD_ROWS_PER_BLOCK 8
#define BWD_THREADS 256
#define BWD_MAX_WARPS 8
#define BWD_SMEM_FLOATS 12288   /* 48 KB of fp32 accumulators per block */
static_assert(MP_CUDA_HEAD_RMSNORM_MAX_HD == BWD_SMEM_FLOATS, "a head's backward is one warp's accumulator");

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

/* rstd of a row of D values whose squares sum to ss (the warp's butterfly). Host and device. */
__host__ __device__ static inline float rms_rstd(float ss, int D, float eps) {
    return 1.0f / sqrtf(ss / (float)D + eps);
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

/* Lane `lane` copies its vectors of src to dst (the bits; V16: one 16-byte copy per group of 8). */
template <int VEC, bool V16>
__host__ __device__ static inline void rms_lane_copy(mp_bf16 *dst, const mp_bf16 *src, int D, int lane) {
    static_assert(!V16 || VEC == 8, "16-byte groups are 8 bf16");
    for (int i = VEC * lane; i < D; i += VEC * MP_WARP) {
        if constexpr (V16) mp_copy16(dst + i, src + i);
        else
            for (int k = 0; k < VEC; k++) dst[i + k] = src[i + k];
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

/* Lane `lane` updates its vectors of one row: dx_i += r (w_i dy_i - x_i cc) (ADD; else dx_i = ..., and dxr may
 * be g: each element is read before the lane writes it), acc[slot(i)] += dy_i x_i r (acc: its warp's
 * accumulator, D floats). */
template <int VEC, bool V16, bool ADD = true>
__host__ __device__ static inline void rms_bwd_lane_update(mp_bf16 *dxr, float *acc, const mp_bf16 *g,
                                                           const mp_bf16 *xr, const mp_bf16 *w, float r, float cc,
                                                           int D, int lane) {
    MP_DEVICE_UNROLL4
    for (int i = VEC * lane; i < D; i += VEC * MP_WARP) {
        float xv[VEC], gv[VEC], wv[VEC], dv[VEC];
        rms_ld<VEC, V16>(xv, xr + i);
        rms_ld<VEC, V16>(gv, g + i);
        rms_ld<VEC, V16>(wv, w + i);
        if constexpr (ADD) rms_ld<VEC, V16>(dv, dxr + i);
        for (int k = 0; k < VEC; k++) {
            const float d = r * (wv[k] * gv[k] - xv[k] * cc);
            dv[k] = ADD ? dv[k] + d : d;
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

/* The first element of pair m's head: row m / H, head m % H of x (rows ldx apart). Host and device. */
__host__ __device__ static inline mp_bf16 *head_rms_row(mp_bf16 *x, int ldx, int64_t m, int H, int hd) {
    return x + (m / H) * ldx + (m % H) * hd;
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
    const float r = rms_rstd(ss, D, eps);
    if (lane == 0) rstd[n] = r;
    rms_fwd_lane_store<VEC, V16>(y + n * D, x + n * D, w, r, D, lane);
}

/* Backward, chunk blockIdx.x of rows_per_chunk rows, blockDim.x / 32 = rms_bwd_warps(D) warps, W x D
 * floats of dynamic shared memory: dx of its rows updated, partial[chunk, :] written (top comment).
 * HEAD (the per-head norm): row m is pair m's head at head_rms_row(dx, ldx, m, H, D), which holds dy and
 * receives the input gradient (=; dy unused); else row m of dense [M, D] tensors, dx += (ldx, H unused). */
template <int VEC, bool V16, bool HEAD>
static __global__ void __launch_bounds__(BWD_MAX_WARPS * MP_WARP)
    rmsnorm_bwd_chunk_kernel(mp_bf16 *__restrict__ dx, int ldx, float *__restrict__ partial,
                             const mp_bf16 *__restrict__ dy, const mp_bf16 *__restrict__ x,
                             const mp_bf16 *__restrict__ w, const float *__restrict__ rstd, int64_t M, int H, int D,
                             int rows_per_chunk) {
    extern __shared__ float acc[];   /* W x D: warp w's accumulator at acc + w * D */
    const int W = blockDim.x / MP_WARP, warp = threadIdx.x / MP_WARP, lane = threadIdx.x % MP_WARP;
    for (int p = threadIdx.x; p < W * D; p += blockDim.x) acc[p] = 0.0f;
    __syncthreads();
    const int64_t n0 = (int64_t)blockIdx.x * rows_per_chunk;
    const int64_t n1 = n0 + rows_per_chunk < M ? n0 + rows_per_chunk : M;
    for (int64_t n = n0 + warp; n < n1; n += W) {   /* warp-uniform: only shuffles inside */
        mp_bf16 *dxr = HEAD ? head_rms_row(dx, ldx, n, H, D) : dx + n * D;
        const mp_bf16 *xr = x + n * D, *g = HEAD ? dxr : dy + n * D;
        const float r = rstd[n];
        const float dot = mp_warp_sum(rms_bwd_lane_dot<VEC, V16>(g, xr, w, D, lane));
        rms_bwd_lane_update<VEC, V16, !HEAD>(dxr, acc + warp * D, g, xr, w, r, dot / (float)D * r * r, D, lane);
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

/* Per-head forward: warp w of block b normalises pair m = 8 b + w (row m / H, head m % H) in place, its
 * input copied to x_save + m hd first when x_save is not NULL; rstd[m] by lane 0. */
template <int VEC, bool V16>
static __global__ void __launch_bounds__(FWD_ROWS_PER_BLOCK * MP_WARP)
    head_rmsnorm_fwd_kernel(mp_bf16 *x, int ldx, mp_bf16 *__restrict__ x_save, float *__restrict__ rstd,
                            const mp_bf16 *__restrict__ w, int64_t M, int H, int hd, float eps) {
    const int lane = threadIdx.x % MP_WARP;
    const int64_t m = (int64_t)blockIdx.x * FWD_ROWS_PER_BLOCK + threadIdx.x / MP_WARP;
    if (m >= M) return;   /* warp-uniform: no block-level sync follows */
    mp_bf16 *xr = head_rms_row(x, ldx, m, H, hd);
    if (x_save) rms_lane_copy<VEC, V16>(x_save + m * hd, xr, hd, lane);
    const float ss = mp_warp_sum(rms_fwd_lane_ss<VEC, V16>(xr, hd, lane));
    const float r = rms_rstd(ss, hd, eps);
    if (lane == 0) rstd[m] = r;
    rms_fwd_lane_store<VEC, V16>(xr, xr, w, r, hd, lane);
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

extern "C" size_t mp_cuda_chunk_partial_floats(int64_t M, int D) {
    assert(M >= 0 && D >= 0);
    int rows, nchunks;
    mp_row_chunks(M, &rows, &nchunks);
    return (size_t)nchunks * (size_t)D;
}

extern "C" size_t mp_cuda_rmsnorm_bwd_scratch_floats(int N, int D) { return mp_cuda_chunk_partial_floats(N, D); }

extern "C" void mp_cuda_rmsnorm_bwd(mp_bf16 *dx, float *dw, float *partial, const mp_bf16 *dy, const mp_bf16 *x,
                                    const mp_bf16 *w, const float *rstd, int N, int D, cudaStream_t s) {
    assert(N >= 0 && D > 0);
    if (N == 0) return;
    assert(dx && dw && partial && dy && x && w && rstd);
    assert((const void *)dx != (const void *)dy && (const void *)dx != (const void *)x);
    int rows, nchunks;
    mp_row_chunks(N, &rows, &nchunks);
    assert(nchunks >= 1 && (int64_t)nchunks * rows >= N && (int64_t)(nchunks - 1) * rows < N);
    const int W = rms_bwd_warps(D);
    const size_t smem = (size_t)W * D * sizeof(float);   /* <= 48 KB: no opt-in needed */
    auto go = [&](auto kernel) {
        kernel<<<nchunks, W * MP_WARP, smem, s>>>(dx, D, partial, dy, x, w, rstd, N, 1, D, rows);   /* dense rows */
    };
    if (W == 0) rmsnorm_bwd_wide_kernel<<<nchunks, BWD_THREADS, 0, s>>>(dx, partial, dy, x, w, rstd, N, D, rows);
    else if (D % 8) go(rmsnorm_bwd_chunk_kernel<1, false, false>);
    else if (mp_aligned16(dx, dy, x, w)) go(rmsnorm_bwd_chunk_kernel<8, true, false>);
    else go(rmsnorm_bwd_chunk_kernel<8, false, false>);
    mp_chunk_sum_kernel<<<(D + 255) / 256, 256, 0, s>>>(dw, partial, nchunks, D);
}

/* The launch a per-head call takes: 16-byte groups of 8 when hd and ldx are multiples of 8 and every
 * pointer is 16-byte aligned (then every head's start is), 2-byte groups of 8 when only hd % 8 == 0, else
 * single columns; the arithmetic is the same in all three. */
static inline int head_rms_path(int hd, int ldx, const void *a, const void *b, const void *c) {
    if (hd % 8) return 2;
    return ldx % 8 == 0 && mp_aligned16(a, b, c) ? 0 : 1;
}

extern "C" void mp_cuda_head_rmsnorm_fwd(mp_bf16 *x, int ldx, mp_bf16 *x_save, float *rstd, const mp_bf16 *w, int N,
                                         int H, int hd, float eps, cudaStream_t s) {
    assert(N >= 0 && H > 0 && hd >= 1 && hd <= MP_CUDA_HEAD_RMSNORM_MAX_HD && ldx >= H * hd);
    if (N == 0) return;
    assert(x && rstd && w);
    const int64_t M = (int64_t)N * H, blocks = (M + FWD_ROWS_PER_BLOCK - 1) / FWD_ROWS_PER_BLOCK;
    assert(blocks <= 0x7fffffff);   /* grid x */
    const unsigned g = (unsigned)blocks, t = FWD_ROWS_PER_BLOCK * MP_WARP;
    switch (head_rms_path(hd, ldx, x, x_save, w)) {
    case 0: head_rmsnorm_fwd_kernel<8, true><<<g, t, 0, s>>>(x, ldx, x_save, rstd, w, M, H, hd, eps); break;
    case 1: head_rmsnorm_fwd_kernel<8, false><<<g, t, 0, s>>>(x, ldx, x_save, rstd, w, M, H, hd, eps); break;
    default: head_rmsnorm_fwd_kernel<1, false><<<g, t, 0, s>>>(x, ldx, x_save, rstd, w, M, H, hd, eps);
    }
}

extern "C" void mp_cuda_head_rmsnorm_bwd(mp_bf16 *dx, int ldx, float *dw, float *partial, const mp_bf16 *x_save,
                                         const float *rstd, const mp_bf16 *w, int N, int H, int hd, cudaStream_t s) {
    assert(N >= 0 && H > 0 && hd >= 1 && hd <= MP_CUDA_HEAD_RMSNORM_MAX_HD && ldx >= H * hd);
    if (N == 0) return;
    assert(dx && dw && partial && x_save && rstd && w && (const void *)dx != (const void *)x_save);
    const int64_t M = (int64_t)N * H;
    int rows, nchunks;
    mp_row_chunks(M, &rows, &nchunks);
    assert(nchunks >= 1 && (int64_t)nchunks * rows >= M && (int64_t)(nchunks - 1) * rows < M);
    const int W = rms_bwd_warps(hd);
    assert(W >= 1);   /* hd <= MP_CUDA_HEAD_RMSNORM_MAX_HD */
    const size_t smem = (size_t)W * hd * sizeof(float);   /* <= 48 KB: no opt-in needed */
    const unsigned t = W * MP_WARP;
    auto go = [&](auto kernel) {
        kernel<<<nchunks, t, smem, s>>>(dx, ldx, partial, NULL, x_save, w, rstd, M, H, hd, rows);   /* dy: in dx */
    };
    switch (head_rms_path(hd, ldx, dx, x_save, w)) {
    case 0: go(rmsnorm_bwd_chunk_kernel<8, true, true>); break;
    case 1: go(rmsnorm_bwd_chunk_kernel<8, false, true>); break;
    default: go(rmsnorm_bwd_chunk_kernel<1, false, true>);
    }
    mp_chunk_sum_kernel<<<(hd + 255) / 256, 256, 0, s>>>(dw, partial, nchunks, hd);
}
