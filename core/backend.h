/*
 * core/backend.h — the device backend: a small table of function pointers (as ggml's backend
 * interface), so layers/ and cli/ never branch on CPU vs CUDA.
 *
 * All buffers passed to ops are device buffers of that backend (on CPU: host memory). Layout is
 * row-major. Activations are [N, D] with N = B*T tokens, token n = b*T + t. Attention tensors are
 * [B, T, heads, head_dim].
 *
 * Two precisions (bf16 compute, fp32 masters: docs/DESIGN_NOTES.md "Precision in the table"). COMPUTE tensors are typed `void *` and hold
 * elements of the backend's act_dtype: activations and their gradients, and the weights as the ops read
 * them (a compute copy of the fp32 masters, or the masters themselves when act_dtype is fp32). Everything
 * else is `float *` and fp32 on every device: master weights, Adam moments, weight gradients (a GEMM
 * that computes one writes fp32: c_dtype), per-row statistics (RMSNorm rstd, attention lse, the
 * cross-entropy pieces and losses), RoPE tables. act_dtype is fp32 on the CPU backend ("cpu") and bf16
 * on CUDA and on the CPU emulation of the GPU's precision ("cpu-bf16"); math inside an op is fp32
 * whatever the storage. Checkpoints hold only fp32 state, so they do not depend on the device.
 *
 * Gradient conventions (uniform, so callers can rely on them):
 *   - weight gradients (dw, dwte, ...) ACCUMULATE (+=): micro-batches add up; the caller zeroes them.
 *   - activation gradients WRITE (=) unless the op's comment says "accumulates".
 *
 * One contract for every device, so that no op needs a host round-trip or device-sized scratch that a
 * GPU could not afford:
 *   - attention is flash-style: the forward keeps the output and the per-row log-sum-exp (O(B*H*T)),
 *     never the T x T probabilities; the backward recomputes them block by block;
 *   - reductions (the loss sum, the gradient sum of squares) add into device scalars (a double in
 *     device memory); the caller copies those to the host once per optimizer step.
 *
 * Vocab-parallel cross-entropy is split into local pieces so that the caller can all-reduce between
 * them over the tensor-parallel group (MAX of row maxima, SUM of exp sums, SUM of target logits); with
 * tp = 1 those all-reduces are no-ops. Columns of the local logits at index >= v_valid are vocab padding
 * and never take part.
 */
#ifndef MP_BACKEND_H
#define MP_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include "core/alloc.h"
#include "core/error.h"
#include "core/tensor.h"

typedef struct mp_backend mp_backend;
/* Opaque handles of the device's queues and markers (cudaStream_t / cudaEvent_t on CUDA). A NULL stream
 * means the backend's compute stream, on which every op of the table runs, in order. */
typedef struct mp_stream_s *mp_stream;
typedef struct mp_event_s *mp_event;

/* One column sum of a backward op (rmsnorm_bwd's dw, bias_bwd's db, head_rmsnorm_bwd's dw): rows x cols
 * (head_rmsnorm_bwd: N H rows of hd), what scratch_bytes and scratch_reserve size the scratch by. */
typedef struct mp_colsum {
    int64_t rows;
    int cols;
} mp_colsum;

/* One run of an adamw call's elements: n consecutive ones, with weight decay (decay 1) or without (0). */
typedef struct mp_adamw_seg {
    int64_t n;
    int decay;
} mp_adamw_seg;

/* Walks the pieces of elements [c0, c1) that lie in one segment each of an adamw call's segs: how a
 * backend applies the weight-decay mask to one chunk of its work. Use:
 *   mp_adamw_pieces it = mp_adamw_pieces_of(segs, nsegs, c0, c1);
 *   while (mp_adamw_piece(&it, &i0, &i1, &decay)) ... elements [i0, i1), decayed or not ...
 * segs NULL: the one piece [c0, c1), decayed. */
typedef struct mp_adamw_pieces {
    const mp_adamw_seg *segs;
    int nsegs, k;        /* the next segment to look at */
    int64_t s0, c0, c1;  /* segment k's first element; the range */
} mp_adamw_pieces;

