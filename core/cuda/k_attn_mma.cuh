/*
 * core/cuda/k_attn_mma.cuh — the per-warp tile logic of the tensor-core flash attention (k_attn_mma.cu),
 * written once for the device and for its host replay (tests/cuda/check_kernels_host.cu).
 *
 * Why a shared header: the kernel's correctness rests on the mma.sync fragment layouts, the masks, the
 * online softmax and the quad shuffles; none can run here (no GPU). So every function below is
 * `__host__ __device__` and templated on NL, the lanes one call handles: on the device NL = 1 (a thread
 * is its lane, lane0 = threadIdx.x % 32), in the host replay NL = 32 (one call is the whole warp,
 * lane0 = 0, lane li is lane0 + li). Per-lane state is an array [NL][...]; the two warp-collective steps
 * take the whole array, and they and the pair accesses are all that differs between device and host:
 *   fa_mma       mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 on the device; on the host the
 *                32 lanes' fragments are scattered into 16x16 A, 16x8 B, 16x8 C matrices by the one
 *                fragment table (mma_frag.cuh: CuTe's layouts, tested against the PTX ISA's "Matrix
 *                Fragments for mma.m16n8k16 with floating point type" formulas), multiplied in double,
 *                and gathered back;
 *   fa_quad_reduce  the xor-1 then xor-2 butterfly over the four lanes of a row (shfl on the device,
 *                the same pairings and operand order on the host: bitwise the same tree);
 *   fa_ld32, fa_st32  one 32-bit access to a bf16 pair per lane (memcpy on the host);
 *   fa_ld16, fa_st16  one 16-byte access (8 bf16) of the tile loaders (mp_copy16: memcpy on the host).
 *                Everything else, the tile code below, is the same source for both.
 * Fragment layouts (PTX ISA, mma.m16n8k16, .bf16 A/B, .f32 C/D), g = lane >> 2, c = lane & 3:
 *   A 16x16 row-major, 4 regs of bf16x2: reg r holds row g + 8 (r & 1), cols 2c + 8 (r >> 1) + {0, 1};
 *   B 16x8 (k x n), 2 regs of bf16x2: reg r holds rows (k) 2c + 8 r + {0, 1}, col (n) g;
 *   C 16x8 fp32, 4 floats: element e is row g + 8 (e >> 1), col 2c + (e & 1);
 *   the lower-indexed element of a bf16x2 pair sits in the low 16 bits (little-endian memory order).
 * So a C fragment pair of n-tiles (2j, 2j+1) is, packed to bf16, the A fragment of k-step j (the
 * FlashAttention-2 register reuse of P): no shuffle between QK^T and PV.
 *
 * Forward tiling: a block of FA_WARPS = 4 warps owns FA_BQ = 64 query rows (16 per warp: one m16 tile),
 * walks key tiles of FA_BK = 64 (tile-aligned with the query tile, so every tile a warp processes holds
 * key k0 <= each of its rows: the running max is finite after the first tile). Per key tile the block
 * copies K [64][HD+8] and V transposed, Vt [HD][64+8], into shared memory as bf16 (the +8 pad puts the
 * eight g-rows a fragment load touches in distinct banks: row stride 4 words mod 32), through registers
 * with 16-byte global accesses and conflict-free stores (fa_fetch_rows / fa_put_rows). Per warp:
 *   S = Q K^T (Q fragments in registers, K fragments from Ks), scaled by scale log2(e) (base 2), masked
 *   (key > row: -inf; only on the diagonal tile);
 *   m' = max(m, quad max of the row), alpha = exp2(m - m'), p = exp2(s - m'), l = alpha l + lane's p sum;
 *   O = alpha O + P V (P: the bf16 A fragments above; V fragments from Vt).
 * Sliding window (window > 0): keys left of a row's window are masked like those past the diagonal
 * (mp_cu_attn_first_key), and a row with no key in a tile keeps m = -inf, l = 0, O = 0 through it (the
 * exponent's reference is then 0, not -inf: no NaN); the driver starts at the tile holding the block's
 * first row's first key. Window 0 is the causal computation, operation for operation.
 * At the end l is quad-summed, out = O / l (bf16), lse = m ln 2 + log l (natural log, the contract). All
 * in fp32 except the mma inputs (bf16, as the activations are stored). Every sum has one fixed order:
 * deterministic.
 */
#ifndef MP_K_ATTN_MMA_CUH
#define MP_K_ATTN_MMA_CUH

#include "core/cuda/k_common.cuh"
#include "core/cuda/mma_frag.cuh"

#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * MP_WARP)
#define FA_BQ (16 * FA_WARPS) /* query rows per block */
#define FA_BK 64              /* keys per tile */
#define FA_VPAD (FA_BK + 8)
/* The softmax runs in base 2: exp(x) = exp2(x log2(e)), with log2(e) folded into the score scale (one
 * multiply per score, and exp2f is the bare MUFU.EX2 where expf adds a range reduction); lse, stored and
 * read, stays the natural log of the contract (core/backend.h). */
#define FA_LOG2E 1.4426950408889634f
#define FA_LN2 0.6931471805599453f

/* A key tile in shared memory: K row-major, V transposed, both padded (see the top comment); aligned for
 * the 4-byte fragment loads (a bf16 struct alone would only be 2-byte aligned). */
template <int HD>
struct alignas(16) fa_smem {
    mp_bf16 K[FA_BK][HD + 8];
    mp_bf16 Vt[HD][FA_VPAD];
};

/* A warp's running state of the forward: Q fragments, the output accumulator, row max and lane sum. */
template <int HD, int NL>
struct fa_fwd_state {
    uint32_t qf[NL][HD / 16][4];
    float o[NL][HD / 8][4];
    float m[NL][2], l[NL][2];
};

/* Host replay only (a host variable, read in the host branches alone): when set, called with the address
 * and size of every store through fa_st32 and fa_st16 (the tile loaders' shared-memory stores among them),
 * so check_kernels_host can see which lane wrote what, once each, and count the bank conflicts of each
 * warp-wide store. NULL: nothing is logged. */
static void (*fa_host_store_log)(const void *p, int bytes) = NULL;

