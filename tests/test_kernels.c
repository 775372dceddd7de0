/*
 * tests/test_kernels.c — the CPU backend's ops (core/backend.h) against float64 references.
 *
 * Every reference forward here is a plain, obviously-correct double-precision loop written for this
 * file alone (no code shared with the kernels). Forwards are compared at ~1e-5 relative. Every
 * backward is compared with central finite differences of the double reference: for a random
 * projection r of the output, s(x) = r . f(x), the FD gradient ds/dx_i = (s(x+h e_i) - s(x-h e_i))/2h
 * is computed in double, and the kernel's fp32 analytic gradient (the backward fed dout = r) must match
 * it to ~1e-3 relative (max abs difference over max |FD grad|). Accumulating outputs are pre-filled
 * with a random base and written outputs with garbage, so the += / = conventions are checked too.
 *
 * Shapes are small (B=2, T=5, GQA with H=4, KV=2, hd=4), plus attention shapes longer than the
 * kernels' blocks so that the blocked (flash-style) paths are covered; those are checked against a
 * double analytic backward, as finite differences would take too long there.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/backend.h"
#include "core/cuda_module.h"
#include "core/kernels_cpu.h"
#include "core/optim.h"
#include "layers/rope.h"
#include "tests/testutil.h"

#define FWD_TOL 1e-5
#define FD_TOL 1e-3
#define FD_H 1e-5

/* ---------------------------------------------------------------- helpers */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull;
/* the shared generators (tests/testutil.h) on this file's stream */
static float *frand(int64_t n, double amp) { return tu_frand(&g_rng, n, amp); }
static float *ffill(int64_t n, float val) { return tu_ffill(n, val); }
static double *todouble(const float *x, int64_t n) {
    double *d = malloc((size_t)(n ? n : 1) * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static float *fdup(const float *x, int64_t n) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    memcpy(p, x, (size_t)n * sizeof(float));
    return p;
}

/* max_i |a_i - b_i| / max_i |b_i| (b is the reference). */
static double rel_err(const float *a, const double *b, int64_t n) {
    double md = 0, mb = 1e-300;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / mb;
}

/* A reference forward: in[nin] -> out[nout], in double. */
typedef void (*ref_fn)(const void *ctx, const double *in, double *out);

/* grad[i] = d(r . f(in))/d in[i] by central differences, in double. */
static void fd_grad(ref_fn f, const void *ctx, const double *in0, int64_t nin, const double *r, int64_t nout,
                    double *grad) {
    double *in = malloc((size_t)nin * sizeof(double));
    double *out = malloc((size_t)nout * sizeof(double));
    memcpy(in, in0, (size_t)nin * sizeof(double));
    for (int64_t i = 0; i < nin; i++) {
        double x = in[i], sp = 0, sm = 0;
        in[i] = x + FD_H;
        f(ctx, in, out);
        for (int64_t j = 0; j < nout; j++) sp += r[j] * out[j];
        in[i] = x - FD_H;
        f(ctx, in, out);
        for (int64_t j = 0; j < nout; j++) sm += r[j] * out[j];
        in[i] = x;
        grad[i] = (sp - sm) / (2 * FD_H);
    }
    free(in);
    free(out);
}

static mp_backend *cpu(void) { return mp_backend_cpu(); }

/* The CPU backend caps its OpenMP team at $OPENBLAS_NUM_THREADS, read on its first threaded op, and
 * ctest sets that to 1. Tests of the threaded paths lift the cap to 2 first (each Criterion test runs
 * in its own process, so this touches no other test); 2 threads work on any machine. */
static void use_two_threads(void) {
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    omp_set_num_threads(2);
}

/* ---------------------------------------------------------------- backend selection, memory */

Test(backend_get, cpu_returns_the_static_cpu_table) {
    mp_backend *be = NULL;
    mp_err err = {0};
    cr_assert_eq(mp_backend_get("cpu", &be, &err), MP_OK);
    cr_assert_eq(be, mp_backend_cpu());
    cr_assert_str_eq(be->name, "cpu");
    cr_assert_eq(be->device, MP_DEV_CPU);
}

/* Without CUDA built in, or (this machine) a CUDA build on a host without a usable GPU, "cuda" is a usage
 * error that says which; tests/device_cuda.sh checks the CLI's exit 2 and message. */
Test(backend_get, cuda_without_a_usable_gpu_is_an_input_error_saying_why) {
    mp_backend *be = (mp_backend *)1;
    mp_err err = {0};
    char why[MP_ERR_MSG_MAX];
    if (mp_cuda_devices(why, sizeof why) > 0) cr_skip_test("a GPU is present: tests/device_cuda.sh and the device tests cover it");
    cr_assert_eq(mp_backend_get("cuda", &be, &err), MP_EINPUT);
    cr_assert_null(be);
    cr_assert_eq(err.code, MP_EINPUT);
#ifdef MP_HAVE_CUDA
    cr_assert(strstr(err.msg, "device cuda: no") != NULL, "msg: %s", err.msg);
#else
    cr_assert(strstr(err.msg, "meshpoint was built without CUDA") != NULL, "msg: %s", err.msg);
#endif
}

Test(backend_get, unknown_name_is_an_input_error_naming_the_value) {
    mp_backend *be = (mp_backend *)1;
    mp_err err = {0};
    cr_assert_eq(mp_backend_get("tpu9", &be, &err), MP_EINPUT);
    cr_assert_null(be);
    cr_assert(strstr(err.msg, "tpu9") != NULL, "msg: %s", err.msg);
    cr_assert_eq(mp_backend_get(NULL, &be, &err), MP_EINPUT);
    cr_assert_eq(mp_backend_get("", &be, NULL), MP_EINPUT);   /* NULL err is allowed */
}

Test(backend_memory, alloc_is_zero_filled_and_accounted_and_copies_work) {
    mp_backend *be = cpu();
    int64_t before = mp_mem_current(MP_MEM_ACTS);
    size_t bytes = 1000 * sizeof(float) + 4;   /* not a multiple of the alignment */
    float *p = be->alloc(be, bytes, MP_MEM_ACTS);
    cr_assert_not_null(p);
    cr_assert_eq((uintptr_t)p % 64, 0, "alloc is 64-byte aligned");
    cr_assert_eq(mp_mem_current(MP_MEM_ACTS), before + (int64_t)bytes);
    const unsigned char *c = (const unsigned char *)p;
    for (size_t i = 0; i < bytes; i++) cr_assert_eq(c[i], 0, "byte %zu not zero", i);
    float *src = frand(1000, 1.0);
    float host[1000];
    be->to_device(be, p, src, 1000 * sizeof(float));
    be->to_host(be, host, p, 1000 * sizeof(float));
    cr_assert_eq(memcmp(host, src, sizeof host), 0);
    float *q = be->alloc(be, bytes, MP_MEM_ACTS);
    be->copy(be, q, p, 1000 * sizeof(float));
    cr_assert_eq(memcmp(q, src, sizeof host), 0);
    be->memset0(be, q, 1000 * sizeof(float));
    for (int i = 0; i < 1000; i++) cr_assert_eq(q[i], 0.0f);
    be->synchronize(be);
    be->free(be, p, bytes, MP_MEM_ACTS);
    be->free(be, q, bytes, MP_MEM_ACTS);
    cr_assert_eq(mp_mem_current(MP_MEM_ACTS), before);
    free(src);
}

/* ---------------------------------------------------------------- gemm */

/* C = alpha op(A) op(B) + beta C in double, row-major with leading dimensions. */
static void ref_gemm(int ta, int tb, int M, int N, int K, double alpha, const float *A, int lda,
                     const float *B, int ldb, double beta, double *C, int ldc) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double s = 0;
            for (int p = 0; p < K; p++) {
                double a = ta ? A[(size_t)p * lda + i] : A[(size_t)i * lda + p];
                double b = tb ? B[(size_t)j * ldb + p] : B[(size_t)p * ldb + j];
                s += a * b;
            }
            C[(size_t)i * ldc + j] = alpha * s + beta * C[(size_t)i * ldc + j];
        }
}

Test(gemm, all_four_transpose_combinations_with_padded_strides_alpha_and_beta) {
    mp_backend *be = cpu();
    const int M = 5, N = 7, K = 3, pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
            int lda = acols + pad, ldb = bcols + pad + 1, ldc = N + pad;
            float *A = frand((int64_t)arows * lda, 1.0), *B = frand((int64_t)brows * ldb, 1.0);
            float *C = frand((int64_t)M * ldc, 1.0);
            double *Cref = todouble(C, (int64_t)M * ldc);
            ref_gemm(ta, tb, M, N, K, 1.5, A, lda, B, ldb, 0.5, Cref, ldc);
            be->gemm(be, ta, tb, M, N, K, 1.5f, A, lda, B, ldb, 0.5f, C, ldc, MP_F32);
            double e = rel_err(C, Cref, (int64_t)M * ldc);   /* includes the padding columns: untouched */
            cr_assert(e < FWD_TOL, "ta=%d tb=%d rel err %g", ta, tb, e);
            free(A), free(B), free(C), free(Cref);
        }
}

/* Large enough to be split into per-thread panels of C: rows when M >= N, columns otherwise. */
Test(gemm, large_products_split_over_threads_match_double_for_all_transposes) {
    use_two_threads();
    mp_backend *be = cpu();
    cr_assert_geq(mp_cpu_threads(), 2);
    const int shapes[2][3] = {{203, 70, 97}, {45, 301, 111}};
    for (int sh = 0; sh < 2; sh++)
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                int M = shapes[sh][0], N = shapes[sh][1], K = shapes[sh][2];
                int arows = ta ? K : M, acols = ta ? M : K, brows = tb ? N : K, bcols = tb ? K : N;
                int lda = acols + 5, ldb = bcols + 2, ldc = N + 3;
                float *A = frand((int64_t)arows * lda, 1.0), *B = frand((int64_t)brows * ldb, 1.0);
                float *C = frand((int64_t)M * ldc, 1.0);
                double *Cref = todouble(C, (int64_t)M * ldc);
                ref_gemm(ta, tb, M, N, K, -0.75, A, lda, B, ldb, 1.0, Cref, ldc);
                be->gemm(be, ta, tb, M, N, K, -0.75f, A, lda, B, ldb, 1.0f, C, ldc, MP_F32);
                double e = rel_err(C, Cref, (int64_t)M * ldc);
                cr_assert(e < FWD_TOL, "M=%d N=%d K=%d ta=%d tb=%d rel err %g", M, N, K, ta, tb, e);
                free(A), free(B), free(C), free(Cref);
            }
}

/* One-row products (a decode step's linear layers: the CPU backend runs them as sgemv) for all four
 * transposes, padded strides, beta 0 over NaN garbage and beta != 0, against double. */
Test(gemm, one_row_products_match_double_for_all_transposes) {
    mp_backend *be = cpu();
    const int N = 37, K = 53, pad = 3;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int b = 0; b < 2; b++) {
                int lda = (ta ? 1 : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
                float *A = frand((int64_t)(ta ? K : 1) * lda, 1.0), *B = frand((int64_t)(tb ? N : K) * ldb, 1.0);
                float *C = b ? frand(ldc, 1.0) : ffill(ldc, NAN);
                double Cref[64];
                for (int j = 0; j < N; j++) Cref[j] = b ? C[j] : 0.0;   /* the reference never reads garbage */
                ref_gemm(ta, tb, 1, N, K, 0.5, A, lda, B, ldb, b ? 0.75 : 0.0, Cref, N);
                be->gemm(be, ta, tb, 1, N, K, 0.5f, A, lda, B, ldb, b ? 0.75f : 0.0f, C, ldc, MP_F32);
                cr_assert(rel_err(C, Cref, N) < FWD_TOL, "ta %d tb %d beta %d: rel err %g", ta, tb, b, rel_err(C, Cref, N));
                free(A), free(B), free(C);
            }
}

