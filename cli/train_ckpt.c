/* cli/train_ckpt.c — see train_ckpt.h. */
#define _GNU_SOURCE
#include "cli/train_ckpt.h"
#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <stdarg.h>
#include <time.h>
#include <unistd.h>
#include "cli/progress.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/optim.h"

static const char *const kinds[3] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

void mp_checkpointer_init(mp_checkpointer *c, const char *root, const ckpt_save_opts *opts, int async) {
    memset(c, 0, sizeof *c);
    snprintf(c->root, sizeof c->root, "%s", root);
    if (opts) c->opts = *opts;
    c->async = async;
    c->inflight_step = -1;
}

int mp_ckpt_format_version(const llama_config *mc) {
    return mc->family == LLAMA_FAMILY_LLAMA ? CKPT_FORMAT_VERSION : 4;
}

mp_code mp_run_meta(mp_meta_put put, void *ctx, const llama_config *mc, const mp_train_config *tc, int tp,
                    int dp, const mp_run_state *st, mp_err *err) {
    char buf[1024];
    char *model_json = llama_config_to_json(mc), *train_json = mp_train_config_to_json(tc);
    mp_code rc = put(ctx, "model_config", model_json, err);
    if (!rc) rc = put(ctx, "train_config", train_json, err);
    free(model_json);
    free(train_json);
    MP_TRY(rc);
    snprintf(buf, sizeof buf, "{\"world\": %d, \"tp\": %d, \"dp\": %d, \"sp\": %s, \"elapsed_s\": %.3f}", tp * dp,
             tp, dp, tc->sp < 0 ? (tp > 1 ? "true" : "false") : tc->sp ? "true" : "false", st->elapsed_s);
    MP_TRY(put(ctx, "mesh", buf, err));
    snprintf(buf, sizeof buf, "%lld", (long long)st->step);
    MP_TRY(put(ctx, "step", buf, err));
    snprintf(buf, sizeof buf, "{\"pos\": %lld, \"epoch\": %lld, \"batch_size\": %d, \"seq_len\": %d}",
             (long long)st->cursor.pos, (long long)st->cursor.epoch, tc->batch_size, tc->seq_len);
    MP_TRY(put(ctx, "data_cursor", buf, err));
    snprintf(buf, sizeof buf,
             "{\"kind\": \"warmup_cosine\", \"lr\": %.17g, \"min_lr\": %.17g, \"warmup_steps\": %lld, "
             "\"decay_steps\": %lld, \"step\": %lld}",
             tc->lr, tc->min_lr, (long long)tc->warmup_steps,
             (long long)(tc->decay_steps ? tc->decay_steps : tc->steps - tc->warmup_steps), (long long)st->step);
    MP_TRY(put(ctx, "lr_schedule", buf, err));
    snprintf(buf, sizeof buf,
             "{\"kind\": \"adamw\", \"beta1\": %.17g, \"beta2\": %.17g, \"eps\": %.17g, \"weight_decay\": "
             "%.17g, \"t\": %lld}",
             tc->beta1, tc->beta2, tc->adam_eps, tc->weight_decay, (long long)st->step);
    MP_TRY(put(ctx, "optimizer", buf, err));
    /* Training draws no random numbers after initialisation (no dropout): the seed is the whole RNG
     * state, and init is a pure function of (seed, name, index). */
    snprintf(buf, sizeof buf, "{\"kind\": \"philox4x32-10\", \"seed\": %llu, \"draws_after_init\": 0}",
             (unsigned long long)tc->seed);
    return put(ctx, "rng", buf, err);
}

/* mp_meta_put into a save. */
static mp_code put_save_meta(void *ctx, const char *key, const char *value, mp_err *err) {
    return ckpt_save_meta(ctx, key, value, err);
}

/* The host copies a save writes from: src[3 * i + k] is parameter i's shard (k 0), first (1) or second
 * (2) moment. Straight from the shards when the backend's memory is host memory and the save is
 * synchronous (the shards stay unchanged until the commit returns); otherwise through the staging copy
 * c->host, allocated on first use and kept for the next save (an async save's data must outlive the
 * step, and device memory must come to the host first). Returns the pointer array (caller frees). */
