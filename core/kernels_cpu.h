/*
 * core/kernels_cpu.h — private to the CPU backend (core/backend_cpu.c, core/kernels_cpu_*.c).
 *
 * Holds what the CPU kernel files share: a vectorisable exp (glibc's expf is only vectorised under
 * -ffast-math, which the build does not use, and cross-entropy spends N*V exps per step), the team
 * size of a kernel loop, and the attention kernels, which live in their own files
 * (core/kernels_cpu_attn_fwd.c, core/kernels_cpu_attn_bwd.c) because they are the one place that runs
 * many small sgemm calls at once.
 *
 * Everything here is deterministic: no atomics, static schedules only, reductions in a fixed order.
 */
#ifndef MP_KERNELS_CPU_H
#define MP_KERNELS_CPU_H

#include <stdint.h>
#include <string.h>

/* Runtime ISA dispatch: the CPU kernel files (core/backend_cpu.c, core/kernels_cpu_attn_*.c)
 * are compiled several times, once per ISA level, with -march=x86-64-v2/-v3/-v4 and MP_ISA_SUFFIX
 * defined to _v2/_v3/_v4 (CMakeLists.txt); MP_ISA_FN(name) gives each copy's public functions their own
 * names, and core/cpu_isa.c chooses one copy's table once, from the CPU (or MP_ISA). A build with one
 * level only (MP_NATIVE, a custom MP_ARCH, another architecture) compiles them once, unsuffixed. */
#ifndef MP_ISA_SUFFIX
#define MP_ISA_SUFFIX
#endif
#define MP_ISA_CAT2(a, b) a##b
#define MP_ISA_CAT(a, b) MP_ISA_CAT2(a, b)
#define MP_ISA_FN(name) MP_ISA_CAT(name, MP_ISA_SUFFIX)

/* exp(x) in fp32, within 1.03 ulp of the exact value for x in [-87.3, 88] (every float of the range
 * measured against libm: 0.992 ulp compiled for x86-64-v2, 1.023 for v3/v4; tests/test_kernels.c asserts
 * 1.05 over a dense sweep, on every ISA level); returns exactly
 * 0 for x < -87.3 (so -INFINITY gives 0) and exp(88) for larger x (never inf). NaN in gives NaN out.
 * Cody-Waite range reduction x = n*ln2 + r, |r| <= ln2/2, then Cephes' degree-6 polynomial, then a
 * scale by 2^n built in the exponent bits. Branch-free, so loops calling it vectorise. */
static inline float mp_expf(float x) {
    float xc = x > -87.3f ? x : -87.3f;   /* NaN clamps too: converting NaN to int below would be undefined */
    xc = xc > 88.0f ? 88.0f : xc;
    /* round(xc / ln2) with the 1.5*2^23 trick (exact in round-to-nearest mode) */
    float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = xc - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    uint32_t e = (uint32_t)((int32_t)n + 127) << 23;   /* n in [-126, 127]: a normal scale */
    float s;
    memcpy(&s, &e, sizeof s);
    float y = p * s;
    y = x != x ? x : y;
    return x < -87.3f ? 0.0f : y;
}

/* y[i] = mp_expf(x[i]) (i < n) by the vectorised code of the ISA level the CPU backend runs (core/cpu_isa.c
 * dispatches; tests/test_kernels.c measures its error against libm). */
void mp_cpu_expf_n(float *y, const float *x, int64_t n);

/* The OpenMP team size for a CPU kernel: omp_get_max_threads(), capped by OPENBLAS_NUM_THREADS when
 * that is set (the project's documented way to say "one thread per rank" under mpirun). The first
 * call also switches OpenBLAS to one thread for good: all CPU parallelism goes through OpenMP (gemm
 * splits C into row or column panels itself), so OpenBLAS's spinning pool never competes with the
 * OpenMP team for the cores. */
int mp_cpu_threads(void);

/* The OpenMP team size for a loop of `items` independent work items: mp_cpu_threads(), but never
 * more threads than items (and at least one). */
static inline int mp_cpu_team(int items) {
    int n = mp_cpu_threads();
    return items < n ? (items > 0 ? items : 1) : n;
}

