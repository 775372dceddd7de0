/*
 * reshard/hf_sink.c — the engine's sink for a Hugging Face directory (`meshpoint export`).
 *
 * add() only records each whole tensor and its fill callback; commit() does the work: it groups the
 * tensors, in add order, into shard files of at most max_shard_bytes of data (a larger tensor gets a
 * file of its own, as transformers does), and writes each file with the safetensors writer — the
 * header first (the shapes are known), then every tensor pulled from the source in row bands of at
 * most band_bytes of fp32 (rs_hf_items_stream: band k converted and written on a helper thread while
 * band k+1 is read). Memory: two bands and the writer's small conversion buffer, whatever the model size.
 *
 * A family that fuses projections in its HF checkpoints (Phi-3: q/k/v in self_attn.qkv_proj, gate/up
 * in mlp.gate_up_proj; layers/family_hf.h) gets them merged (reshard/hf_items.c): the adds that map to one HF name
 * become one item of up to three parts, each the row range of its meshpoint tensor, and a band of the
 * fused tensor is filled part by part (a band that straddles two parts pulls each piece from its own
 * tensor). Still one band of memory; the commit refuses a fused tensor whose parts do not tile it.
 *
 * The directory is built as DIR.partial (every file fsynced, then the directory) and renamed to DIR;
 * with replace, an existing DIR is swapped out by that rename (ckpt/'s mp_fs_swap_dirs) and removed after,
 * so a failure at any point leaves the old DIR as it was and no half-written DIR.
 *
 * config.json is the model config as the parser writes it (llama_config_to_json: architectures,
 * model_type, every field, head_dim, biases false, rope_scaling), plus what transformers 5 writes
 * (dtype, rope_parameters with rope_theta) next to what 4.x reads (torch_dtype, rope_theta), and
 * LlamaConfig's remaining defaults (attention_dropout, pretraining_tp, use_cache). Numbers are printed
 * exactly (the shortest text that reads back to the same double). pretraining_tp is LlamaConfig's alone
 * (written for the llama family only). Files the checkpoint carries (its
 * tokenizer's: file()) are written beside it as they were imported; a carried generation_config.json
 * replaces the default one. Only names a checkpoint may carry are taken (ckpt_file_name_check), and never
 * a name the sink writes itself, so a carried file cannot replace the exported config or weights.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "layers/family_hf.h"
#include "layers/llama.h"
#include "reshard/hf_items.h"
#include "reshard/reshard.h"
#include "reshard/safetensors.h"

typedef struct hf_sink {
    char *dir, *partial;
    rs_hf_items x;        /* the HF tensors, fused ones as their parts */
    st_dtype dtype;
    int64_t max_shard;
    size_t band;
    int replace;
    struct { char *name, *data; size_t n; } files[CKPT_FILES_MAX];   /* carried files (the tokenizer's) */
    int nfiles;
} hf_sink;

mp_code rs_hf_layout(const llama_config *cfg, rs_box **boxes, int *n, mp_err *e) {
    MP_TRY(llama_config_validate(cfg, e));
    int ns = llama_tensor_specs(cfg, NULL, 0);
    llama_tensor_spec *sp = mp_xmalloc(sizeof *sp * (size_t)ns);
    llama_tensor_specs(cfg, sp, ns);
    rs_box *b = mp_xcalloc(sizeof *b * (size_t)ns);
    for (int i = 0; i < ns; i++) {
        snprintf(b[i].name, sizeof b[i].name, "model/%s", sp[i].name);
        b[i].ndim = sp[i].ndim;
        memcpy(b[i].gshape, sp[i].shape, sizeof b[i].gshape);
        memcpy(b[i].shape, sp[i].shape, sizeof b[i].shape);
    }
    free(sp);
    *boxes = b;
    *n = ns;
    return MP_OK;
}

/* rs_sink add: records whole tensor name as (a part of) the HF tensor the family map names. */
static mp_code hs_add(rs_sink *s, int file_rank, const char *name, int ndim, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e) {
    return rs_hf_items_add(&((hf_sink *)s->impl)->x, file_rank, name, ndim, gshape, off, shape, fill, ctx, e);
}