static inline mp_adamw_pieces mp_adamw_pieces_of(const mp_adamw_seg *segs, int nsegs, int64_t c0, int64_t c1) {
    return (mp_adamw_pieces){segs, segs ? nsegs : 1, 0, 0, c0, c1};
}

/* The next nonempty piece: 1 and [*i0, *i1), *decay; 0 when none is left. */
static inline int mp_adamw_piece(mp_adamw_pieces *it, int64_t *i0, int64_t *i1, int *decay) {
    for (; it->k < it->nsegs && it->s0 < it->c1; it->k++) {
        const int64_t n = it->segs ? it->segs[it->k].n : it->c1 - it->s0, e = it->s0 + n;
        const int64_t a = it->s0 > it->c0 ? it->s0 : it->c0, b = e < it->c1 ? e : it->c1;
        *decay = it->segs ? it->segs[it->k].decay : 1;
        it->s0 = e;
        if (a < b) {
            it->k++;
            *i0 = a, *i1 = b;
            return 1;
        }
    }
    return 0;
}

struct mp_backend {
    const char *name;      /* "cpu", "cuda" */
    mp_device device;
    int host_memory;       /* its buffers are host memory the CPU reads directly (a sync save then writes
                            * straight from the shards, with no staging copy) */
    mp_dtype act_dtype;    /* element type of compute tensors (the `void *` buffers below) */
    int attn_max_head_dim; /* the largest head_dim attn_fwd, attn_fwd_kv and attn_bwd support (0: no limit):
                            * llama_plan_memory refuses a larger one before anything runs (the ops
                            * return void, so a kernel's limit could only abort mid-run) */

    /* ---- memory ---- */
    void *(*alloc)(mp_backend *be, size_t bytes, mp_mem_cat cat);   /* zero-filled; aborts on OOM */
    void (*free)(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat);
    void (*memset0)(mp_backend *be, void *p, size_t bytes);
    /* Device to host. A training step calls it once (its loss and gradient sums, together); each call
     * may synchronise the device, so no op of this table needs one to do its work. */
    void (*to_host)(mp_backend *be, void *host_dst, const void *dev_src, size_t bytes);
    /* Host to device, ordered after the ops queued before it; on return host_src may be reused (the
     * host waits for the copy, so on a GPU it drains the compute stream: start-up and tools only). */
    void (*to_device)(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes);
    /* Host to device WITHOUT a host wait (a training step's tokens): the copy is enqueued on the compute
     * stream after what is queued there, and `done` is recorded after it (as event_record on the compute
     * stream, so recording it again after a later upload makes one wait cover both). The device reads
     * host_src at some moment before done completes: the host must not write or free host_src until
     * event_sync(be, done) (or synchronize) has returned. dev_dst is written in stream order, so ops
     * queued before still read its old contents and ops queued after read the new. host_src should come
     * from host_alloc (from pageable memory the copy may not be asynchronous). On the CPU a memmove. */
    void (*to_device_async)(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes, mp_event done);
    /* Host memory the device copies to and from at full speed: page-locked on CUDA (an async save's
     * stall is then one device-to-host copy into it, and token batches go up from it without a bounce),
     * plain host memory on the CPU. Zero-filled; charged to cat; aborts on OOM. */
    void *(*host_alloc)(mp_backend *be, size_t bytes, mp_mem_cat cat);
    void (*host_free)(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat);

    /* ---- streams and events ----
     * Communication runs on streams of its own (an NCCL communicator is given one), so it can overlap
     * compute; events order work across streams without the host: record an event after work on one
     * stream, make another stream wait for it. The host waits only in event_sync and synchronize
     * (and in to_host). On the CPU every op has finished when it returns: streams and events are tokens and
     * every wait returns at once, which is the same contract with nothing in flight. */
    mp_stream (*stream_create)(mp_backend *be);
    void (*stream_destroy)(mp_backend *be, mp_stream s);
    mp_event (*event_create)(mp_backend *be);
    void (*event_destroy)(mp_backend *be, mp_event e);
    void (*event_record)(mp_backend *be, mp_event e, mp_stream s);        /* after what s has queued */
    void (*stream_wait_event)(mp_backend *be, mp_stream s, mp_event e);   /* s's later work waits for e */
    void (*event_sync)(mp_backend *be, mp_event e);                       /* the host waits for e */
    void (*copy)(mp_backend *be, void *dst, const void *src, size_t bytes);   /* device to device */
    void (*synchronize)(mp_backend *be);   /* the host waits for everything queued on every stream */

