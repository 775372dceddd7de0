/*
 * core/backend_cpu_bf16.c — "cpu-bf16": the CUDA backend's precision, emulated on the CPU.
 *
 * Why it exists. On a GPU, compute tensors are bf16 (act_dtype MP_BF16) while masters, moments, weight
 * gradients and per-row statistics stay fp32 (docs/CUDA.md, section Precision). The paths of layers/
 * that only exist because of that split — the bf16 compute copies of the fp32 masters that AdamW
 * refreshes, the FSDP gathers and tp/dp collectives that move bf16, the weight-gradient GEMMs that
 * write fp32 (c_dtype MP_F32, beta = 1) while their activation gradients are bf16 — would otherwise run
 * only on machines with a GPU. This table gives them a device with act_dtype MP_BF16 that every machine
 * has, so they run and are tested in CI (tests/test_device_parity.c, tests/bf16_mesh.sh); and it is
 * the reference the CUDA backend's parity test (device_parity_cuda) compares against, beside "cpu".
 *
 * What it does. Every op widens its bf16 inputs to fp32 temporaries, calls the fp32 op of the CPU table
 * (mp_backend_cpu(): no kernel is duplicated here) and rounds its bf16 outputs once, to nearest even
 * (mp_f32_to_bf16), as the CUDA kernels store them. Exactly the storage rules of docs/CUDA.md:
 *   - gemm: A, B bf16; C bf16 (widened first when beta != 0, rounded after) or, with c_dtype MP_F32
 *     (weight gradients), the fp32 C itself, written or accumulated by the fp32 GEMM (beta as given);
 *   - rmsnorm_bwd: dx is a bf16 buffer that ACCUMULATES (widened, accumulated in fp32, rounded back);
 *     dw (fp32) and rstd (fp32) are the caller's buffers, used directly;
 *   - bias_add: the stored bf16 x (already rounded by its GEMM) plus the bf16 bias, formed in fp32 and
 *     rounded once; bias_bwd: db fp32, accumulated;
 *   - head_rmsnorm_fwd/_bwd: in place on the bf16 heads (rounded once), x_save a bf16 copy of the input,
 *     rstd and dw fp32;
 *   - attention: out bf16, lse and the backward's scratch fp32; dq, dk, dv bf16;
 *   - cross-entropy: bf16 logits read by rowmax / sumexp / target, rewritten in place (bf16) by xent_bwd;
 *     rowmax, sumexp, tlogit, losses fp32;
 *   - embedding: forward reads the bf16 table (a row copy: exact), backward adds bf16 dout into fp32 dwte;
 *   - adamw: fp32 p, m, v updated by the CPU op, then p rounded into the bf16 compute copy p_act
 *     (when not NULL) in the same call;
 *   - to_act / from_act: round / widen;
 *   - fp32-only ops (accumulate, scale, sumsq_acc, sum_acc, xent_loss), memory, streams and events,
 *     host_alloc: the CPU table's own function pointers.
 *
 * What it does NOT emulate: FMA contraction (nvcc contracts a*b+c; the CPU build does not, except with
 * -DMP_NATIVE where gcc may), cuBLAS's summation order inside GEMMs, and each kernel's fp32
 * intermediates (block trees, online-softmax order of the flash kernels, expf vs mp_expf): those are the
 * CPU kernels'. So it matches the GPU's bf16 storage bit for bit in the rules above, but the values agree
 * with a GPU by tolerance only, like "cpu" does, just much closer in behaviour (what gets rounded where).
 *
 * Temporaries come from one scratch arena per process (this file's static state), grown with the checked
 * allocator (MP_MEM_OTHER: it is outside llama_plan_memory's model plan) to the largest op seen and
 * never shrunk, so once warm (after the first step) the ops allocate nothing. It is NOT thread-safe: one
 * model per process, ops called from one thread (the CPU kernels' own OpenMP teams are fine). Slow by
 * design: it converts around every op.
 */
#include "core/backend.h"
#include <assert.h>
#include <pthread.h>
#include <string.h>

/* ---- the scratch arena ---- */

#define ARENA_ALIGN 64

typedef struct bf16_arena {
    char *buf;
    size_t cap;    /* bytes allocated (mp_realloc accounting) */
    size_t used;   /* bytes handed out in the current op */
} bf16_arena;

