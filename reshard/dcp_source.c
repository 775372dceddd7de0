/*
 * reshard/dcp_source.c — see dcp_source.h. Design:
 *   - Names are mapped engine -> DCP on each read by reshard/dcp_names.c's rs_dcp_name under the
 *     spelling detect_names found (the sink's map, the same code): the DCP name, the first row of a fused
 *     HF tensor, and whether torchtitan interleaves its rows (rs_dcp_titan_row).
 *   - A chunk is read through reshard/safetensors.c's st_read_f32 over a view: one st_file per data
 *     file (data_start 0, the fd opened on first use) and an st_tensor per chunk whose data begins at the
 *     chunk's row-major bytes in its record (dcp_resolve, once per chunk). So the range reads, the
 *     row-chunk strategy for narrow column ranges and the bf16/f16 widening are the ones import from
 *     safetensors uses, not a copy of them.
 *   - An overlap of chunk and box that spans the box's columns is read straight into the box; a narrower
 *     one goes through a scratch buffer (at most the box: the engine's band bound holds) and is scattered.
 *   - Permuted rows (torchtitan's wq, wk) are read one source row at a time: consecutive HF rows come
 *     from rows two apart. A band's disk reads are asked for ahead over the whole heads it covers.
 */
#include "reshard/dcp_source.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "layers/family.h"
#include "layers/family_hf.h"
#include "layers/llama.h"
#include "reshard/dcp.h"
#include "reshard/safetensors.h"

typedef struct dsrc {
    dcp_dir *d;
    llama_config cfg;
    rs_dcp_info info;
    rs_dcp_spelling sp;  /* the name set and, for torchtitan, its spelling */
    st_file *f;          /* views of d->files (fd -1 until first use) */
    float *scratch;
    size_t scratch_cap;  /* floats */
    int64_t needed;      /* bytes asked for, in the files' dtypes */
} dsrc;

/* The DCP place of engine tensor name ("model/...", "optim/exp_avg/...", "optim/exp_avg_sq/..."); -1
 * if the name is none of the model's (m->fqn then empty). */
static int map_name(const dsrc *s, const char *name, rs_dcp_place *m) {
    mp_err e;
    return rs_dcp_name(&s->cfg, &s->sp, name, m, &e) ? (m->fqn[0] = '\0', -1) : 0;
}

/* ------------------------------------------------------------------------------- reading */

/* A chunk's offsets and sizes as a matrix (a vector is a column: [n, 1]). */
static void chunk_geom(const dcp_tensor *t, const dcp_chunk *c, int64_t o[2], int64_t n[2]) {
    o[0] = t->ndim ? c->offsets[0] : 0;
    n[0] = t->ndim ? c->sizes[0] : 1;
    o[1] = t->ndim == 2 ? c->offsets[1] : 0;
    n[1] = t->ndim == 2 ? c->sizes[1] : 1;
}

/* The overlap of chunk c of t with box (off, shape), as a box of the chunk: so, sn (its offset in the chunk,
 * its shape) and *at, where it starts in the box; returns its elements (0: none). */
static int64_t overlap(const dcp_tensor *t, const dcp_chunk *c, const int64_t off[2], const int64_t shape[2],
                       int64_t so[2], int64_t sn[2], int64_t at[2]) {
    int64_t co[2], cn[2];
    chunk_geom(t, c, co, cn);
    for (int d = 0; d < 2; d++) {
        int64_t a = off[d] > co[d] ? off[d] : co[d], b = off[d] + shape[d] < co[d] + cn[d] ? off[d] + shape[d] : co[d] + cn[d];
        if (a >= b) return 0;
        so[d] = a - co[d];
        sn[d] = b - a;
        at[d] = a - off[d];
    }
    return sn[0] * sn[1];
}

