/*
 * tests/cuda/check_kernels_host.cu — host-side checks of the CUDA kernels' pure parts, runnable
 * on a machine WITHOUT a GPU (nothing here launches a kernel).
 *
 * What it checks:
 *   1. the __host__ __device__ helpers the kernels themselves call (it #includes the kernel files):
 *      reduction and RMSNorm-backward plans (every element covered once, limits held); the launches of
 *      RMSNorm (forward, backward: lane by lane, the warp butterfly emulated), the sum-of-squares
 *      reductions (thread by thread, the block trees emulated), the cross-entropy (one-pass forward:
 *      its pair tree emulated; backward) and AdamW
 *      replayed on the host, 16-byte and 2-byte paths bitwise equal, against float64 (RMSNorm's dw also
 *      bitwise against its contract's summation order written out independently); the embedding
 *      backward's key packing, bitonic network and run detection (run as the launcher runs them, stage
 *      by stage, against core/backend_cpu.c's in-order scatter), the AdamW, SwiGLU, RoPE, loss and clip
 *      element math against double-precision references;
 *   2. the flash-attention kernels' tiling, written out on the host step for step as the kernels do it
 *      (block tiles, one warp per row, one lane per key, the causal masks, the tile skips, the online
 *      softmax; dK/dV by key-row warps over query tiles, dQ by query-row warps over key tiles), against a
 *      naive double-precision attention and against the project's CPU kernels
 *      (core/kernels_cpu_attn_fwd.c, _bwd.c), on odd sizes (T not a multiple of a tile, hd not a multiple
 *      of 32, GQA groups of 1, 2 and 4);
 *   3. the tensor-core attention (k_attn_mma.cu) through its own tile functions (k_attn_mma.cuh), a
 *      whole warp per call: the mma.sync m16n8k16 fragments and the quad shuffles emulated by the PTX
 *      ISA layouts, forward and backward against float64 and the CPU kernels, T = 1, 15, 64, 112, 200,
 *      hd 64 / 128, GQA ratios 1 and 4; and its tile loaders alone (check_loaders), run for all 128
 *      threads: every shared element written once with the right bits, and no bank conflict in any
 *      warp-wide store (the stores recorded through fa_host_store_log).
 * What it cannot check: the device code itself (shuffles, barriers, shared-memory races, launch
 * configurations). Those need a GPU; see docs/CUDA.md.
 *
 * Not part of the library (cmake/cuda.cmake globs the .cu files of core/cuda itself, not of this folder).
 * Build and run:
 *   gcc -O2 -fopenmp -I. -c core/kernels_cpu_attn_fwd.c -o /tmp/af.o
 *   gcc -O2 -fopenmp -I. -c core/kernels_cpu_attn_bwd.c -o /tmp/ab.o
 *   nvcc -std=c++17 -O2 -I. tests/cuda/check_kernels_host.cu /tmp/af.o /tmp/ab.o \
 *        -lopenblas -lgomp -o /tmp/check_kernels_host && /tmp/check_kernels_host
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "core/cuda/k_adamw.cu"
#include "core/cuda/k_attn_bwd.cu"
#include "core/cuda/k_attn_fwd.cu"
#include "core/cuda/k_attn_mma.cuh"
#include "core/cuda/k_embed.cu"
#include "core/cuda/k_reduce.cu"
#include "core/cuda/k_rmsnorm.cu"
#include "core/cuda/k_rope.cu"
#include "core/cuda/k_swiglu.cu"
#include "core/cuda/k_xent.cu"
#include "core/cuda/k_elementwise.cu"
#include "core/cuda/k_convert.cu"
#include "core/cuda/gemm_plan.h"

extern "C" {
#include "core/backend.h"   /* the CPU kernels through the CPU backend's table (the ISA level the CPU runs) */
}

static int g_fail = 0;
#define CHECK(cond, ...)                                    \
    do {                                                    \
        if (!(cond)) {                                      \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                   \
            fprintf(stderr, "\n");                          \
            g_fail++;                                       \
        }                                                   \
    } while (0)

#ifdef MP_HOSTCHECK_NO_MAIN
/* For the programs that include this file and launch kernels (check_kernels_device.cu, mma_probe.cu): a
 * CUDA runtime call that fails ends the program, naming the call and the error. */