static mp_code hs_meta(rs_sink *s, const char *key, const char *value, mp_err *e) { return MP_OK; }

/* 1 if name is a file the sink writes itself (config.json, the weights and their index). */
static int own_name(const char *name) {
    size_t n = strlen(name);
    return !strcmp(name, "config.json") || !strcmp(name, "model.safetensors.index.json") ||
           (!strncmp(name, "model", 5) && n >= 12 && !strcmp(name + n - 12, ".safetensors"));
}

/* Keeps a copy of a carried file (a tokenizer file), written into the directory at the commit: only a
 * name a checkpoint may carry (ckpt_file_name_check), never one the sink writes itself, each once. */
static mp_code hs_file(rs_sink *s, const char *name, const void *data, size_t n, mp_err *e) {
    hf_sink *h = s->impl;
    if (own_name(name)) return mp_err_set(e, MP_EINPUT, "HF export: a carried file may not be named %s (the export's own)", name);
    MP_TRY(ckpt_file_name_check(name, e));
    for (int i = 0; i < h->nfiles; i++)
        if (!strcmp(h->files[i].name, name)) return mp_err_set(e, MP_EINPUT, "HF export: carried file %s given twice", name);
    h->files[h->nfiles].name = mp_strdup(name);
    h->files[h->nfiles].data = mp_xmalloc(n + 1);
    memcpy(h->files[h->nfiles].data, data, n);
    h->files[h->nfiles++].n = n;
    return MP_OK;
}

/* Writes the carried files into the partial directory (durably); 1 in *gen when one is
 * generation_config.json (the model's own replaces the default). */
static mp_code write_files(hf_sink *h, int *gen, mp_err *e) {
    *gen = 0;
    for (int i = 0; i < h->nfiles; i++) {
        MP_TRY(mp_fs_write_durable(h->partial, h->files[i].name, h->files[i].data, h->files[i].n, e));
        *gen |= !strcmp(h->files[i].name, "generation_config.json");
    }
    return MP_OK;
}

/* Data bytes of item t in the output dtype. */
static int64_t item_bytes(const hf_sink *h, const hf_item *t) { return t->shape[0] * t->shape[1] * st_dtype_size(h->dtype); }

/* rs_hf_put_fn: a band to the safetensors writer (plain write(2), no HDF5). */
static mp_code put_band(void *w, const hf_item *t, int64_t r0, int64_t rows, const float *x, mp_err *e) {
    return st_writer_put(w, x, rows * t->shape[1], e);
}

/* Writes items [a, b) into the safetensors file dir/file, each pulled in row bands through
 * rs_hf_items_stream: band k is converted and written on the worker while the caller's thread reads
 * band k+1. The bytes written are the same serially (one writer, bands in order). */
static mp_code write_shard(hf_sink *h, const char *file, int a, int b, mp_err *e) {
    st_decl *d = mp_xcalloc(sizeof *d * (size_t)(b - a + 1));
    size_t rows_max = 1;
    for (int i = a; i < b; i++) {
        d[i - a] = (st_decl){.name = h->x.it[i].name, .dtype = h->dtype, .ndim = h->x.it[i].ndim,
                             .shape = {h->x.it[i].shape[0], h->x.it[i].shape[1]}};
        size_t r = h->band / (size_t)(4 * h->x.it[i].shape[1]);
        if (r < 1) r = 1;
        if (r > (size_t)h->x.it[i].shape[0]) r = (size_t)h->x.it[i].shape[0];
        if (r * (size_t)h->x.it[i].shape[1] > rows_max) rows_max = r * (size_t)h->x.it[i].shape[1];
    }
    char *path = mp_fs_join(h->partial, file);
    st_writer *w = NULL;
    mp_code rc = st_writer_open(&w, path, d, b - a, e);
    if (!rc) rc = rs_hf_items_stream(&h->x, a, b, (int64_t)rows_max, NULL, put_band, w, e);
    if (!rc) rc = st_writer_close(w, e);
    else st_writer_free(w);
    free(path);
    free(d);
    return rc;
}

/* Turns every number under j into raw text that reads back to exactly its double (cJSON prints 15
 * digits whenever they come within an epsilon). */
