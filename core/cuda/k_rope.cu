/*
 * core/cuda/k_rope.cu — rotary position embedding, HF rotate_half layout, forward and backward, in place.
 *
 * Layout (as core/backend_cpu.c's rope_apply): x is [B, T, H, hd]; within a head, element i and element
 * i + hd/2 form a pair (HF rotate_half), rotated by angle pos * inv_freq[i] with pos = pos0 + t:
 *   lo' = lo cos - hi sin,   hi' = hi cos + lo sin        (forward, +angle)
 * The backward applies the inverse rotation (sin negated): the gradient of an orthogonal map is its
 * transpose. cos/sin tables are [max_pos, hd/2] fp32 (mp_rope_tables), so no transcendental is
 * evaluated here and the GPU rotates by exactly the CPU's angles.
 *
 * Design: one thread per (token, head, pair), a grid-stride loop over B*T*H*(hd/2) pairs; each thread
 * reads its two bf16 elements and its cos/sin entries, rotates in fp32, writes two bf16. Pairs are
 * disjoint, so the in-place update has no races; no reductions.
 */
#include "core/cuda/k_common.cuh"

/* Rotates (lo, hi) by the angle whose cosine is c and sine is s*dir (dir = +1 forward, -1 backward). */
__host__ __device__ static inline void rope_rotate(float *lo, float *hi, float c, float s, float dir) {
    const float a = *lo, b = *hi, si = dir * s;
    *lo = a * c - b * si;
    *hi = b * c + a * si;
}

static __global__ void rope_kernel(mp_bf16 *__restrict__ x, const float *__restrict__ cos_t,
                                   const float *__restrict__ sin_t, int T, int H, int half, int pos0, int64_t npairs,
                                   float dir) {
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < npairs;
         p += (int64_t)gridDim.x * blockDim.x) {
        const int i = (int)(p % half);
        const int64_t head = p / half;               /* (b*T + t)*H + h */
        const int t = (int)((head / H) % T);
        const int64_t tab = (int64_t)(pos0 + t) * half + i;
        mp_bf16 *lo = x + head * (2 * (int64_t)half) + i, *hi = lo + half;
        float a = mp_bf2f(*lo), b = mp_bf2f(*hi);
        rope_rotate(&a, &b, cos_t[tab], sin_t[tab], dir);
        *lo = mp_f2bf(a);
        *hi = mp_f2bf(b);
    }
}

static void rope_launch(mp_bf16 *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0,
                        int max_pos, float dir, cudaStream_t s) {
    assert(B >= 0 && T >= 0 && H >= 0 && hd > 0 && hd % 2 == 0);
    assert(pos0 >= 0 && (int64_t)pos0 + T <= max_pos);
    const int64_t npairs = (int64_t)B * T * H * (hd / 2);
    if (npairs == 0) return;
    assert(x && cos_t && sin_t);
    rope_kernel<<<mp_grid_for(npairs, 256), 256, 0, s>>>(x, cos_t, sin_t, T, H, hd / 2, pos0, npairs, dir);
}

extern "C" void mp_cuda_rope_fwd(mp_bf16 *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                                 int pos0, int max_pos, cudaStream_t s) {
    rope_launch(x, cos_t, sin_t, B, T, H, hd, pos0, max_pos, 1.0f, s);
}

extern "C" void mp_cuda_rope_bwd(mp_bf16 *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                                 int pos0, int max_pos, cudaStream_t s) {
    rope_launch(dx, cos_t, sin_t, B, T, H, hd, pos0, max_pos, -1.0f, s);
}
