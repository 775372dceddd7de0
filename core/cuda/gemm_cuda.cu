/*
 * core/cuda/gemm_cuda.cu — cuBLASLt GEMMs: bf16 A and B, fp32 accumulation, bf16 or fp32 C (see
 * gemm_cuda.h for the contract, which is core/backend.h's row-major gemm).
 *
 * Row-major to column-major: cuBLASLt is column-major, and a row-major [R, C] matrix with row stride ld
 * is, byte for byte, a column-major [C, R] matrix with leading dimension ld. So the row-major product
 *   C[M,N] = op(A) op(B)
 * is the column-major product
 *   C^T[N,M] = op(B)^T op(A)^T
 * and cuBLASLt is called with its "A" = our B and its "B" = our A, same transpose flags: our B stored
 * row-major [K,N] (no trans) is column-major [N,K] = exactly op(B)^T, used untransposed; stored [N,K]
 * (trans_b) it is column-major [K,N], used transposed. Likewise for A. Layouts below are given as
 * column-major (rows, cols, ld) of the buffers as stored.
 *
 * Plans, cached per shape: a matmul descriptor (compute 32F, scale 32F), three layouts, and a
 * heuristic query for one algorithm under this handle's workspace and the operands' actual alignment (a
 * pointer into the middle of a fused buffer may be less than the 256-byte alignment the heuristic
 * otherwise assumes) are made on the first call of a key (core/cuda/gemm_plan.h: transposes, sizes,
 * strides, C type, alignments) and kept in the handle, up to MP_CUDA_GEMM_PLANS; later calls of the key
 * go straight to cublasLtMatmul with the same algorithm (the ~340 descriptor builds and heuristic runs per
 * micro-batch of the 1B shape become ~15 per run). Keys beyond the table run uncached, as before. cuBLASLt's
 * split-K schemes are all deterministic (in-place split-K orders its partial sums with counters; the
 * others reduce in a separate pass), so run-to-run repeatability rests on cuBLAS's own guarantee (same
 * toolkit, GPU model and SM count).
 */
/* core/error.h has no extern "C" guard of its own: include it first, with C linkage, so mp_err_set
 * resolves to the C library symbol (its include guard makes gemm_cuda.h's include a no-op). */
extern "C" {
#include "core/error.h"
}
#include "core/cuda/gemm_cuda.h"
#include "core/cuda/gemm_plan.h"
#include <assert.h>
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <new>

/* A cached plan: what cublasLtMatmul needs besides the pointers and scalars. */
struct gemm_plan {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

struct mp_cuda_blas {
    cublasLtHandle_t lt;
    void *workspace;
    size_t workspace_bytes;
    mp_gemm_plan_key keys[MP_CUDA_GEMM_PLANS];
    gemm_plan plans[MP_CUDA_GEMM_PLANS];
    int nplans;
    long long hits, misses;
};

extern "C" const char *mp_cuda_blas_status_name(int status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
    default: return "unknown cuBLAS status";
    }
}

extern "C" mp_code mp_cuda_blas_create(mp_cuda_blas **out, size_t workspace_bytes, mp_err *err) {
    assert(out);
    *out = NULL;
    mp_cuda_blas *g = new (std::nothrow) mp_cuda_blas();
    if (!g) return mp_err_set(err, MP_EDEVICE, "cuBLASLt handle: out of host memory");
    cublasStatus_t st = cublasLtCreate(&g->lt);
    if (st != CUBLAS_STATUS_SUCCESS) {
        delete g;
        return mp_err_set(err, MP_EDEVICE, "cublasLtCreate: %s", mp_cuda_blas_status_name((int)st));
    }
    if (workspace_bytes > 0) {
        cudaError_t ce = cudaMalloc(&g->workspace, workspace_bytes);
        if (ce != cudaSuccess) {
            cublasLtDestroy(g->lt);
            delete g;
            return mp_err_set(err, MP_EDEVICE, "cuBLASLt workspace of %zu bytes: cudaMalloc: %s", workspace_bytes,
                              cudaGetErrorString(ce));
        }
    }
    g->workspace_bytes = workspace_bytes;
    *out = g;
    return MP_OK;
}