/* The 32-bit word holding p[0] (low half) and p[1] (high half); p 4-byte aligned. */
__host__ __device__ static inline uint32_t fa_ld32(const mp_bf16 *p) {
#ifdef __CUDA_ARCH__
    return *(const uint32_t *)p;
#else
    uint32_t u;
    memcpy(&u, p, 4);
    return u;
#endif
}

/* (lo, hi) rounded to bf16 and packed as a bf16x2 register (lo in the low half). */
__host__ __device__ static inline uint32_t fa_pack(float lo, float hi) {
    mp_bf16 t[2] = {__float2bfloat16_rn(lo), __float2bfloat16_rn(hi)};
    uint32_t u;
    memcpy(&u, t, 4);
    return u;
}

/* Stores the word u at p: p[0] gets its low half, p[1] its high half; p 4-byte aligned. On the device one
 * 32-bit store, never a memcpy: nvcc 13.0's ptxas compiles a memcpy of two bf16 to global memory into
 * byte stores whose low byte it CONVERTS (F2I.U8.F16.TRUNC: the bf16 bits read as an f16 number, truncated
 * to 0..255) instead of storing it. That was the first H200 run's "tensor-core attention wrong": every
 * bf16 output lost its low byte (docs/CUDA.md; tests/cuda_sass.sh keeps such instructions out). */
__host__ __device__ static inline void fa_st32(mp_bf16 *p, uint32_t u) {
#ifdef __CUDA_ARCH__
    *(uint32_t *)p = u;
#else
    if (fa_host_store_log) fa_host_store_log(p, 4);
    memcpy((void *)p, &u, 4);
#endif
}

/* Stores the pair (lo, hi) rounded to bf16 at p[0], p[1] (p 4-byte aligned). */
__host__ __device__ static inline void fa_st_pair(mp_bf16 *p, float lo, float hi) { fa_st32(p, fa_pack(lo, hi)); }

/* The float in half `hi` of a bf16x2 word (host replay). */
static inline float fa_half(uint32_t u, int hi) {
    const uint16_t bits = (uint16_t)(hi ? u >> 16 : u & 0xffff);
    uint32_t f = (uint32_t)bits << 16;
    float x;
    memcpy(&x, &f, 4);
    return x;
}

/* D = A B + C for one m16n8k16 tile, in place on C. Lane li's fragments are c + li*cs (4 floats),
 * a + li*as (4 words), b + li*bs (2 words). Device: the instruction (NL = 1). Host (NL = 32): the
 * fragments scattered by the PTX layouts, the product in double, rounded once to float per element. */
template <int NL>
__host__ __device__ static inline void fa_mma(float *c, int cs, const uint32_t *a, int as, const uint32_t *b, int bs) {
#ifdef __CUDA_ARCH__
    (void)cs, (void)as, (void)bs;
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
#else
    static_assert(NL == MP_WARP, "the host replay runs a whole warp");
    float A[16][16], Bm[16][8];
    double C[16][8];
    int i, j;
    for (int lane = 0; lane < MP_WARP; lane++) {   /* ownership from the one table (mma_frag.cuh) */
        for (int r = 0; r < 4; r++)
            for (int h = 0; h < 2; h++) mp_mma_a_pos(lane, r, h, &i, &j), A[i][j] = fa_half(a[lane * as + r], h);
        for (int r = 0; r < 2; r++)
            for (int h = 0; h < 2; h++) mp_mma_b_pos(lane, r, h, &i, &j), Bm[i][j] = fa_half(b[lane * bs + r], h);
        for (int e = 0; e < 4; e++) mp_mma_c_pos(lane, e, &i, &j), C[i][j] = c[lane * cs + e];
    }
    for (i = 0; i < 16; i++)
        for (j = 0; j < 8; j++)
            for (int kk = 0; kk < 16; kk++) C[i][j] += (double)A[i][kk] * Bm[kk][j];
    for (int lane = 0; lane < MP_WARP; lane++)
        for (int e = 0; e < 4; e++) mp_mma_c_pos(lane, e, &i, &j), c[lane * cs + e] = (float)C[i][j];
#endif
}

/* The xor-1 then xor-2 butterfly over each quad of lanes on n floats per lane (v + li*vs), with max
 * (is_max) or +. Each step combines (own, partner): both partners get the same bits. */
template <int NL>
__host__ __device__ static inline void fa_quad_reduce(float *v, int vs, int n, bool is_max) {
#ifdef __CUDA_ARCH__
    (void)vs;
    for (int i = 0; i < n; i++)
        for (int x = 1; x <= 2; x <<= 1) {
            const float o = __shfl_xor_sync(MP_FULL_MASK, v[i], x);
            v[i] = is_max ? fmaxf(v[i], o) : v[i] + o;
        }
#else
    static_assert(NL == MP_WARP, "the host replay runs a whole warp");
    for (int i = 0; i < n; i++)
        for (int x = 1; x <= 2; x <<= 1) {
            float old[MP_WARP];
            for (int lane = 0; lane < MP_WARP; lane++) old[lane] = v[lane * vs + i];
            for (int lane = 0; lane < MP_WARP; lane++)
                v[lane * vs + i] = is_max ? fmaxf(old[lane], old[lane ^ x]) : old[lane] + old[lane ^ x];
        }
#endif
}

/* The 16 bytes (8 bf16) at p as a uint4, and the store back; p 16-byte aligned (one 128-bit access on the
 * device, a memcpy on the host: mp_copy16). */
__host__ __device__ static inline uint4 fa_ld16(const mp_bf16 *p) {
    uint4 u;
    mp_copy16(&u, p);
    return u;
}
__host__ __device__ static inline void fa_st16(mp_bf16 *p, uint4 u) {
#ifndef __CUDA_ARCH__
    if (fa_host_store_log) fa_host_store_log(p, 16);
#endif
    mp_copy16(p, &u);
}

/* The row strides (elements) the tile loaders take: multiples of 8 (16-byte chunks stay aligned, as every
 * head starts a multiple of HD in), below 2^23 (fa_ld_chunk's 32-bit offsets: 64 rows of them). */
__host__ __device__ static inline bool fa_strides_ok(int ldq, int ldkv) {
    return ldq % 8 == 0 && ldkv % 8 == 0 && ldq > 0 && ldkv > 0 && ldq < (1 << 23) && ldkv < (1 << 23);
}

