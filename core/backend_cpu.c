/*
 * core/backend_cpu.c — the CPU implementation of struct mp_backend (core/backend.h), fp32 (act_dtype
 * MP_F32: compute tensors are the fp32 buffers themselves).
 *
 * gemm is OpenBLAS cblas_sgemm (row-major); attention lives in core/kernels_cpu_attn_fwd.c and
 * core/kernels_cpu_attn_bwd.c. Everything else is plain loops over restrict pointers that gcc
 * vectorises at -O3 -march=native; the exps go through mp_expf (core/kernels_cpu.h) so that those
 * loops vectorise too. "Device" memory is host memory: to_host/to_device are memmoves, and the device
 * scalars of sumsq_acc/sum_acc are plain doubles updated in place.
 *
 * Threads: one pool, OpenMP's, sized by mp_cpu_threads() (OpenBLAS is kept single-threaded). gemm
 * splits C into one panel per thread (rows when M >= N, else columns), each a single-threaded sgemm
 * over the full K, so no sum is split across threads. Every other loop over activations, gradients or
 * weights runs under OpenMP once its work is large (MP_OMP_MIN elements), with a static schedule over
 * work items that own their outputs: elements (add, accumulate, scale, SwiGLU, AdamW), rows (RMSNorm's
 * forward and dx, RoPE, embedding lookup, cross-entropy), or column blocks where rows add into one
 * vector (RMSNorm's dw, the embedding gradient: each block adds the rows in order), so each output
 * element is computed by the same arithmetic whatever the thread count. Reductions (sumsq_acc,
 * sum_acc, RMSNorm rows, softmax sums) run in one fixed order,
 * independent of the thread count (gemm panels follow the thread count, so gemm is bitwise
 * reproducible for a given thread count): results are bitwise reproducible run to run. (Measured on 2
 * cores: the panel split matches OpenBLAS's own threading within 5% on Llama-sized gemms, and leaves
 * no second spinning thread pool to fight OpenMP's.)
 *
 * Gradient conventions follow backend.h: weight gradients accumulate, activation gradients are written,
 * except rmsnorm_bwd's dx, which accumulates into the residual stream.
 *
 * This file and the attention kernels are compiled once per x86-64 ISA level (v2, v3: AVX2 + FMA, v4:
 * AVX-512), each copy's public names suffixed by MP_ISA_FN; core/cpu_isa.c picks one table at start-up
 * (core/kernels_cpu.h says how).
 */
#include "core/backend.h"
#include "core/kernels_cpu.h"
#include <assert.h>
#include <cblas.h>
#include <math.h>
#include <omp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* Loops below this many elements stay on one thread (the team start costs more than it saves). */
#define MP_OMP_MIN (1 << 15)

/* ---- memory ---- */

/* Zero-filled without touching large buffers (mp_zeroed: fresh pages, zeroed by the kernel on first
 * use), so a buffer the next step or a checkpoint load overwrites is written once. */
static void *cpu_alloc(mp_backend *be, size_t bytes, mp_mem_cat cat) { return mp_zeroed(bytes, cat); }

static void cpu_free(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat) { mp_free_zeroed(p, bytes, cat); }

/* Pinned memory is plain host memory on the CPU. */
static void *cpu_host_alloc(mp_backend *be, size_t bytes, mp_mem_cat cat) { return mp_zeroed(bytes, cat); }
static void cpu_host_free(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat) { mp_free_zeroed(p, bytes, cat); }

/* ---- streams and events: every op has finished when it returns, so these are tokens ---- */

static struct mp_stream_s *cpu_stream_token(void) {
    static char token;
    return (struct mp_stream_s *)(void *)&token;
}
static struct mp_event_s *cpu_event_token(void) {
    static char token;
    return (struct mp_event_s *)(void *)&token;
}
static mp_stream cpu_stream_create(mp_backend *be) { return cpu_stream_token(); }
static void cpu_stream_destroy(mp_backend *be, mp_stream s) { assert(!s || s == cpu_stream_token()); }
static mp_event cpu_event_create(mp_backend *be) { return cpu_event_token(); }
static void cpu_event_destroy(mp_backend *be, mp_event e) { assert(!e || e == cpu_event_token()); }
static void cpu_event_record(mp_backend *be, mp_event e, mp_stream s) {
    assert(e == cpu_event_token() && (!s || s == cpu_stream_token()));
}
static void cpu_stream_wait_event(mp_backend *be, mp_stream s, mp_event e) {
    assert(e == cpu_event_token() && (!s || s == cpu_stream_token()));
}
static void cpu_event_sync(mp_backend *be, mp_event e) { assert(e == cpu_event_token()); }

/* Large buffers (the gradients, zeroed every step) in 1 MiB pieces over the threads. */
static void cpu_memset0(mp_backend *be, void *p, size_t bytes) {
    enum { PIECE = 1 << 20 };
    const int64_t pieces = (int64_t)((bytes + PIECE - 1) / PIECE);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if (pieces >= 4)
    for (int64_t i = 0; i < pieces; i++) {
        size_t off = (size_t)i * PIECE;
        memset((char *)p + off, 0, bytes - off < PIECE ? bytes - off : PIECE);
    }
}