/* Destroys what p holds (members NULL ok). */
static void plan_release(gemm_plan *p) {
    if (p->lc) cublasLtMatrixLayoutDestroy(p->lc);
    if (p->lb) cublasLtMatrixLayoutDestroy(p->lb);
    if (p->la) cublasLtMatrixLayoutDestroy(p->la);
    if (p->desc) cublasLtMatmulDescDestroy(p->desc);
}

extern "C" void mp_cuda_blas_plan_stats(const mp_cuda_blas *g, int *plans, long long *hits, long long *misses) {
    *plans = g->nplans, *hits = g->hits, *misses = g->misses;
}

extern "C" void mp_cuda_blas_destroy(mp_cuda_blas *g) {
    if (!g) return;
    for (int i = 0; i < g->nplans; i++) plan_release(&g->plans[i]);
    if (g->workspace) cudaFree(g->workspace);
    cublasLtDestroy(g->lt);
    delete g;
}

/* C[i, j] = beta * C[i, j] over an [M, N] matrix with row stride ldc (beta == 0 writes zeros, so NaNs
 * in an uninitialised C do not survive): the K == 0 case. */
template <typename T>
static __global__ void scale_rows_kernel(T *C, int M, int N, int ldc, float beta) {
    const int64_t total = (int64_t)M * N;
    for (int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; e < total; e += (int64_t)gridDim.x * blockDim.x) {
        T *c = C + (e / N) * (int64_t)ldc + e % N;
        const float x = beta == 0.0f ? 0.0f : beta * (float)*c;
        *c = (T)x;
    }
}

/* The largest power of two (<= 256) dividing the address: the alignment to promise the heuristic. */
static uint32_t align_of(const void *p) {
    uintptr_t a = (uintptr_t)p;
    uint32_t al = 256;
    while (al > 1 && (a % al) != 0) al /= 2;
    return al;
}

#define LT_TRY(call)                                     \
    do {                                                 \
        st = (call);                                     \
        if (st != CUBLAS_STATUS_SUCCESS) goto done;      \
    } while (0)

/* Makes the plan of key k into *p (zeroed by the caller): descriptor, layouts, one algorithm from the
 * heuristic. A cuBLAS status; on failure *p holds what was made so far (plan_release frees it). */
static int plan_make(mp_cuda_blas *g, const mp_gemm_plan_key *k, gemm_plan *p) {
    const cudaDataType_t ctype = k->c_type == MP_CUDA_OUT_F32 ? CUDA_R_32F : CUDA_R_16BF;
    const cublasOperation_t op_lt_a = k->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;   /* cuBLASLt's A is our B */
    const cublasOperation_t op_lt_b = k->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;   /* cuBLASLt's B is our A */
    const int M = k->M, N = k->N, K = k->K;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    cublasLtMatmulPreference_t pref = NULL;
    cublasLtMatmulHeuristicResult_t heur;
    int found = 0;

    LT_TRY(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof op_lt_a));
    LT_TRY(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof op_lt_b));
    /* our B as stored: row-major [K,N] = col-major (N rows, K cols), or row-major [N,K] = col-major (K, N) */
    LT_TRY(cublasLtMatrixLayoutCreate(&p->la, CUDA_R_16BF, k->trans_b ? K : N, k->trans_b ? N : K, k->ldb));
    /* our A as stored: row-major [M,K] = col-major (K, M), or row-major [K,M] = col-major (M, K) */
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lb, CUDA_R_16BF, k->trans_a ? M : K, k->trans_a ? K : M, k->lda));
    /* C row-major [M,N] = col-major (N, M) */
    LT_TRY(cublasLtMatrixLayoutCreate(&p->lc, ctype, N, M, k->ldc));
    LT_TRY(cublasLtMatmulPreferenceCreate(&pref));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &g->workspace_bytes,
                                                sizeof g->workspace_bytes));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &k->align_a,
                                                sizeof k->align_a));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &k->align_b,
                                                sizeof k->align_b));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &k->align_c,
                                                sizeof k->align_c));
    LT_TRY(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &k->align_c,
                                                sizeof k->align_c));
    LT_TRY(cublasLtMatmulAlgoGetHeuristic(g->lt, p->desc, p->la, p->lb, p->lc, p->lc, pref, 1, &heur, &found));
    if (found < 1) {
        st = CUBLAS_STATUS_NOT_SUPPORTED;
        goto done;
    }
    p->algo = heur.algo;
