/*
 * reshard/hf_source.c — the engine's source over a Hugging Face directory of safetensors files.
 *
 * Opening reads every header (reshard/safetensors.c validates each) and builds one table of the
 * directory's tensors sorted by name, so a tensor that two shards both hold is found as two adjacent
 * entries, and a box read is a binary search plus preads of the rows it needs. With an index
 * (model.safetensors.index.json) the shards are the files its weight_map names (plain file names in
 * the directory; a path is refused), and every weight_map entry must be in the file it names.
 * Names: engine tensor "model/<hf name>" is HF tensor "<hf name>" (meshpoint stores the HF names).
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "layers/family_hf.h"
#include "layers/llama.h"
#include "reshard/reshard.h"
#include "reshard/safetensors.h"

#define HF_INDEX "model.safetensors.index.json"
#define HF_SINGLE "model.safetensors"
#define HF_MAX_INDEX (64 << 20)

typedef struct hf_entry {
    const char *name;   /* the tensor's (owned by its st_file) */
    int file, t;        /* file index, tensor index in it */
} hf_entry;

typedef struct hf_src {
    char *dir;
    int nf;
    st_file **f;
    int n;
    hf_entry *ent;      /* sorted by name */
    int64_t needed;     /* bytes asked for (in the files' dtypes) */
    llama_config cfg;   /* the model: names go through its family's HF map */
} hf_src;

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const hf_entry *)a)->name, ((const hf_entry *)b)->name);
}

static const hf_entry *find_entry(const hf_src *h, const char *name) {
    hf_entry key = {name, 0, 0};
    return bsearch(&key, h->ent, (size_t)h->n, sizeof key, cmp_entry);
}

/* Reads small text file path (at most HF_MAX_INDEX bytes) into a new string; MP_EINPUT naming it. */
static mp_code read_text(const char *path, char **out, mp_err *e) {
    return mp_read_text(path, HF_MAX_INDEX, out, NULL, e);
}

/* Opens dir/file as the next shard of h (unless already open); *idx gets its index. */
static mp_code open_shard(hf_src *h, const char *file, int *idx, mp_err *e) {
    for (int i = 0; i < h->nf; i++) {
        const char *base = strrchr(h->f[i]->path, '/') + 1;
        if (!strcmp(base, file)) { *idx = i; return MP_OK; }
    }
    if (!*file || strchr(file, '/') || !strcmp(file, ".") || !strcmp(file, ".."))
        return mp_err_set(e, MP_EINPUT, "%s/%s: weight_map names \"%s\", not a file name in the directory", h->dir,
                          HF_INDEX, file);
    size_t len = strlen(h->dir) + strlen(file) + 2;
    char *path = mp_xmalloc(len);
    snprintf(path, len, "%s/%s", h->dir, file);
    st_file *f = NULL;
    mp_code rc = st_open(&f, path, e);
    free(path);
    MP_TRY(rc);
    h->f = mp_realloc(h->f, sizeof *h->f * (size_t)h->nf, sizeof *h->f * (size_t)(h->nf + 1), MP_MEM_OTHER);
    *idx = h->nf;
    h->f[h->nf++] = f;
    return MP_OK;
}

/* The index: opens every shard its weight_map names; *wm gets the weight_map (owned by *root). */
static mp_code open_index(hf_src *h, const char *path, cJSON **root, const cJSON **wm, mp_err *e) {
    char *text = NULL;
    MP_TRY(read_text(path, &text, e));
    *root = cJSON_Parse(text);
    free(text);
    const cJSON *m = *root ? cJSON_GetObjectItemCaseSensitive(*root, "weight_map") : NULL;
    if (!cJSON_IsObject(m)) return mp_err_set(e, MP_EINPUT, "%s: not JSON with a \"weight_map\" object", path);
    for (const cJSON *c = m->child; c; c = c->next) {
        if (!cJSON_IsString(c))
            return mp_err_set(e, MP_EINPUT, "%s: weight_map: tensor \"%s\": the file is not a string", path, c->string);
        for (const cJSON *d = m->child; d != c; d = d->next)
            if (!strcmp(d->string, c->string))
                return mp_err_set(e, MP_EINPUT, "%s: weight_map: tensor \"%s\" is listed twice", path, c->string);
        int idx;
        MP_TRY(open_shard(h, c->valuestring, &idx, e));
    }
    *wm = m;
    return MP_OK;
}

/* The sorted tensor table of every open file; a tensor in two files is refused naming both. */
static mp_code build_table(hf_src *h, mp_err *e) {
    int n = 0;
    for (int i = 0; i < h->nf; i++) n += h->f[i]->n;
    h->ent = mp_xmalloc(sizeof *h->ent * (size_t)(n + 1));
    for (int i = 0; i < h->nf; i++)
        for (int k = 0; k < h->f[i]->n; k++) h->ent[h->n++] = (hf_entry){h->f[i]->t[k].name, i, k};
    qsort(h->ent, (size_t)h->n, sizeof *h->ent, cmp_entry);
    for (int i = 1; i < h->n; i++)
        if (!strcmp(h->ent[i - 1].name, h->ent[i].name))
            return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\" is in two files: %s and %s", h->dir, h->ent[i].name,
                              h->f[h->ent[i - 1].file]->path, h->f[h->ent[i].file]->path);
    return MP_OK;
}