static void cpu_copy(mp_backend *be, void *dst, const void *src, size_t bytes) {
    if (bytes && dst != src) memmove(dst, src, bytes);
}

static void cpu_to_host(mp_backend *be, void *host_dst, const void *dev_src, size_t bytes) {
    cpu_copy(be, host_dst, dev_src, bytes);
}

static void cpu_to_device(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes) {
    cpu_copy(be, dev_dst, host_src, bytes);
}

/* Nothing is ever in flight on the CPU: the copy is done on return, so done (a token) is complete. */
static void cpu_to_device_async(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes, mp_event done) {
    assert(done == cpu_event_token());
    cpu_copy(be, dev_dst, host_src, bytes);
}

static void cpu_synchronize(mp_backend *be) {}

/* ---- dense linear algebra ---- */

/* Work below this many multiply-adds runs as one sgemm on the calling thread. */
#define MP_GEMM_SPLIT_MIN (1 << 20)

/* One single-threaded product. A one-row product (M = 1: a decode step's linear layers) or a one-column
 * one (N = 1: the feature-major MLP's gate/up in a decode step, layers/llama.c) is a matrix-vector
 * product, which OpenBLAS's sgemv does reading op(B) once, where sgemm would first copy (pack) all of it:
 * twice the memory traffic for the weights, which is what a decode step's time is. */