#define CK(call)                                                                                        \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_));      \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)
#endif

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;
static uint64_t rnd_u64(void) {   /* splitmix64 */
    uint64_t z = (g_rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static float rnd_unit(void) { return (float)((rnd_u64() >> 40) * (1.0 / 16777216.0)) * 2.0f - 1.0f; }
static float bf16_round(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

/* mp_warp_sum's (MAX: mp_warp_max's) xor butterfly on the host: lane l takes op(v[l], v[l ^ o]) for
 * o = 16, 8, 4, 2, 1 (the device's operand order); every lane ends with the same bits, lane 0's are
 * returned. */
template <typename T, typename OP>
static T warp_tree_host(const T *lanes, const OP &op) {
    T v[MP_WARP], old[MP_WARP];
    memcpy(v, lanes, sizeof v);
    for (int o = MP_WARP / 2; o > 0; o /= 2) {
        memcpy(old, v, sizeof v);
        for (int l = 0; l < MP_WARP; l++) v[l] = op(old[l], old[l ^ o]);
    }
    return v[0];
}
template <typename T, bool MAX = false>
static T warp_sum_host(const T *lanes) {
    return warp_tree_host(lanes, [](T a, T b) { return MAX ? fmaxf(a, b) : a + b; });
}

/* mp_block_reduce on the host with op (the warp butterfly's combine) for a block of v.size() threads (a
 * multiple of 32): each warp's butterfly, then the warp results (identity past the last warp) through one
 * more. block_sum_host: mp_block_sum(_d) (MAX: mp_block_max). */
template <typename T, typename OP>
static T block_tree_host(const std::vector<T> &v, const OP &op, T identity) {
    const int nwarps = (int)v.size() / MP_WARP;
    T buf[MP_WARP];
    for (int l = 0; l < MP_WARP; l++) buf[l] = l < nwarps ? warp_tree_host(v.data() + l * MP_WARP, op) : identity;
    return warp_tree_host(buf, op);
}
template <typename T, bool MAX = false>
static T block_sum_host(const std::vector<T> &v) {
    return block_tree_host(v, [](T a, T b) { return MAX ? fmaxf(a, b) : a + b; }, MAX ? (T)-INFINITY : (T)0);
}

/* ---- 1. plans ---- */

static void check_reduce_plan(void) {
    const int64_t ns[] = {1, 2, 255, 8191, 8192, 8193, 100000, 8192LL * 1024, 8192LL * 1024 + 1, 123456789,
                          (int64_t)1 << 33, ((int64_t)1 << 40) + 7};
    for (int64_t n : ns) {
        int nb;
        int64_t chunk;
        reduce_plan(n, &nb, &chunk);
        CHECK(nb >= 1 && nb <= MP_CUDA_REDUCE_MAX_BLOCKS, "reduce_plan(%lld): %d blocks", (long long)n, nb);
        CHECK((int64_t)nb * chunk >= n && (int64_t)(nb - 1) * chunk < n, "reduce_plan(%lld) coverage", (long long)n);
        CHECK(chunk % 8 == 0, "reduce_plan(%lld): chunk %lld not whole 16-byte groups of bf16", (long long)n, (long long)chunk);
    }
}

/* partial_kernel<SQUARE, V16> (every thread of every block through reduce_thread, then the block tree)
 * and final_kernel (the 1024-thread tree over the partials, zeros past nb) replayed; returns acc + total. */
template <bool SQUARE, bool V16, typename T>
static double reduce_replay(const T *x, int64_t n, double acc) {
    int nb;
    int64_t chunk;
    reduce_plan(n, &nb, &chunk);
    std::vector<double> partials(FINAL_THREADS, 0.0), sums(RED_THREADS);
    for (int b = 0; b < nb; b++) {
        const int64_t start = (int64_t)b * chunk, end = std::min(start + chunk, n);
        for (int t = 0; t < RED_THREADS; t++) sums[t] = reduce_thread<SQUARE, V16>(x, start, end, t);
        partials[b] = block_sum_host(sums);
    }
    return acc + block_sum_host(partials);
}

/* The reductions (k_reduce.cu) replayed on fp32 and bf16 data: the 16-byte and one-element paths bitwise
 * equal, and within 1e-13 relative of the exact sum (of squares; long double). */
[[maybe_unused]] static void check_reduce(int64_t n) {
    std::vector<float> x(n);
    std::vector<__nv_bfloat16> xb(n);
    long double lsq = 0, lsm = 0, lsa = 0, lsqb = 0;   /* references in long double: a plain double sum of 2M terms errs more than the tree */
    for (int64_t i = 0; i < n; i++) {
        x[i] = 3.0f * rnd_unit(), xb[i] = __float2bfloat16_rn(x[i]);
        lsq += (long double)x[i] * x[i], lsm += x[i], lsa += fabsl(x[i]);
        lsqb += (long double)__bfloat162float(xb[i]) * __bfloat162float(xb[i]);
    }
    const double sq = (double)lsq, sm = (double)lsm, sa = (double)lsa, sqb = (double)lsqb;
    const double a = reduce_replay<true, true>(x.data(), n, 0.5), b = reduce_replay<true, false>(x.data(), n, 0.5);
    const double c = reduce_replay<false, true>(x.data(), n, 0.5), d = reduce_replay<false, false>(x.data(), n, 0.5);
    const double e = reduce_replay<true, true>(xb.data(), n, 0.5), f = reduce_replay<true, false>(xb.data(), n, 0.5);
    CHECK(!memcmp(&a, &b, 8) && !memcmp(&c, &d, 8) && !memcmp(&e, &f, 8), "reduce n=%lld: 16-byte path differs from one-element", (long long)n);
    CHECK(fabs(a - 0.5 - sq) <= 1e-13 * sq && fabs(c - 0.5 - sm) <= 1e-13 * sa && fabs(e - 0.5 - sqb) <= 1e-13 * sqb,
          "reduce n=%lld: sumsq %.17g/%.17g sum %.17g/%.17g bf16 sumsq %.17g/%.17g", (long long)n, a - 0.5, sq, c - 0.5, sm,
          e - 0.5, sqb);
}

static void check_rmsnorm_plan(void) {
    for (int N = 1; N <= 200000; N += (N < 600 ? 1 : 997)) {
        int rows, nc;
        mp_row_chunks(N, &rows, &nc);
        CHECK(rows >= MP_CHUNK_MIN_ROWS && nc >= 1 && nc <= MP_CHUNK_MAX, "mp_row_chunks(%d): %d x %d", N, nc, rows);
        CHECK((int64_t)nc * rows >= N && (int64_t)(nc - 1) * rows < N, "mp_row_chunks(%d) coverage", N);
        CHECK(mp_cuda_rmsnorm_bwd_scratch_floats(N, 7) == (size_t)nc * 7, "scratch size");
    }
    /* the backward's warps per block: its accumulators fit 48 KB, 1..8 warps, 0 (the wide kernel) past that;
     * the transposed accumulator slots are a permutation of 0..D-1 that the fold's store inverts */
    for (int D = 1; D <= 20000; D += (D < 300 ? 1 : 97)) {
        const int W = rms_bwd_warps(D);
        CHECK(D > BWD_SMEM_FLOATS ? W == 0 : (W >= 1 && W <= BWD_MAX_WARPS && (int64_t)W * D <= BWD_SMEM_FLOATS &&
                                               (W == BWD_MAX_WARPS || (int64_t)(W + 1) * D > BWD_SMEM_FLOATS)),
              "rms_bwd_warps(%d) = %d", D, W);
        if (D % 8 || D > 4096) continue;
        std::vector<int> seen(D, 0);
        std::vector<float> acc(D), part(D, NAN);
        for (int i = 0; i < D; i++) seen[rms_acc_slot<8>(i, D)]++, acc[rms_acc_slot<8>(i, D)] = (float)i;
        for (int tid = 0; tid < 64; tid++) rms_bwd_fold<8>(part.data(), acc.data(), 1, D, tid, 64);
        for (int i = 0; i < D; i++)
            CHECK(seen[i] == 1 && part[i] == (float)i, "rms_acc_slot<8>/rms_bwd_fold D=%d column %d", D, i);
    }
}

/* ---- 1. embedding backward: keys, bitonic network, runs ---- */

static void check_embed_bwd(int N, int D, int v_start, int v_local, int vocab) {
    std::vector<int32_t> tok(N);
    for (auto &t : tok) t = (int32_t)(rnd_u64() % (uint64_t)vocab) - (rnd_u64() % 16 == 0 ? vocab : 0);
    if (N > 3) tok[1] = tok[0], tok[3] = tok[0];   /* repeats for sure */
    std::vector<float> dout((size_t)N * D), ref((size_t)v_local * D, 0.0f), got((size_t)v_local * D, 0.0f);
    for (auto &e : dout) e = bf16_round(rnd_unit());
    /* core/backend_cpu.c's cpu_embed_bwd: tokens in order */
    for (int n = 0; n < N; n++) {
        int64_t r = (int64_t)tok[n] - v_start;
        if (r < 0 || r >= v_local) continue;
        for (int i = 0; i < D; i++) ref[(size_t)r * D + i] += dout[(size_t)n * D + i];
    }
    /* the launcher's sequence, on the host */
    const int64_t P = next_pow2(N);
    CHECK(mp_cuda_embed_bwd_scratch_bytes(N) == (size_t)P * 8, "scratch bytes");
    std::vector<uint64_t> keys(P);
    for (int64_t i = 0; i < P; i++) keys[i] = i < N ? embed_key(tok[i], (int)i, v_start, v_local) : ~(uint64_t)0;
    std::vector<uint64_t> net = keys;   /* the plain network, step by step */
    for (int64_t k = 2; k <= P; k <<= 1)
        for (int64_t j = k >> 1; j > 0; j >>= 1)
            for (int64_t i = P - 1; i >= 0; i--) bitonic_step(net.data(), i, j, k);   /* any order within a stage */
    CHECK(std::is_sorted(net.begin(), net.end()), "bitonic sort (N=%d)", N);
    /* the launcher's schedule: global steps, and tile kernels replayed block by block, thread by thread
     * (in reverse thread order: any order within a step) on a copy of the tile, as in shared memory */
    int launches = 0;
    bitonic_schedule(
        P,
        [&](int64_t j, int64_t k) {
            launches++;
            for (int64_t i = P - 1; i >= 0; i--) bitonic_step(keys.data(), i, j, k);
        },
        [&](int64_t k_first, int64_t k_last) {
            launches++;
            const int64_t n = std::min<int64_t>(P, SORT_TILE);
            for (int64_t base = 0; base < P; base += n) {
                std::vector<uint64_t> t(keys.begin() + base, keys.begin() + base + n);
                for (int64_t k = k_first; k <= k_last; k <<= 1)
                    for (int64_t j = bitonic_tile_j0(k, n); j > 0; j >>= 1)
                        for (int tid = SORT_TILE_THREADS - 1; tid >= 0; tid--) bitonic_tile_step(t.data(), base, n, j, k, tid, SORT_TILE_THREADS);
                std::copy(t.begin(), t.end(), keys.begin() + base);
            }
        });
    const int lp = (int)log2((double)P), lt = (int)log2((double)std::min<int64_t>(P, SORT_TILE));
    CHECK(keys == net && launches == (P < 2 ? 0 : (lp - lt + 1) * (lp - lt + 2) / 2),
          "bitonic schedule (N=%d): %s, %d launches", N, keys == net ? "same keys" : "keys differ from the network", launches);
    for (int i = 0; i < N; i++)
        for (int d = 0; d < D; d++) {
            if (!run_start(keys.data(), i, v_local)) continue;
            const uint64_t row = key_row(keys[i]);
            float sum = 0.0f;
            for (int j = i; j < N && key_row(keys[j]) == row; j++) sum += dout[(size_t)key_pos(keys[j]) * D + d];
            got[(size_t)row * D + d] += sum;
        }
    /* from zero, both add the same values in the same (increasing n) order: bitwise equal */
    CHECK(memcmp(ref.data(), got.data(), ref.size() * sizeof(float)) == 0, "embed bwd N=%d differs from CPU", N);
}

/* ---- 1. RMSNorm: the launches replayed lane by lane (k_rmsnorm.cu) ---- */

/* rmsnorm_fwd_kernel<VEC, V16>: every warp of every block, lane by lane. */
template <int VEC, bool V16>
static void rms_fwd_replay(std::vector<mp_bf16> &y, std::vector<float> &rstd, const std::vector<mp_bf16> &x,
                           const std::vector<mp_bf16> &w, int N, int D, float eps) {
    const int blocks = (N + FWD_ROWS_PER_BLOCK - 1) / FWD_ROWS_PER_BLOCK;
    for (int b = 0; b < blocks; b++)
        for (int warp = 0; warp < FWD_ROWS_PER_BLOCK; warp++) {
            const int64_t n = (int64_t)b * FWD_ROWS_PER_BLOCK + warp;
            if (n >= N) continue;
            float ss[MP_WARP];
            for (int lane = 0; lane < MP_WARP; lane++) ss[lane] = rms_fwd_lane_ss<VEC, V16>(x.data() + n * D, D, lane);
            const float r = rms_rstd(warp_sum_host(ss), D, eps);
            rstd[n] = r;
            for (int lane = 0; lane < MP_WARP; lane++)
                rms_fwd_lane_store<VEC, V16>(y.data() + n * D, x.data() + n * D, w.data(), r, D, lane);
        }
}

/* rmsnorm_bwd_chunk_kernel<VEC, V16, false> (W = rms_bwd_warps(D) > 0), or the wide kernel's order (W = 0: the
 * rows of a chunk in order, each column's partial its own), then the column kernel. Warps of a block
 * touch disjoint rows of dx and disjoint accumulators, lanes disjoint columns: replaying them one after
 * another is the launch. */
template <int VEC, bool V16>
static void rms_bwd_replay(std::vector<mp_bf16> &dx, std::vector<float> &dw, const std::vector<mp_bf16> &dy,
                           const std::vector<mp_bf16> &x, const std::vector<mp_bf16> &w, const std::vector<float> &rstd,
                           int N, int D) {
    int rows, nc;
    mp_row_chunks(N, &rows, &nc);
    const int W = rms_bwd_warps(D);
    std::vector<float> partial(mp_cuda_rmsnorm_bwd_scratch_floats(N, D), NAN), acc((size_t)std::max(W, 1) * D);
    for (int c = 0; c < nc; c++) {
        const int64_t n0 = (int64_t)c * rows, n1 = std::min<int64_t>(n0 + rows, N);
        if (W == 0) {   /* rmsnorm_bwd_wide_kernel: a block reduction per row (order immaterial to dw) */
            for (int64_t n = n0; n < n1; n++) {
                const float r = rstd[n];
                double dot = 0;
                for (int i = 0; i < D; i++)
                    dot += (double)__bfloat162float(w[i]) * __bfloat162float(dy[n * D + i]) * __bfloat162float(x[n * D + i]);
                const float cc = (float)dot / (float)D * r * r;
                for (int i = 0; i < D; i++) {
                    const float xi = __bfloat162float(x[n * D + i]), gi = __bfloat162float(dy[n * D + i]);
                    dx[n * D + i] = __float2bfloat16_rn(__bfloat162float(dx[n * D + i]) +
                                                        r * (__bfloat162float(w[i]) * gi - xi * cc));
                    float &p = partial[(size_t)c * D + i];
                    p = n == n0 ? gi * xi * r : p + gi * xi * r;
                }
            }
            continue;
        }
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int warp = 0; warp < W; warp++)
            for (int64_t n = n0 + warp; n < n1; n += W) {
                const mp_bf16 *xr = x.data() + n * D, *g = dy.data() + n * D;
                const float r = rstd[n];
                float dots[MP_WARP];
                for (int lane = 0; lane < MP_WARP; lane++) dots[lane] = rms_bwd_lane_dot<VEC, V16>(g, xr, w.data(), D, lane);
                const float cc = warp_sum_host(dots) / (float)D * r * r;
                for (int lane = 0; lane < MP_WARP; lane++)
                    rms_bwd_lane_update<VEC, V16>(dx.data() + n * D, acc.data() + (size_t)warp * D, g, xr, w.data(), r, cc, D, lane);
            }
        for (int tid = 0; tid < W * MP_WARP; tid++) rms_bwd_fold<VEC>(partial.data() + (size_t)c * D, acc.data(), W, D, tid, W * MP_WARP);
    }
    for (int i = 0; i < D; i++) {   /* mp_chunk_sum_kernel */
        float s = 0.0f;
        for (int c = 0; c < nc; c++) s += partial[(size_t)c * D + i];
        dw[i] += s;
    }
}

/* Forward and backward replays against float64 (each launch D allows: D % 8 == 0 with 16-byte and with
 * 2-byte accesses, which must agree bit for bit; else groups of 1); dw bitwise against the contract's
 * order written out independently (a chunk's warps each sum their rows n0 + w, n0 + w + W, ... in order
 * from 0, the warps are added in order, the chunks in order). NaN-filled outputs catch an element never written; dx accumulates, so an
 * element written twice is off by its update. */
static void check_rmsnorm(int N, int D) {
    const float eps = 1e-5f;
    std::vector<mp_bf16> x((size_t)N * D), dy(x.size()), dx0(x.size()), w(D);
    for (auto &e : x) e = __float2bfloat16_rn(2.0f * rnd_unit());
    for (auto &e : dy) e = __float2bfloat16_rn(rnd_unit());
    for (auto &e : dx0) e = __float2bfloat16_rn(rnd_unit());
    for (auto &e : w) e = __float2bfloat16_rn(1.0f + 0.5f * rnd_unit());
    auto f = [](mp_bf16 v) { return (double)__bfloat162float(v); };
    std::vector<float> rstd(N);
    std::vector<double> ref_y(x.size()), ref_r(N), ref_dx(x.size()), ref_dw(D, 0.0);
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += f(x[(size_t)n * D + i]) * f(x[(size_t)n * D + i]);
        ref_r[n] = 1.0 / sqrt(ss / D + eps);
        for (int i = 0; i < D; i++) ref_y[(size_t)n * D + i] = f(x[(size_t)n * D + i]) * ref_r[n] * f(w[i]);
    }
    /* the launches D allows: D % 8 == 0: groups of 8 with 16-byte (path 0) and 2-byte (path 1) accesses,
     * which must agree bit for bit; else groups of 1 (path 2) */
    const std::vector<int> paths = D % 8 ? std::vector<int>{2} : std::vector<int>{0, 1};
    std::vector<mp_bf16> y0;
    for (int path : paths) {   /* forward */
        std::vector<mp_bf16> y(x.size(), __float2bfloat16_rn(NAN));
        std::vector<float> r(N, NAN);
        if (path == 0) rms_fwd_replay<8, true>(y, r, x, w, N, D, eps);
        else if (path == 1) rms_fwd_replay<8, false>(y, r, x, w, N, D, eps);
        else rms_fwd_replay<1, false>(y, r, x, w, N, D, eps);
        int bad = 0;
        for (size_t k = 0; k < y.size(); k++) bad += !(fabs(__bfloat162float(y[k]) - ref_y[k]) <= fabs(ref_y[k]) / 256 + 1e-6);
        for (int n = 0; n < N; n++) bad += !(fabs(r[n] - ref_r[n]) <= 1e-5 * ref_r[n]);
        CHECK(bad == 0, "rmsnorm fwd path %d N=%d D=%d: %d elements not written or off float64", path, N, D, bad);
        if (path == paths[0]) rstd = r, y0 = y;
        else CHECK(!memcmp(y.data(), y0.data(), y.size() * 2) && !memcmp(r.data(), rstd.data(), N * sizeof(float)),
                   "rmsnorm fwd N=%d D=%d: 2-byte accesses differ from 16-byte", N, D);
    }
    for (int n = 0; n < N; n++) {   /* backward references, from the fp32 rstd the forward saved */
        const double r = rstd[n];
        double dot = 0;
        for (int i = 0; i < D; i++) dot += f(w[i]) * f(dy[(size_t)n * D + i]) * f(x[(size_t)n * D + i]);
        for (int i = 0; i < D; i++) {
            const size_t k = (size_t)n * D + i;
            ref_dx[k] = f(dx0[k]) + r * (f(w[i]) * f(dy[k]) - f(x[k]) * r * r * dot / D);
            ref_dw[i] += f(dy[k]) * f(x[k]) * r;
        }
    }
    int rows, nc;
    mp_row_chunks(N, &rows, &nc);
    const int W = rms_bwd_warps(D);
    std::vector<float> order_dw(D, 0.25f);
    for (int i = 0; i < D; i++) {
        float total = 0.0f;
        for (int c = 0; c < nc; c++) {
            const int64_t n0 = (int64_t)c * rows, n1 = std::min<int64_t>(n0 + rows, N);
            float part = 0.0f;
            for (int wi = 0; wi < std::max(W, 1); wi++) {
                float a = 0.0f;
                for (int64_t n = n0 + wi; n < n1; n += std::max(W, 1)) {
                    const float t = __bfloat162float(dy[n * D + i]) * __bfloat162float(x[n * D + i]) * rstd[n];
                    a = (W == 0 && n == n0) ? t : a + t;   /* the wide kernel's first row is stored, not added */
                }
                part = wi == 0 ? a : part + a;
            }
            total += part;
        }
        order_dw[i] += total;
    }
    std::vector<float> dw1;
    std::vector<mp_bf16> dx1;
    for (int path : paths) {
        std::vector<mp_bf16> dx = dx0;
        std::vector<float> dw(D, 0.25f);
        if (path == 0) rms_bwd_replay<8, true>(dx, dw, dy, x, w, rstd, N, D);
        else if (path == 1) rms_bwd_replay<8, false>(dx, dw, dy, x, w, rstd, N, D);
        else rms_bwd_replay<1, false>(dx, dw, dy, x, w, rstd, N, D);
        int bad = 0;
        for (size_t k = 0; k < dx.size(); k++) bad += !(fabs(__bfloat162float(dx[k]) - ref_dx[k]) <= fabs(ref_dx[k]) / 256 + 1e-5);
        CHECK(bad == 0, "rmsnorm bwd path %d N=%d D=%d (W %d): %d dx elements off float64", path, N, D, W, bad);
        bad = 0;
        for (int i = 0; i < D; i++) bad += !(fabs(dw[i] - 0.25 - ref_dw[i]) <= 1e-4 * (1 + fabs(ref_dw[i])));
        CHECK(bad == 0, "rmsnorm bwd path %d N=%d D=%d: %d dw elements off float64", path, N, D, bad);
        CHECK(memcmp(dw.data(), order_dw.data(), D * sizeof(float)) == 0,
              "rmsnorm bwd path %d N=%d D=%d: dw is not the contract's fixed-order sum bit for bit", path, N, D);
        if (path == paths[0]) dw1 = dw, dx1 = dx;
        else CHECK(!memcmp(dw.data(), dw1.data(), D * sizeof(float)) && !memcmp(dx.data(), dx1.data(), dx.size() * 2),
                   "rmsnorm bwd N=%d D=%d: 2-byte accesses differ from 16-byte", N, D);
    }
}

/* ---- 1. element math ---- */

/* AdamW: a few steps of adamw_elem against the update in double. */
static void check_adamw_elem(void) {
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f;
    float p = 0.5f, m = 0, v = 0;
    double pd = 0.5, md = 0, vd = 0;
    for (int step = 1; step <= 5; step++) {
        const float g = 0.3f * step - 0.7f, gs = 0.5f;
        const float bc1 = (float)(1.0 / (1.0 - pow((double)b1, step)));
        const float bc2 = (float)(1.0 / (1.0 - pow((double)b2, step)));
        p = adamw_elem(p, g, &m, &v, lr, b1, b2, eps, wd, bc1, bc2, gs);
        const double gd = (double)g * gs;
        md = b1 * md + (1 - (double)b1) * gd;
        vd = b2 * vd + (1 - (double)b2) * gd * gd;
        const double mh = md / (1 - pow((double)b1, step)), vh = vd / (1 - pow((double)b2, step));
        pd -= lr * (mh / (sqrt(vh) + eps) + wd * pd);
    }
    CHECK(fabs(p - pd) < 1e-6, "adamw %.9g vs %.9g", p, pd);
}

/* SwiGLU and its gradient (central differences in double). */
static void check_swiglu_elem(void) {
    for (int it = 0; it < 1000; it++) {
        const float g = 8.0f * rnd_unit(), u = 2.0f * rnd_unit(), d = rnd_unit();
        const double sg = 1.0 / (1.0 + exp(-(double)g));
        CHECK(fabs(swiglu_f(g, u) - g * sg * u) < 1e-5 * (1 + fabs(g * u)), "swiglu(%g,%g)", g, u);
        float dg, du;
        swiglu_grad(d, g, u, &dg, &du);
        const double h = 1e-4;
        auto f = [&](double gg, double uu) { return gg / (1.0 + exp(-gg)) * uu; };
        const double dg_ref = d * (f(g + h, u) - f(g - h, u)) / (2 * h), du_ref = d * (f(g, u + h) - f(g, u - h)) / (2 * h);
        CHECK(fabs(dg - dg_ref) < 1e-4 * (1 + fabs(dg_ref)), "swiglu dgate(%g,%g) %g vs %g", g, u, dg, dg_ref);
        CHECK(fabs(du - du_ref) < 1e-4 * (1 + fabs(du_ref)), "swiglu dup(%g,%g) %g vs %g", g, u, du, du_ref);
    }
}

/* RoPE: the rotation of one pair and its inverse. */
static void check_rope_elem(void) {
    for (int it = 0; it < 1000; it++) {
        const double ang = 10.0 * rnd_unit();
        const float c = (float)cos(ang), s = (float)sin(ang);
        const float a0 = rnd_unit(), b0 = rnd_unit();
        float a = a0, b = b0;
        rope_rotate(&a, &b, c, s, 1.0f);
        CHECK(fabs(a - (a0 * cos(ang) - b0 * sin(ang))) < 1e-6 && fabs(b - (b0 * cos(ang) + a0 * sin(ang))) < 1e-6,
              "rope fwd");
        rope_rotate(&a, &b, c, s, -1.0f);
        CHECK(fabs(a - a0) < 1e-6 && fabs(b - b0) < 1e-6, "rope bwd does not invert fwd");
    }
}

/* The element math, one op at a time (in this order: the random stream is shared), then the cross-entropy
 * loss of one row and the clip factor (layers/llama_train.c's rule). */
static void check_elementwise(void) {
    check_adamw_elem();
    check_swiglu_elem();
    check_rope_elem();
    CHECK(fabs(xent_loss_row(2.0f, 3.0f, 1.5f) - (log(3.0) + 0.5)) < 1e-6, "xent loss");
    CHECK(clip_factor(4.0, 1.0) == (float)(1.0 / (2.0 + 1e-6)), "clip above");
    CHECK(clip_factor(0.25, 1.0) == 1.0f && clip_factor(4.0, 0.0) == 1.0f, "clip below / off");
    CHECK(clip_factor(NAN, 1.0) == 0.0f && clip_factor(INFINITY, 1.0) == 0.0f, "clip non-finite");
}

/* RoPE on the (token, head) x pair grid (k_rope.cu): the launcher's geometry replayed block by block and
 * thread by thread through rope_chunk, for VEC 8 and VEC 1; every pair must be rotated exactly once, the
 * result must be the float64 rotation of the bf16 inputs rounded once to bf16 (within one bf16 ulp of the
 * fp32 roundings: rel 2^-8 + a tiny absolute term), and the two paths must agree bit for bit. */
template <int VEC>
[[maybe_unused]] static void rope_replay(std::vector<__nv_bfloat16> &x, int off, int ld, const std::vector<float> &cs,
                                         const std::vector<float> &sn, int B, int T, int H, int hd, int pos0, float dir,
                                         std::vector<int> &touched) {
    const int half = hd / 2;
    int nchunks, bx, by;
    rope_geom(half, VEC, &nchunks, &bx, &by);
    const unsigned rows = (unsigned)(B * T * H), grid = (rows + by - 1) / by;
    for (unsigned bk = 0; bk < grid; bk++)
        for (int ty = 0; ty < by; ty++)
            for (int tx = 0; tx < bx; tx++) {   /* rope_kernel's body, thread (tx, ty) of block bk */
                const unsigned row = bk * by + ty;
                if (row >= rows) continue;
                for (int c = tx; c < nchunks; c += bx) {
                    rope_chunk<VEC>(x.data() + off, cs.data(), sn.data(), row, c, T, H, half, pos0, ld, dir);
                    for (int k = 0; k < VEC && c * VEC + k < half; k++) touched[(size_t)row * half + c * VEC + k]++;
                }
            }
}

/* The heads are the columns [off, off + H hd) of rows ld elements apart (ld = H hd, off = 0: dense; else a
 * block of the fused [q | k | v] rows, layers/llama.c): the other columns must keep their bits. VEC 8 runs
 * where the launcher would take it (rope_vec: hd/2, ld and the start a multiple of 8 elements). */
[[maybe_unused]] static void check_rope_grid(int B, int T, int H, int hd, int pos0, int off, int ld) {
    const int half = hd / 2, max_pos = pos0 + T + 3, v8 = half % 8 == 0 && ld % 8 == 0 && off % 8 == 0;
    assert(off + H * hd <= ld);
    std::vector<float> cs((size_t)max_pos * half), sn(cs.size());
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < half; i++) {
            const double ang = p * pow(10000.0, -2.0 * i / hd);
            cs[(size_t)p * half + i] = (float)cos(ang), sn[(size_t)p * half + i] = (float)sin(ang);
        }
    std::vector<__nv_bfloat16> x0((size_t)B * T * ld);
    for (auto &e : x0) e = __float2bfloat16_rn(rnd_unit());
    for (float dir : {1.0f, -1.0f}) {
        std::vector<__nv_bfloat16> x8 = x0, x1 = x0;
        std::vector<int> t8((size_t)B * T * H * half), t1(t8.size());
        if (v8) rope_replay<8>(x8, off, ld, cs, sn, B, T, H, hd, pos0, dir, t8);
        rope_replay<1>(x1, off, ld, cs, sn, B, T, H, hd, pos0, dir, t1);
        for (size_t i = 0; i < t1.size(); i++) {
            CHECK(t1[i] == 1 && (!v8 || t8[i] == 1), "rope grid hd=%d: pair %zu rotated %d/%d times", hd, i, t1[i], t8[i]);
            if (t1[i] != 1) return;
        }
        if (v8)
            CHECK(memcmp(x8.data(), x1.data(), x1.size() * sizeof x1[0]) == 0, "rope VEC 8 differs from VEC 1 (hd=%d)", hd);
        for (size_t i = 0; i < x0.size(); i++) {   /* the columns outside the heads: untouched */
            const int col = (int)(i % (size_t)ld);
            if (col >= off && col < off + H * hd) continue;
            CHECK(memcmp(&x1[i], &x0[i], sizeof x0[i]) == 0, "rope hd=%d ld=%d off=%d wrote column %d", hd, ld, off, col);
            if (memcmp(&x1[i], &x0[i], sizeof x0[i])) return;
        }
        double worst = 0;
        for (int r = 0; r < B * T * H; r++) {
            const int t = (r / H) % T;
            for (int i = 0; i < half; i++) {
                const size_t lo = (size_t)(r / H) * ld + off + (size_t)(r % H) * hd + i, hi = lo + half;
                const double a = __bfloat162float(x0[lo]), b = __bfloat162float(x0[hi]);
                const double ang = (pos0 + t) * pow(10000.0, -2.0 * i / hd) * dir;
                const double rl = a * cos(ang) - b * sin(ang), rh = b * cos(ang) + a * sin(ang);
                const double el = fabs(__bfloat162float(x1[lo]) - rl), eh = fabs(__bfloat162float(x1[hi]) - rh);
                worst = std::max(worst, std::max(el / (fabs(rl) + 1e-3), eh / (fabs(rh) + 1e-3)));
                CHECK(el <= fabs(rl) * (1.0 / 256) + 1e-6 && eh <= fabs(rh) * (1.0 / 256) + 1e-6,
                      "rope hd=%d row %d pair %d: (%g, %g) vs float64 (%g, %g)", hd, r, i, __bfloat162float(x1[lo]),
                      __bfloat162float(x1[hi]), rl, rh);
            }
        }
        (void)worst;
    }
}

/* A launch of mp_vec_kernel<VEC> replayed on the host: every thread of a 2-block grid, through mp_vec_run. */
template <int VEC, typename F>
static void vec_replay(int64_t n, const F &f) {
    for (int64_t id = 0; id < 512; id++) mp_vec_run<VEC>(n, id, 512, f);
}

/* SwiGLU's 16-byte path (k_swiglu.cu): its launch replayed (vec_replay: chunks of 8, then the n % 8 tail
 * one per thread), bitwise against the 2-byte path and within bf16 rounding of float64;
 * in place too (out = gate, dgate = gate), as layers/ may call it. */
[[maybe_unused]] static void check_swiglu_vec(int64_t n) {
    std::vector<__nv_bfloat16> g(n), u(n), d(n);
    for (int64_t i = 0; i < n; i++)
        g[i] = __float2bfloat16_rn(6.0f * rnd_unit()), u[i] = __float2bfloat16_rn(2.0f * rnd_unit()),
        d[i] = __float2bfloat16_rn(rnd_unit());
    std::vector<__nv_bfloat16> o8(n), o1(n), dg8(n), du8(n), dg1(n), du1(n), gi = g;
    vec_replay<8>(n, swiglu_fwd_op{o8.data(), g.data(), u.data()});
    vec_replay<1>(n, swiglu_fwd_op{o1.data(), g.data(), u.data()});
    CHECK(memcmp(o8.data(), o1.data(), n * 2) == 0, "swiglu fwd: 16-byte path differs from 2-byte (n=%lld)", (long long)n);
    vec_replay<8>(n, swiglu_fwd_op{gi.data(), gi.data(), u.data()});   /* in place */
    CHECK(memcmp(gi.data(), o1.data(), n * 2) == 0, "swiglu fwd in place differs (n=%lld)", (long long)n);
    vec_replay<8>(n, swiglu_bwd_op{dg8.data(), du8.data(), d.data(), g.data(), u.data()});
    vec_replay<1>(n, swiglu_bwd_op{dg1.data(), du1.data(), d.data(), g.data(), u.data()});
    CHECK(memcmp(dg8.data(), dg1.data(), n * 2) == 0 && memcmp(du8.data(), du1.data(), n * 2) == 0,
          "swiglu bwd: 16-byte path differs from 2-byte (n=%lld)", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const double gg = __bfloat162float(g[i]), uu = __bfloat162float(u[i]), dd = __bfloat162float(d[i]);
        const double sg = 1.0 / (1.0 + exp(-gg)), fo = gg * sg * uu;
        const double rdu = dd * gg * sg, rdg = dd * uu * sg * (1.0 + gg * (1.0 - sg));
        CHECK(fabs(__bfloat162float(o1[i]) - fo) <= fabs(fo) / 128 + 1e-6, "swiglu fwd [%lld]: %g vs float64 %g",
              (long long)i, __bfloat162float(o1[i]), fo);
        CHECK(fabs(__bfloat162float(dg1[i]) - rdg) <= fabs(rdg) / 128 + 1e-5 &&
                  fabs(__bfloat162float(du1[i]) - rdu) <= fabs(rdu) / 128 + 1e-5,
              "swiglu bwd [%lld]: (%g, %g) vs float64 (%g, %g)", (long long)i, __bfloat162float(dg1[i]),
              __bfloat162float(du1[i]), rdg, rdu);
    }
}