/* Every weight_map entry must be in the file it names. */
static mp_code check_weight_map(hf_src *h, const cJSON *wm, mp_err *e) {
    for (const cJSON *c = wm->child; c; c = c->next) {
        const hf_entry *en = find_entry(h, c->string);
        const char *base = en ? strrchr(h->f[en->file]->path, '/') + 1 : NULL;
        if (!en || strcmp(base, c->valuestring))
            return mp_err_set(e, MP_EINPUT, "%s/%s: weight_map puts tensor \"%s\" in %s, which does not hold it", h->dir,
                              HF_INDEX, c->string, c->valuestring);
    }
    return MP_OK;
}

/* ------------------------------------------------------------------------------ the table */

/* The HF tensor behind engine name "model/<name>" and the first row of name in it (0 unless the family
 * fuses it: family_hf.h); NULL *t when there is none. */
static void place(hf_src *h, const char *name, st_file **f, const st_tensor **t, llama_hf_place *pl) {
    *f = NULL;
    *t = NULL;
    if (strncmp(name, "model/", 6)) return;
    if (llama_hf_place_of(&h->cfg, name + 6, pl)) return;
    const hf_entry *en = find_entry(h, pl->name);
    if (!en) return;
    *f = h->f[en->file];
    *t = &(*f)->t[en->t];
}

/* The HF tensor and first row behind the box (off, shape) of engine name, or an error naming it: a
 * missing tensor, another rank, a box beyond the part of a fused tensor. */
static mp_code lookup(hf_src *h, const char *name, int ndim, const int64_t *off, const int64_t *shape, st_file **f,
                      const st_tensor **t, int64_t *row0, mp_err *e) {
    llama_hf_place pl;
    place(h, name, f, t, &pl);
    if (!*t) return mp_err_set(e, MP_EINPUT, "HF directory %s has no tensor %s", h->dir, name);
    if ((*t)->ndim != ndim)
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\" has %d dimensions, the model's has %d", (*f)->path, pl.name,
                          (*t)->ndim, ndim);
    if (pl.rows && (off[0] < 0 || off[0] + shape[0] > pl.rows))
        return mp_err_set(e, MP_EINTERNAL, "%s: rows %lld..%lld of %s are outside its %lld rows of \"%s\"", (*f)->path,
                          (long long)off[0], (long long)(off[0] + shape[0]), name + 6, (long long)pl.rows, pl.name);
    *row0 = pl.row0;
    return MP_OK;
}

/* (off, shape) shifted down by row0 rows into o. */
static const int64_t *shifted(const int64_t *off, int ndim, int64_t row0, int64_t o[2]) {
    o[0] = off[0] + row0;
    o[1] = ndim == 2 ? off[1] : 0;
    return o;
}

static mp_code hf_read(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape, float *buf,
                       mp_err *e) {
    hf_src *h = s->impl;
    st_file *f = NULL;
    const st_tensor *t = NULL;
    int64_t row0 = 0, o[2];
    MP_TRY(lookup(h, name, ndim, off, shape, &f, &t, &row0, e));
    h->needed += shape[0] * (ndim == 2 ? shape[1] : 1) * st_dtype_size(t->dtype);
    return st_read_f32(f, t, shifted(off, ndim, row0, o), shape, buf, e);
}

/* rs_source prefetch: the engine names the next band while it writes this one (reshard/engine.c). */
static void hf_prefetch(rs_source *s, const char *name, const int64_t *off, const int64_t *shape) {
    hf_src *h = s->impl;
    st_file *f = NULL;
    const st_tensor *t = NULL;
    llama_hf_place pl;
    int64_t o[2];
    place(h, name, &f, &t, &pl);
    if (t) st_prefetch(f, t, shifted(off, t->ndim, pl.row0, o), shape);
}

static mp_code hf_plan(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                       void (*cb)(void *, const char *, int64_t), void *ctx, int64_t *bytes, mp_err *e) {
    hf_src *h = s->impl;
    st_file *f = NULL;
    const st_tensor *t = NULL;
    int64_t row0 = 0;
    *bytes = 0;
    MP_TRY(lookup(h, name, ndim, off, shape, &f, &t, &row0, e));
    *bytes = shape[0] * (ndim == 2 ? shape[1] : 1) * st_dtype_size(t->dtype);
    if (cb) cb(ctx, strrchr(f->path, '/') + 1, *bytes);
    return MP_OK;
}

static void hf_io(rs_source *s, int64_t *rd, int64_t *need) {
    hf_src *h = s->impl;
    int64_t r = 0;
    for (int i = 0; i < h->nf; i++) r += h->f[i]->bytes_read;
    if (rd) *rd = r;
    if (need) *need = h->needed;
}

static void hf_free(hf_src *h) {
    for (int i = 0; i < h->nf; i++) st_close(h->f[i]);
    free(h->f);
    free(h->ent);
    free(h->dir);
    free(h);
}