static void sgemm1(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A, int lda,
                   const float *B, int ldb, float beta, float *C, int ldc) {
    if (M == 1) {   /* C[0, :] = alpha op(A)[0, :] op(B) + beta C[0, :], op(A)[0, k] = A[k * (trans_a ? lda : 1)] */
        if (beta == 0.0f) memset(C, 0, (size_t)N * sizeof(float));   /* garbage (NaN) in C never leaks: 0 * C */
        cblas_sgemv(CblasRowMajor, trans_b ? CblasNoTrans : CblasTrans, trans_b ? N : K, trans_b ? K : N, alpha, B,
                    ldb, A, trans_a ? lda : 1, beta, C, 1);
        return;
    }
    if (N == 1) {   /* C[:, 0] = alpha op(A) op(B)[:, 0] + beta C[:, 0], op(B)[k, 0] = B[k * (trans_b ? 1 : ldb)] */
        if (beta == 0.0f)
            for (int i = 0; i < M; i++) C[(size_t)i * ldc] = 0.0f;
        cblas_sgemv(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_a ? K : M, trans_a ? M : K, alpha, A,
                    lda, B, trans_b ? 1 : ldb, beta, C, ldc);
        return;
    }
    cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans, M,
                N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

/* C = alpha op(A) op(B) + beta C. K == 0 is handled here (C = beta C) so OpenBLAS never sees a
 * degenerate leading dimension. Large products are split into panels of C, a multiple of 16 rows
 * (or columns) each, one per thread; op(A)'s rows i0.. start at A + i0 (trans_a) or A + i0*lda,
 * op(B)'s columns j0.. at B + j0*ldb (trans_b) or B + j0. */
static void cpu_gemm(mp_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                     const void *A_v, int lda, const void *B_v, int ldb, float beta, void *C_v, int ldc, mp_dtype c_dtype) {
    const float *A = A_v;
    const float *B = B_v;
    float *C = C_v;
    assert(c_dtype == MP_F32);   /* the CPU computes in fp32: C is fp32 whatever it holds */
    (void)c_dtype;
    assert(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return;
    assert(ldc >= N);
    if (K == 0) {
        for (int i = 0; i < M; i++) {
            float *restrict c = C + (size_t)i * ldc;
            if (beta == 0.0f) memset(c, 0, (size_t)N * sizeof(float));
            else for (int j = 0; j < N; j++) c[j] *= beta;
        }
        return;
    }
    assert(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N));
    int nt = mp_cpu_threads();
    const int split_rows = M >= N, len = split_rows ? M : N;
    if (nt > len / 32) nt = len / 32;
    if (nt < 2 || (int64_t)M * N * K < MP_GEMM_SPLIT_MIN) {
        sgemm1(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    const int chunk = ((len + nt - 1) / nt + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(nt)
    for (int t = 0; t < nt; t++) {
        int p0 = t * chunk, p1 = p0 + chunk < len ? p0 + chunk : len;
        if (p1 <= p0) continue;
        if (split_rows)
            sgemm1(trans_a, trans_b, p1 - p0, N, K, alpha, trans_a ? A + p0 : A + (size_t)p0 * lda, lda, B, ldb,
                   beta, C + (size_t)p0 * ldc, ldc);
        else
            sgemm1(trans_a, trans_b, M, p1 - p0, K, alpha, A, lda, trans_b ? B + (size_t)p0 * ldb : B + p0, ldb,
                   beta, C + p0, ldc);
    }
}

/* ---- elementwise ---- */

/* fp32 compute: the conversions to and from act_dtype are copies. */
static void cpu_to_act(mp_backend *be, void *dst, const float *src, int64_t n) {
    assert(n >= 0 && (dst != src || n == 0));
    if (n) memcpy(dst, src, (size_t)n * sizeof(float));
}
static void cpu_from_act(mp_backend *be, float *dst, const void *src, int64_t n) {
    assert(n >= 0 && (dst != src || n == 0));
    if (n) memcpy(dst, src, (size_t)n * sizeof(float));
}

static void cpu_add(mp_backend *be, void *out_v, const void *a_v, const void *b_v, int64_t n) {
    float *out = out_v;
    const float *a = a_v;
    const float *b = b_v;
    /* out may alias a or b (x = x + y), so no restrict here; gcc versions the loop on overlap. */
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if (n >= MP_OMP_MIN)
    for (int64_t i = 0; i < n; i++) out[i] = a[i] + b[i];
}

static void cpu_accumulate(mp_backend *be, float *dst, const float *src, int64_t n) {
    float *restrict d = dst;
    const float *restrict s = src;
#pragma omp parallel for simd schedule(static) num_threads(mp_cpu_threads()) if (n >= MP_OMP_MIN)
    for (int64_t i = 0; i < n; i++) d[i] += s[i];
}

static void cpu_scale(mp_backend *be, float *x, float s, int64_t n) {
    float *restrict p = x;
#pragma omp parallel for simd schedule(static) num_threads(mp_cpu_threads()) if (n >= MP_OMP_MIN)
    for (int64_t i = 0; i < n; i++) p[i] *= s;
}

/* Sum of squares in double, in an order that depends only on n: blocks of 4096 elements, each summed
 * by one vectorised reduction (blocks may run on different threads), the block sums then added in
 * index order, 256 blocks at a time. */
static double sumsq_f64(const float *x, int64_t n) {
    enum { BLK = 4096, GROUP = 256 };
    double total = 0.0;
    for (int64_t g0 = 0; g0 < n; g0 += (int64_t)BLK * GROUP) {
        double part[GROUP];
        int64_t left = n - g0, nb = (left + BLK - 1) / BLK;
        if (nb > GROUP) nb = GROUP;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if (nb >= 8)
        for (int64_t bi = 0; bi < nb; bi++) {
            int64_t i0 = g0 + bi * BLK, i1 = i0 + BLK < n ? i0 + BLK : n;
            double s = 0.0;
#pragma omp simd reduction(+ : s)
            for (int64_t i = i0; i < i1; i++) s += (double)x[i] * (double)x[i];
            part[bi] = s;
        }
        for (int64_t bi = 0; bi < nb; bi++) total += part[bi];
    }
    return total;
}

/* "Device" memory is host memory: the accumulator is updated in place, nothing is copied. */
static void cpu_sumsq_acc(mp_backend *be, double *acc, const float *x, int64_t n) {
    assert(acc && n >= 0);
    *acc += sumsq_f64(x, n);
}

/* Strictly in index order (n is a count of per-token losses, small next to the step's work). */
static void cpu_sum_acc(mp_backend *be, double *acc, const float *x, int64_t n) {
    assert(acc && n >= 0);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    *acc += s;
}

/* ---- embedding ---- */

static void cpu_embed_fwd(mp_backend *be, void *out_v, const int32_t *tok, const void *wte_v, int N, int D,
                          int v_start, int v_local) {
    float *out = out_v;
    const float *wte = wte_v;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * D >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        int64_t r = (int64_t)tok[n] - v_start;
        float *o = out + (size_t)n * D;
        if (r >= 0 && r < v_local) memcpy(o, wte + (size_t)r * D, (size_t)D * sizeof(float));
        else memset(o, 0, (size_t)D * sizeof(float));
    }
}

/* Column blocks of MP_COLS_BLK are the work items (the threads' shares of D); within one, tokens in order,
 * so repeated tokens add up in a fixed order whatever the thread count. */
#define MP_COLS_BLK 64
static void cpu_embed_bwd(mp_backend *be, float *dwte, const void *dout_v, const int32_t *tok, int N, int D,
                          int v_start, int v_local) {
    const float *dout = dout_v;
    const int nblk = (D + MP_COLS_BLK - 1) / MP_COLS_BLK;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(nblk)) if ((int64_t)N * D >= MP_OMP_MIN)
    for (int cb = 0; cb < nblk; cb++) {
        const int i0 = cb * MP_COLS_BLK, i1 = i0 + MP_COLS_BLK < D ? i0 + MP_COLS_BLK : D;
        for (int n = 0; n < N; n++) {
            int64_t r = (int64_t)tok[n] - v_start;
            if (r < 0 || r >= v_local) continue;
            float *restrict d = dwte + (size_t)r * D;
            const float *restrict g = dout + (size_t)n * D;
            for (int i = i0; i < i1; i++) d[i] += g[i];
        }
    }
}

/* ---- RMSNorm ---- */

static void cpu_rmsnorm_fwd(mp_backend *be, void *y_v, float *rstd, const void *x_v, const void *w_v, int N,
                            int D, float eps) {
    float *y = y_v;
    const float *x = x_v;
    const float *w = w_v;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * D >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict xr = x + (size_t)n * D;
        float *restrict yr = y + (size_t)n * D;
        double ss = 0.0;
#pragma omp simd reduction(+ : ss)
        for (int i = 0; i < D; i++) ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / D + (double)eps));
        rstd[n] = r;
        for (int i = 0; i < D; i++) yr[i] = xr[i] * r * w[i];
    }
}

