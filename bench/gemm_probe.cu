/*
 * bench/gemm_probe.cu — every GEMM of the 1B-shape training step, alone on the GPU, through the backend's
 * own cuBLASLt wrapper (core/cuda/gemm_cuda.cu: cached plan, the heuristic's first algorithm), against
 * the roofline and against the other algorithms cuBLASLt offers for the same problem.
 *
 * Why: the first H200 run (docs/BENCH_GPU.md) profiled two GEMM keys of the step at 12-13x their roofline
 * (16384x2048x2048 t01 bf16, the q/o projections' forward, and 32000x2048x16384 t10 f32, the LM head's
 * weight gradient) while keys of the same kind ran at it (16384x8192x2048 t01, 8192x2048x16384 t10 f32).
 * In the step, an op's cudaEvent pair also times whatever that op waits for, and the plan depends on the
 * operands' alignment; this program separates those causes: each key runs alone on fresh 256-byte aligned
 * buffers (row "lt"), then with A, B and C at 64-byte offsets as the activation arena gives them ("lt@64"),
 * and the heuristic's other algorithms (up to 8) are timed on the aligned buffers ("best of N", with the
 * winner's index: 0 means the heuristic's first choice is the fastest). If the probe's "lt" rows run at the
 * roofline while the step's profile does not, the step's slowness is not the GEMM.
 *
 *   gemm_probe [--tokens 16384] [--hidden 2048] [--inter 8192] [--kv 512] [--vocab 32000] [--reps 10]
 *
 * Prints one row per key: the call, ms per call (median of --reps), TFLOP/s, roofline ms (989 TFLOP/s
 * bf16 dense, 4.8 TB/s) and the ratio, then the same for lt@64 and the best of the heuristic's list.
 * Exit status: 0 done, 1 a cuBLAS/CUDA error, 2 bad usage, 77 no usable GPU ("no GPU: <CUDA's reason>").
 * Reading the figures is the user's: this reports, it does not judge.
 */
extern "C" {
#include "core/error.h"
}
#include "core/cuda/gemm_cuda.h"
#include <algorithm>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <vector>

#define PEAK_FLOPS 989e12
#define PEAK_BYTES 4.8e12
#define MAX_ALGOS 8

/* One GEMM of the step: row-major C[M,N] (+)= op(A) op(B), names for the table. */
struct probe_key {
    const char *what;
    int ta, tb, M, N, K;
    int f32_out;
    float beta;
};

#define CK(call)                                                                                  \
    do {                                                                                          \
        cudaError_t ce_ = (call);                                                                 \
        if (ce_ != cudaSuccess) {                                                                 \
            fprintf(stderr, "gemm_probe: %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(ce_)); \
            exit(1);                                                                              \
        }                                                                                         \
    } while (0)

/* Fills n bf16 with small pseudo-random values (deterministic; the values do not change the timing). */
static __global__ void fill_kernel(__nv_bfloat16 *p, size_t n, unsigned seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        unsigned h = (unsigned)i * 2654435761u ^ seed;
        p[i] = __float2bfloat16(((h >> 8) & 0xffff) / 65536.0f - 0.5f);
    }
}

/* Roofline ms of key k: the larger of its FLOPs at the bf16 peak and its bytes (A, B once; C written, and
 * read when beta != 0) at the memory peak. */
static double roof_ms(const probe_key &k) {
    double flops = 2.0 * k.M * k.N * (double)k.K;
    double cb = k.f32_out ? 4 : 2;
    double bytes = 2.0 * ((double)k.M * k.K + (double)k.K * k.N) + cb * k.M * (double)k.N * (k.beta != 0 ? 2 : 1);
    return 1e3 * std::max(flops / PEAK_FLOPS, bytes / PEAK_BYTES);
}

/* Median ms of reps calls of fn on stream s (two untimed calls first). */
template <typename F>
static double time_ms(F fn, int reps, cudaStream_t s) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 2; i++) fn();
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(a, s));
        fn();
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* The heuristic's list (up to MAX_ALGOS) for key k on 256-aligned operands, each timed; returns the best
 * ms and its index in *best_i (-1 when the list is empty). Same row-major -> column-major mapping as
 * core/cuda/gemm_cuda.cu: cuBLASLt's A is our B, its B our A. */