Test(gemm, beta_zero_overwrites_garbage_and_k_zero_scales_c_by_beta) {
    mp_backend *be = cpu();
    const int M = 4, N = 6, K = 9;
    float *A = frand(M * K, 1.0), *B = frand(K * N, 1.0), *C = ffill(M * N, NAN);
    double Cref[24] = {0};
    ref_gemm(0, 0, M, N, K, 1.0, A, K, B, N, 0.0, Cref, N);
    be->gemm(be, 0, 0, M, N, K, 1.0f, A, K, B, N, 0.0f, C, N, MP_F32);
    cr_assert(rel_err(C, Cref, M * N) < FWD_TOL);
    float *C2 = frand(M * N, 1.0);
    float *C2orig = fdup(C2, M * N);
    be->gemm(be, 0, 0, M, N, 0, 1.0f, A, 1, B, N, 0.25f, C2, N, MP_F32);
    for (int i = 0; i < M * N; i++) cr_assert_eq(C2[i], 0.25f * C2orig[i]);
    free(A), free(B), free(C), free(C2), free(C2orig);
}

/* ---------------------------------------------------------------- elementwise */

Test(elementwise, add_accumulate_scale_match_double_including_in_place_add) {
    mp_backend *be = cpu();
    const int64_t n = 1037;
    float *a = frand(n, 3.0), *b = frand(n, 3.0), *out = ffill(n, NAN);
    be->add(be, out, a, b, n);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(out[i], a[i] + b[i]);
    float *a2 = fdup(a, n);
    be->add(be, a2, a2, b, n);   /* out aliases a */
    cr_assert_eq(memcmp(a2, out, (size_t)n * sizeof(float)), 0);
    float *d = fdup(a, n);
    be->accumulate(be, d, b, n);
    cr_assert_eq(memcmp(d, out, (size_t)n * sizeof(float)), 0);
    be->scale(be, d, -0.5f, n);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(d[i], out[i] * -0.5f);
    free(a), free(b), free(out), free(a2), free(d);
}

/* A reduction into a device scalar (sumsq_acc or sum_acc) that starts at acc0, read back with to_host. */
typedef void (*reduce_fn)(mp_backend *be, double *acc, const float *x, int64_t n);
static double dev_reduce(mp_backend *be, reduce_fn op, double acc0, const float *x, int64_t n) {
    double *acc = be->alloc(be, sizeof(double), MP_MEM_OTHER), h;
    be->to_device(be, acc, &acc0, sizeof acc0);
    op(be, acc, x, n);
    be->to_host(be, &h, acc, sizeof h);
    be->free(be, acc, sizeof(double), MP_MEM_OTHER);
    return h;
}

Test(elementwise, sumsq_acc_accumulates_in_double_and_is_bitwise_the_same_for_any_thread_count) {
    use_two_threads();
    mp_backend *be = cpu();
    const int64_t n = 1300003;   /* several 1M-element groups of blocks, and a tail */
    float *x = frand(n, 2.0);
    double ref = 0;
    for (int64_t i = 0; i < n; i++) ref += (double)x[i] * x[i];
    double s = dev_reduce(be, be->sumsq_acc, 0.0, x, n);
    cr_assert(fabs(s - ref) <= 1e-12 * ref, "sumsq %.17g ref %.17g", s, ref);
    cr_assert_eq(dev_reduce(be, be->sumsq_acc, 0.0, x, n), s);
    omp_set_num_threads(1);
    cr_assert_eq(dev_reduce(be, be->sumsq_acc, 0.0, x, n), s);
    cr_assert_eq(dev_reduce(be, be->sumsq_acc, 0.0, x, 0), 0.0);
    /* the sum is formed from 0, then added: acc0 + s exactly as a host `acc0 += sumsq` would give */
    cr_assert_eq(dev_reduce(be, be->sumsq_acc, 0.1, x, n), 0.1 + s);
    cr_assert_eq(dev_reduce(be, be->sumsq_acc, 2.5, x, 0), 2.5);
    /* 1 + 2^-30 * k: a float accumulator would drop the small terms entirely */
    float *y = ffill(4096 * 3, 1e-5f);
    y[0] = 1.0f;
    double sy = dev_reduce(be, be->sumsq_acc, 0.0, y, 4096 * 3);
    double ry = 1.0 + (4096.0 * 3 - 1) * (double)1e-5f * (double)1e-5f;
    cr_assert(fabs(sy - ry) < 1e-13, "sumsq %.17g ref %.17g", sy, ry);
    free(x), free(y);
}

Test(elementwise, sum_acc_adds_in_double_in_index_order) {
    mp_backend *be = cpu();
    const int64_t n = 70001;
    float *x = frand(n, 3.0);
    double ref = 0;
    for (int64_t i = 0; i < n; i++) ref += x[i];   /* the order the loss sum always had */
    cr_assert_eq(dev_reduce(be, be->sum_acc, 0.0, x, n), ref);
    cr_assert_eq(dev_reduce(be, be->sum_acc, 0.7, x, n), 0.7 + ref);
    cr_assert_eq(dev_reduce(be, be->sum_acc, -1.0, x, 0), -1.0);
    /* 1 + 1e-9 * k: a float accumulator would drop the small terms */
    float *y = ffill(1000, 1e-9f);
    y[0] = 1.0f;
    double sy = dev_reduce(be, be->sum_acc, 0.0, y, 1000);
    cr_assert(fabs(sy - (1.0 + 999 * (double)1e-9f)) < 1e-12, "sum %.17g", sy);
    free(x), free(y);
}

/* The error of y against the exact value r, in units of the last place of the float nearest r (r a normal
 * float's range: 2^(e-24) for r = f 2^e, 0.5 <= f < 1). */
static double ulp_err(float y, double r) {
    int e;
    frexp(r, &e);
    return fabs((double)y - r) / ldexp(1.0, e - 24);
}

/* The exp the kernels run (mp_expf, vectorised as the level MP_ISA or the CPU picks compiles it) against
 * libm's double exp, over every 61st float of [-87.3, 88] (36.7 million inputs, each binade hit ~137000
 * times) and the ends of the range: at most 1.05 ulp of the exact value (every float of the range,
 * checked once with stride 1: 0.992 ulp on v2, 1.023 on v3 and v4, where FMA contracts the polynomial).
 * Below -87.3 it is exactly 0, above 88 exp(88), NaN stays NaN. */
Test(elementwise, vectorised_exp_is_within_1_05_ulp_of_libm_over_a_dense_sweep) {
    enum { STRIDE = 61, BUF = 1 << 16 };
    float *x = malloc(BUF * sizeof(float)), *y = malloc(BUF * sizeof(float));
    double worst = 0;
    float worst_x = 0;
    int64_t count = 0;
    for (int sign = 0; sign < 2; sign++) {
        float lim = sign ? -87.3f : 88.0f;
        uint32_t top, bits0 = sign ? 0x80000000u : 0u;
        memcpy(&top, &lim, sizeof top);
        for (uint64_t u = bits0; u <= top;) {
            int k = 0;
            for (; k < BUF && u <= top; k++, u += STRIDE) {
                uint32_t b = (uint32_t)u;
                memcpy(&x[k], &b, sizeof b);
            }
            if (u > top && k < BUF) x[k++] = lim;   /* the end of the range itself */
            mp_cpu_expf_n(y, x, k);
            for (int i = 0; i < k; i++) {
                double e = ulp_err(y[i], exp((double)x[i]));
                if (e > worst) worst = e, worst_x = x[i];
            }
            count += k;
        }
    }
    cr_log_info("mp_expf (ISA %s): max %.3f ulp at x = %.9g over %lld inputs", mp_cpu_isa(), worst, worst_x,
                (long long)count);
    cr_assert(count > 30000000, "the sweep covered %lld inputs", (long long)count);
    cr_assert(worst <= 1.05, "mp_expf (ISA %s): %.3f ulp at x = %.9g", mp_cpu_isa(), worst, worst_x);
    float sx[7] = {-INFINITY, -1000.0f, -87.31f, 0.0f, 1000.0f, INFINITY, NAN}, sy[7];
    mp_cpu_expf_n(sy, sx, 7);
    cr_assert(sy[0] == 0.0f && sy[1] == 0.0f && sy[2] == 0.0f && sy[3] == 1.0f);
    cr_assert(sy[4] == sy[5] && isfinite(sy[4]) && ulp_err(sy[4], exp(88.0)) <= 1.05);
    cr_assert(isnan(sy[6]));
    free(x), free(y);
}

/* ---------------------------------------------------------------- embedding */

typedef struct { const int32_t *tok; int N, D, v_start, v_local; } embed_ctx;

static void ref_embed(const void *c, const double *wte, double *out) {
    const embed_ctx *e = c;
    for (int n = 0; n < e->N; n++)
        for (int i = 0; i < e->D; i++) {
            int r = e->tok[n] - e->v_start;
            out[n * e->D + i] = (r >= 0 && r < e->v_local) ? wte[r * e->D + i] : 0.0;
        }
}

Test(embedding, vocab_shards_look_up_their_rows_and_sum_to_the_full_lookup) {
    mp_backend *be = cpu();
    const int V = 10, D = 6, N = 9;
    int32_t tok[9] = {0, 3, 4, 9, 4, 7, 3, 5, 4};
    float *wte = frand(V * D, 1.0);
    float *sum = ffill(N * D, 0.0f);
    int starts[2] = {0, 4}, locals[2] = {4, 6};
    for (int s = 0; s < 2; s++) {
        float *out = ffill(N * D, NAN);
        be->embed_fwd(be, out, tok, wte + starts[s] * D, N, D, starts[s], locals[s]);
        embed_ctx c = {tok, N, D, starts[s], locals[s]};
        double *wd = todouble(wte + starts[s] * D, (int64_t)locals[s] * D), ref[54];
        ref_embed(&c, wd, ref);
        cr_assert(rel_err(out, ref, N * D) == 0.0, "shard %d", s);
        be->accumulate(be, sum, out, N * D);
        free(out), free(wd);
    }
    for (int n = 0; n < N; n++)
        for (int i = 0; i < D; i++) cr_assert_eq(sum[n * D + i], wte[tok[n] * D + i]);
    free(wte), free(sum);
}

Test(embedding, backward_accumulates_repeated_tokens_and_matches_finite_differences) {
    mp_backend *be = cpu();
    const int D = 5, N = 9, v_start = 3, v_local = 5;   /* shard holds global rows 3..7 */
    int32_t tok[9] = {0, 3, 4, 9, 4, 7, 3, 5, 4};
    float *wte = frand(v_local * D, 1.0), *r = frand(N * D, 1.0);
    float *base = frand(v_local * D, 1.0), *dw = fdup(base, v_local * D);
    be->embed_bwd(be, dw, r, tok, N, D, v_start, v_local);
    embed_ctx c = {tok, N, D, v_start, v_local};
    double *wd = todouble(wte, v_local * D), *rd = todouble(r, N * D), fd[25];
    fd_grad(ref_embed, &c, wd, v_local * D, rd, N * D, fd);
    float an[25];
    for (int i = 0; i < v_local * D; i++) an[i] = dw[i] - base[i];
    double e = rel_err(an, fd, v_local * D);
    cr_assert(e < FD_TOL, "rel err %g", e);
    free(wte), free(r), free(base), free(dw), free(wd), free(rd);
}

