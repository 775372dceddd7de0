/*
 * layers/llama.c — creation, forward and backward of the Llama model under the TP plan of docs/PARALLEL.md.
 *
 * One code path for every mesh: with tp = 1 the tp collectives are identities (self communicator or a
 * group of one), with dp = 1 the FSDP calls are no-ops. Per block (local sizes: Hl = H/tp heads,
 * KVl = KV/tp kv heads, Il = this rank's intermediate columns):
 *
 *   x [n_res,D] -> RMSNorm -> gather_in -> q,k,v (column-parallel) [+ bias] [-> per-head RMSNorm of q and
 *     k] -> RoPE -> causal GQA attention
 *     -> o (row-parallel, partial sums) -> reduce_out (+ residual) -> RMSNorm -> gather_in
 *     -> gate, up (column-parallel) -> SwiGLU -> down (row-parallel) -> reduce_out (+ residual)
 *
 * The MLP runs feature-major: its activations are stored transposed ([Il, N]: one row per intermediate
 * feature), so gate^T and up^T are two contiguous blocks of one buffer, [gate^T; up^T] = [Wg; Wu] x^T.
 * With the two weight slices back to back (parameter order puts up right after gate in every arena;
 * asserted, mlp_assert_adjacent), gate and up are ONE GEMM each way: the forward [2 Il, D] x [D, N], the
 * input gradient [dgate | dup] [Wg; Wu] with K = 2 Il (the two products summed inside the GEMM, in fp32:
 * no bf16 rounding of a partial sum on the GPU), the weight gradient [dgate^T; dup^T] x into [dWg; dWu].
 * SwiGLU is elementwise, so the transposed layout costs it nothing; the down projection reads h^T with
 * a transposed operand.
 *
 * q, k and v are one GEMM each way too, token-major: Wq, Wk, Wv are adjacent in every arena (v right
 * after k right after q, asserted), so [Wq; Wk; Wv] is one [qd + 2 kd, D] matrix and the forward writes
 * qkv [N, qd + 2 kd] = x [Wq; Wk; Wv]^T. q, k, v are then the column blocks [0, qd), [qd, qd + kd),
 * [qd + kd, qd + 2 kd) of its rows, row stride ld = qd + 2 kd: RoPE and attention take that stride
 * (core/backend.h; one RoPE call rotates q's and k's heads, adjacent in the rows), attention writes dq,
 * dk, dv into the same fused layout, and the backward is
 * dx = d_qkv [Wq; Wk; Wv] (K = qd + 2 kd: the three products summed inside the GEMM in fp32, not through
 * three bf16 roundings) and [dWq; dWk; dWv] += d_qkv^T x. The KV-cache forward keeps three GEMMs (k and v
 * go into the cache's rows, q stays dense). What the families add sits between the GEMM and RoPE (the
 * q/k/v biases, one [qd + 2 kd] vector like the weights; Qwen3's q/k norms, whose input is saved for the
 * backward), and only when the parameter table has them (docs/DESIGN_NOTES.md, "q/k/v biases"). q is
 * H*hd wide, which need not be D (an explicit head_dim).
 *
 * gather_in / reduce_out are where tensor and sequence parallelism meet: without SP the residual
 * stream is whole on every tp rank (n_res = N), gather_in is the identity and reduce_out an all-reduce;
 * with SP the stream is split along the (flattened) sequence into tp chunks (n_res = N/tp), gather_in is
 * an all-gather and reduce_out a reduce-scatter. Their backwards swap roles (all-gather <-> reduce-
 * scatter; identity <-> all-reduce). Embedding and LM head are vocab-parallel; the loss is the
 * vocab-parallel cross-entropy (the logits are never gathered). No allocation happens in a step.
 *
 * Forward-only models (eval, sample) share one set of layer activations and allocate no backward buffers;
 * with a KV cache (generation) the same forward runs on a chunk of new positions of one sequence: k and v
 * go into the layer's cache at their positions, attention reads the cache (attn_fwd_kv), and the head
 * computes the chunk's last row only (docs/DESIGN_NOTES.md "Sampling with a KV cache").
 *
 * Activation recomputation (llama_options.recompute, `train --recompute full`): a training model keeps each
 * block's input (x_in, the residual stream entering it) and ONE set of the other block activations, shared
 * by the layers (act_layout). The forward is unchanged (each block overwrites the shared set); the
 * backward runs block l's forward again from its input right before block l's backward, stopping at the
 * last activation the backward reads (no down projection, no final reduction). Same ops, same inputs,
 * same weights (the backward's gather of the unit precedes it): bitwise the activations the forward
 * wrote, so losses, gradients and checkpoints are bitwise those without it. The last block is not
 * recomputed: its activations are still in the shared set. A block's recomputation costs its forward
 * minus the down GEMM, and repeats the forward's tp collectives but the last (docs/PARALLEL.md).
 *
 * Device contract (core/backend.h): attention is flash-style, so a layer saves only its lse [B, Hl, T]
 * beside q, k, v and the output, and every activation is linear in the sequence length; the loss sum
 * stays in a device scalar (m->sums) until the training step reads it together with the gradient sum
 * of squares, in one to_host (llama_sums_read).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/llama_impl.h"
#include "layers/rope.h"

/* ---- linear layers: W is [out, in] row-major (HF/PyTorch layout) ---- */

/* y[N,out] = x[N,in] W^T (compute tensors) */
static void linear_fwd(mp_backend *be, void *y, const void *x, const void *w, int N, int in, int out) {
    be->gemm(be, 0, 1, N, out, in, 1.0f, x, in, w, in, 0.0f, y, out, be->act_dtype);
}
/* dx[N,in] = beta*dx + dy[N,out] W (compute tensors) */
static void linear_bwd_x(mp_backend *be, void *dx, const void *dy, const void *w, int N, int in, int out,
                         float beta) {
    be->gemm(be, 0, 0, N, in, out, 1.0f, dy, out, w, in, beta, dx, in, be->act_dtype);
}
/* dW[out,in] += dy^T x: compute inputs, the fp32 weight gradient accumulates */
static void linear_bwd_w(mp_backend *be, float *dw, const void *dy, const void *x, int N, int in, int out) {
    be->gemm(be, 1, 0, out, in, N, 1.0f, dy, out, x, in, 1.0f, dw, in, MP_F32);
}

/* ---- the tp boundary (see the file comment) ---- */

/* Returns the [N, D] version of a residual-stream tensor src [n_res, D]: src itself without SP, else
 * all-gathered into dst. */
static void *gather_in(llama_model *m, void *dst, void *src) {
    if (!m->sp) return src;
    mp_comm *c = m->mesh->tp_comm;
    c->ops->all_gatherv(c, dst, src, m->sp_counts, m->be->act_dtype);
    return dst;
}

/* out[nr, D] = residual + reduce over tp of partial[N, D] (residual may be NULL: no add), nr the rows of
 * this rank's residual stream in this forward (m->n_res, or a kv chunk's). partial is clobbered. */
