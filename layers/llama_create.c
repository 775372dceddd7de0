/*
 * layers/llama_create.c — creating a Llama model (llama_create, llama_destroy) and planning its memory
 * (llama_plan_memory) without creating it: the checks of a config against the mesh, the plan range and
 * the backend, the geometry of this rank, and the one allocation that holds every activation and
 * scratch buffer (act_layout, shared by the plan and the allocation so they cannot disagree). The model
 * itself, and which activations a training, forward-only, KV-cache or recomputing model keeps: the top
 * comment of layers/llama.c.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/llama_impl.h"
#include "layers/rope.h"

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