/* ---------------------------------------------------------------- RMSNorm */

typedef struct { int N, D; double eps; } rms_ctx;

/* in = x[N*D] | w[D]; out = y[N*D]. */
static void ref_rmsnorm(const void *c, const double *in, double *y) {
    const rms_ctx *r = c;
    const double *x = in, *w = in + r->N * r->D;
    for (int n = 0; n < r->N; n++) {
        double ss = 0;
        for (int i = 0; i < r->D; i++) ss += x[n * r->D + i] * x[n * r->D + i];
        double rstd = 1.0 / sqrt(ss / r->D + r->eps);
        for (int i = 0; i < r->D; i++) y[n * r->D + i] = x[n * r->D + i] * rstd * w[i];
    }
}

Test(rmsnorm, forward_and_saved_rstd_match_double) {
    mp_backend *be = cpu();
    const int N = 10, D = 24;
    const float eps = 1e-5f;
    float *x = frand(N * D, 2.0), *w = frand(D, 1.5), *y = ffill(N * D, NAN), rstd[10];
    be->rmsnorm_fwd(be, y, rstd, x, w, N, D, eps);
    rms_ctx c = {N, D, eps};
    double *in = malloc((N * D + D) * sizeof(double)), *ref = malloc(N * D * sizeof(double));
    for (int i = 0; i < N * D; i++) in[i] = x[i];
    for (int i = 0; i < D; i++) in[N * D + i] = w[i];
    ref_rmsnorm(&c, in, ref);
    cr_assert(rel_err(y, ref, N * D) < FWD_TOL, "y rel err %g", rel_err(y, ref, N * D));
    for (int n = 0; n < N; n++) {
        double ss = 0;
        for (int i = 0; i < D; i++) ss += (double)x[n * D + i] * x[n * D + i];
        double rr = 1.0 / sqrt(ss / D + eps);
        cr_assert(fabs(rstd[n] - rr) < FWD_TOL * rr, "rstd[%d]", n);
    }
    free(x), free(w), free(y), free(in), free(ref);
}

Test(rmsnorm, backward_dx_and_dw_accumulate_and_match_finite_differences) {
    mp_backend *be = cpu();
    const int N = 6, D = 8;
    const float eps = 1e-5f;
    float *x = frand(N * D, 2.0), *w = frand(D, 1.5), *y = malloc(N * D * sizeof(float)), rstd[6];
    be->rmsnorm_fwd(be, y, rstd, x, w, N, D, eps);
    float *r = frand(N * D, 1.0);
    float *bdx = frand(N * D, 1.0), *bdw = frand(D, 1.0);
    float *dx = fdup(bdx, N * D), *dw = fdup(bdw, D);
    be->rmsnorm_bwd(be, dx, dw, r, x, w, rstd, N, D);
    rms_ctx c = {N, D, eps};
    int nin = N * D + D;
    double *in = malloc(nin * sizeof(double)), *fd = malloc(nin * sizeof(double));
    for (int i = 0; i < N * D; i++) in[i] = x[i];
    for (int i = 0; i < D; i++) in[N * D + i] = w[i];
    double *rd = todouble(r, N * D);
    fd_grad(ref_rmsnorm, &c, in, nin, rd, N * D, fd);
    float *an = malloc(nin * sizeof(float));
    for (int i = 0; i < N * D; i++) an[i] = dx[i] - bdx[i];
    for (int i = 0; i < D; i++) an[N * D + i] = dw[i] - bdw[i];
    double ex = rel_err(an, fd, N * D), ew = rel_err(an + N * D, fd + N * D, D);
    cr_assert(ex < FD_TOL, "dx rel err %g", ex);
    cr_assert(ew < FD_TOL, "dw rel err %g", ew);
    free(x), free(w), free(y), free(r), free(bdx), free(bdw), free(dx), free(dw), free(in), free(fd);
    free(rd), free(an);
}

/* ---------------------------------------------------------------- RoPE */

typedef struct { int B, T, H, hd, pos0; double theta; } rope_ctx;

/* HF rotate_half with angles computed directly in double. */
static void ref_rope(const void *c, const double *x, double *y) {
    const rope_ctx *r = c;
    int half = r->hd / 2;
    for (int b = 0; b < r->B; b++)
        for (int t = 0; t < r->T; t++)
            for (int h = 0; h < r->H; h++) {
                const double *xv = x + ((b * r->T + t) * r->H + h) * r->hd;
                double *yv = y + ((b * r->T + t) * r->H + h) * r->hd;
                for (int i = 0; i < half; i++) {
                    double ang = (r->pos0 + t) * pow(r->theta, -2.0 * i / r->hd);
                    yv[i] = xv[i] * cos(ang) - xv[i + half] * sin(ang);
                    yv[i + half] = xv[i + half] * cos(ang) + xv[i] * sin(ang);
                }
            }
}

Test(rope, tables_match_hf_inverse_frequencies_in_double) {
    const int P = 300, hd = 8;
    const double theta = 10000.0;
    float *c = ffill(P * hd / 2, NAN), *s = ffill(P * hd / 2, NAN);
    mp_rope_tables(c, s, P, hd, theta, NULL);
    for (int p = 0; p < P; p++)
        for (int i = 0; i < hd / 2; i++) {
            double a = p / pow(theta, (2.0 * i) / hd);
            cr_assert(fabs(c[p * hd / 2 + i] - cos(a)) < 1e-7, "cos p=%d i=%d", p, i);
            cr_assert(fabs(s[p * hd / 2 + i] - sin(a)) < 1e-7, "sin p=%d i=%d", p, i);
        }
    cr_assert_eq(c[0], 1.0f);
    cr_assert_eq(s[0], 0.0f);
    free(c), free(s);
}

Test(rope, forward_with_position_offset_matches_double_rotate_half) {
    mp_backend *be = cpu();
    const int B = 2, T = 5, H = 3, hd = 8, pos0 = 7, P = 16;
    const double theta = 500000.0;
    float *ct = malloc(P * hd / 2 * sizeof(float)), *st = malloc(P * hd / 2 * sizeof(float));
    mp_rope_tables(ct, st, P, hd, theta, NULL);
    int n = B * T * H * hd;
    float *x = frand(n, 2.0);
    double *xd = todouble(x, n), *ref = malloc(n * sizeof(double));
    rope_ctx c = {B, T, H, hd, pos0, theta};
    ref_rope(&c, xd, ref);
    be->rope_fwd(be, x, ct, st, B, T, H, hd, pos0, H * hd);
    cr_assert(rel_err(x, ref, n) < FWD_TOL, "rel err %g", rel_err(x, ref, n));
    free(ct), free(st), free(x), free(xd), free(ref);
}

Test(rope, backward_is_the_inverse_rotation_and_matches_finite_differences) {
    mp_backend *be = cpu();
    const int B = 2, T = 5, H = 2, hd = 4, pos0 = 3, P = 8;
    const double theta = 10000.0;
    float *ct = malloc(P * hd / 2 * sizeof(float)), *st = malloc(P * hd / 2 * sizeof(float));
    mp_rope_tables(ct, st, P, hd, theta, NULL);
    int n = B * T * H * hd;
    float *x = frand(n, 1.0), *r = frand(n, 1.0);
    float *dx = fdup(r, n);
    be->rope_bwd(be, dx, ct, st, B, T, H, hd, pos0, H * hd);
    rope_ctx c = {B, T, H, hd, pos0, theta};
    double *xd = todouble(x, n), *rd = todouble(r, n), *fd = malloc(n * sizeof(double));
    fd_grad(ref_rope, &c, xd, n, rd, n, fd);
    double e = rel_err(dx, fd, n);
    cr_assert(e < FD_TOL, "rel err %g", e);
    /* bwd(fwd(x)) == x */
    float *y = fdup(x, n);
    be->rope_fwd(be, y, ct, st, B, T, H, hd, pos0, H * hd);
    be->rope_bwd(be, y, ct, st, B, T, H, hd, pos0, H * hd);
    double *xd2 = todouble(x, n);
    cr_assert(rel_err(y, xd2, n) < FWD_TOL);
    free(ct), free(st), free(x), free(r), free(dx), free(xd), free(rd), free(fd), free(y), free(xd2);
}

/* ---------------------------------------------------------------- attention */

typedef struct { int B, T, H, KV, hd; } attn_ctx;

/* in = q[B,T,H,hd] | k[B,T,KV,hd] | v[B,T,KV,hd]; out[B,T,H,hd]; causal, GQA, scale 1/sqrt(hd). */
static void ref_attn(const void *c, const double *in, double *out) {
    const attn_ctx *a = c;
    const int B = a->B, T = a->T, H = a->H, KV = a->KV, hd = a->hd, rep = H / KV;
    const double *q = in, *k = in + (size_t)B * T * H * hd, *v = k + (size_t)B * T * KV * hd;
    double *p = malloc(T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int g = h / rep;
            for (int t = 0; t < T; t++) {
                const double *qv = q + (((size_t)b * T + t) * H + h) * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    const double *kv = k + (((size_t)b * T + j) * KV + g) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += qv[d] * kv[d];
                    p[j] = s / sqrt((double)hd);
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                double *o = out + (((size_t)b * T + t) * H + h) * hd;
                for (int d = 0; d < hd; d++) {
                    double s = 0;
                    for (int j = 0; j <= t; j++) s += p[j] / sum * v[(((size_t)b * T + j) * KV + g) * hd + d];
                    o[d] = s;
                }
            }
        }
    free(p);
}

/* The log-sum-exp [B,H,T] of the reference's scaled causal scores, for checking lse. */
static void ref_attn_lse(const attn_ctx *a, const double *in, double *lse) {
    const int B = a->B, T = a->T, H = a->H, KV = a->KV, hd = a->hd, rep = H / KV;
    const double *q = in, *k = in + (size_t)B * T * H * hd;
    double *row = malloc(T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j <= t; j++) {
                    double s = 0;
                    for (int d = 0; d < hd; d++)
                        s += q[(((size_t)b * T + t) * H + h) * hd + d] * k[(((size_t)b * T + j) * KV + h / rep) * hd + d];
                    row[j] = s / sqrt((double)hd);
                    if (row[j] > mx) mx = row[j];
                }
                for (int j = 0; j <= t; j++) sum += exp(row[j] - mx);
                lse[((size_t)b * H + h) * T + t] = mx + log(sum);
            }
    free(row);
}

/* The analytic gradients of ref_attn in double (dq written, dk/dv summed over a group's heads), for
 * shapes too large for finite differences. */