/* The 16-byte elementwise paths (k_elementwise.cu, k_convert.cu): each op's vectorised launch replayed,
 * bitwise against its one-element path, and against float64 within one rounding; add in place too. */
[[maybe_unused]] static void check_vec_elementwise(int64_t n) {
    std::vector<float> a(n), b(n);
    for (int64_t i = 0; i < n; i++) a[i] = 3.0f * rnd_unit(), b[i] = 3.0f * rnd_unit();
    std::vector<__nv_bfloat16> ab(n), bb(n);
    for (int64_t i = 0; i < n; i++) ab[i] = __float2bfloat16_rn(a[i]), bb[i] = __float2bfloat16_rn(b[i]);
    /* fp32 -> bf16 -> fp32 */
    std::vector<__nv_bfloat16> c8(n), c1(n);
    vec_replay<8>(n, convert_op<__nv_bfloat16, float>{c8.data(), a.data()});
    vec_replay<1>(n, convert_op<__nv_bfloat16, float>{c1.data(), a.data()});
    CHECK(!memcmp(c8.data(), c1.data(), n * 2) && !memcmp(c1.data(), ab.data(), n * 2), "f32->bf16 (n=%lld)", (long long)n);
    std::vector<float> f8(n), f1(n);
    vec_replay<8>(n, convert_op<float, __nv_bfloat16>{f8.data(), ab.data()});
    vec_replay<1>(n, convert_op<float, __nv_bfloat16>{f1.data(), ab.data()});
    for (int64_t i = 0; i < n; i++) CHECK(f8[i] == f1[i] && f1[i] == __bfloat162float(ab[i]), "bf16->f32 [%lld]", (long long)i);
    /* fp32: add, accumulate, scale */
    std::vector<float> o4(n), o1(n), acc4 = a, acc1 = a, sc4 = a, sc1 = a;
    vec_replay<4>(n, add_op<float>{o4.data(), a.data(), b.data()});
    vec_replay<1>(n, add_op<float>{o1.data(), a.data(), b.data()});
    vec_replay<4>(n, scale_op<float>{acc4.data(), b.data(), 1.0f});
    vec_replay<1>(n, scale_op<float>{acc1.data(), b.data(), 1.0f});
    vec_replay<4>(n, scale_op<float>{sc4.data(), NULL, 0.75f});
    vec_replay<1>(n, scale_op<float>{sc1.data(), NULL, 0.75f});
    for (int64_t i = 0; i < n; i++) {
        CHECK(o4[i] == o1[i] && acc4[i] == acc1[i] && sc4[i] == sc1[i], "f32 ops: 16-byte path differs [%lld]", (long long)i);
        const double ra = (double)a[i] + b[i], rs = 0.75 * a[i];
        CHECK(fabs(o1[i] - ra) <= 6e-8 * fabs(ra) && acc1[i] == o1[i] && fabs(sc1[i] - rs) <= 6e-8 * fabs(rs),
              "f32 ops vs float64 [%lld]", (long long)i);
    }
    /* bf16: add in place (out = a), accumulate, scale */
    std::vector<__nv_bfloat16> p8 = ab, p1 = ab, q8 = ab, q1 = ab, r8 = ab, r1 = ab;
    vec_replay<8>(n, add_op<__nv_bfloat16>{p8.data(), p8.data(), bb.data()});
    vec_replay<1>(n, add_op<__nv_bfloat16>{p1.data(), p1.data(), bb.data()});
    vec_replay<8>(n, scale_op<__nv_bfloat16>{q8.data(), bb.data(), 1.0f});
    vec_replay<1>(n, scale_op<__nv_bfloat16>{q1.data(), bb.data(), 1.0f});
    vec_replay<8>(n, scale_op<__nv_bfloat16>{r8.data(), NULL, 2.0f});
    vec_replay<1>(n, scale_op<__nv_bfloat16>{r1.data(), NULL, 2.0f});
    CHECK(!memcmp(p8.data(), p1.data(), n * 2) && !memcmp(q8.data(), q1.data(), n * 2) && !memcmp(r8.data(), r1.data(), n * 2),
          "bf16 ops: 16-byte path differs (n=%lld)", (long long)n);
    for (int64_t i = 0; i < n; i++) {
        const double ra = (double)__bfloat162float(ab[i]) + __bfloat162float(bb[i]);
        CHECK(fabs(__bfloat162float(p1[i]) - ra) <= fabs(ra) / 256 + 1e-30 && !memcmp(&q1[i], &p1[i], 2) &&
                  __bfloat162float(r1[i]) == 2.0f * __bfloat162float(ab[i]),
              "bf16 ops vs float64 [%lld]", (long long)i);
    }
}

/* ---- 1. biases and per-head RMSNorm (k_elementwise.cu, k_reduce.cu, k_rmsnorm.cu) ---- */

/* A block of N rows x cols columns starting at column off of rows ldx wide (the q | k | v block of
 * layers/llama.c's fused rows, or a part of it): bf16 values in [-2, 2] inside, 1000 + the column outside
 * (a column read by mistake moves a sum by far more than any rounding). */
static std::vector<mp_bf16> block_rows(int N, int ldx, int off, int cols) {
    std::vector<mp_bf16> x((size_t)N * ldx);
    for (size_t k = 0; k < x.size(); k++) {
        const int c = (int)(k % (size_t)ldx);
        x[k] = __float2bfloat16_rn(c >= off && c < off + cols ? 2.0f * rnd_unit() : 1000.0f + c);
    }
    return x;
}

/* 1 when every element outside columns [off, off + cols) of a equals b's, bitwise. */
static bool outside_same(const std::vector<mp_bf16> &a, const std::vector<mp_bf16> &b, int ldx, int off, int cols) {
    for (size_t k = 0; k < a.size(); k++) {
        const int c = (int)(k % (size_t)ldx);
        if ((c < off || c >= off + cols) && memcmp(&a[k], &b[k], sizeof a[k])) return false;
    }
    return true;
}

/* A bias of cols bf16 values of magnitude 0.5 .. 1.5 (never small enough to vanish in a rounding). */
static std::vector<mp_bf16> bias_random(int cols) {
    std::vector<mp_bf16> b(cols);
    for (auto &e : b) {
        const float u = rnd_unit();
        e = __float2bfloat16_rn(u < 0 ? u - 0.5f : u + 0.5f);
    }
    return b;
}

/* bias_add by its contract: x0 with bf16(float(x) + float(b[j])) in the cols = b.size() columns at off. */
static std::vector<mp_bf16> bias_add_want(const std::vector<mp_bf16> &x0, const std::vector<mp_bf16> &b, int N, int ldx,
                                          int off) {
    std::vector<mp_bf16> want = x0;
    for (int n = 0; n < N; n++)
        for (size_t j = 0; j < b.size(); j++) {
            mp_bf16 &e = want[(size_t)n * ldx + off + j];
            e = __float2bfloat16_rn(__bfloat162float(e) + __bfloat162float(b[j]));
        }
    return want;
}

/* bias_bwd's db from init by its contract's order, written out: per chunk of mp_row_chunks(N) the rows in
 * increasing n summed from 0 in fp32, the chunks added in order from 0, then the one init + total. */
static std::vector<float> bias_db_order(const std::vector<mp_bf16> &dx, int N, int ldx, int off, int cols, float init) {
    int rows, nc;
    mp_row_chunks(N, &rows, &nc);
    std::vector<float> db(cols, init);
    for (int j = 0; j < cols; j++) {
        float total = 0.0f;
        for (int c = 0; c < nc; c++) {
            float part = 0.0f;
            for (int64_t n = (int64_t)c * rows; n < std::min<int64_t>((int64_t)(c + 1) * rows, N); n++)
                part += __bfloat162float(dx[n * ldx + off + j]);
            total += part;
        }
        db[j] += total;
    }
    return db;
}

/* bias_add's launch (mp_vec_launch over the flat block: chunks of 8 when cols, ldx and the block's start are
 * multiples of 8, else one element each) and bias_bwd's (every thread of the chunk kernel through
 * bias_bwd_group, then mp_chunk_sum_kernel) replayed. bias_add must be bitwise bf16(float(x) + float(b))
 * (one rounding: cpu-bf16's arithmetic; b kept >= 0.5 in magnitude so that an element skipped or added
 * twice always shows), the columns outside the block untouched. db must be bitwise the contract's order
 * written out here (per chunk of mp_row_chunks(N) the rows in increasing n from 0, the chunks in order,
 * then one += into db), within 1e-6 of float64 relative to sum |dx| (fp32 sums of <= 20011 terms), the
 * two group widths bitwise equal; partials start NaN, so a chunk or column never written shows. */
static void check_bias(int N, int cols, int ldx, int off) {
    assert(off + cols <= ldx);
    const bool v8 = cols % 8 == 0 && ldx % 8 == 0 && off % 8 == 0;
    const std::vector<mp_bf16> x0 = block_rows(N, ldx, off, cols), b = bias_random(cols);
    const std::vector<mp_bf16> want = bias_add_want(x0, b, N, ldx, off);
    for (int g : {8, 1}) {
        if (g == 8 && !v8) continue;
        std::vector<mp_bf16> x = x0;
        const bias_add_op op{x.data() + off, b.data(), ldx, cols};
        if (g == 8) vec_replay<8>((int64_t)N * cols, op);
        else vec_replay<1>((int64_t)N * cols, op);
        CHECK(memcmp(x.data(), want.data(), x.size() * sizeof x[0]) == 0,
              "bias_add N=%d cols=%d ldx=%d off=%d groups of %d: not bf16(x + b) bitwise (or a column outside written)",
              N, cols, ldx, off, g);
    }
    int rows, nc;
    mp_row_chunks(N, &rows, &nc);
    CHECK(mp_cuda_chunk_partial_floats(N, cols) == (size_t)nc * cols, "bias_bwd scratch size");
    const std::vector<float> order = bias_db_order(x0, N, ldx, off, cols, 0.25f);
    std::vector<double> ref(cols, 0.0), mag(cols, 0.0);
    for (int j = 0; j < cols; j++)
        for (int n = 0; n < N; n++) {
            const double v = __bfloat162float(x0[(size_t)n * ldx + off + j]);
            ref[j] += v, mag[j] += fabs(v);
        }
    std::vector<float> db1;
    for (int g : {8, 1}) {
        if (g == 8 && !v8) continue;
        std::vector<float> partial(mp_cuda_chunk_partial_floats(N, cols), NAN), db(cols, 0.25f);
        for (int c = 0; c < nc; c++)   /* bias_bwd_chunk_kernel<g>: thread j / g of chunk c */
            for (int j = 0; j < cols; j += g) {
                const int64_t n0 = (int64_t)c * rows, n1 = std::min<int64_t>(n0 + rows, N);
                if (g == 8) bias_bwd_group<8>(partial.data() + (size_t)c * cols, x0.data() + off, ldx, n0, n1, j);
                else bias_bwd_group<1>(partial.data() + (size_t)c * cols, x0.data() + off, ldx, n0, n1, j);
            }
        for (int j = 0; j < cols; j++) {   /* mp_chunk_sum_kernel */
            float s = 0.0f;
            for (int c = 0; c < nc; c++) s += partial[(size_t)c * cols + j];
            db[j] += s;
        }
        CHECK(memcmp(db.data(), order.data(), cols * sizeof(float)) == 0,
              "bias_bwd N=%d cols=%d ldx=%d groups of %d: db is not the contract's fixed-order sum bit for bit", N, cols,
              ldx, g);
        int bad = 0;
        for (int j = 0; j < cols; j++) bad += !(fabs(db[j] - 0.25 - ref[j]) <= 1e-6 * mag[j] + 1e-6);
        CHECK(bad == 0, "bias_bwd N=%d cols=%d: %d columns off float64", N, cols, bad);
        if (db1.empty()) db1 = db;
        else CHECK(memcmp(db.data(), db1.data(), cols * sizeof(float)) == 0, "bias_bwd: groups of 8 and of 1 differ");
    }
}

/* head_rmsnorm_fwd_kernel<VEC, V16> replayed warp by warp, lane by lane (lanes touch disjoint columns, so
 * one after another is the launch): the input copy, the sums of squares, the butterfly, the in-place store.
 * x: the first head's column of row 0 (rows ldx apart). */
template <int VEC, bool V16>
static void head_fwd_replay(mp_bf16 *x, int ldx, mp_bf16 *x_save, std::vector<float> &rstd, const std::vector<mp_bf16> &w,
                            int N, int H, int hd, float eps) {
    const int64_t M = (int64_t)N * H, blocks = (M + FWD_ROWS_PER_BLOCK - 1) / FWD_ROWS_PER_BLOCK;
    for (int64_t b = 0; b < blocks; b++)
        for (int warp = 0; warp < FWD_ROWS_PER_BLOCK; warp++) {
            const int64_t m = b * FWD_ROWS_PER_BLOCK + warp;
            if (m >= M) continue;
            mp_bf16 *xr = head_rms_row(x, ldx, m, H, hd);
            float ss[MP_WARP];
            for (int lane = 0; lane < MP_WARP; lane++) {
                if (x_save) rms_lane_copy<VEC, V16>(x_save + m * hd, xr, hd, lane);
                ss[lane] = rms_fwd_lane_ss<VEC, V16>(xr, hd, lane);
            }
            const float r = rms_rstd(warp_sum_host(ss), hd, eps);
            rstd[m] = r;
            for (int lane = 0; lane < MP_WARP; lane++) rms_fwd_lane_store<VEC, V16>(xr, xr, w.data(), r, hd, lane);
        }
}

/* rmsnorm_bwd_chunk_kernel<VEC, V16, true> (W = rms_bwd_warps(hd) warps per chunk of pairs) and
 * mp_chunk_sum_kernel replayed; every lane's dot before the in-place updates (the butterfly needs them all). */
template <int VEC, bool V16>
static void head_bwd_replay(mp_bf16 *dx, int ldx, std::vector<float> &dw, const std::vector<mp_bf16> &xs,
                            const std::vector<float> &rstd, const std::vector<mp_bf16> &w, int N, int H, int hd) {
    const int64_t M = (int64_t)N * H;
    int rows, nc;
    mp_row_chunks(M, &rows, &nc);
    const int W = rms_bwd_warps(hd);
    std::vector<float> partial(mp_cuda_chunk_partial_floats(M, hd), NAN), acc((size_t)W * hd);
    for (int c = 0; c < nc; c++) {
        const int64_t m0 = (int64_t)c * rows, m1 = std::min<int64_t>(m0 + rows, M);
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int warp = 0; warp < W; warp++)
            for (int64_t m = m0 + warp; m < m1; m += W) {
                mp_bf16 *g = head_rms_row(dx, ldx, m, H, hd);
                const mp_bf16 *xr = xs.data() + m * hd;
                const float r = rstd[m];
                float dots[MP_WARP];
                for (int lane = 0; lane < MP_WARP; lane++) dots[lane] = rms_bwd_lane_dot<VEC, V16>(g, xr, w.data(), hd, lane);
                const float cc = warp_sum_host(dots) / (float)hd * r * r;
                for (int lane = 0; lane < MP_WARP; lane++)
                    rms_bwd_lane_update<VEC, V16, false>(g, acc.data() + (size_t)warp * hd, g, xr, w.data(), r, cc, hd, lane);
            }
        for (int tid = 0; tid < W * MP_WARP; tid++)
            rms_bwd_fold<VEC>(partial.data() + (size_t)c * hd, acc.data(), W, hd, tid, W * MP_WARP);
    }
    for (int i = 0; i < hd; i++) {   /* mp_chunk_sum_kernel */
        float s = 0.0f;
        for (int c = 0; c < nc; c++) s += partial[(size_t)c * hd + i];
        dw[i] += s;
    }
}

/* One per-head RMSNorm problem: the H heads of hd columns at column off of N rows ldx wide (a block of the
 * fused [q | k | v] rows), its input x0 and output gradient dy0 (block_rows: 1000 + column outside the
 * block), w in [0.5, 1.5]; at(m, i): element i of pair m's head. */
struct HeadCase {
    int N, H, hd, ldx, off;
    int64_t M;
    std::vector<mp_bf16> x0, dy0, w;
    size_t at(int64_t m, int i) const { return (size_t)(m / H) * ldx + off + (size_t)(m % H) * hd + i; }
};
static HeadCase head_case(int N, int H, int hd, int ldx, int off) {
    assert(off + H * hd <= ldx);
    HeadCase c{N, H, hd, ldx, off, (int64_t)N * H, block_rows(N, ldx, off, H * hd), block_rows(N, ldx, off, H * hd),
               std::vector<mp_bf16>(hd)};
    for (auto &e : c.w) e = __float2bfloat16_rn(1.0f + 0.5f * rnd_unit());
    return c;
}

/* The forward's elements that break its contract: rstd off float64 by more than 1e-5 relative, y (x after
 * the call) off float64 by more than one bf16 ulp (rel 2^-8 + 1e-6: the fp32 roundings, then bf16's), x_save
 * (dense [M, hd]) not bitwise the input; -1 when a column outside the heads changed. */
static int head_fwd_bad(const HeadCase &c, const std::vector<mp_bf16> &y, const std::vector<mp_bf16> &xs,
                        const std::vector<float> &r, float eps) {
    auto f = [](mp_bf16 v) { return (double)__bfloat162float(v); };
    if (!outside_same(y, c.x0, c.ldx, c.off, c.H * c.hd)) return -1;
    int bad = 0;
    for (int64_t m = 0; m < c.M; m++) {
        double ss = 0;
        for (int i = 0; i < c.hd; i++) ss += f(c.x0[c.at(m, i)]) * f(c.x0[c.at(m, i)]);
        const double rr = 1.0 / sqrt(ss / c.hd + eps);
        bad += !(fabs(r[m] - rr) <= 1e-5 * rr);
        for (int i = 0; i < c.hd; i++) {
            const double ry = f(c.x0[c.at(m, i)]) * rr * f(c.w[i]);
            bad += !(fabs(f(y[c.at(m, i)]) - ry) <= fabs(ry) / 256 + 1e-6);
            bad += memcmp(&xs[m * c.hd + i], &c.x0[c.at(m, i)], 2) != 0;
        }
    }
    return bad;
}

/* The backward's elements that break its contract, from the saved input xs and fp32 rstd: dx (written over
 * dy0, not added) off float64 by more than rel 2^-8 + 1e-5, dw (from dw0) off float64 by more than 1e-4
 * (1 + |ref|); -1 when a column outside the heads changed. */
static int head_bwd_bad(const HeadCase &c, const std::vector<mp_bf16> &dx, const std::vector<float> &dw, float dw0,
                        const std::vector<mp_bf16> &xs, const std::vector<float> &rstd) {
    auto f = [](mp_bf16 v) { return (double)__bfloat162float(v); };
    if (!outside_same(dx, c.dy0, c.ldx, c.off, c.H * c.hd)) return -1;
    std::vector<double> ref_dw(c.hd, 0.0);
    int bad = 0;
    for (int64_t m = 0; m < c.M; m++) {
        const double r = rstd[m];
        double dot = 0;
        for (int i = 0; i < c.hd; i++) dot += f(c.w[i]) * f(c.dy0[c.at(m, i)]) * f(xs[m * c.hd + i]);
        for (int i = 0; i < c.hd; i++) {
            const double g = f(c.dy0[c.at(m, i)]), xi = f(xs[m * c.hd + i]);
            const double rd = r * (f(c.w[i]) * g - xi * r * r * dot / c.hd);
            bad += !(fabs(f(dx[c.at(m, i)]) - rd) <= fabs(rd) / 256 + 1e-5);
            ref_dw[i] += g * xi * r;
        }
    }
    for (int i = 0; i < c.hd; i++) bad += !(fabs(dw[i] - dw0 - ref_dw[i]) <= 1e-4 * (1 + fabs(ref_dw[i])));
    return bad;
}