/* Row r0 + rr of the tile xt (row r0 of the head: xt = x + (b T + r0) ld + head HD, token rows ld elements
 * apart), columns 8c .. 8c+7, as a uint4; zeros past T. The offset within the tile is a 32-bit int: rr < 64
 * and ld < 2^23 (the launchers assert it) keep it below 2^29. What the compiler hoists out of a tile loop
 * is then one register a chunk, not two (it kept the prefetching kernels from spilling). */
template <int HD>
__host__ __device__ static inline uint4 fa_ld_chunk(const mp_bf16 *xt, int ld, int T, int r0, int rr, int c) {
    return r0 + rr < T ? fa_ld16(xt + (rr * ld + 8 * c)) : make_uint4(0u, 0u, 0u, 0u);
}

/* Thread tid's (of FA_THREADS) share of a tile of rows r0 .. r0+ROWS-1 of head `head` of x [B,T,heads,HD]
 * (token rows ld elements apart: ld = heads HD dense, or the fused [q | k | v] row), in registers:
 * fa_fetch_rows reads it from global memory, fa_put_rows writes it to shared memory. Split
 * so that all of a block's global loads for a tile are issued before the first store waits on one (one
 * memory latency per tile, not one per loop trip), and so that a driver may fetch the next tile before it
 * computes on the current one. TR: the tile goes (also) transposed, as row pairs (see fa_put_rows). Every
 * global access is 16 bytes (a chunk: 8 columns 8c .. 8c+7 of a row; x 16-byte aligned and ld % 8 == 0,
 * see mp_cuda_attn_mma_ok), zeros past T; trip counts are compile-time, indices divide by powers of two. */
template <int HD, int ROWS, bool TR>
struct fa_stage {
    static constexpr int CH = HD / 8, NP = ROWS / 2;
    static constexpr int N = TR ? 2 * NP * CH / FA_THREADS : ROWS * CH / FA_THREADS;   /* uint4 per thread */
    static_assert(NP == 16 || NP == 32, "row pairs: a half or a whole warp");
    static_assert(ROWS * CH % FA_THREADS == 0 && NP * CH % FA_THREADS == 0, "whole rounds of the block");
    uint4 u[N];
};

/* Fetch: !TR, u[k] is chunk i = tid + k FA_THREADS: row i / (HD/8), c = i % (HD/8). TR, item i =
 * tid + k FA_THREADS is the row pair (2j, 2j+1), j = i % (ROWS/2) (consecutive lanes, consecutive pairs),
 * of chunk c = i / (ROWS/2): u[2k] row 2j, u[2k+1] row 2j+1. Only items k of [K0, K1) when given (a
 * part of the tile, for kernels without the registers for all of it; fa_put_rows takes the same part). */
template <int HD, int ROWS, bool TR, int K0 = 0, int K1 = fa_stage<HD, ROWS, TR>::N / (TR ? 2 : 1)>
__host__ __device__ static inline void fa_fetch_rows(fa_stage<HD, ROWS, TR> &st, const mp_bf16 *x, int b, int T,
                                                     int ld, int head, int r0, int tid) {
    using S = fa_stage<HD, ROWS, TR>;
    /* one int64 sum (head HD < 2^23 is an int): with `+ (int64_t)head * HD` apart, ptxas (13.0, sm_90) spilled
     * 8 bytes in the hd-64 forward's tile loop, which this form does not */
    const mp_bf16 *xt = x + (((int64_t)b * T + r0) * ld + head * HD);
    if constexpr (!TR) {
        for (int k = K0; k < K1; k++) {
            const int i = tid + k * FA_THREADS;
            st.u[k] = fa_ld_chunk<HD>(xt, ld, T, r0, i / S::CH, i % S::CH);
        }
    } else {
        for (int k = K0; k < K1; k++) {
            const int i = tid + k * FA_THREADS, j = i % S::NP, c = i / S::NP;
            st.u[2 * k] = fa_ld_chunk<HD>(xt, ld, T, r0, 2 * j, c);
            st.u[2 * k + 1] = fa_ld_chunk<HD>(xt, ld, T, r0, 2 * j + 1, c);
        }
    }
}

/* Put: the fetched share into rm (row-major, row stride lr; !TR, or TR and rm not NULL) and tr (TR:
 * transposed, tr[d*lt + r]). The shared stores are conflict-free (check_kernels_host counts them):
 *   !TR: a quarter warp (the unit of a 16-byte store) writes 128 contiguous bytes.
 *   TR: a pair's two chunks give the 8 words (x[2j][d], x[2j+1][d]), d = 8c .. 8c+7, made with shifts and
 *     masks (integers only: no bf16 conversion, see fa_st32), each one 32-bit store to tr + d*lt + 2j.
 *     ROWS = 64: a warp's 32 lanes store 32 consecutive words. ROWS = 32 (lt = FB_PAD = 40, 20 words a
 *     row): lanes 16..31 hold the next chunk and store their words in the order d ^ 4, so the two half
 *     warps are (8 +- 4) * 20 = 240 or 80 words apart, 16 banks. With rm, the pair's two rows go there
 *     too, row 2j + ((j >> 2) & 1) first: the eight rows of a quarter warp's store then have distinct
 *     residues mod 8 (row stride HD + 8 elements = 4 banks mod 32). */
template <int HD, int ROWS, bool TR, int K0 = 0, int K1 = fa_stage<HD, ROWS, TR>::N / (TR ? 2 : 1)>
__host__ __device__ static inline void fa_put_rows(const fa_stage<HD, ROWS, TR> &st, mp_bf16 *rm, int lr, mp_bf16 *tr,
                                                   int lt, int tid) {
    using S = fa_stage<HD, ROWS, TR>;
    if constexpr (!TR) {
        (void)tr, (void)lt;
        for (int k = K0; k < K1; k++) {
            const int i = tid + k * FA_THREADS;
            fa_st16(rm + (i / S::CH) * lr + 8 * (i % S::CH), st.u[k]);
        }
    } else {
        const bool sw = S::NP == 16 && (tid & 16);   /* the upper half warp's store order: d ^ 4 */
        for (int k = K0; k < K1; k++) {
            const int i = tid + k * FA_THREADS, j = i % S::NP, c = i / S::NP;
            const uint4 ua = st.u[2 * k], ub = st.u[2 * k + 1];
            if (rm) {
                const bool odd = (j >> 2) & 1;
                fa_st16(rm + (2 * j + odd) * lr + 8 * c, odd ? ub : ua);
                fa_st16(rm + (2 * j + !odd) * lr + 8 * c, odd ? ua : ub);
            }
            const uint32_t a[4] = {ua.x, ua.y, ua.z, ua.w}, bb[4] = {ub.x, ub.y, ub.z, ub.w};
            uint32_t wd[8];   /* wd[2m + h]: column 8c + 2m + h of rows 2j (low half), 2j+1 (high half) */
            for (int m = 0; m < 4; m++) {
                wd[2 * m] = (a[m] & 0xffffu) | (bb[m] << 16);
                wd[2 * m + 1] = (a[m] >> 16) | (bb[m] & 0xffff0000u);
            }
            for (int e = 0; e < 8; e++) {
                const int d = sw ? e ^ 4 : e;
                fa_st32(tr + (8 * c + d) * lt + 2 * j, sw ? wd[e ^ 4] : wd[e]);
            }
        }
    }
}