/* The file view and tensor view of chunk c (resolving its record on first use). */
static mp_code chunk_view(dsrc *s, const dcp_tensor *t, dcp_chunk *c, st_file **f, st_tensor *v, mp_err *e) {
    if (c->data_offset < 0) MP_TRY(dcp_resolve(s->d, t, c, e));
    *f = &s->f[c->file];
    if ((*f)->fd < 0 && ((*f)->fd = open((*f)->path, O_RDONLY | O_CLOEXEC)) < 0)
        return mp_err_set(e, MP_EIO, "%s: cannot open (chunk of %s): %s", (*f)->path, t->name, strerror(errno));
    int64_t o[2];
    memset(v, 0, sizeof *v);
    v->name = t->name;
    v->dtype = t->dtype;
    v->ndim = t->ndim;
    chunk_geom(t, c, o, v->shape);
    v->begin = c->data_offset;
    v->end = c->data_offset + c->data_length;
    return MP_OK;
}

/* A scratch buffer of at least n floats (kept for the next read; accounted). */
static float *scratch(dsrc *s, size_t n) {
    if (n <= s->scratch_cap) return s->scratch;
    if (s->scratch) mp_free_acct(s->scratch, s->scratch_cap * sizeof(float), MP_MEM_OTHER);
    s->scratch = mp_malloc(n * sizeof(float), MP_MEM_OTHER);
    s->scratch_cap = n;
    return s->scratch;
}

/* Reads the box (off, shape) of t (as a matrix) into out as fp32 from the chunks that overlap it;
 * MP_EINPUT when they do not cover it exactly once. */
static mp_code read_box(dsrc *s, const dcp_tensor *t, const int64_t off[2], const int64_t shape[2], float *out,
                        mp_err *e) {
    int64_t covered = 0;
    for (int k = 0; k < t->nchunks; k++) {
        dcp_chunk *c = &t->chunks[k];
        int64_t so[2], sn[2], at[2], n = overlap(t, c, off, shape, so, sn, at);
        if (!n) continue;
        if ((covered += n) > shape[0] * shape[1]) break;
        st_file *f;
        st_tensor v;
        MP_TRY(chunk_view(s, t, c, &f, &v, e));
        float *dst = out + at[0] * shape[1] + at[1];
        s->needed += sn[0] * sn[1] * st_dtype_size(t->dtype);
        if (sn[1] == shape[1]) {
            MP_TRY(st_read_f32(f, &v, so, sn, dst, e));
            continue;
        }
        float *tmp = scratch(s, (size_t)(sn[0] * sn[1]));
        MP_TRY(st_read_f32(f, &v, so, sn, tmp, e));
        for (int64_t r = 0; r < sn[0]; r++) memcpy(dst + r * shape[1], tmp + r * sn[1], sizeof(float) * (size_t)sn[1]);
    }
    if (covered != shape[0] * shape[1])
        return mp_err_set(e, MP_EINPUT, "%s: the chunks of %s cover %s the box at [%lld, %lld] of shape [%lld, %lld] "
                          "(overlapping or missing chunks: see `meshpoint ckpt verify`)", s->d->path, t->name,
                          covered > shape[0] * shape[1] ? "more than" : "less than", (long long)off[0],
                          (long long)off[1], (long long)shape[0], (long long)shape[1]);
    return MP_OK;
}

/* The DCP tensor and place of engine name, or MP_EINPUT naming what is missing. */
static mp_code lookup(dsrc *s, const char *name, int ndim, rs_dcp_place *m, dcp_tensor **t, mp_err *e) {
    int i = map_name(s, name, m) ? -1 : dcp_find(s->d, m->fqn);
    if (i < 0) return mp_err_set(e, MP_EINPUT, "DCP directory %s has no tensor for %s", s->d->path, name);
    *t = &s->d->t[i];
    if ((*t)->ndim != ndim)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s has %d dimensions, the model's has %d", s->d->path, m->fqn,
                          (*t)->ndim, ndim);
    return MP_OK;
}

