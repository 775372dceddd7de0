/*
 * reshard/source.c — the engine's sources: a meshpoint checkpoint (every read through ckpt_read, so
 * only the saved tiles a box meets are fetched and every byte is checked against its checksum), and
 * the seeded initialisation of the Llama model (generated box by box; moments zero).
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "layers/llama.h"
#include "reshard/reshard.h"

/* ------------------------------------------------------------------------------- checkpoint */

static mp_code ck_read(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape, float *buf,
                       mp_err *e) {
    ckpt_reader *r = s->impl;
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return mp_err_set(e, MP_EINPUT, "checkpoint %s has no tensor %s", ckpt_reader_dir(r), name);
    const ckpt_tensor_info *ti = ckpt_tensor_at(r, t);
    if (ti->dtype != MP_F32 || ti->ndim != ndim)
        return mp_err_set(e, MP_EINPUT, "checkpoint %s: tensor %s is %s with %d dims, expected f32 with %d",
                          ckpt_reader_dir(r), name, mp_dtype_name(ti->dtype), ti->ndim, ndim);
    return ckpt_read(r, name, off, shape, buf, e);
}

static mp_code ck_plan(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                       void (*cb)(void *, const char *, int64_t), void *ctx, int64_t *bytes, mp_err *e) {
    ckpt_reader *r = s->impl;
    *bytes = 0;
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return mp_err_set(e, MP_EINPUT, "checkpoint %s has no tensor %s", ckpt_reader_dir(r), name);
    int n = ckpt_query(r, t, off, shape, NULL, 0);
    int *hit = mp_xmalloc(sizeof(int) * (size_t)(n + 1));
    ckpt_query(r, t, off, shape, hit, n);
    for (int k = 0; k < n; k++) {
        int64_t b = ckpt_box_read_cost(r, hit[k], off, shape);
        *bytes += b;
        if (cb) cb(ctx, ckpt_box_at(r, hit[k])->file, b);
    }
    free(hit);
    return MP_OK;
}

static void ck_prefetch(rs_source *s, const char *name, const int64_t *off, const int64_t *shape) {
    ckpt_prefetch(s->impl, name, off, shape);
}

static void ck_io(rs_source *s, int64_t *rd, int64_t *need) { ckpt_reader_io(s->impl, rd, need); }

static void ck_close(rs_source *s) {
    if (!s) return;
    ckpt_close(s->impl);
    free(s);
}

mp_code rs_source_ckpt(rs_source **out, const char *dir, size_t scratch, mp_err *e) {
    *out = NULL;
    ckpt_reader *r = NULL;
    MP_TRY(ckpt_open(&r, dir, e));
    if (scratch) ckpt_reader_set_scratch(r, scratch);
    rs_source *s = mp_xcalloc(sizeof *s);
    *s = (rs_source){.kind = "checkpoint", .read = ck_read, .plan = ck_plan, .prefetch = ck_prefetch, .io = ck_io,
                     .close = ck_close, .impl = r};
    *out = s;
    return MP_OK;
}

ckpt_reader *rs_source_ckpt_reader(rs_source *s) {
    assert(s && !strcmp(s->kind, "checkpoint"));
    return s->impl;
}

/* ------------------------------------------------------------------------------ initialisation */

typedef struct init_src {
    llama_config cfg;
    uint64_t seed;
    int nspecs;
    llama_tensor_spec *specs;
} init_src;

static mp_code init_read(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                         float *buf, mp_err *e) {
    init_src *I = s->impl;
    int moment = 0;
    const char *base = name;
    if (!strncmp(name, "model/", 6)) base = name + 6;
    else if (!strncmp(name, "optim/exp_avg/", 14)) { base = name + 14; moment = 1; }
    else if (!strncmp(name, "optim/exp_avg_sq/", 17)) { base = name + 17; moment = 1; }
    for (int i = 0; i < I->nspecs; i++) {
        const llama_tensor_spec *sp = &I->specs[i];
        if (strcmp(sp->name, base) != 0) continue;
        if (ndim != sp->ndim) return mp_err_set(e, MP_EINPUT, "initialisation: tensor %s has %d dims, not %d", name, sp->ndim, ndim);
        int64_t o2[2] = {off[0], ndim == 2 ? off[1] : 0}, s2[2] = {shape[0], ndim == 2 ? shape[1] : 1};
        if (moment) memset(buf, 0, sizeof(float) * (size_t)(s2[0] * s2[1]));
        else llama_init_box(&I->cfg, sp, I->seed, o2, s2, buf);
        return MP_OK;
    }
    return mp_err_set(e, MP_EINPUT, "initialisation: the model has no tensor %s", name);
}

static mp_code init_plan(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                         void (*cb)(void *, const char *, int64_t), void *ctx, int64_t *bytes, mp_err *e) {
    *bytes = 0;
    return MP_OK;
}

static void init_io(rs_source *s, int64_t *rd, int64_t *need) {
    if (rd) *rd = 0;
    if (need) *need = 0;
}

static void init_close(rs_source *s) {
    if (!s) return;
    init_src *I = s->impl;
    free(I->specs);
    free(I);
    free(s);
}

mp_code rs_source_init(rs_source **out, const llama_config *cfg, uint64_t seed, mp_err *e) {
    *out = NULL;
    MP_TRY(llama_config_validate(cfg, e));
    init_src *I = mp_xcalloc(sizeof *I);
    I->cfg = *cfg;
    I->seed = seed;
    I->nspecs = llama_tensor_specs(cfg, NULL, 0);
    I->specs = mp_xmalloc(sizeof *I->specs * (size_t)I->nspecs);
    llama_tensor_specs(cfg, I->specs, I->nspecs);
    rs_source *s = mp_xcalloc(sizeof *s);
    *s = (rs_source){.kind = "init", .read = init_read, .plan = init_plan, .io = init_io, .close = init_close, .impl = I};
    *out = s;
    return MP_OK;
}
