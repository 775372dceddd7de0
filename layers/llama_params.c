/*
 * layers/llama_params.c — the parameter table of the Llama model: names, global shapes, the TP slice
 * and the FSDP shard of every parameter, FSDP units, and the one-allocation storage behind them.
 *
 * Storage (llm.c style): one device allocation per category holds every parameter's local shard
 * (MP_MEM_PARAMS), one its gradient (MP_MEM_GRADS), one both Adam moments (MP_MEM_OPTIM). Within each, the
 * shards of one FSDP unit are contiguous, in parameter order, so a unit packs for a collective with no
 * copies. On dp = 1 the shard is the whole TP slice and `full` aliases `shard` (no gather buffers).
 * On dp > 1 gathered TP slices live in MP_MEM_GATHER buffers (llama_fsdp.c).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/kernels_cpu.h"   /* mp_cpu_threads */
#include "layers/llama_impl.h"

void llama_place(const llama_config *c, const llama_tensor_spec *spec, int tp, int tp_rank, int dp,
                 int dp_rank, llama_placement *out) {
    assert(tp >= 1 && tp_rank >= 0 && tp_rank < tp && dp >= 1 && dp_rank >= 0 && dp_rank < dp);
    llama_placement *p = out;
    memset(p, 0, sizeof *p);
    int64_t rows = spec->shape[0], cols = spec->shape[1], start, count;
    switch (spec->split) {
    case LLAMA_REPLICATED:
        p->tp_shape[0] = rows;
        p->tp_shape[1] = cols;
        p->valid_rows = rows;
        break;
    case LLAMA_SPLIT_ROWS:
        if (spec->vocab) {            /* vocab: equal blocks of ceil(V / tp), the last padded */
            int64_t per = (c->vocab_size + tp - 1) / tp;
            p->tp_off[0] = (int64_t)tp_rank * per;
            p->tp_shape[0] = per;
            int64_t valid = rows - p->tp_off[0];
            p->valid_rows = valid < 0 ? 0 : valid > per ? per : valid;
        } else {
            mp_split(rows, tp, tp_rank, &start, &count);
            p->tp_off[0] = start;
            p->tp_shape[0] = count;
            p->valid_rows = count;
        }
        p->tp_shape[1] = cols;
        break;
    case LLAMA_SPLIT_COLS:
        mp_split(cols, tp, tp_rank, &start, &count);
        p->tp_off[1] = start;
        p->tp_shape[0] = rows;
        p->tp_shape[1] = count;
        p->valid_rows = rows;
        break;
    }
    mp_split(p->tp_shape[0], dp, dp_rank, &p->shard_row0, &p->shard_rows);
}

int64_t llama_disk_box(const llama_placement *pl, int64_t off[2], int64_t shape[2]) {
    int64_t rows = pl->valid_rows - pl->shard_row0;
    if (rows > pl->shard_rows) rows = pl->shard_rows;
    if (rows < 0) rows = 0;
    off[0] = pl->tp_off[0] + pl->shard_row0;
    off[1] = pl->tp_off[1];
    shape[0] = rows;
    shape[1] = pl->tp_shape[1];
    return rows;
}

void llama_init_box(const llama_config *c, const llama_tensor_spec *spec, uint64_t seed, const int64_t off[2],
                    const int64_t shape[2], float *out) {
    assert(off[0] >= 0 && off[0] + shape[0] <= spec->shape[0] && off[1] >= 0 && off[1] + shape[1] <= spec->shape[1]);
    float std = (float)c->initializer_range;
    mp_philox_key key = mp_rng_key(seed, spec->name);
    const int64_t rows = shape[0], cols = shape[1];
    if (spec->init != LLAMA_INIT_NORMAL) {
        float v = spec->init == LLAMA_INIT_ONES ? 1.0f : 0.0f;
        for (int64_t i = 0; i < rows * cols; i++) out[i] = v;
        return;
    }
    /* Every element is a pure function of (seed, name, global index), so rows split over threads give
     * the same bits as one thread: a fresh run's start-up (10 Philox rounds, a log and a cos per weight)
     * scales with the cores instead of being one core's. */
#pragma omp parallel for schedule(static) num_threads(mp_cpu_threads()) if (rows * cols >= 4096)
    for (int64_t r = 0; r < rows; r++)
        for (int64_t col = 0; col < cols; col++) {
            int64_t gr = off[0] + r, gc = off[1] + col;
            out[r * cols + col] = std * mp_rng_normal(key, (uint64_t)(gr * spec->shape[1] + gc));
        }
}