/* Thread tid's share of rows r0 .. r0+ROWS-1 of head `head` of x (token rows ld apart) into rm and/or tr
 * (whichever is not NULL; tr NULL: row-major only), fetched and put at once (the probe's and
 * check_kernels_host's loads). */
template <int HD, int ROWS>
__host__ __device__ static inline void fa_load_rows(mp_bf16 *rm, int lr, mp_bf16 *tr, int lt, const mp_bf16 *x, int b,
                                                    int T, int ld, int head, int r0, int tid) {
    if (tr) {
        fa_stage<HD, ROWS, true> st;
        fa_fetch_rows(st, x, b, T, ld, head, r0, tid);
        fa_put_rows(st, rm, lr, tr, lt, tid);
    } else {
        fa_stage<HD, ROWS, false> st;
        fa_fetch_rows(st, x, b, T, ld, head, r0, tid);
        fa_put_rows(st, rm, lr, tr, lt, tid);
    }
}

/* A key tile in flight: its K and V rows (fa_stage types KS, VS: which go transposed). */
template <class KS, class VS>
struct fa_kv_pair {
    KS k;
    VS v;
};
/* The forward's: K row-major, V for its transpose. */
template <int HD>
using fa_kv_stage = fa_kv_pair<fa_stage<HD, FA_BK, false>, fa_stage<HD, FA_BK, true>>;

/* Thread tid's share of key tile k0 of kv head g (k, v token rows ldkv apart) into registers (zeros past
 * T), for either pass. */
template <class KS, class VS>
__host__ __device__ static inline void fa_fetch_kv(fa_kv_pair<KS, VS> &st, const mp_bf16 *k, const mp_bf16 *v, int b,
                                                   int T, int ldkv, int g, int k0, int tid) {
    fa_fetch_rows(st.k, k, b, T, ldkv, g, k0, tid);
    fa_fetch_rows(st.v, v, b, T, ldkv, g, k0, tid);
}

/* ... and from there into s: K row-major, V transposed. */
template <int HD>
__host__ __device__ static inline void fa_put_kv(fa_smem<HD> &s, const fa_kv_stage<HD> &st, int tid) {
    fa_put_rows(st.k, (mp_bf16 *)&s.K, HD + 8, NULL, 0, tid);
    fa_put_rows(st.v, NULL, 0, (mp_bf16 *)&s.Vt, FA_VPAD, tid);
}

/* Thread tid (of FA_THREADS) copies its share of key tile k0 of kv head g into s (zeros past T): the hd 128
 * forward's load, and the probe's. hd 64: K and V fetched together (8 loads in flight, 32 registers; the
 * hd 64 kernel itself prefetches through fa_fetch_kv / fa_put_kv); hd 128 would need 64 registers for
 * that, more than its kernel has spare (ptxas spills), so there the tile goes in four parts of 16. */
template <int HD>
__host__ __device__ static inline void fa_load_kv(fa_smem<HD> &s, const mp_bf16 *k, const mp_bf16 *v, int b, int T,
                                                  int ldkv, int g, int k0, int tid) {
    fa_kv_stage<HD> st;
    if constexpr (HD <= 64) {
        fa_fetch_kv(st, k, v, b, T, ldkv, g, k0, tid);
        fa_put_kv(s, st, tid);
    } else {
        constexpr int NK = fa_stage<HD, FA_BK, false>::N, NV = fa_stage<HD, FA_BK, true>::N / 2;
        fa_fetch_rows<HD, FA_BK, false, 0, NK / 2>(st.k, k, b, T, ldkv, g, k0, tid);
        fa_put_rows<HD, FA_BK, false, 0, NK / 2>(st.k, (mp_bf16 *)&s.K, HD + 8, NULL, 0, tid);
        fa_fetch_rows<HD, FA_BK, false, NK / 2, NK>(st.k, k, b, T, ldkv, g, k0, tid);
        fa_put_rows<HD, FA_BK, false, NK / 2, NK>(st.k, (mp_bf16 *)&s.K, HD + 8, NULL, 0, tid);
        fa_fetch_rows<HD, FA_BK, true, 0, NV / 2>(st.v, v, b, T, ldkv, g, k0, tid);
        fa_put_rows<HD, FA_BK, true, 0, NV / 2>(st.v, NULL, 0, (mp_bf16 *)&s.Vt, FA_VPAD, tid);
        fa_fetch_rows<HD, FA_BK, true, NV / 2, NV>(st.v, v, b, T, ldkv, g, k0, tid);
        fa_put_rows<HD, FA_BK, true, NV / 2, NV>(st.v, NULL, 0, (mp_bf16 *)&s.Vt, FA_VPAD, tid);
    }
}

/* The A fragments (16 rows x HD, PTX layout) of rows r0 .. r0+15 of head `head` of x [B,T,heads,HD] with
 * token rows ld elements apart (ld even: 4-byte pair loads), zeros past T, into f[li][k-step][reg]. */
template <int HD, int NL>
__host__ __device__ static inline void fa_load_afrag(uint32_t (*f)[HD / 16][4], const mp_bf16 *x, int b, int T,
                                                     int ld, int head, int r0, int lane0) {
    for (int li = 0; li < NL; li++) {
        const int lane = lane0 + li, g = lane >> 2, c = lane & 3;
        for (int ks = 0; ks < HD / 16; ks++)
            for (int r = 0; r < 4; r++) {
                const int row = r0 + g + 8 * (r & 1), col = 16 * ks + 2 * c + 8 * (r >> 1);
                f[li][ks][r] = row < T ? fa_ld32(x + ((int64_t)b * T + row) * ld + (int64_t)head * HD + col) : 0u;
            }
    }
}