static const float **save_sources(mp_checkpointer *c, llama_model *m) {
    mp_backend *be = llama_backend(m);
    int np = llama_num_params(m);
    const float **src = mp_xmalloc(sizeof *src * 3 * (size_t)(np ? np : 1));
    int direct = be->host_memory && !c->async;
    if (!direct && !c->host) {
        size_t need = 0;
        for (int i = 0; i < np; i++) need += 3 * (size_t)llama_shard_numel(llama_param_at(m, i)) * sizeof(float);
        c->host_bytes = need ? need : sizeof(float);
        c->host_be = be;   /* pinned where the device has such memory: an async save's stall is one copy */
        c->host = be->host_alloc(be, c->host_bytes, MP_MEM_CKPT);
    }
    float *h = c->host;
    for (int i = 0; i < np; i++) {
        llama_param *p = llama_param_at(m, i);
        const float *shard[3] = {p->shard, p->m, p->v};
        size_t n = (size_t)llama_shard_numel(p);
        for (int k = 0; k < 3; k++) {
            if (direct) {
                src[3 * i + k] = shard[k];
                continue;
            }
            be->to_host(be, h, shard[k], n * sizeof(float));
            src[3 * i + k] = h;
            h += n;
        }
    }
    return src;
}

/* One pass over what a save writes (parameters and moments): MP_ECHECK naming the first tensor that
 * holds a non-finite value. Local to this rank. */
static mp_code check_finite(const float *const *src, llama_model *m, mp_err *err) {
    int np = llama_num_params(m);
    for (int i = 0; i < np; i++) {
        llama_param *p = llama_param_at(m, i);
        int64_t n = llama_shard_numel(p);
        for (int k = 0; k < 3; k++) {
            const float *h = src[3 * i + k];
            for (int64_t j = 0; j < n; j++)
                if (!isfinite(h[j]))
                    return mp_err_set(err, MP_ECHECK, "refusing to save: %s/%s holds a non-finite value (%g)",
                                      kinds[k], p->name, h[j]);
        }
    }
    return MP_OK;
}

mp_code mp_checkpointer_save(mp_checkpointer *c, llama_model *m, const llama_config *mc,
                             const mp_train_config *tc, const mp_run_state *st, ckpt_stats *stats,
                             mp_err *err) {
    double t0 = mp_time_s();
    mp_mesh *mesh = llama_mesh(m);
    int np = llama_num_params(m);
    /* the staging buffer is reused: a save still in flight must finish before it is overwritten */
    if (c->inflight) MP_TRY(mp_checkpointer_wait(c, NULL, err));
    const float **src = save_sources(c, m);
    ckpt_save *s = NULL;
    ckpt_save_opts so = c->opts;   /* a sync save shows a progress bar on a terminal (cli/progress.h) */
    so.format_version = mp_ckpt_format_version(mc);
    mp_progress *pg = c->async ? NULL : mp_progress_start("saving checkpoint", 0, MP_PROGRESS_BYTES);
    so.progress = pg ? mp_progress_ckpt : NULL;
    so.progress_ctx = pg;
    mp_code brc = ckpt_save_begin(&s, mesh->world_comm, c->root, st->step, &so, err);
    if (brc) {
        mp_progress_finish(pg);
        free(src);
        return brc;
    }
    mp_code rc = check_finite(src, m, err);   /* never save a non-finite value */
    for (int i = 0; i < np && !rc; i++) {
        llama_param *p = llama_param_at(m, i);
        int64_t off[2], shape[2];
        int writer = llama_param_disk_box(m, p, off, shape) > 0 && llama_disk_writer(p->split, mesh->tp_rank);
        for (int k = 0; k < 3 && !rc && writer; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
            rc = ckpt_save_add(s, name, MP_F32, p->ndim, p->gshape, off, shape, src[3 * i + k], err);
        }
    }
    free(src);
    if (!rc) rc = mp_run_meta(put_save_meta, s, mc, tc, mesh->tp, mesh->dp, st, err);
    if (!rc && c->init_from[0]) rc = ckpt_save_meta(s, "init_from", c->init_from, err);   /* train --init-from */
    /* the CPU kernels' ISA level of the saving process: results differ in the last bits between levels */
    if (!rc) rc = ckpt_save_meta(s, "cpu_isa", mp_cpu_isa(), err);
    if (!rc) rc = mp_tokfiles_save(&c->files, s, err);   /* the model's tokenizer, when it came with one */
    if (rc) {
        /* a local failure (an add, a non-finite value): the commit makes every rank agree on it and
         * publishes nothing */
        mp_err local = *err;
        ckpt_save_fail(s, rc, &local);
        ckpt_save_commit(s, NULL, err);
        *err = local;
        ckpt_save_free(s);
        mp_progress_finish(pg);
        return rc;
    }
    if (!c->async) {
        rc = ckpt_save_commit(s, stats, err);
        ckpt_save_free(s);
        mp_progress_finish(pg);
        return rc;
    }
    rc = ckpt_save_start(s, err);
    if (rc) { ckpt_save_free(s); return rc; }
    c->inflight = s;
    c->inflight_step = st->step;
    c->last_stall_s = mp_time_s() - t0;
    return MP_OK;
}