int64_t llama_param_disk_box(const llama_model *m, const llama_param *p, int64_t off[2], int64_t shape[2]) {
    llama_placement pl;
    memcpy(pl.tp_off, p->tp_off, sizeof pl.tp_off);
    memcpy(pl.tp_shape, p->tp_shape, sizeof pl.tp_shape);
    pl.valid_rows = p->valid_rows;
    pl.shard_row0 = p->shard_row0;
    pl.shard_rows = p->shard_rows;
    return llama_disk_box(&pl, off, shape);
}

/* Appends spec to the parameter table with this rank's placement; returns its index. */
static int add_param(llama_model *m, const llama_tensor_spec *spec) {
    assert(m->nparams < LLAMA_MAX_PARAMS);
    llama_param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%.95s", spec->name);
    p->ndim = spec->ndim;
    p->gshape[0] = spec->shape[0];
    p->gshape[1] = spec->shape[1];
    p->split = spec->split;
    p->unit = spec->unit;
    p->decay = spec->ndim == 2;   /* no decay for norm weights and biases (torchtitan's and HF's rule) */
    p->tp_grad_sum = spec->tp_grad_sum;
    llama_placement pl;
    llama_place(&m->cfg, spec, m->tp, m->tp_rank, m->dp, m->dp_rank, &pl);
    memcpy(p->tp_off, pl.tp_off, sizeof p->tp_off);
    memcpy(p->tp_shape, pl.tp_shape, sizeof p->tp_shape);
    p->valid_rows = pl.valid_rows;
    p->shard_row0 = pl.shard_row0;
    p->shard_rows = pl.shard_rows;
    return m->nparams++;
}