/* C[nt] += sum over KS k-steps of A[ks] B(ks, nt) for NT n-tiles, B[k][n] = Bs[n*ldb + k] in shared
 * memory (n-major, k contiguous: pair loads). Lane li's C is C + li*cs ([NT][4]), its A is A + li*as
 * ([KS][4] words). */
template <int NL, int KS, int NT>
__host__ __device__ static inline void fa_mma_smem(float *C, int cs, const uint32_t *A, int as, const mp_bf16 *Bs,
                                                   int ldb, int lane0) {
    for (int ks = 0; ks < KS; ks++)
        for (int nt = 0; nt < NT; nt++) {
            uint32_t bf[NL][2];
            for (int li = 0; li < NL; li++) {
                const int lane = lane0 + li, g = lane >> 2, c = lane & 3;
                bf[li][0] = fa_ld32(Bs + (8 * nt + g) * ldb + 16 * ks + 2 * c);
                bf[li][1] = fa_ld32(Bs + (8 * nt + g) * ldb + 16 * ks + 8 + 2 * c);
            }
            fa_mma<NL>(C + 4 * nt, cs, A + 4 * ks, as, &bf[0][0], 2);
        }
}

/* The C fragments of NT n-tiles (one lane's [NT][4]) packed to bf16 as the A fragments of NT/2 k-steps:
 * n-tiles 2j, 2j+1 are k-step j (the PTX layouts line up: no data moves between lanes). */
template <int NT>
__host__ __device__ static inline void fa_c_to_a(uint32_t (*a)[4], const float (*C)[4]) {
    for (int j = 0; j < NT / 2; j++) {
        a[j][0] = fa_pack(C[2 * j][0], C[2 * j][1]);
        a[j][1] = fa_pack(C[2 * j][2], C[2 * j][3]);
        a[j][2] = fa_pack(C[2 * j + 1][0], C[2 * j + 1][1]);
        a[j][3] = fa_pack(C[2 * j + 1][2], C[2 * j + 1][3]);
    }
}

/* Loads the Q fragments of rows r0 .. r0+15 of head h (q's token rows ldq apart; zeros past T) and resets
 * the running state. */
template <int HD, int NL>
__host__ __device__ static inline void fa_fwd_init(fa_fwd_state<HD, NL> &st, const mp_bf16 *q, int b, int T, int ldq,
                                                   int h, int r0, int lane0) {
    fa_load_afrag<HD, NL>(st.qf, q, b, T, ldq, h, r0, lane0);
    for (int li = 0; li < NL; li++) {
        for (int nt = 0; nt < HD / 8; nt++)
            for (int e = 0; e < 4; e++) st.o[li][nt][e] = 0.0f;
        for (int rr = 0; rr < 2; rr++) st.m[li][rr] = -INFINITY, st.l[li][rr] = 0.0f;
    }
}

/* S scaled by sl2 (base-2 units) in place, keys past the row (key > row) or left of its window (key <
 * mp_cu_attn_first_key(row, window)) set to -inf when MASK, and each lane's row maxima into mx (-inf for
 * a row with no key of the tile). MASK = false only for a tile wholly below the diagonal and inside every
 * row's window (no key masked): the compare and select per score are then left out. */
template <int NL, bool MASK>
__host__ __device__ static inline void fa_scale_max(float (*S)[FA_BK / 8][4], float (*mx)[2], float sl2, int k0, int r0,
                                                    int window, int lane0) {
    for (int li = 0; li < NL; li++) {
        const int lane = lane0 + li, g = lane >> 2, c = lane & 3;
        for (int rr = 0; rr < 2; rr++) {
            const int row = r0 + g + 8 * rr, lo = mp_cu_attn_first_key(row, window);
            mx[li][rr] = -INFINITY;
            for (int nt = 0; nt < FA_BK / 8; nt++)
                for (int e = 0; e < 2; e++) {
                    const int key = k0 + 8 * nt + 2 * c + e;
                    const float x = !MASK || (key <= row && key >= lo) ? sl2 * S[li][nt][2 * rr + e] : -INFINITY;
                    S[li][nt][2 * rr + e] = x;
                    mx[li][rr] = fmaxf(mx[li][rr], x);
                }
        }
    }
}

/* One key tile (keys k0 .. k0+63, already in s) of the online softmax for the warp's rows r0 .. r0+15,
 * each row seeing the keys of its window (window 0: full causal). */
template <int HD, int NL>
__host__ __device__ static inline void fa_fwd_step(fa_fwd_state<HD, NL> &st, const fa_smem<HD> &s, int k0, int r0,
                                                   float scale, int window, int lane0) {
    float S[NL][FA_BK / 8][4], mx[NL][2];
    const float sl2 = scale * FA_LOG2E;   /* scores in base 2: m, and the exponents, are log2 units */
    for (int li = 0; li < NL; li++)
        for (int nt = 0; nt < FA_BK / 8; nt++)
            for (int e = 0; e < 4; e++) S[li][nt][e] = 0.0f;
    fa_mma_smem<NL, HD / 16, FA_BK / 8>(&S[0][0][0], FA_BK / 8 * 4, &st.qf[0][0][0], HD / 16 * 4, &s.K[0][0], HD + 8,
                                        lane0);
    /* below the diagonal, and every key inside the last row's window */
    if (k0 + FA_BK - 1 <= r0 && k0 >= mp_cu_attn_first_key(r0 + 15, window))
        fa_scale_max<NL, false>(S, mx, sl2, k0, r0, window, lane0);
    else fa_scale_max<NL, true>(S, mx, sl2, k0, r0, window, lane0);
    /* finite without a window (key k0 <= every row of the warp); with one, a row may have no key of the
     * tile (left of its window): -inf, and it must not become exp2(-inf - -inf) = NaN below */
    fa_quad_reduce<NL>(&mx[0][0], 2, 2, true);
    uint32_t pa[NL][FA_BK / 16][4];
    for (int li = 0; li < NL; li++) {
        for (int rr = 0; rr < 2; rr++) {
            const float m_new = fmaxf(st.m[li][rr], mx[li][rr]);
            const float m_sub = m_new == -INFINITY ? 0.0f : m_new;   /* no key yet: everything below is 0 */
            const float alpha = exp2f(st.m[li][rr] - m_sub);   /* first tile: exp2(-inf) = 0 */
            float sum = 0.0f;
            for (int nt = 0; nt < FA_BK / 8; nt++)
                for (int e = 0; e < 2; e++) {
                    float &x = S[li][nt][2 * rr + e];
                    x = exp2f(x - m_sub);   /* masked: exp2(-inf) = 0 */
                    sum += x;
                }
            for (int nt = 0; nt < HD / 8; nt++) st.o[li][nt][2 * rr] *= alpha, st.o[li][nt][2 * rr + 1] *= alpha;
            st.l[li][rr] = st.l[li][rr] * alpha + sum;
            st.m[li][rr] = m_new;
        }
        fa_c_to_a<FA_BK / 8>(pa[li], S[li]);
    }
    fa_mma_smem<NL, FA_BK / 16, HD / 8>(&st.o[0][0][0], HD / 8 * 4, &pa[0][0][0], FA_BK / 16 * 4, &s.Vt[0][0], FA_VPAD,
                                        lane0);
}

