/*
 * core/cuda/k_reduce.cu — reductions into a device scalar: the sum of squares of a gradient buffer
 * (fp32 or bf16) and the sum of the per-token losses, each ADDED into one double in device memory;
 * and the gradient-clip factor computed on the device from the global sum of squares.
 *
 * Design (two kernels, no atomics):
 *   1. partial_kernel: the plan is a function of n alone (reduce_plan): nb = clamp(ceil(n / 8192), 1,
 *      MP_CUDA_REDUCE_MAX_BLOCKS) blocks, block b owning the contiguous chunk [b*chunk, min(n, (b+1)*chunk))
 *      with chunk = ceil(n / nb) rounded up to a multiple of 8. The chunk is cut into groups of
 *      G = 16 / sizeof(element) consecutive elements (4 fp32, 8 bf16); thread t sums groups t, t + 256,
 *      ..., each group's elements in order, in double (each product x*x formed in double, as the CPU
 *      backend does) (reduce_thread). A group is one 16-byte load when x is 16-byte aligned (then every
 *      group is: chunks start at multiples of 8) and the group is whole, else one load per element: the
 *      same values in the same order, so alignment never changes a bit. The block then adds its 256
 *      thread sums in a fixed tree (k_common.cuh) and writes partials[b].
 *   2. final_kernel: one block of 1024 threads; thread t holds partials[t] (0 beyond nb), a fixed tree
 *      adds them, and thread 0 does the single read-modify-write *acc += total.
 * Every addition's operands and order are fixed by n, so the result is bitwise repeatable run to run
 * (it is NOT bitwise equal to the CPU backend's, whose blocking differs; both are double sums, so they
 * agree to ~1e-15 relative). The two kernels are ordered by the stream, so partials is reused safely by
 * later calls on the same stream. check_kernels_host replays both kernels thread by thread.
 *
 * The bias gradient (bias_bwd, Qwen2's q/k/v biases: db[j] += sum_n dx[n, j] over a column block of
 * wider rows) is a column sum, made deterministic as RMSNorm's dw is (k_rmsnorm.cu): the N rows are cut
 * into mp_row_chunks(N) chunks of consecutive rows (k_common.cuh); thread (chunk c, group g) sums the
 * rows of its chunk in increasing n, from 0, in fp32, for its G columns (G = 8 with one 16-byte load per
 * row when cols and ldx are multiples of 8 and dx is 16-byte aligned, else G = 1: each column's sum is
 * the same sequence of fp32 additions either way) into partial[c, j]; mp_chunk_sum_kernel then adds
 * the chunks in order and does the one db[j] += total. A warp reads 32 consecutive groups of a row (512
 * contiguous bytes at G = 8), so the loads coalesce; there is no cross-thread reduction at all.
 */
#include "core/cuda/k_common.cuh"

#define RED_THREADS 256
#define RED_MIN_PER_BLOCK 8192
#define FINAL_THREADS 1024
#define RED_ALIGN 8   /* chunk lengths are multiples of this (whole groups of 4 fp32 / 8 bf16) */

/* The blocks and chunk length of a reduction over n > 0 elements (host and device: check_kernels_host tests it). */
__host__ __device__ static inline void reduce_plan(int64_t n, int *nblocks, int64_t *chunk) {
    int64_t nb = (n + RED_MIN_PER_BLOCK - 1) / RED_MIN_PER_BLOCK;
    if (nb < 1) nb = 1;
    if (nb > MP_CUDA_REDUCE_MAX_BLOCKS) nb = MP_CUDA_REDUCE_MAX_BLOCKS;
    *nblocks = (int)nb;
    *chunk = ((n + nb - 1) / nb + RED_ALIGN - 1) / RED_ALIGN * RED_ALIGN;
}

/* Thread t's double sum (of squares when SQUARE) over its groups of [start, end): groups of G elements
 * starting at start + G t, start + G (t + RED_THREADS), ..., elements in order; V16: whole groups as one
 * 16-byte load (x 16-byte aligned, start a multiple of G). Host and device: check_kernels_host replays it. */
template <bool SQUARE, bool V16, typename T>
__host__ __device__ static inline double reduce_thread(const T *x, int64_t start, int64_t end, int t) {
    constexpr int G = 16 / sizeof(T);
    double acc = 0.0;
    MP_DEVICE_UNROLL4
    for (int64_t i = start + (int64_t)G * t; i < end; i += (int64_t)G * RED_THREADS) {
        float f[G];
        const int m = end - i < G ? (int)(end - i) : G;
        if (V16 && m == G) mp_ld_vec<G>(f, x + i);
        else
            for (int k = 0; k < m; k++) mp_ld_vec<1>(f + k, x + i + k);
        for (int k = 0; k < m; k++) {
            const double xi = (double)f[k];
            acc += SQUARE ? xi * xi : xi;
        }
    }
    return acc;
}

