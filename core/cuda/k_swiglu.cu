/*
 * core/cuda/k_swiglu.cu — SwiGLU: out = silu(gate) * up, and its backward.
 *
 * Design: elementwise grid-stride loops over n = N * intermediate (the local TP shard), bf16 in and
 * out, math in fp32. When every pointer is 16-byte aligned a thread takes chunks of 8
 * elements, one 16-byte load per input and store per output (swiglu_*_at<8>), and the n % 8 tail
 * elements go one per thread (swiglu_*_at<1>; the partition is k_common.cuh's mp_vec_run); else every
 * element is a 2-byte access. The same fp32
 * expression per element either way, so both paths agree bit for bit (check_kernels_host replays
 * them on the host against each other and float64). Math (expf, not __expf: the fast intrinsic loses accuracy for large |x|). The backward
 * uses silu'(g) = s (1 + g (1 - s)) with s = sigmoid(g), as core/backend_cpu.c does. No reductions, so
 * nothing to make deterministic. Each thread reads an element's inputs before writing its outputs, so
 * outputs may alias their inputs elementwise (the pointers carry no __restrict__ for that reason).
 */
#include "core/cuda/k_common.cuh"

__host__ __device__ static inline float sigmoid_f(float x) { return 1.0f / (1.0f + expf(-x)); }

/* silu(g) * u */
__host__ __device__ static inline float swiglu_f(float g, float u) { return g * sigmoid_f(g) * u; }

/* d/dg and d/du of silu(g) * u, times the upstream gradient d. */
__host__ __device__ static inline void swiglu_grad(float d, float g, float u, float *dg, float *du) {
    const float s = sigmoid_f(g);
    *du = d * g * s;
    *dg = d * u * s * (1.0f + g * (1.0f - s));
}

/* Elements i0 .. i0+VEC-1: out = silu(gate) * up (all read before any is written). */
template <int VEC>
__host__ __device__ static inline void swiglu_fwd_at(mp_bf16 *out, const mp_bf16 *gate, const mp_bf16 *up, int64_t i0) {
    mp_bf16 g[VEC], u[VEC];
    if constexpr (VEC == 8) {
        mp_copy16(g, gate + i0), mp_copy16(u, up + i0);
    } else {
        for (int k = 0; k < VEC; k++) g[k] = gate[i0 + k], u[k] = up[i0 + k];
    }
    for (int k = 0; k < VEC; k++) g[k] = __float2bfloat16_rn(swiglu_f(__bfloat162float(g[k]), __bfloat162float(u[k])));
    if constexpr (VEC == 8) {
        mp_copy16(out + i0, g);
    } else {
        for (int k = 0; k < VEC; k++) out[i0 + k] = g[k];
    }
}

/* Elements i0 .. i0+VEC-1 of the backward (all inputs read before any output is written). */
template <int VEC>
__host__ __device__ static inline void swiglu_bwd_at(mp_bf16 *dgate, mp_bf16 *dup, const mp_bf16 *dout,
                                                     const mp_bf16 *gate, const mp_bf16 *up, int64_t i0) {
    mp_bf16 d[VEC], g[VEC], u[VEC];
    if constexpr (VEC == 8) {
        mp_copy16(d, dout + i0), mp_copy16(g, gate + i0), mp_copy16(u, up + i0);
    } else {
        for (int k = 0; k < VEC; k++) d[k] = dout[i0 + k], g[k] = gate[i0 + k], u[k] = up[i0 + k];
    }
    for (int k = 0; k < VEC; k++) {
        float dg, du;
        swiglu_grad(__bfloat162float(d[k]), __bfloat162float(g[k]), __bfloat162float(u[k]), &dg, &du);
        g[k] = __float2bfloat16_rn(dg);
        u[k] = __float2bfloat16_rn(du);
    }
    if constexpr (VEC == 8) {
        mp_copy16(dgate + i0, g), mp_copy16(dup + i0, u);
    } else {
        for (int k = 0; k < VEC; k++) dgate[i0 + k] = g[k], dup[i0 + k] = u[k];
    }
}

/* The launches' functors (k_common.cuh's mp_vec_run: chunks of 8, then the tail one per thread). */
struct swiglu_fwd_op {
    mp_bf16 *out;
    const mp_bf16 *gate, *up;
    template <int V>
    __host__ __device__ void at(int64_t i) const { swiglu_fwd_at<V>(out, gate, up, i); }
};
struct swiglu_bwd_op {
    mp_bf16 *dgate, *dup;
    const mp_bf16 *dout, *gate, *up;
    template <int V>
    __host__ __device__ void at(int64_t i) const { swiglu_bwd_at<V>(dgate, dup, dout, gate, up, i); }
};

extern "C" void mp_cuda_swiglu_fwd(mp_bf16 *out, const mp_bf16 *gate, const mp_bf16 *up, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(out && gate && up);
    mp_vec_launch<8>(n, mp_aligned16(out, gate, up), swiglu_fwd_op{out, gate, up}, s);
}

extern "C" void mp_cuda_swiglu_bwd(mp_bf16 *dgate, mp_bf16 *dup, const mp_bf16 *dout, const mp_bf16 *gate,
                                   const mp_bf16 *up, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(dgate && dup && dout && gate && up && dgate != dup);
    mp_vec_launch<8>(n, mp_aligned16(dgate, dup, dout, gate, up), swiglu_bwd_op{dgate, dup, dout, gate, up}, s);
}
