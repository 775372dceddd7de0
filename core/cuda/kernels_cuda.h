/*
 * core/cuda/kernels_cuda.h — the CUDA kernels of the GPU backend, as host-callable launchers.
 *
 * Every launcher enqueues its kernel(s) on the given stream and returns nothing; the caller
 * (core/cuda/backend_cuda.c) checks cudaGetLastError. Launchers never synchronise, never allocate
 * and never copy to the host: scratch they need is passed in, sized by the *_scratch_* helpers below.
 * Host-side invariants (sizes >= 0, grid limits, alignment) are assert()ed in the launchers.
 * docs/CUDA.md is the long form of this file: precision, determinism, what is not yet proven.
 *
 * Layouts are the CPU backend's (core/backend.h): row-major; activations [N, D] with N = B*T tokens;
 * attention tensors [B, T, heads, hd]; lse and the attention scratch [B, H, T].
 *
 * Precision (docs/DESIGN_NOTES.md "Precision in the table"):
 *   - activations and activation gradients: bf16 (mp_bf16);
 *   - weight gradients, master weights, Adam moments: fp32;
 *   - per-row statistics (RMSNorm rstd, attention lse and D, cross-entropy max/sumexp/target/loss): fp32;
 *   - every reduction accumulates in fp32 (double for the device-scalar reductions).
 *
 * Determinism: no kernel here uses a floating-point atomic. Every sum is formed in an order that is a
 * function of the problem sizes alone, so a launch is bitwise repeatable run to run on a given GPU
 * model (docs/CUDA.md gives the argument kernel by kernel).
 *
 * Gradient conventions follow core/backend.h: weight gradients ACCUMULATE (+=), activation gradients
 * are WRITTEN (=) unless the comment says "accumulates".
 */
#ifndef MP_KERNELS_CUDA_H
#define MP_KERNELS_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

/* bf16 storage type: cuda_bf16.h's __nv_bfloat16 in .cu files; a layout-identical 16-bit struct in C. */
#ifdef __CUDACC__
#include <cuda_bf16.h>
typedef __nv_bfloat16 mp_bf16;
#else
typedef struct mp_bf16 {
    uint16_t bits;
} mp_bf16;
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conversion (k_convert.cu) ----
 * n elements, any n >= 0; fp32 -> bf16 rounds to nearest even (NaN stays NaN). Buffers must not
 * overlap (distinct element sizes). */
void mp_cuda_f32_to_bf16(mp_bf16 *dst, const float *src, int64_t n, cudaStream_t s);
void mp_cuda_bf16_to_f32(float *dst, const mp_bf16 *src, int64_t n, cudaStream_t s);

/* ---- elementwise (k_elementwise.cu): the backend table's add/accumulate/scale ----
 * out may alias a or b in add; dst and src must not overlap in accumulate. */
void mp_cuda_add_bf16(mp_bf16 *out, const mp_bf16 *a, const mp_bf16 *b, int64_t n, cudaStream_t s);
void mp_cuda_add_f32(float *out, const float *a, const float *b, int64_t n, cudaStream_t s);
void mp_cuda_accumulate_bf16(mp_bf16 *dst, const mp_bf16 *src, int64_t n, cudaStream_t s);   /* dst += src */
void mp_cuda_accumulate_f32(float *dst, const float *src, int64_t n, cudaStream_t s);        /* dst += src */
void mp_cuda_scale_f32(float *x, float a, int64_t n, cudaStream_t s);                          /* x *= a */
void mp_cuda_scale_bf16(mp_bf16 *x, float a, int64_t n, cudaStream_t s);                       /* x *= a */

/* ---- biases (k_elementwise.cu, k_reduce.cu): Qwen2's q/k/v biases ----
 * Both act on a column block of a wider row (the q | k | v columns of the fused projection): N rows of
 * cols columns, ldx elements from a row to the next (ldx >= cols); columns past cols are neither read nor
 * written. bias_add: x[n, j] = bf16(float(x[n, j]) + float(b[j])), one rounding (core/backend_cpu_bf16.c's
 * arithmetic, bit for bit); 16-byte accesses when cols and ldx are multiples of 8 and x, b are 16-byte
 * aligned, else 2-byte ones, the same bits either way. */
