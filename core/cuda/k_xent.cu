/*
 * core/cuda/k_xent.cu — vocab-parallel cross-entropy over the local logits [N, v_local], without ever
 * materialising normalised probabilities: per row the local max, the sum of exps against the (global)
 * max, the target logit when the target is in this rank's vocab slice, the loss, and in place the
 * gradient dloss * (softmax - onehot).
 *
 * Pipeline (core/backend.h's five steps; the caller all-reduces over the tp group in between):
 *   rowmax  -> all-reduce MAX -> sumexp -> all-reduce SUM -> (tlogit -> all-reduce SUM) -> loss, bwd.
 * With tp = 1 the all-reduces are no-ops, and the table's optional xent_fwd replaces the first three steps
 * by one kernel (xent_fwd_kernel: one read of the logits instead of three): each thread keeps an
 * online (max, sum of exps against it) pair over the same column groups, rescaling its sum when its max
 * rises, and the block combines the pairs in the same fixed tree. Its sumexp rounds differently from
 * sumexp_kernel's (not bitwise equal to the three-kernel path; within a few ulp), but is as repeatable.
 * With tp > 1 each rank runs xent_fwd on its shard (its own max), the caller all-reduces the max, and
 * rescale_kernel takes each shard's sum to the global max (sum * exp(local - global)) before the SUM:
 * one read of the logits at any tp, the same collectives.
 * Columns j >= v_valid are vocab padding: never read as logits, and written as 0 by the backward.
 *
 * Design: the row kernels (rowmax, sumexp, bwd) run one 256-thread block per row; thread t visits the
 * groups of G columns starting at G t, G (t + 256), ... (G = 16 bytes of logits when v_local is a
 * multiple of that, else 1; one 16-byte access per group when the logits are aligned too),
 * keeps an fp32 running max/sum, and the block combines its threads in the fixed tree of k_common.cuh,
 * so each row's statistic is a fixed-order sum, a function of v_local and v_valid (never of the
 * alignment, which picks only the access width): bitwise repeatable.
 * exp is expf (full precision). The logits are bf16 (the lm_head GEMM's output; the backward writes the
 * bf16 dlogits over them, which the dX/dW GEMMs read) or fp32 (templates; both exported). The per-row
 * scalars (rowmax, sumexp, tlogit, losses) are fp32. target and loss are one thread per row. The
 * backward (elementwise in a row: nothing summed) moves 16 bytes per access when the rows allow it;
 * the same expression per column, so both widths agree bit for bit.
 */
#include <type_traits>
#include "core/cuda/k_common.cuh"

#define XENT_THREADS 256

/* The loss of one row from its global statistics, as core/backend_cpu.c forms it (log in double). */
__host__ __device__ static inline float xent_loss_row(float rowmax, float sumexp, float tlogit) {
    return (float)(log((double)sumexp) + (double)rowmax - (double)tlogit);
}

/* The group of G columns of row l starting at j0 into f, as fp32; returns how many of them are valid
 * (min(G, v_valid - j0)). V16: one 16-byte load (l 16-byte aligned; the group lies in the row, v_local being
 * a multiple of G); else one load per valid column. The values do not depend on V16. */
template <int G, bool V16, typename T>
__host__ __device__ static inline int xent_group_load(float *f, const T *l, int j0, int v_valid) {
    const int m = v_valid - j0 < G ? v_valid - j0 : G;
    if (V16) mp_ld_vec<G>(f, l + j0);
    else
        for (int k = 0; k < m; k++) mp_ld_vec<1>(f + k, l + j0 + k);
    return m;
}

/* Thread t's share of one row l for rowmax (MAX: fmaxf from -inf) or sumexp (exp(l_j - mx) summed from
 * 0): the groups of G consecutive columns starting at G t, G (t + 256), ..., columns j < v_valid in
 * order, loaded by xent_group_load. The values and their order do not depend on V16. */
template <bool MAX, int G, bool V16, typename T>
__host__ __device__ static inline float xent_row_thread(const T *l, int v_valid, float mx, int t) {
    float acc = MAX ? -INFINITY : 0.0f;
    MP_DEVICE_UNROLL4
    for (int j0 = G * t; j0 < v_valid; j0 += G * XENT_THREADS) {
        float f[G];
        const int m = xent_group_load<G, V16>(f, l, j0, v_valid);
        for (int k = 0; k < m; k++) acc = MAX ? fmaxf(acc, f[k]) : acc + expf(f[k] - mx);
    }
    return acc;
}