/* Writes out = O / l (bf16) and lse = m ln 2 + log l (m in log2 units) for the warp's rows below T. */
template <int HD, int NL>
__host__ __device__ static inline void fa_fwd_finish(fa_fwd_state<HD, NL> &st, mp_bf16 *out, float *lse, int b, int T,
                                                     int H, int h, int r0, int lane0) {
    fa_quad_reduce<NL>(&st.l[0][0], 2, 2, false);
    for (int li = 0; li < NL; li++) {
        const int lane = lane0 + li, g = lane >> 2, c = lane & 3;
        for (int rr = 0; rr < 2; rr++) {
            const int row = r0 + g + 8 * rr;
            if (row >= T) continue;
            const float inv = 1.0f / st.l[li][rr];   /* l >= 1: the max term is exp(0) */
            mp_bf16 *orow = out + (((int64_t)b * T + row) * H + h) * HD;
            for (int nt = 0; nt < HD / 8; nt++)
                fa_st_pair(orow + 8 * nt + 2 * c, st.o[li][nt][2 * rr] * inv, st.o[li][nt][2 * rr + 1] * inv);
            if (c == 0) lse[((int64_t)b * H + h) * T + row] = st.m[li][rr] * FA_LN2 + logf(st.l[li][rr]);
        }
    }
}

/* ---- backward (deterministic: dK/dV parallel over key rows, dQ over query rows, no atomics) ----
 * dK/dV pass: a block owns 64 keys (16 per warp, as A fragments K_w, V_w in registers) of kv head g and
 * walks, per query head of the group in order, the query tiles of FB_BQ = 32 rows from its first key on:
 *   S^T = K_w Q^T, P^T = exp(scale S^T - lse) (0 where query < key or past T), dP^T = V_w dO^T,
 *   dS^T = scale P^T (dP^T - D);  dV += P^T dO,  dK += dS^T Q   (P^T, dS^T: C -> A fragments).
 * dQ pass: a block owns 64 query rows (16 per warp: Q_w, dO_w fragments, the rows' lse and D) and walks
 * the key tiles of FB_BK = 32 of its causal prefix: S, P, dP = dO_w V^T, dS as above, dQ += dS K.
 * Shared memory holds the streamed operands both row-major and transposed (pair loads either way). */
#define FB_BQ 32
#define FB_BK 32
#define FB_PAD (32 + 8)

template <int HD>
struct alignas(16) fb_kv_smem {   /* a query tile of the dK/dV pass */
    mp_bf16 Q[FB_BQ][HD + 8], Qt[HD][FB_PAD], dO[FB_BQ][HD + 8], dOt[HD][FB_PAD];
    float lse[FB_BQ], D[FB_BQ];   /* lse in log2 units: lse log2(e) */
};
template <int HD>
struct alignas(16) fb_q_smem {   /* a key tile of the dQ pass */
    mp_bf16 K[FB_BK][HD + 8], Kt[HD][FB_PAD], V[FB_BK][HD + 8];
};
template <int HD, int NL>
struct fb_kv_state {
    uint32_t kf[NL][HD / 16][4], vf[NL][HD / 16][4];
    float dk[NL][HD / 8][4], dv[NL][HD / 8][4];
};
template <int HD, int NL>
struct fb_q_state {
    uint32_t qf[NL][HD / 16][4], df[NL][HD / 16][4];
    float dq[NL][HD / 8][4], lse[NL][2], D[NL][2];   /* lse in log2 units, as fb_kv_smem's */
};

/* A query tile of the dK/dV pass in flight: Q, dO (both ways), and row tid's lse (log2 units) and D
 * (threads below FB_BQ). */
template <int HD>
struct fb_q_stage {
    fa_stage<HD, FB_BQ, true> q, d;
    float lse, D;
};

/* The part of fb_fetch_qtile after Q: dO (dense), lse, D. */
template <int HD>
__host__ __device__ static inline void fb_fetch_qtile_tail(fb_q_stage<HD> &st, const mp_bf16 *dout, const float *lse,
                                                           const float *D, int b, int T, int H, int h, int t0,
                                                           int tid) {
    fa_fetch_rows(st.d, dout, b, T, H * HD, h, t0, tid);
    const int64_t r = ((int64_t)b * H + h) * T + t0 + tid;
    const bool in = tid < FB_BQ && t0 + tid < T;
    st.lse = in ? lse[r] * FA_LOG2E : 0.0f;
    st.D = in ? D[r] : 0.0f;
}

/* Thread tid's share of query tile t0 of head h into registers (zeros past T; q's rows ldq apart). */
template <int HD>
__host__ __device__ static inline void fb_fetch_qtile(fb_q_stage<HD> &st, const mp_bf16 *q, const mp_bf16 *dout,
                                                      const float *lse, const float *D, int b, int T, int H, int ldq,
                                                      int h, int t0, int tid) {
    fa_fetch_rows(st.q, q, b, T, ldq, h, t0, tid);
    fb_fetch_qtile_tail(st, dout, lse, D, b, T, H, h, t0, tid);
}