/* One row of the RMSNorm backward: dx accumulates; dw too when it is not NULL. */
static inline void rmsnorm_bwd_row(float *restrict dxr, float *restrict dwp, const float *restrict g,
                                   const float *restrict xr, const float *restrict w, float r, int D) {
    double dot = 0.0;
#pragma omp simd reduction(+ : dot)
    for (int i = 0; i < D; i++) dot += (double)(w[i] * g[i]) * xr[i];
    const float c = (float)(dot / D) * r * r;
    if (!dwp) {
        for (int i = 0; i < D; i++) dxr[i] += r * (w[i] * g[i] - xr[i] * c);
        return;
    }
    for (int i = 0; i < D; i++) {
        dxr[i] += r * (w[i] * g[i] - xr[i] * c);
        dwp[i] += g[i] * xr[i] * r;
    }
}

/* dx_i += r * (w_i dy_i - x_i r^2 mean_j(w_j dy_j x_j)),  dw_i += sum_n dy_i x_i r. On one thread (or
 * small inputs) one sweep of rows; on more, two sweeps split so that no element's arithmetic depends on
 * the split: dx by rows (each row its own), then dw by column blocks, each adding the rows in the same
 * order and by the same expression as the one sweep (test_kernels compares one and two threads). */
static void cpu_rmsnorm_bwd(mp_backend *be, void *dx_v, float *dw, const void *dy_v, const void *x_v,
                            const void *w_v, const float *rstd, int N, int D) {
    float *dx = dx_v;
    const float *dy = dy_v;
    const float *x = x_v;
    const float *w = w_v;
    const int nblk = (D + MP_COLS_BLK - 1) / MP_COLS_BLK;
    if ((int64_t)N * D < MP_OMP_MIN || mp_cpu_threads() == 1) {
        for (int n = 0; n < N; n++)
            rmsnorm_bwd_row(dx + (size_t)n * D, dw, dy + (size_t)n * D, x + (size_t)n * D, w, rstd[n], D);
        return;
    }
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads())
    for (int n = 0; n < N; n++)
        rmsnorm_bwd_row(dx + (size_t)n * D, NULL, dy + (size_t)n * D, x + (size_t)n * D, w, rstd[n], D);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(nblk))
    for (int cb = 0; cb < nblk; cb++) {
        const int i0 = cb * MP_COLS_BLK, i1 = i0 + MP_COLS_BLK < D ? i0 + MP_COLS_BLK : D;
        float *restrict dwp = dw;
        for (int n = 0; n < N; n++) {
            const float *restrict xr = x + (size_t)n * D;
            const float *restrict g = dy + (size_t)n * D;
            const float r = rstd[n];
            for (int i = i0; i < i1; i++) dwp[i] += g[i] * xr[i] * r;
        }
    }
}

/* ---- biases and per-head RMSNorm (a column block of rows ldx apart) ---- */

static void cpu_bias_add(mp_backend *be, void *x_v, int ldx, const void *b_v, int N, int cols) {
    float *x = x_v;
    const float *b = b_v;
    assert(ldx >= cols);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * cols >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        float *restrict xr = x + (size_t)n * ldx;
        for (int j = 0; j < cols; j++) xr[j] += b[j];
    }
}

/* Column blocks are the work items; within one, rows in order: each db[j] adds its rows in the order n
 * = 0 .. N-1 whatever the thread count. */
static void cpu_bias_bwd(mp_backend *be, float *db, const void *dx_v, int ldx, int N, int cols) {
    const float *dx = dx_v;
    const int nblk = (cols + MP_COLS_BLK - 1) / MP_COLS_BLK;
    assert(ldx >= cols);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(nblk)) if ((int64_t)N * cols >= MP_OMP_MIN)
    for (int cb = 0; cb < nblk; cb++) {
        const int j0 = cb * MP_COLS_BLK, j1 = j0 + MP_COLS_BLK < cols ? j0 + MP_COLS_BLK : cols;
        float *restrict d = db;
        for (int n = 0; n < N; n++) {
            const float *restrict g = dx + (size_t)n * ldx;
            for (int j = j0; j < j1; j++) d[j] += g[j];
        }
    }
}

/* rmsnorm_fwd's arithmetic on each head: the sum of squares in double, rstd rounded to fp32, then
 * y = (x * rstd) * w in fp32. */
