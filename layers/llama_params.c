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
#include "layers/llama_impl.h"

/* Appends a parameter to the table; returns its index. rows/cols is the global logical shape (cols = 1
 * for vectors). */
static int add_param(llama_model *m, const char *name, int ndim, int64_t rows, int64_t cols,
                     llama_tp_split split, int unit) {
    assert(m->nparams < LLAMA_MAX_PARAMS);
    llama_param *p = &m->params[m->nparams];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%.95s", name);
    p->ndim = ndim;
    p->gshape[0] = rows;
    p->gshape[1] = ndim == 2 ? cols : 1;
    p->split = split;
    p->unit = unit;
    p->decay = ndim == 2;
    int tp = m->tp, r = m->tp_rank;
    int64_t start, count;
    switch (split) {
    case LLAMA_REPLICATED:
        p->tp_off[0] = 0; p->tp_off[1] = 0;
        p->tp_shape[0] = rows; p->tp_shape[1] = p->gshape[1];
        p->valid_rows = rows;
        break;
    case LLAMA_SPLIT_ROWS:
        if (rows == m->cfg.vocab_size) {            /* vocab: padded to a multiple of tp */
            int64_t per = m->v_local;
            p->tp_off[0] = (int64_t)r * per;
            p->tp_shape[0] = per;
            int64_t valid = rows - p->tp_off[0];
            p->valid_rows = valid < 0 ? 0 : valid > per ? per : valid;
        } else {
            mp_split(rows, tp, r, &start, &count);
            p->tp_off[0] = start;
            p->tp_shape[0] = count;
            p->valid_rows = count;
        }
        p->tp_off[1] = 0;
        p->tp_shape[1] = p->gshape[1];
        break;
    case LLAMA_SPLIT_COLS:
        mp_split(cols, tp, r, &start, &count);
        p->tp_off[0] = 0; p->tp_off[1] = start;
        p->tp_shape[0] = rows; p->tp_shape[1] = count;
        p->valid_rows = rows;
        break;
    }
    mp_split(p->tp_shape[0], m->dp, m->dp_rank, &p->shard_row0, &p->shard_rows);
    return m->nparams++;
}