static void exact_numbers(cJSON *j) {
    for (cJSON *c = j->child; c; c = c->next) {
        if (c->child) exact_numbers(c);
        if (!cJSON_IsNumber(c)) continue;
        char buf[40];
        for (int prec = 15; prec <= 17; prec++) {
            snprintf(buf, sizeof buf, "%.*g", prec, c->valuedouble);
            if (strtod(buf, NULL) == c->valuedouble) break;
        }
        c->type = cJSON_Raw;
        c->valuestring = strdup(buf);
    }
}

/* config.json text (see the top of the file). Caller frees. */
static char *config_json(const llama_config *cfg, st_dtype dt) {
    char *base = llama_config_to_json(cfg);
    cJSON *o = cJSON_Parse(base);
    free(base);
    const char *tname = dt == ST_BF16 ? "bfloat16" : "float32";
    cJSON_DeleteItemFromObjectCaseSensitive(o, "torch_dtype");
    cJSON_AddStringToObject(o, "torch_dtype", tname);
    cJSON_AddStringToObject(o, "dtype", tname);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(o, "rope_scaling");
    cJSON *rp = cJSON_IsObject(rs) ? cJSON_Duplicate(rs, 1) : cJSON_CreateObject();
    if (!cJSON_GetObjectItemCaseSensitive(rp, "rope_type")) {
        cJSON_DeleteItemFromObjectCaseSensitive(rp, "type");
        cJSON_AddStringToObject(rp, "rope_type", "default");
    }
    cJSON_AddNumberToObject(rp, "rope_theta", cfg->rope_theta);
    cJSON_AddItemToObject(o, "rope_parameters", rp);
    if (!cJSON_GetObjectItemCaseSensitive(o, "attention_dropout")) cJSON_AddNumberToObject(o, "attention_dropout", 0.0);
    if ((llama_family_get(cfg->family)->writes & LLAMA_WRITES_PRETRAINING_TP) &&
        !cJSON_GetObjectItemCaseSensitive(o, "pretraining_tp"))
        cJSON_AddNumberToObject(o, "pretraining_tp", 1);
    if (!cJSON_GetObjectItemCaseSensitive(o, "use_cache")) cJSON_AddBoolToObject(o, "use_cache", 1);
    exact_numbers(o);
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    return txt;
}

/* model.safetensors.index.json for nf shard files, items [first[k], first[k+1]) in file k. */
static char *index_json(const hf_sink *h, const int *first, int nf) {
    cJSON *o = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(o, "metadata");
    int64_t total = 0;
    for (int i = 0; i < h->x.n; i++) total += item_bytes(h, &h->x.it[i]);
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)total);
    cJSON_AddRawToObject(meta, "total_size", num);
    /* weight_map sorted by tensor name, as transformers writes it (json.dumps(sort_keys=True)) */
    const char **names = mp_xmalloc(sizeof *names * (size_t)(h->x.n + 1));
    int *fileof = mp_xmalloc(sizeof *fileof * (size_t)(h->x.n + 1));
    for (int k = 0; k < nf; k++)
        for (int i = first[k]; i < first[k + 1]; i++) fileof[i] = k;
    for (int i = 0; i < h->x.n; i++) names[i] = h->x.it[i].name;
    cJSON *wm = cJSON_AddObjectToObject(o, "weight_map");
    for (int done = 0; done < h->x.n; done++) {   /* selection by name: n is a few hundred */
        int best = -1;
        for (int i = 0; i < h->x.n; i++)
            if (names[i] && (best < 0 || strcmp(names[i], names[best]) < 0)) best = i;
        char file[64];
        snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", fileof[best] + 1, nf);
        cJSON_AddStringToObject(wm, names[best], file);
        names[best] = NULL;
    }
    free(names);
    free(fileof);
    char *txt = cJSON_Print(o);
    cJSON_Delete(o);
    return txt;
}