static void cpu_head_rmsnorm_fwd(mp_backend *be, void *x_v, int ldx, void *x_save_v, float *rstd, const void *w_v,
                                 int N, int H, int hd, float eps) {
    float *x = x_v, *x_save = x_save_v;
    const float *w = w_v;
    assert(ldx >= H * hd);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * H * hd >= MP_OMP_MIN)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            float *restrict xr = x + (size_t)n * ldx + (size_t)h * hd;
            if (x_save) memcpy(x_save + ((size_t)n * H + h) * hd, xr, (size_t)hd * sizeof(float));
            double ss = 0.0;
#pragma omp simd reduction(+ : ss)
            for (int i = 0; i < hd; i++) ss += (double)xr[i] * xr[i];
            float r = (float)(1.0 / sqrt(ss / hd + (double)eps));
            rstd[(size_t)n * H + h] = r;
            for (int i = 0; i < hd; i++) xr[i] = xr[i] * r * w[i];
        }
}

/* Two sweeps, since dx overwrites dy: dw first (by column blocks, each adding the (row, head) pairs in
 * the order n-major, h-minor: fixed by N and H alone), then dx by rows with rmsnorm_bwd_row's
 * expression, written instead of accumulated. */
static void cpu_head_rmsnorm_bwd(mp_backend *be, void *dx_v, int ldx, float *dw, const void *x_save_v,
                                 const float *rstd, const void *w_v, int N, int H, int hd) {
    float *dx = dx_v;
    const float *xs = x_save_v, *w = w_v;
    const int nblk = (hd + MP_COLS_BLK - 1) / MP_COLS_BLK, big = (int64_t)N * H * hd >= MP_OMP_MIN;
    assert(ldx >= H * hd);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(nblk)) if (big)
    for (int cb = 0; cb < nblk; cb++) {
        const int i0 = cb * MP_COLS_BLK, i1 = i0 + MP_COLS_BLK < hd ? i0 + MP_COLS_BLK : hd;
        float *restrict dwp = dw;
        for (int n = 0; n < N; n++)
            for (int h = 0; h < H; h++) {
                const float *restrict g = dx + (size_t)n * ldx + (size_t)h * hd;
                const float *restrict xr = xs + ((size_t)n * H + h) * hd;
                const float r = rstd[(size_t)n * H + h];
                for (int i = i0; i < i1; i++) dwp[i] += g[i] * xr[i] * r;
            }
    }
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if (big)
    for (int n = 0; n < N; n++)
        for (int h = 0; h < H; h++) {
            float *restrict g = dx + (size_t)n * ldx + (size_t)h * hd;   /* dy in, dx out, element by element */
            const float *restrict xr = xs + ((size_t)n * H + h) * hd;
            const float r = rstd[(size_t)n * H + h];
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int i = 0; i < hd; i++) dot += (double)(w[i] * g[i]) * xr[i];
            const float c = (float)(dot / hd) * r * r;
            for (int i = 0; i < hd; i++) g[i] = r * (w[i] * g[i] - xr[i] * c);
        }
}

/* ---- RoPE ---- */

/* Rotates (x_i, x_{i+h}) by +angle (dir = 1) or -angle (dir = -1) for every token and head; token rows
 * are ld floats apart (the heads may be a column block of a wider row). */
static void rope_apply(float *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                       int pos0, int ld, float dir) {
    assert(hd % 2 == 0 && pos0 >= 0 && ld >= H * hd);
    const int half = hd / 2;
#pragma omp parallel for collapse(2) schedule(static) num_threads(mp_cpu_threads()) \
    if ((int64_t)B * T * H * hd >= MP_OMP_MIN)
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++) {
            const float *restrict c = cos_t + (size_t)(pos0 + t) * half;
            const float *restrict s = sin_t + (size_t)(pos0 + t) * half;
            for (int h = 0; h < H; h++) {
                float *restrict lo = x + ((size_t)b * T + t) * (size_t)ld + (size_t)h * hd;
                float *restrict hi = lo + half;
                for (int i = 0; i < half; i++) {
                    float a = lo[i], bb = hi[i], si = dir * s[i];
                    lo[i] = a * c[i] - bb * si;
                    hi[i] = bb * c[i] + a * si;
                }
            }
        }
}

static void cpu_rope_fwd(mp_backend *be, void *x_v, const float *cos_t, const float *sin_t, int B, int T,
                         int H, int hd, int pos0, int ld) {
    float *x = x_v;
    rope_apply(x, cos_t, sin_t, B, T, H, hd, pos0, ld, 1.0f);
}

/* The gradient of a rotation is the inverse rotation. */
static void cpu_rope_bwd(mp_backend *be, void *dx_v, const float *cos_t, const float *sin_t, int B, int T,
                         int H, int hd, int pos0, int ld) {
    float *dx = dx_v;
    rope_apply(dx, cos_t, sin_t, B, T, H, hd, pos0, ld, -1.0f);
}

/* ---- attention (core/kernels_cpu_attn_fwd.c, core/kernels_cpu_attn_bwd.c) ---- */