static void ref_attn_bwd(const attn_ctx *a, const double *in, const double *dout, double *dq, double *dk,
                         double *dv) {
    const int B = a->B, T = a->T, H = a->H, KV = a->KV, hd = a->hd, rep = H / KV;
    const double *q = in, *k = in + (size_t)B * T * H * hd, *v = k + (size_t)B * T * KV * hd;
    const double sc = 1.0 / sqrt((double)hd);
    double *p = malloc(T * sizeof(double)), *dp = malloc(T * sizeof(double));
    memset(dk, 0, (size_t)B * T * KV * hd * sizeof(double));
    memset(dv, 0, (size_t)B * T * KV * hd * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const size_t qi = (((size_t)b * T + t) * H + h) * hd;
                double mx = -INFINITY, sum = 0, D = 0;
                for (int j = 0; j <= t; j++) {
                    const double *kj = k + (((size_t)b * T + j) * KV + h / rep) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += q[qi + d] * kj[d];
                    p[j] = s * sc;
                    if (p[j] > mx) mx = p[j];
                }
                for (int j = 0; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                for (int j = 0; j <= t; j++) {
                    const double *vj = v + (((size_t)b * T + j) * KV + h / rep) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += dout[qi + d] * vj[d];
                    p[j] /= sum;
                    dp[j] = s;
                    D += p[j] * s;
                }
                for (int d = 0; d < hd; d++) dq[qi + d] = 0;
                for (int j = 0; j <= t; j++) {
                    const size_t kj = (((size_t)b * T + j) * KV + h / rep) * hd;
                    double ds = p[j] * (dp[j] - D) * sc;
                    for (int d = 0; d < hd; d++) {
                        dq[qi + d] += ds * k[kj + d];
                        dk[kj + d] += ds * q[qi + d];
                        dv[kj + d] += p[j] * dout[qi + d];
                    }
                }
            }
    free(p), free(dp);
}

/* Runs attn_fwd/attn_bwd on random inputs of the given shape and checks out and lse against the
 * double reference and dq/dk/dv against finite differences. The backward gets exactly B*H*T floats of
 * scratch (flash-style: nothing of T x T size anywhere). */
static void check_attention(int B, int T, int H, int KV, int hd, double amp) {
    mp_backend *be = cpu();
    attn_ctx c = {B, T, H, KV, hd};
    int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * KV * hd, nl = (int64_t)B * H * T;
    int64_t nin = nq + 2 * nk;
    float *in = frand(nin, amp);
    const float *q = in, *k = in + nq, *v = in + nq + nk;
    float *out = ffill(nq, NAN), *lse = ffill(nl, NAN);
    be->attn_fwd(be, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    double *ind = todouble(in, nin), *ref = malloc(nq * sizeof(double)), *refl = malloc(nl * sizeof(double));
    ref_attn(&c, ind, ref);
    ref_attn_lse(&c, ind, refl);
    double eo = rel_err(out, ref, nq), el = rel_err(lse, refl, nl);
    cr_assert(eo < FWD_TOL, "out rel err %g (B=%d T=%d H=%d KV=%d hd=%d)", eo, B, T, H, KV, hd);
    cr_assert(el < FWD_TOL, "lse rel err %g", el);

    float *r = frand(nq, 1.0);
    float *dq = ffill(nq, NAN), *dk = ffill(nk, NAN), *dv = ffill(nk, NAN), *scratch = ffill(nl, NAN);
    be->attn_bwd(be, dq, dk, dv, scratch, r, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    double *rd = todouble(r, nq), *fd = malloc(nin * sizeof(double));
    fd_grad(ref_attn, &c, ind, nin, rd, nq, fd);
    double eq = rel_err(dq, fd, nq), ek = rel_err(dk, fd + nq, nk), ev = rel_err(dv, fd + nq + nk, nk);
    cr_assert(eq < FD_TOL, "dq rel err %g", eq);
    cr_assert(ek < FD_TOL, "dk rel err %g", ek);
    cr_assert(ev < FD_TOL, "dv rel err %g", ev);
    free(in), free(out), free(lse), free(ind), free(ref), free(refl), free(r), free(dq), free(dk), free(dv);
    free(scratch), free(rd), free(fd);
}

/* Forward and backward of a shape spanning several query and key blocks, against the double forward and
 * the double analytic backward, all at the forward tolerance. */
static void check_attention_analytic(int B, int T, int H, int KV, int hd, double amp) {
    mp_backend *be = cpu();
    attn_ctx c = {B, T, H, KV, hd};
    int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * KV * hd, nl = (int64_t)B * H * T;
    int64_t nin = nq + 2 * nk;
    float *in = frand(nin, amp), *r = frand(nq, 1.0);
    const float *q = in, *k = in + nq, *v = in + nq + nk;
    float *out = ffill(nq, NAN), *lse = ffill(nl, NAN), *scratch = ffill(nl, NAN);
    float *dq = ffill(nq, NAN), *dk = ffill(nk, NAN), *dv = ffill(nk, NAN);
    be->attn_fwd(be, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    be->attn_bwd(be, dq, dk, dv, scratch, r, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    double *ind = todouble(in, nin), *rd = todouble(r, nq), *ref = malloc(nq * sizeof(double));
    double *refl = malloc(nl * sizeof(double)), *gq = malloc(nq * sizeof(double));
    double *gk = malloc(nk * sizeof(double)), *gv = malloc(nk * sizeof(double));
    ref_attn(&c, ind, ref);
    ref_attn_lse(&c, ind, refl);
    ref_attn_bwd(&c, ind, rd, gq, gk, gv);
    double e[5] = {rel_err(out, ref, nq), rel_err(lse, refl, nl), rel_err(dq, gq, nq), rel_err(dk, gk, nk),
                   rel_err(dv, gv, nk)};
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++)
        cr_assert(e[i] < FWD_TOL, "%s rel err %g (B=%d T=%d H=%d KV=%d hd=%d amp=%g)", names[i], e[i], B, T, H, KV,
                  hd, amp);
    free(in), free(r), free(out), free(lse), free(scratch), free(dq), free(dk), free(dv), free(ind), free(rd);
    free(ref), free(refl), free(gq), free(gk), free(gv);
}

Test(attention, gqa_small_forward_and_backward_match_double_and_finite_differences) {
    check_attention(2, 5, 4, 2, 4, 1.5);
}

Test(attention, multi_head_without_grouping_and_single_kv_head) {
    check_attention(2, 5, 3, 3, 4, 1.5);   /* MHA */
    check_attention(1, 6, 4, 1, 8, 1.5);   /* MQA */
}

Test(attention, sequence_longer_than_the_causal_row_block) {
    check_attention(1, 150, 2, 1, 4, 1.0);
}

Test(attention, sharp_softmax_with_large_logits_stays_accurate) {
    check_attention(1, 7, 2, 2, 4, 6.0);   /* scores up to ~70: needs the max subtraction */
}

/* Several query and key blocks (T not a multiple of the block), so the online softmax rescales its
 * running output and the backward adds over key blocks; a sharp case where the running max moves. */
Test(attention, many_blocks_match_the_double_analytic_backward) {
    use_two_threads();
    check_attention_analytic(2, 300, 4, 2, 32, 1.0);
    check_attention_analytic(1, 200, 4, 1, 64, 4.0);
    check_attention_analytic(1, 129, 2, 2, 8, 1.0);
    /* 3 query heads per kv head at head dim 128: the backward's arena stacks 2 of them, then 1 alone
     * (bwd_stack: a stacked pair, then a head read in place) */
    check_attention_analytic(1, 150, 3, 1, 128, 1.0);
}

/* Same inputs twice, and with one vs two OpenMP threads: bitwise the same out, lse, dq, dk, dv. */
Test(attention, forward_and_backward_are_bitwise_deterministic_across_runs_and_thread_counts) {
    use_two_threads();
    mp_backend *be = cpu();
    const int B = 3, T = 97, H = 4, KV = 2, hd = 16;
    int64_t nq = (int64_t)B * T * H * hd, nk = (int64_t)B * T * KV * hd, nl = (int64_t)B * H * T;
    float *q = frand(nq, 1.0), *k = frand(nk, 1.0), *v = frand(nk, 1.0), *r = frand(nq, 1.0);
    float *res[3][5];
    int threads[3] = {2, 2, 1};
    int64_t sizes[5] = {nq, nl, nq, nk, nk};
    int saved = omp_get_max_threads();
    for (int run = 0; run < 3; run++) {
        omp_set_num_threads(threads[run]);
        for (int i = 0; i < 5; i++) res[run][i] = ffill(sizes[i], NAN);
        float *scratch = ffill(nl, NAN);
        be->attn_fwd(be, res[run][0], res[run][1], q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
        be->attn_bwd(be, res[run][2], res[run][3], res[run][4], scratch, r, res[run][0], res[run][1], q, k, v, B,
                     T, H, KV, hd, H * hd, KV * hd, 0);
        free(scratch);
    }
    omp_set_num_threads(saved);
    for (int run = 1; run < 3; run++)
        for (int i = 0; i < 5; i++)
            cr_assert_eq(memcmp(res[0][i], res[run][i], (size_t)sizes[i] * sizeof(float)), 0,
                         "run %d output %d differs", run, i);
    for (int run = 0; run < 3; run++)
        for (int i = 0; i < 5; i++) free(res[run][i]);
    free(q), free(k), free(v), free(r);
}

/* attn_fwd_kv (new queries against a KV cache) gives the whole-sequence forward's rows: chunks at block-
 * aligned and unaligned positions (a prefill, pieces crossing the 64-row blocks, single decode rows), on
 * B = 2 sequences whose cache capacity Tc exceeds what they hold. The CPU kernel visits the same key blocks
 * with the same valid columns as attn_fwd; its scores come from an sgemm of fewer rows, which may round
 * differently, hence a tolerance (the tokens a sampler draws are compared in tests/sample.sh). */
static void check_kv_chunks(int T, int Tc, const unsigned (*chunks)[2], size_t nchunks) {
    mp_backend *be = cpu();
    const int B = 2, H = 4, KV = 2, hd = 16;
    int64_t nq = (int64_t)B * T * H * hd;
    float *q = frand(nq, 1.5), *k = frand((int64_t)B * T * KV * hd, 1.5), *v = frand((int64_t)B * T * KV * hd, 1.0);
    float *out = ffill(nq, NAN), *lse = ffill((int64_t)B * H * T, NAN);
    be->attn_fwd(be, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    /* the cache: [B, Tc, KV, hd], rows past T never read (NaN would poison a read) */
    float *kc = ffill((int64_t)B * Tc * KV * hd, NAN), *vc = ffill((int64_t)B * Tc * KV * hd, NAN);
    for (int b = 0; b < B; b++) {
        memcpy(kc + (size_t)b * Tc * KV * hd, k + (size_t)b * T * KV * hd, sizeof(float) * T * KV * hd);
        memcpy(vc + (size_t)b * Tc * KV * hd, v + (size_t)b * T * KV * hd, sizeof(float) * T * KV * hd);
    }
    for (size_t c = 0; c < nchunks; c++) {
        const int p0 = (int)chunks[c][0], n = (int)chunks[c][1];
        if (n < 1 || n > T - p0) cr_assert_fail("chunk (%d, %d) is not inside the %d rows", p0, n, T);
        int64_t row = (int64_t)H * hd;
        float *qc = ffill((int64_t)B * n * row, NAN), *oc = ffill((int64_t)B * n * row, NAN);
        float *lc = ffill((int64_t)B * H * n, NAN);
        for (int b = 0; b < B; b++)
            memcpy(qc + (size_t)b * n * row, q + ((size_t)b * T + p0) * row, sizeof(float) * n * row);
        /* the cache holds positions 0 .. p0+n-1 only: later rows are NaN */
        float *kk = fdup(kc, (int64_t)B * Tc * KV * hd), *vv = fdup(vc, (int64_t)B * Tc * KV * hd);
        for (int b = 0; b < B; b++)
            for (int64_t i = (int64_t)(p0 + n) * KV * hd; i < (int64_t)Tc * KV * hd; i++)
                kk[(size_t)b * Tc * KV * hd + i] = vv[(size_t)b * Tc * KV * hd + i] = NAN;
        be->attn_fwd_kv(be, oc, lc, qc, kk, vv, B, n, p0, Tc, H, KV, hd, 0);
        for (int b = 0; b < B; b++) {
            for (int64_t i = 0; i < n * row; i++) {
                float want = out[((size_t)b * T + p0) * row + i], got = oc[(size_t)b * n * row + i];
                cr_assert(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)), "chunk (%d, %d) b %d out[%lld]: %.9g vs %.9g",
                          p0, n, b, (long long)i, got, want);
            }
            for (int h = 0; h < H; h++)
                for (int t = 0; t < n; t++) {
                    float want = lse[((size_t)b * H + h) * T + p0 + t], got = lc[((size_t)b * H + h) * n + t];
                    cr_assert(fabsf(got - want) <= 1e-5f * (1 + fabsf(want)), "chunk (%d, %d) lse: %.9g vs %.9g", p0,
                              n, got, want);
                }
        }
        free(qc), free(oc), free(lc), free(kk), free(vv);
    }
    free(q), free(k), free(v), free(out), free(lse), free(kc), free(vc);
}

Test(attention, kv_cache_chunks_give_the_whole_sequence_rows) {
    use_two_threads();
    static const unsigned chunks[][2] = {{0, 37}, {37, 50}, {87, 1}, {88, 40}, {128, 1}, {129, 20}, {149, 1}, {0, 150}};
    check_kv_chunks(150, 160, chunks, sizeof chunks / sizeof chunks[0]);
    /* across the first 192-key block's end: (180, 30)'s rows 180..191 reach no key of the block at 192 in
     * their band (the forward's no-valid-column path), (191, 1) and (192, 1) sit on either side of it */
    static const unsigned across[][2] = {{0, 100}, {100, 80}, {180, 30}, {191, 1}, {192, 1}, {193, 37}, {0, 230}};
    check_kv_chunks(230, 240, across, sizeof across / sizeof across[0]);
}

/* ---------------------------------------------------------------- strided q, k, v (the fused layout) */

/* layers/llama.c keeps q, k, v as the column blocks [0, wq), [wq, wq + wk), [wq + wk, wq + 2 wk) of one
 * [rows, ld] buffer (ld = wq + 2 wk, here with pad more columns), and attention writes dq, dk, dv into the
 * same layout. These tests fill the columns a kernel must not read with NaN (a read poisons its result)
 * and those it must not write with a sentinel (its bits are compared), so a kernel that ignores a stride,
 * or uses the dense one, fails: the stride is never the block's width. */

/* The fused buffer [q | k | v | pad] of rows x ld, from dense q [rows, wq], k, v [rows, wk] (NULL: NaN);
 * the pad columns hold fill. */
static float *fuse_qkv(const float *q, const float *k, const float *v, int64_t rows, int wq, int wk, int ld,
                       float fill) {
    float *x = ffill(rows * ld, fill);
    for (int64_t r = 0; r < rows; r++)
        for (int i = 0; i < wq + 2 * wk; i++) {
            const float *src = i < wq ? q : i < wq + wk ? k : v;
            const int64_t j = i < wq ? r * wq + i : r * wk + (i - wq) % wk;
            x[r * ld + i] = src ? src[j] : NAN;
        }
    return x;
}
/* Columns [off, off + w) of the rows of x (row stride ld), packed. */
static float *cols_of(const float *x, int64_t rows, int ld, int off, int w) {
    float *y = malloc((size_t)(rows * w) * sizeof(float));
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * w, x + r * ld + off, (size_t)w * sizeof(float));
    return y;
}
/* 1 when every element of x outside the columns [0, wq + 2 wk) has fill's bits. */
static int pad_intact(const float *x, int64_t rows, int ld, int wqkv, float fill) {
    for (int64_t r = 0; r < rows; r++)
        for (int i = wqkv; i < ld; i++)
            if (memcmp(&x[r * ld + i], &fill, sizeof fill)) return 0;
    return 1;
}

/* attn_fwd / attn_bwd on q, k, v in the fused rows (pad extra columns) against the double forward and
 * analytic backward of the dense tensors; dq, dk, dv land in their blocks of a fused gradient buffer
 * (every element written: NaN before) and the pad columns keep their bits. */
static void check_attention_fused(mp_backend *be, int B, int T, int H, int KV, int hd, int pad) {
    attn_ctx c = {B, T, H, KV, hd};
    const int wq = H * hd, wk = KV * hd, ld = wq + 2 * wk + pad;
    const int64_t rows = (int64_t)B * T, nq = rows * wq, nk = rows * wk, nl = (int64_t)B * H * T;
    float *in = frand(nq + 2 * nk, 1.0), *r = frand(nq, 1.0);
    float *x = fuse_qkv(in, in + nq, in + nq + nk, rows, wq, wk, ld, NAN);
    float *g = fuse_qkv(NULL, NULL, NULL, rows, wq, wk, ld, 7.0f);
    float *out = ffill(nq, NAN), *lse = ffill(nl, NAN), *scratch = ffill(nl, NAN);
    be->attn_fwd(be, out, lse, x, x + wq, x + wq + wk, B, T, H, KV, hd, ld, ld, 0);
    be->attn_bwd(be, g, g + wq, g + wq + wk, scratch, r, out, lse, x, x + wq, x + wq + wk, B, T, H, KV, hd, ld, ld, 0);
    double *ind = todouble(in, nq + 2 * nk), *rd = todouble(r, nq), *ref = malloc(nq * sizeof(double));
    double *refl = malloc(nl * sizeof(double)), *gq = malloc(nq * sizeof(double));
    double *gk = malloc(nk * sizeof(double)), *gv = malloc(nk * sizeof(double));
    ref_attn(&c, ind, ref);
    ref_attn_lse(&c, ind, refl);
    ref_attn_bwd(&c, ind, rd, gq, gk, gv);
    float *dq = cols_of(g, rows, ld, 0, wq), *dk = cols_of(g, rows, ld, wq, wk);
    float *dv = cols_of(g, rows, ld, wq + wk, wk);
    double e[5] = {rel_err(out, ref, nq), rel_err(lse, refl, nl), rel_err(dq, gq, nq), rel_err(dk, gk, nk),
                   rel_err(dv, gv, nk)};
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++)
        cr_assert(e[i] < FWD_TOL, "%s: %s rel err %g (B=%d T=%d H=%d KV=%d hd=%d ld=%d)", be->name, names[i], e[i], B,
                  T, H, KV, hd, ld);
    cr_assert(pad_intact(g, rows, ld, wq + 2 * wk, 7.0f), "%s: attn_bwd wrote past dq, dk, dv (ld=%d)", be->name, ld);
    free(in), free(r), free(x), free(g), free(out), free(lse), free(scratch), free(ind), free(rd), free(ref);
    free(refl), free(gq), free(gk), free(gv), free(dq), free(dk), free(dv);
}

Test(attention, fused_qkv_rows_with_strides_match_double) {
    use_two_threads();
    check_attention_fused(cpu(), 2, 130, 4, 2, 16, 5);    /* several blocks, GQA 2, odd stride */
    check_attention_fused(cpu(), 1, 150, 3, 1, 128, 0);   /* the layer's rows exactly; bwd stacks 2 + 1 heads */
    check_attention_fused(cpu(), 1, 70, 2, 2, 8, 8);      /* MHA: one head per group, read in place */
}

/* RoPE on the k block of the fused rows: the double rotation of the block, and every other column
 * (q, v, pad) keeps its bits; the backward then undoes it. */
Test(rope, strided_block_of_fused_rows_rotates_only_its_columns) {
    mp_backend *be = cpu();
    const int B = 2, T = 5, H = 4, KV = 2, hd = 8, pos0 = 3, P = 16, wq = H * hd, wk = KV * hd, ld = wq + 2 * wk + 3;
    const int64_t rows = (int64_t)B * T;
    const double theta = 10000.0;
    float *ct = malloc(P * hd / 2 * sizeof(float)), *st = malloc(P * hd / 2 * sizeof(float));
    mp_rope_tables(ct, st, P, hd, theta, NULL);
    float *x0 = frand(rows * ld, 1.0), *x = fdup(x0, rows * ld);
    be->rope_fwd(be, x + wq, ct, st, B, T, KV, hd, pos0, ld);
    float *blk0 = cols_of(x0, rows, ld, wq, wk), *blk = cols_of(x, rows, ld, wq, wk);
    double *bd = todouble(blk0, rows * wk), *ref = malloc((size_t)(rows * wk) * sizeof(double));
    rope_ctx c = {B, T, KV, hd, pos0, theta};
    ref_rope(&c, bd, ref);
    cr_assert(rel_err(blk, ref, rows * wk) < FWD_TOL, "rel err %g", rel_err(blk, ref, rows * wk));
    for (int64_t i = 0; i < rows * ld; i++) {
        const int col = (int)(i % ld);
        if (col < wq || col >= wq + wk) cr_assert(memcmp(&x[i], &x0[i], sizeof x[i]) == 0, "column %d written", col);
    }
    be->rope_bwd(be, x + wq, ct, st, B, T, KV, hd, pos0, ld);
    double *xd = todouble(x0, rows * ld);
    cr_assert(rel_err(x, xd, rows * ld) < FWD_TOL, "bwd(fwd(x)) != x");
    free(ct), free(st), free(x0), free(x), free(blk0), free(blk), free(bd), free(ref), free(xd);
}

/* The bf16 emulation (cpu-bf16) packs strided operands into dense fp32 ones (exact) and writes back only
 * the heads' columns: strided calls give the dense calls' bits, and the other columns keep theirs. */
Test(attention, cpu_bf16_strided_calls_give_the_dense_bits) {
    mp_backend *be = mp_backend_cpu_bf16();
    const int B = 2, T = 70, H = 4, KV = 2, hd = 16, wq = H * hd, wk = KV * hd, ld = wq + 2 * wk + 8;
    const int64_t rows = (int64_t)B * T, nq = rows * wq, nk = rows * wk, nl = (int64_t)B * H * T;
    float *in = frand(nq + 2 * nk, 1.0), *rf = frand(nq, 1.0);
    float *xf = fuse_qkv(in, in + nq, in + nq + nk, rows, wq, wk, ld, 3.0f);
    uint16_t *x = malloc((size_t)(rows * ld) * 2), *d = malloc((size_t)(nq + 2 * nk) * 2), *r = malloc((size_t)nq * 2);
    mp_f32_to_bf16_n(x, xf, rows * ld);
    mp_f32_to_bf16_n(d, in, nq + 2 * nk);
    mp_f32_to_bf16_n(r, rf, nq);
    float *ct = malloc((size_t)T * hd / 2 * sizeof(float)), *st = malloc((size_t)T * hd / 2 * sizeof(float));
    mp_rope_tables(ct, st, T, hd, 10000.0, NULL);
    be->rope_fwd(be, x, ct, st, B, T, H, hd, 0, ld), be->rope_fwd(be, x + wq, ct, st, B, T, KV, hd, 0, ld);
    be->rope_fwd(be, d, ct, st, B, T, H, hd, 0, wq), be->rope_fwd(be, d + nq, ct, st, B, T, KV, hd, 0, wk);
    uint16_t *o[2], *g[2];
    float *l[2], *scr = ffill(nl, NAN);
    for (int i = 0; i < 2; i++) {
        o[i] = malloc((size_t)nq * 2), l[i] = ffill(nl, NAN);
        g[i] = malloc((size_t)(i ? rows * ld : nq + 2 * nk) * 2);
    }
    memcpy(g[1], x, (size_t)(rows * ld) * 2);   /* the pad columns' bits (3.0) must survive */
    be->attn_fwd(be, o[0], l[0], d, d + nq, d + nq + nk, B, T, H, KV, hd, wq, wk, 0);
    be->attn_bwd(be, g[0], g[0] + nq, g[0] + nq + nk, scr, r, o[0], l[0], d, d + nq, d + nq + nk, B, T, H, KV, hd, wq,
                 wk, 0);
    be->attn_fwd(be, o[1], l[1], x, x + wq, x + wq + wk, B, T, H, KV, hd, ld, ld, 0);
    be->attn_bwd(be, g[1], g[1] + wq, g[1] + wq + wk, scr, r, o[1], l[1], x, x + wq, x + wq + wk, B, T, H, KV, hd, ld,
                 ld, 0);
    cr_assert(memcmp(o[0], o[1], (size_t)nq * 2) == 0 && memcmp(l[0], l[1], (size_t)nl * 4) == 0, "forward differs");
    for (int64_t rr = 0; rr < rows; rr++) {
        const uint16_t *gs = g[1] + rr * ld, *xs = x + rr * ld;
        cr_assert(memcmp(gs, g[0] + rr * wq, (size_t)wq * 2) == 0, "dq row %lld differs", (long long)rr);
        cr_assert(memcmp(gs + wq, g[0] + nq + rr * wk, (size_t)wk * 2) == 0, "dk row %lld differs", (long long)rr);
        cr_assert(memcmp(gs + wq + wk, g[0] + nq + nk + rr * wk, (size_t)wk * 2) == 0, "dv row %lld", (long long)rr);
        cr_assert(memcmp(gs + wq + 2 * wk, xs + wq + 2 * wk, (size_t)(ld - wq - 2 * wk) * 2) == 0, "pad written");
        cr_assert(memcmp(xs, d + rr * wq, (size_t)wq * 2) == 0, "rope q row %lld differs", (long long)rr);
        cr_assert(memcmp(xs + wq, d + nq + rr * wk, (size_t)wk * 2) == 0, "rope k row %lld differs", (long long)rr);
        cr_assert(memcmp(xs + wq + wk, d + nq + nk + rr * wk, (size_t)wk * 2) == 0, "rope wrote v (row %lld)",
                  (long long)rr);
    }
    for (int i = 0; i < 2; i++) free(o[i]), free(l[i]), free(g[i]);
    free(in), free(rf), free(xf), free(x), free(d), free(r), free(ct), free(st), free(scr);
}

/* ---------------------------------------------------------------- SwiGLU */

typedef struct { int64_t n; } swiglu_ctx;

/* in = gate[n] | up[n]; out = silu(gate) * up. */
static void ref_swiglu(const void *c, const double *in, double *out) {
    int64_t n = ((const swiglu_ctx *)c)->n;
    for (int64_t i = 0; i < n; i++) out[i] = in[i] / (1.0 + exp(-in[i])) * in[n + i];
}

Test(swiglu, forward_matches_double_including_large_magnitudes) {
    use_two_threads();
    mp_backend *be = cpu();
    const int64_t n = 70001;   /* above the threading threshold */
    float *in = frand(2 * n, 4.0);
    in[0] = -100.0f, in[1] = 100.0f, in[2] = 0.0f, in[3] = -30.0f;
    float *out = ffill(n, NAN);
    be->swiglu_fwd(be, out, in, in + n, n);
    swiglu_ctx c = {n};
    double *ind = todouble(in, 2 * n), *ref = malloc(n * sizeof(double));
    ref_swiglu(&c, ind, ref);
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(out[i] - ref[i]) / fmax(fabs(ref[i]), 1e-3);
        if (e > worst) worst = e;
    }
    cr_assert(worst < FWD_TOL, "elementwise rel err %g", worst);
    free(in), free(out), free(ind), free(ref);
}

Test(swiglu, backward_writes_dgate_dup_matching_finite_differences) {
    mp_backend *be = cpu();
    const int64_t n = 40;
    float *in = frand(2 * n, 4.0), *r = frand(n, 1.0);
    float *dg = ffill(n, NAN), *du = ffill(n, NAN);
    be->swiglu_bwd(be, dg, du, r, in, in + n, n);
    swiglu_ctx c = {n};
    double *ind = todouble(in, 2 * n), *rd = todouble(r, n), *fd = malloc(2 * n * sizeof(double));
    fd_grad(ref_swiglu, &c, ind, 2 * n, rd, n, fd);
    double eg = rel_err(dg, fd, n), eu = rel_err(du, fd + n, n);
    cr_assert(eg < FD_TOL, "dgate rel err %g", eg);
    cr_assert(eu < FD_TOL, "dup rel err %g", eu);
    free(in), free(r), free(dg), free(du), free(ind), free(rd), free(fd);
}

/* ---------------------------------------------------------------- cross-entropy */

typedef struct { const int32_t *tgt; int N, V; } xent_ctx;

/* in = logits[N, V] (valid vocab only); out = losses[N] = logsumexp - logit[tgt]. */
static void ref_xent(const void *c, const double *l, double *loss) {
    const xent_ctx *x = c;
    for (int n = 0; n < x->N; n++) {
        double mx = -INFINITY, s = 0;
        for (int j = 0; j < x->V; j++) mx = fmax(mx, l[n * x->V + j]);
        for (int j = 0; j < x->V; j++) s += exp(l[n * x->V + j] - mx);
        loss[n] = log(s) + mx - l[n * x->V + x->tgt[n]];
    }
}

/* The global vocab V = 11 split over two shards of v_local = 6: shard 0 holds ids 0..5, shard 1 ids
 * 6..10 plus one padding column (v_valid = 5). Padding columns hold 1e4, so a kernel that read them
 * would get a wrong max. The caller-side all-reduces (MAX, SUM, SUM) are done here by hand. */
#define XV 11
#define XL 6
#define XN 7

static void xent_shards(const float *glog, float shard[2][XN * XL], int v_valid[2]) {
    for (int s = 0; s < 2; s++) {
        v_valid[s] = s == 0 ? XL : XV - XL;
        for (int n = 0; n < XN; n++)
            for (int j = 0; j < XL; j++)
                shard[s][n * XL + j] = j < v_valid[s] ? glog[n * XV + s * XL + j] : 1e4f;
    }
}

static void xent_forward(mp_backend *be, float shard[2][XN * XL], const int v_valid[2], const int32_t *tgt,
                         float *rowmax, float *sumexp, float *losses) {
    float m[2][XN], se[2][XN], tl[2][XN], tlogit[XN];
    for (int s = 0; s < 2; s++) be->xent_rowmax(be, m[s], shard[s], XN, XL, v_valid[s]);
    for (int n = 0; n < XN; n++) rowmax[n] = fmaxf(m[0][n], m[1][n]);
    for (int s = 0; s < 2; s++) {
        be->xent_sumexp(be, se[s], shard[s], rowmax, XN, XL, v_valid[s]);
        be->xent_target(be, tl[s], shard[s], tgt, XN, XL, s * XL);
    }
    for (int n = 0; n < XN; n++) sumexp[n] = se[0][n] + se[1][n], tlogit[n] = tl[0][n] + tl[1][n];
    be->xent_loss(be, losses, rowmax, sumexp, tlogit, XN);
}

Test(xent, vocab_parallel_pieces_with_padding_and_shard_offset_match_double_loss) {
    mp_backend *be = cpu();
    int32_t tgt[XN] = {0, 5, 6, 10, 3, 8, 10};
    float *glog = frand(XN * XV, 5.0);
    glog[1 * XV + 4] = 30.0f;   /* a dominant logit */
    float shard[2][XN * XL];
    int v_valid[2];
    xent_shards(glog, shard, v_valid);
    float rowmax[XN], sumexp[XN], losses[XN];
    xent_forward(be, shard, v_valid, tgt, rowmax, sumexp, losses);
    xent_ctx c = {tgt, XN, XV};
    double *gd = todouble(glog, XN * XV), ref[XN];
    ref_xent(&c, gd, ref);
    for (int n = 0; n < XN; n++) {
        double mx = -INFINITY, se = 0;
        for (int j = 0; j < XV; j++) mx = fmax(mx, gd[n * XV + j]);
        for (int j = 0; j < XV; j++) se += exp(gd[n * XV + j] - mx);
        cr_assert_eq(rowmax[n], (float)mx, "rowmax[%d]", n);
        cr_assert(fabs(sumexp[n] - se) < FWD_TOL * se, "sumexp[%d]", n);
    }
    double e = rel_err(losses, ref, XN);
    cr_assert(e < FWD_TOL, "loss rel err %g", e);
    free(glog), free(gd);
}

Test(xent, backward_per_shard_matches_finite_differences_and_zeroes_padding) {
    mp_backend *be = cpu();
    int32_t tgt[XN] = {0, 5, 6, 10, 3, 8, 10};
    const float dloss = 0.37f;   /* the projection: d(dloss * sum losses) */
    float *glog = frand(XN * XV, 3.0);
    float shard[2][XN * XL];
    int v_valid[2];
    xent_shards(glog, shard, v_valid);
    float rowmax[XN], sumexp[XN], losses[XN];
    xent_forward(be, shard, v_valid, tgt, rowmax, sumexp, losses);
    for (int s = 0; s < 2; s++)
        be->xent_bwd(be, shard[s], rowmax, sumexp, tgt, dloss, XN, XL, v_valid[s], s * XL);
    float an[XN * XV];
    for (int s = 0; s < 2; s++)
        for (int n = 0; n < XN; n++)
            for (int j = 0; j < XL; j++) {
                if (j < v_valid[s]) an[n * XV + s * XL + j] = shard[s][n * XL + j];
                else cr_assert_eq(shard[s][n * XL + j], 0.0f, "padding column gradient must be 0");
            }
    xent_ctx c = {tgt, XN, XV};
    double *gd = todouble(glog, XN * XV), rd[XN], fd[XN * XV];
    for (int n = 0; n < XN; n++) rd[n] = dloss;
    fd_grad(ref_xent, &c, gd, XN * XV, rd, XN, fd);
    double e = rel_err(an, fd, XN * XV);
    cr_assert(e < FD_TOL, "dlogits rel err %g", e);
    free(glog), free(gd);
}

Test(xent, masked_minus_infinity_logits_and_an_all_padding_shard_contribute_nothing) {
    mp_backend *be = cpu();
    const int N = 3, VL = 4;
    float l[12] = {1.0f, -INFINITY, 2.0f, 0.5f, -INFINITY, -INFINITY, 3.0f, -1.0f, 0.0f, 0.0f, 0.0f, 0.0f};
    int32_t tgt[3] = {2, 3, 1};
    float mx[3], se[3], tl[3], loss[3];
    be->xent_rowmax(be, mx, l, N, VL, VL);
    be->xent_sumexp(be, se, l, mx, N, VL, VL);
    be->xent_target(be, tl, l, tgt, N, VL, 0);
    be->xent_loss(be, loss, mx, se, tl, N);
    double want0 = log(exp(1.0) + exp(2.0) + exp(0.5)) - 2.0;
    double want1 = log(exp(3.0) + exp(-1.0)) - (-1.0);
    double want2 = log(4.0) - 0.0;
    cr_assert(fabs(loss[0] - want0) < 1e-6 && fabs(loss[1] - want1) < 1e-6 && fabs(loss[2] - want2) < 1e-6);
    be->xent_bwd(be, l, mx, se, tgt, 1.0f, N, VL, VL, 0);
    cr_assert_eq(l[1], 0.0f);
    cr_assert_eq(l[4], 0.0f);
    cr_assert_eq(l[5], 0.0f);
    /* a shard whose local columns are all padding: rowmax -inf, sumexp 0, target 0, gradient 0 */
    float p[8] = {5, 5, 5, 5, 5, 5, 5, 5}, pm[2], gm[2] = {1.0f, 2.0f}, ps[2], pt[2];
    int32_t ptgt[2] = {0, 1};
    be->xent_rowmax(be, pm, p, 2, 4, 0);
    cr_assert(pm[0] == -INFINITY && pm[1] == -INFINITY);
    be->xent_sumexp(be, ps, p, gm, 2, 4, 0);
    cr_assert(ps[0] == 0.0f && ps[1] == 0.0f);
    be->xent_target(be, pt, p, ptgt, 2, 4, 100);
    cr_assert(pt[0] == 0.0f && pt[1] == 0.0f);
    be->xent_bwd(be, p, gm, (float[]){1.0f, 1.0f}, ptgt, 1.0f, 2, 4, 0, 100);
    for (int i = 0; i < 8; i++) cr_assert_eq(p[i], 0.0f);
}

Test(xent, large_vocab_rows_match_double_with_threads) {
    use_two_threads();
    mp_backend *be = cpu();
    const int N = 9, V = 5003, VL = 5008;   /* > the threading threshold, padded */
    float *l = frand((int64_t)N * VL, 8.0);
    int32_t tgt[9];
    for (int n = 0; n < N; n++) tgt[n] = (n * 977) % V;
    float mx[9], se[9], tl[9], loss[9];
    be->xent_rowmax(be, mx, l, N, VL, V);
    be->xent_sumexp(be, se, l, mx, N, VL, V);
    be->xent_target(be, tl, l, tgt, N, VL, 0);
    be->xent_loss(be, loss, mx, se, tl, N);
    double *ld = malloc((size_t)N * V * sizeof(double)), ref[9];
    for (int n = 0; n < N; n++)
        for (int j = 0; j < V; j++) ld[(size_t)n * V + j] = l[(size_t)n * VL + j];
    xent_ctx c = {tgt, N, V};
    ref_xent(&c, ld, ref);
    cr_assert(rel_err(loss, ref, N) < FWD_TOL, "loss rel err %g", rel_err(loss, ref, N));
    be->xent_bwd(be, l, mx, se, tgt, 2.0f, N, VL, V, 0);
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, s = 0, worst = 0;
        for (int j = 0; j < V; j++) m = fmax(m, ld[(size_t)n * V + j]);
        for (int j = 0; j < V; j++) s += exp(ld[(size_t)n * V + j] - m);
        for (int j = 0; j < V; j++) {
            double g = 2.0 * (exp(ld[(size_t)n * V + j] - m) / s - (j == tgt[n]));
            worst = fmax(worst, fabs(l[(size_t)n * VL + j] - g));
        }
        cr_assert(worst < 1e-6, "row %d grad err %g", n, worst);
        for (int j = V; j < VL; j++) cr_assert_eq(l[(size_t)n * VL + j], 0.0f);
    }
    free(l), free(ld);
}