/* The one-pass forward's running statistic of a set of columns: their max m and the sum s of exp(l_j - m).
 * No column, or no finite one: (-inf, 0). */
struct xent_ms {
    float m, s;
};

/* a and b as one set: the larger max, each sum rescaled to it. Symmetric to the bit (the products and the
 * sum rounded on their own: no FMA makes the operand order matter), so both partners of a butterfly get the
 * same bits. Two empty sets give the empty set (never exp(-inf - -inf) = NaN). */
__host__ __device__ static inline xent_ms xent_ms_combine(xent_ms a, xent_ms b) {
    const float m = fmaxf(a.m, b.m);
    if (m == -INFINITY) return {m, 0.0f};
    return {m, mp_add_rn(mp_mul_rn(a.s, expf(a.m - m)), mp_mul_rn(b.s, expf(b.m - m)))};
}

/* Thread t's (max, sum) over one row l for the one-pass forward: the groups of xent_row_thread in the same
 * order (so a function of v_valid and G only); per group its max first, the running sum rescaled by
 * exp(old max - new max) when the max rises (as core/backend_cpu.c's cpu_xent_fwd per chunk), then the
 * group's exps against the running max. */
template <int G, bool V16, typename T>
__host__ __device__ static inline xent_ms xent_fwd_thread(const T *l, int v_valid, int t) {
    xent_ms a = {-INFINITY, 0.0f};
    MP_DEVICE_UNROLL4
    for (int j0 = G * t; j0 < v_valid; j0 += G * XENT_THREADS) {
        float f[G];
        const int m = xent_group_load<G, V16>(f, l, j0, v_valid);
        float gm = -INFINITY;
        for (int k = 0; k < m; k++) gm = fmaxf(gm, f[k]);
        if (gm > a.m) {
            a.s = a.m == -INFINITY ? 0.0f : mp_mul_rn(a.s, expf(a.m - gm));
            a.m = gm;
        }
        if (a.m == -INFINITY) continue;   /* no finite logit yet */
        for (int k = 0; k < m; k++) a.s += expf(f[k] - a.m);
    }
    return a;
}

template <int G, bool V16, typename T>
static __global__ void __launch_bounds__(XENT_THREADS)
    rowmax_kernel(float *__restrict__ rowmax, const T *__restrict__ logits, int v_local, int v_valid) {
    __shared__ float buf[MP_WARP];
    const T *l = logits + (int64_t)blockIdx.x * v_local;
    const float mx = mp_block_max(xent_row_thread<true, G, V16>(l, v_valid, 0.0f, threadIdx.x), buf);
    if (threadIdx.x == 0) rowmax[blockIdx.x] = mx;
}

template <int G, bool V16, typename T>
static __global__ void __launch_bounds__(XENT_THREADS)
    sumexp_kernel(float *__restrict__ sumexp, const T *__restrict__ logits, const float *__restrict__ rowmax,
                  int v_local, int v_valid) {
    __shared__ float buf[MP_WARP];
    const T *l = logits + (int64_t)blockIdx.x * v_local;
    const float mx = rowmax[blockIdx.x];
    if (mx == -INFINITY) {   /* block-uniform: no finite logit anywhere in the row */
        if (threadIdx.x == 0) sumexp[blockIdx.x] = 0.0f;
        return;
    }
    const float s = mp_block_sum(xent_row_thread<false, G, V16>(l, v_valid, mx, threadIdx.x), buf);
    if (threadIdx.x == 0) sumexp[blockIdx.x] = s;
}

/* Column c of row l as fp32 when 0 <= c < bound, else 0: a target logit (target_kernel, xent_fwd_kernel). */
template <typename T>
__host__ __device__ static inline float xent_tlogit(const T *l, int64_t c, int bound) {
    return (c >= 0 && c < bound) ? mp_to_f32(l[c]) : 0.0f;
}

/* mp_warp_sum for xent_ms pairs: the xor butterfly, every lane ending with the same bits. */
__device__ __forceinline__ xent_ms xent_warp_combine(xent_ms x) {
    for (int o = MP_WARP / 2; o > 0; o /= 2)
        x = xent_ms_combine(x, {__shfl_xor_sync(MP_FULL_MASK, x.m, o), __shfl_xor_sync(MP_FULL_MASK, x.s, o)});
    return x;
}

