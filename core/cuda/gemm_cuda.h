/*
 * core/cuda/gemm_cuda.h — bf16 GEMMs on cuBLASLt for the CUDA backend: fp32 accumulation
 * (CUBLAS_COMPUTE_32F), bf16 A and B, bf16 or fp32 C.
 *
 * mp_cuda_gemm mirrors struct mp_backend's gemm (core/backend.h) exactly, so the glue is a call:
 *   C[M,N] = alpha * op(A) * op(B) + beta * C,  op(X) = X or X^T,  all matrices ROW-major, lda/ldb/ldc
 *   the row strides of the matrices as stored (A is [M,K] or, with trans_a, [K,M]; B is [K,N] or, with
 *   trans_b, [N,K]).
 * The three GEMMs of a linear layer y = x W^T (W [out, in] as Megatron/HF store it, x [N, in]):
 *   forward  Y[N,out]   = X W^T          mp_cuda_linear_fwd     (gemm 0,1)
 *   dX       dX[N,in]   = dY W (+ beta)  mp_cuda_linear_bwd_dx  (gemm 0,0)
 *   dW       dW[out,in] += dY^T X        mp_cuda_linear_bwd_dw  (gemm 1,0, beta = 1, dW fp32)
 *
 * A handle owns one cuBLASLt handle and one workspace; calls on one handle must be on ONE stream at a
 * time (the workspace is shared by its calls), so make one handle per stream. Calls return 0 or a
 * cublasStatus_t (nonzero): cuBLAS errors are not reported through cudaGetLastError;
 * mp_cuda_blas_status_name names them. Results are bitwise repeatable run to run for a fixed toolkit,
 * GPU model and SM count (cuBLAS's documented guarantee; the heuristic's choice is a pure function of
 * the problem and the pointers' alignment).
 */
#ifndef MP_GEMM_CUDA_H
#define MP_GEMM_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include "core/cuda/kernels_cuda.h"
#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mp_cuda_blas mp_cuda_blas;

typedef enum { MP_CUDA_OUT_BF16 = 0, MP_CUDA_OUT_F32 = 1 } mp_cuda_out_type;

/* The workspace size cuBLAS recommends for Hopper (32 MiB; ample for Ampere). */
#define MP_CUDA_BLAS_WORKSPACE_BYTES ((size_t)32 << 20)

/* Creates a handle on the current device with a workspace of workspace_bytes (0: none; fewer
 * algorithms). MP_EDEVICE with cuBLAS's or CUDA's message on failure. */
mp_code mp_cuda_blas_create(mp_cuda_blas **out, size_t workspace_bytes, mp_err *err);
/* Frees the handle and its workspace (NULL: nothing). Not while its work is in flight: synchronise first. */
void mp_cuda_blas_destroy(mp_cuda_blas *g);
const char *mp_cuda_blas_status_name(int status);
/* The cached plans (core/cuda/gemm_cuda.cu) so far, and the gemm calls that found / made theirs. */
void mp_cuda_blas_plan_stats(const mp_cuda_blas *g, int *plans, long long *hits, long long *misses);

/* core/backend.h's gemm on bf16 A, B; C is bf16 or fp32 (c_type); alpha, beta host floats. M, N == 0: no
 * work; K == 0: C = beta C (a scale kernel, as the CPU backend does). */
int mp_cuda_gemm(mp_cuda_blas *g, int trans_a, int trans_b, int M, int N, int K, float alpha, const mp_bf16 *A,
                 int lda, const mp_bf16 *B, int ldb, float beta, void *C, mp_cuda_out_type c_type, int ldc,
                 cudaStream_t s);

/* Y[N,out] = X[N,in] W[out,in]^T (written). */
int mp_cuda_linear_fwd(mp_cuda_blas *g, void *Y, mp_cuda_out_type y_type, const mp_bf16 *X, const mp_bf16 *W, int N,
                       int in, int out, cudaStream_t s);
/* dX[N,in] = dY[N,out] W[out,in] + beta dX (beta 0: written; 1: accumulates). */
int mp_cuda_linear_bwd_dx(mp_cuda_blas *g, void *dX, mp_cuda_out_type dx_type, const mp_bf16 *dY, const mp_bf16 *W,
                          int N, int in, int out, float beta, cudaStream_t s);
/* dW[out,in] (fp32) += dY[N,out]^T X[N,in] (weight gradients accumulate, core/backend.h). */
int mp_cuda_linear_bwd_dw(mp_cuda_blas *g, float *dW, const mp_bf16 *dY, const mp_bf16 *X, int N, int in, int out,
                          cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
