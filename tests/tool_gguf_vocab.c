/*
 * tests/tool_gguf_vocab.c — tokenizer/tok_gguf.h as JSON, for tests/python/gguf_vocab.py to hold against
 * llama.cpp's convert_hf_to_gguf.py and llama.cpp's tokenizer:
 *   tool_gguf_vocab from-json DIR         mp_tok_gguf_from_json on DIR/tokenizer.json (+ tokenizer_config.json,
 *                                         config.json when present): one JSON object on stdout, members named
 *                                         after the GGUF keys' last part (model, pre, tokens, token_type, scores,
 *                                         merges, bos, eos, unk, sep, pad, cls, mask, add_bos, add_eos, add_sep,
 *                                         add_space_prefix, chat_template; absent = not written)
 *   tool_gguf_vocab to-json META OUTDIR   that object (a file) back through mp_tok_gguf_to_json: OUTDIR/tokenizer.json
 *                                         and OUTDIR/tokenizer_config.json
 * Errors: the message on stderr, exit status 2 (bad input) or 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "tokenizer/tok_gguf.h"

static const char *const IDS[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
static const char *const FLAGS[] = {"add_bos", "add_eos", "add_sep", "add_space_prefix"};

/* Pointers to m's ids and flags in the order of IDS and FLAGS. */
static void fields(mp_tok_gguf_meta *m, int32_t *ids[7], int *flags[4]) {
    int32_t *i[7] = {&m->bos, &m->eos, &m->unk, &m->sep, &m->pad, &m->cls, &m->mask};
    int *f[4] = {&m->add_bos, &m->add_eos, &m->add_sep, &m->add_space_prefix};
    memcpy(ids, i, sizeof i);
    memcpy(flags, f, sizeof f);
}

/* The text of DIR/name, or NULL when the file does not exist (other errors: exit 2). */
static char *read_opt(const char *dir, const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (access(path, F_OK) != 0) return NULL;
    char *text;
    size_t n;
    mp_err err;
    if (mp_read_text(path, (size_t)1 << 30, &text, &n, &err) != MP_OK) {
        fprintf(stderr, "tool_gguf_vocab: %s\n", err.msg);
        exit(2);
    }
    return text;
}