static void cpu_attn_fwd(mp_backend *be, void *out_v, float *lse, const void *q_v, const void *k_v,
                         const void *v_v, int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    float *out = out_v;
    const float *q = q_v;
    const float *k = k_v;
    const float *v = v_v;
    mp_cpu_attn_fwd(out, lse, q, k, v, B, T, H, KV, hd, ldq, ldkv, window);
}

static void cpu_attn_fwd_kv(mp_backend *be, void *out_v, float *lse, const void *q_v, const void *k_v,
                            const void *v_v, int B, int Tq, int pos0, int Tc, int H, int KV, int hd, int window) {
    mp_cpu_attn_fwd_kv(out_v, lse, q_v, k_v, v_v, B, Tq, pos0, Tc, H, KV, hd, window);
}

static void cpu_attn_bwd(mp_backend *be, void *dq_v, void *dk_v, void *dv_v, float *scratch, const void *dout_v,
                         const void *out_v, const float *lse, const void *q_v, const void *k_v, const void *v_v,
                         int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    float *dq = dq_v;
    float *dk = dk_v;
    float *dv = dv_v;
    const float *dout = dout_v;
    const float *out = out_v;
    const float *q = q_v;
    const float *k = k_v;
    const float *v = v_v;
    mp_cpu_attn_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, B, T, H, KV, hd, ldq, ldkv, window);
}

/* ---- SwiGLU ---- */

static void cpu_swiglu_fwd(mp_backend *be, void *out_v, const void *gate_v, const void *up_v, int64_t n) {
    float *out = out_v;
    const float *gate = gate_v;
    const float *up = up_v;
    float *restrict o = out;
    const float *restrict g = gate, *restrict u = up;
#pragma omp parallel for simd schedule(static) num_threads(mp_cpu_threads()) if (n >= MP_OMP_MIN)
    for (int64_t i = 0; i < n; i++) o[i] = g[i] / (1.0f + mp_expf(-g[i])) * u[i];
}

/* silu'(g) = s (1 + g (1 - s)), s = sigmoid(g). */
static void cpu_swiglu_bwd(mp_backend *be, void *dgate_v, void *dup_v, const void *dout_v, const void *gate_v,
                           const void *up_v, int64_t n) {
    float *dgate = dgate_v;
    float *dup = dup_v;
    const float *dout = dout_v;
    const float *gate = gate_v;
    const float *up = up_v;
    float *restrict dg = dgate, *restrict du = dup;
    const float *restrict d = dout, *restrict g = gate, *restrict u = up;
#pragma omp parallel for simd schedule(static) num_threads(mp_cpu_threads()) if (n >= MP_OMP_MIN)
    for (int64_t i = 0; i < n; i++) {
        float s = 1.0f / (1.0f + mp_expf(-g[i]));
        float silu = g[i] * s;
        du[i] = d[i] * silu;
        dg[i] = d[i] * u[i] * s * (1.0f + g[i] * (1.0f - s));
    }
}

/* ---- vocab-parallel cross-entropy ----
 * The exp loops walk the [N, V_local] logits in chunks of XCHUNK columns and prefetch the chunk
 * XPF floats ahead: measured on the 2-core target VM, the hardware prefetcher alone leaves the
 * exp-bound loop at ~2 ns per logit once the logits are out of cache, the explicit prefetch at ~0.6
 * (in cache it is ~0.5). Prefetches never fault; they are kept inside the buffer anyway. */
#define XCHUNK 256
#define XPF 512

static inline void prefetch_chunk(const float *p, const float *end) {
    for (int i = 0; i < XCHUNK; i += 16)
        if (p + i < end) __builtin_prefetch(p + i);
}

static void cpu_xent_rowmax(mp_backend *be, float *rowmax, const void *logits_v, int N, int v_local,
                            int v_valid) {
    const float *logits = logits_v;
    assert(v_valid >= 0 && v_valid <= v_local);
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * v_valid >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict l = logits + (size_t)n * v_local;
        float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
        for (int j = 0; j < v_valid; j++) mx = l[j] > mx ? l[j] : mx;
        rowmax[n] = mx;
    }
}

/* sum of exp(l[j] - mx) over j in [j0, j1): one vectorised reduction (a chunk of a row). */
static inline float chunk_sumexp(const float *restrict l, int j0, int j1, float mx) {
    float c = 0.0f;
#pragma omp simd reduction(+ : c)
    for (int j = j0; j < j1; j++) c += mp_expf(l[j] - mx);
    return c;
}

/* A row whose global max is -inf (no finite logit anywhere) has sumexp 0. */
static void cpu_xent_sumexp(mp_backend *be, float *sumexp, const void *logits_v, const float *rowmax, int N,
                            int v_local, int v_valid) {
    const float *logits = logits_v;
    assert(v_valid >= 0 && v_valid <= v_local);
    const float *end = logits + (size_t)N * v_local;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * v_valid >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict l = logits + (size_t)n * v_local;
        const float mx = rowmax[n];
        if (mx == -INFINITY) {
            sumexp[n] = 0.0f;
            continue;
        }
        float s = 0.0f;
        for (int j0 = 0; j0 < v_valid; j0 += XCHUNK) {
            int j1 = j0 + XCHUNK < v_valid ? j0 + XCHUNK : v_valid;
            prefetch_chunk(l + j0 + XPF, end);
            s += chunk_sumexp(l, j0, j1, mx);
        }
        sumexp[n] = s;
    }
}