/* Writes every data file (and the index when there are several) into the partial directory. */
static mp_code write_data(hf_sink *h, mp_err *e) {
    int *first = mp_xmalloc(sizeof *first * (size_t)(h->x.n + 2));
    int nf = 0;
    int64_t in_file = 0;
    for (int i = 0; i < h->x.n; i++) {
        int64_t b = item_bytes(h, &h->x.it[i]);
        if (i == 0 || (in_file > 0 && in_file + b > h->max_shard)) { first[nf++] = i; in_file = 0; }
        in_file += b;
    }
    first[nf] = h->x.n;
    mp_code rc = MP_OK;
    if (nf <= 1) {
        rc = write_shard(h, "model.safetensors", 0, h->x.n, e);
    } else {
        for (int k = 0; k < nf && !rc; k++) {
            char file[64];
            snprintf(file, sizeof file, "model-%05d-of-%05d.safetensors", k + 1, nf);
            rc = write_shard(h, file, first[k], first[k + 1], e);
        }
        char *idx = rc ? NULL : index_json(h, first, nf);
        if (idx) rc = mp_fs_write_text_durable(h->partial, "model.safetensors.index.json", idx, e);
        free(idx);
    }
    free(first);
    return rc;
}

static mp_code hs_commit(rs_sink *s, mp_err *e) {
    hf_sink *h = s->impl;
    if (h->x.failed) {
        if (e) *e = h->x.err;
        return h->x.failed;
    }
    mp_code rc = MP_OK;
    if (mp_fs_exists(h->partial)) rc = mp_fs_remove_tree(h->partial, e);   /* stale, from an interrupted export */
    if (!rc) rc = rs_hf_items_check(&h->x, e);
    if (!rc) rc = mp_fs_mkdirs(h->partial, e);
    if (!rc) rc = write_data(h, e);
    char *cfg = rc ? NULL : config_json(&h->x.cfg, h->dtype);
    if (cfg) rc = mp_fs_write_text_durable(h->partial, "config.json", cfg, e);
    free(cfg);
    int gen = 0;
    if (!rc) rc = write_files(h, &gen, e);
    if (!rc && !gen)
        rc = mp_fs_write_text_durable(h->partial, "generation_config.json", "{\n\t\"_from_model_config\":\ttrue\n}\n", e);
    if (!rc) rc = rs_publish_dir(h->partial, h->dir, "HF export", e);
    if (rc && mp_fs_exists(h->partial)) {
        mp_err re;
        mp_fs_remove_tree(h->partial, &re);
    }
    return rc;
}

static void hs_free(rs_sink *s) {
    if (!s) return;
    hf_sink *h = s->impl;
    free(h->dir);
    free(h->partial);
    rs_hf_items_free(&h->x);
    for (int i = 0; i < h->nfiles; i++) { free(h->files[i].name); free(h->files[i].data); }
    free(h);
    free(s);
}

mp_code rs_sink_hf(rs_sink **out, const char *dir, const llama_config *cfg, const char *dtype,
                   int64_t max_shard_bytes, size_t band_bytes, int replace, mp_err *e) {
    *out = NULL;
    st_dtype dt;
    if (!strcmp(dtype, "F32")) dt = ST_F32;
    else if (!strcmp(dtype, "BF16")) dt = ST_BF16;
    else return mp_err_set(e, MP_EINPUT, "HF export: dtype %s (F32 or BF16)", dtype);
    MP_TRY(rs_out_dir_check(dir, replace, e));
    hf_sink *h = mp_xcalloc(sizeof *h);
    h->dir = mp_strdup(dir);
    for (size_t l = strlen(h->dir); l > 1 && h->dir[l - 1] == '/'; l--) h->dir[l - 1] = '\0';   /* "out/" */
    size_t np = strlen(dir) + sizeof ".partial";
    h->partial = mp_xmalloc(np);
    snprintf(h->partial, np, "%s.partial", dir);
    h->x.cfg = *cfg;
    h->x.who = "HF export";
    h->dtype = dt;
    h->max_shard = max_shard_bytes > 0 ? max_shard_bytes : INT64_MAX;
    h->band = band_bytes < 4096 ? 4096 : band_bytes;
    h->replace = replace;
    rs_sink *s = mp_xcalloc(sizeof *s);
    *s = (rs_sink){.kind = "hf", .add = hs_add, .meta = hs_meta, .file = hs_file, .commit = hs_commit, .free = hs_free, .impl = h};
    *out = s;
    return MP_OK;
}