/* The backward's dw from init by its contract's order, written out: per chunk of mp_row_chunks(N H) pairs,
 * warp w of W = rms_bwd_warps(hd) sums dy x rstd over the pairs m0 + w, m0 + w + W, ... in order from 0,
 * the warps are added in order, the chunks in order from 0, then the one init + total. */
static std::vector<float> head_dw_order(const HeadCase &c, const std::vector<mp_bf16> &xs, const std::vector<float> &rstd,
                                        float init) {
    int rows, nc;
    mp_row_chunks(c.M, &rows, &nc);
    const int W = rms_bwd_warps(c.hd);
    std::vector<float> dw(c.hd, init);
    for (int i = 0; i < c.hd; i++) {
        float total = 0.0f;
        for (int k = 0; k < nc; k++) {
            const int64_t m0 = (int64_t)k * rows, m1 = std::min<int64_t>(m0 + rows, c.M);
            float part = 0.0f;
            for (int wi = 0; wi < W; wi++) {
                float a = 0.0f;
                for (int64_t m = m0 + wi; m < m1; m += W)
                    a += __bfloat162float(c.dy0[c.at(m, i)]) * __bfloat162float(xs[m * c.hd + i]) * rstd[m];
                part = wi == 0 ? a : part + a;
            }
            total += part;
        }
        dw[i] += total;
    }
    return dw;
}

/* The per-head norm replayed in the launches hd allows (hd % 8 == 0: groups of 8 with 16-byte and with
 * 2-byte accesses, which the launcher picks by alignment and which must agree bit for bit; else single
 * columns): the forward with and without x_save (the same bits; rstd and x_save start NaN, so an element
 * never written shows), head_fwd_bad; the backward from the saved input and rstd, head_bwd_bad, and dw
 * bitwise head_dw_order. */
static void check_head_rmsnorm(int N, int H, int hd, int ldx, int off) {
    const float eps = 1e-3f;   /* moves rstd by ~4e-4 here, 40x its tolerance: an eps dropped shows */
    const HeadCase c = head_case(N, H, hd, ldx, off);
    const int64_t M = c.M;
    const std::vector<int> paths = hd % 8 ? std::vector<int>{2} : std::vector<int>{0, 1};
    std::vector<mp_bf16> y0, xs0;
    std::vector<float> rstd;
    for (int path : paths)
        for (int save : {1, 0}) {
            std::vector<mp_bf16> y = c.x0, xs(M * hd, __float2bfloat16_rn(NAN));
            std::vector<float> r(M, NAN);
            mp_bf16 *xp = y.data() + off, *sp = save ? xs.data() : NULL;
            if (path == 0) head_fwd_replay<8, true>(xp, ldx, sp, r, c.w, N, H, hd, eps);
            else if (path == 1) head_fwd_replay<8, false>(xp, ldx, sp, r, c.w, N, H, hd, eps);
            else head_fwd_replay<1, false>(xp, ldx, sp, r, c.w, N, H, hd, eps);
            if (!y0.empty()) {
                CHECK(!memcmp(y.data(), y0.data(), y.size() * 2) && !memcmp(r.data(), rstd.data(), M * sizeof(float)) &&
                          (!save || !memcmp(xs.data(), xs0.data(), xs.size() * 2)),
                      "head_rmsnorm fwd N=%d H=%d hd=%d ldx=%d: path %d save %d differs from path %d", N, H, hd, ldx, path,
                      save, paths[0]);
                continue;
            }
            const int bad = head_fwd_bad(c, y, xs, r, eps);
            CHECK(bad == 0, "head_rmsnorm fwd N=%d H=%d hd=%d ldx=%d off=%d: %d elements off float64 or x_save (-1: a "
                  "column outside the heads written)", N, H, hd, ldx, off, bad);
            y0 = y, xs0 = xs, rstd = r;
        }
    const std::vector<float> order = head_dw_order(c, xs0, rstd, 0.25f);
    std::vector<mp_bf16> dx1;
    for (int path : paths) {
        std::vector<mp_bf16> dx = c.dy0;
        std::vector<float> dw(hd, 0.25f);
        if (path == 0) head_bwd_replay<8, true>(dx.data() + off, ldx, dw, xs0, rstd, c.w, N, H, hd);
        else if (path == 1) head_bwd_replay<8, false>(dx.data() + off, ldx, dw, xs0, rstd, c.w, N, H, hd);
        else head_bwd_replay<1, false>(dx.data() + off, ldx, dw, xs0, rstd, c.w, N, H, hd);
        const int bad = head_bwd_bad(c, dx, dw, 0.25f, xs0, rstd);
        CHECK(bad == 0, "head_rmsnorm bwd path %d N=%d H=%d hd=%d ldx=%d: %d dx/dw elements off float64 (-1: a column "
              "outside the heads written)", path, N, H, hd, ldx, bad);
        CHECK(memcmp(dw.data(), order.data(), hd * sizeof(float)) == 0,
              "head_rmsnorm bwd path %d N=%d H=%d hd=%d: dw is not the contract's fixed-order sum bit for bit", path, N, H, hd);
        if (dx1.empty()) dx1 = dx;
        else CHECK(!memcmp(dx.data(), dx1.data(), dx.size() * 2), "head_rmsnorm bwd N=%d H=%d hd=%d: path %d dx differs", N,
                   H, hd, path);
    }
}

/* AdamW's 16-byte path (k_adamw.cu): its launch replayed (vec_replay: chunks of 8, then the n % 8 tail one
 * per thread), p, m, v and the bf16 copy bitwise against the one-element path and against adamw_elem
 * element by element, p against float64 PyTorch AdamW; the device scale factor read through the pointer. */
[[maybe_unused]] static void check_adamw_vec(int64_t n) {
    std::vector<float> p0(n), g(n), m0(n), v0(n);
    for (int64_t i = 0; i < n; i++)
        p0[i] = rnd_unit(), g[i] = rnd_unit(), m0[i] = 0.1f * rnd_unit(), v0[i] = 0.01f * (rnd_unit() + 1.0f);
    const float lr = 1e-3f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, wd = 0.1f, gs = 2.0f, gsd = 0.25f;
    const int step = 3;
    const float bc1 = (float)(1.0 / (1.0 - pow((double)b1, step))), bc2 = (float)(1.0 / (1.0 - pow((double)b2, step)));
    std::vector<float> p8 = p0, m8 = m0, v8 = v0, p1 = p0, m1 = m0, v1 = v0;
    std::vector<__nv_bfloat16> b8(n, __float2bfloat16_rn(NAN)), b1v(n, __float2bfloat16_rn(NAN));
    vec_replay<8>(n, adamw_op{p8.data(), b8.data(), g.data(), m8.data(), v8.data(), lr, b1, b2, eps, wd, bc1, bc2, gs, &gsd});
    vec_replay<1>(n, adamw_op{p1.data(), b1v.data(), g.data(), m1.data(), v1.data(), lr, b1, b2, eps, wd, bc1, bc2, gs, &gsd});
    CHECK(!memcmp(p8.data(), p1.data(), n * 4) && !memcmp(m8.data(), m1.data(), n * 4) && !memcmp(v8.data(), v1.data(), n * 4) &&
              !memcmp(b8.data(), b1v.data(), n * 2),
          "adamw: 16-byte path differs from the one-element path (n=%lld)", (long long)n);
    int bad = 0;
    for (int64_t i = 0; i < n; i++) {
        float mi = m0[i], vi = v0[i];
        const float pi = adamw_elem(p0[i], g[i], &mi, &vi, lr, b1, b2, eps, wd, bc1, bc2, gs * gsd);
        bad += pi != p1[i] || mi != m1[i] || vi != v1[i] || __bfloat162float(b1v[i]) != bf16_round(pi);
        const double gd = (double)g[i] * gs * gsd, md = b1 * (double)m0[i] + (1 - (double)b1) * gd,
                     vd = b2 * (double)v0[i] + (1 - (double)b2) * gd * gd;
        const double pd = p0[i] - lr * ((md * bc1) / (sqrt(vd * bc2) + eps) + wd * (double)p0[i]);
        bad += !(fabs(p1[i] - pd) <= 1e-6 * (1 + fabs(pd)));
    }
    CHECK(bad == 0, "adamw (n=%lld): %d elements not written once or off adamw_elem / float64", (long long)n, bad);
}

/* rowmax_kernel and sumexp_kernel<G, V16, T> (k_xent.cu) replayed: every thread of every row's block
 * through xent_row_thread, then the block trees. */
template <int G, bool V16, typename T>
static void xent_rows_replay(std::vector<float> &mx, std::vector<float> &se, const std::vector<T> &lg, int N, int v_local,
                             int v_valid) {
    std::vector<float> th(XENT_THREADS);
    for (int n = 0; n < N; n++) {
        const T *l = lg.data() + (size_t)n * v_local;
        for (int t = 0; t < XENT_THREADS; t++) th[t] = xent_row_thread<true, G, V16>(l, v_valid, 0.0f, t);
        mx[n] = block_sum_host<float, true>(th);
        if (mx[n] == -INFINITY) {
            se[n] = 0.0f;
            continue;
        }
        for (int t = 0; t < XENT_THREADS; t++) th[t] = xent_row_thread<false, G, V16>(l, v_valid, mx[n], t);
        se[n] = block_sum_host(th);
    }
}

/* xent_bwd_kernel<VEC, T> (k_xent.cu) replayed: every thread of every row's block through xent_bwd_at. */
template <int VEC, typename T>
static void xent_bwd_replay(std::vector<T> &lg, const std::vector<float> &mx, const std::vector<float> &se,
                            const std::vector<int32_t> &tgt, float dloss, int N, int v_local, int v_valid, int v_start) {
    for (int n = 0; n < N; n++) {
        const float f = mx[n] == -INFINITY ? 0.0f : dloss / se[n];
        const int64_t c = (int64_t)tgt[n] - v_start;
        for (int t = 0; t < XENT_THREADS; t++)
            for (int j0 = VEC * t; j0 < v_local; j0 += VEC * XENT_THREADS)
                xent_bwd_at<VEC>(lg.data() + (size_t)n * v_local, j0, mx[n], f, c, dloss, v_valid);
    }
}

/* Float64 reference of one row's statistics over its first n logits, x(j) the j-th as fp32: *m the max,
 * *sd the sum of exp(x - max) (0 when no logit is finite). */
template <typename F>
static void ref_row_stats(F x, int n, double *m, double *sd) {
    *m = -INFINITY, *sd = 0.0;
    for (int j = 0; j < n; j++) *m = std::max(*m, (double)x(j));
    if (*m != -INFINITY)
        for (int j = 0; j < n; j++) *sd += exp((double)x(j) - *m);
}

/* A loss got against its float64 reference: within 1e-5 relative when finite, the same inf or NaN when not. */
static bool loss_close(double got, double ref) {
    return std::isnan(ref) ? std::isnan(got) : !std::isfinite(ref) ? got == ref : fabs(got - ref) <= 1e-5 * fabs(ref) + 1e-6;
}

/* The cross-entropy's row statistics and backward, bf16 and fp32 logits: rowmax and sumexp replayed with
 * 16-byte and one-element loads (v_local a multiple of 16 bytes: the same groups, bitwise equal), rowmax
 * the exact max, sumexp within 1e-5 of float64; the backward's 16-byte path bitwise against the
 * one-element path and within one rounding of float64 dloss (softmax - onehot); padding columns 0; a
 * row of -inf logits gets -dloss at its target only; targets outside the slice get no -dloss. */
template <typename T>
static void check_xent_bwd_vec(int N, int v_local, int v_valid, int v_start) {
    constexpr int V = 16 / sizeof(T);
    std::vector<T> lg((size_t)N * v_local);
    std::vector<float> lf(lg.size()), mx(N), se(N);
    std::vector<int32_t> tgt(N);
    for (size_t i = 0; i < lg.size(); i++) mp_from_f32(&lg[i], 6.0f * rnd_unit()), lf[i] = mp_to_f32(lg[i]);
    for (int j = 0; j < v_local; j++) mp_from_f32(&lg[j], -INFINITY), lf[j] = -INFINITY;   /* row 0: no finite logit */
    for (int n = 0; n < N; n++)   /* vocab padding: large, to show if it were ever read as a logit */
        for (int j = v_valid; j < v_local; j++) mp_from_f32(&lg[(size_t)n * v_local + j], 100.0f), lf[(size_t)n * v_local + j] = 100.0f;
    for (int n = 0; n < N; n++) tgt[n] = v_start - 3 + (int32_t)(rnd_u64() % (uint64_t)(v_valid + 6));
    if (v_local % V == 0) {
        std::vector<float> mx1(N), se1(N);
        xent_rows_replay<V, true>(mx, se, lg, N, v_local, v_valid);
        xent_rows_replay<V, false>(mx1, se1, lg, N, v_local, v_valid);
        CHECK(mx == mx1 && !memcmp(se.data(), se1.data(), N * sizeof(float)),
              "xent rowmax/sumexp (%zu-byte logits, v_local %d): 16-byte loads differ from one-element", sizeof(T), v_local);
    } else {
        xent_rows_replay<1, false>(mx, se, lg, N, v_local, v_valid);
    }
    int bad_stats = 0;
    for (int n = 0; n < N; n++) {
        double m, sd;
        ref_row_stats([&](int j) { return lf[(size_t)n * v_local + j]; }, v_valid, &m, &sd);
        bad_stats += !((double)mx[n] == m && fabs(se[n] - sd) <= 1e-5 * sd);
    }
    CHECK(bad_stats == 0, "xent rowmax/sumexp (%zu-byte logits, N %d v_local %d v_valid %d): %d rows off float64",
          sizeof(T), N, v_local, v_valid, bad_stats);
    const float dloss = 0.125f;
    std::vector<T> gv = lg, g1 = lg;
    if (v_local % V == 0) xent_bwd_replay<V>(gv, mx, se, tgt, dloss, N, v_local, v_valid, v_start);
    xent_bwd_replay<1>(g1, mx, se, tgt, dloss, N, v_local, v_valid, v_start);
    if (v_local % V == 0)
        CHECK(!memcmp(gv.data(), g1.data(), g1.size() * sizeof(T)), "xent bwd (%zu-byte logits, v_local %d): 16-byte path differs",
              sizeof(T), v_local);
    int bad = 0;
    for (int n = 0; n < N; n++) {
        const int64_t c = (int64_t)tgt[n] - v_start;
        for (int j = 0; j < v_local; j++) {
            double r = 0.0;
            if (j < v_valid) {
                r = n == 0 ? 0.0 : dloss * exp((double)lf[(size_t)n * v_local + j] - mx[n]) / se[n];
                if (j == c) r -= dloss;
            }
            const double got = mp_to_f32(g1[(size_t)n * v_local + j]), tol = sizeof(T) == 2 ? 1.0 / 256 : 1e-5;
            bad += !(fabs(got - r) <= tol * fabs(r) + 1e-9);
        }
    }
    CHECK(bad == 0, "xent bwd (%zu-byte logits, N %d v_local %d v_valid %d): %d columns off float64", sizeof(T), N, v_local,
          v_valid, bad);
}

/* xent_fwd_kernel<G, V16, T> (k_xent.cu) replayed: every thread of every row's block through
 * xent_fwd_thread, the pairs through mp_block_reduce's tree with xent_ms_combine (xent_warp_combine's
 * operand order: own pair first), the target as thread 0 reads it. */
template <int G, bool V16, typename T>
static void xent_fwd_replay(std::vector<float> &mx, std::vector<float> &se, std::vector<float> &tl,
                            const std::vector<T> &lg, const std::vector<int32_t> &tgt, int N, int v_local, int v_valid,
                            int v_start) {
    std::vector<xent_ms> th(XENT_THREADS);
    for (int n = 0; n < N; n++) {
        const T *l = lg.data() + (size_t)n * v_local;
        for (int t = 0; t < XENT_THREADS; t++) th[t] = xent_fwd_thread<G, V16>(l, v_valid, t);
        const xent_ms r = block_tree_host(th, xent_ms_combine, xent_ms{-INFINITY, 0.0f});
        mx[n] = r.m, se[n] = r.s;
        tl[n] = xent_tlogit(l, (int64_t)tgt[n] - v_start, v_local);
    }
}

/* The one-pass forward (xent_fwd_kernel), bf16 and fp32 logits, on N >= 6 rows: 0 all -inf; 1 its max in
 * the last column group; 2 rising (the max moves in every group: the rescale each time); 3 -inf and
 * +-3e38 mixed in (exp of an overflowed difference); 4 one finite logit; the rest random; padding 100
 * (it must never count); targets also outside the slice and in the padding (read: the v_local rule).
 * Against float64: rowmax exact, tlogit exact, sumexp and the loss within 1e-5 relative. Against the
 * three-kernel replay (xent_rows_replay, another summation order): rowmax bitwise, sumexp within 2e-6.
 * 16-byte and one-element loads (v_local a multiple of 16 bytes) bitwise equal. */
template <typename T>
static void check_xent_fwd(int N, int v_local, int v_valid, int v_start) {
    constexpr int V = 16 / sizeof(T);
    assert(N >= 6 && v_valid >= 2);
    std::vector<T> lg((size_t)N * v_local);
    std::vector<int32_t> tgt(N);
    auto at = [&](int n, int j) -> T & { return lg[(size_t)n * v_local + j]; };
    for (int n = 0; n < N; n++)
        for (int j = 0; j < v_local; j++) {
            float x = 6.0f * rnd_unit();
            if (n == 0) x = -INFINITY;
            if (n == 1) x = j == v_valid - 1 ? 30.0f : x;
            if (n == 2) x = -20.0f + 40.0f * j / v_valid;
            if (n == 3 && j % 7 == 3) x = j % 2 ? 3e38f : -3e38f;
            if (n == 3 && j % 5 == 1) x = -INFINITY;
            if (n == 4) x = j == v_valid / 2 ? 2.5f : -INFINITY;
            mp_from_f32(&at(n, j), j < v_valid ? x : 100.0f);
        }
    for (int n = 0; n < N; n++) tgt[n] = v_start - 3 + (int32_t)(rnd_u64() % (uint64_t)(v_local + 6));
    tgt[4] = v_start + v_valid / 2;
    std::vector<float> mx(N), se(N), tl(N), mx3(N), se3(N);
    if (v_local % V == 0) {
        std::vector<float> mx1(N), se1(N), tl1(N);
        xent_fwd_replay<V, true>(mx, se, tl, lg, tgt, N, v_local, v_valid, v_start);
        xent_fwd_replay<V, false>(mx1, se1, tl1, lg, tgt, N, v_local, v_valid, v_start);
        CHECK(!memcmp(mx.data(), mx1.data(), N * sizeof(float)) && !memcmp(se.data(), se1.data(), N * sizeof(float)),
              "xent fwd (%zu-byte logits, v_local %d): 16-byte loads differ from one-element", sizeof(T), v_local);
        xent_rows_replay<V, true>(mx3, se3, lg, N, v_local, v_valid);
    } else {
        xent_fwd_replay<1, false>(mx, se, tl, lg, tgt, N, v_local, v_valid, v_start);
        xent_rows_replay<1, false>(mx3, se3, lg, N, v_local, v_valid);
    }
    int bad = 0, bad3 = 0;
    double worst3 = 0.0;
    for (int n = 0; n < N; n++) {
        double m, sd;
        ref_row_stats([&](int j) { return mp_to_f32(at(n, j)); }, v_valid, &m, &sd);
        const int64_t c = (int64_t)tgt[n] - v_start;
        const double t = (c >= 0 && c < v_local) ? (double)mp_to_f32(at(n, (int)c)) : 0.0;
        const bool loss_ok = loss_close(xent_loss_row(mx[n], se[n], tl[n]), log(sd) + m - t);
        bad += !((double)mx[n] == m && (double)tl[n] == t && fabs(se[n] - sd) <= 1e-5 * sd && loss_ok);
        const double d3 = fabs((double)se[n] - se3[n]) / std::max((double)se3[n], 1e-30);
        worst3 = std::max(worst3, d3);
        bad3 += !(!memcmp(&mx[n], &mx3[n], sizeof(float)) && d3 <= 2e-6);
    }
    CHECK(bad == 0, "xent fwd (%zu-byte logits, N %d v_local %d v_valid %d): %d rows off float64", sizeof(T), N, v_local,
          v_valid, bad);
    CHECK(bad3 == 0, "xent fwd (%zu-byte logits, N %d v_local %d v_valid %d): %d rows off the three-kernel path (worst sumexp %.3g)",
          sizeof(T), N, v_local, v_valid, bad3, worst3);
    CHECK(se[0] == 0.0f && mx[0] == -INFINITY && se[4] == 1.0f, "xent fwd: an all -inf row, a one-logit row");
}