    /* ---- dense linear algebra ----
     * C[M,N] = alpha * op(A) * op(B) + beta * C, op(X) = X or X^T; lda/ldb/ldc are row strides of the
     * matrices as stored (row-major).
     * A and B are compute tensors; C has c_dtype: act_dtype, or MP_F32 for weight gradients (which
     * then accumulate in fp32 with beta = 1). The products accumulate in fp32 on every device. */
    void (*gemm)(mp_backend *be, int trans_a, int trans_b, int M, int N, int K, float alpha,
                 const void *A, int lda, const void *B, int ldb, float beta, void *C, int ldc, mp_dtype c_dtype);

    /* ---- elementwise ---- */
    void (*add)(mp_backend *be, void *out, const void *a, const void *b, int64_t n);     /* out = a+b, compute */
    void (*accumulate)(mp_backend *be, float *dst, const float *src, int64_t n);         /* dst += src, fp32 */
    void (*scale)(mp_backend *be, float *x, float s, int64_t n);                          /* x *= s, fp32 */
    /* Conversions between fp32 and act_dtype (copies when act_dtype is fp32); no overlap. */
    void (*to_act)(mp_backend *be, void *dst, const float *src, int64_t n);
    void (*from_act)(mp_backend *be, float *dst, const void *src, int64_t n);

    /* ---- reductions into a device scalar ----
     * acc points to ONE double in device memory; the result stays there (no host copy, no sync): the
     * caller reads its scalars with one to_host when it needs them (once per optimizer step). */
    /* *acc += sum_i x_i^2: the sum formed in double from 0, in an order fixed by n alone (not by the
     * thread count), then added to *acc. */
    void (*sumsq_acc)(mp_backend *be, double *acc, const float *x, int64_t n);
    /* *acc += sum_i x_i: the sum formed in double from 0, in an order fixed by n alone, then added. */
    void (*sum_acc)(mp_backend *be, double *acc, const float *x, int64_t n);

    /* ---- embedding (vocab-parallel) ----
     * Rows of wte are global vocab ids [v_start, v_start + v_local). out[n] = wte[tok[n]-v_start] when
     * tok[n] is in range, else 0 (the caller all-reduces over tp). */
    void (*embed_fwd)(mp_backend *be, void *out, const int32_t *tok, const void *wte, int N, int D,
                      int v_start, int v_local);
    /* dwte[tok[n]-v_start] += dout[n] for in-range tokens. */
    void (*embed_bwd)(mp_backend *be, float *dwte, const void *dout, const int32_t *tok, int N, int D,
                      int v_start, int v_local);

    /* ---- RMSNorm ---- y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps); rstd[N] saved for backward. */
    void (*rmsnorm_fwd)(mp_backend *be, void *y, float *rstd, const void *x, const void *w, int N, int D,
                        float eps);
    /* dx ACCUMULATES (+=) (the residual stream adds into it); dw accumulates. */
    void (*rmsnorm_bwd)(mp_backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w,
                        const float *rstd, int N, int D);

