/*
 * cli/import_gguf.c — `meshpoint import model.gguf`'s front end: the GGUF source (reshard/gguf_source.c:
 * model, tensors) and the tokenizer the file's tokenizer.ggml.* keys hold, rebuilt as the tokenizer.json and
 * tokenizer_config.json the checkpoint carries (tokenizer/tok_gguf.h's mp_tok_gguf_to_json: the ids llama.cpp
 * gives on the GGUF's vocabulary).
 * The inverse of cmd_export.c's gguf_put_tokenizer: the same keys, read.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "cli/convert.h"
#include "core/alloc.h"
#include "core/log.h"
#include "reshard/gguf.h"
#include "tokenizer/tok_gguf.h"

/* The kv of key with value type (an array's element type when arr), or NULL; MP_EINPUT naming the key when
 * it is present with another type. */
static const gguf_kv *key_of(const gguf_file *g, const char *key, int arr, int type, mp_err *e) {
    int64_t i = gguf_find_kv(g, key);
    if (i < 0) return NULL;
    const gguf_kv *k = &g->kv[i];
    if (arr ? k->type == GGUF_ARRAY && k->arr_type == type : k->type == type) return k;
    mp_err_set(e, MP_EINPUT, "%s: metadata key %s is not %s %s", g->name, key, arr ? "an array of" : "a",
               type == GGUF_STRING ? "string" : type == GGUF_I32 ? "i32" : type == GGUF_F32 ? "f32" : "bool");
    return NULL;
}

/* A string array's elements as n malloc'd NUL-terminated strings. */
static char **strings(const gguf_kv *k) {
    char **out = mp_xmalloc(sizeof *out * (k->n + 1));
    for (uint64_t i = 0; i < k->n; i++) {
        out[i] = mp_xmalloc(k->arr_len[i] + 1);
        memcpy(out[i], ((char **)k->arr)[i], k->arr_len[i]);
        out[i][k->arr_len[i]] = '\0';
    }
    return out;
}

/* The special ids and flags (tokenizer.ggml.*_token_id, add_*) into m; absent ones stay -1. */
static void specials(const gguf_file *g, mp_tok_gguf_meta *m) {
    static const char *const idk[] = {"bos", "eos", "unknown", "seperator", "padding", "cls", "mask"};
    int32_t *ids[] = {&m->bos, &m->eos, &m->unk, &m->sep, &m->pad, &m->cls, &m->mask};
    static const char *const flag[] = {"add_bos_token", "add_eos_token", "add_sep_token", "add_space_prefix"};
    int *flags[] = {&m->add_bos, &m->add_eos, &m->add_sep, &m->add_space_prefix};
    char key[64];
    for (int i = 0; i < 7; i++) {
        snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", idk[i]);
        int64_t k = gguf_find_kv(g, key);
        if (k >= 0 && g->kv[k].type != GGUF_ARRAY && g->kv[k].type != GGUF_STRING) *ids[i] = (int32_t)g->kv[k].v.i;
    }
    for (int i = 0; i < 4; i++) {
        snprintf(key, sizeof key, "tokenizer.ggml.%s", flag[i]);
        int64_t k = gguf_find_kv(g, key);
        if (k >= 0 && g->kv[k].type == GGUF_BOOL) *flags[i] = g->kv[k].v.u != 0;
    }
}

/* The tokenizer.ggml.* keys of g into m (m empty on entry: mp_tok_gguf_meta_free'd); *found 0 when g has no
 * tokenizer.ggml.model. MP_EINPUT naming a key of the wrong type or length. */
