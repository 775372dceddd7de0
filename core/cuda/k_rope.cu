/*
 * core/cuda/k_rope.cu — rotary position embedding, HF rotate_half layout, forward and backward, in place.
 *
 * Layout (as core/backend_cpu.c's rope_apply): x is [B, T, H, hd] with row stride ld (elements from one
 * token's heads to the next's, ld >= H*hd: q and k are column blocks of the fused [q | k | v] rows,
 * layers/llama.c; the other columns are never touched); within a head, element i and element
 * i + hd/2 form a pair (HF rotate_half), rotated by angle pos * inv_freq[i] with pos = pos0 + t:
 *   lo' = lo cos - hi sin,   hi' = hi cos + lo sin        (forward, +angle)
 * The backward applies the inverse rotation (sin negated): the gradient of an orthogonal map is its
 * transpose. cos/sin tables are [max_pos, hd/2] fp32 (mp_rope_tables), so no transcendental is
 * evaluated here and the GPU rotates by exactly the CPU's angles.
 *
 * Design: a (token, head) x pair grid. A row is one (token, head) of x (R = B*T*H rows, R <
 * 2^31); a block holds rope_geom's by rows of bx threads; a thread rotates chunks of VEC consecutive pairs
 * of its row (chunk c, c + bx, ...). The only divisions are two 32-bit ones per thread for the token of its
 * row (the old grid-stride loop did four 64-bit ones per pair). VEC = 8 when hd/2 and ld are multiples of 8
 * and x and the tables are 16-byte aligned (so every row, and every head in it, is): a chunk is one 16-byte
 * load and store of lo, one of hi, and two
 * 16-byte loads each of cos and sin; else VEC = 1 (2-byte accesses). Pairs are disjoint, so the in-place
 * update has no races; no reductions. Every pair is rotated by the same fp32 expression in both paths
 * (rope_rotate), so VEC 8 and VEC 1 agree bit for bit; check_kernels_host replays the launch geometry and
 * rope_chunk on the host against a float64 rotation and the scalar path.
 */
#include "core/cuda/k_common.cuh"

/* Rotates (lo, hi) by the angle whose cosine is c and sine is s*dir (dir = +1 forward, -1 backward). */
__host__ __device__ static inline void rope_rotate(float *lo, float *hi, float c, float s, float dir) {
    const float a = *lo, b = *hi, si = dir * s;
    *lo = a * c - b * si;
    *hi = b * c + a * si;
}

/* The launch geometry for rows of `half` pairs in chunks of vec: *nchunks chunks per row, blocks of
 * *bx x *by threads (bx a power of two <= 256 covering the chunks when it can, bx * by = 256). */
__host__ __device__ static inline void rope_geom(int half, int vec, int *nchunks, int *bx, int *by) {
    *nchunks = (half + vec - 1) / vec;
    int x = 1;
    while (x < *nchunks && x < 256) x *= 2;
    *bx = x;
    *by = 256 / x;
}

/* Rotates chunk c (pairs c*VEC .. c*VEC+VEC-1, those < half) of row `row` = (token, head) of x (token
 * rows ld elements apart) in place. */