mp_code mp_checkpointer_poll(mp_checkpointer *c, int64_t *committed_step, ckpt_stats *stats, mp_err *err) {
    *committed_step = -1;
    if (!c->inflight) return MP_OK;
    int done = 0;
    mp_code rc = ckpt_save_poll(c->inflight, &done, stats, err);
    if (done || rc) {
        if (!rc) *committed_step = c->inflight_step;
        ckpt_save_free(c->inflight);
        c->inflight = NULL;
    }
    return rc;
}

mp_code mp_checkpointer_wait(mp_checkpointer *c, ckpt_stats *stats, mp_err *err) {
    if (!c->inflight) return MP_OK;
    ckpt_stats local;
    if (!stats) stats = &local;
    mp_code rc = ckpt_save_wait(c->inflight, stats, err);
    ckpt_save_free(c->inflight);
    c->inflight = NULL;
    if (!rc)
        mp_info("checkpoint step %lld committed: stall %.3f s, write %.3f s, commit %.3f s",
                (long long)c->inflight_step, c->last_stall_s, stats->write_s, stats->commit_s);
    return rc;
}

void mp_checkpointer_free(mp_checkpointer *c) {
    ckpt_save_free(c->inflight);
    c->inflight = NULL;
    ckpt_views_wait(NULL, NULL);   /* the last save's view.h5, before the job lock goes (a failure was warned) */
    if (c->host) c->host_be->host_free(c->host_be, c->host, c->host_bytes, MP_MEM_CKPT);
    c->host = NULL;
    mp_tokfiles_free(&c->files);
}

/* ---- loading ---- */

/* Compares the saved model config with the running one; the message names the first differing field (in
 * config.json order). Two fields may differ: max_position_embeddings (it shapes no tensor and bounds
 * seq_len only; RoPE is computed for the positions of a sequence) and initializer_range (used only by a
 * fresh initialisation). */
static mp_code check_model_config(const ckpt_reader *r, const llama_config *mc, mp_err *err) {
    const char *text = ckpt_meta_get(r, "model_config");
    if (!text) return mp_err_set(err, MP_ECHECK, "checkpoint %s has no model_config", ckpt_reader_dir(r));
    llama_config saved;
    llama_config_default(&saved);
    char where[1100];
    snprintf(where, sizeof where, "%s: model_config", ckpt_reader_dir(r));
    MP_TRY(llama_config_parse(text, where, &saved, NULL, err));
    const unsigned may_differ =
        LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS) | LLAMA_CF_BIT(LLAMA_CF_INITIALIZER_RANGE);
    unsigned d = llama_config_diff(&saved, mc, may_differ);
    if (!d) return MP_OK;
    llama_config_field f = (llama_config_field)__builtin_ctz(d);
    char a[256], b[256];
    llama_config_field_format(&saved, f, a, sizeof a);
    llama_config_field_format(mc, f, b, sizeof b);
    return mp_err_set(err, MP_EINPUT, "checkpoint %s was saved with %s = %s, the config says %s", ckpt_reader_dir(r),
                      llama_config_field_name(f), a, b);
}

