/*
 * core/cuda/k_adamw.cu — AdamW on fp32 master weights and fp32 moments, writing the bf16 copy of the
 * updated weights (what the forward's gathers read) in the same pass.
 *
 * Design: one grid-stride loop over the n elements of a (local FSDP shard of a) tensor; each element's
 * p, g, m, v are read once and p, m, v and optionally the bf16 p written once: 16 bytes read, 14
 * written per element, memory-bound. When every pointer is 16-byte aligned a thread takes
 * chunks of 8 elements with 16-byte accesses and the n % 8 tail goes one element per thread
 * (k_common.cuh's mp_vec_launch / mp_vec_run), else every access is one element; the same expression
 * per element either way, so both paths agree bit for bit (check_kernels_host replays both). The arithmetic is adamw_elem, the same expression, in the same order, as
 * core/backend_cpu.c's adamw_range (PyTorch AdamW; bias corrections bc1 = 1/(1 - beta1^step),
 * bc2 = 1/(1 - beta2^step) computed on the host in double and passed as floats, as on the CPU). nvcc
 * may contract a*b+c into FMAs, so results can differ from the CPU's in the last bit; within a GPU run
 * they are bitwise repeatable (elementwise, no reduction).
 *
 * The gradient scale is grad_scale (a host value, what the backend table passes) times, when
 * grad_scale_dev is not NULL, a factor read from DEVICE memory (mp_cuda_clip_scale writes it), once per
 * chunk, so a device-computed clip factor needs no host round-trip. Weight decay: wd = 0 for tensors without decay
 * (core/optim.c passes it per slot).
 */
#include "core/cuda/k_common.cuh"

/* One element's update; returns the new p and updates *m, *v (host and device: check_kernels_host tests it). Every
 * rounding is spelled out (fmaf, mp_mul_rn, mp_add_rn): with plain operators nvcc contracted the 16-byte
 * and the one-element paths differently, and their bits differed on the H200 (2026-12-04). The same
 * expression as the CPU's up to those contractions (the CPU may differ in the last bit, as before). */
__host__ __device__ static inline float adamw_elem(float p, float g, float *m, float *v, float lr, float beta1,
                                                   float beta2, float eps, float wd, float bc1, float bc2,
                                                   float grad_scale) {
    const float gi = mp_mul_rn(g, grad_scale);
    const float mi = fmaf(beta1, *m, mp_mul_rn(1.0f - beta1, gi));
    const float vi = fmaf(beta2, *v, mp_mul_rn(mp_mul_rn(1.0f - beta2, gi), gi));
    *m = mi;
    *v = vi;
    const float upd = mp_mul_rn(mi, bc1) / mp_add_rn(sqrtf(mp_mul_rn(vi, bc2)), eps);
    return fmaf(-lr, fmaf(wd, p, upd), p);
}

/* Elements i .. i+VEC-1 (VEC 8: two 16-byte accesses per fp32 tensor, one for the bf16 copy; the
 * launch's functor, k_common.cuh's mp_vec_run: chunks of 8, then the n % 8 tail one per thread). */
struct adamw_op {
    float *p;
    mp_bf16 *p_bf16;
    const float *g;
    float *m, *v;
    float lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale;
    const float *grad_scale_dev;
    template <int VEC>
    __host__ __device__ void at(int64_t i) const {
        const float gs = grad_scale_dev ? mp_mul_rn(grad_scale, *grad_scale_dev) : grad_scale;
        float pv[VEC], gv[VEC], mv[VEC], vv[VEC];
        mp_ld_vec<VEC>(pv, p + i);
        mp_ld_vec<VEC>(gv, g + i);
        mp_ld_vec<VEC>(mv, m + i);
        mp_ld_vec<VEC>(vv, v + i);
        for (int k = 0; k < VEC; k++) pv[k] = adamw_elem(pv[k], gv[k], &mv[k], &vv[k], lr, beta1, beta2, eps, wd, bc1, bc2, gs);
        mp_st_vec<VEC>(m + i, mv);
        mp_st_vec<VEC>(v + i, vv);
        mp_st_vec<VEC>(p + i, pv);
        if (p_bf16) mp_st_vec<VEC>(p_bf16 + i, pv);
    }
};

extern "C" void mp_cuda_adamw(float *p, mp_bf16 *p_bf16, const float *g, float *m, float *v, int64_t n, float lr,
                              float beta1, float beta2, float eps, float wd, int step, float grad_scale,
                              const float *grad_scale_dev, cudaStream_t s) {
    assert(n >= 0 && step >= 1);
    if (n == 0) return;
    assert(p && g && m && v);
    const float bc1 = (float)(1.0 / (1.0 - pow((double)beta1, step)));
    const float bc2 = (float)(1.0 / (1.0 - pow((double)beta2, step)));
    const adamw_op op = {p, p_bf16, g, m, v, lr, beta1, beta2, eps, wd, bc1, bc2, grad_scale, grad_scale_dev};
    mp_vec_launch<8>(n, mp_aligned16(p, p_bf16, g, m, v), op, s);
}