/* The three statistics of one row per block in one read of the logits: each thread's xent_fwd_thread,
 * combined in mp_block_reduce's fixed tree; the target logit by thread 0 (one element, issued before the
 * sweep), bounded by v_local like core/backend_cpu.c's cpu_xent_fwd. */
template <int G, bool V16, typename T>
static __global__ void __launch_bounds__(XENT_THREADS)
    xent_fwd_kernel(float *__restrict__ rowmax, float *__restrict__ sumexp, float *__restrict__ tlogit,
                    const T *__restrict__ logits, const int32_t *__restrict__ tgt, int v_local, int v_valid,
                    int v_start) {
    __shared__ xent_ms buf[MP_WARP];
    const T *l = logits + (int64_t)blockIdx.x * v_local;
    const float tl = threadIdx.x == 0 ? xent_tlogit(l, (int64_t)tgt[blockIdx.x] - v_start, v_local) : 0.0f;
    const xent_ms r = mp_block_reduce<xent_ms, xent_warp_combine>(xent_fwd_thread<G, V16>(l, v_valid, threadIdx.x),
                                                                  buf, xent_ms{-INFINITY, 0.0f});
    if (threadIdx.x == 0) rowmax[blockIdx.x] = r.m, sumexp[blockIdx.x] = r.s, tlogit[blockIdx.x] = tl;
}

template <typename T>
static __global__ void target_kernel(float *__restrict__ tlogit, const T *__restrict__ logits,
                                     const int32_t *__restrict__ tgt, int N, int v_local, int v_valid, int v_start) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= N) return;
    tlogit[n] = xent_tlogit(logits + (int64_t)n * v_local, (int64_t)tgt[n] - v_start, v_valid);
}

static __global__ void loss_kernel(float *__restrict__ losses, const float *__restrict__ rowmax,
                                   const float *__restrict__ sumexp, const float *__restrict__ tlogit, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) losses[n] = xent_loss_row(rowmax[n], sumexp[n], tlogit[n]);
}

/* A shard's sum of exps taken from its own max to the global one (the table's xent_rescale, tp > 1);
 * 0 when the shard has no valid column. The same expression on host and device (check_kernels_host). */
__host__ __device__ static inline float xent_rescale_row(float sumexp, float local_max, float rowmax) {
    return local_max == -INFINITY ? 0.0f : mp_mul_rn(sumexp, expf(local_max - rowmax));
}

static __global__ void rescale_kernel(float *__restrict__ sumexp, const float *__restrict__ local_max,
                                      const float *__restrict__ rowmax, int N) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < N) sumexp[n] = xent_rescale_row(sumexp[n], local_max[n], rowmax[n]);
}

/* Columns j0 .. j0+VEC-1 of one row l of the backward, in place: read all, then write all (VEC > 1: one
 * 16-byte access each way). Every column's expression is the same whatever VEC (host and device:
 * check_kernels_host replays the launches). f = dloss / sumexp, or 0 when the row has no finite logit. */
template <int VEC, typename T>
__host__ __device__ static inline void xent_bwd_at(T *l, int j0, float mx, float f, int64_t c, float dloss,
                                                   int v_valid) {
    float g[VEC];
    mp_ld_vec<VEC>(g, l + j0);
    for (int k = 0; k < VEC; k++) {
        const int j = j0 + k;
        float gk = 0.0f;
        if (j < v_valid) {
            gk = f == 0.0f ? 0.0f : f * expf(g[k] - mx);   /* f == 0: also no exp(-inf - -inf) = NaN */
            if (j == c) gk -= dloss;
        }
        g[k] = gk;
    }
    mp_st_vec<VEC>(l + j0, g);
}

/* Each column is read and written by one thread, the target's -dloss folded into that same write. VEC
 * columns per access (VEC = 16 bytes of T when v_local is a multiple of it and logits is 16-byte aligned:
 * then every row is; else 1); thread t takes the groups starting at VEC t, VEC (t + 256), ... */