/* One sweep per row: each XCHUNK chunk's max first (the chunk is then in L1), the running sum rescaled
 * by exp(old max - new max) when the max grows, then the chunk's exps against the running max. The sum
 * rounds differently from xent_sumexp's (exps against the row's final max), within a few ulp. Rows are
 * the work items: each row's arithmetic is the same on any thread. */
static void cpu_xent_fwd(mp_backend *be, float *rowmax, float *sumexp, float *tlogit, const void *logits_v,
                         const int32_t *tgt, int N, int v_local, int v_valid, int v_start) {
    const float *logits = logits_v;
    assert(v_valid >= 0 && v_valid <= v_local);
    const float *end = logits + (size_t)N * v_local;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * v_valid >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        const float *restrict l = logits + (size_t)n * v_local;
        float mx = -INFINITY, s = 0.0f;
        for (int j0 = 0; j0 < v_valid; j0 += XCHUNK) {
            int j1 = j0 + XCHUNK < v_valid ? j0 + XCHUNK : v_valid;
            prefetch_chunk(l + j0 + XPF, end);
            float cm = -INFINITY;
#pragma omp simd reduction(max : cm)
            for (int j = j0; j < j1; j++) cm = l[j] > cm ? l[j] : cm;
            if (cm > mx) {
                s = mx == -INFINITY ? 0.0f : s * mp_expf(mx - cm);
                mx = cm;
            }
            if (mx == -INFINITY) continue;   /* no finite logit yet */
            s += chunk_sumexp(l, j0, j1, mx);
        }
        rowmax[n] = mx;
        sumexp[n] = s;
        int64_t c = (int64_t)tgt[n] - v_start;
        tlogit[n] = (c >= 0 && c < v_local) ? l[c] : 0.0f;
    }
}

static void cpu_xent_rescale(mp_backend *be, float *sumexp, const float *local_max, const float *rowmax, int N) {
    for (int n = 0; n < N; n++)
        sumexp[n] = local_max[n] == -INFINITY ? 0.0f : sumexp[n] * mp_expf(local_max[n] - rowmax[n]);
}

static void cpu_xent_target(mp_backend *be, float *tlogit, const void *logits_v, const int32_t *tgt, int N,
                            int v_local, int v_start) {
    const float *logits = logits_v;
    for (int n = 0; n < N; n++) {
        int64_t c = (int64_t)tgt[n] - v_start;
        tlogit[n] = (c >= 0 && c < v_local) ? logits[(size_t)n * v_local + c] : 0.0f;
    }
}

static void cpu_xent_loss(mp_backend *be, float *losses, const float *rowmax, const float *sumexp,
                          const float *tlogit, int N) {
    for (int n = 0; n < N; n++) losses[n] = (float)(log((double)sumexp[n]) + rowmax[n] - tlogit[n]);
}

static void cpu_xent_bwd(mp_backend *be, void *logits_v, const float *rowmax, const float *sumexp,
                         const int32_t *tgt, float dloss, int N, int v_local, int v_valid, int v_start) {
    float *logits = logits_v;
    assert(v_valid >= 0 && v_valid <= v_local);
    const float *end = logits + (size_t)N * v_local;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if ((int64_t)N * v_local >= MP_OMP_MIN)
    for (int n = 0; n < N; n++) {
        float *restrict l = logits + (size_t)n * v_local;
        const float mx = rowmax[n];
        const float f = mx == -INFINITY ? 0.0f : dloss / sumexp[n];   /* no finite logit: no gradient */
        for (int j0 = 0; j0 < v_valid; j0 += XCHUNK) {
            int j1 = j0 + XCHUNK < v_valid ? j0 + XCHUNK : v_valid;
            prefetch_chunk(l + j0 + XPF, end);
            for (int j = j0; j < j1; j++) l[j] = f * mp_expf(l[j] - mx);
        }
        for (int j = v_valid; j < v_local; j++) l[j] = 0.0f;
        int64_t c = (int64_t)tgt[n] - v_start;
        if (c >= 0 && c < v_valid) l[c] -= dloss;
    }
}

/* ---- optimizer ---- */

/* Elements [i0, i1) of the AdamW update. */
static void adamw_range(float *restrict p, const float *restrict g, float *restrict m, float *restrict v,
                        int64_t i0, int64_t i1, float lr, float beta1, float beta2, float eps, float wd,
                        float bc1, float bc2, float grad_scale) {
    for (int64_t i = i0; i < i1; i++) {
        float gi = g[i] * grad_scale;
        float mi = beta1 * m[i] + (1.0f - beta1) * gi;
        float vi = beta2 * v[i] + (1.0f - beta2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] -= lr * ((mi * bc1) / (sqrtf(vi * bc2) + eps) + wd * p[i]);
    }
}