int llama_tensor_specs(const llama_config *c, llama_tensor_spec *out, int cap) {
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, hd = llama_head_dim(c);
    int64_t H = c->num_attention_heads, KV = c->num_key_value_heads;
    int L = c->num_hidden_layers, n = 0;
#define SPECV(nd, rows, cols, sp, voc, u, ...)                                            \
    do {                                                                                  \
        if (out && n < cap) {                                                             \
            llama_tensor_spec *t_ = &out[n];                                              \
            memset(t_, 0, sizeof *t_);                                                    \
            snprintf(t_->name, sizeof t_->name, __VA_ARGS__);                             \
            t_->ndim = (nd);                                                              \
            t_->shape[0] = (rows);                                                        \
            t_->shape[1] = (nd) == 2 ? (cols) : 1;                                        \
            t_->split = (sp);                                                             \
            t_->vocab = (voc);                                                            \
            t_->unit = (u);                                                               \
            t_->init = (nd) == 2 ? LLAMA_INIT_NORMAL : LLAMA_INIT_ONES;                   \
        }                                                                                 \
        n++;                                                                              \
    } while (0)
#define SPEC(nd, rows, cols, sp, u, ...) SPECV(nd, rows, cols, sp, 0, u, __VA_ARGS__)
/* the spec just added (when it was written) gets init kind k / the tp_grad_sum flag */
#define LAST_INIT(k) do { if (out && n <= cap) out[n - 1].init = (k); } while (0)
#define LAST_TP_SUM() do { if (out && n <= cap) out[n - 1].tp_grad_sum = 1; } while (0)
    /* Units: untied: U0 = {embed}, U1..UL = blocks, U(L+1) = {norm, lm_head}; tied: U0 = {embed, norm},
     * U1..UL = blocks (the head reuses U0's embedding). */
    SPECV(2, V, D, LLAMA_SPLIT_ROWS, 1, 0, "model.embed_tokens.weight");
    if (c->tie_word_embeddings) SPEC(1, D, 1, LLAMA_REPLICATED, 0, "model.norm.weight");
    for (int l = 0; l < L; l++) {
        int u = 1 + l;
        SPEC(1, D, 1, LLAMA_REPLICATED, u, "model.layers.%d.input_layernorm.weight", l);
        SPEC(2, H * hd, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.q_proj.weight", l);
        SPEC(2, KV * hd, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.k_proj.weight", l);
        SPEC(2, KV * hd, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.v_proj.weight", l);
        if (c->qkv_bias) {   /* split by heads as the weights' rows; adjacent, as they are */
            SPEC(1, H * hd, 1, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.q_proj.bias", l);
            LAST_INIT(LLAMA_INIT_ZEROS);
            SPEC(1, KV * hd, 1, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.k_proj.bias", l);
            LAST_INIT(LLAMA_INIT_ZEROS);
            SPEC(1, KV * hd, 1, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.v_proj.bias", l);
            LAST_INIT(LLAMA_INIT_ZEROS);
        }
        if (c->qk_norm) {    /* one weight for every head: replicated, its gradient summed over tp */
            SPEC(1, hd, 1, LLAMA_REPLICATED, u, "model.layers.%d.self_attn.q_norm.weight", l);
            LAST_TP_SUM();
            SPEC(1, hd, 1, LLAMA_REPLICATED, u, "model.layers.%d.self_attn.k_norm.weight", l);
            LAST_TP_SUM();
        }
        SPEC(2, D, H * hd, LLAMA_SPLIT_COLS, u, "model.layers.%d.self_attn.o_proj.weight", l);
        SPEC(1, D, 1, LLAMA_REPLICATED, u, "model.layers.%d.post_attention_layernorm.weight", l);
        SPEC(2, I, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.mlp.gate_proj.weight", l);
        SPEC(2, I, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.mlp.up_proj.weight", l);
        SPEC(2, D, I, LLAMA_SPLIT_COLS, u, "model.layers.%d.mlp.down_proj.weight", l);
    }
    if (!c->tie_word_embeddings) {
        SPEC(1, D, 1, LLAMA_REPLICATED, L + 1, "model.norm.weight");
        SPECV(2, V, D, LLAMA_SPLIT_ROWS, 1, L + 1, "lm_head.weight");
    }
#undef SPEC
#undef SPECV
#undef LAST_INIT
#undef LAST_TP_SUM
    return n;
}

/* Builds the parameter table from the specs: the TP slice and FSDP shard of each on this rank. */
void llama_params_build(llama_model *m) {
    int n = llama_tensor_specs(&m->cfg, NULL, 0);
    assert(n <= LLAMA_MAX_PARAMS);
    llama_tensor_spec *specs = mp_xmalloc(sizeof *specs * (size_t)n);
    llama_tensor_specs(&m->cfg, specs, n);
    m->nparams = 0;
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) m->lp[l].bq = m->lp[l].bk = m->lp[l].bv = m->lp[l].qn = m->lp[l].kn = -1;
    for (int i = 0; i < n; i++) {
        const llama_tensor_spec *t = &specs[i];
        int idx = add_param(m, t);
        const char *nm = t->name;
        int l = -1;
        char field[64] = "";
        if (sscanf(nm, "model.layers.%d.%63s", &l, field) == 2) {
            llama_layer_params *lp = &m->lp[l];
            if (!strcmp(field, "input_layernorm.weight")) lp->ln1 = idx;
            else if (!strcmp(field, "self_attn.q_proj.weight")) lp->wq = idx;
            else if (!strcmp(field, "self_attn.k_proj.weight")) lp->wk = idx;
            else if (!strcmp(field, "self_attn.v_proj.weight")) lp->wv = idx;
            else if (!strcmp(field, "self_attn.q_proj.bias")) lp->bq = idx;
            else if (!strcmp(field, "self_attn.k_proj.bias")) lp->bk = idx;
            else if (!strcmp(field, "self_attn.v_proj.bias")) lp->bv = idx;
            else if (!strcmp(field, "self_attn.q_norm.weight")) lp->qn = idx;
            else if (!strcmp(field, "self_attn.k_norm.weight")) lp->kn = idx;
            else if (!strcmp(field, "self_attn.o_proj.weight")) lp->wo = idx;
            else if (!strcmp(field, "post_attention_layernorm.weight")) lp->ln2 = idx;
            else if (!strcmp(field, "mlp.gate_proj.weight")) lp->wg = idx;
            else if (!strcmp(field, "mlp.up_proj.weight")) lp->wu = idx;
            else if (!strcmp(field, "mlp.down_proj.weight")) lp->wd = idx;
            else assert(!"unknown layer tensor");
        } else if (!strcmp(nm, "model.embed_tokens.weight")) {
            m->p_embed = idx;
        } else if (!strcmp(nm, "model.norm.weight")) {
            m->p_norm = idx;
        } else if (!strcmp(nm, "lm_head.weight")) {
            m->p_head = idx;
        }
    }
    free(specs);
    if (m->cfg.tie_word_embeddings) m->p_head = m->p_embed;
    m->nunits = m->cfg.num_hidden_layers + (m->cfg.tie_word_embeddings ? 1 : 2);
}

/* Elements of a parameter's local shard and of its full TP slice. */
static int64_t full_numel(const llama_param *p) { return p->tp_shape[0] * p->tp_shape[1]; }

/* Lays out the FSDP units over the parameter table: each unit's parameters, shard offset and sizes, the
 * largest gathered unit and the shard total. Allocates nothing. */
void llama_params_layout(llama_model *m) {
    int64_t total = 0;
    m->max_unit_full = 0;
    for (int u = 0; u < m->nunits; u++) {
        llama_unit *un = &m->units[u];
        memset(un, 0, sizeof *un);
        un->first = -1;
    }
    /* Parameters of a unit are consecutive in the table except the tied case's norm (unit 0), which is
     * added right after the embedding, so consecutiveness holds there too. */
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        llama_unit *un = &m->units[p->unit];
        if (un->first < 0) un->first = i;
        assert(un->first + un->count == i);
        un->count++;
    }
    for (int u = 0; u < m->nunits; u++) {
        llama_unit *un = &m->units[u];
        un->shard_off = total;
        for (int i = un->first; i < un->first + un->count; i++) {
            un->shard_numel += llama_shard_numel(&m->params[i]);
            un->full_numel += full_numel(&m->params[i]);
        }
        total += un->shard_numel;
        if (un->full_numel > m->max_unit_full) m->max_unit_full = un->full_numel;
    }
    m->shard_total = total;
}

/* Allocates the shard storage laid out by llama_params_layout; points every parameter's shard,
 * shard_grad, m, v (and, on dp = 1, full and full_grad) into it. */
void llama_params_alloc(llama_model *m) {
    mp_backend *be = m->be;
    int64_t total = m->shard_total;
    size_t bytes = (size_t)total * sizeof(float);
    m->shard_params = be->alloc(be, bytes, MP_MEM_PARAMS);
    int train = !m->opt.inference;   /* a forward-only model has no gradients and no moments */
    m->shard_grads = train ? be->alloc(be, bytes, MP_MEM_GRADS) : NULL;
    m->shard_moments = train ? be->alloc(be, 2 * bytes, MP_MEM_OPTIM) : NULL;
    /* the compute copy of the masters: a buffer of its own when the compute dtype is narrower */
    m->shard_act = m->act_size == sizeof(float) ? (void *)m->shard_params
                                                : be->alloc(be, (size_t)total * m->act_size, MP_MEM_PARAMS);
    for (int u = 0; u < m->nunits; u++) {
        llama_unit *un = &m->units[u];
        int64_t off = un->shard_off;
        for (int i = un->first; i < un->first + un->count; i++) {
            llama_param *p = &m->params[i];
            p->shard = m->shard_params + off;
            p->shard_act = mp_act_at(be, m->shard_act, off);
            p->shard_grad = train ? m->shard_grads + off : NULL;
            p->m = train ? m->shard_moments + off : NULL;
            p->v = train ? m->shard_moments + total + off : NULL;
            if (m->dp == 1) {
                p->full = p->shard_act;
                p->full_grad = p->shard_grad;
            }
            off += llama_shard_numel(p);
        }
    }
}

void llama_params_free(llama_model *m) {
    size_t bytes = (size_t)m->shard_total * sizeof(float);
    m->be->free(m->be, m->shard_params, bytes, MP_MEM_PARAMS);
    if (m->shard_grads) m->be->free(m->be, m->shard_grads, bytes, MP_MEM_GRADS);
    if (m->shard_moments) m->be->free(m->be, m->shard_moments, 2 * bytes, MP_MEM_OPTIM);
    if (m->shard_act != (void *)m->shard_params)
        m->be->free(m->be, m->shard_act, (size_t)m->shard_total * m->act_size, MP_MEM_PARAMS);
}

void llama_params_refresh_act(llama_model *m) {
    if (m->shard_act == (void *)m->shard_params) return;
    m->be->to_act(m->be, m->shard_act, m->shard_params, m->shard_total);
}

/* Generates parameter p's disk box (off, shape: shape[0] rows of shape[1] columns) into the first rows of
 * its shard. A backend whose buffers are host memory gets them in place; a device gets them through a
 * host staging buffer of at most `staging` bytes (at least one row), band by band (every element is a
 * pure function of its global index, so the bands give the bits one box would), so start-up needs no
 * host copy of the largest shard (the embedding's: 32.8 MB at vocab 32000 x hidden 256) beyond the
 * memory plan. */
static void init_param(llama_model *m, const llama_tensor_spec *spec, llama_param *p, uint64_t seed,
                       const int64_t off[2], const int64_t shape[2], int64_t staging) {
    mp_backend *be = m->be;
    const int64_t cols = shape[1];
    if (be->host_memory) {
        llama_init_box(&m->cfg, spec, seed, off, shape, p->shard);
        return;
    }
    int64_t band = staging / ((int64_t)sizeof(float) * cols);
    if (band < 1) band = 1;
    if (band > shape[0]) band = shape[0];
    float *host = mp_aligned((size_t)(band * cols) * sizeof(float), MP_MEM_OTHER);
    for (int64_t r0 = 0; r0 < shape[0]; r0 += band) {
        int64_t o[2] = {off[0] + r0, off[1]}, s[2] = {shape[0] - r0 < band ? shape[0] - r0 : band, cols};
        llama_init_box(&m->cfg, spec, seed, o, s, host);
        be->to_device(be, p->shard + r0 * cols, host, (size_t)(s[0] * cols) * sizeof(float));
    }
    mp_free_acct(host, (size_t)(band * cols) * sizeof(float), MP_MEM_OTHER);
}

void llama_init_weights_staged(llama_model *m, uint64_t seed, int64_t staging) {
    mp_backend *be = m->be;
    int nspecs = llama_tensor_specs(&m->cfg, NULL, 0);
    llama_tensor_spec *specs = mp_xmalloc(sizeof *specs * (size_t)nspecs);
    llama_tensor_specs(&m->cfg, specs, nspecs);
    assert(nspecs == m->nparams);
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        int64_t n = llama_shard_numel(p), done = 0;
        /* the shard's rows inside the real tensor, generated as one box of the global tensor */
        int64_t off[2], shape[2];
        if (llama_param_disk_box(m, p, off, shape) > 0) {
            assert(shape[1] == p->tp_shape[1] && shape[0] * shape[1] <= n);
            init_param(m, &specs[i], p, seed, off, shape, staging);
            done = shape[0] * shape[1];
        }
        /* the rows past it (vocab padding) never hold a value */
        if (n > done) be->memset0(be, p->shard + done, (size_t)(n - done) * sizeof(float));
    }
    free(specs);
    size_t bytes = (size_t)m->shard_total * sizeof(float);
    if (m->shard_grads) be->memset0(be, m->shard_grads, bytes);
    if (m->shard_moments) be->memset0(be, m->shard_moments, 2 * bytes);
    llama_shards_changed(m);
}

void llama_init_weights(llama_model *m, uint64_t seed) { llama_init_weights_staged(m, seed, LLAMA_INIT_STAGING_BYTES); }

int llama_num_params(const llama_model *m) { return m->nparams; }

llama_param *llama_param_at(llama_model *m, int i) {
    assert(i >= 0 && i < m->nparams);
    return &m->params[i];
}

void llama_zero_grad(llama_model *m) {
    assert(!m->opt.inference && "a forward-only model has no gradients");
    m->be->memset0(m->be, m->shard_grads, (size_t)m->shard_total * sizeof(float));
}

/* Adds this rank's gradient sum of squares into the device scalar *acc, parameter by parameter in
 * table order (each sum formed in double, then added: the order llama_grad_norm always had). */
static void grad_sumsq(llama_model *m, double *acc) {
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        /* Replicated parameters are identical on every tp rank: count them on tp rank 0 only. */
        if (p->split == LLAMA_REPLICATED && m->tp_rank != 0) continue;
        m->be->sumsq_acc(m->be, acc, p->shard_grad, llama_shard_numel(p));
    }
}

void llama_grad_sumsq_accum(llama_model *m) { grad_sumsq(m, &m->sums[LLAMA_SUM_GRADSQ]); }

double llama_grad_norm(llama_model *m) {
    double *acc = &m->sums[LLAMA_SUM_SCRATCH], ss;
    m->be->memset0(m->be, acc, sizeof *acc);
    grad_sumsq(m, acc);
    m->be->to_host(m->be, &ss, acc, sizeof ss);
    m->mesh->world_comm->ops->all_reduce_f64(m->mesh->world_comm, &ss, 1);
    return sqrt(ss);
}

/* Whether llama_sync_grads sums parameter p's gradient over tp: under SP every replicated one (each rank
 * saw only its sequence chunk), and always the tp_grad_sum ones (each rank saw only its heads). */
static int tp_summed(const llama_model *m, const llama_param *p) {
    return p->tp_grad_sum || (m->sp && p->split == LLAMA_REPLICATED);
}

void llama_sync_grads(llama_model *m) {
    if (m->tp == 1) return;
    /* The partial gradients are packed into one buffer (sync_buf: room for every replicated parameter,
     * a superset) so the step does one all-reduce, not one per tensor. */
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++)
        if (tp_summed(m, &m->params[i])) n += llama_shard_numel(&m->params[i]);
    if (n == 0) return;
    float *buf = m->sync_buf;
    int64_t off = 0;
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        if (!tp_summed(m, p)) continue;
        m->be->copy(m->be, buf + off, p->shard_grad, (size_t)llama_shard_numel(p) * sizeof(float));
        off += llama_shard_numel(p);
    }
    m->mesh->tp_comm->ops->all_reduce(m->mesh->tp_comm, buf, n, MP_F32, 0);
    off = 0;
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        if (!tp_summed(m, p)) continue;
        m->be->copy(m->be, p->shard_grad, buf + off, (size_t)llama_shard_numel(p) * sizeof(float));
        off += llama_shard_numel(p);
    }
}

int64_t llama_replicated_shard_numel(const llama_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].split == LLAMA_REPLICATED) n += llama_shard_numel(&m->params[i]);
    return n;
}