static double best_of_list(cublasLtHandle_t lt, void *ws, size_t wsb, const probe_key &k, const __nv_bfloat16 *A,
                           const __nv_bfloat16 *B, void *C, int reps, cudaStream_t s, int *best_i, int *n_algos) {
    const int M = k.M, N = k.N, K = k.K;
    const int lda = k.ta ? M : K, ldb = k.tb ? K : N, ldc = N;
    cublasOperation_t oa = k.tb ? CUBLAS_OP_T : CUBLAS_OP_N, ob = k.ta ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasLtMatmulDesc_t d;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulPreference_t pref;
    cublasLtMatmulDescCreate(&d, CUBLAS_COMPUTE_32F, CUDA_R_32F);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSA, &oa, sizeof oa);
    cublasLtMatmulDescSetAttribute(d, CUBLASLT_MATMUL_DESC_TRANSB, &ob, sizeof ob);
    cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, k.tb ? K : N, k.tb ? N : K, ldb);
    cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, k.ta ? M : K, k.ta ? K : M, lda);
    cublasLtMatrixLayoutCreate(&lc, k.f32_out ? CUDA_R_32F : CUDA_R_16BF, N, M, ldc);
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
    cublasLtMatmulHeuristicResult_t h[MAX_ALGOS];
    int found = 0;
    cublasLtMatmulAlgoGetHeuristic(lt, d, la, lb, lc, lc, pref, MAX_ALGOS, h, &found);
    float alpha = 1.0f, beta = k.beta;
    double best = -1;
    *best_i = -1;
    *n_algos = found;
    for (int i = 0; i < found; i++) {
        auto run = [&] {
            cublasStatus_t st = cublasLtMatmul(lt, d, &alpha, B, la, A, lb, &beta, C, lc, C, lc, &h[i].algo, ws, wsb, s);
            if (st != CUBLAS_STATUS_SUCCESS) {
                fprintf(stderr, "gemm_probe: %s: algorithm %d: %s\n", k.what, i, mp_cuda_blas_status_name((int)st));
                exit(1);
            }
        };
        double ms = time_ms(run, reps, s);
        if (best < 0 || ms < best) best = ms, *best_i = i;
    }
    cublasLtMatmulPreferenceDestroy(pref);
    cublasLtMatrixLayoutDestroy(lc);
    cublasLtMatrixLayoutDestroy(lb);
    cublasLtMatrixLayoutDestroy(la);
    cublasLtMatmulDescDestroy(d);
    return best;
}

/* The step's GEMM keys for tokens t, hidden h, intermediate i, kv width kv, vocab v (gemm_cuda.h: forward
 * 0,1; dX 0,0; dW 1,0 with f32 C and beta 1; q, k, v one [h + 2 kv, h] GEMM each way, the q width taken
 * as h; the MLP feature-major as layers/llama.c runs it: gate and up one [2i, h] GEMM each way, down on h^T). */
static std::vector<probe_key> step_keys(int t, int h, int i, int kv, int v) {
    return {
        {"o fwd", 0, 1, t, h, h, 0, 0.f},            {"qkv fwd", 0, 1, t, h + 2 * kv, h, 0, 0.f},
        {"gate+up fwd", 0, 1, 2 * i, t, h, 0, 0.f},  {"down fwd", 1, 1, t, h, i, 0, 0.f},
        {"lm_head fwd", 0, 1, t, v, h, 0, 0.f},      {"o dX", 0, 0, t, h, h, 0, 0.f},
        {"qkv dX", 0, 0, t, h, h + 2 * kv, 0, 0.f},  {"gate+up dX", 1, 0, t, h, 2 * i, 0, 0.f},
        {"down dX", 1, 1, i, t, h, 0, 0.f},          {"lm_head dX", 0, 0, t, h, v, 0, 0.f},
        {"o dW", 1, 0, h, h, t, 1, 1.f},             {"qkv dW", 1, 0, h + 2 * kv, h, t, 1, 1.f},
        {"gate+up dW", 0, 0, 2 * i, h, t, 1, 1.f},   {"down dW", 1, 1, h, i, t, 1, 1.f},
        {"lm_head dW", 1, 0, v, h, t, 1, 1.f},
    };
}

static int arg_int(int argc, char **argv, int *i, const char *name) {
    if (*i + 1 >= argc) {
        fprintf(stderr, "gemm_probe: %s needs a value\n", name);
        exit(2);
    }
    int x = atoi(argv[++*i]);
    if (x <= 0) {
        fprintf(stderr, "gemm_probe: %s must be a positive integer\n", name);
        exit(2);
    }
    return x;
}

