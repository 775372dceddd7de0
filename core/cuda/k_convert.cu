/*
 * core/cuda/k_convert.cu — bf16 <-> fp32 conversion (FSDP gathers of bf16 weights, host staging).
 *
 * Design: one grid-stride loop per direction, one element per thread per iteration, int64 indices
 * (parameter shards can exceed 2^31 elements). Purely elementwise and memory-bound, so the simple form
 * is within a small factor of bandwidth; no reduction, so nothing to make deterministic. fp32 -> bf16
 * is __float2bfloat16_rn: round to nearest even, NaN stays NaN, overflow rounds to +-inf.
 */
#include "core/cuda/k_common.cuh"

static __global__ void f32_to_bf16_kernel(mp_bf16 *__restrict__ dst, const float *__restrict__ src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = mp_f2bf(src[i]);
}

static __global__ void bf16_to_f32_kernel(float *__restrict__ dst, const mp_bf16 *__restrict__ src, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        dst[i] = mp_bf2f(src[i]);
}

extern "C" void mp_cuda_f32_to_bf16(mp_bf16 *dst, const float *src, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(dst && src);
    f32_to_bf16_kernel<<<mp_grid_for(n, 256), 256, 0, s>>>(dst, src, n);
}

extern "C" void mp_cuda_bf16_to_f32(float *dst, const mp_bf16 *src, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(dst && src);
    bf16_to_f32_kernel<<<mp_grid_for(n, 256), 256, 0, s>>>(dst, src, n);
}