static void reduce_out(llama_model *m, void *out, const void *residual, void *partial, int nr) {
    mp_backend *be = m->be;
    mp_comm *c = m->mesh->tp_comm;
    int64_t n = (int64_t)nr * m->D;
    const void *sum = partial;
    if (m->sp) {
        c->ops->reduce_scatterv(c, m->dres_b, partial, m->sp_counts, be->act_dtype);
        sum = m->dres_b;
    } else if (m->tp > 1) {
        c->ops->all_reduce(c, partial, n, be->act_dtype, 0);
    }
    if (residual) be->add(be, out, residual, sum, n);
    else be->copy(be, out, sum, (size_t)n * m->act_size);
}

/* Backward of gather_in: partial[N, D] input-gradients summed over tp; returns the [n_res, D] result
 * (in partial without SP, in m->dres_b with SP). */
static void *reduce_in_grad(llama_model *m, void *partial) {
    mp_comm *c = m->mesh->tp_comm;
    if (m->sp) {
        c->ops->reduce_scatterv(c, m->dres_b, partial, m->sp_counts, m->be->act_dtype);
        return m->dres_b;
    }
    if (m->tp > 1) c->ops->all_reduce(c, partial, (int64_t)m->N * m->D, m->be->act_dtype, 0);
    return partial;
}

/* ---- creation ---- */

mp_code llama_check_layout(const llama_config *c, int tp, int dp, mp_err *err) {
    if (tp < 1 || dp < 1) return mp_err_set(err, MP_EINPUT, "tp (%d) and dp (%d) must be >= 1", tp, dp);
    if (tp > LLAMA_MAX_TP) return mp_err_set(err, MP_EINPUT, "tp (%d) exceeds the supported %d", tp, LLAMA_MAX_TP);
    if (c->num_hidden_layers > LLAMA_MAX_LAYERS)
        return mp_err_set(err, MP_EINPUT, "num_hidden_layers (%d) exceeds the supported %d", c->num_hidden_layers,
                          LLAMA_MAX_LAYERS);
    if (c->num_key_value_heads % tp)
        return mp_err_set(err, MP_EINPUT, "num_key_value_heads (%d) is not divisible by tp (%d)",
                          c->num_key_value_heads, tp);
    if (c->intermediate_size < tp)
        return mp_err_set(err, MP_EINPUT, "intermediate_size (%d) is smaller than tp (%d)", c->intermediate_size, tp);
    return MP_OK;
}

static mp_code check_mesh(const llama_config *c, const llama_options *o, int tp, mp_err *err) {
    MP_TRY(llama_check_layout(c, tp, 1, err));
    if (o->micro_batch <= 0) return mp_err_set(err, MP_EINPUT, "micro-batch must be > 0, got %d", o->micro_batch);
    if (o->seq_len <= 0) return mp_err_set(err, MP_EINPUT, "seq_len must be > 0, got %d", o->seq_len);
    if (o->seq_len > c->max_position_embeddings)
        return mp_err_set(err, MP_EINPUT, "seq_len (%d) exceeds max_position_embeddings (%d)", o->seq_len,
                          c->max_position_embeddings);
    if (o->sp && tp > 1 && o->seq_len % tp)
        return mp_err_set(err, MP_EINPUT,
                          "seq_len (%d) is not divisible by tp (%d), required with sequence parallelism (--sp)",
                          o->seq_len, tp);
    if (o->kv_cache && (!o->inference || o->micro_batch != 1 || (o->sp && tp > 1)))
        return mp_err_set(err, MP_EINPUT, "a KV cache needs a forward-only model of micro-batch 1 without sequence "
                          "parallelism (micro-batch %d, sp %d)", o->micro_batch, o->sp);
    if (o->recompute != LLAMA_RECOMPUTE_NONE && o->recompute != LLAMA_RECOMPUTE_FULL)
        return mp_err_set(err, MP_EINPUT, "recompute %d: expected none (0) or full (1)", o->recompute);
    if (o->kv_cache && (o->kv_chunk < 0 || o->kv_chunk > o->seq_len))
        return mp_err_set(err, MP_EINPUT, "kv_chunk (%d) must be in [0, seq_len %d]", o->kv_chunk, o->seq_len);
    return MP_OK;
}

/* One activation buffer: where its pointer lives (pa for a compute tensor, pf for an fp32 one) and how
 * many elements it holds. */
typedef struct act_piece {
    void **pa;
    float **pf;
    int64_t n;
} act_piece;

#define ACT_MAX_PIECES (32 + 18 * LLAMA_MAX_LAYERS)

/* Bytes of a piece, rounded up to 64 so every piece starts 64-byte aligned. */
static int64_t piece_bytes(const llama_model *m, const act_piece *pc) {
    int64_t e = pc->pa ? (int64_t)m->act_size : (int64_t)sizeof(float);
    return (pc->n * e + 63) / 64 * 64;
}

/* Lists every activation and scratch buffer of m (pointer slot, elements) into list; returns the count
 * and sets *bytes to the one allocation that holds them all, each piece 64-byte aligned, plus the two
 * int32 token buffers and the device scalars (m->sums). Compute tensors take m->act_size bytes an element,
 * the rest 4. Pure: the memory plan and alloc_acts share it, so they cannot disagree. Attention keeps
 * O(B*H*T) per layer (the lse; flash-style, no [T, T] matrix), so every piece is linear in the sequence
 * length. */