/* The one-pass forward over tp vocab shards (layers/llama.c at tp > 1): xent_fwd_kernel replayed per shard
 * (v_local columns each, the last ones padding: shards with few and with no valid column), the MAX over
 * shards, each shard's sum taken to it by xent_rescale_row (rescale_kernel), the SUM in rank order.
 * Rows: random; one whose max sits in the last shard with a valid column; all -inf in shard 0 only; all
 * -inf everywhere. Against float64: rowmax and tlogit exact, sumexp and the loss within 1e-5. */
template <typename T>
static void check_xent_fwd_sharded(int N, int V, int tp) {
    const int v_local = (V + tp - 1) / tp;
    assert(N >= 4);
    std::vector<float> g((size_t)N * V);
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) {
            float x = 6.0f * rnd_unit();
            if (n == 1 && j == V - 1) x = 25.0f;
            if (n == 2 && j < v_local) x = -INFINITY;
            if (n == 3) x = -INFINITY;
            T r;
            mp_from_f32(&r, x);   /* the values the shard's dtype holds */
            g[(size_t)n * V + j] = mp_to_f32(r);
        }
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = (int32_t)(rnd_u64() % (uint64_t)V);
    std::vector<float> mx(N, -INFINITY), se(N, 0.0f), tl(N, 0.0f);
    std::vector<std::vector<float>> lm(tp, std::vector<float>(N)), ls(tp, std::vector<float>(N)), lt(tp, std::vector<float>(N));
    for (int r = 0; r < tp; r++) {
        const int v_start = r * v_local, v_valid = std::max(0, std::min(v_local, V - v_start));
        std::vector<T> lg((size_t)N * v_local);
        for (int n = 0; n < N; n++)
            for (int j = 0; j < v_local; j++) mp_from_f32(&lg[(size_t)n * v_local + j], j < v_valid ? g[(size_t)n * V + v_start + j] : 100.0f);
        xent_fwd_replay<1, false>(lm[r], ls[r], lt[r], lg, tgt, N, v_local, v_valid, v_start);
        for (int n = 0; n < N; n++) mx[n] = std::max(mx[n], lm[r][n]);   /* the all-reduce MAX */
    }
    for (int r = 0; r < tp; r++)   /* rescale, then the all-reduce SUM in rank order */
        for (int n = 0; n < N; n++) se[n] += xent_rescale_row(ls[r][n], lm[r][n], mx[n]), tl[n] += lt[r][n];
    int bad = 0;
    for (int n = 0; n < N; n++) {
        double m, sd;
        ref_row_stats([&](int j) { return g[(size_t)n * V + j]; }, V, &m, &sd);
        const double t = g[(size_t)n * V + tgt[n]];
        const bool loss_ok = loss_close(xent_loss_row(mx[n], se[n], tl[n]), log(sd) + m - t);
        bad += !((double)mx[n] == m && (double)tl[n] == t && fabs(se[n] - sd) <= 1e-5 * sd && loss_ok);
    }
    CHECK(bad == 0, "xent fwd over %d shards (%zu-byte logits, N %d V %d): %d rows off float64", tp, sizeof(T), N, V, bad);
    CHECK(se[3] == 0.0f && mx[3] == -INFINITY && se[2] > 0.0f, "xent fwd sharded: an all -inf row, one -inf in shard 0");
}

/* ---- the rounding bounds the device checks share (check_kernels_device.cu) ----
 * CUDA's single-precision functions per the CUDA C++ Programming Guide (Mathematical Functions, without
 * -use_fast_math, which cmake/cuda.cmake never sets): expf within 2 ulp, logf within 1 ulp; __expf (not
 * used by the kernels) 2 + floor(|1.173 x|) ulp. A rounded fp32 operation: 2^-24 relative (half an ulp). */
#define MP_U24 (1.0 / 16777216.0)                /* 2^-24: half an fp32 ulp, relative */
#define MP_U53 (1.0 / 9007199254740992.0)       /* 2^-53: half a float64 ulp, relative */
#define MP_BF16_U (1.0 / 256.0)                  /* 2^-8: a bf16 store (8 significant bits, to nearest) */
#define MP_EXPF_ULPS 2                           /* CUDA expf's maximum error, in ulps of its result */

/* gamma_n = n u / (1 - n u): a sum of n + 1 terms in any order is off by at most gamma_n times the sum of
 * their magnitudes (Higham, Accuracy and Stability, 3.1); u 2^-24 (fp32) or 2^-53 (float64). */
[[maybe_unused]] static double gamma_f32(double n) { return n * MP_U24 / (1.0 - n * MP_U24); }
[[maybe_unused]] static double gamma_f64(double n) { return n * MP_U53 / (1.0 - n * MP_U53); }

/* A float64 sum of x (of x^2 when SQUARE) compensated (Neumaier): within 2 2^-53 of the exact sum plus
 * n^2 2^-106 of its magnitude, so a reference that a device sum is judged against adds nothing to the bound
 * (a plain float64 loop over a million terms is itself off by up to n 2^-53). */
template <bool SQUARE = false, typename T>
static double sum_ref(const std::vector<T> &x) {
    double s = 0, c = 0;
    for (const T &e : x) {
        const double v = SQUARE ? (double)e * (double)e : (double)e, t = s + v;
        c += fabs(s) >= fabs(v) ? (s - t) + v : (v - t) + s;
        s = t;
    }
    return s + c;
}

/* The relative error bound of an fp32 sum of exps, sum_j expf(x_j - m), against float64 (the cross-entropy's
 * sumexp; m its max, range = max_j |x_j - m| over the finite x_j): each term off by range 2^-24 (the
 * subtraction's rounding, in the exponent) + 2 ulp (expf) <= (range + 4) 2^-24; the sum (nonnegative terms)
 * at most gamma_depth, depth = the longest chain of additions: a thread's v_valid / 256 (G = 1 columns at a
 * time, the worst) + 8 levels of the block tree. onepass (xent_fwd_thread, xent_ms_combine): a running sum
 * taken to a new max by rn(s * expf(old - new)) each time the max rises (<= v_valid / 256 + 1 times per
 * thread) and once per tree level (8): each time 2 ulp (expf) + 2^-24 (product) + the subtraction's
 * rounding, whose exponents telescope along any chain to at most 2 range 2^-24. */
[[maybe_unused]] static double xent_sum_rtol(int v_valid, double range, bool onepass) {
    const double depth = v_valid / 256.0 + 1 + 8, rescales = onepass ? v_valid / 256.0 + 1 + 8 : 0;
    const double per = (range + 2.0 * MP_EXPF_ULPS) * MP_U24 + (onepass ? 2.0 * range * MP_U24 : 0.0);
    return (1.0 + per) * (1.0 + gamma_f32(depth)) * (1.0 + (2.0 * MP_EXPF_ULPS + 1) * MP_U24 * rescales) *
               (1.0 + 1.0 / 1048576.0) - 1.0;
}

/* The relative error bound of xent_rescale_row(se, lm, gm) = rn(se * expf(rn(lm - gm))) against
 * se * exp(lm - gm) in float64 (lm finite):
 *   rn(lm - gm) = (lm - gm)(1 + e1), |e1| <= 2^-24: exp's argument off by d = |lm - gm| 2^-24 absolute,
 *     so the factor off by exp(d) - 1 relative: 9.5e-7 x 2 at |lm - gm| = 30 (not 1e-6 of slack);
 *   expf: 2 ulp <= 2 * 2^-23 of its result; the product: 2^-24.
 * Their product of (1 + e), with 2^-20 of the bound on top for the float64 reference's own rounding. */
static double xent_rescale_rtol(float lm, float gm) {
    const double d = fabs((double)lm - (double)gm) * MP_U24 * (1.0 + MP_U24);
    const double b = expm1(d) + (1.0 + expm1(d)) * (MP_EXPF_ULPS * 2.0 * MP_U24 + MP_U24 + MP_EXPF_ULPS * 2.0 * MP_U24 * MP_U24);
    return b * (1.0 + 1.0 / 1048576.0);
}

/* dev_xent_rescale's rows (N of them): a shard's sum se in [1, 51), the global max gm in (-10, 10), the
 * local max lm every 7th row -inf (a shard with no valid column), every 5th gm (factor 1), the rest up to
 * 30 below gm (differences in [16, 30): the subtraction's rounding matters). */
struct RescaleCase {
    std::vector<float> se, lm, gm;
};
static RescaleCase rescale_case(int N) {
    RescaleCase c{std::vector<float>(N), std::vector<float>(N), std::vector<float>(N)};
    for (int n = 0; n < N; n++) {
        c.se[n] = fabsf(bf16_round(50.0f * rnd_unit())) + 1.0f, c.gm[n] = 10.0f * rnd_unit();
        c.lm[n] = n % 7 == 0 ? -INFINITY : n % 5 == 0 ? c.gm[n] : c.gm[n] - 30.0f * fabsf(rnd_unit());
    }
    return c;
}
/* The rows of got (the rescaled sums) off: an empty shard not exactly 0, or a finite one past
 * xent_rescale_rtol of float64. */
static int rescale_bad(const RescaleCase &c, const std::vector<float> &got) {
    int bad = 0;
    for (size_t n = 0; n < got.size(); n++) {
        if (c.lm[n] == -INFINITY) {
            bad += got[n] != 0.0f;
            continue;
        }
        const double want = c.se[n] * exp((double)c.lm[n] - (double)c.gm[n]);
        bad += !(fabs(got[n] - want) <= xent_rescale_rtol(c.lm[n], c.gm[n]) * want);
    }
    return bad;
}
/* x moved k ulps (k < 0: down). */
static float ulps_from(float x, int k) {
    for (; k > 0; k--) x = nextafterf(x, INFINITY);
    for (; k < 0; k++) x = nextafterf(x, -INFINITY);
    return x;
}
/* The float farthest from exp(d) on the side sgn (+1 above, -1 below) that is still within MP_EXPF_ULPS
 * ulps of it: the worst result CUDA's expf may return. */
static float expf_worst(float d, int sgn) {
    const double t = exp((double)d);
    float f = (float)t;
    for (;;) {
        const float g = ulps_from(f, sgn);
        if (fabs((double)g - t) > MP_EXPF_ULPS * ((double)nextafterf(fabsf(g), INFINITY) - fabsf(g))) return f;
        f = g;
    }
}

/* The rescale (rescale_kernel) replayed with the device's rounding over `seeds` draws of dev_xent_rescale's
 * rows: rn(lm - gm), then an expf that returns the worst float within its 2 ulp (each row its own side
 * and, every third row, the correctly rounded one), then rn(se * e): rescale_bad finds no row. The replay
 * with the correctly rounded exp is xent_rescale_row's own expression to its exp's last ulp (so the replay
 * follows the kernel). A bound of 1e-6 relative fails it: the subtraction alone can use 1.9e-6. */
static void check_xent_rescale(int seeds) {
    const int N = 1000;
    int bad = 0, same = 0, rows = 0;
    for (int s = 0; s < seeds; s++) {
        const RescaleCase c = rescale_case(N);
        std::vector<float> got(N);
        for (int n = 0; n < N; n++) {
            if (c.lm[n] == -INFINITY) {
                got[n] = xent_rescale_row(c.se[n], c.lm[n], c.gm[n]);
                continue;
            }
            const float d = c.lm[n] - c.gm[n];
            const int side = (int)(rnd_u64() % 3) - 1;   /* -1, 0 (correctly rounded), +1 */
            const float e = side ? expf_worst(d, side) : (float)exp((double)d);
            got[n] = mp_mul_rn(c.se[n], e);
            if (!side) {   /* the host's expf (glibc: < 1 ulp) against the correctly rounded one */
                const float k = xent_rescale_row(c.se[n], c.lm[n], c.gm[n]);
                rows++, same += fabs((double)k - got[n]) <= 8.0 * MP_U24 * got[n];   /* e 1 ulp off: 2 ulp */
            }
        }
        bad += rescale_bad(c, got);
    }
    CHECK(bad == 0, "xent rescale replay (device rounding, expf %d ulp): %d rows of %d x %d past the bound", MP_EXPF_ULPS, bad,
          seeds, N);
    CHECK(same == rows, "xent rescale replay: %d of %d rows not xent_rescale_row's expression", rows - same, rows);
}

/* The cuBLASLt plan cache's keys (gemm_plan.h): the 1B step's GEMM calls as layers/ issues them (per layer
 * the fused q/k/v, o, the feature-major gate/up and down, then the head; forward, dx, dw) find one plan per
 * distinct key, a key differing in any single field (transposes, sizes, strides, C type, any alignment) is
 * another plan, and a key found is the one stored. */
[[maybe_unused]] static void check_gemm_plans(void) {
    const int N = 16384, D = 2048, I = 8192, KVd = 512, V = 32000;
    const int lin[][2] = {{D, D + 2 * KVd}, {D, D}, {D, V}};   /* token-major linears: qkv, o, head (in, out) */
    std::vector<mp_gemm_plan_key> keys;
    auto add = [&](const mp_gemm_plan_key &kk) {
        if (mp_gemm_plan_find(keys.data(), (int)keys.size(), &kk) < 0) keys.push_back(kk);
    };
    for (int layer = 0; layer < 3; layer++) {
        for (auto &l : lin) {
            const int in = l[0], out = l[1];
            mp_gemm_plan_key k[3];
            mp_gemm_plan_key_set(&k[0], 0, 1, N, out, in, in, in, out, 0, 256, 256, 256);
            mp_gemm_plan_key_set(&k[1], 0, 0, N, in, out, out, in, in, 0, 256, 256, 256);
            mp_gemm_plan_key_set(&k[2], 1, 0, out, in, N, out, in, in, 1, 256, 256, 256);
            for (auto &kk : k) add(kk);
        }
        mp_gemm_plan_key m[6];   /* the MLP (layers/llama.c mlp_forward, mlp_backward) */
        mp_gemm_plan_key_set(&m[0], 0, 1, 2 * I, N, D, D, D, N, 0, 256, 256, 256);
        mp_gemm_plan_key_set(&m[1], 1, 1, N, D, I, N, I, D, 0, 256, 256, 256);
        mp_gemm_plan_key_set(&m[2], 1, 1, I, N, D, I, D, N, 0, 256, 256, 256);
        mp_gemm_plan_key_set(&m[3], 1, 1, D, I, N, D, N, I, 1, 256, 256, 256);
        mp_gemm_plan_key_set(&m[4], 1, 0, N, D, 2 * I, N, D, D, 0, 256, 256, 256);
        mp_gemm_plan_key_set(&m[5], 0, 0, 2 * I, D, N, N, D, D, 1, 256, 256, 256);
        for (auto &kk : m) add(kk);
    }
    CHECK(keys.size() == 15, "the 1B step's GEMMs make %zu plans, expected 15 (3 linears x 3, the MLP's 6)", keys.size());
    mp_gemm_plan_key base;
    mp_gemm_plan_key_set(&base, 0, 1, 37, 53, 29, 40, 61, 61, 0, 256, 256, 256);
    std::vector<mp_gemm_plan_key> one = {base};
    CHECK(mp_gemm_plan_find(one.data(), 1, &base) == 0, "a stored key is found");
    for (int f = 0; f < 12; f++) {
        int v[12] = {0, 1, 37, 53, 29, 40, 61, 61, 0, 256, 256, 256};
        v[f] = f < 2 ? 1 - v[f] : f == 8 ? 1 : f >= 9 ? 128 : v[f] + 1;
        mp_gemm_plan_key k;
        mp_gemm_plan_key_set(&k, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]);
        CHECK(mp_gemm_plan_find(one.data(), 1, &k) == -1, "a key differing in field %d finds the stored plan", f);
    }
    CHECK(sizeof(mp_gemm_plan_key) == 12 * 4, "mp_gemm_plan_key has padding (%zu bytes)", sizeof(mp_gemm_plan_key));
}

/* The attention launchers' grids (mp_attn_grid): batch x heads past 65535 (the batch 2048 x 32 heads that
 * aborted when B H was grid.y alone) fit, every (b, h) decoded from (blockIdx.z, blockIdx.y) exactly once;
 * a batch or a head count past grid.y/z's 65535 is refused by mp_attn_grid_ok, not launched. */
[[maybe_unused]] static void check_attn_grid(void) {
    const int ok[][3] = {{1, 1, 1}, {7, 32, 2048}, {1, 1, 65535}, {3, 65535, 1}, {64, 64, 4096}, {2, 40, 65535}};
    for (auto &c : ok) {
        const dim3 g = mp_attn_grid(c[0], c[1], c[2]);
        CHECK(mp_attn_grid_ok(c[0], c[1], c[2]) && g.x == (unsigned)c[0] && g.y == (unsigned)c[1] && g.z == (unsigned)c[2] &&
                  g.y <= 65535 && g.z <= 65535 && (int64_t)g.y * g.z == (int64_t)c[1] * c[2],
              "attention grid tiles %d heads %d batch %d: %u x %u x %u", c[0], c[1], c[2], g.x, g.y, g.z);
    }
    CHECK(!mp_attn_grid_ok(1, 65536, 1) && !mp_attn_grid_ok(1, 1, 65536) && !mp_attn_grid_ok(0, 1, 1) &&
              !mp_attn_grid_ok(1, 0, 1) && !mp_attn_grid_ok((int64_t)1 << 31, 1, 1),
          "attention grid: out-of-range sizes accepted");
    const int B = 3, H = 5;   /* the kernels' decoding: b = blockIdx.z, h = blockIdx.y */
    const dim3 g = mp_attn_grid(1, H, B);
    std::vector<int> seen(B * H, 0);
    for (unsigned z = 0; z < g.z; z++)
        for (unsigned y = 0; y < g.y; y++) seen[z * H + y]++;
    CHECK(std::count(seen.begin(), seen.end(), 1) == B * H, "attention grid: a (b, h) not covered once");
}

/* ---- 2. attention: the kernels' tiling on the host ---- */

#define AW ATT_WARPS   /* rows per block, one per warp (k_attn_fwd.cu and k_attn_bwd.cu agree) */
#define AL MP_WARP     /* lanes: keys per tile (fwd, dQ) or query rows per tile (dK/dV) */
static_assert(ATT_BK == AL && ATT_BT == AL, "the kernels' tiles are one row per lane");

struct Attn {
    int B, T, H, KV, hd, W = 0;   /* W: the sliding window (core/backend.h attn_fwd; 0 = full causal) */
    std::vector<float> q, k, v, out, lse, dout;   /* q, k, v, dout already bf16-rounded */
    size_t qi(int b, int t, int h, int d) const { return (((size_t)b * T + t) * H + h) * hd + d; }
    size_t ki(int b, int t, int g, int d) const { return (((size_t)b * T + t) * KV + g) * hd + d; }
    size_t ri(int b, int h, int t) const { return ((size_t)b * H + h) * T + t; }
};