static void hf_close(rs_source *s) {
    if (!s) return;
    hf_free(s->impl);
    free(s);
}

mp_code rs_source_hf(rs_source **out, const char *dir, const llama_config *cfg, mp_err *e) {
    *out = NULL;
    hf_src *h = mp_xcalloc(sizeof *h);
    h->dir = mp_strdup(dir);
    assert(cfg);
    h->cfg = *cfg;
    size_t len = strlen(dir) + sizeof HF_INDEX + 2;
    char *ipath = mp_xmalloc(len);
    snprintf(ipath, len, "%s/%s", dir, HF_INDEX);
    struct stat sb;
    cJSON *root = NULL;
    const cJSON *wm = NULL;
    mp_code rc;
    int idx;
    if (stat(ipath, &sb) == 0) rc = open_index(h, ipath, &root, &wm, e);
    else {
        snprintf(ipath, len, "%s/%s", dir, HF_SINGLE);
        if (stat(ipath, &sb) == 0) rc = open_shard(h, HF_SINGLE, &idx, e);
        else rc = mp_err_set(e, MP_EINPUT, "%s holds neither %s nor %s: not a Hugging Face model directory", dir,
                             HF_SINGLE, HF_INDEX);
    }
    if (!rc) rc = build_table(h, e);
    if (!rc && wm) rc = check_weight_map(h, wm, e);
    cJSON_Delete(root);
    free(ipath);
    if (rc) { hf_free(h); return rc; }
    rs_source *s = mp_xcalloc(sizeof *s);
    *s = (rs_source){.kind = "hf", .read = hf_read, .plan = hf_plan, .prefetch = hf_prefetch, .io = hf_io, .close = hf_close, .impl = h};
    *out = s;
    return MP_OK;
}

/* Tensors an HF directory may hold that the model does not use (transformers ignores them too). */
static int ignorable(const char *name, const llama_config *cfg) {
    const char *suffix = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = strlen(suffix);
    if (n > k && !strcmp(name + n - k, suffix)) return 1;
    return cfg->tie_word_embeddings && !strcmp(name, "lm_head.weight");
}

/* Checks HF tensor t (of file f) as the place pl of the model's tensor sp: the shape config.json implies
 * (a fused tensor: all of its parts' rows), and a dtype import reads. The messages name the family and
 * what a fused tensor holds. */
static mp_code check_tensor(const st_file *f, const st_tensor *t, const llama_tensor_spec *sp, const llama_hf_place *pl,
                            const llama_config *cfg, mp_err *e) {
    int64_t rows = pl->hf_rows ? pl->hf_rows : sp->shape[0];
    int same = t->ndim == sp->ndim && t->shape[0] == rows && (t->ndim == 1 || t->shape[1] == sp->shape[1]);
    if (!same) {
        char why[256] = "";
        if (pl->fused)
            snprintf(why, sizeof why, " (model_type \"%s\" stores %s as one tensor; %s is its rows %lld..%lld)",
                     llama_family_get(cfg->family)->model_type, pl->fused, sp->name, (long long)pl->row0,
                     (long long)(pl->row0 + pl->rows));
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\" has shape [%lld%s%lld], config.json implies [%lld%s%lld]%s",
                          f->path, t->name, (long long)(t->ndim ? t->shape[0] : 0), t->ndim > 1 ? ", " : "",
                          (long long)(t->ndim > 1 ? t->shape[1] : 0), (long long)rows, sp->ndim > 1 ? ", " : "",
                          (long long)(sp->ndim > 1 ? sp->shape[1] : 0), why);
    }
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\" is %s: import reads F32, BF16 and F16", f->path, t->name,
                          st_dtype_name(t->dtype));
    return MP_OK;
}

mp_code rs_source_hf_check(rs_source *s, mp_err *e) {
    hf_src *h = s->impl;
    const llama_config *cfg = &h->cfg;
    int ns = llama_tensor_specs(cfg, NULL, 0);
    llama_tensor_spec *sp = mp_xmalloc(sizeof *sp * (size_t)ns);
    llama_tensor_specs(cfg, sp, ns);
    const char *family = llama_family_get(cfg->family)->model_type;
    mp_code rc = MP_OK;
    char *used = mp_xcalloc((size_t)h->n + 1);
    for (int i = 0; i < ns && !rc; i++) {
        llama_hf_place pl;
        const hf_entry *en = llama_hf_place_of(cfg, sp[i].name, &pl) ? NULL : find_entry(h, pl.name);
        if (!en) {
            rc = mp_err_set(e, MP_EINPUT, "%s: the %s model's tensor \"%s\" is missing", h->dir, family, pl.name);
            break;
        }
        used[en - h->ent] = 1;
        const st_file *f = h->f[en->file];
        rc = check_tensor(f, &f->t[en->t], &sp[i], &pl, cfg, e);
    }
    for (int i = 0; i < h->n && !rc; i++)
        if (!used[i] && !ignorable(h->ent[i].name, cfg))
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\" is not part of the %s model config.json describes",
                            h->f[h->ent[i].file]->path, h->ent[i].name, family);
    free(used);
    free(sp);
    return rc;
}