static int act_layout(llama_model *m, act_piece *list, size_t *bytes, int64_t *kv_bytes) {
    int64_t N = m->N, D = m->D, nr = m->n_res, qd = (int64_t)m->H_local * m->hd, kd = (int64_t)m->KV_local * m->hd;
    int64_t Il = m->I_local, bht = (int64_t)m->B * m->H_local * m->T, V = m->v_local;
    int64_t rep = llama_replicated_shard_numel(m);
    int train = !m->opt.inference, k = 0;
    *kv_bytes = 0;
#define ADD_A(ptr, count) do { assert(k < ACT_MAX_PIECES); list[k] = (act_piece){&(ptr), NULL, (count)}; k++; } while (0)
#define ADD_F(ptr, count) do { assert(k < ACT_MAX_PIECES); list[k] = (act_piece){NULL, &(ptr), (count)}; k++; } while (0)
    for (int l = 0; l < m->L; l++) {
        llama_layer_acts *a = &m->acts[l];
        if (m->kv) {   /* the cache: this layer's keys and values of every position */
            ADD_A(a->k, m->P * kd); ADD_A(a->v, m->P * kd);
            *kv_bytes += piece_bytes(m, &list[k - 2]) + piece_bytes(m, &list[k - 1]);
        }
        if (!train && l > 0) continue;   /* forward only: the layers share layer 0's buffers (alloc_acts) */
        ADD_A(a->x_in, nr * D);
        if (l > 0 && m->opt.recompute) continue;   /* full recomputation: the rest is layer 0's, shared */
        ADD_A(a->ln1, nr * D); ADD_F(a->rstd1, nr);
        if (m->sp) ADD_A(a->ln1_full, N * D);
        ADD_A(a->q, N * (m->kv ? qd : qd + 2 * kd));   /* the fused [q | k | v] (alloc_acts points k, v in) */
        if (m->cfg.qk_norm) {   /* q/k heads before their norm (the backward's input), and the norms' rstd */
            if (train) ADD_A(a->qk_pre, N * (qd + kd));
            ADD_F(a->qk_rstd, N * (int64_t)(m->H_local + m->KV_local));
        }
        ADD_F(a->lse, bht); ADD_A(a->o_in, N * qd);
        ADD_A(a->x_mid, nr * D); ADD_A(a->ln2, nr * D); ADD_F(a->rstd2, nr);
        if (m->sp) ADD_A(a->ln2_full, N * D);
        ADD_A(a->gate, 2 * N * Il); ADD_A(a->h, N * Il);   /* [gate^T; up^T], h^T */
    }
    ADD_A(m->x_final, nr * D); ADD_A(m->lnf, nr * D); ADD_F(m->rstdf, nr);
    if (m->sp) ADD_A(m->lnf_full, N * D);
    ADD_A(m->logits, (m->kv ? 1 : N) * V);   /* kv: the last position's row only */
    /* rowmax then the shard's own max (xent_fwd at tp > 1); sumexp then tlogit: one all-reduce */
    ADD_F(m->rowmax, 2 * N); ADD_F(m->sumexp, 2 * N); ADD_F(m->losses, N);
    ADD_A(m->tmp_nd, N * D);
    if (train || m->sp) ADD_A(m->dres_b, nr * D);   /* reduce_out's reduce-scatter target under SP */
    if (train) {   /* the backward's buffers */
        ADD_A(m->dres_a, nr * D); ADD_A(m->dfull, N * D);
        ADD_A(m->dq, N * (qd + 2 * kd)); ADD_A(m->do_in, N * qd);   /* d_qkv, fused as qkv */
        ADD_A(m->dgate, 2 * N * Il); ADD_A(m->dh, N * Il); ADD_F(m->attn_scratch, bht);
        ADD_F(m->sync_buf, rep > 0 ? rep : 1);
    }
    int64_t half = m->hd / 2;
    ADD_F(m->cos_t, (int64_t)m->P * half); ADD_F(m->sin_t, (int64_t)m->P * half);
#undef ADD_A
#undef ADD_F
    int64_t total = 0;
    for (int i = 0; i < k; i++) total += piece_bytes(m, &list[i]);
    total += 2 * ((N * (int64_t)sizeof(int32_t) + 63) / 64 * 64);   /* token buffers */
    total += 64;                                                    /* device scalars (double) */
    *bytes = (size_t)total;
    return k;
}

/* Carves every activation and scratch buffer out of one allocation (laid out by act_layout); a forward-only
 * model's layers then share layer 0's buffers (each keeping its own KV cache), and so do a recomputing
 * model's (each keeping its own input, x_in). */
static void alloc_acts(llama_model *m) {
    static act_piece list[ACT_MAX_PIECES];   /* start-up only, one model at a time */
    int64_t kv_bytes;
    int k = act_layout(m, list, &m->act_bytes, &kv_bytes);
    int64_t N = m->N, half = m->hd / 2;
    char *base = m->be->alloc(m->be, m->act_bytes, MP_MEM_ACTS);
    m->act_block = base;
    int64_t off = 0;
    for (int i = 0; i < k; i++) {
        if (list[i].pa) *list[i].pa = base + off;
        else *list[i].pf = (float *)(base + off);
        off += piece_bytes(m, &list[i]);
    }
    int64_t tok_bytes = (N * (int64_t)sizeof(int32_t) + 63) / 64 * 64;
    m->tok_in = (int32_t *)(base + off);
    off += tok_bytes;
    m->tok_tgt = (int32_t *)(base + off);
    off += tok_bytes;
    _Static_assert(LLAMA_NSUMS * sizeof(double) <= 64, "the device scalars fit their 64-byte piece");
    m->sums = (double *)(base + off);
    assert(off + 64 == (int64_t)m->act_bytes);
    m->tlogit = m->sumexp + N;
    m->local_max = m->rowmax + N;
    for (int l = 1; l < m->L && (m->opt.inference || m->opt.recompute); l++) {
        void *k = m->acts[l].k, *v = m->acts[l].v, *x_in = m->acts[l].x_in;
        m->acts[l] = m->acts[0];
        if (m->kv) m->acts[l].k = k, m->acts[l].v = v;
        if (m->opt.recompute) m->acts[l].x_in = x_in;
    }
    for (int l = 0; l < m->L; l++) {
        if (!m->sp) { m->acts[l].ln1_full = m->acts[l].ln1; m->acts[l].ln2_full = m->acts[l].ln2; }
    }
    const int64_t qd = (int64_t)m->H_local * m->hd, kd = (int64_t)m->KV_local * m->hd;
    for (int l = 0; l < m->L && !m->kv; l++) {   /* k, v: column blocks of the fused qkv rows */
        m->acts[l].k = mp_act_at(m->be, m->acts[l].q, qd);
        m->acts[l].v = mp_act_at(m->be, m->acts[l].q, qd + kd);
    }
    if (!m->opt.inference) m->dk = mp_act_at(m->be, m->dq, qd), m->dv = mp_act_at(m->be, m->dq, qd + kd);
    if (!m->sp) m->lnf_full = m->lnf;
    /* RoPE tables (with the config's rope_scaling): computed on the host in double, then copied to the device. */
    size_t tb = (size_t)m->P * (size_t)half * sizeof(float);
    float *c = mp_xmalloc(tb), *s = mp_xmalloc(tb);
    mp_rope_tables(c, s, m->P, m->hd, m->cfg.rope_theta, &m->cfg.rope_scaling);
    m->be->to_device(m->be, m->cos_t, c, tb);
    m->be->to_device(m->be, m->sin_t, s, tb);
    free(c);
    free(s);
}

/* Sets m's configuration and local sizes for rank (tp_rank, dp_rank) of a tp x dp mesh, then builds the
 * parameter table and lays out the FSDP units. Allocates nothing; the config and mesh were checked. */
static void set_geometry(llama_model *m, const llama_config *cfg, const llama_options *opt, int tp, int tp_rank,
                         int dp, int dp_rank) {
    m->cfg = *cfg;
    m->opt = *opt;
    if (opt->inference) m->opt.recompute = LLAMA_RECOMPUTE_NONE;   /* nothing is kept for a backward anyway */
    m->act_size = mp_dtype_size(opt->act_dtype);
    assert(m->act_size == 2 || m->act_size == 4);
    m->tp = tp; m->tp_rank = tp_rank;
    m->dp = dp; m->dp_rank = dp_rank;
    m->sp = opt->sp && tp > 1;
    m->kv = opt->kv_cache;
    m->L = cfg->num_hidden_layers;
    m->D = cfg->hidden_size;
    m->hd = llama_head_dim(cfg);
    m->H_local = cfg->num_attention_heads / m->tp;
    m->KV_local = cfg->num_key_value_heads / m->tp;
    int64_t i0, icount;
    mp_split(cfg->intermediate_size, m->tp, m->tp_rank, &i0, &icount);
    m->I_local = (int)icount;
    m->v_local = (cfg->vocab_size + m->tp - 1) / m->tp;
    m->v_start = m->tp_rank * m->v_local;
    int valid = cfg->vocab_size - m->v_start;
    m->v_valid = valid < 0 ? 0 : valid > m->v_local ? m->v_local : valid;
    m->B = opt->micro_batch;
    m->P = opt->seq_len;
    m->T = m->kv && opt->kv_chunk ? opt->kv_chunk : opt->seq_len;
    m->N = m->B * m->T;
    m->n_res = m->sp ? m->N / m->tp : m->N;
    for (int r = 0; r < m->tp && r < LLAMA_MAX_TP; r++) m->sp_counts[r] = (int64_t)m->n_res * m->D;
    llama_params_build(m);
    llama_params_layout(m);
}