/* ... and from there into s: Q, dO both ways, lse and D. */
template <int HD>
__host__ __device__ static inline void fb_put_qtile(fb_kv_smem<HD> &s, const fb_q_stage<HD> &st, int tid) {
    fa_put_rows(st.q, (mp_bf16 *)&s.Q, HD + 8, (mp_bf16 *)&s.Qt, FB_PAD, tid);
    fa_put_rows(st.d, (mp_bf16 *)&s.dO, HD + 8, (mp_bf16 *)&s.dOt, FB_PAD, tid);
    if (tid < FB_BQ) s.lse[tid] = st.lse, s.D[tid] = st.D;
}

/* Thread tid's share of query tile t0 of head h: Q, dO both ways, lse and D (zeros past T). hd 128: Q is
 * put before dO is fetched (the dK/dV kernel has no 32 registers spare there; see fa_load_kv). */
template <int HD>
__host__ __device__ static inline void fb_load_qtile(fb_kv_smem<HD> &s, const mp_bf16 *q, const mp_bf16 *dout,
                                                     const float *lse, const float *D, int b, int T, int H, int ldq,
                                                     int h, int t0, int tid) {
    fb_q_stage<HD> st;
    if constexpr (HD <= 64) {
        fb_fetch_qtile(st, q, dout, lse, D, b, T, H, ldq, h, t0, tid);
        fb_put_qtile(s, st, tid);
    } else {
        fa_fetch_rows(st.q, q, b, T, ldq, h, t0, tid);
        fa_put_rows(st.q, (mp_bf16 *)&s.Q, HD + 8, (mp_bf16 *)&s.Qt, FB_PAD, tid);
        fb_fetch_qtile_tail(st, dout, lse, D, b, T, H, h, t0, tid);
        fa_put_rows(st.d, (mp_bf16 *)&s.dO, HD + 8, (mp_bf16 *)&s.dOt, FB_PAD, tid);
        if (tid < FB_BQ) s.lse[tid] = st.lse, s.D[tid] = st.D;
    }
}

/* A key tile of the dQ pass in flight (fetched by fa_fetch_kv): K for both ways, V row-major. */
template <int HD>
using fb_k_stage = fa_kv_pair<fa_stage<HD, FB_BK, true>, fa_stage<HD, FB_BK, false>>;

/* ... and from there into s: K both ways, V row-major. */
template <int HD>
__host__ __device__ static inline void fb_put_ktile(fb_q_smem<HD> &s, const fb_k_stage<HD> &st, int tid) {
    fa_put_rows(st.k, (mp_bf16 *)&s.K, HD + 8, (mp_bf16 *)&s.Kt, FB_PAD, tid);
    fa_put_rows(st.v, (mp_bf16 *)&s.V, HD + 8, NULL, 0, tid);
}

/* Thread tid's share of key tile k0 of kv head g for the dQ pass: K both ways, V row-major. */
template <int HD>
__host__ __device__ static inline void fb_load_ktile(fb_q_smem<HD> &s, const mp_bf16 *k, const mp_bf16 *v, int b,
                                                     int T, int ldkv, int g, int k0, int tid) {
    fb_k_stage<HD> st;
    fa_fetch_kv(st, k, v, b, T, ldkv, g, k0, tid);
    fb_put_ktile(s, st, tid);
}

/* P of one 16 x 32 C tile of scores, in place: rows `row0 + g (+8)`, cols `col0 + 2c (+1) + 8 nt`. kv = 1:
 * rows are keys, cols queries (the dK/dV pass, lse per column from slse); kv = 0: rows are queries, cols
 * keys (the dQ pass, lse per row slot from rlse), both lse in log2 units. P = exp(scale s - lse) =
 * exp2(scale log2(e) s - lse log2(e)), 0 where query < key, past T or (window > 0) key left of the
 * query's window. */
template <int NL, bool MASK>
__host__ __device__ static inline void fb_p_tile(float (*P)[4][4], int row0, int col0, int T, float sl2, bool kv,
                                                 const float *slse, const float (*rlse)[2], int window, int lane0) {
    for (int li = 0; li < NL; li++) {
        const int lane = lane0 + li, g = lane >> 2, c = lane & 3;
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) {
                const int row = row0 + g + 8 * (e >> 1), ci = 8 * nt + 2 * c + (e & 1), col = col0 + ci;
                const int key = kv ? row : col, qry = kv ? col : row;
                const float l = kv ? slse[ci] : rlse[li][e >> 1];
                const bool in = qry >= key && qry < T && mp_cu_attn_first_key(qry, window) <= key;
                P[li][nt][e] = !MASK || in ? exp2f(sl2 * P[li][nt][e] - l) : 0.0f;
            }
    }
}
/* The tile is unmasked (every query >= every key, below T, and every key inside every query's window) or
 * not: the mask's compares and selects are left out of the (usual) unmasked tiles. */
template <int NL>
__host__ __device__ static inline void fb_p(float (*P)[4][4], int row0, int col0, int T, float scale, bool kv,
                                            const float *slse, const float (*rlse)[2], int window, int lane0) {
    const float sl2 = scale * FA_LOG2E;
    const bool full = kv ? col0 >= row0 + 15 && col0 + 31 < T && mp_cu_attn_first_key(col0 + 31, window) <= row0
                         : row0 >= col0 + 31 && row0 + 15 < T && mp_cu_attn_first_key(row0 + 15, window) <= col0;
    if (full) fb_p_tile<NL, false>(P, row0, col0, T, sl2, kv, slse, rlse, window, lane0);
    else fb_p_tile<NL, true>(P, row0, col0, T, sl2, kv, slse, rlse, window, lane0);
}

/* dS = scale P (dP - D) of the same tile, in place in dP (D per column from sD, or per row slot from rD). */
template <int NL>
__host__ __device__ static inline void fb_ds(float (*dP)[4][4], const float (*P)[4][4], float scale, bool kv,
                                             const float *sD, const float (*rD)[2], int lane0) {
    for (int li = 0; li < NL; li++) {
        const int c = (lane0 + li) & 3;
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) {
                const float d = kv ? sD[8 * nt + 2 * c + (e & 1)] : rD[li][e >> 1];
                dP[li][nt][e] = scale * P[li][nt][e] * (dP[li][nt][e] - d);
            }
    }
}