/* Where q, k, v (or dq, dk, dv) live in one buffer: dense and apart (pad < 0: q [B T, H hd] then k, v
 * [B T, KV hd]) or as layers/llama.c's fused rows (pad >= 0: the column blocks [0, H hd), [H hd, (H+KV) hd),
 * [(H+KV) hd, (H+2KV) hd) of rows ld = (H + 2 KV) hd + pad apart, pad columns after v). Offsets and
 * strides in elements. */
struct QKVLayout {
    int ldq, ldkv, pad;
    size_t q, k, v, n;
};
static QKVLayout qkv_layout(const Attn &A, int pad) {
    const size_t rows = (size_t)A.B * A.T, wq = (size_t)A.H * A.hd, wk = (size_t)A.KV * A.hd;
    if (pad < 0) return {(int)wq, (int)wk, pad, 0, rows * wq, rows * (wq + wk), rows * (wq + 2 * wk)};
    const int ld = (int)(wq + 2 * wk) + pad;
    return {ld, ld, pad, 0, wq, wq + wk, rows * ld};
}
/* q, k, v ([B T, H hd], [B T, KV hd] x2) into one buffer of layout L, everything else `fill`. */
static std::vector<float> qkv_pack(const Attn &A, const QKVLayout &L, const std::vector<float> &q,
                                   const std::vector<float> &k, const std::vector<float> &v, float fill) {
    std::vector<float> x(L.n, fill);
    const size_t rows = (size_t)A.B * A.T, wq = (size_t)A.H * A.hd, wk = (size_t)A.KV * A.hd;
    for (size_t r = 0; r < rows; r++) {
        std::copy(q.begin() + r * wq, q.begin() + (r + 1) * wq, x.begin() + L.q + r * L.ldq);
        std::copy(k.begin() + r * wk, k.begin() + (r + 1) * wk, x.begin() + L.k + r * L.ldkv);
        std::copy(v.begin() + r * wk, v.begin() + (r + 1) * wk, x.begin() + L.v + r * L.ldkv);
    }
    return x;
}
/* The inverse: q, k, v out of x; returns how many elements outside them no longer equal `fill` (bits). */
static size_t qkv_unpack(const Attn &A, const QKVLayout &L, const std::vector<float> &x, std::vector<float> &q,
                         std::vector<float> &k, std::vector<float> &v, float fill) {
    const size_t rows = (size_t)A.B * A.T, wq = (size_t)A.H * A.hd, wk = (size_t)A.KV * A.hd;
    std::vector<char> mine(L.n, 0);
    for (size_t r = 0; r < rows; r++) {
        for (size_t i = 0; i < wq; i++) q[r * wq + i] = x[L.q + r * L.ldq + i], mine[L.q + r * L.ldq + i] = 1;
        for (size_t i = 0; i < wk; i++) {
            k[r * wk + i] = x[L.k + r * L.ldkv + i], mine[L.k + r * L.ldkv + i] = 1;
            v[r * wk + i] = x[L.v + r * L.ldkv + i], mine[L.v + r * L.ldkv + i] = 1;
        }
    }
    size_t changed = 0;
    for (size_t i = 0; i < L.n; i++) changed += !mine[i] && memcmp(&x[i], &fill, sizeof fill) != 0;
    return changed;
}

/* attn_fwd_kernel, block by block, warp by warp, lane by lane. out is bf16-rounded, as stored. */
static void mirror_fwd(Attn &A) {
    const float scale = 1.0f / sqrtf((float)A.hd);
    const int rep = A.H / A.KV, tiles = (A.T + AW - 1) / AW;
    for (int b = 0; b < A.B; b++)
        for (int h = 0; h < A.H; h++)
            for (int tile = 0; tile < tiles; tile++) {
                const int g = h / rep, q0 = tile * AW, last_key = std::min(q0 + AW, A.T) - 1;
                for (int w = 0; w < AW; w++) {
                    const int t = q0 + w, lo = mp_cu_attn_first_key(t, A.W);
                    if (t >= A.T) continue;
                    std::vector<float> o(A.hd, 0.0f);
                    float m = -INFINITY, l = 0.0f;
                    for (int k0 = mp_cu_attn_first_key(q0, A.W) / AL * AL; k0 <= last_key; k0 += AL) {
                        if (k0 > t || k0 + AL <= lo) continue;
                        float s[AL], p[AL], mx = -INFINITY, sum = 0.0f;
                        for (int lane = 0; lane < AL; lane++) {
                            const int key = k0 + lane;
                            s[lane] = -INFINITY;
                            if (key <= t && key >= lo) {
                                float dot = 0.0f;
                                for (int d = 0; d < A.hd; d++) dot += A.q[A.qi(b, t, h, d)] * A.k[A.ki(b, key, g, d)];
                                s[lane] = scale * dot;
                            }
                            mx = fmaxf(mx, s[lane]);
                        }
                        const float m_new = fmaxf(m, mx), alpha = expf(m - m_new);
                        for (int lane = 0; lane < AL; lane++) {
                            p[lane] = k0 + lane <= t && k0 + lane >= lo ? expf(s[lane] - m_new) : 0.0f;
                            sum += p[lane];
                        }
                        l = l * alpha + sum;
                        m = m_new;
                        const int nj = std::min(t - k0 + 1, AL);
                        for (int d = 0; d < A.hd; d++) {
                            o[d] *= alpha;
                            for (int j = 0; j < nj; j++) o[d] += p[j] * A.v[A.ki(b, k0 + j, g, d)];
                        }
                    }
                    for (int d = 0; d < A.hd; d++) A.out[A.qi(b, t, h, d)] = bf16_round(o[d] / l);
                    A.lse[A.ri(b, h, t)] = m + logf(l);
                }
            }
}

/* attn_bwd_d_kernel, attn_bwd_dkdv_kernel and attn_bwd_dq_kernel; outputs bf16-rounded, as stored. */
static void mirror_bwd(const Attn &A, std::vector<float> &dq, std::vector<float> &dk, std::vector<float> &dv) {
    const float scale = 1.0f / sqrtf((float)A.hd);
    const int rep = A.H / A.KV, tiles = (A.T + AW - 1) / AW;
    std::vector<float> D((size_t)A.B * A.H * A.T);
    for (int b = 0; b < A.B; b++)
        for (int t = 0; t < A.T; t++)
            for (int h = 0; h < A.H; h++) {
                float s = 0.0f;
                for (int d = 0; d < A.hd; d++) s += A.dout[A.qi(b, t, h, d)] * A.out[A.qi(b, t, h, d)];
                D[A.ri(b, h, t)] = s;
            }
    auto qdot = [&](int b, int t, int h, const float *vec, const std::vector<float> &X) {
        float s = 0.0f;
        for (int d = 0; d < A.hd; d++) s += X[A.qi(b, t, h, d)] * vec[d];
        return s;
    };
    /* dK/dV: a warp per key row j, query tiles of 32 rows per head of the group */
    for (int b = 0; b < A.B; b++)
        for (int g = 0; g < A.KV; g++)
            for (int tile = 0; tile < tiles; tile++)
                for (int w = 0; w < AW; w++) {
                    const int j0 = tile * AW, j = j0 + w;
                    if (j >= A.T) continue;
                    std::vector<float> kj(A.hd), vj(A.hd), dka(A.hd, 0.0f), dva(A.hd, 0.0f);
                    for (int d = 0; d < A.hd; d++) kj[d] = A.k[A.ki(b, j, g, d)], vj[d] = A.v[A.ki(b, j, g, d)];
                    const int tend = A.W > 0 ? std::min(A.T, j0 + AW - 1 + A.W) : A.T;
                    for (int h = g * rep; h < (g + 1) * rep; h++)
                        for (int t0 = j0 / AL * AL; t0 < tend; t0 += AL) {
                            if (t0 + AL - 1 < j || mp_cu_attn_first_key(t0, A.W) > j) continue;
                            float p[AL], ds[AL];
                            for (int lane = 0; lane < AL; lane++) {
                                const int t = t0 + lane;
                                p[lane] = ds[lane] = 0.0f;
                                if (t >= j && t < A.T && mp_cu_attn_first_key(t, A.W) <= j) {
                                    p[lane] = expf(scale * qdot(b, t, h, kj.data(), A.q) - A.lse[A.ri(b, h, t)]);
                                    const float dp = qdot(b, t, h, vj.data(), A.dout);
                                    ds[lane] = scale * p[lane] * (dp - D[A.ri(b, h, t)]);
                                }
                            }
                            for (int l = 0; l < AL; l++) {
                                const int t = t0 + l;
                                for (int d = 0; d < A.hd; d++) {
                                    dva[d] += p[l] * (t < A.T ? A.dout[A.qi(b, t, h, d)] : 0.0f);
                                    dka[d] += ds[l] * (t < A.T ? A.q[A.qi(b, t, h, d)] : 0.0f);
                                }
                            }
                        }
                    for (int d = 0; d < A.hd; d++) dk[A.ki(b, j, g, d)] = bf16_round(dka[d]), dv[A.ki(b, j, g, d)] = bf16_round(dva[d]);
                }
    /* dQ: a warp per query row t, key tiles of 32 */
    for (int b = 0; b < A.B; b++)
        for (int h = 0; h < A.H; h++)
            for (int tile = 0; tile < tiles; tile++)
                for (int w = 0; w < AW; w++) {
                    const int g = h / rep, q0 = tile * AW, t = q0 + w, last_key = std::min(q0 + AW, A.T) - 1;
                    if (t >= A.T) continue;
                    std::vector<float> dqa(A.hd, 0.0f), qt(A.hd), dot_(A.hd);
                    for (int d = 0; d < A.hd; d++) qt[d] = A.q[A.qi(b, t, h, d)], dot_[d] = A.dout[A.qi(b, t, h, d)];
                    const int lo = mp_cu_attn_first_key(t, A.W);
                    for (int k0 = mp_cu_attn_first_key(q0, A.W) / AL * AL; k0 <= last_key; k0 += AL) {
                        if (k0 > t || k0 + AL <= lo) continue;
                        float ds[AL];
                        for (int lane = 0; lane < AL; lane++) {
                            const int key = k0 + lane;
                            ds[lane] = 0.0f;
                            if (key <= t && key >= lo) {
                                float s = 0.0f, dp = 0.0f;
                                for (int d = 0; d < A.hd; d++) s += qt[d] * A.k[A.ki(b, key, g, d)];
                                for (int d = 0; d < A.hd; d++) dp += dot_[d] * A.v[A.ki(b, key, g, d)];
                                const float p = expf(scale * s - A.lse[A.ri(b, h, t)]);
                                ds[lane] = scale * p * (dp - D[A.ri(b, h, t)]);
                            }
                        }
                        const int nj = std::min(t - k0 + 1, AL);
                        for (int jj = 0; jj < nj; jj++)
                            for (int d = 0; d < A.hd; d++) dqa[d] += ds[jj] * A.k[A.ki(b, k0 + jj, g, d)];
                    }
                    for (int d = 0; d < A.hd; d++) dq[A.qi(b, t, h, d)] = bf16_round(dqa[d]);
                }
}

/* Naive causal GQA attention and its gradients in double (from the same bf16-rounded inputs); with a
 * window A.W > 0 row t sums over keys t - W < j <= t only (written out here, not the kernels' helper). */
static void naive(const Attn &A, std::vector<double> &out, std::vector<double> &lse, std::vector<double> &dq,
                  std::vector<double> &dk, std::vector<double> &dv) {
    const double scale = 1.0 / sqrt((double)A.hd);
    const int rep = A.H / A.KV, T = A.T;
    for (int b = 0; b < A.B; b++)
        for (int h = 0; h < A.H; h++) {
            const int g = h / rep;
            for (int t = 0; t < T; t++) {
                std::vector<double> s(t + 1), P(t + 1), dP(t + 1);
                double mx = -INFINITY, sum = 0.0;
                const int j0 = A.W > 0 ? std::max(0, t - A.W + 1) : 0;
                for (int j = j0; j <= t; j++) {
                    double dot = 0;
                    for (int d = 0; d < A.hd; d++) dot += (double)A.q[A.qi(b, t, h, d)] * A.k[A.ki(b, j, g, d)];
                    s[j] = scale * dot;
                    mx = std::max(mx, s[j]);
                }
                for (int j = j0; j <= t; j++) sum += exp(s[j] - mx);
                lse[A.ri(b, h, t)] = mx + log(sum);
                for (int j = j0; j <= t; j++) P[j] = exp(s[j] - mx) / sum;
                double Dt = 0.0;
                for (int d = 0; d < A.hd; d++) {
                    double o = 0;
                    for (int j = j0; j <= t; j++) o += P[j] * A.v[A.ki(b, j, g, d)];
                    out[A.qi(b, t, h, d)] = o;
                    Dt += o * A.dout[A.qi(b, t, h, d)];
                }
                for (int j = j0; j <= t; j++) {
                    double dp = 0;
                    for (int d = 0; d < A.hd; d++) dp += (double)A.dout[A.qi(b, t, h, d)] * A.v[A.ki(b, j, g, d)];
                    const double ds = P[j] * (dp - Dt) * scale;
                    for (int d = 0; d < A.hd; d++) {
                        dq[A.qi(b, t, h, d)] += ds * A.k[A.ki(b, j, g, d)];
                        dk[A.ki(b, j, g, d)] += ds * A.q[A.qi(b, t, h, d)];
                        dv[A.ki(b, j, g, d)] += P[j] * A.dout[A.qi(b, t, h, d)];
                    }
                }
            }
        }
}

/* max |got - ref| <= rtol * max |ref| + atol, and no NaN in got or ref (std::max(md, NaN) keeps md: a NaN
 * must be counted, or it passes unseen). */
template <typename G, typename R>
static void close(const char *what, const G &got, const R &ref, double rtol, double atol, const char *shape) {
    double md = 0, mr = 0;
    size_t nan = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        const double d = fabs((double)got[i] - (double)ref[i]);
        if (d != d) nan++;
        else md = std::max(md, d), mr = std::max(mr, fabs((double)ref[i]));
    }
    CHECK(nan == 0 && md <= rtol * mr + atol, "%s %s: max err %.3g (max ref %.3g), %zu NaN", what, shape, md, mr, nan);
}

/* The attention's error bounds against the naive float64 attention (absolute; the bf16 stores' 2^-8 of the
 * value on top are the callers' rtol), from A's data. Scores: fp32 dots of bf16 products (exact) over hd
 * terms, gamma_hd of S = scale hd max|q| max|k| (the largest |score|), then the scale and base-2 factor
 * (k_attn_mma.cuh: log2(e) folded in) 3 roundings of S. A forward p = exp2f(x - m) off by ep: the score error,
 * the subtraction's rounding (2^-24 of the range 2 S log2(e), the rescales' chain telescoping to 2 of it),
 * exp2f / expf 2 ulp, and per 16-key tile one rescale (5 2^-24). out = sum p v / l, a weighted mean: its
 * weights' errors move it by <= 2 ep max|v|, the sums gamma_T, the tensor-core P . V's bf16 P 2^-8 max|v|.
 * lse = m + log l: the score error, ep and gamma_T (log l's), logf's ulp and the additions' (2^-24 4 (S + ln T
 * + 1)). The backward's p = exp2(s log2(e) - lse log2(e)) off by epb (the score and lse errors, the
 * subtraction's and the product's rounding, exp2f). dS = scale p (dP - D): dP an fp32 dot (gamma_hd of
 * sum |dO||v|), D = dO . out with the device's stored out (2^-8 of sum |dO||out| and out's atol times sum |dO|),
 * p's epb, and the tensor-core operand dS in bf16 (2^-8): eds per (t, key); dK = sum_t dS q, dQ = sum_k dS k
 * (gamma_T more), dV = sum_t p dO (2^-8 for bf16 P, epb, gamma_T). e[0..4]: out, lse, dq, dk, dv. */
static std::vector<double> attn_bounds(const Attn &A, const std::vector<double> &rout) {
    auto mabs = [](const std::vector<float> &x) {
        double m = 0;
        for (float e : x) m = std::max(m, (double)fabsf(e));
        return m;
    };
    auto mabs_d = [](const std::vector<double> &x) { return *std::max_element(x.begin(), x.end()); };
    const double scale = 1.0 / sqrt((double)A.hd), L2 = 1.4426950408889634, u = MP_U24;
    const double S = scale * A.hd * mabs(A.q) * mabs(A.k), mv = mabs(A.v), R = 2 * S * L2;
    const double ds2 = L2 * (gamma_f32(A.hd) * S + 3 * u * S), gT = gamma_f32(A.T + 1);
    const double ep = M_LN2 * (ds2 + 3 * R * u) + 4 * u + 5 * u * (A.T / 16.0 + 2);
    const double e_out = mv * (2 * ep + MP_BF16_U + 2 * gT) * (1 + MP_BF16_U);
    const double e_lse = M_LN2 * ds2 + ep + gT + 4 * u * (S + log((double)A.T) + 1);
    const double epb = M_LN2 * (ds2 + L2 * e_lse + 4 * u * L2 * (S + log((double)A.T) + 1) + u * (R + log2((double)A.T) + 1)) + 4 * u;
    const double c1 = MP_BF16_U + epb + 3 * gamma_f32(A.hd) + gT;
    std::vector<double> edq(A.q.size(), 0.0), edk(A.k.size(), 0.0), edv(A.k.size(), 0.0);
    const int rep = A.H / A.KV;
    for (int b = 0; b < A.B; b++)
        for (int h = 0; h < A.H; h++)
            for (int t = 0; t < A.T; t++) {
                const int g = h / rep, j0 = A.W > 0 ? std::max(0, t - A.W + 1) : 0;
                std::vector<double> sc(t + 1);
                double mx = -INFINITY, sum = 0, dsum = 0, dD = 0;
                for (int j = j0; j <= t; j++) {
                    double dot = 0;
                    for (int d = 0; d < A.hd; d++) dot += (double)A.q[A.qi(b, t, h, d)] * A.k[A.ki(b, j, g, d)];
                    sc[j] = scale * dot, mx = std::max(mx, sc[j]);
                }
                for (int j = j0; j <= t; j++) sum += exp(sc[j] - mx);
                for (int d = 0; d < A.hd; d++) {
                    const double o = fabs(A.dout[A.qi(b, t, h, d)]);
                    dsum += o, dD += o * fabs(rout[A.qi(b, t, h, d)]);
                }
                for (int j = j0; j <= t; j++) {
                    const double p = exp(sc[j] - mx) / sum;
                    double dP = 0;
                    for (int d = 0; d < A.hd; d++) dP += fabs((double)A.dout[A.qi(b, t, h, d)] * A.v[A.ki(b, j, g, d)]);
                    const double eds = scale * p * (c1 * (dP + dD) + MP_BF16_U * dD + dsum * e_out);
                    for (int d = 0; d < A.hd; d++) {
                        edq[A.qi(b, t, h, d)] += eds * fabs(A.k[A.ki(b, j, g, d)]);
                        edk[A.ki(b, j, g, d)] += eds * fabs(A.q[A.qi(b, t, h, d)]);
                        edv[A.ki(b, j, g, d)] += (MP_BF16_U + epb + gT) * p * fabs(A.dout[A.qi(b, t, h, d)]);
                    }
                }
            }
    const double slack = 1 + 1.0 / 1024;
    return {slack * e_out, slack * e_lse, slack * mabs_d(edq), slack * mabs_d(edk), slack * mabs_d(edv)};
}

/* out, lse, dq, dk, dv (device results or a replay of the kernels) against the naive float64 attention
 * (rout ...) within attn_bounds, + 2^-8 of the value for the bf16 stores (lse: fp32, 2^-24). */
template <typename V>
static void attn_close(const Attn &A, const char *shape, const std::vector<double> &rout, const std::vector<double> &rlse,
                       const std::vector<double> &rdq, const std::vector<double> &rdk, const std::vector<double> &rdv,
                       const V &out, const V &lse, const V &dq, const V &dk, const V &dv) {
    const std::vector<double> e = attn_bounds(A, rout);
    close("attn out", out, rout, MP_BF16_U, e[0], shape);
    close("attn lse", lse, rlse, MP_U24, e[1], shape);
    close("attn dq", dq, rdq, MP_BF16_U, (1 + MP_BF16_U) * e[2], shape);
    close("attn dk", dk, rdk, MP_BF16_U, (1 + MP_BF16_U) * e[3], shape);
    close("attn dv", dv, rdv, MP_BF16_U, (1 + MP_BF16_U) * e[4], shape);
}