void mp_cuda_bias_add(mp_bf16 *x, int ldx, const mp_bf16 *b, int N, int cols, cudaStream_t s);
/* db[j] += sum_n dx[n, j] (fp32, accumulates), deterministically, in an order fixed by N alone: the rows
 * are cut into mp_row_chunks(N) chunks of consecutive rows (RMSNorm's dw plan); one thread per (chunk,
 * column) sums its rows in increasing n from 0 into partial[chunk, j], then a second kernel adds the
 * chunks in order and does the one db[j] += total. partial: device scratch of
 * mp_cuda_chunk_partial_floats(N, cols) floats. */
void mp_cuda_bias_bwd(float *db, float *partial, const mp_bf16 *dx, int ldx, int N, int cols, cudaStream_t s);

/* ---- reductions into a device scalar (k_reduce.cu) ----
 * *acc (ONE double in device memory) += sum_i x_i^2 (sumsq) or sum_i x_i (sum). The sum is formed in
 * double from 0 in an order fixed by n alone: clamp(ceil(n/8192), 1, MP_CUDA_REDUCE_MAX_BLOCKS) blocks each
 * sum one contiguous chunk (fixed per-thread strides, fixed shared-memory tree) into `partials`, and a
 * second single-block kernel adds them in a fixed tree and does the one read-modify-write of *acc.
 * partials: device scratch of at least MP_CUDA_REDUCE_MAX_BLOCKS doubles, not aliasing acc, and not
 * used by another stream concurrently. */
#define MP_CUDA_REDUCE_MAX_BLOCKS 1024
void mp_cuda_sumsq_acc_f32(double *acc, double *partials, const float *x, int64_t n, cudaStream_t s);
void mp_cuda_sumsq_acc_bf16(double *acc, double *partials, const mp_bf16 *x, int64_t n, cudaStream_t s);
void mp_cuda_sum_acc_f32(double *acc, double *partials, const float *x, int64_t n, cudaStream_t s);
/* The gradient-clip factor on the device (layers/llama_train.c's rule), from the GLOBAL sum of squares
 * (after the caller's all-reduce): norm = sqrt(*sumsq); *scale = grad_clip > 0 && norm > grad_clip ?
 * grad_clip / (norm + 1e-6) : 1; a non-finite norm gives 0 (the caller skips the step). One thread. */
void mp_cuda_clip_scale(float *scale, const double *sumsq, double grad_clip, cudaStream_t s);

/* ---- embedding, vocab-parallel (k_embed.cu) ----
 * This rank's table rows are global ids [v_start, v_start + v_local). out[n] = wte[tok[n] - v_start]
 * (converted to bf16) when in range, else zeros (the caller all-reduces over tp). */
void mp_cuda_embed_fwd_f32(mp_bf16 *out, const int32_t *tok, const float *wte, int N, int D, int v_start,
                           int v_local, cudaStream_t s);
void mp_cuda_embed_fwd_bf16(mp_bf16 *out, const int32_t *tok, const mp_bf16 *wte, int N, int D, int v_start,
                            int v_local, cudaStream_t s);
/* dwte[tok[n] - v_start] += dout[n] for in-range tokens, DETERMINISTIC: the (row, n) pairs are sorted
 * (a bitonic network on unique 64-bit keys row << 32 | n, so the sorted order is unique), then the
 * first position of each row's run sums that row's dout rows in increasing n, in fp32, and adds once
 * into dwte. keys: device scratch of mp_cuda_embed_bwd_scratch_bytes(N) bytes. */
size_t mp_cuda_embed_bwd_scratch_bytes(int N);
void mp_cuda_embed_bwd(float *dwte, const mp_bf16 *dout, const int32_t *tok, void *keys, int N, int D,
                       int v_start, int v_local, cudaStream_t s);

/* ---- RMSNorm (k_rmsnorm.cu) ----
 * y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) (sum in fp32); rstd [N] saved for backward. */
void mp_cuda_rmsnorm_fwd(mp_bf16 *y, float *rstd, const mp_bf16 *x, const mp_bf16 *w, int N, int D, float eps,
                         cudaStream_t s);
