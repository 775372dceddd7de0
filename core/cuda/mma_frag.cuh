/*
 * core/cuda/mma_frag.cuh — which matrix element each lane's register holds for mma.sync.m16n8k16 with bf16
 * A/B and f32 C/D: the one table the host replay of the tensor-core attention (k_attn_mma.cuh's fa_mma on
 * the host) scatters and gathers by, and the device probe (tests/cuda/mma_probe.cu) compares the hardware
 * with.
 *
 * Transcribed from CUTLASS's CuTe traits, not from the PTX ISA prose, so that the test that checks it
 * against the ISA's formulas (tests/cuda/check_kernels_host.cu, check_mma_table) compares two independent
 * transcriptions: include/cute/atom/mma_traits_sm80.hpp, MMA_Traits<SM80_16x8x16_F32BF16BF16F32_TN>:
 *   ALayout = ((4,8),(2,2,2)) : ((32,1),(16,8,128))   (thread, value) -> M16 x K16, column-major (m + 16 k)
 *   BLayout = ((4,8),(2,2))   : ((16,1),(8,64))       (thread, value) -> N8 x K16,  column-major (n + 8 k)
 *   CLayout = ((4,8),(2,2))   : ((32,1),(16,8))       (thread, value) -> M16 x N8,  column-major (m + 16 n)
 * Thread t = t0 + 4 t1 (t0 < 4: a shape (4,8) is t0 fastest), value v = v0 + 2 v1 + 4 v2. For A and B the
 * values are the bf16 halves in register order: value v is register v / 2, half v % 2 (0 = the low 16
 * bits, the lower-indexed element of a bf16x2 pair, as `mov.b32 %r, {%lo, %hi}` and little-endian memory
 * put it); for C/D value v is float register v.
 */
#ifndef MP_MMA_FRAG_CUH
#define MP_MMA_FRAG_CUH

/* A CuTe layout ((4,8),(2,2[,2])) : ((ts0,ts1),(vs0,vs1[,vs2])) of a matrix with leading dimension ld. */
struct mp_mma_layout {
    int ts0, ts1, vs0, vs1, vs2, ld;
};
#define MP_MMA_A_LAYOUT {32, 1, 16, 8, 128, 16}
#define MP_MMA_B_LAYOUT {16, 1, 8, 64, 0, 8}
#define MP_MMA_C_LAYOUT {32, 1, 16, 8, 0, 16}

/* The flat column-major index of value v of lane `lane` in layout L. */
__host__ __device__ static inline int mp_mma_index(mp_mma_layout L, int lane, int v) {
    return (lane & 3) * L.ts0 + (lane >> 2) * L.ts1 + (v & 1) * L.vs0 + ((v >> 1) & 1) * L.vs1 + ((v >> 2) & 1) * L.vs2;
}

/* A (16 x 16, row x k): register r (0..3), half h of lane `lane` holds A[*row][*col]. */
__host__ __device__ static inline void mp_mma_a_pos(int lane, int r, int h, int *row, int *col) {
    const mp_mma_layout L = MP_MMA_A_LAYOUT;
    const int i = mp_mma_index(L, lane, 2 * r + h);
    *row = i % L.ld, *col = i / L.ld;
}

/* B (16 x 8, k x n): register r (0..1), half h of lane `lane` holds B[*k][*n]. */
__host__ __device__ static inline void mp_mma_b_pos(int lane, int r, int h, int *k, int *n) {
    const mp_mma_layout L = MP_MMA_B_LAYOUT;
    const int i = mp_mma_index(L, lane, 2 * r + h);
    *n = i % L.ld, *k = i / L.ld;
}

/* C and D (16 x 8, row x n): float register e (0..3) of lane `lane` holds C[*row][*col]. */
__host__ __device__ static inline void mp_mma_c_pos(int lane, int e, int *row, int *col) {
    const mp_mma_layout L = MP_MMA_C_LAYOUT;
    const int i = mp_mma_index(L, lane, e);
    *row = i % L.ld, *col = i / L.ld;
}

#endif