    /* ---- biases and per-head RMSNorm (Qwen2's q/k/v biases, Qwen3's q_norm and k_norm) ----
     * Both act on a column block of a wider row (the q | k | v columns of the fused projection): row
     * stride ldx, columns outside the block neither read nor written. */
    /* x[n, j] += b[j] for n < N, j < cols; b is a compute tensor; the sum is formed in fp32 and rounded
     * once to act_dtype. Under bf16 x is the GEMM's stored (already rounded) output, so q/k/v round twice
     * (GEMM, then bias): cpu-bf16 stores exactly that; a kernel fusing the bias into the GEMM epilogue
     * would round once and differ from it by up to one bf16 ulp. */
    void (*bias_add)(mp_backend *be, void *x, int ldx, const void *b, int N, int cols);
    /* db[j] += sum_n dx[n, j] (fp32, accumulates; the sum in an order fixed by N alone). */
    void (*bias_bwd)(mp_backend *be, float *db, const void *dx, int ldx, int N, int cols);
    /* In place over the H heads of hd columns at the start of each of N rows of x: per (row, head)
     * y = x * rstd * w, rstd = 1/sqrt(mean(x^2) + eps) over the head's hd values, w [hd] a compute tensor.
     * rstd [N*H] (index n*H + h) is written; x_save, when not NULL, receives the input dense [N, H*hd]
     * (what the backward needs; NULL for inference). Arithmetic as rmsnorm_fwd's: rstd from the fp32
     * (widened) inputs, stored fp32; y = (x * rstd) * w formed in fp32, rounded once. */
    void (*head_rmsnorm_fwd)(mp_backend *be, void *x, int ldx, void *x_save, float *rstd, const void *w, int N,
                             int H, int hd, float eps);
    /* In place: dx (H heads of hd columns per row, row stride ldx) holds the gradient of the normed
     * output and receives the gradient of the input (=); x_save and rstd as the forward wrote them; dw [hd]
     * accumulates (fp32) sum over (n, h) of dy * x * rstd, read from dy BEFORE dx overwrites it; dx =
     * rstd * (w dy - x c), c = rstd^2 mean(w dy x) (rmsnorm_bwd's expression, written, not accumulated).
     * dw's sum in an order fixed by N and H alone. Each tp rank sees only its own heads: the caller sums
     * dw over tp (llama_sync_grads). */
    void (*head_rmsnorm_bwd)(mp_backend *be, void *dx, int ldx, float *dw, const void *x_save, const float *rstd,
                             const void *w, int N, int H, int hd);

    /* ---- RoPE (HF rotate_half: pairs i and i + hd/2) ----
     * x is [B, T, H, hd] with row stride ld (elements from one token's heads to the next's, ld >= H*hd:
     * the heads may be a column block of a wider row, as q and k are of the fused [q | k | v] projection,
     * layers/llama.c). Token t has position pos0 + t. cos/sin tables are [max_pos, hd/2] fp32, row p the
     * angles of position p: the model computes them (layers/rope.h); the ops only rotate by them.
     * fwd rotates in place; bwd applies the inverse rotation in place (the gradient of a rotation).
     * Elements outside the H*hd columns of each row are neither read nor written. */
    void (*rope_fwd)(mp_backend *be, void *x, const float *cos_t, const float *sin_t, int B, int T, int H,
                     int hd, int pos0, int ld);
    void (*rope_bwd)(mp_backend *be, void *dx, const float *cos_t, const float *sin_t, int B, int T, int H,
                     int hd, int pos0, int ld);