template <int VEC>
__host__ __device__ static inline void rope_chunk(mp_bf16 *x, const float *cos_t, const float *sin_t, unsigned row,
                                                  int c, int T, int H, int half, int pos0, int ld, float dir) {
    const unsigned tok = row / (unsigned)H, head = row - tok * (unsigned)H, t = tok % (unsigned)T;
    const int64_t tab = (int64_t)(pos0 + (int)t) * half + (int64_t)c * VEC;
    mp_bf16 *lo = x + (int64_t)tok * ld + (int64_t)head * (2 * half) + (int64_t)c * VEC, *hi = lo + half;
    if constexpr (VEC == 1) {
        float a = __bfloat162float(*lo), b = __bfloat162float(*hi);
        rope_rotate(&a, &b, cos_t[tab], sin_t[tab], dir);
        *lo = __float2bfloat16_rn(a);
        *hi = __float2bfloat16_rn(b);
    } else {
        static_assert(VEC % 8 == 0, "16-byte chunks: 8 bf16, 4 floats");
        mp_bf16 l[VEC], h[VEC];
        float cs[VEC], sn[VEC];
        for (int k = 0; k < VEC / 8; k++) mp_copy16(l + 8 * k, lo + 8 * k), mp_copy16(h + 8 * k, hi + 8 * k);
        for (int k = 0; k < VEC / 4; k++)
            mp_copy16(cs + 4 * k, cos_t + tab + 4 * k), mp_copy16(sn + 4 * k, sin_t + tab + 4 * k);
        for (int k = 0; k < VEC; k++) {
            float a = __bfloat162float(l[k]), b = __bfloat162float(h[k]);
            rope_rotate(&a, &b, cs[k], sn[k], dir);
            l[k] = __float2bfloat16_rn(a);
            h[k] = __float2bfloat16_rn(b);
        }
        for (int k = 0; k < VEC / 8; k++) mp_copy16(lo + 8 * k, l + 8 * k), mp_copy16(hi + 8 * k, h + 8 * k);
    }
}

template <int VEC>
static __global__ void rope_kernel(mp_bf16 *__restrict__ x, const float *__restrict__ cos_t,
                                   const float *__restrict__ sin_t, int T, int H, int half, int pos0, int ld,
                                   unsigned rows, int nchunks, float dir) {
    const unsigned row = blockIdx.x * blockDim.y + threadIdx.y;
    if (row >= rows) return;
    for (int c = threadIdx.x; c < nchunks; c += blockDim.x)
        rope_chunk<VEC>(x, cos_t, sin_t, row, c, T, H, half, pos0, ld, dir);
}

/* 8 when the 16-byte path applies to these pointers, this half and this row stride (every head of every
 * row then starts 16-byte aligned), else 1. */
static inline int rope_vec(const void *x, const float *cos_t, const float *sin_t, int half, int ld) {
    return half % 8 == 0 && ld % 8 == 0 && mp_aligned16(x, cos_t, sin_t) ? 8 : 1;
}

static void rope_launch(mp_bf16 *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0,
                        int max_pos, int ld, float dir, cudaStream_t s) {
    assert(B >= 0 && T >= 0 && H >= 0 && hd > 0 && hd % 2 == 0 && ld >= H * hd);
    assert(pos0 >= 0 && (int64_t)pos0 + T <= max_pos);
    const int64_t rows = (int64_t)B * T * H;
    if (rows == 0) return;
    assert(rows < ((int64_t)1 << 31) && x && cos_t && sin_t);
    const int half = hd / 2, vec = rope_vec(x, cos_t, sin_t, half, ld);
    int nchunks, bx, by;
    rope_geom(half, vec, &nchunks, &bx, &by);
    const dim3 block(bx, by), grid((unsigned)((rows + by - 1) / by));
    if (vec == 8)
        rope_kernel<8><<<grid, block, 0, s>>>(x, cos_t, sin_t, T, H, half, pos0, ld, (unsigned)rows, nchunks, dir);
    else
        rope_kernel<1><<<grid, block, 0, s>>>(x, cos_t, sin_t, T, H, half, pos0, ld, (unsigned)rows, nchunks, dir);
}

extern "C" void mp_cuda_rope_fwd(mp_bf16 *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                                 int pos0, int max_pos, int ld, cudaStream_t s) {
    rope_launch(x, cos_t, sin_t, B, T, H, hd, pos0, max_pos, ld, 1.0f, s);
}

extern "C" void mp_cuda_rope_bwd(mp_bf16 *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                                 int pos0, int max_pos, int ld, cudaStream_t s) {
    rope_launch(dx, cos_t, sin_t, B, T, H, hd, pos0, max_pos, ld, -1.0f, s);
}