/* The single-sweep forward (online max and sum of exp, target logit): the same row max as xent_rowmax,
 * the sum within 1e-6 of xent_sumexp's two-pass one, the loss against double, and bitwise the same on one
 * and two threads. Rows: random, rising (the max moves in every chunk), all -inf, one finite logit. */
Test(xent, single_sweep_forward_matches_the_three_ops_and_double_on_any_thread_count) {
    use_two_threads();
    mp_backend *be = cpu();
    cr_assert(be->xent_fwd != NULL);
    const int N = 12, V = 5003, VL = 5008;
    float *l = frand((int64_t)N * VL, 8.0);
    for (int j = 0; j < V; j++) l[9 * VL + j] = -20.0f + 0.01f * j;   /* rising */
    for (int j = 0; j < VL; j++) l[10 * VL + j] = -INFINITY;
    for (int j = 0; j < VL; j++) l[11 * VL + j] = j == 4000 ? 3.0f : -INFINITY;
    int32_t tgt[12];
    for (int n = 0; n < N; n++) tgt[n] = (n * 977) % V;
    tgt[11] = 4000;
    float mx[12], se[12], tl[12], fm[2][12], fs[2][12], ft[2][12], loss[12];
    be->xent_rowmax(be, mx, l, N, VL, V);
    be->xent_sumexp(be, se, l, mx, N, VL, V);
    be->xent_target(be, tl, l, tgt, N, VL, 0);
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        be->xent_fwd(be, fm[t], fs[t], ft[t], l, tgt, N, VL, V, 0);
    }
    cr_assert(!memcmp(fm[0], fm[1], sizeof fm[0]) && !memcmp(fs[0], fs[1], sizeof fs[0]) &&
              !memcmp(ft[0], ft[1], sizeof ft[0]), "one and two threads differ");
    for (int n = 0; n < N; n++) {
        cr_assert(fm[0][n] == mx[n] && ft[0][n] == tl[n], "row %d: max %g/%g target %g/%g", n, fm[0][n], mx[n],
                  ft[0][n], tl[n]);
        cr_assert(fabs(fs[0][n] - se[n]) <= 1e-6 * se[n], "row %d: sum %.9g, two-pass %.9g", n, fs[0][n], se[n]);
    }
    cr_assert(fs[0][10] == 0.0f && fm[0][10] == -INFINITY && fs[0][11] == 1.0f);
    be->xent_loss(be, loss, fm[0], fs[0], ft[0], N);
    double *ld = malloc((size_t)10 * V * sizeof(double)), ref[10];
    for (int n = 0; n < 10; n++)
        for (int j = 0; j < V; j++) ld[(size_t)n * V + j] = l[(size_t)n * VL + j];
    xent_ctx c = {tgt, 10, V};
    ref_xent(&c, ld, ref);   /* the finite rows */
    cr_assert(rel_err(loss, ref, 10) < FWD_TOL, "loss rel err %g", rel_err(loss, ref, 10));
    cr_assert(loss[11] == 0.0f);
    free(l), free(ld);
}