static mp_code read_meta(const gguf_file *g, mp_tok_gguf_meta *m, int *found, mp_err *e) {
    e->code = MP_OK;
    const gguf_kv *model = key_of(g, "tokenizer.ggml.model", 0, GGUF_STRING, e), *pre = key_of(g, "tokenizer.ggml.pre", 0, GGUF_STRING, e);
    const gguf_kv *tok = key_of(g, "tokenizer.ggml.tokens", 1, GGUF_STRING, e), *ty = key_of(g, "tokenizer.ggml.token_type", 1, GGUF_I32, e);
    const gguf_kv *sc = key_of(g, "tokenizer.ggml.scores", 1, GGUF_F32, e), *mg = key_of(g, "tokenizer.ggml.merges", 1, GGUF_STRING, e);
    const gguf_kv *ct = key_of(g, "tokenizer.chat_template", 0, GGUF_STRING, e);
    *found = model != NULL;
    if (e->code || !model) return e->code;
    if (strcmp(model->str, "llama") && strcmp(model->str, "gpt2"))
        return mp_err_set(e, MP_EINPUT, "%s: tokenizer.ggml.model is \"%s\": import rebuilds \"llama\" (sentencepiece BPE) "
                          "and \"gpt2\" (byte-level BPE) tokenizers", g->name, model->str);
    if (!tok || (ty && ty->n != tok->n) || (sc && sc->n != tok->n))
        return mp_err_set(e, MP_EINPUT, "%s: tokenizer.ggml.tokens is missing, or token_type/scores have another length", g->name);
    snprintf(m->model, sizeof m->model, "%s", model->str);
    m->pre = pre ? mp_strdup(pre->str) : NULL;
    m->n_tokens = (int64_t)tok->n;
    m->tokens = strings(tok);
    m->token_type = mp_xmalloc(sizeof *m->token_type * (tok->n + 1));
    for (uint64_t i = 0; i < tok->n; i++) m->token_type[i] = ty ? ((int32_t *)ty->arr)[i] : MP_GGUF_TOK_NORMAL;
    if (sc) m->scores = mp_xmalloc(sizeof *m->scores * (sc->n + 1)), memcpy(m->scores, sc->arr, sizeof(float) * sc->n);
    if (mg) m->n_merges = (int64_t)mg->n, m->merges = strings(mg);
    m->chat_template = ct ? mp_strdup(ct->str) : NULL;
    specials(g, m);
    return MP_OK;
}

/* Adds a file (name, text: taken over) to t. */
static void add_file(mp_tokfiles *t, const char *name, char *text) {
    t->name[t->n] = mp_strdup(name);
    t->data[t->n] = text;
    t->len[t->n++] = strlen(text);
}

/* The tokenizer files of g's tokenizer into t: tokenizer.json and tokenizer_config.json (with a warning and
 * none when g holds no tokenizer). */
static mp_code gguf_tokfiles(const gguf_file *g, mp_tokfiles *t, mp_err *e) {
    mp_tok_gguf_meta m;
    memset(&m, 0, sizeof m);
    mp_tok_gguf_meta_free(&m);
    int found = 0;
    char *tj = NULL, *tc = NULL;
    mp_code rc = read_meta(g, &m, &found, e);
    if (!rc && found) rc = mp_tok_gguf_to_json(&m, &tj, &tc, e);
    mp_tok_gguf_meta_free(&m);
    if (rc) return mp_err_wrap(e, "%s: the tokenizer (tokenizer.ggml.*)", g->name), rc;
    if (!found) mp_warn("import: %s holds no tokenizer (tokenizer.ggml.model): the checkpoint carries none", g->name);
    if (tj) add_file(t, "tokenizer.json", tj), add_file(t, "tokenizer_config.json", tc);
    return MP_OK;
}

mp_code mp_convert_open_gguf(const char *path, llama_config *mc, rs_source **src, mp_tokfiles *files, mp_err *e) {
    char *config_json = NULL;
    MP_TRY(rs_source_gguf(src, path, mc, &config_json, e));
    free(config_json);   /* the checkpoint records the parsed model; config.json is not a carried file */
    return gguf_tokfiles(rs_source_gguf_file(*src), files, e);
}

int mp_convert_is_gguf(const char *path) {
    char magic[4] = {0};
    FILE *f = fopen(path, "rb");
    if (!f) return 0;
    size_t n = fread(magic, 1, 4, f);
    fclose(f);
    return n == 4 && !memcmp(magic, "GGUF", 4);
}