/* The backend's limits for this config: MP_EINPUT naming them (a head_dim beyond its attention kernels,
 * be->attn_max_head_dim), so a run is refused before it starts rather than aborted at its first attention
 * call. be NULL: nothing to check. */
static mp_code check_backend(const llama_config *c, const mp_backend *be, mp_err *err) {
    int hd = llama_head_dim(c);
    if (be && be->attn_max_head_dim > 0 && hd > be->attn_max_head_dim)
        return mp_err_set(err, MP_EINPUT, "head_dim %d exceeds the %s backend's attention limit of %d (device %s)", hd,
                          be->name, be->attn_max_head_dim, be->name);
    return MP_OK;
}

/* The backward's calls that use the backend's own scratch (core/backend.h, scratch_bytes): sets *tokens to
 * embed_bwd's and fills cs with the column sums (rmsnorm_bwd, bias_bwd over the fused q | k | v, the q and k
 * head norms); returns their count. A forward-only model runs none of them. */
static int op_scratch_shapes(const llama_model *m, int *tokens, mp_colsum cs[4]) {
    *tokens = 0;
    if (m->opt.inference) return 0;
    const int ld = (m->H_local + 2 * m->KV_local) * m->hd;
    int k = 0;
    *tokens = m->N;
    cs[k++] = (mp_colsum){m->n_res, m->D};
    if (m->cfg.qkv_bias) cs[k++] = (mp_colsum){m->N, ld};
    if (m->cfg.qk_norm) {
        cs[k++] = (mp_colsum){(int64_t)m->N * m->H_local, m->hd};
        cs[k++] = (mp_colsum){(int64_t)m->N * m->KV_local, m->hd};
    }
    return k;
}

/* Bytes of the backend's own scratch for m's backward (0 on a backend that keeps none): counted in the
 * plan's activations, and reserved by llama_create, so the plan stays an upper bound of a step. */
static int64_t op_scratch_bytes(const llama_model *m, const mp_backend *be) {
    if (!be || !be->scratch_bytes) return 0;
    mp_colsum cs[4];
    int tokens, n = op_scratch_shapes(m, &tokens, cs);
    return be->scratch_bytes(tokens, cs, n);
}

/* A float estimate of the largest numbers the layout will compute (elements of the parameters, of the
 * largest activation, of the whole activation block), so that the exact int64 arithmetic that follows
 * cannot overflow: MP_EINPUT naming the sizes when any would pass 2^58 bytes on one rank. */
static mp_code check_plan_range(const llama_config *c, const llama_options *o, mp_err *err) {
    double D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, L = c->num_hidden_layers;
    double hd = llama_head_dim(c), H = c->num_attention_heads, KV = c->num_key_value_heads;
    double B = o->micro_batch, T = o->seq_len, N = B * T;
    double params = 2 * V * D + L * (2 * D + (H + 2 * KV) * hd * (D + 1) + D * H * hd + 2 * hd + 3 * I * D) + D;
    double widest = V > I ? V : I;
    widest = widest > D ? widest : D;
    widest = widest > H * hd ? widest : H * hd;
    double acts = (L + 4) * (2 * N * H + 16 * N * widest);
    const double limit = 0x1p58 / 4;   /* floats */
    if (N > INT32_MAX || H * hd > INT32_MAX)
        return mp_err_set(err, MP_EINPUT, "micro-batch x seq_len (%.0f) or num_attention_heads x head_dim (%.0f) "
                          "exceeds 2^31", N, H * hd);
    if (params * 4 > limit || acts > limit)
        return mp_err_set(err, MP_EINPUT,
                          "the model is too large to plan: about %.3g parameters in all and %.3g activation floats per rank "
                          "(hidden_size %d, intermediate_size %d, vocab_size %d, num_hidden_layers %d, micro-batch %d, "
                          "seq_len %d) exceed 2^58 bytes", params, acts, c->hidden_size, c->intermediate_size,
                          c->vocab_size, c->num_hidden_layers, o->micro_batch, o->seq_len);
    return MP_OK;
}

mp_code llama_plan_memory(const llama_config *cfg, const llama_options *opt, const mp_backend *be, int tp,
                          int tp_rank, int dp, int dp_rank, llama_memory_plan *plan, mp_err *err) {
    assert(plan && tp_rank >= 0 && tp_rank < tp && dp_rank >= 0 && dp_rank < dp);
    memset(plan, 0, sizeof *plan);
    MP_TRY(llama_config_validate(cfg, err));
    MP_TRY(check_backend(cfg, be, err));
    MP_TRY(check_mesh(cfg, opt, tp, err));
    if (dp < 1) return mp_err_set(err, MP_EINPUT, "dp (%d) must be >= 1", dp);
    MP_TRY(check_plan_range(cfg, opt, err));
    llama_model *m = mp_xcalloc(sizeof *m);
    set_geometry(m, cfg, opt, tp, tp_rank, dp, dp_rank);
    int64_t shard = m->shard_total * (int64_t)sizeof(float);
    /* fp32 masters, plus their compute copy when the compute dtype is narrower */
    plan->bytes[MP_MEM_PARAMS] = shard + (m->act_size != sizeof(float) ? m->shard_total * (int64_t)m->act_size : 0);
    plan->bytes[MP_MEM_GRADS] = opt->inference ? 0 : shard;          /* forward only: no gradients, */
    plan->bytes[MP_MEM_OPTIM] = opt->inference ? 0 : 2 * shard;      /* no moments */
    plan->bytes[MP_MEM_GATHER] = (int64_t)llama_fsdp_plan_bytes(m);
    static act_piece list[ACT_MAX_PIECES];
    size_t acts;
    act_layout(m, list, &acts, &plan->kv_cache);
    plan->bytes[MP_MEM_ACTS] = (int64_t)acts + op_scratch_bytes(m, be);
    plan->bytes[MP_MEM_OTHER] = (int64_t)sizeof(llama_model) + (dp > 1 ? (int64_t)(m->nunits * dp * 8) : 0);
    for (int k = 0; k < MP_MEM_NCAT; k++) plan->total += plan->bytes[k];
    for (int i = 0; i < m->nparams; i++) {
        int64_t b = llama_shard_numel(&m->params[i]) * (int64_t)sizeof(float);
        if (b > plan->largest_shard) plan->largest_shard = b;
    }
    /* the largest sums over the dp group (a unit's gradient reduce-scatter) and the tp group (the N x D
     * activations: the all-reduce, or SP's reduce-scatter) */
    plan->dp_sum_bytes = dp > 1 && !opt->inference ? m->max_unit_full * (int64_t)sizeof(float) : 0;
    plan->tp_sum_bytes = tp > 1 ? (int64_t)m->N * m->D * (int64_t)m->act_size : 0;
    free(m);
    return MP_OK;
}