/* The single sweep over vocab shards (layers/llama.c at tp > 1): xent_fwd per shard against its own max,
 * the max over shards, xent_rescale taking each shard's sum to it, the sums added: rowmax and tlogit
 * exactly the three ops' (xent_forward above), sumexp within 1e-6 of theirs and the loss against
 * double. Then a shard with no valid column (v_valid 0: max -inf, its sum must add 0) and a shard whose
 * max equals the global one (factor 1: its sum unchanged). */
Test(xent, single_sweep_per_shard_rescaled_to_the_global_max_matches_the_three_ops) {
    mp_backend *be = cpu();
    cr_assert(be->xent_fwd && be->xent_rescale);
    int32_t tgt[XN] = {0, 5, 6, 10, 3, 8, 10};
    float *glog = frand(XN * XV, 5.0);
    glog[1 * XV + 9] = 30.0f;   /* a dominant logit in shard 1 */
    float shard[2][XN * XL];
    int v_valid[2];
    xent_shards(glog, shard, v_valid);
    float rowmax[XN], sumexp[XN], losses[XN];
    xent_forward(be, shard, v_valid, tgt, rowmax, sumexp, losses);
    float lm[2][XN], ls[2][XN], lt[2][XN], gm[XN], gs[XN], gt[XN], gl[XN];
    for (int s = 0; s < 2; s++) be->xent_fwd(be, lm[s], ls[s], lt[s], shard[s], tgt, XN, XL, v_valid[s], s * XL);
    for (int n = 0; n < XN; n++) gm[n] = fmaxf(lm[0][n], lm[1][n]);
    for (int s = 0; s < 2; s++) be->xent_rescale(be, ls[s], lm[s], gm, XN);
    for (int n = 0; n < XN; n++) gs[n] = ls[0][n] + ls[1][n], gt[n] = lt[0][n] + lt[1][n];
    be->xent_loss(be, gl, gm, gs, gt, XN);
    xent_ctx c = {tgt, XN, XV};
    double *gd = todouble(glog, XN * XV), ref[XN];
    ref_xent(&c, gd, ref);
    for (int n = 0; n < XN; n++) {
        cr_assert(gm[n] == rowmax[n], "row %d: max %g, three ops %g", n, gm[n], rowmax[n]);
        cr_assert(fabs(gs[n] - sumexp[n]) <= 1e-6 * sumexp[n], "row %d: sum %.9g, three ops %.9g", n, gs[n], sumexp[n]);
    }
    cr_assert(rel_err(gl, ref, XN) < FWD_TOL, "loss rel err %g", rel_err(gl, ref, XN));
    float s0[3] = {2.0f, 3.0f, 4.0f}, m0[3] = {-INFINITY, 1.5f, 0.25f}, g0[3] = {1.0f, 1.5f, 2.25f};
    be->xent_rescale(be, s0, m0, g0, 3);
    cr_assert(s0[0] == 0.0f && s0[1] == 3.0f, "no valid column adds 0; the max's own shard keeps its sum");
    cr_assert(fabsf(s0[2] - 4.0f * expf(-2.0f)) <= 1e-6f, "rescale %.9g", s0[2]);
    free(glog), free(gd);
}