/* Reads an integer field of a JSON metadata entry (field NULL: the entry itself), range-checked: an
 * integer in [lo, hi] (never a cast of an out-of-range double), else MP_EINPUT naming key, field and
 * value. Missing or not a number: MP_ECHECK. */
static mp_code meta_int(const ckpt_reader *r, const char *key, const char *field, int64_t lo, int64_t hi,
                        int64_t *out, mp_err *err) {
    const char *text = ckpt_meta_get(r, key);
    if (!text) return mp_err_set(err, MP_ECHECK, "checkpoint %s: metadata \"%s\" is missing", ckpt_reader_dir(r), key);
    cJSON *j = cJSON_Parse(text);
    const cJSON *v = field ? cJSON_GetObjectItemCaseSensitive(j, field) : j;
    mp_code rc = MP_OK;
    if (!cJSON_IsNumber(v))
        rc = mp_err_set(err, MP_ECHECK, "checkpoint %s: metadata \"%s\"%s%s is not a number", ckpt_reader_dir(r),
                        key, field ? " field " : "", field ? field : "");
    else if (!mp_double_to_i64(v->valuedouble, lo, hi, out))
        rc = mp_err_set(err, MP_EINPUT, "checkpoint %s: metadata \"%s\"%s%s: %g is not an integer in [%lld, %lld]",
                        ckpt_reader_dir(r), key, field ? " field " : "", field ? field : "", v->valuedouble,
                        (long long)lo, (long long)hi);
    cJSON_Delete(j);
    return rc;
}

/* A number field of a JSON metadata entry, or dflt when absent; MP_EINPUT naming key and field when it is
 * present but not a number in [lo, hi] (bookkeeping a crafted checkpoint must not turn into a bad cast). */
static mp_code meta_num_or(const ckpt_reader *r, const char *key, const char *field, double dflt, double lo,
                           double hi, double *out, mp_err *err) {
    const char *text = ckpt_meta_get(r, key);
    cJSON *j = text ? cJSON_Parse(text) : NULL;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, field);
    mp_code rc = MP_OK;
    *out = dflt;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || !(v->valuedouble >= lo && v->valuedouble <= hi))
            rc = mp_err_set(err, MP_EINPUT, "checkpoint %s: metadata \"%s\" field %s: not a number in [%g, %g]",
                            ckpt_reader_dir(r), key, field, lo, hi);
        else *out = v->valuedouble;
    }
    cJSON_Delete(j);
    return rc;
}

/* The bookkeeping of st from the checkpoint: elapsed_s (0 if absent) and the saved batch shape (0:
 * unknown), each range-checked (MP_EINPUT naming the field). */
static mp_code read_saved_shape(const ckpt_reader *r, mp_run_state *st, mp_err *err) {
    double bs, sl, ga;
    MP_TRY(meta_num_or(r, "mesh", "elapsed_s", 0, 0, 1e15, &st->elapsed_s, err));
    MP_TRY(meta_num_or(r, "train_config", "batch_size", 0, 0, INT32_MAX, &bs, err));
    MP_TRY(meta_num_or(r, "data_cursor", "batch_size", bs, 0, INT32_MAX, &bs, err));
    MP_TRY(meta_num_or(r, "train_config", "seq_len", 0, 0, INT32_MAX, &sl, err));
    MP_TRY(meta_num_or(r, "data_cursor", "seq_len", sl, 0, INT32_MAX, &sl, err));
    MP_TRY(meta_num_or(r, "train_config", "grad_accum", 0, 0, INT32_MAX, &ga, err));
    st->batch_size = (int)bs;   /* in [0, INT32_MAX]: a defined cast */
    st->seq_len = (int)sl;
    st->grad_accum = (int)ga;
    return MP_OK;
}

/* Hints the reader (ckpt_prefetch) with the tensor mp_checkpoint_load reads after kind k of parameter i
 * (nk kinds per parameter), so that its disk reads overlap the current one's reads and checks. */
