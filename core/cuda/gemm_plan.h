/*
 * core/cuda/gemm_plan.h — the key of a cached cuBLASLt plan (core/cuda/gemm_cuda.cu) and its lookup, in
 * plain host C so that check_kernels_host tests them without a GPU.
 *
 * A plan (matmul descriptor, three layouts, the heuristic's algorithm) depends on exactly: the transposes,
 * M, N, K, the three row strides, C's type, and the alignments promised to the heuristic for A, B and C.
 * Every field is a 32-bit integer (no padding), the key is zeroed before it is filled, and keys compare
 * with memcmp. alpha and beta are passed at each call and are not part of it. A training step has a
 * few dozen distinct keys (docs/CUDA.md's roofline lists the 1B step's 15 shapes), so a linear scan of
 * at most MP_CUDA_GEMM_PLANS keys is cheaper than hashing; beyond that, calls run uncached.
 */
#ifndef MP_GEMM_PLAN_H
#define MP_GEMM_PLAN_H

#include <stdint.h>
#include <string.h>

#define MP_CUDA_GEMM_PLANS 128

typedef struct mp_gemm_plan_key {
    int32_t trans_a, trans_b, M, N, K, lda, ldb, ldc, c_type;
    uint32_t align_a, align_b, align_c;   /* of cuBLASLt's A (our B), B (our A) and C */
} mp_gemm_plan_key;

/* Fills *k (zeroed first) from a call's parameters. */
static inline void mp_gemm_plan_key_set(mp_gemm_plan_key *k, int trans_a, int trans_b, int M, int N, int K, int lda,
                                        int ldb, int ldc, int c_type, uint32_t align_a, uint32_t align_b,
                                        uint32_t align_c) {
    memset(k, 0, sizeof *k);
    k->trans_a = trans_a, k->trans_b = trans_b, k->M = M, k->N = N, k->K = K;
    k->lda = lda, k->ldb = ldb, k->ldc = ldc, k->c_type = c_type;
    k->align_a = align_a, k->align_b = align_b, k->align_c = align_c;
}

/* The index of key k among keys[0..n), or -1. */
static inline int mp_gemm_plan_find(const mp_gemm_plan_key *keys, int n, const mp_gemm_plan_key *k) {
    for (int i = 0; i < n; i++)
        if (!memcmp(&keys[i], k, sizeof *k)) return i;
    return -1;
}

#endif