mp_code llama_create(llama_model **out, const llama_config *cfg, const llama_options *opt, mp_mesh *mesh,
                     mp_backend *be, mp_err *err) {
    *out = NULL;
    llama_options o = *opt;
    o.act_dtype = be->act_dtype;   /* the backend decides the compute dtype */
    llama_memory_plan plan;   /* checks the config, the mesh and that every size fits in int64 */
    MP_TRY(llama_plan_memory(cfg, &o, be, mesh->tp, mesh->tp_rank, mesh->dp, mesh->dp_rank, &plan, err));
    llama_model *m = mp_calloc(sizeof *m, MP_MEM_OTHER);
    m->mesh = mesh;
    m->be = be;
    set_geometry(m, cfg, &o, mesh->tp, mesh->tp_rank, mesh->dp, mesh->dp_rank);
    llama_params_alloc(m);
    llama_fsdp_alloc(m);
    alloc_acts(m);
    if (be->scratch_reserve) {   /* the backward's op scratch now, as the plan counted it */
        mp_colsum cs[4];
        int tokens, n = op_scratch_shapes(m, &tokens, cs);
        be->scratch_reserve(be, tokens, cs, n);
    }
    *out = m;
    return MP_OK;
}

void llama_destroy(llama_model *m) {
    if (!m) return;
    m->be->free(m->be, m->act_block, m->act_bytes, MP_MEM_ACTS);
    llama_fsdp_free(m);
    llama_params_free(m);
    mp_free_acct(m, sizeof *m, MP_MEM_OTHER);
}

/* ---- forward ---- */

#define W(idx) (m->params[(idx)].full)
#define DW(idx) (m->params[(idx)].full_grad)

/* ---- the MLP, feature-major (see the file comment) ---- */

/* Parameter b starts right after the n elements of parameter a (b = a + 1 in the table) in the compute
 * weights and (grads) in the weight gradients, so the two are one stacked matrix for a fused GEMM: every
 * arena lays out a unit's parameters back to back in parameter order (llama_params_alloc,
 * llama_fsdp_gather / _grad_begin). Asserted, so a layout change cannot silently turn the fused GEMMs
 * into reads of the wrong weights. */
static void assert_adjacent(const llama_model *m, int a, int b, int64_t n, int grads) {
    assert(b == a + 1);
    assert(mp_act_at(m->be, W(a), n) == W(b));
    assert(!grads || DW(a) + n == DW(b));
    (void)m, (void)a, (void)b, (void)n, (void)grads;
}

/* Layer p's gate and up slices are one [2 Il, D] matrix (up right after gate). */
static void mlp_assert_adjacent(const llama_model *m, const llama_layer_params *p, int grads) {
    assert_adjacent(m, p->wg, p->wu, (int64_t)m->I_local * m->D, grads);
}

/* Layer p's q, k and v slices are one [qd + 2 kd, D] matrix (k right after q, v right after k). */
static void qkv_assert_adjacent(const llama_model *m, const llama_layer_params *p, int grads) {
    const int64_t qd = (int64_t)m->H_local * m->hd, kd = (int64_t)m->KV_local * m->hd;
    assert_adjacent(m, p->wq, p->wk, qd * m->D, grads);
    assert_adjacent(m, p->wk, p->wv, kd * m->D, grads);
}

/* Layer p's q, k and v bias slices are one [qd + 2 kd] vector (k's right after q's, v's after k's). */
static void bias_assert_adjacent(const llama_model *m, const llama_layer_params *p, int grads) {
    const int64_t qd = (int64_t)m->H_local * m->hd, kd = (int64_t)m->KV_local * m->hd;
    assert_adjacent(m, p->bq, p->bk, qd, grads);
    assert_adjacent(m, p->bk, p->bv, kd, grads);
}

/* y [N, D] = the MLP's partial output (before the tp reduction) for xin [N, D]; saves [gate^T; up^T] and
 * h^T in a. y NULL: only what the backward reads (a recomputation: the down projection is not run). */
static void mlp_forward(llama_model *m, const llama_layer_params *p, llama_layer_acts *a, const void *xin, int N,
                        void *y) {
    mp_backend *be = m->be;
    const int D = m->D, Il = m->I_local;
    void *up = mp_act_at(be, a->gate, (int64_t)Il * N);
    mlp_assert_adjacent(m, p, 0);
    /* [gate^T; up^T] [2 Il, N] = [Wg; Wu] xin^T */
    be->gemm(be, 0, 1, 2 * Il, N, D, 1.0f, W(p->wg), D, xin, D, 0.0f, a->gate, N, be->act_dtype);
    be->swiglu_fwd(be, a->h, a->gate, up, (int64_t)N * Il);
    if (!y) return;
    /* y [N, D] = h Wd^T, h stored as h^T [Il, N] */
    be->gemm(be, 1, 1, N, D, Il, 1.0f, a->h, N, W(p->wd), Il, 0.0f, y, D, be->act_dtype);
}

/* The MLP's backward for dy [N, D] (gathered): accumulates dWd, dWg, dWu; m->tmp_nd [N, D] = its partial
 * input gradient (before the tp reduction). Uses m->dh and m->dgate. */
static void mlp_backward(llama_model *m, const llama_layer_params *p, const llama_layer_acts *a, const void *dy,
                         int N) {
    mp_backend *be = m->be;
    const int D = m->D, Il = m->I_local;
    const void *x = a->ln2_full, *up = mp_act_at(be, a->gate, (int64_t)Il * N);
    void *dup = mp_act_at(be, m->dgate, (int64_t)Il * N);
    /* dh^T [Il, N] = Wd^T dy^T;  dWd [D, Il] += dy^T h */
    be->gemm(be, 1, 1, Il, N, D, 1.0f, W(p->wd), Il, dy, D, 0.0f, m->dh, N, be->act_dtype);
    be->gemm(be, 1, 1, D, Il, N, 1.0f, dy, D, a->h, N, 1.0f, DW(p->wd), Il, MP_F32);
    be->swiglu_bwd(be, m->dgate, dup, m->dh, a->gate, up, (int64_t)N * Il);
    mlp_assert_adjacent(m, p, 1);
    /* dx = [dgate | dup] [Wg; Wu] (K = 2 Il: the two products summed in fp32);
     * [dWg; dWu] += [dgate^T; dup^T] x */
    be->gemm(be, 1, 0, N, D, 2 * Il, 1.0f, m->dgate, N, W(p->wg), D, 0.0f, m->tmp_nd, D, be->act_dtype);
    be->gemm(be, 0, 0, 2 * Il, D, N, 1.0f, m->dgate, N, x, D, 1.0f, DW(p->wg), D, MP_F32);
}