static void prefetch_next(ckpt_reader *r, llama_model *m, int i, int k, int nk) {
    if (++k == nk) {
        k = 0;
        if (++i == llama_num_params(m)) return;
    }
    llama_param *p = llama_param_at(m, i);
    int64_t off[2], shape[2];
    if (llama_param_disk_box(m, p, off, shape) <= 0) return;
    char name[256];
    snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
    ckpt_prefetch(r, name, off, shape);
}

/* The collective open of dir for this rank's loads (ckpt_open_planned over the world): the disk box of
 * each of the first nk kinds of every parameter whose shard has rows here. */
static mp_code open_planned(llama_model *m, const char *dir, int nk, ckpt_reader **r, mp_err *err) {
    int np = llama_num_params(m), n = 0;
    ckpt_region *want = mp_xcalloc(sizeof *want * (size_t)(np * nk + 1));
    char (*names)[256] = mp_xmalloc(sizeof *names * (size_t)(np * nk + 1));
    for (int i = 0; i < np; i++) {
        llama_param *p = llama_param_at(m, i);
        int64_t off[2], shape[2];
        if (llama_param_disk_box(m, p, off, shape) <= 0) continue;
        for (int k = 0; k < nk; k++, n++) {
            snprintf(names[n], sizeof names[n], "%s/%s", kinds[k], p->name);
            want[n].name = names[n];
            for (int d = 0; d < CKPT_MAX_DIMS; d++) want[n].shape[d] = 1;   /* unused dims: offset 0, shape 1 */
            for (int d = 0; d < p->ndim && d < 2; d++) {
                want[n].offset[d] = off[d];
                want[n].shape[d] = shape[d];
            }
        }
    }
    mp_code rc = ckpt_open_planned(r, llama_mesh(m)->world_comm, dir, want, n, err);
    free(names);
    free(want);
    return rc;
}