/* An attention problem of that shape with random bf16-valued q, k, v, dout (out and lse sized, unset). */
static Attn attn_random(int B, int T, int H, int KV, int hd) {
    Attn A;
    A.B = B, A.T = T, A.H = H, A.KV = KV, A.hd = hd;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nr = (size_t)B * H * T;
    A.q.resize(nq), A.k.resize(nk), A.v.resize(nk), A.dout.resize(nq), A.out.resize(nq), A.lse.resize(nr);
    for (auto &e : A.q) e = bf16_round(2.0f * rnd_unit());   /* scores of O(1..5): a non-trivial softmax */
    for (auto &e : A.k) e = bf16_round(2.0f * rnd_unit());
    for (auto &e : A.v) e = bf16_round(rnd_unit());
    for (auto &e : A.dout) e = bf16_round(rnd_unit());
    return A;
}

/* The kernels' window rule (mp_cu_attn_first_key, k_common.cuh) against transformers' mask written out:
 * key j is visible to query t iff t - W < j <= t (W = 0: j <= t), for every t, j below 300 and windows
 * around the tiles' sizes; the CPU kernels' rule (mp_attn_first_key) is the same expression, and every
 * windowed case below also compares the replays with the CPU kernels. */
static void check_window_rule(void) {
    for (int W : {0, 1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 192, 299, 300, 100000})
        for (int t = 0; t < 300; t++)
            for (int j = 0; j <= t; j++) {
                const bool hf = W == 0 || t - W < j;
                CHECK(hf == (j >= mp_cu_attn_first_key(t, W)), "window rule: W %d t %d j %d", W, t, j);
            }
}

static void check_attention(int B, int T, int H, int KV, int hd, int W = 0) {
    char shape[96];
    snprintf(shape, sizeof shape, "B=%d T=%d H=%d KV=%d hd=%d W=%d", B, T, H, KV, hd, W);
    Attn A = attn_random(B, T, H, KV, hd);
    A.W = W;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nr = (size_t)B * H * T;
    mirror_fwd(A);
    std::vector<float> dq(nq, NAN), dk(nk, NAN), dv(nk, NAN);
    mirror_bwd(A, dq, dk, dv);

    std::vector<double> rout(nq), rlse(nr), rdq(nq, 0.0), rdk(nk, 0.0), rdv(nk, 0.0);
    naive(A, rout, rlse, rdq, rdk, rdv);
    attn_close(A, shape, rout, rlse, rdq, rdk, rdv, A.out, A.lse, dq, dk, dv);   /* the device check's bounds */

    /* the project's CPU kernels on the same (bf16-valued) inputs, the backward fed the mirror's bf16 out */
    std::vector<float> cout_(nq), clse(nr), cdq(nq), cdk(nk), cdv(nk), scratch(nr);
    mp_backend *cpu = mp_backend_cpu();
    cpu->attn_fwd(cpu, cout_.data(), clse.data(), A.q.data(), A.k.data(), A.v.data(), B, T, H, KV, hd, H * hd, KV * hd, W);
    close("out vs CPU kernel", A.out, cout_, 1e-2, 1e-4, shape);
    close("lse vs CPU kernel", A.lse, clse, 1e-5, 1e-5, shape);
    cpu->attn_bwd(cpu, cdq.data(), cdk.data(), cdv.data(), scratch.data(), A.dout.data(), A.out.data(), A.lse.data(),
                  A.q.data(), A.k.data(), A.v.data(), B, T, H, KV, hd, H * hd, KV * hd, W);
    close("dq vs CPU kernel", dq, cdq, 1e-2, 1e-4, shape);
    close("dk vs CPU kernel", dk, cdk, 1e-2, 1e-4, shape);
    close("dv vs CPU kernel", dv, cdv, 1e-2, 1e-4, shape);
}

/* x rounded to bf16 storage. */
static std::vector<mp_bf16> to_bf16(const std::vector<float> &x) {
    std::vector<mp_bf16> y(x.size());
    for (size_t i = 0; i < x.size(); i++) y[i] = __float2bfloat16_rn(x[i]);
    return y;
}

/* attn_fwd_mma_kernel (k_attn_mma.cu) replayed block by block through the same k_attn_mma.cuh functions,
 * a whole warp per call (NL = 32: the mma fragments and quad shuffles emulated by the PTX layouts); the
 * tile loads in the kernel's order: hd 64 fetches the next tile (each thread's registers: ld[tid]) before
 * the warps compute on the current one and puts it after, hd 128 loads each tile before its compute.
 * q, k, v in layout L (dense, or the fused rows with NaN in the pad columns: a read of them poisons). */
template <int HD>
static void mirror_fwd_mma(const Attn &A, const QKVLayout &L, std::vector<float> &out, std::vector<float> &lse) {
    const std::vector<mp_bf16> x = to_bf16(qkv_pack(A, L, A.q, A.k, A.v, NAN));
    const mp_bf16 *q = x.data() + L.q, *k = x.data() + L.k, *v = x.data() + L.v;
    CHECK(fa_strides_ok(L.ldq, L.ldkv), "mma replay: strides %d, %d the launcher would refuse", L.ldq, L.ldkv);
    std::vector<mp_bf16> o(A.q.size(), __float2bfloat16_rn(NAN));
    std::vector<fa_smem<HD>> s(1);
    std::vector<fa_fwd_state<HD, MP_WARP>> st(FA_WARPS);
    std::vector<fa_kv_stage<HD>> ld(FA_THREADS);
    const float scale = 1.0f / sqrtf((float)HD);
    const int rep = A.H / A.KV, tiles = (A.T + FA_BQ - 1) / FA_BQ;
    for (int b = 0; b < A.B; b++)
        for (int h = 0; h < A.H; h++)
            for (int tile = tiles - 1; tile >= 0; tile--) {
                const int q0 = tile * FA_BQ;
                for (int w = 0; w < FA_WARPS; w++) fa_fwd_init<HD, MP_WARP>(st[w], q, b, A.T, L.ldq, h, q0 + 16 * w, 0);
                const int g = h / rep, kstart = mp_cu_attn_first_key(q0, A.W) / FA_BK * FA_BK;
                if (HD == 64)
                    for (int tid = 0; tid < FA_THREADS; tid++) fa_fetch_kv(ld[tid], k, v, b, A.T, L.ldkv, g, kstart, tid);
                for (int k0 = kstart; k0 <= q0; k0 += FA_BK) {
                    for (int tid = 0; tid < FA_THREADS; tid++) {
                        if (HD == 64) {
                            fa_put_kv(s[0], ld[tid], tid);
                            if (k0 + FA_BK <= q0) fa_fetch_kv(ld[tid], k, v, b, A.T, L.ldkv, g, k0 + FA_BK, tid);
                        } else {
                            fa_load_kv<HD>(s[0], k, v, b, A.T, L.ldkv, g, k0, tid);
                        }
                    }
                    for (int w = 0; w < FA_WARPS; w++)   /* the kernel's warp skip: left of all its rows' windows */
                        if (k0 + FA_BK > mp_cu_attn_first_key(q0 + 16 * w, A.W))
                            fa_fwd_step<HD, MP_WARP>(st[w], s[0], k0, q0 + 16 * w, scale, A.W, 0);
                }
                for (int w = 0; w < FA_WARPS; w++)
                    fa_fwd_finish<HD, MP_WARP>(st[w], o.data(), lse.data(), b, A.T, A.H, h, q0 + 16 * w, 0);
            }
    for (size_t i = 0; i < o.size(); i++) out[i] = __bfloat162float(o[i]);
}

/* attn_bwd_dkdv_mma_kernel and attn_bwd_dq_mma_kernel (k_attn_mma.cu) replayed the same way, from the
 * forward's bf16 out and lse (A.out, A.lse); D as the D pass computes it (fp32, from bf16 dout and out).
 * q, k, v and dq, dk, dv in layout L; the gradient buffer starts NaN in the head columns (every element
 * must be written) and 7 in the others, which must keep their bits (a CHECK). */
template <int HD>
static void mirror_bwd_mma(const Attn &A, const QKVLayout &L, std::vector<float> &dq, std::vector<float> &dk,
                           std::vector<float> &dv) {
    const std::vector<mp_bf16> x = to_bf16(qkv_pack(A, L, A.q, A.k, A.v, NAN)), dout = to_bf16(A.dout);
    const mp_bf16 *q = x.data() + L.q, *k = x.data() + L.k, *v = x.data() + L.v;
    const std::vector<float> nq(A.q.size(), NAN), nk(A.k.size(), NAN);
    std::vector<mp_bf16> gx = to_bf16(qkv_pack(A, L, nq, nk, nk, 7.0f));
    mp_bf16 *gq = gx.data() + L.q, *gk = gx.data() + L.k, *gv = gx.data() + L.v;
    std::vector<float> D((size_t)A.B * A.H * A.T);
    for (int b = 0; b < A.B; b++)
        for (int t = 0; t < A.T; t++)
            for (int h = 0; h < A.H; h++) {
                float acc = 0.0f;
                for (int d = 0; d < HD; d++) acc += A.dout[A.qi(b, t, h, d)] * A.out[A.qi(b, t, h, d)];
                D[A.ri(b, h, t)] = acc;
            }
    const float scale = 1.0f / sqrtf((float)HD);
    const int rep = A.H / A.KV, tiles = (A.T + FA_BQ - 1) / FA_BQ;
    std::vector<fb_kv_smem<HD>> skv(1);
    std::vector<fb_q_smem<HD>> sq(1);
    std::vector<fb_kv_state<HD, MP_WARP>> kst(FA_WARPS);
    std::vector<fb_q_state<HD, MP_WARP>> qst(FA_WARPS);
    std::vector<fb_k_stage<HD>> kld(FA_THREADS);
    for (int b = 0; b < A.B; b++)
        for (int g = 0; g < A.KV; g++)
            for (int tile = 0; tile < tiles; tile++) {
                const int j0 = tile * FA_BQ;
                for (int w = 0; w < FA_WARPS; w++) fb_kv_init<HD, MP_WARP>(kst[w], k, v, b, A.T, L.ldkv, g, j0 + 16 * w, 0);
                const int tend = A.W > 0 ? std::min(A.T, j0 + FA_BQ - 1 + A.W) : A.T;
                for (int h = g * rep; h < (g + 1) * rep; h++)
                    for (int t0 = j0; t0 < tend; t0 += FB_BQ) {
                        for (int tid = 0; tid < FA_THREADS; tid++)
                            fb_load_qtile<HD>(skv[0], q, dout.data(), A.lse.data(), D.data(), b, A.T, A.H, L.ldq, h, t0, tid);
                        for (int w = 0; w < FA_WARPS; w++)
                            if (mp_cu_attn_first_key(t0, A.W) <= j0 + 16 * w + 15)
                                fb_dkdv_step<HD, MP_WARP>(kst[w], skv[0], t0, j0 + 16 * w, A.T, scale, A.W, 0);
                    }
                for (int w = 0; w < FA_WARPS; w++) {
                    fb_store<HD, MP_WARP>(gk, kst[w].dk, b, A.T, L.ldkv, g, j0 + 16 * w, 0);
                    fb_store<HD, MP_WARP>(gv, kst[w].dv, b, A.T, L.ldkv, g, j0 + 16 * w, 0);
                }
            }
    for (int b = 0; b < A.B; b++)
        for (int h = 0; h < A.H; h++)
            for (int tile = tiles - 1; tile >= 0; tile--) {
                const int q0 = tile * FA_BQ, end = std::min(q0 + FA_BQ, A.T);
                for (int w = 0; w < FA_WARPS; w++)
                    fb_q_init<HD, MP_WARP>(qst[w], q, dout.data(), A.lse.data(), D.data(), b, A.T, A.H, L.ldq, h, q0 + 16 * w, 0);
                /* hd 64: the next key tile fetched before the current one's compute */
                const int g = h / rep, kstart = mp_cu_attn_first_key(q0, A.W) / FB_BK * FB_BK;
                if (HD == 64)
                    for (int tid = 0; tid < FA_THREADS; tid++) fa_fetch_kv(kld[tid], k, v, b, A.T, L.ldkv, g, kstart, tid);
                for (int k0 = kstart; k0 < end; k0 += FB_BK) {
                    for (int tid = 0; tid < FA_THREADS; tid++) {
                        if (HD == 64) {
                            fb_put_ktile(sq[0], kld[tid], tid);
                            if (k0 + FB_BK < end) fa_fetch_kv(kld[tid], k, v, b, A.T, L.ldkv, g, k0 + FB_BK, tid);
                        } else {
                            fb_load_ktile<HD>(sq[0], k, v, b, A.T, L.ldkv, g, k0, tid);
                        }
                    }
                    for (int w = 0; w < FA_WARPS; w++)
                        if (k0 + FB_BK > mp_cu_attn_first_key(q0 + 16 * w, A.W))
                            fb_dq_step<HD, MP_WARP>(qst[w], sq[0], k0, q0 + 16 * w, A.T, scale, A.W, 0);
                }
                for (int w = 0; w < FA_WARPS; w++) fb_store<HD, MP_WARP>(gq, qst[w].dq, b, A.T, L.ldq, h, q0 + 16 * w, 0);
            }
    std::vector<float> g(gx.size());
    for (size_t i = 0; i < gx.size(); i++) g[i] = __bfloat162float(gx[i]);
    const size_t changed = qkv_unpack(A, L, g, dq, dk, dv, 7.0f);
    CHECK(changed == 0, "mma backward (pad %d): %zu elements outside dq, dk, dv written", L.pad, changed);
}

/* The mma.sync fragment table (mma_frag.cuh, transcribed from CuTe) against the PTX ISA's own formulas,
 * written out here as the ISA states them ("Matrix Fragments for mma.m16n8k16 with floating point type",
 * .bf16 A/B, .f32 C/D; groupID = %laneid >> 2, threadID_in_group = %laneid % 4; element i of a lane's
 * fragment is half i % 2 of register i / 2), then the attention's tile helpers against the table: the
 * A-fragment loads (fa_load_afrag), the C -> A repack of P (fa_c_to_a), the B loads of fa_mma_smem (through
 * a product with the direct one) and the bf16-pair store (fa_st_pair) on matrices of distinct codes. */
static void check_mma_table(void) {
    int seenA[16][16] = {}, seenB[16][8] = {}, seenC[16][8] = {};
    for (int lane = 0; lane < 32; lane++) {
        const int groupID = lane >> 2, threadID_in_group = lane % 4;
        for (int i = 0; i < 8; i++) {   /* a0..a7 */
            const int row = (i < 2 || (4 <= i && i < 6)) ? groupID : groupID + 8;
            const int col = i < 4 ? threadID_in_group * 2 + (i & 0x1) : threadID_in_group * 2 + (i & 0x1) + 8;
            int r, c;
            mp_mma_a_pos(lane, i / 2, i % 2, &r, &c);
            CHECK(r == row && c == col, "mma table: A lane %d a%d at (%d, %d), the PTX ISA says (%d, %d)", lane, i, r, c, row, col);
            seenA[r & 15][c & 15]++;
        }
        for (int i = 0; i < 4; i++) {   /* b0..b3 */
            const int row = i < 2 ? threadID_in_group * 2 + (i & 0x1) : threadID_in_group * 2 + (i & 0x1) + 8;
            const int col = groupID;
            int k, n;
            mp_mma_b_pos(lane, i / 2, i % 2, &k, &n);
            CHECK(k == row && n == col, "mma table: B lane %d b%d at (%d, %d), the PTX ISA says (%d, %d)", lane, i, k, n, row, col);
            seenB[k & 15][n & 7]++;
        }
        for (int i = 0; i < 4; i++) {   /* c0..c3 (and d0..d3) */
            const int row = i < 2 ? groupID : groupID + 8;
            const int col = threadID_in_group * 2 + (i & 0x1);
            int r, c;
            mp_mma_c_pos(lane, i, &r, &c);
            CHECK(r == row && c == col, "mma table: C lane %d c%d at (%d, %d), the PTX ISA says (%d, %d)", lane, i, r, c, row, col);
            seenC[r & 15][c & 7]++;
        }
    }
    int once = 1;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) once &= seenA[r][c] == 1 && (c >= 8 || (seenB[r][c] == 1 && seenC[r][c] == 1));
    CHECK(once, "mma table: an element of A, B or C is held by no lane or by two");

    /* codes 0..255 are exact in bf16; X is 16 x 16 [row][col], the B operand's shared copy n-major */
    std::vector<mp_bf16> X(256), Bs(16 * 16);
    for (int i = 0; i < 256; i++) X[i] = __float2bfloat16_rn((float)i);
    uint32_t af[MP_WARP][1][4];
    fa_load_afrag<16, MP_WARP>(af, X.data(), 0, 16, 16, 0, 0, 0);
    float C[MP_WARP][2][4];
    for (int lane = 0; lane < MP_WARP; lane++)
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++) {
                int row, col;
                mp_mma_a_pos(lane, r, h, &row, &col);
                CHECK(fa_half(af[lane][0][r], h) == (float)(16 * row + col),
                      "fa_load_afrag: lane %d reg %d half %d holds %g, the table says X[%d][%d] = %d", lane, r, h,
                      fa_half(af[lane][0][r], h), row, col, 16 * row + col);
            }
    for (int lane = 0; lane < MP_WARP; lane++)   /* C of n-tiles 0, 1 per the table from X, repacked as A */
        for (int nt = 0; nt < 2; nt++)
            for (int e = 0; e < 4; e++) {
                int row, col;
                mp_mma_c_pos(lane, e, &row, &col);
                C[lane][nt][e] = (float)(16 * row + 8 * nt + col);
            }
    uint32_t pa[MP_WARP][1][4];
    for (int lane = 0; lane < MP_WARP; lane++) fa_c_to_a<2>(pa[lane], C[lane]);
    for (int lane = 0; lane < MP_WARP; lane++)
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++) {
                int row, col;
                mp_mma_a_pos(lane, r, h, &row, &col);
                CHECK(pa[lane][0][r] == af[lane][0][r], "fa_c_to_a: lane %d reg %d half %d holds %g, A[%d][%d] is %d",
                      lane, r, h, fa_half(pa[lane][0][r], h), row, col, 16 * row + col);
            }
    /* D = X B with B[k][n] = (k + 2 n) % 5 - 2 (Bs[n][k]), through fa_mma_smem: exact small integers */
    for (int n = 0; n < 16; n++)
        for (int k = 0; k < 16; k++) Bs[n * 16 + k] = __float2bfloat16_rn((float)((k + 2 * n) % 5 - 2));
    for (int lane = 0; lane < MP_WARP; lane++)
        for (int nt = 0; nt < 2; nt++)
            for (int e = 0; e < 4; e++) C[lane][nt][e] = 0.0f;
    fa_mma_smem<MP_WARP, 1, 2>(&C[0][0][0], 8, &af[0][0][0], 4, Bs.data(), 16, 0);
    std::vector<mp_bf16> D(16 * 16);
    for (int lane = 0; lane < MP_WARP; lane++)
        for (int nt = 0; nt < 2; nt++)
            for (int e = 0; e < 4; e++) {
                int row, col;
                mp_mma_c_pos(lane, e, &row, &col);
                double want = 0;
                for (int k = 0; k < 16; k++) want += (16.0 * row + k) * ((k + 2 * (8 * nt + col)) % 5 - 2);
                CHECK(C[lane][nt][e] == (float)want, "fa_mma_smem: lane %d n-tile %d c%d = %g, D[%d][%d] is %g", lane, nt,
                      e, C[lane][nt][e], row, 8 * nt + col, want);
                if (e % 2 == 0) fa_st_pair(&D[16 * row + 8 * nt + col], C[lane][nt][e], C[lane][nt][e + 1]);
            }
    for (int row = 0; row < 16; row++)   /* the pair stores put every element in its place, both halves */
        for (int col = 0; col < 16; col++) {
            double want = 0;
            for (int k = 0; k < 16; k++) want += (16.0 * row + k) * ((k + 2 * col) % 5 - 2);
            CHECK(__bfloat162float(D[16 * row + col]) == bf16_round((float)want), "fa_st_pair: D[%d][%d] = %g, not %g",
                  row, col, __bfloat162float(D[16 * row + col]), bf16_round((float)want));
        }
}