template <bool SQUARE, bool V16, typename T>
static __global__ void __launch_bounds__(RED_THREADS)
    partial_kernel(double *__restrict__ partials, const T *__restrict__ x, int64_t n, int64_t chunk) {
    __shared__ double buf[MP_WARP];
    const int64_t start = (int64_t)blockIdx.x * chunk;
    const int64_t end = start + chunk < n ? start + chunk : n;
    const double acc = mp_block_sum_d(reduce_thread<SQUARE, V16>(x, start, end, threadIdx.x), buf);
    if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

static __global__ void __launch_bounds__(FINAL_THREADS)
    final_kernel(double *__restrict__ acc, const double *__restrict__ partials, int nblocks) {
    __shared__ double buf[MP_WARP];
    double v = (int)threadIdx.x < nblocks ? partials[threadIdx.x] : 0.0;
    v = mp_block_sum_d(v, buf);
    if (threadIdx.x == 0) *acc += v;
}

template <bool SQUARE, typename T>
static void reduce_acc(double *acc, double *partials, const T *x, int64_t n, cudaStream_t s) {
    assert(acc && partials && n >= 0);
    assert((void *)acc != (void *)partials);
    if (n == 0) return;   /* adding 0.0 would not change *acc (except -0.0); skip the launches */
    assert(x);
    int nb;
    int64_t chunk;
    reduce_plan(n, &nb, &chunk);
    assert(nb >= 1 && nb <= FINAL_THREADS && (int64_t)nb * chunk >= n);
    if (mp_aligned16(x))
        partial_kernel<SQUARE, true, T><<<nb, RED_THREADS, 0, s>>>(partials, x, n, chunk);
    else
        partial_kernel<SQUARE, false, T><<<nb, RED_THREADS, 0, s>>>(partials, x, n, chunk);
    final_kernel<<<1, FINAL_THREADS, 0, s>>>(acc, partials, nb);
}

extern "C" void mp_cuda_sumsq_acc_f32(double *acc, double *partials, const float *x, int64_t n, cudaStream_t s) {
    reduce_acc<true, float>(acc, partials, x, n, s);
}

extern "C" void mp_cuda_sumsq_acc_bf16(double *acc, double *partials, const mp_bf16 *x, int64_t n,
                                       cudaStream_t s) {
    reduce_acc<true, mp_bf16>(acc, partials, x, n, s);
}

extern "C" void mp_cuda_sum_acc_f32(double *acc, double *partials, const float *x, int64_t n, cudaStream_t s) {
    reduce_acc<false, float>(acc, partials, x, n, s);
}

/* The clip rule of layers/llama_train.c, in double as there. */
__host__ __device__ static inline float clip_factor(double sumsq, double grad_clip) {
    const double norm = sqrt(sumsq);
    if (!isfinite(norm)) return 0.0f;
    return (float)(grad_clip > 0 && norm > grad_clip ? grad_clip / (norm + 1e-6) : 1.0);
}

static __global__ void clip_kernel(float *scale, const double *sumsq, double grad_clip) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *scale = clip_factor(*sumsq, grad_clip);
}

extern "C" void mp_cuda_clip_scale(float *scale, const double *sumsq, double grad_clip, cudaStream_t s) {
    assert(scale && sumsq);
    clip_kernel<<<1, 1, 0, s>>>(scale, sumsq, grad_clip);
}

/* ---- the bias gradient (see the top of the file) ---- */

#define BIAS_THREADS 256

/* partial[j .. j+G) of one chunk: the sums of rows n0 .. n1-1 of columns j .. j+G of dx, each column's
 * rows in increasing n from 0 (G = 8: one 16-byte load per row, dx + j 16-byte aligned). Host and device:
 * check_kernels_host replays it. */
template <int G>
__host__ __device__ static inline void bias_bwd_group(float *part, const mp_bf16 *dx, int64_t ldx, int64_t n0,
                                                      int64_t n1, int64_t j) {
    float acc[G];
    for (int k = 0; k < G; k++) acc[k] = 0.0f;
    MP_DEVICE_UNROLL4
    for (int64_t n = n0; n < n1; n++) {
        float v[G];
        mp_ld_vec<G>(v, dx + n * ldx + j);
        for (int k = 0; k < G; k++) acc[k] += v[k];
    }
    for (int k = 0; k < G; k++) part[j + k] = acc[k];
}

/* Chunk blockIdx.y, column groups blockIdx.x * 256 + threadIdx.x: partial[chunk, :] of the bias gradient. */
template <int G>
static __global__ void __launch_bounds__(BIAS_THREADS)
    bias_bwd_chunk_kernel(float *__restrict__ partial, const mp_bf16 *__restrict__ dx, int ldx, int N, int cols,
                          int rows_per_chunk) {
    const int64_t j = ((int64_t)blockIdx.x * BIAS_THREADS + threadIdx.x) * G;
    if (j >= cols) return;
    const int64_t n0 = (int64_t)blockIdx.y * rows_per_chunk;
    const int64_t n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
    bias_bwd_group<G>(partial + (int64_t)blockIdx.y * cols, dx, ldx, n0, n1, j);
}

extern "C" void mp_cuda_bias_bwd(float *db, float *partial, const mp_bf16 *dx, int ldx, int N, int cols,
                                 cudaStream_t s) {
    assert(N >= 0 && cols >= 0 && ldx >= cols);
    if (N == 0 || cols == 0) return;
    assert(db && partial && dx);
    int rows, nchunks;
    mp_row_chunks(N, &rows, &nchunks);
    assert(nchunks >= 1 && nchunks <= 65535 && (int64_t)nchunks * rows >= N);   /* grid y */
    if (cols % 8 == 0 && ldx % 8 == 0 && mp_aligned16(dx)) {
        const dim3 grid((unsigned)((cols / 8 + BIAS_THREADS - 1) / BIAS_THREADS), (unsigned)nchunks);
        bias_bwd_chunk_kernel<8><<<grid, BIAS_THREADS, 0, s>>>(partial, dx, ldx, N, cols, rows);
    } else {
        const dim3 grid((unsigned)((cols + BIAS_THREADS - 1) / BIAS_THREADS), (unsigned)nchunks);
        bias_bwd_chunk_kernel<1><<<grid, BIAS_THREADS, 0, s>>>(partial, dx, ldx, N, cols, rows);
    }
    mp_chunk_sum_kernel<<<(cols + 255) / 256, 256, 0, s>>>(db, partial, nchunks, cols);
}