/* Qwen3's q_norm and k_norm on the N rows of q (row stride ldq) and k (ldk), in place, before RoPE; a
 * training model saves their input (a->qk_pre) for the backward. Nothing without them. */
static void qk_norm_forward(llama_model *m, const llama_layer_params *p, llama_layer_acts *a, void *q, int ldq,
                            void *k, int ldk, int N) {
    if (p->qn < 0) return;
    mp_backend *be = m->be;
    const int Hl = m->H_local, KVl = m->KV_local, hd = m->hd;
    const float eps = (float)m->cfg.rms_norm_eps;
    void *save_q = m->opt.inference ? NULL : a->qk_pre;
    void *save_k = save_q ? mp_act_at(be, save_q, (int64_t)N * Hl * hd) : NULL;
    be->head_rmsnorm_fwd(be, q, ldq, save_q, a->qk_rstd, W(p->qn), N, Hl, hd, eps);
    be->head_rmsnorm_fwd(be, k, ldk, save_k, a->qk_rstd + (int64_t)N * Hl, W(p->kn), N, KVl, hd, eps);
}

/* The attention input of block l: q, k, v of xin [N, D] (biases added, q/k normed, RoPE applied: HF's
 * order) in a->q, a->k, a->v. Training and eval: ONE GEMM into the fused qkv [N, qd + 2 kd] (see the file
 * comment), q/k/v its column blocks, and one bias add over all three; a kv chunk: three, k and v into the
 * cache at row pos0 (dense). Returns the row stride of q and of k, v. */
static int qkv_forward(llama_model *m, const llama_layer_params *p, llama_layer_acts *a, const void *xin, int T,
                       int pos0, int *ldkv) {
    mp_backend *be = m->be;
    const int N = m->B * T, D = m->D, qd = m->H_local * m->hd, kd = m->KV_local * m->hd;
    if (m->kv) {
        void *k = mp_act_at(be, a->k, (int64_t)pos0 * kd), *v = mp_act_at(be, a->v, (int64_t)pos0 * kd);
        linear_fwd(be, a->q, xin, W(p->wq), N, D, qd);
        linear_fwd(be, k, xin, W(p->wk), N, D, kd);
        linear_fwd(be, v, xin, W(p->wv), N, D, kd);
        if (p->bq >= 0) {
            be->bias_add(be, a->q, qd, W(p->bq), N, qd);
            be->bias_add(be, k, kd, W(p->bk), N, kd);
            be->bias_add(be, v, kd, W(p->bv), N, kd);
        }
        qk_norm_forward(m, p, a, a->q, qd, k, kd, N);
        be->rope_fwd(be, a->q, m->cos_t, m->sin_t, m->B, T, m->H_local, m->hd, pos0, qd);
        be->rope_fwd(be, k, m->cos_t, m->sin_t, m->B, T, m->KV_local, m->hd, pos0, kd);
        *ldkv = kd;
        return qd;
    }
    const int ld = qd + 2 * kd;
    assert(pos0 == 0 && a->k == mp_act_at(be, a->q, qd) && a->v == mp_act_at(be, a->k, kd));
    qkv_assert_adjacent(m, p, 0);
    linear_fwd(be, a->q, xin, W(p->wq), N, D, ld);   /* qkv = xin [Wq; Wk; Wv]^T */
    if (p->bq >= 0) {   /* + [bq | bk | bv] */
        bias_assert_adjacent(m, p, 0);
        be->bias_add(be, a->q, ld, W(p->bq), N, ld);
    }
    qk_norm_forward(m, p, a, a->q, ld, a->k, ld, N);
    /* q's and k's heads are adjacent in the rows: one RoPE call rotates both */
    be->rope_fwd(be, a->q, m->cos_t, m->sin_t, m->B, T, m->H_local + m->KV_local, m->hd, 0, ld);
    *ldkv = ld;
    return ld;
}

/* Block l on rows for T tokens of each of the B sequences (B = m->B), at positions pos0 .. pos0+T-1
 * (training and eval: T = m->T, pos0 = 0; a kv chunk: B = 1, and k, v go into the cache at row pos0).
 * x_out NULL: the recomputation of a training block before its backward (llama_options.recompute):
 * every activation the backward reads is written again, by the same ops on the same input, so bitwise
 * as the forward wrote it; the down projection and the last reduction, whose output (the next block's
 * input) is kept, are not run. It touches no device scalar and no token buffer. */
static void block_forward(llama_model *m, int l, void *x_out, int T, int pos0) {
    mp_backend *be = m->be;
    llama_layer_acts *a = &m->acts[l];
    const llama_layer_params *p = &m->lp[l];
    int N = m->B * T, nr = m->sp ? N / m->tp : N, D = m->D, qd = m->H_local * m->hd, ldkv;
    float eps = (float)m->cfg.rms_norm_eps;
    be->rmsnorm_fwd(be, a->ln1, a->rstd1, a->x_in, W(p->ln1), nr, D, eps);
    void *xin = gather_in(m, a->ln1_full, a->ln1);
    int ldq = qkv_forward(m, p, a, xin, T, pos0, &ldkv);
    const int window = llama_layer_window(&m->cfg, l);   /* 0: full causal */
    if (m->kv)
        be->attn_fwd_kv(be, a->o_in, a->lse, a->q, a->k, a->v, 1, T, pos0, m->P, m->H_local, m->KV_local, m->hd,
                        window);
    else
        be->attn_fwd(be, a->o_in, a->lse, a->q, a->k, a->v, m->B, T, m->H_local, m->KV_local, m->hd, ldq, ldkv,
                     window);
    linear_fwd(be, m->tmp_nd, a->o_in, W(p->wo), N, qd, D);
    reduce_out(m, a->x_mid, a->x_in, m->tmp_nd, nr);
    be->rmsnorm_fwd(be, a->ln2, a->rstd2, a->x_mid, W(p->ln2), nr, D, eps);
    xin = gather_in(m, a->ln2_full, a->ln2);
    mlp_forward(m, p, a, xin, N, x_out ? m->tmp_nd : NULL);
    if (x_out) reduce_out(m, x_out, a->x_mid, m->tmp_nd, nr);
}

/* Copies the N input tokens (and the targets, when not NULL) into m->tok_in / m->tok_tgt. uploaded NULL:
 * to_device (the host waits; evaluation, sampling, tools). Else to_device_async with uploaded recorded
 * after both (a training step; the caller waits for it before writing the host buffers again). ONE device
 * buffer of each serves every micro-batch: that is safe because every op runs on the compute stream in
 * call order (core/backend.h), so the copy of micro-batch k+1 runs after the last op of k that reads
 * them (the backward's embed_bwd and xent_bwd). An op on another stream reading them would need a second
 * device buffer or an event. */