template <int VEC, typename T>
static __global__ void __launch_bounds__(XENT_THREADS)
    xent_bwd_kernel(T *__restrict__ logits, const float *__restrict__ rowmax, const float *__restrict__ sumexp,
                    const int32_t *__restrict__ tgt, float dloss, int v_local, int v_valid, int v_start) {
    T *l = logits + (int64_t)blockIdx.x * v_local;
    const float mx = rowmax[blockIdx.x];
    const float f = mx == -INFINITY ? 0.0f : dloss / sumexp[blockIdx.x];   /* no finite logit: no gradient */
    const int64_t c = (int64_t)tgt[blockIdx.x] - v_start;                   /* local target column, maybe none */
    MP_DEVICE_UNROLL4
    for (int j0 = VEC * threadIdx.x; j0 < v_local; j0 += VEC * XENT_THREADS) xent_bwd_at<VEC>(l, j0, mx, f, c, dloss, v_valid);
}

static void check_rows(int N, int v_local, int v_valid) {
    assert(N >= 0 && v_local >= 0 && v_valid >= 0 && v_valid <= v_local);
    (void)N, (void)v_local, (void)v_valid;   /* used only by assert */
}

/* The row kernels' one width rule, for rowmax_t, sumexp_t and fwd_t: groups of G = 16 / sizeof(T) columns
 * when v_local is a multiple of G (one 16-byte load each when the logits are aligned too), else single
 * columns. Calls launch(g, v16) with g and v16 as std::integral_constant, so that launch instantiates the
 * kernel template <g, v16, T>: the groups, hence the order of every sum, depend on v_local alone. */
template <typename T, typename Launch>
static void row_launch(const T *logits, int v_local, Launch launch) {
    constexpr int G = 16 / sizeof(T);
    if (v_local % G) launch(std::integral_constant<int, 1>{}, std::false_type{});
    else if (mp_aligned16(logits)) launch(std::integral_constant<int, G>{}, std::true_type{});
    else launch(std::integral_constant<int, G>{}, std::false_type{});
}

template <typename T>
static void rowmax_t(float *rowmax, const T *logits, int N, int v_local, int v_valid, cudaStream_t s) {
    check_rows(N, v_local, v_valid);
    if (N == 0) return;
    assert(rowmax && logits);
    row_launch(logits, v_local, [&](auto g, auto v16) {
        rowmax_kernel<decltype(g)::value, decltype(v16)::value, T>
            <<<N, XENT_THREADS, 0, s>>>(rowmax, logits, v_local, v_valid);
    });
}

template <typename T>
static void sumexp_t(float *sumexp, const T *logits, const float *rowmax, int N, int v_local, int v_valid,
                     cudaStream_t s) {
    check_rows(N, v_local, v_valid);
    if (N == 0) return;
    assert(sumexp && logits && rowmax);
    row_launch(logits, v_local, [&](auto g, auto v16) {
        sumexp_kernel<decltype(g)::value, decltype(v16)::value, T>
            <<<N, XENT_THREADS, 0, s>>>(sumexp, logits, rowmax, v_local, v_valid);
    });
}

template <typename T>
static void fwd_t(float *rowmax, float *sumexp, float *tlogit, const T *logits, const int32_t *tgt, int N, int v_local,
                  int v_valid, int v_start, cudaStream_t s) {
    check_rows(N, v_local, v_valid);
    if (N == 0) return;
    assert(rowmax && sumexp && tlogit && logits && tgt);
    row_launch(logits, v_local, [&](auto g, auto v16) {
        xent_fwd_kernel<decltype(g)::value, decltype(v16)::value, T>
            <<<N, XENT_THREADS, 0, s>>>(rowmax, sumexp, tlogit, logits, tgt, v_local, v_valid, v_start);
    });
}

template <typename T>
static void target_t(float *tlogit, const T *logits, const int32_t *tgt, int N, int v_local, int v_valid, int v_start,
                     cudaStream_t s) {
    check_rows(N, v_local, v_valid);
    if (N == 0) return;
    assert(tlogit && logits && tgt);
    target_kernel<T><<<(N + 255) / 256, 256, 0, s>>>(tlogit, logits, tgt, N, v_local, v_valid, v_start);
}

template <typename T>
static void bwd_t(T *logits, const float *rowmax, const float *sumexp, const int32_t *tgt, float dloss, int N,
                  int v_local, int v_valid, int v_start, cudaStream_t s) {
    check_rows(N, v_local, v_valid);
    if (N == 0 || v_local == 0) return;
    assert(logits && rowmax && sumexp && tgt);
    constexpr int V = 16 / sizeof(T);
    if (v_local % V == 0 && mp_aligned16(logits))
        xent_bwd_kernel<V, T><<<N, XENT_THREADS, 0, s>>>(logits, rowmax, sumexp, tgt, dloss, v_local, v_valid, v_start);
    else
        xent_bwd_kernel<1, T><<<N, XENT_THREADS, 0, s>>>(logits, rowmax, sumexp, tgt, dloss, v_local, v_valid, v_start);
}