/* The blocks of the flash-style attention kernels (core/kernels_cpu_attn_fwd.c, _bwd.c), both of which
 * stack the query heads of a kv group time-major (row i ns + j: head j's time i) so that each product is
 * one sgemm for all of them. Query blocks of BQ rows; key blocks of BK keys at multiples of BK, BK a
 * multiple of BQ so every key block a query block visits starts at or before its first row. 192: with
 * the heads stacked, the backward ran 1-3% faster than with 128 or 256 at T 256, 512 and 2048, the
 * forward about as fast as with 256 and 5-10% faster than with 128 (one core, AVX2 EPYC, A/B); at 64
 * (the first version) the call and packing overheads of 64 x 64 x 64 products made the backward 1.5-1.7x
 * the CPU time of the old T x T one. */
#define MP_ATTN_BQ 64
#define MP_ATTN_BK 192
_Static_assert(MP_ATTN_BK % MP_ATTN_BQ == 0, "key blocks are whole multiples of query blocks");
/* Rows of the bands the key block holding the diagonal is cut into, each band only as wide as its last
 * row's causal prefix, so the products skip most of the zeros above the diagonal: in the backward 32
 * ran 3-6% faster than uncut blocks at T 256 and 512 (one core, AVX2 EPYC, A/B against the old binary in
 * alternation); 16 was slower at T 256 (the smaller calls cost what the FLOPs saved). */
#define MP_ATTN_SUB 32
/* Floats of the forward's per-thread arena at most (heap, one per thread per call, sized for the call's
 * query blocks: a decode row needs a few KiB): copies of Q and the output accumulator (BQ x hd per
 * stacked head), the scores (BQ x BK) and the running max and sum per stacked head: 3 heads at head
 * dim 64 (242 KiB per thread), 2 up to head dim 160, one above. */
#define MP_ATTN_FWD_ARENA (3 * MP_ATTN_BQ * (2 * 64 + MP_ATTN_BK + 2))
/* Floats of the backward's per-thread scratch arena (heap, one per thread per call): P and dS of BQ x
 * BK and copies of Q, dO, dQ of BQ x hd per stacked head; 3 heads at head dim 64 (432 KiB per thread),
 * 2 up to head dim 160, one head (read in place, no copies) above. Stacking 2 + 1 of bench_small's 3
 * heads was 3-5% slower than all 3. */
#define MP_ATTN_BWD_ARENA (3 * MP_ATTN_BQ * (2 * MP_ATTN_BK + 3 * 64))

/* How many of a kv group's rep query heads an attention kernel stacks: as many as fit an arena of
 * `arena` floats at per_head floats each, at least 1. A function of the shape only (never of the thread
 * count or T), so the products, and their rounding, are the same in every run. */
static inline int mp_attn_stack(int rep, size_t per_head, size_t arena) {
    int ns = rep;
    while (ns > 1 && (size_t)ns * per_head > arena) ns--;
    return ns;
}

/* Copies m rows of n floats from src (row stride ss) to dst (row stride ds): the attention kernels'
 * stacking of a query block's rows and its way back. */
static inline void mp_cpu_copy_rows(float *dst, size_t ds, const float *src, size_t ss, int m, int n) {
    for (int i = 0; i < m; i++) memcpy(dst + i * ds, src + i * ss, (size_t)n * sizeof(float));
}

/* The first key position query position t sees under a sliding window of `window` keys (t - window < j
 * <= t; core/backend.h attn_fwd): 0 when window is 0 (full causal) or reaches back past position 0. */
static inline int mp_attn_first_key(int t, int window) {
    return window > 0 && t - window + 1 > 0 ? t - window + 1 : 0;
}

/* Causal GQA attention forward and backward, contracts as struct mp_backend's attn_fwd/attn_bwd (q, dq
 * with row stride ldq, k, v, dk, dv with ldkv; out, dout dense; window as there, 0 = full causal). */
#define mp_cpu_attn_fwd MP_ISA_FN(mp_cpu_attn_fwd)
#define mp_cpu_attn_bwd MP_ISA_FN(mp_cpu_attn_bwd)
#define mp_cpu_attn_fwd_kv MP_ISA_FN(mp_cpu_attn_fwd_kv)
void mp_cpu_attn_fwd(float *out, float *lse, const float *q, const float *k, const float *v, int B, int T, int H,
                     int KV, int hd, int ldq, int ldkv, int window);
/* The KV-cache forward, contract as struct mp_backend's attn_fwd_kv. */
void mp_cpu_attn_fwd_kv(float *out, float *lse, const float *q, const float *k, const float *v, int B, int Tq,
                        int pos0, int Tc, int H, int KV, int hd, int window);
void mp_cpu_attn_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *out,
                     const float *lse, const float *q, const float *k, const float *v, int B, int T, int H, int KV,
                     int hd, int ldq, int ldkv, int window);

#endif