/* PyTorch AdamW: g *= grad_scale; m, v updated; p -= lr * (mhat / (sqrt(vhat) + eps) + wd * p), with
 * mhat = m / (1 - beta1^step), vhat = v / (1 - beta2^step) (the corrections computed in double), wd or 0
 * by the segments' mask. Chunks of 16384 elements of the whole range are the work items, cut where a
 * segment ends; each element's arithmetic is the same on any thread and in any piece. */
static void cpu_adamw(mp_backend *be, float *p, void *p_act, const float *g, float *m, float *v, int64_t n,
                      const mp_adamw_seg *segs, int nsegs, float lr, float beta1, float beta2, float eps, float wd,
                      int step, float grad_scale) {
    assert(!p_act || p_act == p);   /* fp32 compute: the compute copy is the master itself */
    (void)p_act;
    assert(step >= 1 && (!segs || nsegs >= 1));
    const float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, step)));
    const float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, step)));
    const int64_t chunk = 16384, nchunks = (n + chunk - 1) / chunk;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if (nchunks > 1)
    for (int64_t c = 0; c < nchunks; c++) {
        mp_adamw_pieces it = mp_adamw_pieces_of(segs, nsegs, c * chunk, c * chunk + chunk < n ? c * chunk + chunk : n);
        int64_t i0, i1;
        int decay;
        while (mp_adamw_piece(&it, &i0, &i1, &decay))
            adamw_range(p, g, m, v, i0, i1, lr, beta1, beta2, eps, decay ? wd : 0.0f, bc1, bc2, grad_scale);
    }
}

/* ---- the exp the kernels run, for its accuracy test ---- */

/* y[i] = mp_expf(x[i]) for i < n, by this level's vectorised loop: the code, flags and contractions of the
 * kernels' exp loops (core/cpu_isa.c's mp_cpu_expf_n hands out the running level's copy). */
void MP_ISA_FN(mp_cpu_expf_array)(float *y, const float *x, int64_t n) {
    float *restrict yo = y;
    const float *restrict xi = x;
#pragma omp simd
    for (int64_t i = 0; i < n; i++) yo[i] = mp_expf(xi[i]);
}

/* ---- the table ---- */

static mp_backend g_cpu = {
    .name = "cpu",
    .device = MP_DEV_CPU,
    .host_memory = 1,
    .act_dtype = MP_F32,
    .attn_max_head_dim = 0,   /* the CPU kernels take any head_dim */
    .alloc = cpu_alloc,
    .free = cpu_free,
    .memset0 = cpu_memset0,
    .to_host = cpu_to_host,
    .to_device = cpu_to_device,
    .to_device_async = cpu_to_device_async,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .stream_create = cpu_stream_create,
    .stream_destroy = cpu_stream_destroy,
    .event_create = cpu_event_create,
    .event_destroy = cpu_event_destroy,
    .event_record = cpu_event_record,
    .stream_wait_event = cpu_stream_wait_event,
    .event_sync = cpu_event_sync,
    .copy = cpu_copy,
    .synchronize = cpu_synchronize,
    .gemm = cpu_gemm,
    .to_act = cpu_to_act,
    .from_act = cpu_from_act,
    .add = cpu_add,
    .accumulate = cpu_accumulate,
    .scale = cpu_scale,
    .sumsq_acc = cpu_sumsq_acc,
    .sum_acc = cpu_sum_acc,
    .embed_fwd = cpu_embed_fwd,
    .embed_bwd = cpu_embed_bwd,
    .rmsnorm_fwd = cpu_rmsnorm_fwd,
    .rmsnorm_bwd = cpu_rmsnorm_bwd,
    .bias_add = cpu_bias_add,
    .bias_bwd = cpu_bias_bwd,
    .head_rmsnorm_fwd = cpu_head_rmsnorm_fwd,
    .head_rmsnorm_bwd = cpu_head_rmsnorm_bwd,
    .rope_fwd = cpu_rope_fwd,
    .rope_bwd = cpu_rope_bwd,
    .attn_fwd = cpu_attn_fwd,
    .attn_fwd_kv = cpu_attn_fwd_kv,
    .attn_bwd = cpu_attn_bwd,
    .swiglu_fwd = cpu_swiglu_fwd,
    .swiglu_bwd = cpu_swiglu_bwd,
    .xent_rowmax = cpu_xent_rowmax,
    .xent_sumexp = cpu_xent_sumexp,
    .xent_target = cpu_xent_target,
    .xent_fwd = cpu_xent_fwd,
    .xent_rescale = cpu_xent_rescale,
    .xent_loss = cpu_xent_loss,
    .xent_bwd = cpu_xent_bwd,
    .adamw = cpu_adamw,
    .impl = NULL,
};

mp_backend *MP_ISA_FN(mp_backend_cpu)(void) { return &g_cpu; }