mp_code mp_checkpoint_load(llama_model *m, const char *dir, const llama_config *mc, int mode,
                           mp_run_state *st, mp_err *err) {
    assert(mode == MP_LOAD_FULL || mode == MP_LOAD_MODEL_ONLY || mode == MP_LOAD_WEIGHTS);
    ckpt_reader *r = NULL;
    MP_TRY(open_planned(m, dir, mode == MP_LOAD_FULL ? 3 : 1, &r, err));
    mp_code rc = check_model_config(r, mc, err);
    /* every number from the index is range-checked before use: the step feeds AdamW's t */
    if (mode == MP_LOAD_WEIGHTS) {   /* the run state is not used: only the step, for the log, if any */
        st->step = 0;
        if (!rc && ckpt_meta_get(r, "step")) rc = meta_int(r, "step", NULL, 0, MP_ADAMW_MAX_T - 1, &st->step, err);
    } else {
        if (!rc) rc = meta_int(r, "step", NULL, 0, MP_ADAMW_MAX_T - 1, &st->step, err);
        if (!rc) rc = meta_int(r, "data_cursor", "pos", 0, (int64_t)1 << 53, &st->cursor.pos, err);
        if (!rc) rc = meta_int(r, "data_cursor", "epoch", 0, (int64_t)1 << 53, &st->cursor.epoch, err);
        if (!rc) rc = read_saved_shape(r, st, err);
    }
    /* carried into the next saves only when it is a JSON object that fits (never a crafted entry's bytes) */
    const char *from = ckpt_meta_get(r, "init_from");
    cJSON *fj = from && strlen(from) < sizeof st->init_from ? cJSON_Parse(from) : NULL;
    snprintf(st->init_from, sizeof st->init_from, "%s", cJSON_IsObject(fj) ? from : "");
    cJSON_Delete(fj);
    int nk = mode == MP_LOAD_FULL ? 3 : 1;
    mp_backend *be = llama_backend(m);
    int np = llama_num_params(m);
    int64_t pg_total = 0;   /* a progress bar on a terminal: this rank's shard bytes (cli/progress.h) */
    for (int i = 0; i < np; i++) pg_total += (int64_t)llama_shard_numel(llama_param_at(m, i)) * (int64_t)sizeof(float) * nk;
    mp_info("loading checkpoint %s (%.2f MiB on this rank)", dir, pg_total / 1048576.0);   /* before the slow part */
    mp_progress *pg = mp_progress_start("loading checkpoint", pg_total, MP_PROGRESS_BYTES);
    ckpt_reader_set_progress(r, mp_progress_ckpt, pg);
    float *tmp = NULL;
    size_t tmp_bytes = 0;
    for (int i = 0; i < np && !rc; i++) {
        llama_param *p = llama_param_at(m, i);
        int64_t off[2], shape[2];
        int64_t rows = llama_param_disk_box(m, p, off, shape);
        size_t b = (size_t)llama_shard_numel(p) * sizeof(float);
        if (!be->host_memory && b > tmp_bytes) {
            if (tmp) be->host_free(be, tmp, tmp_bytes, MP_MEM_CKPT);
            tmp = be->host_alloc(be, b, MP_MEM_CKPT);   /* pinned on a GPU: the upload runs at full speed */
            tmp_bytes = b;
        }
        float *dst[3] = {p->shard, p->m, p->v};
        for (int k = 0; k < nk && !rc; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s/%s", kinds[k], p->name);
            int t = ckpt_tensor_find(r, name);
            if (t < 0) {
                rc = mp_err_set(err, MP_ECHECK, "checkpoint %s has no tensor %s", dir, name);
                break;
            }
            const ckpt_tensor_info *ti = ckpt_tensor_at(r, t);
            if (ti->ndim != p->ndim || ti->shape[0] != p->gshape[0] || (p->ndim == 2 && ti->shape[1] != p->gshape[1])) {
                rc = mp_err_set(err, MP_ECHECK, "checkpoint %s: tensor %s has shape [%lld, %lld], the model needs [%lld, %lld]",
                                dir, name, (long long)ti->shape[0], (long long)(ti->ndim > 1 ? ti->shape[1] : 1),
                                (long long)p->gshape[0], (long long)p->gshape[1]);
                break;
            }
            /* the box is the shard's first `rows` rows; vocab padding rows after them stay zero. Host
             * memory is read into straight (no copy); device memory through one host buffer */
            float *into = be->host_memory ? dst[k] : tmp;
            size_t box_bytes = rows > 0 ? (size_t)(shape[0] * (p->ndim == 2 ? shape[1] : 1)) * sizeof(float) : 0;
            assert(box_bytes <= b);
            memset((char *)into + box_bytes, 0, b - box_bytes);
            prefetch_next(r, m, i, k, nk);   /* the disk reads the next tensor while this one is read */
            if (rows > 0) rc = ckpt_read(r, name, off, shape, into, err);
            if (!rc && into == tmp) be->to_device(be, dst[k], tmp, b);
        }
    }
    if (tmp) be->host_free(be, tmp, tmp_bytes, MP_MEM_CKPT);
    mp_progress_finish(pg);
    ckpt_reader_io(r, &st->bytes_read, &st->bytes_needed);
    ckpt_close(r);
    if (!rc) llama_shards_changed(m);
    return rc;
}

void mp_checkpoint_log_io(mp_mesh *mesh, const char *what, const char *dir, const mp_run_state *st) {
    /* every rank's counts, summed in MiB (floats: exact enough for a ratio) */
    int64_t nidx = 0;   /* and the ranks that read an index.h5 in this process (ckpt_open_planned: rank 0) */
    ckpt_index_reads(&nidx, NULL);
    float v[3] = {(float)(st->bytes_read / 1048576.0), (float)(st->bytes_needed / 1048576.0), nidx > 0 ? 1.0f : 0.0f};
    mesh->world_comm->ops->all_reduce(mesh->world_comm, v, 3, MP_F32, 0);
    mp_info("%s %s at step %lld: read %.2f MiB for %.2f MiB needed (ratio %.3f); index.h5 read by %d of %d ranks", what,
            dir, (long long)st->step, v[0], v[1], v[1] > 0 ? v[0] / v[1] : 1.0, (int)v[2], mesh->world);
}
