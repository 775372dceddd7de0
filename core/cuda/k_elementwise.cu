/*
 * core/cuda/k_elementwise.cu — the backend table's small elementwise ops (add, accumulate, scale) in
 * bf16 and fp32.
 *
 * Design: math in fp32 and one rounding to the storage type per output. When the pointers are 16-byte
 * aligned a thread handles chunks of 16 bytes per operand (8 bf16 or 4 fp32: one 128-bit load
 * or store each) and the n % VEC tail one element per thread (k_common.cuh's mp_vec_run); else one
 * element per access. The same fp32 arithmetic per element either way, so both paths agree bit for bit
 * (check_kernels_host replays them). Elementwise, so there is nothing to make deterministic. add allows
 * out to alias a or b (a chunk is read whole before it is written by the same thread), so its pointers
 * carry no __restrict__.
 *
 * bias_add (Qwen2's q/k/v biases) is the same launch over the N x cols block of a wider row, walked as
 * one flat range of N cols elements: element i is column i % cols of row i / cols. With cols and ldx
 * multiples of 8 (and x, b 16-byte aligned) a chunk of 8 never straddles two rows, so the 16-byte path
 * applies as for add; the sum float(x) + float(b), rounded once, is core/backend_cpu_bf16.c's.
 */
#include "core/cuda/k_common.cuh"

template <typename T>
struct add_op {   /* out = a + b */
    T *out;
    const T *a, *b;
    template <int V>
    __host__ __device__ void at(int64_t i) const {
        float x[V], y[V];
        mp_ld_vec<V>(x, a + i), mp_ld_vec<V>(y, b + i);
        for (int k = 0; k < V; k++) x[k] = x[k] + y[k];
        mp_st_vec<V>(out + i, x);
    }
};

template <typename T>
struct scale_op {   /* x *= alpha (dst += src when src: accumulate) */
    T *x;
    const T *src;
    float alpha;
    template <int V>
    __host__ __device__ void at(int64_t i) const {
        float v[V], w[V];
        mp_ld_vec<V>(v, x + i);
        if (src) {
            mp_ld_vec<V>(w, src + i);
            for (int k = 0; k < V; k++) v[k] = v[k] + w[k];
        } else {
            for (int k = 0; k < V; k++) v[k] = v[k] * alpha;
        }
        mp_st_vec<V>(x + i, v);
    }
};

struct bias_add_op {   /* x[n, j] += b[j]; flat element i of the block is (i / cols, i % cols) */
    mp_bf16 *x;
    const mp_bf16 *b;
    int64_t ldx;
    int64_t cols;
    template <int V>
    __host__ __device__ void at(int64_t i) const {
        const int64_t n = i / cols, j = i - n * cols;
        float v[V], c[V];
        mp_ld_vec<V>(v, x + n * ldx + j), mp_ld_vec<V>(c, b + j);
        for (int k = 0; k < V; k++) v[k] = v[k] + c[k];
        mp_st_vec<V>(x + n * ldx + j, v);
    }
};

#define MP_VEC_OF(T) ((int)(16 / sizeof(T)))

extern "C" void mp_cuda_add_bf16(mp_bf16 *out, const mp_bf16 *a, const mp_bf16 *b, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    mp_vec_launch<8>(n, mp_aligned16(out, a, b), add_op<mp_bf16>{out, a, b}, s);
}
extern "C" void mp_cuda_add_f32(float *out, const float *a, const float *b, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    mp_vec_launch<4>(n, mp_aligned16(out, a, b), add_op<float>{out, a, b}, s);
}
extern "C" void mp_cuda_accumulate_bf16(mp_bf16 *dst, const mp_bf16 *src, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    mp_vec_launch<8>(n, mp_aligned16(dst, src), scale_op<mp_bf16>{dst, src, 1.0f}, s);
}
extern "C" void mp_cuda_accumulate_f32(float *dst, const float *src, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    mp_vec_launch<4>(n, mp_aligned16(dst, src), scale_op<float>{dst, src, 1.0f}, s);
}
extern "C" void mp_cuda_scale_f32(float *x, float a, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    mp_vec_launch<4>(n, mp_aligned16(x), scale_op<float>{x, NULL, a}, s);
}
extern "C" void mp_cuda_scale_bf16(mp_bf16 *x, float a, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    mp_vec_launch<8>(n, mp_aligned16(x), scale_op<mp_bf16>{x, NULL, a}, s);
}
extern "C" void mp_cuda_bias_add(mp_bf16 *x, int ldx, const mp_bf16 *b, int N, int cols, cudaStream_t s) {
    assert(N >= 0 && cols >= 0 && ldx >= cols);
    if (N == 0 || cols == 0) return;
    assert(x && b);
    const int v16 = cols % 8 == 0 && ldx % 8 == 0 && mp_aligned16(x, b);   /* chunks of 8 within a row */
    mp_vec_launch<8>((int64_t)N * cols, v16, bias_add_op{x, b, ldx, cols}, s);
}
