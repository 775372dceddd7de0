/*
 * core/cuda/k_embed.cu — vocab-parallel token embedding: forward (a masked row gather) and a
 * DETERMINISTIC backward (no float atomics; bitwise repeatable run to run).
 *
 * This rank holds table rows for global ids [v_start, v_start + v_local); a token outside that slice
 * gives a zero row in the forward (the caller all-reduces over tp) and no gradient in the backward.
 *
 * Forward: one block per token, threads striding over D; the table is fp32 (masters) or bf16 (a
 * gathered bf16 copy), the output bf16.
 *
 * Backward: dwte[row] += sum of dout[n] over the tokens n of that row. Repeated tokens would race under
 * a naive one-thread-per-token scatter (float atomics: order-dependent sums), so the work is grouped by
 * row first:
 *   1. key kernel: key[n] = row << 32 | n with row = tok[n] - v_start, or row = v_local (a sentinel
 *      past every real row) for tokens not in this slice; keys N..P-1 (P = N rounded up to a power of
 *      two) are UINT64_MAX. Keys are unique (n is), so their ascending order is unique.
 *   2. bitonic sort of the P keys (bitonic_step: the standard network; a pure function of the keys, so
 *      the result is THE sorted order whatever the scheduling). The steps (k, j) with j < 2048 pair keys
 *      within one aligned tile of 2048, so runs of them go as one launch per tile set, in shared memory
 *      (bitonic_tile_kernel), the others as one launch per step (bitonic_kernel): bitonic_schedule, 10
 *      launches at P = 16K instead of 105 (the 1B step's embed_bwd was launch-bound).
 *   3. segment kernel: grid (sorted position i, column block). The thread at the first position of a
 *      row's run (row valid, and i == 0 or the previous key has another row) sums that run's dout rows in
 *      increasing n, in fp32, and adds the total into dwte[row, d] once. Every dwte element is written
 *      by at most one thread, with a sum in a fixed order. Threads at other positions return at once.
 * Scratch: P uint64 keys (mp_cuda_embed_bwd_scratch_bytes). A very frequent token makes one long run
 * (one thread loops over it); that costs time, not correctness.
 */
#include "core/cuda/k_common.cuh"

#define EMB_THREADS 256
#define SORT_THREADS 256
#define SORT_TILE 2048         /* keys per shared-memory tile of the fused sort steps (16 KB) */
#define SORT_TILE_THREADS 1024
#define ROW_SENTINEL_SHIFT 32

/* The next power of two >= n (n >= 1, n <= 2^30). */
__host__ __device__ static inline int64_t next_pow2(int64_t n) {
    int64_t p = 1;
    while (p < n) p <<= 1;
    return p;
}

/* The key of token n: its local row (v_local when out of this slice) above n. */
__host__ __device__ static inline uint64_t embed_key(int32_t tok, int n, int v_start, int v_local) {
    const int64_t r = (int64_t)tok - v_start;
    const uint64_t row = (r >= 0 && r < v_local) ? (uint64_t)r : (uint64_t)v_local;
    return (row << ROW_SENTINEL_SHIFT) | (uint64_t)(uint32_t)n;
}
__host__ __device__ static inline uint64_t key_row(uint64_t key) { return key >> ROW_SENTINEL_SHIFT; }
__host__ __device__ static inline int key_pos(uint64_t key) { return (int)(key & 0xffffffffu); }

/* One compare-exchange of the bitonic network at stage (k, j) for element i (a global index) of a
 * key array whose element base is at t[0] (t = keys, base = 0 for the whole array; a shared tile of
 * keys [base, base + tile) holding both i and i ^ j otherwise). */
__host__ __device__ static inline void bitonic_step_at(uint64_t *t, int64_t base, int64_t i, int64_t j, int64_t k) {
    const int64_t l = i ^ j;
    if (l <= i) return;   /* the pair is handled by its lower index */
    const uint64_t a = t[i - base], b = t[l - base];
    const bool ascending = (i & k) == 0;
    if ((a > b) == ascending) {
        t[i - base] = b;
        t[l - base] = a;
    }
}
__host__ __device__ static inline void bitonic_step(uint64_t *keys, int64_t i, int64_t j, int64_t k) {
    bitonic_step_at(keys, 0, i, j, k);
}