/* The stores fa_host_store_log saw: address and size, in order, with the thread that made them. */
struct LoaderStore {
    const char *p;
    int bytes, tid;
};
static std::vector<LoaderStore> g_ld_log;
static int g_ld_tid;
static void ld_log(const void *p, int bytes) { g_ld_log.push_back({(const char *)p, bytes, g_ld_tid}); }

/* fa_load_rows<HD, ROWS> run for every thread of the block as the kernels call it (row-major only,
 * transposed only, both), rows r0 .. of head 1 of x [1, T, 2, HD] whose elements carry distinct bit
 * patterns: every tile element is written exactly once with the right bits (zeros past T); every store
 * is aligned to its size; and the n-th store of the 32 lanes of a warp (the loops are uniform: one
 * warp-wide instruction) touches each of the 32 banks at most once per word it needs, per quarter warp for
 * the 16-byte stores: conflict-free, as the loader's comment argues. */
template <int HD, int ROWS>
static void check_loader(int T, int r0, bool want_rm, bool want_tr, int extra = 0) {
    const int lr = HD + 8, lt = ROWS + 8, heads = 2, head = 1, ld = heads * HD + extra;   /* extra: wider rows */
    char what[112];
    snprintf(what, sizeof what, "fa_load_rows<%d, %d> T=%d r0=%d rm=%d tr=%d ld=%d", HD, ROWS, T, r0, want_rm, want_tr,
             ld);
    std::vector<uint16_t> x((size_t)T * ld);
    for (size_t i = 0; i < x.size(); i++) x[i] = (uint16_t)(0x3c00 + (i * 7919) % 40000);   /* distinct, non-zero */
    struct alignas(16) Tiles {
        mp_bf16 rm[ROWS][HD + 8], tr[HD][ROWS + 8];
    };
    std::vector<Tiles> s(1);
    memset(&s[0], 0xff, sizeof(Tiles));   /* 0xffff: a NaN no element of x or zero has */
    mp_bf16 *rm = want_rm ? (mp_bf16 *)&s[0].rm : NULL, *tr = want_tr ? (mp_bf16 *)&s[0].tr : NULL;
    g_ld_log.clear();
    fa_host_store_log = ld_log;
    for (g_ld_tid = 0; g_ld_tid < FA_THREADS; g_ld_tid++)
        fa_load_rows<HD, ROWS>(rm, lr, tr, lt, (const mp_bf16 *)x.data(), 0, T, ld, head, r0, g_ld_tid);
    fa_host_store_log = NULL;
    const char *base = (const char *)&s[0];
    std::vector<int> writes(sizeof(Tiles) / 2, 0);
    int bad = 0;
    for (const LoaderStore &e : g_ld_log) {
        const size_t off = (size_t)(e.p - base);
        CHECK(off % e.bytes == 0 && off + e.bytes <= sizeof(Tiles), "%s: tid %d stores %d bytes at offset %zu", what,
              e.tid, e.bytes, off);
        if (off % e.bytes == 0 && off + e.bytes <= sizeof(Tiles))
            for (int k = 0; k < e.bytes / 2; k++) writes[off / 2 + k]++;
    }
    for (int r = 0; r < ROWS; r++)
        for (int d = 0; d < HD; d++) {
            const uint16_t want = r0 + r < T ? x[(size_t)(r0 + r) * ld + (size_t)head * HD + d] : 0;
            uint16_t got;
            const size_t erm = (size_t)r * lr + d, etr = offsetof(Tiles, tr) / 2 + (size_t)d * lt + r;
            memcpy(&got, (const uint16_t *)base + erm, 2);
            if (want_rm && (got != want || writes[erm] != 1) && bad++ < 5)
                CHECK(0, "%s: rm[%d][%d] = %04x written %d times, want %04x once", what, r, d, got, writes[erm], want);
            memcpy(&got, (const uint16_t *)base + etr, 2);
            if (want_tr && (got != want || writes[etr] != 1) && bad++ < 5)
                CHECK(0, "%s: tr[%d][%d] = %04x written %d times, want %04x once", what, d, r, got, writes[etr], want);
        }
    int total = 0;
    for (int w : writes) total += w;
    CHECK(total == (want_rm + want_tr) * ROWS * HD, "%s: %d elements written, want %d", what, total,
          (want_rm + want_tr) * ROWS * HD);
    /* bank conflicts: the n-th store of each lane of warp w is one instruction */
    std::vector<std::vector<const LoaderStore *>> per(FA_THREADS);
    for (const LoaderStore &e : g_ld_log) per[e.tid].push_back(&e);
    for (int w = 0; w < FA_WARPS; w++)
        for (size_t n = 0; n < per[32 * w].size(); n++) {
            const int bytes = per[32 * w][n]->bytes, group = bytes == 16 ? 8 : 32;   /* lanes served together */
            for (int g0 = 0; g0 < 32; g0 += group) {
                std::vector<std::vector<size_t>> bank(32);   /* the distinct words each bank is asked for */
                for (int l = g0; l < g0 + group; l++) {
                    CHECK(per[32 * w + l].size() == per[32 * w].size() && per[32 * w + l][n]->bytes == bytes,
                          "%s: lane %d of warp %d stores unlike lane 0 (not one warp-wide instruction)", what, l, w);
                    const size_t word = (size_t)(per[32 * w + l][n]->p - base) / 4;
                    for (int k = 0; k < bytes / 4; k++) {
                        std::vector<size_t> &b = bank[(word + k) % 32];
                        if (std::find(b.begin(), b.end(), word + k) == b.end()) b.push_back(word + k);
                    }
                }
                size_t worst = 0;
                for (auto &b : bank) worst = std::max(worst, b.size());
                CHECK(worst == 1, "%s: warp %d's store %zu (%d bytes, lanes %d..%d) is a %zu-way bank conflict", what,
                      w, n, bytes, g0, g0 + group - 1, worst);
            }
        }
}

/* The loaders as the kernels call them: fa_load_kv (K row-major, V transposed; 64 rows), fb_load_qtile
 * (Q, dO both ways; 32 rows), fb_load_ktile (K both ways, V row-major; 32 rows); full and partial tiles. */
[[maybe_unused]] static void check_loaders(void) {
    for (int T : {1, 31, 64, 100})
        for (int r0 : {0, 32, 64}) {
            if (r0 >= T && r0 > 0) continue;
            check_loader<64, 64>(T, r0, true, false), check_loader<64, 64>(T, r0, false, true);
            check_loader<128, 64>(T, r0, true, false), check_loader<128, 64>(T, r0, false, true);
            check_loader<64, 32>(T, r0, true, true), check_loader<64, 32>(T, r0, true, false);
            check_loader<128, 32>(T, r0, true, true), check_loader<128, 32>(T, r0, true, false);
            check_loader<64, 32>(T, r0, false, true);   /* mma_probe's dO^T */
            /* rows wider than the heads (the fused [q | k | v] of layers/llama.c) */
            check_loader<64, 64>(T, r0, true, false, 64 * 4 + 8), check_loader<128, 64>(T, r0, false, true, 128 * 2);
            check_loader<64, 32>(T, r0, true, true, 24), check_loader<128, 32>(T, r0, true, false, 8);
        }
}

/* The tensor-core kernels' replay against float64 (out, lse, dq, dk, dv) and the CPU kernels, on T
 * crossing the 16-row warp tiles and the 32/64-row tiles, every element written (NaN-filled beforehand).
 * pad < 0: q, k, v dense; else in the fused rows of layers/llama.c with pad extra columns (qkv_layout),
 * the CPU kernels then called with the same strides. */
static void check_attention_mma(int B, int T, int H, int KV, int hd, int pad = -1, int W = 0) {
    char shape[112];
    snprintf(shape, sizeof shape, "mma B=%d T=%d H=%d KV=%d hd=%d pad=%d W=%d", B, T, H, KV, hd, pad, W);
    Attn A = attn_random(B, T, H, KV, hd);
    A.W = W;
    const QKVLayout L = qkv_layout(A, pad);
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nr = (size_t)B * H * T;
    std::vector<float> out(nq, NAN), lse(nr, NAN);
    if (hd == 64) mirror_fwd_mma<64>(A, L, out, lse);
    else mirror_fwd_mma<128>(A, L, out, lse);
    std::vector<double> rout(nq), rlse(nr), rdq(nq, 0.0), rdk(nk, 0.0), rdv(nk, 0.0);
    naive(A, rout, rlse, rdq, rdk, rdv);
    int nan = 0;
    for (float x : out) nan += x != x;
    for (float x : lse) nan += x != x;
    CHECK(nan == 0, "%s: %d outputs not written or NaN", shape, nan);
    std::vector<float> cout_(nq), clse(nr), x = qkv_pack(A, L, A.q, A.k, A.v, NAN);
    mp_backend *cpu = mp_backend_cpu();
    cpu->attn_fwd(cpu, cout_.data(), clse.data(), x.data() + L.q, x.data() + L.k, x.data() + L.v, B, T, H, KV, hd,
                  L.ldq, L.ldkv, W);
    close("out vs CPU kernel", out, cout_, 1e-2, 1e-4, shape);
    close("lse vs CPU kernel", lse, clse, 1e-5, 1e-5, shape);

    /* the backward from the replayed forward's out and lse */
    A.out = out, A.lse = lse;
    std::vector<float> dq(nq, NAN), dk(nk, NAN), dv(nk, NAN);
    if (hd == 64) mirror_bwd_mma<64>(A, L, dq, dk, dv);
    else mirror_bwd_mma<128>(A, L, dq, dk, dv);
    nan = 0;
    for (float x : dq) nan += x != x;
    for (float x : dk) nan += x != x;
    for (float x : dv) nan += x != x;
    CHECK(nan == 0, "%s: %d gradients not written or NaN", shape, nan);
    attn_close(A, shape, rout, rlse, rdq, rdk, rdv, out, lse, dq, dk, dv);   /* the device check's bounds */
    std::vector<float> cdq(nq), cdk(nk), cdv(nk), scratch(nr), nanq(nq, NAN), nank(nk, NAN);
    std::vector<float> g = qkv_pack(A, L, nanq, nank, nank, 7.0f);
    cpu->attn_bwd(cpu, g.data() + L.q, g.data() + L.k, g.data() + L.v, scratch.data(), A.dout.data(), A.out.data(),
                  A.lse.data(), x.data() + L.q, x.data() + L.k, x.data() + L.v, B, T, H, KV, hd, L.ldq, L.ldkv, W);
    CHECK(qkv_unpack(A, L, g, cdq, cdk, cdv, 7.0f) == 0, "%s: the CPU backward wrote outside dq, dk, dv", shape);
    close("dq vs CPU kernel", dq, cdq, 1e-2, 1e-4, shape);
    close("dk vs CPU kernel", dk, cdk, 1e-2, 1e-4, shape);
    close("dv vs CPU kernel", dv, cdv, 1e-2, 1e-4, shape);
}

#ifndef MP_HOSTCHECK_NO_MAIN   /* check_kernels_device.cu reuses this file's references */
int main(void) {
    check_reduce_plan();
    for (int64_t n : {1, 3, 4, 5, 7, 8, 9, 4097, 8192, 8193, 300001, 2000003}) check_reduce(n);
    check_rmsnorm_plan();
    const int Ns[] = {1, 2, 3, 7, 64, 100, 1000, 2048, 2049, 4099, 16384};
    for (int N : Ns) {
        check_embed_bwd(N, 5, 0, 50, 50);      /* tp = 1 */
        check_embed_bwd(N, 3, 100, 37, 200);   /* a middle vocab slice: most tokens out of range */
    }
    check_elementwise();
    /* RMSNorm: D % 8 != 0 (2-byte path only), N below one chunk and below one row per warp, several
     * chunks, > 512 chunks' worth of rows (chunks of > 32 rows), 1 warp per block, the wide kernel */
    const int rms[][2] = {{1, 3}, {5, 13}, {33, 5}, {7, 200}, {100, 64}, {300, 2048}, {40, 4000}, {9000, 24},
                          {20011, 16}, {3, 12288}, {3, 12296}, {2, 12301}};
    for (auto &r : rms) check_rmsnorm(r[0], r[1]);
    /* biases {N, cols, ldx, off}: one row; cols % 8 != 0 at odd offsets; a q | k | v block of wider rows;
     * N not a multiple of 32 (a short last chunk) and > 512 chunks' worth (chunks of 40 rows); wide rows */
    const int biases[][4] = {{1, 8, 8, 0}, {3, 5, 7, 1}, {100, 64, 520, 256}, {33, 384, 392, 8}, {777, 13, 29, 3},
                             {20011, 24, 40, 8}, {5000, 1024, 1024, 0}, {2, 4096, 4104, 0}, {70, 96, 100, 2}};
    for (auto &b : biases) check_bias(b[0], b[1], b[2], b[3]);
    /* per-head RMSNorm {N, H, hd, ldx, off}: the q and the k block of fused rows (H 4, KV 2, hd 64: ldx 512,
     * k at 256), hd 128 and 96, 16-byte groups ruled out by ldx or off, hd % 8 != 0, dense rows, many
     * chunks (N H 6000) and > 512 chunks' worth (N H 18002: chunks of 36 pairs), hd 256 */
    const int heads[][5] = {{7, 4, 64, 512, 0}, {7, 2, 64, 512, 256}, {5, 2, 128, 512, 0}, {9, 2, 96, 576, 192},
                            {6, 3, 40, 204, 4}, {4, 2, 17, 56, 3}, {3, 1, 64, 64, 0}, {3000, 2, 64, 256, 128},
                            {9001, 2, 16, 48, 8}, {33, 2, 256, 1024, 512}};
    for (auto &h : heads) check_head_rmsnorm(h[0], h[1], h[2], h[3], h[4]);
    const int ropes[][5] = {{1, 1, 1, 2, 0}, {2, 5, 3, 64, 7}, {1, 9, 4, 16, 0}, {2, 3, 2, 128, 100}, {1, 4, 3, 40, 2},
                            {1, 2, 1, 6, 0}, {1, 3, 2, 1024, 5}};
    for (auto &r : ropes) check_rope_grid(r[0], r[1], r[2], r[3], r[4], 0, r[2] * r[3]);
    /* strided, as layers/llama.c's fused [q | k | v] rows: the k block (off = H hd) of rows (H + 2 KV) hd
     * wide, the q block of rows with extra columns, and strides that rule out the 16-byte path (ld % 8) */
    const int ropes_ld[][7] = {{2, 5, 2, 64, 7, 256, 512}, {1, 9, 4, 16, 0, 0, 104}, {2, 3, 1, 128, 100, 256, 512},
                               {1, 4, 3, 40, 2, 6, 130}, {2, 3, 2, 16, 1, 8, 44}, {1, 3, 2, 64, 0, 64, 196}};
    for (auto &r : ropes_ld) check_rope_grid(r[0], r[1], r[2], r[3], r[4], r[5], r[6]);
    check_gemm_plans();
    for (int64_t n : {1, 7, 8, 9, 64, 1003}) check_swiglu_vec(n);
    for (int64_t n : {1, 3, 4, 5, 8, 9, 1003, 70001}) check_vec_elementwise(n);
    for (int64_t n : {1, 7, 8, 9, 1003, 70001}) check_adamw_vec(n);
    const int xents[][4] = {{3, 8, 8, 0}, {5, 4096, 3999, 100}, {4, 1003, 990, 2000}, {3, 32000, 32000, 0}, {2, 20, 17, 5}};
    for (auto &x : xents) check_xent_bwd_vec<__nv_bfloat16>(x[0], x[1], x[2], x[3]), check_xent_bwd_vec<float>(x[0], x[1], x[2], x[3]);
    /* the one-pass forward: one group per thread, padding, scalar path (1003; 4100: bf16 scalar, fp32 16-byte),
     * a row of 16 groups per thread, a short row */
    const int xfwd[][4] = {{6, 8, 8, 0}, {7, 4096, 3999, 100}, {6, 1003, 990, 2000}, {6, 4100, 4100, 7}, {8, 32000, 32000, 0},
                           {6, 20, 17, 5}};
    for (auto &x : xfwd) check_xent_fwd<__nv_bfloat16>(x[0], x[1], x[2], x[3]), check_xent_fwd<float>(x[0], x[1], x[2], x[3]);
    /* over tp shards: even, uneven (V 1003 / 4: 251 valid in the last), a shard with no valid column (V 17 / 4:
     * v_local 5, valid 5, 5, 5, 2; V 13 / 4: 4, 4, 4, 1; V 9 / 4: 3, 3, 3, 0) */
    for (int tp : {2, 4})
        for (int V : {1003, 4096, 17, 13, 9}) check_xent_fwd_sharded<__nv_bfloat16>(6, V, tp), check_xent_fwd_sharded<float>(6, V, tp);
    check_xent_rescale(200);   /* 200 seeds of the device check's 1000 rows */
    const int shapes[][5] = {{1, 1, 1, 1, 8},   {2, 7, 4, 2, 40},  {1, 33, 4, 1, 64},  {2, 70, 4, 4, 32},
                             {1, 65, 2, 1, 128}, {1, 40, 6, 3, 17}, {1, 129, 2, 2, 96}};
    for (auto &s : shapes) check_attention(s[0], s[1], s[2], s[3], s[4]);
    check_window_rule();
    /* sliding windows (smaller than T): one key, inside a 32-key tile, across tiles and warps' rows */
    const int wshapes[][6] = {{1, 70, 4, 2, 40, 1}, {2, 129, 2, 2, 96, 5}, {1, 100, 4, 1, 64, 33}, {1, 130, 2, 1, 17, 64}};
    for (auto &s : wshapes) check_attention(s[0], s[1], s[2], s[3], s[4], s[5]);
    check_attn_grid();
    check_mma_table();
    check_loaders();
    for (int hd : {64, 128})
        for (int T : {1, 15, 64, 112, 200}) {
            check_attention_mma(1, T, 2, 2, hd);   /* GQA ratio 1 */
            check_attention_mma(2, T, 4, 1, hd);   /* GQA ratio 4 */
        }
    /* q, k, v and their gradients as column blocks of the fused rows (layers/llama.c), plus 8 or 24 more
     * columns: the strided tile loads, A-fragment loads and stores */
    for (int hd : {64, 128})
        for (int T : {15, 112}) {
            check_attention_mma(1, T, 2, 2, hd, 8);
            check_attention_mma(2, T, 4, 1, hd, 24);
        }
    check_attention_mma(1, 70, 2, 1, 64, 0);   /* the fused rows alone: ld = (H + 2 KV) hd */
    /* sliding windows: 1 key, within a 16-row warp tile, one 64-key tile, across tiles (34: the dK/dV
     * pass's last query tile starts at its reach), W >= T */
    for (int hd : {64, 128})
        for (int W : {1, 9, 34, 64, 90, 200}) {
            check_attention_mma(1, 200, 2, 2, hd, -1, W);
            check_attention_mma(2, 200, 4, 1, hd, 8, W);
        }
    if (g_fail) {
        fprintf(stderr, "%d check(s) FAILED\n", g_fail);
        return 1;
    }
    printf("check_kernels_host: all checks passed\n");
    return 0;
}
#endif