    /* ---- causal grouped-query attention, flash-style (no T x T matrix anywhere) ----
     * q [B,T,H,hd] with row stride ldq (elements from token to token, ldq >= H*hd), k,v [B,T,KV,hd] with
     * row stride ldkv (>= KV*hd): the three may be column blocks of one fused [q | k | v] buffer
     * (ldq = ldkv = (H + 2 KV) hd). Query head h uses kv head h / (H/KV). scale = 1/sqrt(hd).
     * Writes out [B,T,H,hd] (dense, row stride H*hd) and lse [B,H,T], lse[b,h,t] = log sum_{j<=t}
     * exp(scale q_t . k_j) (natural log, in float): with q, k, v and out, all that the backward needs.
     * window: sliding-window attention as transformers computes it (Mistral, Qwen2's sliding layers,
     * Phi-3): query t sees keys j with t - window < j <= t (window keys, itself included), so the sums
     * above run over max(0, t - window + 1) <= j <= t; window = 0 is full causal (exactly the path without
     * a window: bitwise the same results), and a window >= T is full causal too. Backends skip key blocks
     * wholly outside every row's window (the speed of a window). The same rule in attn_fwd_kv (by
     * position) and attn_bwd (which must get the forward's window). */
    void (*attn_fwd)(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                     int B, int T, int H, int KV, int hd, int ldq, int ldkv, int window);
    /* The same attention for Tq new queries of sequences whose earlier keys are cached (generation with a
     * KV cache, forward only; all dense): q [B,Tq,H,hd] are positions pos0 .. pos0+Tq-1; k, v [B,Tc,KV,hd]
     * (Tc >= pos0 + Tq, the cache's capacity) hold positions 0 .. pos0+Tq-1 in their first rows (the rest
     * is never read). Writes out [B,Tq,H,hd] and lse [B,H,Tq]. pos0 = 0, Tq = Tc = T is attn_fwd with
     * dense strides. window as attn_fwd's: query position t sees cache rows t - window < j <= t. */
    void (*attn_fwd_kv)(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                        int B, int Tq, int pos0, int Tc, int H, int KV, int hd, int window);
    /* Gradients of the forward that produced out and lse from q, k, v; the probabilities are recomputed
     * blockwise as exp(scale q.k - lse). dq (row stride ldq, as q), dk, dv (row stride ldkv, as k, v) are
     * written (=), only their head columns; dout and out are dense. scratch must hold B*H*T floats (the
     * backend may keep D = rowsum(dout * out) there) and may alias nothing else. */
    void (*attn_bwd)(mp_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                     const void *out, const float *lse, const void *q, const void *k, const void *v, int B,
                     int T, int H, int KV, int hd, int ldq, int ldkv, int window);

    /* ---- SwiGLU ---- out = silu(gate) * up, elementwise over n. */
    void (*swiglu_fwd)(mp_backend *be, void *out, const void *gate, const void *up, int64_t n);
    /* dgate, dup written (=). */
    void (*swiglu_bwd)(mp_backend *be, void *dgate, void *dup, const void *dout, const void *gate,
                       const void *up, int64_t n);

    /* ---- vocab-parallel cross-entropy over logits [N, V_local] (row stride V_local) ---- */
    /* rowmax[n] = max over valid local columns. */
    void (*xent_rowmax)(mp_backend *be, float *rowmax, const void *logits, int N, int v_local, int v_valid);
    /* sumexp[n] = sum_j exp(logits[n,j] - rowmax[n]) over valid local columns (rowmax = global max). */
    void (*xent_sumexp)(mp_backend *be, float *sumexp, const void *logits, const float *rowmax, int N,
                        int v_local, int v_valid);
    /* tlogit[n] = logits[n, tgt[n]-v_start] if the target is local, else 0. */
    void (*xent_target)(mp_backend *be, float *tlogit, const void *logits, const int32_t *tgt, int N,
                        int v_local, int v_start);
    /* losses[n] = log(sumexp[n]) + rowmax[n] - tlogit[n] (all three global). */
    void (*xent_loss)(mp_backend *be, float *losses, const float *rowmax, const float *sumexp,
                      const float *tlogit, int N);
    /* Optional (NULL: the caller runs xent_rowmax, xent_sumexp and xent_target): the three in one sweep
     * of the local logits, rowmax the local max, sumexp relative to it (online max and sum of exp), so
     * with one vocab shard they are the global values. */
    void (*xent_fwd)(mp_backend *be, float *rowmax, float *sumexp, float *tlogit, const void *logits,
                     const int32_t *tgt, int N, int v_local, int v_valid, int v_start);
    /* Optional, with xent_fwd over several vocab shards (tp > 1): sumexp[n] *= exp(local_max[n] - rowmax[n]),
     * taking a shard's sum relative to its own max (xent_fwd) to one relative to the global max rowmax
     * (all-reduced); 0 where local_max is -inf (no valid column in the shard). Then an all-reduce sum. */
    void (*xent_rescale)(mp_backend *be, float *sumexp, const float *local_max, const float *rowmax, int N);
    /* In place: logits <- dloss * (softmax - onehot(tgt)) with global rowmax/sumexp; padding columns 0. */
    void (*xent_bwd)(mp_backend *be, void *logits, const float *rowmax, const float *sumexp,
                     const int32_t *tgt, float dloss, int N, int v_local, int v_valid, int v_start);