/* The launch schedule of the bitonic network over P keys (a power of two): the network's steps (k, j)
 * in their order, those with j < tile = min(P, SORT_TILE) fused per tile (pairs i, i ^ j then lie in one
 * aligned tile): tile(k_first, k_last) runs, for each stage k of k_first, 2 k_first, ..., k_last, the
 * steps j = min(k, tile) / 2, ..., 1 in one shared-memory pass; global(j, k) one step over all keys.
 * 1 + 2 + ... + (log2(P / tile) + 1) launches instead of log2(P)(log2(P) + 1) / 2: 10 instead of 105 at
 * P = 16K. The launcher and the host check run the same schedule. */
template <typename G, typename T>
__host__ static inline void bitonic_schedule(int64_t P, const G &global, const T &tile) {
    const int64_t n = P < SORT_TILE ? P : SORT_TILE;
    if (P < 2) return;
    tile((int64_t)2, n);
    for (int64_t k = 2 * n; k <= P; k <<= 1) {
        for (int64_t j = k >> 1; j >= n; j >>= 1) global(j, k);
        tile(k, k);
    }
}

/* The first step j of stage k inside a tile of n keys (the steps j >= n went before, one launch each). */
__host__ __device__ static inline int64_t bitonic_tile_j0(int64_t k, int64_t n) { return (k < n ? k : n) >> 1; }

/* Thread tid of nthreads does its elements of one fused step (k, j) on the tile t of keys
 * [base, base + n). */
__host__ __device__ static inline void bitonic_tile_step(uint64_t *t, int64_t base, int64_t n, int64_t j, int64_t k,
                                                         int tid, int nthreads) {
    for (int64_t i = tid; i < n; i += nthreads) bitonic_step_at(t, base, base + i, j, k);
}

/* Is sorted position i the first of a valid row's run? */
__host__ __device__ static inline bool run_start(const uint64_t *keys, int i, int v_local) {
    const uint64_t row = key_row(keys[i]);
    return row < (uint64_t)v_local && (i == 0 || key_row(keys[i - 1]) != row);
}

template <typename W>
static __global__ void __launch_bounds__(EMB_THREADS)
    embed_fwd_kernel(mp_bf16 *__restrict__ out, const int32_t *__restrict__ tok, const W *__restrict__ wte, int D,
                     int v_start, int v_local) {
    const int64_t n = blockIdx.x;
    const int64_t r = (int64_t)tok[n] - v_start;
    mp_bf16 *o = out + n * D;
    if (r >= 0 && r < v_local) {
        const W *w = wte + r * D;
        for (int i = threadIdx.x; i < D; i += EMB_THREADS) o[i] = mp_f2bf(mp_ld(w + i));
    } else {
        for (int i = threadIdx.x; i < D; i += EMB_THREADS) o[i] = mp_f2bf(0.0f);
    }
}

static __global__ void embed_key_kernel(uint64_t *__restrict__ keys, const int32_t *__restrict__ tok, int N,
                                        int64_t P, int v_start, int v_local) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= P) return;
    keys[i] = i < N ? embed_key(tok[i], (int)i, v_start, v_local) : ~(uint64_t)0;
}

static __global__ void bitonic_kernel(uint64_t *keys, int64_t P, int64_t j, int64_t k) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < P) bitonic_step(keys, i, j, k);
}

/* The fused steps of bitonic_schedule's tile(k_first, k_last) on tile blockIdx.x of n = min(P, SORT_TILE)
 * keys: loaded once into shared memory, a barrier after every step, stored once. */
static __global__ void __launch_bounds__(SORT_TILE_THREADS)
    bitonic_tile_kernel(uint64_t *keys, int64_t P, int64_t k_first, int64_t k_last) {
    __shared__ uint64_t t[SORT_TILE];
    const int64_t n = P < SORT_TILE ? P : SORT_TILE, base = (int64_t)blockIdx.x * n;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) t[i] = keys[base + i];
    __syncthreads();
    for (int64_t k = k_first; k <= k_last; k <<= 1)   /* block-uniform loops: the barriers are safe */
        for (int64_t j = bitonic_tile_j0(k, n); j > 0; j >>= 1) {
            bitonic_tile_step(t, base, n, j, k, threadIdx.x, blockDim.x);
            __syncthreads();
        }
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) keys[base + i] = t[i];
}