static mp_code ds_read(rs_source *src, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                       float *buf, mp_err *e) {
    dsrc *s = src->impl;
    rs_dcp_place m;
    dcp_tensor *t;
    MP_TRY(lookup(s, name, ndim, &m, &t, e));
    int64_t o[2] = {off[0] + m.row0, ndim == 2 ? off[1] : 0}, n[2] = {shape[0], ndim == 2 ? shape[1] : 1};
    if (!m.permute) return read_box(s, t, o, n, buf, e);
    int64_t hd = llama_head_dim(&s->cfg);
    for (int64_t r = 0; r < n[0]; r++) {
        int64_t ro[2] = {rs_dcp_titan_row(o[0] + r, hd), o[1]}, rn[2] = {1, n[1]};
        MP_TRY(read_box(s, t, ro, rn, buf + r * n[1], e));
    }
    return MP_OK;
}

/* The bytes of the chunks of t that box (off, shape) overlaps; cb (may be NULL) gets each part's (file, bytes). */
static int64_t box_bytes(dsrc *s, const dcp_tensor *t, const int64_t off[2], const int64_t shape[2],
                         void (*cb)(void *, const char *, int64_t), void *ctx) {
    int64_t total = 0;
    for (int k = 0; k < t->nchunks; k++) {
        int64_t so[2], sn[2], at[2], area = overlap(t, &t->chunks[k], off, shape, so, sn, at);
        if (!area) continue;
        total += area * st_dtype_size(t->dtype);
        if (cb) cb(ctx, s->d->files[t->chunks[k].file], area * st_dtype_size(t->dtype));
    }
    return total;
}

static mp_code ds_plan(rs_source *src, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                       void (*cb)(void *, const char *, int64_t), void *ctx, int64_t *bytes, mp_err *e) {
    dsrc *s = src->impl;
    rs_dcp_place m;
    dcp_tensor *t;
    *bytes = 0;
    MP_TRY(lookup(s, name, ndim, &m, &t, e));
    int64_t o[2] = {off[0] + m.row0, ndim == 2 ? off[1] : 0}, n[2] = {shape[0], ndim == 2 ? shape[1] : 1};
    if (!m.permute) { *bytes = box_bytes(s, t, o, n, cb, ctx); return MP_OK; }
    int64_t hd = llama_head_dim(&s->cfg);
    for (int64_t r = 0; r < n[0]; r++) {
        int64_t ro[2] = {rs_dcp_titan_row(o[0] + r, hd), o[1]}, rn[2] = {1, n[1]};
        *bytes += box_bytes(s, t, ro, rn, cb, ctx);
    }
    return MP_OK;
}

/* rs_source prefetch: the disk reads of the next band are asked for (whole heads of a permuted tensor). */
static void ds_prefetch(rs_source *src, const char *name, const int64_t *off, const int64_t *shape) {
    dsrc *s = src->impl;
    rs_dcp_place m;
    dcp_tensor *t;
    mp_err e;
    int ti = map_name(s, name, &m) ? -1 : dcp_find(s->d, m.fqn);
    if (ti < 0) return;
    t = &s->d->t[ti];
    int ndim = t->ndim;
    int64_t o[2] = {off[0] + m.row0, ndim == 2 ? off[1] : 0}, n[2] = {shape[0], ndim == 2 ? shape[1] : 1};
    if (m.permute) {
        int64_t hd = llama_head_dim(&s->cfg), end = (o[0] + n[0] + hd - 1) / hd * hd;
        o[0] = o[0] / hd * hd;
        n[0] = end - o[0];
    }
    for (int k = 0; k < t->nchunks; k++) {
        int64_t so[2], sn[2], at[2];
        st_file *f;
        st_tensor v;
        if (!overlap(t, &t->chunks[k], o, n, so, sn, at) || chunk_view(s, t, &t->chunks[k], &f, &v, &e)) continue;
        st_prefetch(f, &v, so, sn);
    }
}

static void ds_io(rs_source *src, int64_t *rd, int64_t *need) {
    dsrc *s = src->impl;
    int64_t r = 0;
    for (int i = 0; i < s->d->nfiles; i++) r += s->f[i].bytes_read;
    if (rd) *rd = r;
    if (need) *need = s->needed;
}