/* dx ACCUMULATES (+=, the residual stream's gradient), dw (fp32) accumulates. dw is reduced
 * deterministically, in an order fixed by N and D (never by alignment or timing): row chunk c (<= 512
 * chunks of consecutive rows) sums its rows into partial[c, :] — W warps (a function of D) each over
 * its rows in order, then the warps in order —, then a second kernel adds the partials in chunk order.
 * partial: device scratch of mp_cuda_rmsnorm_bwd_scratch_floats(N, D) floats. dx must not alias dy/x. */
size_t mp_cuda_rmsnorm_bwd_scratch_floats(int N, int D);
void mp_cuda_rmsnorm_bwd(mp_bf16 *dx, float *dw, float *partial, const mp_bf16 *dy, const mp_bf16 *x,
                         const mp_bf16 *w, const float *rstd, int N, int D, cudaStream_t s);

/* Floats of partials the deterministic column reductions over M rows of D columns need (rmsnorm_bwd: M = N;
 * head_rmsnorm_bwd: M = N H, D = hd; bias_bwd: M = N, D = cols): nchunks(M) * D. */
size_t mp_cuda_chunk_partial_floats(int64_t M, int D);

/* ---- per-head RMSNorm (k_rmsnorm.cu): Qwen3's q_norm and k_norm ----
 * In place over the H heads of hd columns at the start of each of N rows of x (row stride ldx >= H hd;
 * columns past H hd neither read nor written); per (row n, head h), m = n H + h, as mp_cuda_rmsnorm_fwd
 * does per row: y = x * rstd * w, rstd[m] = 1/sqrt(mean(x^2) + eps) (sum in fp32), w [hd] bf16.
 * x_save, when not NULL, receives the input dense [N, H hd] (bitwise), what the backward reads.
 * 1 <= hd <= MP_CUDA_HEAD_RMSNORM_MAX_HD (one warp's shared accumulator of the backward). */
#define MP_CUDA_HEAD_RMSNORM_MAX_HD 12288
void mp_cuda_head_rmsnorm_fwd(mp_bf16 *x, int ldx, mp_bf16 *x_save, float *rstd, const mp_bf16 *w, int N, int H,
                              int hd, float eps, cudaStream_t s);
/* In place: dx (the heads of x, row stride ldx) holds the gradient of the normed output and receives the
 * gradient of the input (WRITTEN, =): dx = rstd (w dy - x rstd^2 mean(w dy x)) per (row, head); dw [hd]
 * (fp32) accumulates sum dy x rstd over every (row, head), reduced as mp_cuda_rmsnorm_bwd's dw with the
 * N H (row, head) pairs as its rows (order fixed by N H and hd). partial: device scratch of
 * mp_cuda_chunk_partial_floats(N H, hd) floats. dx must not alias x_save. */
void mp_cuda_head_rmsnorm_bwd(mp_bf16 *dx, int ldx, float *dw, float *partial, const mp_bf16 *x_save,
                              const float *rstd, const mp_bf16 *w, int N, int H, int hd, cudaStream_t s);

/* ---- RoPE, HF rotate_half (k_rope.cu) ----
 * x [B,T,H,hd] with row stride ld (>= H*hd) in place; token t has position pos0 + t; cos/sin [max_pos, hd/2]
 * fp32 (mp_rope_tables); pair (i, i + hd/2) rotated by +angle (fwd) or -angle (bwd: the gradient of a
 * rotation). hd even, pos0 >= 0, pos0 + T <= max_pos. 16-byte accesses only when ld % 8 == 0 (else 2-byte). */
void mp_cuda_rope_fwd(mp_bf16 *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0,
                      int max_pos, int ld, cudaStream_t s);
void mp_cuda_rope_bwd(mp_bf16 *dx, const float *cos_t, const float *sin_t, int B, int T, int H, int hd, int pos0,
                      int max_pos, int ld, cudaStream_t s);

/* ---- SwiGLU (k_swiglu.cu) ----
 * out = silu(gate) * up; bwd writes dgate, dup (=); math in fp32. out/dgate/dup may alias their own
 * inputs elementwise (each element is read before it is written, by the same thread). */
void mp_cuda_swiglu_fwd(mp_bf16 *out, const mp_bf16 *gate, const mp_bf16 *up, int64_t n, cudaStream_t s);
void mp_cuda_swiglu_bwd(mp_bf16 *dgate, mp_bf16 *dup, const mp_bf16 *dout, const mp_bf16 *gate,
                        const mp_bf16 *up, int64_t n, cudaStream_t s);