/* dK/dV pass: the warp's keys r0 .. r0+15 against the query tile t0 in s. */
template <int HD, int NL>
__host__ __device__ static inline void fb_dkdv_step(fb_kv_state<HD, NL> &st, const fb_kv_smem<HD> &s, int t0, int r0,
                                                    int T, float scale, int window, int lane0) {
    float S[NL][4][4], dP[NL][4][4];
    for (int li = 0; li < NL; li++)
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) S[li][nt][e] = dP[li][nt][e] = 0.0f;
    fa_mma_smem<NL, HD / 16, 4>(&S[0][0][0], 16, &st.kf[0][0][0], HD / 16 * 4, &s.Q[0][0], HD + 8, lane0);
    fb_p<NL>(S, r0, t0, T, scale, true, s.lse, NULL, window, lane0);
    uint32_t a[NL][2][4];   /* P^T, then dS^T, as A fragments (dV's product first: fewer live registers) */
    for (int li = 0; li < NL; li++) fa_c_to_a<4>(a[li], S[li]);
    fa_mma_smem<NL, 2, HD / 8>(&st.dv[0][0][0], HD / 8 * 4, &a[0][0][0], 8, &s.dOt[0][0], FB_PAD, lane0);
    fa_mma_smem<NL, HD / 16, 4>(&dP[0][0][0], 16, &st.vf[0][0][0], HD / 16 * 4, &s.dO[0][0], HD + 8, lane0);
    fb_ds<NL>(dP, S, scale, true, s.D, NULL, lane0);
    for (int li = 0; li < NL; li++) fa_c_to_a<4>(a[li], dP[li]);
    fa_mma_smem<NL, 2, HD / 8>(&st.dk[0][0][0], HD / 8 * 4, &a[0][0][0], 8, &s.Qt[0][0], FB_PAD, lane0);
}

/* dQ pass: the warp's query rows r0 .. r0+15 against the key tile k0 in s. */
template <int HD, int NL>
__host__ __device__ static inline void fb_dq_step(fb_q_state<HD, NL> &st, const fb_q_smem<HD> &s, int k0, int r0,
                                                  int T, float scale, int window, int lane0) {
    float S[NL][4][4], dP[NL][4][4];
    for (int li = 0; li < NL; li++)
        for (int nt = 0; nt < 4; nt++)
            for (int e = 0; e < 4; e++) S[li][nt][e] = dP[li][nt][e] = 0.0f;
    fa_mma_smem<NL, HD / 16, 4>(&S[0][0][0], 16, &st.qf[0][0][0], HD / 16 * 4, &s.K[0][0], HD + 8, lane0);
    fa_mma_smem<NL, HD / 16, 4>(&dP[0][0][0], 16, &st.df[0][0][0], HD / 16 * 4, &s.V[0][0], HD + 8, lane0);
    fb_p<NL>(S, r0, k0, T, scale, false, NULL, st.lse, window, lane0);
    fb_ds<NL>(dP, S, scale, false, NULL, st.D, lane0);
    uint32_t da[NL][2][4];
    for (int li = 0; li < NL; li++) fa_c_to_a<4>(da[li], dP[li]);
    fa_mma_smem<NL, 2, HD / 8>(&st.dq[0][0][0], HD / 8 * 4, &da[0][0][0], 8, &s.Kt[0][0], FB_PAD, lane0);
}

/* Stores a warp's 16 x HD fp32 accumulator (C fragments) as bf16 rows r0 .. (below T) of head `head` of x
 * (token rows ld elements apart, ld even: only the head's columns are written). */
template <int HD, int NL>
__host__ __device__ static inline void fb_store(mp_bf16 *x, const float (*acc)[HD / 8][4], int b, int T, int ld,
                                                int head, int r0, int lane0) {
    for (int li = 0; li < NL; li++) {
        const int lane = lane0 + li, g = lane >> 2, c = lane & 3;
        for (int rr = 0; rr < 2; rr++) {
            const int row = r0 + g + 8 * rr;
            if (row >= T) continue;
            mp_bf16 *xr = x + ((int64_t)b * T + row) * ld + (int64_t)head * HD;
            for (int nt = 0; nt < HD / 8; nt++) fa_st_pair(xr + 8 * nt + 2 * c, acc[li][nt][2 * rr], acc[li][nt][2 * rr + 1]);
        }
    }
}

/* Resets the dK/dV state and loads the K, V fragments of keys r0 .. r0+15 of kv head g (rows ldkv apart). */
template <int HD, int NL>
__host__ __device__ static inline void fb_kv_init(fb_kv_state<HD, NL> &st, const mp_bf16 *k, const mp_bf16 *v, int b,
                                                  int T, int ldkv, int g, int r0, int lane0) {
    fa_load_afrag<HD, NL>(st.kf, k, b, T, ldkv, g, r0, lane0);
    fa_load_afrag<HD, NL>(st.vf, v, b, T, ldkv, g, r0, lane0);
    for (int li = 0; li < NL; li++)
        for (int nt = 0; nt < HD / 8; nt++)
            for (int e = 0; e < 4; e++) st.dk[li][nt][e] = st.dv[li][nt][e] = 0.0f;
}

/* Resets the dQ state and loads Q (rows ldq apart), dO (dense) fragments and lse, D of query rows r0 ..
 * r0+15 of head h. */
template <int HD, int NL>
__host__ __device__ static inline void fb_q_init(fb_q_state<HD, NL> &st, const mp_bf16 *q, const mp_bf16 *dout,
                                                 const float *lse, const float *D, int b, int T, int H, int ldq, int h,
                                                 int r0, int lane0) {
    fa_load_afrag<HD, NL>(st.qf, q, b, T, ldq, h, r0, lane0);
    fa_load_afrag<HD, NL>(st.df, dout, b, T, H * HD, h, r0, lane0);
    for (int li = 0; li < NL; li++) {
        const int g = (lane0 + li) >> 2;
        for (int rr = 0; rr < 2; rr++) {
            const int row = r0 + g + 8 * rr;
            const int64_t r = ((int64_t)b * H + h) * T + row;
            st.lse[li][rr] = row < T ? lse[r] * FA_LOG2E : 0.0f;
            st.D[li][rr] = row < T ? D[r] : 0.0f;
        }
        for (int nt = 0; nt < HD / 8; nt++)
            for (int e = 0; e < 4; e++) st.dq[li][nt][e] = 0.0f;
    }
}

#endif