static void ds_free(dsrc *s) {
    if (!s) return;
    for (int i = 0; s->f && i < s->d->nfiles; i++) {
        if (s->f[i].fd >= 0) close(s->f[i].fd);
        free(s->f[i].path);
    }
    free(s->f);
    if (s->scratch) mp_free_acct(s->scratch, s->scratch_cap * sizeof(float), MP_MEM_OTHER);
    dcp_close(s->d);
    free(s);
}

static void ds_close(rs_source *src) {
    if (!src) return;
    ds_free(src->impl);
    free(src);
}

/* ------------------------------------------------------------------------------- opening */

/* Sets the name set (detected unless forced) and, for torchtitan, its spellings; MP_EINPUT when the keys
 * are neither set's. */
static mp_code detect_names(dsrc *s, rs_dcp_names forced, mp_err *e) {
    const dcp_dir *d = s->d;
    int tt = dcp_find(d, "tok_embeddings.weight") >= 0, ttm = dcp_find(d, "model.tok_embeddings.weight") >= 0;
    int hf = dcp_find(d, "model.embed_tokens.weight") >= 0;
    rs_dcp_names n = forced;
    if (n == RS_DCP_NAMES_AUTO) {
        if ((tt || ttm) && hf)
            return mp_err_set(e, MP_EINPUT, "%s holds both torchtitan's tok_embeddings.weight and HF's "
                              "model.embed_tokens.weight: say which with --names torchtitan|hf", d->path);
        if (!tt && !ttm && !hf)
            return mp_err_set(e, MP_EINPUT, "%s: unknown name set: neither torchtitan's tok_embeddings.weight nor "
                              "HF's model.embed_tokens.weight is a tensor of it (names: torchtitan's Llama 3 or HF's)",
                              d->path);
        n = hf ? RS_DCP_NAMES_HF : RS_DCP_NAMES_TORCHTITAN;
    }
    s->info.names = n;
    s->sp = rs_dcp_spelling_of(n);
    if (n == RS_DCP_NAMES_HF) { s->info.spelling = "hf"; return MP_OK; }
    rs_dcp_spelling *sp = &s->sp;
    snprintf(sp->prefix, sizeof sp->prefix, "%s", ttm && !tt ? "model." : "");
    char q[128];
    snprintf(q, sizeof q, "%slayers.0.attention.qkv_linear.wq.weight", sp->prefix);
    int fused = dcp_find(d, q) >= 0;
    snprintf(sp->qkv, sizeof sp->qkv, "%s", fused ? "attention.qkv_linear." : "attention.");
    snprintf(q, sizeof q, "%slm_head.weight", sp->prefix);
    snprintf(sp->out, sizeof sp->out, "%s", dcp_find(d, q) >= 0 ? "lm_head.weight" : "output.weight");
    s->info.spelling = fused ? "torchtitan (attention.qkv_linear.wq)" : "torchtitan (attention.wq)";
    if (s->cfg.family != LLAMA_FAMILY_LLAMA || s->cfg.qkv_bias || s->cfg.qk_norm)
        return mp_err_set(e, MP_EINPUT, "%s: torchtitan names are read for Llama models; config.json's model_type "
                          "is \"%s\"", d->path, llama_family_get(s->cfg.family)->model_type);
    if (llama_head_dim(&s->cfg) % 2)
        return mp_err_set(e, MP_EINPUT, "%s: head_dim %d is odd: torchtitan's RoPE layout pairs rows", d->path,
                          llama_head_dim(&s->cfg));
    return MP_OK;
}

/* Checks DCP tensor t as engine tensor name of HF shape rows x cols (ndim dims): shape, dtype, chunks
 * inside and adding up. */