/* ---- causal GQA flash attention (k_attn_fwd.cu, k_attn_bwd.cu) ----
 * q [B,T,H,hd] (row stride ldq >= H*hd), k, v [B,T,KV,hd] (row stride ldkv >= KV*hd) bf16: column blocks
 * of the fused [q | k | v] rows in training; query head h reads kv head h / (H/KV); scale = 1/sqrt(hd).
 * out [B,T,H,hd] bf16; lse [B,H,T] fp32, lse = log sum_{j<=t} exp(scale q_t.k_j) (natural log).
 * Scores, softmax and the output accumulator are fp32. window: core/backend.h attn_fwd's sliding window
 * (query t sees keys t - window < j <= t; 0 = full causal), in every attention entry point below.
 * Limits: 1 <= hd <= MP_CUDA_ATTN_MAX_HD, H % KV == 0, B*H <= 65535 (grid y), window >= 0. */
#define MP_CUDA_ATTN_MAX_HD 128
void mp_cuda_attn_fwd(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v, int B,
                      int T, int H, int KV, int hd, int ldq, int ldkv, int window, cudaStream_t s);
/* The tensor-core kernels (k_attn_mma.cu; mp_cuda_attn_fwd / _bwd dispatch to them): hd 64 or 128, pointers
 * 16-byte aligned, row strides multiples of 8 (the 16-byte tile loads). _ok says whether they take a call
 * (off with the environment MP_CUDA_ATTN=simt). The backward takes D = rowsum(dout * out) [B,H,T],
 * computed by mp_cuda_attn_bwd's first pass. */
int mp_cuda_attn_mma_ok(const void *a, const void *b, const void *c, const void *d, int hd, int ldq, int ldkv);
void mp_cuda_attn_fwd_mma(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v, int B,
                          int T, int H, int KV, int hd, int ldq, int ldkv, int window, cudaStream_t s);
void mp_cuda_attn_bwd_mma(mp_bf16 *dq, mp_bf16 *dk, mp_bf16 *dv, const float *D, const mp_bf16 *dout,
                          const float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v, int B, int T, int H,
                          int KV, int hd, int ldq, int ldkv, int window, cudaStream_t s);
/* The KV-cache forward (k_attn_kv.cu): Tq queries at positions pos0 .. pos0+Tq-1 against k, v [B,Tc,KV,hd]
 * holding positions 0 .. pos0+Tq-1; out [B,Tq,H,hd], lse [B,H,Tq]. Limits as above, and Tq <= 65535. */
void mp_cuda_attn_fwd_kv(mp_bf16 *out, float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v, int B,
                         int Tq, int pos0, int Tc, int H, int KV, int hd, int window, cudaStream_t s);
/* Gradients (=) of the forward that produced out and lse. scratch: [B,H,T] floats, receives
 * D = rowsum(dout * out). dk, dv of a kv head are summed over its H/KV query heads by one thread per
 * element in a fixed order; dq is computed by a separate pass over key tiles (no atomics). */
void mp_cuda_attn_bwd(mp_bf16 *dq, mp_bf16 *dk, mp_bf16 *dv, float *scratch, const mp_bf16 *dout,
                      const mp_bf16 *out, const float *lse, const mp_bf16 *q, const mp_bf16 *k, const mp_bf16 *v,
                      int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window, cudaStream_t s);

/* ---- vocab-parallel cross-entropy (k_xent.cu) ----
 * logits [N, v_local] (row stride v_local), bf16 (_bf16) or fp32 (_f32); columns >= v_valid are vocab
 * padding and never take part. Same five steps as core/backend.h, the caller all-reducing over tp
 * between them (MAX of rowmax, SUM of sumexp, SUM of tlogit). One block per row, fp32 math, fixed
 * tree reductions. */
void mp_cuda_xent_rowmax_bf16(float *rowmax, const mp_bf16 *logits, int N, int v_local, int v_valid,
                              cudaStream_t s);
void mp_cuda_xent_rowmax_f32(float *rowmax, const float *logits, int N, int v_local, int v_valid, cudaStream_t s);
/* sumexp[n] = sum_j exp(logits[n,j] - rowmax[n]) (rowmax: the global max); a -inf max gives 0. */
void mp_cuda_xent_sumexp_bf16(float *sumexp, const mp_bf16 *logits, const float *rowmax, int N, int v_local,
                              int v_valid, cudaStream_t s);
