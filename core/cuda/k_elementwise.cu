/*
 * core/cuda/k_elementwise.cu — the backend table's small elementwise ops (add, accumulate, scale) in
 * bf16 and fp32.
 *
 * Design: grid-stride loops, one element per thread per iteration, int64 indices, math in fp32 and one
 * rounding to the storage type per output. Elementwise, so there is nothing to make deterministic: each
 * output element is one thread's fixed arithmetic. add allows out to alias a or b (each element is read
 * before it is written by the same thread), so its pointers carry no __restrict__.
 */
#include "core/cuda/k_common.cuh"

#define MP_GRID_STRIDE(i, n) \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

template <typename T>
static __global__ void add_kernel(T *out, const T *a, const T *b, int64_t n) {
    MP_GRID_STRIDE(i, n) mp_st(out + i, mp_ld(a + i) + mp_ld(b + i));
}

template <typename T>
static __global__ void accumulate_kernel(T *__restrict__ dst, const T *__restrict__ src, int64_t n) {
    MP_GRID_STRIDE(i, n) mp_st(dst + i, mp_ld(dst + i) + mp_ld(src + i));
}

template <typename T>
static __global__ void scale_kernel(T *x, float a, int64_t n) {
    MP_GRID_STRIDE(i, n) mp_st(x + i, mp_ld(x + i) * a);
}

#define MP_LAUNCH_1D(kernel, n, ...)                                     \
    do {                                                                 \
        assert((n) >= 0);                                                \
        if ((n) == 0) return;                                            \
        kernel<<<mp_grid_for((n), 256), 256, 0, s>>>(__VA_ARGS__, (n)); \
    } while (0)

extern "C" void mp_cuda_add_bf16(mp_bf16 *out, const mp_bf16 *a, const mp_bf16 *b, int64_t n, cudaStream_t s) {
    MP_LAUNCH_1D(add_kernel<mp_bf16>, n, out, a, b);
}
extern "C" void mp_cuda_add_f32(float *out, const float *a, const float *b, int64_t n, cudaStream_t s) {
    MP_LAUNCH_1D(add_kernel<float>, n, out, a, b);
}
extern "C" void mp_cuda_accumulate_bf16(mp_bf16 *dst, const mp_bf16 *src, int64_t n, cudaStream_t s) {
    MP_LAUNCH_1D(accumulate_kernel<mp_bf16>, n, dst, src);
}
extern "C" void mp_cuda_accumulate_f32(float *dst, const float *src, int64_t n, cudaStream_t s) {
    MP_LAUNCH_1D(accumulate_kernel<float>, n, dst, src);
}
extern "C" void mp_cuda_scale_f32(float *x, float a, int64_t n, cudaStream_t s) {
    MP_LAUNCH_1D(scale_kernel<float>, n, x, a);
}
extern "C" void mp_cuda_scale_bf16(mp_bf16 *x, float a, int64_t n, cudaStream_t s) {
    MP_LAUNCH_1D(scale_kernel<mp_bf16>, n, x, a);
}