static mp_code check_tensor(const dsrc *s, const dcp_tensor *t, const char *name, int ndim, int64_t rows,
                            int64_t cols, mp_err *e) {
    if (t->ndim != ndim || t->shape[0] != rows || (ndim == 2 && t->shape[1] != cols))
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s (%s) has shape [%lld%s%lld], config.json implies [%lld%s%lld]",
                          s->d->path, t->name, name, (long long)(t->ndim ? t->shape[0] : 0), t->ndim > 1 ? ", " : "",
                          (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)rows, ndim > 1 ? ", " : "",
                          (long long)(ndim > 1 ? cols : 0));
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s is torch.%s: import reads float32, bfloat16 and float16",
                          s->d->path, t->name, t->dtype_name);
    int64_t sum = 0;
    for (int k = 0; k < t->nchunks; k++) {
        const dcp_chunk *c = &t->chunks[k];
        for (int d = 0; d < ndim; d++)
            if (c->offsets[d] < 0 || c->sizes[d] < 0 || c->offsets[d] + c->sizes[d] > t->shape[d])
                return mp_err_set(e, MP_EINPUT, "%s: tensor %s: chunk %d lies outside the tensor", s->d->path, t->name, k);
        sum += dcp_numel(ndim, c->sizes);
    }
    if (sum != dcp_numel(ndim, t->shape))
        return mp_err_set(e, MP_EINPUT, "%s: tensor %s: its chunks hold %lld elements, the tensor %lld", s->d->path,
                          t->name, (long long)sum, (long long)dcp_numel(ndim, t->shape));
    return MP_OK;
}

/* AdamW's step: every optimizer.state.<fqn>.step the parameters have, which must agree; else
 * train_state.step; else 0. */
static mp_code read_step(dsrc *s, const llama_tensor_spec *sp, int ns, char *used, mp_err *e) {
    int have = 0;
    for (int i = 0; i < ns; i++) {
        char name[160];
        rs_dcp_place m;
        snprintf(name, sizeof name, "model/%s", sp[i].name);
        if (map_name(s, name, &m) || rs_dcp_optim_name(m.fqn, sizeof m.fqn, m.param, "step")) continue;
        int ti = dcp_find(s->d, m.fqn);
        if (ti < 0) continue;
        dcp_tensor *t = &s->d->t[ti];
        used[ti] = 1;
        union { float f; int64_t i; int32_t i32; double dd; } v = {0};
        if (t->ndim != 0 || t->nchunks != 1 || (t->dtype != ST_F32 && t->dtype != ST_I64 && t->dtype != ST_I32))
            return mp_err_set(e, MP_EINPUT, "%s: %s is not a 0-d float32/int64 tensor", s->d->path, m.fqn);
        MP_TRY(dcp_read_chunk(s->d, t, &t->chunks[0], &v, e));
        double x = t->dtype == ST_F32 ? v.f : t->dtype == ST_I32 ? v.i32 : (double)v.i;
        if (!(x >= 0 && x < 1e15 && x == (double)(int64_t)x))
            return mp_err_set(e, MP_EINPUT, "%s: %s is %g, not a step count", s->d->path, m.fqn, x);
        if (have && (int64_t)x != s->info.step)
            return mp_err_set(e, MP_EINPUT, "%s: %s is %lld, other parameters' step is %lld: one AdamW step is "
                              "read for all", s->d->path, m.fqn, (long long)x, (long long)s->info.step);
        s->info.step = (int64_t)x;
        have = 1;
    }
    if (have) return MP_OK;
    int r = dcp_train_step(s->d, &s->info.step, e);
    if (r < 0) return e->code;
    if (r == 0) s->info.step = 0;
    return MP_OK;
}

/* DCP tensors a model-only or moments import may leave unread: other training state, the buffers
 * transformers ignores, a tied head. */