/* ---------------------------------------------------------------- threads */

/* The row- and column-split kernels (RMSNorm forward and backward, RoPE, embedding lookup and gradient,
 * add, accumulate, scale) above the threading threshold: bitwise the same on one and two threads. */
Test(threads, split_kernels_are_bitwise_the_same_on_one_and_two_threads) {
    use_two_threads();
    mp_backend *be = cpu();
    const int B = 2, T = 100, H = 4, hd = 64, N = B * T, D = H * hd, V = 50;
    const int64_t nd = (int64_t)N * D;
    float *x = frand(nd, 1.0), *dy = frand(nd, 1.0), *w = frand(D, 1.0), *wte = frand((int64_t)V * D, 1.0);
    float *ct = malloc((size_t)T * hd / 2 * sizeof(float)), *st = malloc((size_t)T * hd / 2 * sizeof(float));
    mp_rope_tables(ct, st, T, hd, 10000.0, NULL);
    int32_t tok[200];
    for (int n = 0; n < N; n++) tok[n] = (n * 7) % 13;   /* repeated tokens */
    float *out[2][8];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        float **o = out[t];
        for (int i = 0; i < 8; i++) o[i] = calloc((size_t)nd + V * D, sizeof(float));
        be->rmsnorm_fwd(be, o[0], o[1], x, w, N, D, 1e-5f);
        memcpy(o[2], dy, (size_t)nd * sizeof(float));   /* dx accumulates */
        be->rmsnorm_bwd(be, o[2], o[3], dy, x, w, o[1], N, D);
        memcpy(o[4], x, (size_t)nd * sizeof(float));
        be->rope_fwd(be, o[4], ct, st, B, T, H, hd, 0, H * hd);
        be->embed_fwd(be, o[5], tok, wte, N, D, 0, V);
        be->embed_bwd(be, o[6], dy, tok, N, D, 0, V);
        be->add(be, o[7], x, dy, nd);
        be->accumulate(be, o[7], x, nd);
        be->scale(be, o[7], 0.3f, nd);
    }
    const char *names[8] = {"rmsnorm y", "rstd", "rmsnorm dx", "rmsnorm dw", "rope", "embed", "embed dwte", "add"};
    for (int i = 0; i < 8; i++) {
        cr_assert(!memcmp(out[0][i], out[1][i], ((size_t)nd + V * D) * sizeof(float)), "%s differs", names[i]);
        cr_assert(memcmp(out[0][i], out[0][(i + 1) % 8], (size_t)N * sizeof(float)), "%s was not written", names[i]);
    }
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < 8; i++) free(out[t][i]);
    free(x), free(dy), free(w), free(wte), free(ct), free(st);
}

/* bias_add / bias_bwd and head_rmsnorm_fwd / _bwd on a column block of wider rows (as the fused q | k | v
 * is), above the threading threshold: bitwise the same on one and two threads, and the columns outside
 * the block untouched. */