static bf16_arena g_arena;

static size_t arena_round(size_t bytes) { return (bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN; }

/* Starts an op that will take at most `bytes` (the sum of arena_round of its pieces): grows the arena if
 * needed (the only allocation, and only until warm) and hands out from its start again. Pieces taken
 * before a begin are invalid after it. */
static void arena_begin(size_t bytes) {
    bytes += ARENA_ALIGN;   /* room to align the first piece whatever realloc's alignment */
    if (bytes > g_arena.cap) {
        g_arena.buf = mp_realloc(g_arena.buf, g_arena.cap, bytes, MP_MEM_OTHER);
        g_arena.cap = bytes;
    }
    g_arena.used = 0;
}

static void *arena_take(size_t bytes) {
    uintptr_t base = (uintptr_t)g_arena.buf;
    size_t off = (size_t)(((base + ARENA_ALIGN - 1) & ~(uintptr_t)(ARENA_ALIGN - 1)) - base) + g_arena.used;
    g_arena.used += arena_round(bytes);
    assert(off + bytes <= g_arena.cap && g_arena.used + ARENA_ALIGN <= g_arena.cap);   /* within the begin */
    return g_arena.buf + off;
}

/* Bytes of n fp32 temporaries, rounded as the arena hands them out. */
static size_t fbytes(int64_t n) { return arena_round((size_t)n * sizeof(float)); }

/* ---- conversions ---- */

/* A fp32 temporary holding the n bf16 elements at src. */
static float *widen(const void *src, int64_t n) {
    float *t = arena_take((size_t)n * sizeof(float));
    mp_bf16_to_f32_n(t, src, n);
    return t;
}
/* An uninitialised fp32 temporary of n elements (an output). */
static float *tmp(int64_t n) { return arena_take((size_t)n * sizeof(float)); }

/* rows x cols of a row-major bf16 matrix with row stride ld, widened into a packed fp32 temporary. */
static float *widen_mat(const void *src, int64_t rows, int64_t cols, int ld) {
    float *t = arena_take((size_t)(rows * cols) * sizeof(float));
    const uint16_t *s = src;
    for (int64_t r = 0; r < rows; r++) mp_bf16_to_f32_n(t + r * cols, s + r * (int64_t)ld, cols);
    return t;
}

/* The packed fp32 rows x cols matrix src rounded into the bf16 matrix dst of row stride ld (only its
 * cols columns of each row are written: the rest may be another tensor's, as in the fused [q | k | v]). */
static void narrow_mat(void *dst, const float *src, int64_t rows, int64_t cols, int ld) {
    uint16_t *d = dst;
    for (int64_t r = 0; r < rows; r++) mp_f32_to_bf16_n(d + r * (int64_t)ld, src + r * cols, cols);
}

/* The fp32 table whose ops do the arithmetic. */
static mp_backend *f32(void) { return mp_backend_cpu(); }

/* ---- dense linear algebra ---- */

static void bf16_gemm(mp_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha, const void *A,
                      int lda, const void *B, int ldb, float beta, void *C, int ldc, mp_dtype c_dtype) {
    assert(c_dtype == MP_BF16 || c_dtype == MP_F32);
    assert(M >= 0 && N >= 0 && K >= 0);
    if (M == 0 || N == 0) return;
    assert(ldc >= N);
    /* A and B as stored: op(A) is M x K, op(B) is K x N */
    const int64_t ar = trans_a ? K : M, ac = trans_a ? M : K;
    const int64_t br = trans_b ? N : K, bc = trans_b ? K : N;
    const int c_bf16 = c_dtype == MP_BF16;
    arena_begin(fbytes(ar * ac) + fbytes(br * bc) + (c_bf16 ? fbytes((int64_t)M * N) : 0));
    float *a = widen_mat(A, ar, ac, lda);
    float *b = widen_mat(B, br, bc, ldb);
    if (!c_bf16) {   /* weight gradients: fp32 C, written or accumulated by the fp32 GEMM (beta as given) */
        f32()->gemm(f32(), trans_a, trans_b, M, N, K, alpha, a, (int)(ac ? ac : 1), b, (int)(bc ? bc : 1), beta,
                    C, ldc, MP_F32);
        return;
    }
    /* bf16 C: read (widened) only when beta != 0, as cuBLAS does; written rounded */
    float *c = beta != 0.0f ? widen_mat(C, M, N, ldc) : tmp((int64_t)M * N);
    f32()->gemm(f32(), trans_a, trans_b, M, N, K, alpha, a, (int)(ac ? ac : 1), b, (int)(bc ? bc : 1), beta, c, N,
                MP_F32);
    narrow_mat(C, c, M, N, ldc);
}

/* ---- elementwise ---- */

static void bf16_add(mp_backend *be, void *out, const void *a, const void *b, int64_t n) {
    /* out may alias a or b: both are widened before anything is written */
    arena_begin(3 * fbytes(n));
    float *fa = widen(a, n), *fb = widen(b, n), *fo = tmp(n);
    f32()->add(f32(), fo, fa, fb, n);
    mp_f32_to_bf16_n(out, fo, n);
}

static void bf16_to_act(mp_backend *be, void *dst, const float *src, int64_t n) {
    assert(n >= 0 && ((const void *)dst != (const void *)src || n == 0));
    mp_f32_to_bf16_n(dst, src, n);
}
static void bf16_from_act(mp_backend *be, float *dst, const void *src, int64_t n) {
    assert(n >= 0 && ((const void *)dst != src || n == 0));
    mp_bf16_to_f32_n(dst, src, n);
}

/* ---- embedding ----
 * Forward: the N rows the tokens name are widened (not the whole table: V x D per call would dominate),
 * and the fp32 op copies row n of that gather for token n (tokens renumbered 0..N-1, -1 outside the
 * slice so the op writes zeros there). A row copy, so out is the bf16 table rows exactly. */
static void bf16_embed_fwd(mp_backend *be, void *out, const int32_t *tok, const void *wte, int N, int D, int v_start,
                           int v_local) {
    assert(N >= 0 && D >= 0);
    arena_begin(2 * fbytes((int64_t)N * D) + arena_round((size_t)N * sizeof(int32_t)));
    float *rows = tmp((int64_t)N * D), *fo = tmp((int64_t)N * D);
    int32_t *idx = arena_take((size_t)N * sizeof(int32_t));
    const uint16_t *w = wte;
    for (int n = 0; n < N; n++) {
        int64_t r = (int64_t)tok[n] - v_start;
        if (r >= 0 && r < v_local) {
            mp_bf16_to_f32_n(rows + (int64_t)n * D, w + r * D, D);
            idx[n] = n;
        } else {
            idx[n] = -1;
        }
    }
    f32()->embed_fwd(f32(), fo, idx, rows, N, D, 0, N);
    mp_f32_to_bf16_n(out, fo, (int64_t)N * D);
}

static void bf16_embed_bwd(mp_backend *be, float *dwte, const void *dout, const int32_t *tok, int N, int D,
                           int v_start, int v_local) {
    arena_begin(fbytes((int64_t)N * D));
    float *fd = widen(dout, (int64_t)N * D);
    f32()->embed_bwd(f32(), dwte, fd, tok, N, D, v_start, v_local);
}

/* ---- RMSNorm ---- */

static void bf16_rmsnorm_fwd(mp_backend *be, void *y, float *rstd, const void *x, const void *w, int N, int D,
                             float eps) {
    const int64_t nd = (int64_t)N * D;
    arena_begin(2 * fbytes(nd) + fbytes(D));
    float *fx = widen(x, nd), *fw = widen(w, D), *fy = tmp(nd);
    f32()->rmsnorm_fwd(f32(), fy, rstd, fx, fw, N, D, eps);
    mp_f32_to_bf16_n(y, fy, nd);
}

/* dx accumulates: the bf16 buffer is widened, the fp32 op adds into it, the sum is rounded back (one
 * rounding per element, as the CUDA kernel's load-add-store). dw is fp32 and accumulates in place. */
static void bf16_rmsnorm_bwd(mp_backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w,
                             const float *rstd, int N, int D) {
    const int64_t nd = (int64_t)N * D;
    arena_begin(3 * fbytes(nd) + fbytes(D));
    float *fdx = widen(dx, nd), *fdy = widen(dy, nd), *fx = widen(x, nd), *fw = widen(w, D);
    f32()->rmsnorm_bwd(f32(), fdx, dw, fdy, fx, fw, rstd, N, D);
    mp_f32_to_bf16_n(dx, fdx, nd);
}

/* ---- biases and per-head RMSNorm: the column block widened, the fp32 op, rounded back once ---- */

/* x + b formed in fp32 from the stored bf16 x (a GEMM's rounded output) and the bf16 b, rounded once. */
static void bf16_bias_add(mp_backend *be, void *x, int ldx, const void *b, int N, int cols) {
    const int64_t n = (int64_t)N * cols;
    arena_begin(fbytes(n) + fbytes(cols));
    float *fx = widen_mat(x, N, cols, ldx), *fb = widen(b, cols);
    f32()->bias_add(f32(), fx, cols, fb, N, cols);
    narrow_mat(x, fx, N, cols, ldx);
}

static void bf16_bias_bwd(mp_backend *be, float *db, const void *dx, int ldx, int N, int cols) {
    arena_begin(fbytes((int64_t)N * cols));
    f32()->bias_bwd(f32(), db, widen_mat(dx, N, cols, ldx), cols, N, cols);
}

/* x_save is the bf16 input itself (copied before the normed values overwrite it); rstd fp32. */
static void bf16_head_rmsnorm_fwd(mp_backend *be, void *x, int ldx, void *x_save, float *rstd, const void *w, int N,
                                  int H, int hd, float eps) {
    const int64_t w_ = (int64_t)H * hd;
    if (x_save)
        for (int64_t r = 0; r < N; r++)
            memcpy((uint16_t *)x_save + r * w_, (const uint16_t *)x + r * ldx, (size_t)w_ * sizeof(uint16_t));
    arena_begin(fbytes(N * w_) + fbytes(hd));
    float *fx = widen_mat(x, N, w_, ldx), *fw = widen(w, hd);
    f32()->head_rmsnorm_fwd(f32(), fx, (int)w_, NULL, rstd, fw, N, H, hd, eps);
    narrow_mat(x, fx, N, w_, ldx);
}

/* dx (= dy on entry) rounded once from the fp32 result; dw fp32, accumulated in place. */
static void bf16_head_rmsnorm_bwd(mp_backend *be, void *dx, int ldx, float *dw, const void *x_save, const float *rstd,
                                  const void *w, int N, int H, int hd) {
    const int64_t w_ = (int64_t)H * hd;
    arena_begin(2 * fbytes(N * w_) + fbytes(hd));
    float *fdx = widen_mat(dx, N, w_, ldx), *fx = widen(x_save, N * w_), *fw = widen(w, hd);
    f32()->head_rmsnorm_bwd(f32(), fdx, (int)w_, dw, fx, rstd, fw, N, H, hd);
    narrow_mat(dx, fdx, N, w_, ldx);
}

/* ---- RoPE (in place; the H*hd columns of rows ld apart, packed into a dense fp32 temporary) ---- */

/* The fp32 table's rope_fwd (bwd 0) or rope_bwd (bwd 1) on the widened heads, rounded back in place. */
static void bf16_rope(void *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0, int ld,
                      int bwd) {
    const int64_t rows = (int64_t)B * T, w = (int64_t)H * hd;
    arena_begin(fbytes(rows * w));
    float *fx = widen_mat(x, rows, w, ld);
    (bwd ? f32()->rope_bwd : f32()->rope_fwd)(f32(), fx, cos_t, sin_t, B, T, H, hd, pos0, (int)w);
    narrow_mat(x, fx, rows, w, ld);
}

static void bf16_rope_fwd(mp_backend *be, void *x, const float *cos_t, const float *sin_t, int B, int T, int H,
                          int hd, int pos0, int ld) {
    bf16_rope(x, cos_t, sin_t, B, T, H, hd, pos0, ld, 0);
}

static void bf16_rope_bwd(mp_backend *be, void *dx, const float *cos_t, const float *sin_t, int B, int T, int H,
                          int hd, int pos0, int ld) {
    bf16_rope(dx, cos_t, sin_t, B, T, H, hd, pos0, ld, 1);
}

/* ---- attention: bf16 q, k, v, out, dout, dq, dk, dv; fp32 lse and scratch. The strided q, k, v (and
 * dq, dk, dv) are packed into dense fp32 temporaries, so the fp32 ops run with dense strides. The sliding
 * window passes through to them unchanged. ---- */

static void bf16_attn_fwd(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v, int B,
                          int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    const int64_t rows = (int64_t)B * T, wq = (int64_t)H * hd, wk = (int64_t)KV * hd;
    const int64_t nq = rows * wq, nk = rows * wk;
    arena_begin(2 * fbytes(nq) + 2 * fbytes(nk));
    float *fq = widen_mat(q, rows, wq, ldq), *fk = widen_mat(k, rows, wk, ldkv), *fv = widen_mat(v, rows, wk, ldkv);
    float *fo = tmp(nq);
    f32()->attn_fwd(f32(), fo, lse, fq, fk, fv, B, T, H, KV, hd, (int)wq, (int)wk, window);
    mp_f32_to_bf16_n(out, fo, nq);
}

static void bf16_attn_fwd_kv(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                             int B, int Tq, int pos0, int Tc, int H, int KV, int hd, int window) {
    const int64_t nq = (int64_t)B * Tq * H * hd, nk = (int64_t)B * Tc * KV * hd;
    arena_begin(2 * fbytes(nq) + 2 * fbytes(nk));
    float *fq = widen(q, nq), *fk = widen(k, nk), *fv = widen(v, nk), *fo = tmp(nq);
    f32()->attn_fwd_kv(f32(), fo, lse, fq, fk, fv, B, Tq, pos0, Tc, H, KV, hd, window);
    mp_f32_to_bf16_n(out, fo, nq);
}

static void bf16_attn_bwd(mp_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                          const void *out, const float *lse, const void *q, const void *k, const void *v, int B,
                          int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    const int64_t rows = (int64_t)B * T, wq = (int64_t)H * hd, wk = (int64_t)KV * hd;
    const int64_t nq = rows * wq, nk = rows * wk;
    arena_begin(4 * fbytes(nq) + 4 * fbytes(nk));
    float *fdo = widen(dout, nq), *fo = widen(out, nq), *fq = widen_mat(q, rows, wq, ldq);
    float *fk = widen_mat(k, rows, wk, ldkv), *fv = widen_mat(v, rows, wk, ldkv);
    float *fdq = tmp(nq), *fdk = tmp(nk), *fdv = tmp(nk);
    f32()->attn_bwd(f32(), fdq, fdk, fdv, scratch, fdo, fo, lse, fq, fk, fv, B, T, H, KV, hd, (int)wq, (int)wk, window);
    narrow_mat(dq, fdq, rows, wq, ldq);
    narrow_mat(dk, fdk, rows, wk, ldkv);
    narrow_mat(dv, fdv, rows, wk, ldkv);
}

/* ---- SwiGLU ---- */

static void bf16_swiglu_fwd(mp_backend *be, void *out, const void *gate, const void *up, int64_t n) {
    arena_begin(3 * fbytes(n));
    float *fg = widen(gate, n), *fu = widen(up, n), *fo = tmp(n);
    f32()->swiglu_fwd(f32(), fo, fg, fu, n);
    mp_f32_to_bf16_n(out, fo, n);
}

static void bf16_swiglu_bwd(mp_backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                            const void *up, int64_t n) {
    /* every input is widened before either output is written, so outputs may alias inputs */
    arena_begin(5 * fbytes(n));
    float *fd = widen(dout, n), *fg = widen(gate, n), *fu = widen(up, n), *fdg = tmp(n), *fdu = tmp(n);
    f32()->swiglu_bwd(f32(), fdg, fdu, fd, fg, fu, n);
    mp_f32_to_bf16_n(dgate, fdg, n);
    mp_f32_to_bf16_n(dup, fdu, n);
}

/* ---- cross-entropy: bf16 logits, fp32 row statistics ---- */

static void bf16_xent_rowmax(mp_backend *be, float *rowmax, const void *logits, int N, int v_local, int v_valid) {
    const int64_t n = (int64_t)N * v_local;
    arena_begin(fbytes(n));
    f32()->xent_rowmax(f32(), rowmax, widen(logits, n), N, v_local, v_valid);
}

static void bf16_xent_sumexp(mp_backend *be, float *sumexp, const void *logits, const float *rowmax, int N,
                             int v_local, int v_valid) {
    const int64_t n = (int64_t)N * v_local;
    arena_begin(fbytes(n));
    f32()->xent_sumexp(f32(), sumexp, widen(logits, n), rowmax, N, v_local, v_valid);
}

static void bf16_xent_target(mp_backend *be, float *tlogit, const void *logits, const int32_t *tgt, int N,
                             int v_local, int v_start) {
    const int64_t n = (int64_t)N * v_local;
    arena_begin(fbytes(n));
    f32()->xent_target(f32(), tlogit, widen(logits, n), tgt, N, v_local, v_start);
}

/* In place: the bf16 logits become their bf16 gradient (the in-place dlogits keep the logits' dtype). */
static void bf16_xent_bwd(mp_backend *be, void *logits, const float *rowmax, const float *sumexp, const int32_t *tgt,
                          float dloss, int N, int v_local, int v_valid, int v_start) {
    const int64_t n = (int64_t)N * v_local;
    arena_begin(fbytes(n));
    float *fl = widen(logits, n);
    f32()->xent_bwd(f32(), fl, rowmax, sumexp, tgt, dloss, N, v_local, v_valid, v_start);
    mp_f32_to_bf16_n(logits, fl, n);
}

/* ---- optimizer: fp32 p, m, v by the CPU op; the bf16 compute copy rounded from the updated p ---- */

static void bf16_adamw(mp_backend *be, float *p, void *p_act, const float *g, float *m, float *v, int64_t n,
                       const mp_adamw_seg *segs, int nsegs, float lr, float beta1, float beta2, float eps, float wd,
                       int step, float grad_scale) {
    assert(!p_act || p_act != (void *)p);   /* a bf16 copy cannot be the fp32 master itself */
    f32()->adamw(f32(), p, NULL, g, m, v, n, segs, nsegs, lr, beta1, beta2, eps, wd, step, grad_scale);
    if (p_act) mp_f32_to_bf16_n(p_act, p, n);
}

/* ---- the table ---- */

static mp_backend g_bf16;
static pthread_once_t g_bf16_once = PTHREAD_ONCE_INIT;

static void bf16_init(void) {
    /* memory, streams and events, host memory and the fp32-only ops: the CPU table's own pointers */
    g_bf16 = *mp_backend_cpu();
    g_bf16.name = "cpu-bf16";
    g_bf16.device = MP_DEV_CPU;
    g_bf16.host_memory = 1;
    g_bf16.act_dtype = MP_BF16;
    g_bf16.gemm = bf16_gemm;
    g_bf16.add = bf16_add;
    g_bf16.to_act = bf16_to_act;
    g_bf16.from_act = bf16_from_act;
    g_bf16.embed_fwd = bf16_embed_fwd;
    g_bf16.embed_bwd = bf16_embed_bwd;
    g_bf16.rmsnorm_fwd = bf16_rmsnorm_fwd;
    g_bf16.rmsnorm_bwd = bf16_rmsnorm_bwd;
    g_bf16.bias_add = bf16_bias_add;
    g_bf16.bias_bwd = bf16_bias_bwd;
    g_bf16.head_rmsnorm_fwd = bf16_head_rmsnorm_fwd;
    g_bf16.head_rmsnorm_bwd = bf16_head_rmsnorm_bwd;
    g_bf16.rope_fwd = bf16_rope_fwd;
    g_bf16.rope_bwd = bf16_rope_bwd;
    g_bf16.attn_fwd = bf16_attn_fwd;
    g_bf16.attn_fwd_kv = bf16_attn_fwd_kv;
    g_bf16.attn_bwd = bf16_attn_bwd;
    g_bf16.swiglu_fwd = bf16_swiglu_fwd;
    g_bf16.swiglu_bwd = bf16_swiglu_bwd;
    g_bf16.xent_rowmax = bf16_xent_rowmax;
    g_bf16.xent_sumexp = bf16_xent_sumexp;
    g_bf16.xent_target = bf16_xent_target;
    g_bf16.xent_fwd = NULL;   /* the CPU table's reads fp32 logits: the three ops above instead */
    g_bf16.xent_bwd = bf16_xent_bwd;
    g_bf16.adamw = bf16_adamw;
    /* kept from the CPU table (fp32 in, fp32 out on every device): accumulate, scale, sumsq_acc, sum_acc,
     * xent_loss */
    g_bf16.impl = &g_arena;
}

mp_backend *mp_backend_cpu_bf16(void) {
    pthread_once(&g_bf16_once, bf16_init);
    return &g_bf16;
}