void mp_cuda_xent_sumexp_f32(float *sumexp, const float *logits, const float *rowmax, int N, int v_local,
                             int v_valid, cudaStream_t s);
/* tlogit[n] = logits[n, tgt[n] - v_start] if the target is local (and < v_valid), else 0. */
void mp_cuda_xent_target_bf16(float *tlogit, const mp_bf16 *logits, const int32_t *tgt, int N, int v_local,
                              int v_valid, int v_start, cudaStream_t s);
void mp_cuda_xent_target_f32(float *tlogit, const float *logits, const int32_t *tgt, int N, int v_local,
                             int v_valid, int v_start, cudaStream_t s);
/* rowmax, sumexp and tlogit in one read of the logits (the table's xent_fwd; with one vocab shard, tp = 1,
 * they are the global values): rowmax[n] the max of the first v_valid columns, sumexp[n] the sum of
 * exp(logit - rowmax[n]) over them (0 when none is finite), tlogit[n] = logits[n, tgt[n] - v_start] when
 * that column is in [0, v_local) (core/backend_cpu.c's rule), else 0. rowmax is bitwise the rowmax launcher's;
 * sumexp is summed in another fixed order (online rescaling), so it agrees with the sumexp launcher's to a
 * few ulp, not bitwise; repeatable run to run, and independent of the logits' alignment. */
void mp_cuda_xent_fwd_bf16(float *rowmax, float *sumexp, float *tlogit, const mp_bf16 *logits, const int32_t *tgt,
                           int N, int v_local, int v_valid, int v_start, cudaStream_t s);
void mp_cuda_xent_fwd_f32(float *rowmax, float *sumexp, float *tlogit, const float *logits, const int32_t *tgt, int N,
                          int v_local, int v_valid, int v_start, cudaStream_t s);
/* sumexp[n] *= exp(local_max[n] - rowmax[n]), 0 where local_max[n] is -inf (the table's xent_rescale). */
void mp_cuda_xent_rescale(float *sumexp, const float *local_max, const float *rowmax, int N, cudaStream_t s);
/* losses[n] = log(sumexp[n]) + rowmax[n] - tlogit[n] (all three global). */
void mp_cuda_xent_loss(float *losses, const float *rowmax, const float *sumexp, const float *tlogit, int N,
                       cudaStream_t s);
/* In place: logits <- dloss * (softmax - onehot(tgt)), in the logits' own dtype; padding columns 0;
 * a row with a -inf max (no finite logit) gets no softmax term, only the -dloss at a local target. */
void mp_cuda_xent_bwd_bf16(mp_bf16 *logits, const float *rowmax, const float *sumexp, const int32_t *tgt,
                           float dloss, int N, int v_local, int v_valid, int v_start, cudaStream_t s);
void mp_cuda_xent_bwd_f32(float *logits, const float *rowmax, const float *sumexp, const int32_t *tgt, float dloss,
                          int N, int v_local, int v_valid, int v_start, cudaStream_t s);

/* ---- AdamW (k_adamw.cu) ----
 * core/backend_cpu.c's update, element by element, on fp32 p, g, m, v:
 *   g' = g * gs; m = b1 m + (1-b1) g'; v = b2 v + (1-b2) g'^2;
 *   p -= lr * ((m * bc1) / (sqrtf(v * bc2) + eps) + wd * p),  bc1 = 1/(1-b1^step), bc2 = 1/(1-b2^step)
 * (the corrections computed on the host in double, as on the CPU). gs = grad_scale (a host value: what
 * core/backend.h's adamw passes) times *grad_scale_dev when grad_scale_dev is not NULL (a DEVICE pointer,
 * e.g. the clip factor from mp_cuda_clip_scale, read on the device, so no host sync). wd = 0 for
 * tensors without decay. p_bf16, when not NULL, receives the updated weights rounded to bf16 in the same
 * pass. */
void mp_cuda_adamw(float *p, mp_bf16 *p_bf16, const float *g, float *m, float *v, int64_t n, float lr, float beta1,
                   float beta2, float eps, float wd, int step, float grad_scale, const float *grad_scale_dev,
                   cudaStream_t s);

#ifdef __cplusplus
}
#endif

#endif
