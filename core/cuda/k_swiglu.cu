/*
 * core/cuda/k_swiglu.cu — SwiGLU: out = silu(gate) * up, and its backward.
 *
 * Design: elementwise grid-stride loops over n = N * intermediate (the local TP shard), bf16 in and
 * out, math in fp32 (expf, not __expf: the fast intrinsic loses accuracy for large |x|). The backward
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

static __global__ void swiglu_fwd_kernel(mp_bf16 *out, const mp_bf16 *gate, const mp_bf16 *up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        out[i] = mp_f2bf(swiglu_f(mp_bf2f(gate[i]), mp_bf2f(up[i])));
}

static __global__ void swiglu_bwd_kernel(mp_bf16 *dgate, mp_bf16 *dup, const mp_bf16 *dout, const mp_bf16 *gate,
                                         const mp_bf16 *up, int64_t n) {
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float dg, du;
        swiglu_grad(mp_bf2f(dout[i]), mp_bf2f(gate[i]), mp_bf2f(up[i]), &dg, &du);
        dgate[i] = mp_f2bf(dg);
        dup[i] = mp_f2bf(du);
    }
}

extern "C" void mp_cuda_swiglu_fwd(mp_bf16 *out, const mp_bf16 *gate, const mp_bf16 *up, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(out && gate && up);
    swiglu_fwd_kernel<<<mp_grid_for(n, 256), 256, 0, s>>>(out, gate, up, n);
}

extern "C" void mp_cuda_swiglu_bwd(mp_bf16 *dgate, mp_bf16 *dup, const mp_bf16 *dout, const mp_bf16 *gate,
                                   const mp_bf16 *up, int64_t n, cudaStream_t s) {
    assert(n >= 0);
    if (n == 0) return;
    assert(dgate && dup && dout && gate && up && dgate != dup);
    swiglu_bwd_kernel<<<mp_grid_for(n, 256), 256, 0, s>>>(dgate, dup, dout, gate, up, n);
}