int llama_tensor_specs(const mp_model_config *c, llama_tensor_spec *out, int cap) {
    int64_t D = c->hidden_size, I = c->intermediate_size, V = c->vocab_size, hd = mp_head_dim(c);
    int64_t H = c->num_attention_heads, KV = c->num_key_value_heads;
    int L = c->num_hidden_layers, n = 0;
#define SPEC(nd, rows, cols, sp, u, ...)                                                  \
    do {                                                                                  \
        if (out && n < cap) {                                                             \
            llama_tensor_spec *t_ = &out[n];                                              \
            snprintf(t_->name, sizeof t_->name, __VA_ARGS__);                             \
            t_->ndim = (nd);                                                              \
            t_->shape[0] = (rows);                                                        \
            t_->shape[1] = (nd) == 2 ? (cols) : 1;                                        \
            t_->split = (sp);                                                             \
            t_->unit = (u);                                                               \
        }                                                                                 \
        n++;                                                                              \
    } while (0)
    /* Units: untied: U0 = {embed}, U1..UL = blocks, U(L+1) = {norm, lm_head}; tied: U0 = {embed, norm},
     * U1..UL = blocks (the head reuses U0's embedding). */
    SPEC(2, V, D, LLAMA_SPLIT_ROWS, 0, "model.embed_tokens.weight");
    if (c->tie_word_embeddings) SPEC(1, D, 1, LLAMA_REPLICATED, 0, "model.norm.weight");
    for (int l = 0; l < L; l++) {
        int u = 1 + l;
        SPEC(1, D, 1, LLAMA_REPLICATED, u, "model.layers.%d.input_layernorm.weight", l);
        SPEC(2, H * hd, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.q_proj.weight", l);
        SPEC(2, KV * hd, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.k_proj.weight", l);
        SPEC(2, KV * hd, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.self_attn.v_proj.weight", l);
        SPEC(2, D, H * hd, LLAMA_SPLIT_COLS, u, "model.layers.%d.self_attn.o_proj.weight", l);
        SPEC(1, D, 1, LLAMA_REPLICATED, u, "model.layers.%d.post_attention_layernorm.weight", l);
        SPEC(2, I, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.mlp.gate_proj.weight", l);
        SPEC(2, I, D, LLAMA_SPLIT_ROWS, u, "model.layers.%d.mlp.up_proj.weight", l);
        SPEC(2, D, I, LLAMA_SPLIT_COLS, u, "model.layers.%d.mlp.down_proj.weight", l);
    }
    if (!c->tie_word_embeddings) {
        SPEC(1, D, 1, LLAMA_REPLICATED, L + 1, "model.norm.weight");
        SPEC(2, V, D, LLAMA_SPLIT_ROWS, L + 1, "lm_head.weight");
    }
#undef SPEC
    return n;
}

/* Builds the parameter table from the specs: the TP slice and FSDP shard of each on this rank. */
void llama_params_build(llama_model *m) {
    int n = llama_tensor_specs(&m->cfg, NULL, 0);
    assert(n <= LLAMA_MAX_PARAMS);
    llama_tensor_spec *specs = mp_xmalloc(sizeof *specs * (size_t)n);
    llama_tensor_specs(&m->cfg, specs, n);
    m->nparams = 0;
    for (int i = 0; i < n; i++) {
        const llama_tensor_spec *t = &specs[i];
        int idx = add_param(m, t->name, t->ndim, t->shape[0], t->shape[1], t->split, t->unit);
        const char *nm = t->name;
        int l = -1;
        char field[64] = "";
        if (sscanf(nm, "model.layers.%d.%63s", &l, field) == 2) {
            llama_layer_params *lp = &m->lp[l];
            if (!strcmp(field, "input_layernorm.weight")) lp->ln1 = idx;
            else if (!strcmp(field, "self_attn.q_proj.weight")) lp->wq = idx;
            else if (!strcmp(field, "self_attn.k_proj.weight")) lp->wk = idx;
            else if (!strcmp(field, "self_attn.v_proj.weight")) lp->wv = idx;
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
static int64_t shard_numel(const llama_param *p) { return p->shard_rows * p->tp_shape[1]; }
static int64_t full_numel(const llama_param *p) { return p->tp_shape[0] * p->tp_shape[1]; }

/* Lays out units over the parameter table and allocates shard storage; points every parameter's shard,
 * shard_grad, m, v (and, on dp = 1, full and full_grad) into it. */
void llama_params_alloc(llama_model *m) {
    mp_backend *be = m->be;
    int64_t total = 0;
    for (int u = 0; u < m->nunits; u++) {
        llama_unit *un = &m->units[u];
        memset(un, 0, sizeof *un);
        un->first = -1;
        un->shard_off = total;
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
            un->shard_numel += shard_numel(&m->params[i]);
            un->full_numel += full_numel(&m->params[i]);
        }
        total += un->shard_numel;
        if (un->full_numel > m->max_unit_full) m->max_unit_full = un->full_numel;
    }
    m->shard_total = total;
    size_t bytes = (size_t)total * sizeof(float);
    m->shard_params = be->alloc(be, bytes, MP_MEM_PARAMS);
    m->shard_grads = be->alloc(be, bytes, MP_MEM_GRADS);
    m->shard_moments = be->alloc(be, 2 * bytes, MP_MEM_OPTIM);
    for (int u = 0; u < m->nunits; u++) {
        llama_unit *un = &m->units[u];
        int64_t off = un->shard_off;
        for (int i = un->first; i < un->first + un->count; i++) {
            llama_param *p = &m->params[i];
            p->shard = m->shard_params + off;
            p->shard_grad = m->shard_grads + off;
            p->m = m->shard_moments + off;
            p->v = m->shard_moments + total + off;
            if (m->dp == 1) {
                p->full = p->shard;
                p->full_grad = p->shard_grad;
            }
            off += shard_numel(p);
        }
    }
}

void llama_params_free(llama_model *m) {
    size_t bytes = (size_t)m->shard_total * sizeof(float);
    m->be->free(m->be, m->shard_params, bytes, MP_MEM_PARAMS);
    m->be->free(m->be, m->shard_grads, bytes, MP_MEM_GRADS);
    m->be->free(m->be, m->shard_moments, 2 * bytes, MP_MEM_OPTIM);
}

void llama_init_weights(llama_model *m, uint64_t seed) {
    mp_backend *be = m->be;
    float std = (float)m->cfg.initializer_range;
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        int64_t cols = p->tp_shape[1], n = shard_numel(p);
        float *host = mp_aligned((size_t)(n ? n : 1) * sizeof(float), MP_MEM_OTHER);
        mp_philox_key key = mp_rng_key(seed, p->name);
        for (int64_t r = 0; r < p->shard_rows; r++) {
            int64_t slice_row = p->shard_row0 + r;
            int64_t grow = p->tp_off[0] + slice_row;
            for (int64_t c = 0; c < cols; c++) {
                float val;
                if (slice_row >= p->valid_rows) val = 0.0f;     /* vocab padding never holds a value */
                else if (p->ndim == 1) val = 1.0f;
                else val = std * mp_rng_normal(key, (uint64_t)(grow * p->gshape[1] + p->tp_off[1] + c));
                host[r * cols + c] = val;
            }
        }
        be->to_device(be, p->shard, host, (size_t)n * sizeof(float));
        mp_free_acct(host, (size_t)(n ? n : 1) * sizeof(float), MP_MEM_OTHER);
    }
    size_t bytes = (size_t)m->shard_total * sizeof(float);
    be->memset0(be, m->shard_grads, bytes);
    be->memset0(be, m->shard_moments, 2 * bytes);
    llama_fsdp_invalidate(m);
}

int llama_num_params(const llama_model *m) { return m->nparams; }

llama_param *llama_param_at(llama_model *m, int i) {
    assert(i >= 0 && i < m->nparams);
    return &m->params[i];
}

int llama_param_find(const llama_model *m, const char *name) {
    for (int i = 0; i < m->nparams; i++)
        if (!strcmp(m->params[i].name, name)) return i;
    return -1;
}

void llama_zero_grad(llama_model *m) {
    m->be->memset0(m->be, m->shard_grads, (size_t)m->shard_total * sizeof(float));
}

double llama_grad_norm(llama_model *m) {
    double ss = 0;
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        /* Replicated parameters are identical on every tp rank: count them on tp rank 0 only. */
        if (p->split == LLAMA_REPLICATED && m->tp_rank != 0) continue;
        ss += m->be->sumsq(m->be, p->shard_grad, shard_numel(p));
    }
    m->mesh->world_comm->all_reduce_f64(m->mesh->world_comm, &ss, 1);
    return sqrt(ss);
}

void llama_sync_grads(llama_model *m) {
    if (m->tp == 1 || !m->sp) return;
    /* Under SP each tp rank saw only its sequence chunk in the norms: sum the partial norm-weight grads.
     * They are packed into one buffer so the step does one all-reduce, not one per norm. */
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].split == LLAMA_REPLICATED) n += shard_numel(&m->params[i]);
    if (n == 0) return;
    float *buf = m->sync_buf;
    int64_t off = 0;
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        if (p->split != LLAMA_REPLICATED) continue;
        m->be->copy(m->be, buf + off, p->shard_grad, (size_t)shard_numel(p) * sizeof(float));
        off += shard_numel(p);
    }
    m->mesh->tp_comm->all_reduce(m->mesh->tp_comm, buf, n, 0);
    off = 0;
    for (int i = 0; i < m->nparams; i++) {
        llama_param *p = &m->params[i];
        if (p->split != LLAMA_REPLICATED) continue;
        m->be->copy(m->be, p->shard_grad, buf + off, (size_t)shard_numel(p) * sizeof(float));
        off += shard_numel(p);
    }
}

int64_t llama_replicated_shard_numel(const llama_model *m) {
    int64_t n = 0;
    for (int i = 0; i < m->nparams; i++)
        if (m->params[i].split == LLAMA_REPLICATED) n += shard_numel(&m->params[i]);
    return n;
}