static void upload_tokens(llama_model *m, const int32_t *inputs, const int32_t *targets, int N, mp_event uploaded) {
    mp_backend *be = m->be;
    size_t bytes = (size_t)N * sizeof(int32_t);
    if (!uploaded) {
        be->to_device(be, m->tok_in, inputs, bytes);
        if (targets) be->to_device(be, m->tok_tgt, targets, bytes);
        return;
    }
    be->to_device_async(be, m->tok_in, inputs, bytes, uploaded);
    if (targets) be->to_device_async(be, m->tok_tgt, targets, bytes, uploaded);   /* re-recorded: covers both */
}

/* The forward of T tokens of each sequence at positions pos0.. (see block_forward), the tokens uploaded
 * as upload_tokens says; with targets, the per-token losses land in m->losses (device) and 1 is returned.
 * A kv model's head reads only the last row (its logits are [1, v_local]). */
static int forward(llama_model *m, const int32_t *inputs, const int32_t *targets, int T, int pos0,
                   mp_event uploaded) {
    mp_backend *be = m->be;
    mp_comm *tpc = m->mesh->tp_comm;
    int N = m->B * T, nr = m->sp ? N / m->tp : N, D = m->D;
    upload_tokens(m, inputs, targets, N, uploaded);
    m->have_targets = targets != NULL;

    /* FSDP: each unit's gather is started (prefetched) before the previous unit's compute */
    int head_unit = m->cfg.tie_word_embeddings ? 0 : m->L + 1;
    llama_fsdp_gather(m, 0);
    llama_fsdp_prefetch(m, m->L > 0 ? 1 : head_unit);
    be->embed_fwd(be, m->tmp_nd, m->tok_in, W(m->p_embed), N, D, m->v_start, m->v_local);
    reduce_out(m, m->acts[0].x_in, NULL, m->tmp_nd, nr);
    for (int l = 0; l < m->L; l++) {
        llama_fsdp_gather(m, 1 + l);
        llama_fsdp_prefetch(m, l + 1 < m->L ? 2 + l : head_unit);
        block_forward(m, l, l + 1 < m->L ? m->acts[l + 1].x_in : m->x_final, T, pos0);
    }
    llama_fsdp_gather(m, head_unit);
    const void *xf = m->kv ? mp_act_at(be, m->x_final, (int64_t)(N - 1) * D) : m->x_final;
    int nh = m->kv ? 1 : nr;   /* rows the head computes */
    be->rmsnorm_fwd(be, m->lnf, m->rstdf, xf, W(m->p_norm), nh, D, (float)m->cfg.rms_norm_eps);
    void *xin = gather_in(m, m->lnf_full, m->lnf);
    linear_fwd(be, m->logits, xin, W(m->p_head), m->kv ? 1 : N, D, m->v_local);
    if (!targets) return 0;

    /* vocab-parallel cross-entropy: global max, global sum of exp, global target logit. With xent_fwd
     * (and xent_rescale when tp > 1) one sweep of each shard gives its own max and the sum against it,
     * and that sum is taken to the all-reduced max; else rowmax, all-reduce, then sumexp against it. */
    assert(!m->kv);
    int sweep = be->xent_fwd && (m->tp == 1 || be->xent_rescale);
    if (sweep) {
        float *own_max = m->tp > 1 ? m->local_max : m->rowmax;   /* one shard: the global max already */
        be->xent_fwd(be, own_max, m->sumexp, m->tlogit, m->logits, m->tok_tgt, N, m->v_local, m->v_valid,
                     m->v_start);
        if (m->tp > 1) be->copy(be, m->rowmax, m->local_max, (size_t)N * sizeof(float));
    } else {
        be->xent_rowmax(be, m->rowmax, m->logits, N, m->v_local, m->v_valid);
    }
    if (m->tp > 1) tpc->ops->all_reduce(tpc, m->rowmax, N, MP_F32, 1);
    if (!sweep) {
        be->xent_sumexp(be, m->sumexp, m->logits, m->rowmax, N, m->v_local, m->v_valid);
        be->xent_target(be, m->tlogit, m->logits, m->tok_tgt, N, m->v_local, m->v_start);
    } else if (m->tp > 1) {
        be->xent_rescale(be, m->sumexp, m->local_max, m->rowmax, N);
    }
    if (m->tp > 1) tpc->ops->all_reduce(tpc, m->sumexp, 2 * (int64_t)N, MP_F32, 0);   /* sumexp and tlogit, adjacent */
    be->xent_loss(be, m->losses, m->rowmax, m->sumexp, m->tlogit, N);
    return 1;
}

void llama_forward_kv(llama_model *m, const int32_t *tokens, int n, int pos0) {
    assert(m->kv && n >= 1 && n <= m->T && pos0 >= 0 && pos0 + n <= m->P);
    forward(m, tokens, NULL, n, pos0, NULL);
}

double llama_forward(llama_model *m, const int32_t *inputs, const int32_t *targets) {
    assert(!m->kv);
    if (!forward(m, inputs, targets, m->T, 0, NULL)) return 0.0;
    mp_backend *be = m->be;
    double *acc = &m->sums[LLAMA_SUM_SCRATCH], sum;
    be->memset0(be, acc, sizeof *acc);
    be->sum_acc(be, acc, m->losses, m->N);
    be->to_host(be, &sum, acc, sizeof sum);
    return sum;
}

void llama_forward_accum(llama_model *m, const int32_t *inputs, const int32_t *targets, mp_event uploaded) {
    assert(targets && uploaded);
    forward(m, inputs, targets, m->T, 0, uploaded);
    m->be->sum_acc(m->be, &m->sums[LLAMA_SUM_LOSS], m->losses, m->N);
}

void llama_sums_reset(llama_model *m) {
    m->be->memset0(m->be, m->sums, LLAMA_NSUMS * sizeof(double));
}

void llama_sums_read(llama_model *m, llama_step_sums *out) {
    double h[2];
    _Static_assert(LLAMA_SUM_LOSS == 0 && LLAMA_SUM_GRADSQ == 1, "loss and grad sums are adjacent");
    m->be->to_host(m->be, h, m->sums, sizeof h);
    out->loss_sum = h[LLAMA_SUM_LOSS];
    out->grad_sumsq = h[LLAMA_SUM_GRADSQ];
}

/* ---- backward ---- */

/* The backward of what qkv_forward does between the GEMM and RoPE, on d_qkv (m->dq) after rope_bwd: the
 * q/k norms (dq, dk in place; dWqn, dWkn accumulate this rank's heads' part, summed over tp by
 * llama_sync_grads), then [dbq | dbk | dbv] += the column sums of d_qkv. */
static void qkv_post_backward(llama_model *m, const llama_layer_params *p, const llama_layer_acts *a) {
    mp_backend *be = m->be;
    const int N = m->N, Hl = m->H_local, KVl = m->KV_local, hd = m->hd, ld = (Hl + 2 * KVl) * hd;
    if (p->qn >= 0) {
        const void *pre_k = mp_act_at(be, a->qk_pre, (int64_t)N * Hl * hd);
        be->head_rmsnorm_bwd(be, m->dq, ld, DW(p->qn), a->qk_pre, a->qk_rstd, W(p->qn), N, Hl, hd);
        be->head_rmsnorm_bwd(be, m->dk, ld, DW(p->kn), pre_k, a->qk_rstd + (int64_t)N * Hl, W(p->kn), N, KVl, hd);
    }
    if (p->bq >= 0) {
        bias_assert_adjacent(m, p, 1);
        be->bias_bwd(be, DW(p->bq), m->dq, ld, N, ld);
    }
}