static int from_json(const char *dir) {
    char *tj = read_opt(dir, "tokenizer.json"), *tc = read_opt(dir, "tokenizer_config.json");
    char *mc = read_opt(dir, "config.json");
    mp_tok_gguf_meta m = {0};
    mp_err err;
    mp_code rc = mp_tok_gguf_from_json(tj, tc, mc, &m, &err);
    free(tj), free(tc), free(mc);
    if (rc != MP_OK) {
        fprintf(stderr, "tool_gguf_vocab: %s\n", err.msg);
        return mp_exit_status(rc);
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", m.model);
    cJSON_AddStringToObject(o, "pre", m.pre);
    cJSON_AddItemToObject(o, "tokens", cJSON_CreateStringArray((const char *const *)m.tokens, (int)m.n_tokens));
    cJSON_AddItemToObject(o, "token_type", cJSON_CreateIntArray(m.token_type, (int)m.n_tokens));
    if (m.scores) cJSON_AddItemToObject(o, "scores", cJSON_CreateFloatArray(m.scores, (int)m.n_tokens));
    if (m.merges) cJSON_AddItemToObject(o, "merges", cJSON_CreateStringArray((const char *const *)m.merges, (int)m.n_merges));
    int32_t *ids[7];
    int *flags[4];
    fields(&m, ids, flags);
    for (int k = 0; k < 7; k++) if (*ids[k] >= 0) cJSON_AddNumberToObject(o, IDS[k], *ids[k]);
    for (int k = 0; k < 4; k++) if (*flags[k] >= 0) cJSON_AddBoolToObject(o, FLAGS[k], *flags[k]);
    if (m.chat_template) cJSON_AddStringToObject(o, "chat_template", m.chat_template);
    char *s = cJSON_PrintUnformatted(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
    mp_tok_gguf_meta_free(&m);
    return 0;
}

/* Reads the JSON object of from_json's form into *m (exit 2 on a malformed one). */
static void meta_of(const cJSON *o, mp_tok_gguf_meta *m) {
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(o, "tokens"), *types = cJSON_GetObjectItemCaseSensitive(o, "token_type");
    const cJSON *scores = cJSON_GetObjectItemCaseSensitive(o, "scores"), *merges = cJSON_GetObjectItemCaseSensitive(o, "merges");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model"), *pre = cJSON_GetObjectItemCaseSensitive(o, "pre");
    int n = cJSON_GetArraySize(toks);
    if (!cJSON_IsString(model) || cJSON_GetArraySize(types) != n || (scores && cJSON_GetArraySize(scores) != n)) {
        fprintf(stderr, "tool_gguf_vocab: META: model, tokens and token_type (and scores) of one length are required\n");
        exit(2);
    }
    snprintf(m->model, sizeof m->model, "%s", model->valuestring);
    m->pre = cJSON_IsString(pre) ? mp_strdup(pre->valuestring) : NULL;
    m->n_tokens = n;
    m->tokens = mp_xcalloc((size_t)(n + 1) * sizeof *m->tokens);
    m->token_type = mp_xcalloc((size_t)(n + 1) * sizeof *m->token_type);
    m->scores = scores ? mp_xcalloc((size_t)(n + 1) * sizeof *m->scores) : NULL;
    for (int i = 0; i < n; i++) {
        const cJSON *t = cJSON_GetArrayItem(toks, i);
        m->tokens[i] = mp_strdup(cJSON_IsString(t) ? t->valuestring : "");
        m->token_type[i] = cJSON_GetArrayItem(types, i)->valueint;
        if (scores) m->scores[i] = (float)cJSON_GetArrayItem(scores, i)->valuedouble;
    }
    m->n_merges = cJSON_GetArraySize(merges);
    m->merges = merges ? mp_xcalloc((size_t)(m->n_merges + 1) * sizeof *m->merges) : NULL;
    for (int i = 0; merges && i < m->n_merges; i++) m->merges[i] = mp_strdup(cJSON_GetArrayItem(merges, i)->valuestring);
    int32_t *ids[7];
    int *flags[4];
    fields(m, ids, flags);
    for (int k = 0; k < 7; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, IDS[k]);
        if (cJSON_IsNumber(v)) *ids[k] = v->valueint;
    }
    for (int k = 0; k < 4; k++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, FLAGS[k]);
        if (cJSON_IsBool(v)) *flags[k] = cJSON_IsTrue(v);
    }
    const char *ct = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, "chat_template"));
    m->chat_template = ct ? mp_strdup(ct) : NULL;
}

/* Writes text to dir/name (exit 1 on failure). */
static void write_file(const char *dir, const char *name, const char *text) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "tool_gguf_vocab: %s: cannot write\n", path);
        exit(1);
    }
}

static int to_json(const char *meta_path, const char *outdir) {
    char *text;
    size_t n;
    mp_err err;
    if (mp_read_text(meta_path, (size_t)1 << 30, &text, &n, &err) != MP_OK) {
        fprintf(stderr, "tool_gguf_vocab: %s\n", err.msg);
        return 2;
    }
    cJSON *o = cJSON_Parse(text);
    free(text);
    if (!cJSON_IsObject(o)) {
        fprintf(stderr, "tool_gguf_vocab: %s: not a JSON object\n", meta_path);
        return 2;
    }
    mp_tok_gguf_meta m;
    mp_tok_gguf_meta_free(memset(&m, 0, sizeof m));
    meta_of(o, &m);
    cJSON_Delete(o);
    char *tj, *tc;
    mp_code rc = mp_tok_gguf_to_json(&m, &tj, &tc, &err);
    mp_tok_gguf_meta_free(&m);
    if (rc != MP_OK) {
        fprintf(stderr, "tool_gguf_vocab: %s\n", err.msg);
        return mp_exit_status(rc);
    }
    write_file(outdir, "tokenizer.json", tj);
    write_file(outdir, "tokenizer_config.json", tc);
    free(tj), free(tc);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "from-json")) return from_json(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "to-json")) return to_json(argv[2], argv[3]);
    fprintf(stderr, "usage: tool_gguf_vocab from-json DIR | to-json META OUTDIR\n");
    return 2;
}