int main(int argc, char **argv) {
    int t = 16384, h = 2048, in = 8192, kv = 512, v = 32000, reps = 10;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--tokens")) t = arg_int(argc, argv, &i, "--tokens");
        else if (!strcmp(argv[i], "--hidden")) h = arg_int(argc, argv, &i, "--hidden");
        else if (!strcmp(argv[i], "--inter")) in = arg_int(argc, argv, &i, "--inter");
        else if (!strcmp(argv[i], "--kv")) kv = arg_int(argc, argv, &i, "--kv");
        else if (!strcmp(argv[i], "--vocab")) v = arg_int(argc, argv, &i, "--vocab");
        else if (!strcmp(argv[i], "--reps")) reps = arg_int(argc, argv, &i, "--reps");
        else {
            fprintf(stderr, "usage: gemm_probe [--tokens N] [--hidden N] [--inter N] [--kv N] [--vocab N] [--reps N]\n");
            return 2;
        }
    }
    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev < 1) {
        printf("gemm_probe: no GPU: %s\n", ce != cudaSuccess ? cudaGetErrorString(ce) : "no CUDA device");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    mp_err err;
    mp_cuda_blas *g = NULL;
    if (mp_cuda_blas_create(&g, MP_CUDA_BLAS_WORKSPACE_BYTES, &err)) {
        fprintf(stderr, "gemm_probe: %s\n", err.msg);
        return 1;
    }
    cublasLtHandle_t lt;
    void *ws;
    cublasLtCreate(&lt);
    CK(cudaMalloc(&ws, MP_CUDA_BLAS_WORKSPACE_BYTES));
    std::vector<probe_key> keys = step_keys(t, h, in, kv, v);
    size_t maxa = 0, maxc = 0;
    for (auto &k : keys) {
        maxa = std::max(maxa, std::max((size_t)k.M * k.K, (size_t)k.K * k.N));
        maxc = std::max(maxc, (size_t)k.M * k.N * (k.f32_out ? 4 : 2));
    }
    char *A, *B, *C;   /* 256 bytes of slack for the offset runs */
    CK(cudaMalloc(&A, maxa * 2 + 256));
    CK(cudaMalloc(&B, maxa * 2 + 256));
    CK(cudaMalloc(&C, maxc + 256));
    fill_kernel<<<1024, 256, 0, s>>>((__nv_bfloat16 *)A, maxa + 128, 1);
    fill_kernel<<<1024, 256, 0, s>>>((__nv_bfloat16 *)B, maxa + 128, 2);
    CK(cudaMemsetAsync(C, 0, maxc + 256, s));
    CK(cudaStreamSynchronize(s));
    printf("gemm_probe: %s | tokens %d hidden %d inter %d kv %d vocab %d | median of %d calls\n", prop.name, t, h, in,
           kv, v, reps);
    printf("%-12s %-22s %8s %8s %8s %7s | %8s %7s | %8s %7s %s\n", "op", "MxNxK t C", "roof ms", "lt ms", "TFLOP/s",
           "x roof", "lt@64 ms", "x roof", "best ms", "x roof", "(index of N)");
    for (auto &k : keys) {
        const int lda = k.ta ? k.M : k.K, ldb = k.tb ? k.K : k.N;
        auto call = [&](size_t off) {
            return [&, off] {
                int st = mp_cuda_gemm(g, k.ta, k.tb, k.M, k.N, k.K, 1.0f, (const mp_bf16 *)(A + off), lda,
                                      (const mp_bf16 *)(B + off), ldb, k.beta, C + off,
                                      k.f32_out ? MP_CUDA_OUT_F32 : MP_CUDA_OUT_BF16, k.N, s);
                if (st) {
                    fprintf(stderr, "gemm_probe: %s: %s\n", k.what, mp_cuda_blas_status_name(st));
                    exit(1);
                }
            };
        };
        double roof = roof_ms(k), ms = time_ms(call(0), reps, s), ms64 = time_ms(call(64), reps, s);
        int bi = -1, na = 0;
        double best = best_of_list(lt, ws, MP_CUDA_BLAS_WORKSPACE_BYTES, k, (const __nv_bfloat16 *)A,
                                   (const __nv_bfloat16 *)B, C, reps, s, &bi, &na);
        char shape[64];
        snprintf(shape, sizeof shape, "%dx%dx%d t%d%d %s%s", k.M, k.N, k.K, k.ta, k.tb, k.f32_out ? "f32" : "bf16",
                 k.beta != 0 ? " +=" : "");
        printf("%-12s %-22s %8.3f %8.3f %8.1f %7.2f | %8.3f %7.2f | %8.3f %7.2f (%d of %d)\n", k.what, shape, roof, ms,
               2.0 * k.M * k.N * (double)k.K / (ms * 1e9), ms / roof, ms64, ms64 / roof, best, best / roof, bi, na);
    }
    CK(cudaGetLastError());
    cudaFree(A);
    cudaFree(B);
    cudaFree(C);
    cudaFree(ws);
    cublasLtDestroy(lt);
    mp_cuda_blas_destroy(g);
    cudaStreamDestroy(s);
    return 0;
}