static __global__ void __launch_bounds__(EMB_THREADS)
    embed_segment_kernel(float *__restrict__ dwte, const mp_bf16 *__restrict__ dout, const uint64_t *__restrict__ keys,
                         int N, int D, int v_local) {
    const int i = blockIdx.x;
    const int d = blockIdx.y * EMB_THREADS + threadIdx.x;
    if (i >= N || d >= D || !run_start(keys, i, v_local)) return;
    const uint64_t row = key_row(keys[i]);
    float sum = 0.0f;
    for (int j = i; j < N && key_row(keys[j]) == row; j++) sum += mp_bf2f(dout[(int64_t)key_pos(keys[j]) * D + d]);
    dwte[(int64_t)row * D + d] += sum;
}

template <typename W>
static void embed_fwd(mp_bf16 *out, const int32_t *tok, const W *wte, int N, int D, int v_start, int v_local,
                      cudaStream_t s) {
    assert(N >= 0 && D > 0 && v_local >= 0);
    if (N == 0) return;
    assert(out && tok && (wte || v_local == 0));
    embed_fwd_kernel<W><<<N, EMB_THREADS, 0, s>>>(out, tok, wte, D, v_start, v_local);
}

extern "C" void mp_cuda_embed_fwd_f32(mp_bf16 *out, const int32_t *tok, const float *wte, int N, int D, int v_start,
                                      int v_local, cudaStream_t s) {
    embed_fwd<float>(out, tok, wte, N, D, v_start, v_local, s);
}

extern "C" void mp_cuda_embed_fwd_bf16(mp_bf16 *out, const int32_t *tok, const mp_bf16 *wte, int N, int D,
                                       int v_start, int v_local, cudaStream_t s) {
    embed_fwd<mp_bf16>(out, tok, wte, N, D, v_start, v_local, s);
}

extern "C" size_t mp_cuda_embed_bwd_scratch_bytes(int N) {
    assert(N >= 0 && N <= (1 << 30));
    return N > 0 ? (size_t)next_pow2(N) * sizeof(uint64_t) : 0;
}

extern "C" void mp_cuda_embed_bwd(float *dwte, const mp_bf16 *dout, const int32_t *tok, void *keys_v, int N, int D,
                                  int v_start, int v_local, cudaStream_t s) {
    assert(N >= 0 && N <= (1 << 30) && D > 0 && v_local >= 0);
    if (N == 0 || v_local == 0) return;
    assert(dwte && dout && tok && keys_v);
    assert(((uintptr_t)keys_v % sizeof(uint64_t)) == 0);
    assert((D + EMB_THREADS - 1) / EMB_THREADS <= 65535);   /* grid.y */
    uint64_t *keys = (uint64_t *)keys_v;
    const int64_t P = next_pow2(N);
    const unsigned sort_blocks = (unsigned)((P + SORT_THREADS - 1) / SORT_THREADS);   /* <= 2^22 */
    embed_key_kernel<<<sort_blocks, SORT_THREADS, 0, s>>>(keys, tok, N, P, v_start, v_local);
    const unsigned tiles = (unsigned)(P < SORT_TILE ? 1 : P / SORT_TILE);
    bitonic_schedule(
        P, [&](int64_t j, int64_t k) { bitonic_kernel<<<sort_blocks, SORT_THREADS, 0, s>>>(keys, P, j, k); },
        [&](int64_t k_first, int64_t k_last) {
            bitonic_tile_kernel<<<tiles, SORT_TILE_THREADS, 0, s>>>(keys, P, k_first, k_last);
        });
    const dim3 grid((unsigned)N, (unsigned)((D + EMB_THREADS - 1) / EMB_THREADS));
    embed_segment_kernel<<<grid, EMB_THREADS, 0, s>>>(dwte, dout, keys, N, D, v_local);
}