Test(threads, bias_and_head_rmsnorm_are_bitwise_the_same_on_one_and_two_threads) {
    use_two_threads();
    mp_backend *be = cpu();
    const int N = 200, H = 4, hd = 64, cols = H * hd, ld = cols + 40;
    const int64_t nl = (int64_t)N * ld;
    float *x = frand(nl, 1.0), *b = frand(cols, 1.0), *w = frand(hd, 1.0);
    float *out[2][6];   /* biased x, db, normed x, x_save, rstd, dx; then dw below */
    float *dw[2];
    for (int t = 0; t < 2; t++) {
        omp_set_num_threads(t + 1);
        float **o = out[t];
        for (int i = 0; i < 6; i++) o[i] = calloc((size_t)nl, sizeof(float));
        dw[t] = calloc((size_t)hd, sizeof(float));
        memcpy(o[0], x, (size_t)nl * sizeof(float));
        be->bias_add(be, o[0], ld, b, N, cols);
        be->bias_bwd(be, o[1], x, ld, N, cols);
        memcpy(o[2], x, (size_t)nl * sizeof(float));
        be->head_rmsnorm_fwd(be, o[2], ld, o[3], o[4], w, N, H, hd, 1e-6f);
        memcpy(o[5], x, (size_t)nl * sizeof(float));   /* dy = x */
        be->head_rmsnorm_bwd(be, o[5], ld, dw[t], o[3], o[4], w, N, H, hd);
    }
    const char *names[6] = {"bias_add", "bias_bwd db", "head_rmsnorm y", "x_save", "rstd", "head_rmsnorm dx"};
    for (int i = 0; i < 6; i++)
        cr_assert(!memcmp(out[0][i], out[1][i], (size_t)nl * sizeof(float)), "%s differs", names[i]);
    cr_assert(!memcmp(dw[0], dw[1], (size_t)hd * sizeof(float)), "head_rmsnorm dw differs");
    for (int n = 0; n < N; n++)
        for (int j = cols; j < ld; j++) {
            const int64_t k = (int64_t)n * ld + j;
            cr_assert(out[0][0][k] == x[k] && out[0][2][k] == x[k] && out[0][5][k] == x[k], "column %d touched", j);
        }
    cr_assert(out[0][0][0] == x[0] + b[0] && !memcmp(out[0][3], x, (size_t)cols * sizeof(float)), "bias / x_save");
    cr_assert(out[0][5][0] != x[0] && dw[0][0] != 0.0f && out[0][4][N * H - 1] > 0.0f, "not written");
    for (int t = 0; t < 2; t++) {
        for (int i = 0; i < 6; i++) free(out[t][i]);
        free(dw[t]);
    }
    free(x), free(b), free(w);
}

/* ---------------------------------------------------------------- AdamW */

Test(adamw, several_steps_match_double_with_bias_correction_weight_decay_and_grad_scale) {
    use_two_threads();
    mp_backend *be = cpu();
    const int64_t n = 50001;   /* several threading chunks and a tail */
    const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, gs = 0.5;
    float *p = frand(n, 1.0), *m = ffill(n, 0.0f), *v = ffill(n, 0.0f);
    double *pd = todouble(p, n), *md = calloc(n, sizeof(double)), *vd = calloc(n, sizeof(double));
    for (int step = 1; step <= 4; step++) {
        float *g = frand(n, step == 2 ? 1e-3 : 1.0);
        be->adamw(be, p, NULL, g, m, v, n, NULL, 0, (float)lr, (float)b1, (float)b2, (float)eps, (float)wd, step,
                  (float)gs);
        for (int64_t i = 0; i < n; i++) {
            double gi = (double)g[i] * gs;
            md[i] = (double)(float)b1 * md[i] + (1 - (double)(float)b1) * gi;
            vd[i] = (double)(float)b2 * vd[i] + (1 - (double)(float)b2) * gi * gi;
            double mh = md[i] / (1 - pow((float)b1, step)), vh = vd[i] / (1 - pow((float)b2, step));
            pd[i] -= (double)(float)lr * (mh / (sqrt(vh) + (double)(float)eps) + (double)(float)wd * pd[i]);
        }
        free(g);
        cr_assert(rel_err(m, md, n) < FWD_TOL, "step %d m rel err %g", step, rel_err(m, md, n));
        cr_assert(rel_err(v, vd, n) < FWD_TOL, "step %d v rel err %g", step, rel_err(v, vd, n));
        cr_assert(rel_err(p, pd, n) < FWD_TOL, "step %d p rel err %g", step, rel_err(p, pd, n));
    }
    free(p), free(m), free(v), free(pd), free(md), free(vd);
}

Test(adamw, first_step_moves_each_weight_by_lr_against_its_gradient_sign) {
    mp_backend *be = cpu();
    float p[4] = {1.0f, 1.0f, -2.0f, 0.0f}, g[4] = {3.0f, -1e-3f, 5.0f, -7.0f}, m[4] = {0}, v[4] = {0};
    be->adamw(be, p, NULL, g, m, v, 4, NULL, 0, 0.1f, 0.9f, 0.999f, 1e-12f, 0.0f, 1, 1.0f);
    float want[4] = {0.9f, 1.1f, -2.1f, 0.1f};
    for (int i = 0; i < 4; i++) cr_assert(fabsf(p[i] - want[i]) < 1e-6f, "p[%d] = %g", i, p[i]);
}

/* The weight-decay mask: one adamw call over segments with and without decay (boundaries inside the
 * threading chunks, an empty segment) gives bitwise what one call per segment with wd or 0 gives, for
 * p, m, v and, on the bf16 backend, the compute copy. */
Test(adamw, decay_mask_segments_in_one_call_equal_one_call_per_segment) {
    use_two_threads();
    const mp_adamw_seg segs[] = {{20000, 1}, {5, 0}, {0, 1}, {30000, 0}, {16379, 1}};
    const int nsegs = 5;
    const int64_t n = 66384;
    mp_backend *bes[2] = {cpu(), mp_backend_cpu_bf16()};
    for (int b = 0; b < 2; b++) {
        mp_backend *be = bes[b];
        float *p[2], *m[2], *v[2];
        uint16_t *act[2] = {NULL, NULL};
        p[0] = frand(n, 1.0), p[1] = fdup(p[0], n);
        for (int k = 0; k < 2; k++) {
            m[k] = ffill(n, 0.0f), v[k] = ffill(n, 0.0f);
            if (be->act_dtype == MP_BF16) act[k] = calloc((size_t)n, sizeof(uint16_t));
        }
        for (int step = 1; step <= 3; step++) {
            float *g = frand(n, 1.0);
            be->adamw(be, p[0], act[0], g, m[0], v[0], n, segs, nsegs, 1e-2f, 0.9f, 0.95f, 1e-8f, 0.5f, step, 0.75f);
            int64_t off = 0;
            for (int k = 0; k < nsegs; off += segs[k++].n) {
                if (segs[k].n == 0) continue;
                be->adamw(be, p[1] + off, act[1] ? act[1] + off : NULL, g + off, m[1] + off, v[1] + off, segs[k].n,
                          NULL, 0, 1e-2f, 0.9f, 0.95f, 1e-8f, segs[k].decay ? 0.5f : 0.0f, step, 0.75f);
            }
            free(g);
        }
        cr_assert_eq(memcmp(p[0], p[1], (size_t)n * sizeof(float)), 0, "backend %d: p differs", b);
        cr_assert_eq(memcmp(m[0], m[1], (size_t)n * sizeof(float)), 0, "backend %d: m differs", b);
        cr_assert_eq(memcmp(v[0], v[1], (size_t)n * sizeof(float)), 0, "backend %d: v differs", b);
        if (act[0]) cr_assert_eq(memcmp(act[0], act[1], (size_t)n * 2), 0, "bf16 compute copy differs");
        for (int k = 0; k < 2; k++) free(p[k]), free(m[k]), free(v[k]), free(act[k]);
    }
}

/* mp_adamw_step's merging, seen through a backend that counts its adamw calls. */
static int g_adamw_calls, g_adamw_segs;
static void counting_adamw(mp_backend *be, float *p, void *p_act, const float *g, float *m, float *v, int64_t n,
                           const mp_adamw_seg *segs, int nsegs, float lr, float beta1, float beta2, float eps,
                           float wd, int step, float grad_scale) {
    (void)be;
    g_adamw_calls++, g_adamw_segs += nsegs;
    cpu()->adamw(cpu(), p, p_act, g, m, v, n, segs, nsegs, lr, beta1, beta2, eps, wd, step, grad_scale);
}

/* nslots slots of sizes 1 + 37 (i mod 5) with decay i mod 3 != 0 in one arena each for p, g, m, v, slot
 * gap_at (if >= 0) moved one element on (so it does not continue its predecessor); one optimizer step
 * through the counting backend, then the same update one adamw call per slot on copies: every bit equal.
 * Returns the calls mp_adamw_step made. */
static int optim_step_calls(int nslots, int gap_at) {
    mp_backend counting = *cpu();
    counting.adamw = counting_adamw;
    mp_optim_slot *slots = calloc((size_t)nslots, sizeof *slots);
    int64_t total = 1;
    for (int i = 0; i < nslots; i++) total += 1 + 37 * (i % 5);
    float *arena[2][4];
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 4; a++) arena[k][a] = k ? fdup(arena[0][a], total) : frand(total, 1.0);
    for (int64_t e = 0; e < total; e++) arena[0][3][e] = arena[1][3][e] = (float)(e % 7) * 1e-3f;   /* v >= 0 */
    const mp_adamw_hparams hp = {0.9, 0.95, 1e-8, 0.1};
    for (int k = 0; k < 2; k++) {
        int64_t off = 0;
        for (int i = 0; i < nslots; i++) {
            const int64_t n = 1 + 37 * (i % 5);
            if (i == gap_at) off++;
            float **A = arena[k];
            slots[i] = (mp_optim_slot){A[0] + off, A[1] + off, A[2] + off, A[3] + off, NULL, i == 2 ? 0 : n, i % 3 != 0};
            off += i == 2 ? 0 : n;   /* slot 2 is empty (a rank past a tensor's rows) */
        }
        if (k == 0) {
            g_adamw_calls = g_adamw_segs = 0;
            mp_adamw_step(&counting, &hp, slots, nslots, 1e-2, 3, 0.5f);
        } else {
            for (int i = 0; i < nslots; i++)
                if (slots[i].n) cpu()->adamw(cpu(), slots[i].p, NULL, slots[i].g, slots[i].m, slots[i].v, slots[i].n,
                                             NULL, 0, 1e-2f, 0.9f, 0.95f, 1e-8f, slots[i].decay ? 0.1f : 0.0f, 3, 0.5f);
        }
    }
    for (int a = 0; a < 4; a++)
        cr_assert_eq(memcmp(arena[0][a], arena[1][a], (size_t)total * sizeof(float)), 0, "%d slots: array %d differs", nslots, a);
    for (int k = 0; k < 2; k++)
        for (int a = 0; a < 4; a++) free(arena[k][a]);
    free(slots);
    return g_adamw_calls;
}

Test(adamw, optimizer_step_is_one_call_per_contiguous_run_with_the_decay_mask) {
    cr_assert_eq(optim_step_calls(12, -1), 1, "12 contiguous slots: one call");
    /* decay 0,1,1,0,1,1,...: runs of equal flags merge, slot 2 (empty) skipped: 0 | 1 | 0 | 1 ... */
    cr_assert_eq(g_adamw_segs, 8, "segments of one call: %d", g_adamw_segs);
    cr_assert_eq(optim_step_calls(12, 7), 2, "a gap before slot 7: two calls");
    cr_assert_eq(optim_step_calls(600, -1), 2, "more segments than one call takes: two calls");
}