    /* ---- optimizer ----
     * AdamW on n fp32 elements; step >= 1 (bias correction uses it); decoupled weight decay wd*lr*p.
     * The weight-decay mask: segs (nsegs >= 1 of them, their n summing to n) cut the n elements into
     * consecutive runs with decay (wd) and without (0), so one pass covers a whole contiguous shard of
     * matrices and norm weights; segs NULL (nsegs 0): every element decays by wd. p_act, when not NULL,
     * is the compute copy of p (act_dtype): it receives the updated weights in the same pass (NULL when
     * the compute copy is p itself). */
    void (*adamw)(mp_backend *be, float *p, void *p_act, const float *g, float *m, float *v, int64_t n,
                  const mp_adamw_seg *segs, int nsegs, float lr, float beta1, float beta2, float eps, float wd,
                  int step, float grad_scale);

    /* ---- the ops' own scratch (optional: NULL where the ops keep none, as on the CPU) ----
     * A backend may keep scratch of its own for backward ops (CUDA: embed_bwd's sort keys and the partials
     * of the deterministic column sums of rmsnorm_bwd, bias_bwd and head_rmsnorm_bwd), grown on first use
     * to the largest call seen. A model names its largest calls: embed_bwd over `tokens` tokens and column
     * sums over the rows x cols blocks cs[0 .. ncs). scratch_bytes: the bytes that scratch then holds (the
     * memory plan counts them as activations); scratch_reserve: allocates them now, so that no step
     * allocates (or, on a GPU, waits for the device to do so). */
    int64_t (*scratch_bytes)(int tokens, const mp_colsum *cs, int ncs);
    void (*scratch_reserve)(mp_backend *be, int tokens, const mp_colsum *cs, int ncs);

    void *impl;            /* backend private state */
};

/* The CPU backend (a static table; no init needed): act_dtype fp32. Its kernels are those of the best
 * ISA level this CPU runs, or of MP_ISA's level (core/cpu_isa.c), chosen at the first call. */
mp_backend *mp_backend_cpu(void);
/* The ISA level of the CPU kernels mp_backend_cpu() runs: "v2", "v3" or "v4" ("native", or the -march
 * value, in a one-level build). */
const char *mp_cpu_isa(void);
/* OpenBLAS's kernel set as OpenBLAS chose it ("Cooperlake", "Haswell", ...), with " (OPENBLAS_CORETYPE)" when
 * that variable chose it. GEMM rounding depends on it as on the ISA level; reported beside it. */
const char *mp_cpu_blas_core(void);
/* MP_EINPUT when MP_ISA names a level this build lacks or this CPU cannot run (the message names the
 * level and the best one the CPU runs); MP_OK when MP_ISA is unset or valid. mp_backend_get checks it. */
mp_code mp_cpu_isa_check(mp_err *err);
/* The CPU emulation of the GPU's precision (core/backend_cpu_bf16.c): act_dtype bf16, every op the CPU
 * kernel on its inputs widened to fp32, outputs rounded to bf16 (round to nearest even) as the CUDA
 * kernels store them. Slow (it converts around every op); it exists so that the bf16 paths of layers/
 * (compute copies, bf16 collectives, fp32 weight gradients) run and are tested on machines without a GPU. */
mp_backend *mp_backend_cpu_bf16(void);

/* Bytes of one compute element, and a compute buffer advanced by i elements. */
static inline size_t mp_act_size(const mp_backend *be) { return mp_dtype_size(be->act_dtype); }
static inline void *mp_act_at(const mp_backend *be, const void *p, int64_t i) {
    return (char *)(uintptr_t)p + (size_t)i * mp_act_size(be);
}
/* The backend for "cpu", "cpu-bf16" or "cuda"; MP_EDEVICE with a clear message if unavailable (e.g. no GPU). */
mp_code mp_backend_get(const char *name, mp_backend **out, mp_err *err);

#endif
