/*
 * core/cuda/k_convert.cu — bf16 <-> fp32 conversion (FSDP gathers of bf16 weights, host staging).
 *
 * Design: int64 indices (parameter shards can exceed 2^31 elements). When both pointers are 16-byte
 * aligned a thread converts chunks of 8 elements: one 16-byte bf16 access and two fp32 ones;
 * the n % 8 tail goes one element per thread (k_common.cuh's mp_vec_run); else one element per access.
 * Purely elementwise and memory-bound; no reduction, so nothing to make deterministic. fp32 -> bf16 is
 * __float2bfloat16_rn: round to nearest even, NaN stays NaN, overflow rounds to +-inf. Both paths give
 * the same bits (check_kernels_host replays them).
 */
#include "core/cuda/k_common.cuh"

template <typename D, typename S>
struct convert_op {   /* dst = src, through fp32 */
    D *dst;
    const S *src;
    template <int V>
    __host__ __device__ void at(int64_t i) const {
        float v[V];
        mp_ld_vec<V>(v, src + i);
        mp_st_vec<V>(dst + i, v);
    }
};

extern "C" void mp_cuda_f32_to_bf16(mp_bf16 *dst, const float *src, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(dst && src);
    mp_vec_launch<8>(n, mp_aligned16(dst, src), convert_op<mp_bf16, float>{dst, src}, s);
}

extern "C" void mp_cuda_bf16_to_f32(float *dst, const mp_bf16 *src, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(dst && src);
    mp_vec_launch<8>(n, mp_aligned16(dst, src), convert_op<float, mp_bf16>{dst, src}, s);
}