static int ignorable(const dsrc *s, const char *name) {
    static const char *const pre[] = {"optimizer.", "lr_scheduler.", "dataloader.", "train_state."};   /* torchtitan's */
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++)
        if (!strncmp(name, pre[i], strlen(pre[i]))) return 1;
    const char *suffix = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    if (n > k && !strcmp(name + n - k, suffix)) return 1;
    if (!s->cfg.tie_word_embeddings) return 0;
    if (s->info.names == RS_DCP_NAMES_HF) return !strcmp(name, "lm_head.weight");
    return !strncmp(name, s->sp.prefix, strlen(s->sp.prefix)) && !strcmp(name + strlen(s->sp.prefix), s->sp.out);
}

/* Every tensor of the model (and, with moments, both moments) present and well formed; nothing else. */
static mp_code check_all(dsrc *s, mp_err *e) {
    int ns = llama_tensor_specs(&s->cfg, NULL, 0);
    llama_tensor_spec *sp = mp_xmalloc(sizeof *sp * (size_t)ns);
    llama_tensor_specs(&s->cfg, sp, ns);
    char *used = mp_xcalloc((size_t)s->d->nt + 1);
    for (int i = 0; i < s->d->nt && !s->info.moments; i++) {
        const char *n = s->d->t[i].name, *x = ".exp_avg";
        size_t k = strlen(RS_DCP_OPTIM_STATE);
        s->info.moments = !strncmp(n, RS_DCP_OPTIM_STATE, k) && strlen(n) > 8 && !strcmp(n + strlen(n) - 8, x);
    }
    static const char *const kinds[3] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};
    mp_code rc = MP_OK;
    for (int i = 0; i < ns && !rc; i++) {
        llama_hf_place pl;
        llama_hf_place_of(&s->cfg, sp[i].name, &pl);
        for (int k = 0; k < (s->info.moments ? 3 : 1) && !rc; k++) {
            char name[160];
            rs_dcp_place m;
            snprintf(name, sizeof name, "%s/%s", kinds[k], sp[i].name);
            int ti = map_name(s, name, &m) ? -1 : dcp_find(s->d, m.fqn);
            if (ti < 0) {
                rc = mp_err_set(e, MP_EINPUT, "%s: tensor %s (the model's %s, names: %s) is missing", s->d->path,
                                m.fqn, name, s->info.spelling);
                break;
            }
            used[ti] = 1;
            s->info.ntensors++;
            rc = check_tensor(s, &s->d->t[ti], name, sp[i].ndim, pl.hf_rows ? pl.hf_rows : sp[i].shape[0],
                              sp[i].shape[1], e);
        }
    }
    if (!rc && s->info.moments) rc = read_step(s, sp, ns, used, e);
    for (int i = 0; i < s->d->nt && !rc; i++)
        if (!used[i] && !ignorable(s, s->d->t[i].name))
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor %s is not part of the %s model config.json describes (names: %s)",
                            s->d->path, s->d->t[i].name, llama_family_get(s->cfg.family)->model_type, s->info.spelling);
    free(used);
    free(sp);
    return rc;
}

mp_code rs_source_dcp(rs_source **out, const char *dir, const llama_config *cfg, rs_dcp_names names,
                      rs_dcp_info *info, mp_err *e) {
    *out = NULL;
    dsrc *s = mp_xcalloc(sizeof *s);
    s->cfg = *cfg;
    mp_code rc = dcp_open(&s->d, dir, e);
    if (rc) { free(s); return rc; }
    s->f = mp_xcalloc(sizeof *s->f * (size_t)(s->d->nfiles + 1));
    for (int i = 0; i < s->d->nfiles; i++)
        s->f[i] = (st_file){.path = mp_fs_join(dir, s->d->files[i]), .fd = -1, .file_size = s->d->file_sizes[i]};
    rc = detect_names(s, names, e);
    if (!rc) rc = check_all(s, e);
    if (rc) { ds_free(s); return rc; }
    if (info) *info = s->info;
    rs_source *src = mp_xcalloc(sizeof *src);
    *src = (rs_source){.kind = "dcp", .read = ds_read, .plan = ds_plan, .prefetch = ds_prefetch, .io = ds_io,
                       .close = ds_close, .impl = s};
    *out = src;
    return MP_OK;
}