extern "C" void mp_cuda_xent_rowmax_bf16(float *rowmax, const mp_bf16 *logits, int N, int v_local, int v_valid,
                                         cudaStream_t s) {
    rowmax_t(rowmax, logits, N, v_local, v_valid, s);
}
extern "C" void mp_cuda_xent_rowmax_f32(float *rowmax, const float *logits, int N, int v_local, int v_valid,
                                        cudaStream_t s) {
    rowmax_t(rowmax, logits, N, v_local, v_valid, s);
}
extern "C" void mp_cuda_xent_sumexp_bf16(float *sumexp, const mp_bf16 *logits, const float *rowmax, int N,
                                         int v_local, int v_valid, cudaStream_t s) {
    sumexp_t(sumexp, logits, rowmax, N, v_local, v_valid, s);
}
extern "C" void mp_cuda_xent_sumexp_f32(float *sumexp, const float *logits, const float *rowmax, int N, int v_local,
                                        int v_valid, cudaStream_t s) {
    sumexp_t(sumexp, logits, rowmax, N, v_local, v_valid, s);
}
extern "C" void mp_cuda_xent_target_bf16(float *tlogit, const mp_bf16 *logits, const int32_t *tgt, int N,
                                         int v_local, int v_valid, int v_start, cudaStream_t s) {
    target_t(tlogit, logits, tgt, N, v_local, v_valid, v_start, s);
}
extern "C" void mp_cuda_xent_target_f32(float *tlogit, const float *logits, const int32_t *tgt, int N, int v_local,
                                        int v_valid, int v_start, cudaStream_t s) {
    target_t(tlogit, logits, tgt, N, v_local, v_valid, v_start, s);
}
extern "C" void mp_cuda_xent_fwd_bf16(float *rowmax, float *sumexp, float *tlogit, const mp_bf16 *logits,
                                      const int32_t *tgt, int N, int v_local, int v_valid, int v_start, cudaStream_t s) {
    fwd_t(rowmax, sumexp, tlogit, logits, tgt, N, v_local, v_valid, v_start, s);
}
extern "C" void mp_cuda_xent_fwd_f32(float *rowmax, float *sumexp, float *tlogit, const float *logits,
                                     const int32_t *tgt, int N, int v_local, int v_valid, int v_start, cudaStream_t s) {
    fwd_t(rowmax, sumexp, tlogit, logits, tgt, N, v_local, v_valid, v_start, s);
}
extern "C" void mp_cuda_xent_loss(float *losses, const float *rowmax, const float *sumexp, const float *tlogit,
                                  int N, cudaStream_t s) {
    assert(N >= 0);
    if (N == 0) return;
    assert(losses && rowmax && sumexp && tlogit);
    loss_kernel<<<(N + 255) / 256, 256, 0, s>>>(losses, rowmax, sumexp, tlogit, N);
}
extern "C" void mp_cuda_xent_rescale(float *sumexp, const float *local_max, const float *rowmax, int N,
                                     cudaStream_t s) {
    assert(N >= 0);
    if (N == 0) return;
    assert(sumexp && local_max && rowmax);
    rescale_kernel<<<(N + 255) / 256, 256, 0, s>>>(sumexp, local_max, rowmax, N);
}
extern "C" void mp_cuda_xent_bwd_bf16(mp_bf16 *logits, const float *rowmax, const float *sumexp, const int32_t *tgt,
                                      float dloss, int N, int v_local, int v_valid, int v_start, cudaStream_t s) {
    bwd_t(logits, rowmax, sumexp, tgt, dloss, N, v_local, v_valid, v_start, s);
}
extern "C" void mp_cuda_xent_bwd_f32(float *logits, const float *rowmax, const float *sumexp, const int32_t *tgt,
                                     float dloss, int N, int v_local, int v_valid, int v_start, cudaStream_t s) {
    bwd_t(logits, rowmax, sumexp, tgt, dloss, N, v_local, v_valid, v_start, s);
}