done:
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    return (int)st;
}

extern "C" int mp_cuda_gemm(mp_cuda_blas *g, int trans_a, int trans_b, int M, int N, int K, float alpha,
                            const mp_bf16 *A, int lda, const mp_bf16 *B, int ldb, float beta, void *C,
                            mp_cuda_out_type c_type, int ldc, cudaStream_t s) {
    assert(g && M >= 0 && N >= 0 && K >= 0);
    assert(c_type == MP_CUDA_OUT_BF16 || c_type == MP_CUDA_OUT_F32);
    if (M == 0 || N == 0) return CUBLAS_STATUS_SUCCESS;
    assert(C && ldc >= N);
    if (K == 0) {
        const int64_t total = (int64_t)M * N;
        const unsigned blocks = (unsigned)(total / 256 + 1 < 65535 ? total / 256 + 1 : 65535);
        if (c_type == MP_CUDA_OUT_F32)
            scale_rows_kernel<float><<<blocks, 256, 0, s>>>((float *)C, M, N, ldc, beta);
        else
            scale_rows_kernel<__nv_bfloat16><<<blocks, 256, 0, s>>>((__nv_bfloat16 *)C, M, N, ldc, beta);
        return CUBLAS_STATUS_SUCCESS;   /* a launch error shows in cudaGetLastError */
    }
    assert(A && B);
    assert(lda >= (trans_a ? M : K) && ldb >= (trans_b ? K : N));

    const uint32_t al_a = align_of(B), al_b = align_of(A), al_c = align_of(C);
    mp_gemm_plan_key key;
    mp_gemm_plan_key_set(&key, trans_a, trans_b, M, N, K, lda, ldb, ldc, (int)c_type, al_a, al_b, al_c);
    const int hit = mp_gemm_plan_find(g->keys, g->nplans, &key);
    gemm_plan made = {};
    const gemm_plan *p = hit >= 0 ? &g->plans[hit] : &made;
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (hit >= 0) {
        g->hits++;
    } else {
        g->misses++;
        st = (cublasStatus_t)plan_make(g, &key, &made);
        if (st != CUBLAS_STATUS_SUCCESS) {
            plan_release(&made);
            return (int)st;
        }
    }
    /* D = C (in place): cuBLASLt allows it when the layouts match, which they do */
    st = cublasLtMatmul(g->lt, p->desc, &alpha, B, p->la, A, p->lb, &beta, C, p->lc, C, p->lc, &p->algo, g->workspace,
                        g->workspace_bytes, s);
    if (hit < 0) {
        if (st == CUBLAS_STATUS_SUCCESS && g->nplans < MP_CUDA_GEMM_PLANS) {
            g->keys[g->nplans] = key;
            g->plans[g->nplans++] = made;   /* kept: the handle owns it now */
        } else {
            plan_release(&made);
        }
    }
    return (int)st;
}

extern "C" int mp_cuda_linear_fwd(mp_cuda_blas *g, void *Y, mp_cuda_out_type y_type, const mp_bf16 *X,
                                  const mp_bf16 *W, int N, int in, int out, cudaStream_t s) {
    return mp_cuda_gemm(g, 0, 1, N, out, in, 1.0f, X, in, W, in, 0.0f, Y, y_type, out, s);
}

extern "C" int mp_cuda_linear_bwd_dx(mp_cuda_blas *g, void *dX, mp_cuda_out_type dx_type, const mp_bf16 *dY,
                                     const mp_bf16 *W, int N, int in, int out, float beta, cudaStream_t s) {
    return mp_cuda_gemm(g, 0, 0, N, in, out, 1.0f, dY, out, W, in, beta, dX, dx_type, in, s);
}

extern "C" int mp_cuda_linear_bwd_dw(mp_cuda_blas *g, float *dW, const mp_bf16 *dY, const mp_bf16 *X, int N, int in,
                                     int out, cudaStream_t s) {
    return mp_cuda_gemm(g, 1, 0, out, in, N, 1.0f, dY, out, X, in, 1.0f, dW, MP_CUDA_OUT_F32, in, s);
}
