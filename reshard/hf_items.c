/*
 * reshard/hf_items.c — the whole tensors of a family's HF checkpoint, collected from the engine's adds
 * (fused ones as their parts) for the sinks that write whole tensors (reshard/hf_items.h), and the band
 * pipeline both sinks stream them through (rs_hf_items_stream).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "ckpt/read_pipe.h"
#include "layers/family_hf.h"
#include "reshard/hf_items.h"

/* The item that holds HF tensor name, or NULL (searched from the end: a fused tensor's parts are
 * added one after the other). */
static hf_item *find_item(rs_hf_items *h, const char *name) {
    for (int i = h->n - 1; i >= 0; i--)
        if (!strcmp(h->it[i].name, name)) return &h->it[i];
    return NULL;
}

/* A new item for HF tensor pl->name of ndim dims: its rows are the fused rows, or gshape[0]. */
static hf_item *new_item(rs_hf_items *h, const llama_hf_place *pl, int ndim, const int64_t *gshape) {
    if (h->n == h->cap) {
        int cap = h->cap * 2 + 16;
        h->it = mp_realloc(h->it, sizeof *h->it * (size_t)h->cap, sizeof *h->it * (size_t)cap, MP_MEM_OTHER);
        h->cap = cap;
    }
    hf_item *t = &h->it[h->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", pl->name);
    t->ndim = ndim;
    t->shape[0] = pl->hf_rows ? pl->hf_rows : gshape[0];
    t->shape[1] = ndim == 2 ? gshape[1] : 1;
    t->fused = pl->fused;
    return t;
}

/* rs_sink add: records whole tensor name as (a part of) the HF tensor the family map names. */
mp_code rs_hf_items_add(rs_hf_items *h, int file_rank, const char *name, int ndim, const int64_t *gshape,
                        const int64_t *off, const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e) {
    mp_code rc = MP_OK;
    llama_hf_place pl;
    hf_item *t = NULL;
    if (strncmp(name, "model/", 6) || llama_hf_place_of(&h->cfg, name + 6, &pl))
        rc = mp_err_set(e, MP_EINTERNAL, "%s: tensor %s is not a model/ tensor", h->who, name);
    else if (file_rank != 0 || off[0] || (ndim == 2 && off[1]) || shape[0] != gshape[0] || (ndim == 2 && shape[1] != gshape[1]))
        rc = mp_err_set(e, MP_EINTERNAL, "%s: %s: the sink takes whole tensors only", h->who, name);
    else if (pl.hf_rows && pl.rows != gshape[0])
        rc = mp_err_set(e, MP_EINTERNAL, "%s: %s has %lld rows, its part of %s %lld", h->who, name, (long long)gshape[0],
                        pl.name, (long long)pl.rows);
    else if (pl.hf_rows && (t = find_item(h, pl.name)) &&
             (t->nparts == 3 || t->ndim != ndim || t->shape[1] != (ndim == 2 ? gshape[1] : 1)))
        rc = mp_err_set(e, MP_EINTERNAL, "%s: %s does not fit the fused tensor %s", h->who, name, pl.name);
    if (rc) {
        if (!h->failed) { h->failed = rc; h->err = *e; }
        return rc;
    }
    if (!t) t = new_item(h, &pl, ndim, gshape);
    t->part[t->nparts++] = (hf_part){fill, ctx, pl.row0, gshape[0]};
    return MP_OK;
}

/* Checks that every item's parts tile its rows exactly (a fused tensor got all of its parts), and
 * orders them by row. */
mp_code rs_hf_items_check(rs_hf_items *h, mp_err *e) {
    for (int i = 0; i < h->n; i++) {
        hf_item *t = &h->it[i];
        for (int a = 1; a < t->nparts; a++)   /* insertion sort of at most 3 */
            for (int b = a; b > 0 && t->part[b].row0 < t->part[b - 1].row0; b--) {
                hf_part x = t->part[b];
                t->part[b] = t->part[b - 1];
                t->part[b - 1] = x;
            }
        int64_t at = 0;
        for (int k = 0; k < t->nparts && at >= 0; k++) at = t->part[k].row0 == at ? at + t->part[k].rows : -1;
        if (at != t->shape[0])
            return mp_err_set(e, MP_EINTERNAL, "%s: tensor %s (%s) did not get all of its %lld rows from %d part%s",
                              h->who, t->name, t->fused ? t->fused : "not fused", (long long)t->shape[0], t->nparts,
                              t->nparts == 1 ? "" : "s");
    }
    return MP_OK;
}

/* Fills the band (off, shape) of item t into x part by part: each piece from its own tensor. */
mp_code rs_hf_item_fill(const hf_item *t, const int64_t *off, const int64_t *shape, float *x, mp_err *e) {
    int64_t end = off[0] + shape[0];
    for (int k = 0; k < t->nparts; k++) {
        const hf_part *p = &t->part[k];
        int64_t a = off[0] > p->row0 ? off[0] : p->row0, b = end < p->row0 + p->rows ? end : p->row0 + p->rows;
        if (a >= b) continue;
        int64_t po[2] = {a - p->row0, 0}, ps[2] = {b - a, shape[1]};
        MP_TRY(p->fill(p->ctx, po, ps, x + (a - off[0]) * shape[1], e));
    }
    return MP_OK;
}

void rs_hf_items_free(rs_hf_items *x) {
    free(x->it);
    x->it = NULL;
    x->n = x->cap = 0;
}

/* One band handed to the sink's put on the worker thread (the caller's thread keeps HDF5). */
typedef struct put_job {
    rs_hf_put_fn put;
    void *ctx;
    const hf_item *t;
    int64_t r0, rows;
    const float *x;
    mp_code rc;
    mp_err e;
} put_job;

static void put_job_run(void *arg) {
    put_job *j = arg;
    mp_err_clear(&j->e);
    j->rc = j->put(j->ctx, j->t, j->r0, j->rows, j->x, &j->e);
}

/* Waits for the put in flight (if any); its error, if it failed, into e. */
static mp_code put_wait(ck_worker *wk, put_job *j, mp_err *e) {
    if (!wk || !ck_worker_busy(wk)) return MP_OK;
    ck_worker_wait(wk);
    if (j->rc && e) *e = j->e;
    return j->rc;
}

mp_code rs_hf_items_stream(const rs_hf_items *x, int a, int b, int64_t band_elems, rs_hf_rows_fn rows_fn, rs_hf_put_fn put,
                           void *ctx, mp_err *e) {
    int nbuf = ck_worker_serial_forced() ? 1 : 2;
    float *buf[2] = {NULL, NULL};
    for (int k = 0; k < nbuf; k++) buf[k] = mp_malloc((size_t)band_elems * sizeof(float), MP_MEM_CKPT);
    ck_worker *wk = nbuf == 2 ? ck_worker_new() : NULL;
    put_job job = {0};
    mp_code rc = MP_OK;
    int band = 0;
    for (int i = a; i < b && !rc; i++) {
        const hf_item *t = &x->it[i];
        int64_t step = rows_fn ? rows_fn(ctx, t) : band_elems / t->shape[1];
        for (int64_t r = 0; r < t->shape[0] && !rc; r += step, band++) {
            int64_t off[2] = {r, 0}, shp[2] = {t->shape[0] - r < step ? t->shape[0] - r : step, t->shape[1]};
            float *xb = buf[wk ? band & 1 : 0];   /* the worker may still hold the other one */
            rc = rs_hf_item_fill(t, off, shp, xb, e);
            if (!rc) rc = put_wait(wk, &job, e);
            if (rc) break;
            if (!wk) {
                rc = put(ctx, t, r, shp[0], xb, e);
                continue;
            }
            job = (put_job){.put = put, .ctx = ctx, .t = t, .r0 = r, .rows = shp[0], .x = xb};
            ck_worker_post(wk, put_job_run, &job);
        }
    }
    mp_err we;
    mp_code wrc = put_wait(wk, &job, &we);   /* a fill error stands; else the last put's */
    if (!rc && wrc) {
        rc = wrc;
        if (e) *e = we;
    }
    ck_worker_free(wk);
    for (int k = 0; k < nbuf; k++) mp_free_acct(buf[k], (size_t)band_elems * sizeof(float), MP_MEM_CKPT);
    return rc;
}
