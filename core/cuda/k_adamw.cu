/*
 * core/cuda/k_adamw.cu — AdamW on fp32 master weights and fp32 moments, writing the bf16 copy of the
 * updated weights (what the forward's gathers read) in the same pass.
 *
 * Design: one grid-stride loop over the n elements of a (local FSDP shard of a) tensor; each thread
 * reads p, g, m, v once and writes p, m, v and optionally the bf16 p once: 20 bytes read, 14 written
 * per element, memory-bound. The arithmetic is adamw_elem, the same expression, in the same order, as
 * core/backend_cpu.c's adamw_range (PyTorch AdamW; bias corrections bc1 = 1/(1 - beta1^step),
 * bc2 = 1/(1 - beta2^step) computed on the host in double and passed as floats, as on the CPU). nvcc
 * may contract a*b+c into FMAs, so results can differ from the CPU's in the last bit; within a GPU run
 * they are bitwise repeatable (elementwise, no reduction).
 *
 * The gradient scale is grad_scale (a host value, what the backend table passes) times, when
 * grad_scale_dev is not NULL, a factor read from DEVICE memory (mp_cuda_clip_scale writes it), once per
 * thread, so a device-computed clip factor needs no host round-trip. Weight decay: wd = 0 for tensors without decay
 * (core/optim.c passes it per slot).
 */
#include "core/cuda/k_common.cuh"

/* One element's update; returns the new p and updates *m, *v (host and device: hostcheck tests it). */
__host__ __device__ static inline float adamw_elem(float p, float g, float *m, float *v, float lr, float beta1,
                                                   float beta2, float eps, float wd, float bc1, float bc2,
                                                   float grad_scale) {
    const float gi = g * grad_scale;
    const float mi = beta1 * *m + (1.0f - beta1) * gi;
    const float vi = beta2 * *v + (1.0f - beta2) * gi * gi;
    *m = mi;
    *v = vi;
    return p - lr * ((mi * bc1) / (sqrtf(vi * bc2) + eps) + wd * p);
}

static __global__ void adamw_kernel(float *__restrict__ p, mp_bf16 *__restrict__ p_bf16, const float *__restrict__ g,
                                    float *__restrict__ m, float *__restrict__ v, int64_t n, float lr, float beta1,
                                    float beta2, float eps, float wd, float bc1, float bc2, float grad_scale,
                                    const float *__restrict__ grad_scale_dev) {
    const float gs = grad_scale_dev ? grad_scale * *grad_scale_dev : grad_scale;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float mi = m[i], vi = v[i];
        const float pi = adamw_elem(p[i], g[i], &mi, &vi, lr, beta1, beta2, eps, wd, bc1, bc2, gs);
        m[i] = mi;
        v[i] = vi;
        p[i] = pi;
        if (p_bf16) p_bf16[i] = mp_f2bf(pi);
    }
}

extern "C" void mp_cuda_adamw(float *p, mp_bf16 *p_bf16, const float *g, float *m, float *v, int64_t n, float lr,
                              float beta1, float beta2, float eps, float wd, int step, float grad_scale,
                              const float *grad_scale_dev, cudaStream_t s) {
    assert(n >= 0 && step >= 1);
    if (n == 0) return;
    assert(p && g && m && v);
    const float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, step)));
    const float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, step)));
    adamw_kernel<<<mp_grid_for(n, 256), 256, 0, s>>>(p, p_bf16, g, m, v, n, lr, beta1, beta2, eps, wd, bc1, bc2,
                                                      grad_scale, grad_scale_dev);
}