/* dres_a holds d(block output) on entry and d(block input) on return. */
static void block_backward(llama_model *m, int l) {
    mp_backend *be = m->be;
    llama_layer_acts *a = &m->acts[l];
    const llama_layer_params *p = &m->lp[l];
    int N = m->N, D = m->D, qd = m->H_local * m->hd, kd = m->KV_local * m->hd, ld = qd + 2 * kd;

    /* MLP: d(down output) = d(block output), gathered under SP */
    void *dy = gather_in(m, m->dfull, m->dres_a);
    mlp_backward(m, p, a, dy, N);
    void *dln = reduce_in_grad(m, m->tmp_nd);
    /* dy may alias dres_a (no SP): it is no longer read, so the residual gradient accumulates in place */
    be->rmsnorm_bwd(be, m->dres_a, DW(p->ln2), dln, a->x_mid, W(p->ln2), a->rstd2, m->n_res, D);

    /* attention */
    dy = gather_in(m, m->dfull, m->dres_a);
    linear_bwd_x(be, m->do_in, dy, W(p->wo), N, qd, D, 0.0f);
    linear_bwd_w(be, DW(p->wo), dy, a->o_in, N, qd, D);
    /* d_qkv [N, qd + 2 kd] (m->dq; dk, dv its column blocks, as q, k, v in a->q) */
    be->attn_bwd(be, m->dq, m->dk, m->dv, m->attn_scratch, m->do_in, a->o_in, a->lse, a->q, a->k, a->v, m->B,
                 m->T, m->H_local, m->KV_local, m->hd, ld, ld, llama_layer_window(&m->cfg, l));
    be->rope_bwd(be, m->dq, m->cos_t, m->sin_t, m->B, m->T, m->H_local + m->KV_local, m->hd, 0, ld);   /* dq, dk */
    qkv_post_backward(m, p, a);
    qkv_assert_adjacent(m, p, 1);
    /* dx = d_qkv [Wq; Wk; Wv] (K = qd + 2 kd: the three products summed in fp32);
     * [dWq; dWk; dWv] += d_qkv^T x */
    linear_bwd_x(be, m->tmp_nd, m->dq, W(p->wq), N, D, ld, 0.0f);
    linear_bwd_w(be, DW(p->wq), m->dq, a->ln1_full, N, D, ld);
    dln = reduce_in_grad(m, m->tmp_nd);
    be->rmsnorm_bwd(be, m->dres_a, DW(p->ln1), dln, a->x_in, W(p->ln1), a->rstd1, m->n_res, D);
}

void llama_backward(llama_model *m, float scale) {
    assert(m->have_targets);
    mp_backend *be = m->be;
    int N = m->N, D = m->D;
    int head_unit = m->cfg.tie_word_embeddings ? 0 : m->L + 1;

    llama_fsdp_grad_begin(m, 0);
    if (head_unit != 0) llama_fsdp_grad_begin(m, head_unit);
    if (m->L > 0) llama_fsdp_prefetch(m, m->L);   /* the last block's unit, during the head's backward */
    /* head: the head unit's weights are still gathered from the forward */
    be->xent_bwd(be, m->logits, m->rowmax, m->sumexp, m->tok_tgt, scale, N, m->v_local, m->v_valid, m->v_start);
    linear_bwd_x(be, m->tmp_nd, m->logits, W(m->p_head), N, D, m->v_local, 0.0f);
    linear_bwd_w(be, DW(m->p_head), m->logits, m->lnf_full, N, D, m->v_local);
    void *dln = reduce_in_grad(m, m->tmp_nd);
    be->memset0(be, m->dres_a, (size_t)m->n_res * D * m->act_size);
    be->rmsnorm_bwd(be, m->dres_a, DW(m->p_norm), dln, m->x_final, W(m->p_norm), m->rstdf, m->n_res, D);
    if (head_unit != 0) llama_fsdp_grad_end(m, head_unit);

    for (int l = m->L - 1; l >= 0; l--) {
        llama_fsdp_gather(m, 1 + l);
        if (l > 0) llama_fsdp_prefetch(m, l);   /* block l - 1's unit */
        llama_fsdp_grad_begin(m, 1 + l);
        /* full recomputation: block l's forward again from its kept input, with the weights just gathered.
         * The last block's activations are still in the shared buffers (nothing ran a block since). */
        if (m->opt.recompute && l + 1 < m->L) block_forward(m, l, NULL, m->T, 0);
        block_backward(m, l);
        llama_fsdp_grad_end(m, 1 + l);
    }
    void *dx = gather_in(m, m->dfull, m->dres_a);
    be->embed_bwd(be, DW(m->p_embed), dx, m->tok_in, N, D, m->v_start, m->v_local);
    llama_fsdp_grad_end(m, 0);
    m->have_targets = 0;
}

void llama_step(llama_model *m, const mp_adamw_hparams *hp, double lr, int64_t t, float grad_scale) {
    mp_optim_slot slots[LLAMA_MAX_PARAMS];
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        void *p_act = p->shard_act == (void *)p->shard ? NULL : p->shard_act;   /* written in the same pass */
        slots[i] = (mp_optim_slot){p->shard, p->shard_grad, p->m, p->v, p_act, p->shard_rows * p->tp_shape[1],
                                   p->decay};
    }
    mp_adamw_step(m->be, hp, slots, m->nparams, lr, t, grad_scale);
    llama_fsdp_invalidate(m);
}

void llama_shards_changed(llama_model *m) {
    llama_params_refresh_act(m);
    llama_fsdp_invalidate(m);
}

void llama_logits(const llama_model *m, float *host_dst, int64_t row0, int64_t nrows, int *v_start, int *v_local,
                  int *v_valid) {
    if (v_start) *v_start = m->v_start;
    if (v_local) *v_local = m->v_local;
    if (v_valid) *v_valid = m->v_valid;
    if (!host_dst || nrows == 0) return;
    assert(row0 >= 0 && nrows > 0 && row0 + nrows <= (m->kv ? 1 : m->N));
    mp_backend *be = m->be;
    int64_t n = nrows * m->v_local;
    const void *src = mp_act_at(be, m->logits, row0 * m->v_local);
    if (be->act_dtype == MP_F32) {
        be->to_host(be, host_dst, src, (size_t)n * sizeof(float));
        return;
    }
    assert(be->act_dtype == MP_BF16);
    uint16_t *h = mp_xmalloc((size_t)n * sizeof(uint16_t));   /* not in a step: tools and sampling */
    be->to_host(be, h, src, (size_t)n * sizeof(uint16_t));
    mp_bf16_to_f32_n(host_dst, h, n);
    free(h);
}

const llama_config *llama_model_config(const llama_model *m) { return &m->cfg; }
mp_backend *llama_backend(const llama_model *m) { return m->be; }
mp_mesh *llama_mesh(const llama_model *m) { return m->mesh; }
