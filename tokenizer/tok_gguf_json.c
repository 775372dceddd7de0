/*
 * tokenizer/tok_gguf_json.c — GGUF's tokenizer.ggml.* keys -> a tokenizer.json + tokenizer_config.json
 * (mp_tok_gguf_to_json): what `import model.gguf` carries, so that the checkpoint's tokenizer (mp_tok, and
 * `tokenizers` on the same file) gives the ids llama.cpp gives on the GGUF's vocabulary.
 *
 * "gpt2": a byte-level BPE whose vocabulary is the token list (ids = positions), merges as written,
 * the pre-tokenizer llama.cpp's pre name selects (tok_gguf.c's table: gpt-2 = ByteLevel with its regex;
 * llama-bpe = Split(Llama 3's pattern) + ByteLevel, ignore_merges as llama.cpp's llama-bpe; qwen2 = the
 * same with Qwen's pattern, and no NFC normalizer: llama.cpp applies none), the ByteLevel decoder.
 * "llama" (sentencepiece): llama.cpp merges the adjacent pair whose joined text is the token of highest
 * score (the leftmost among equals), falling back to <0xNN> bytes. The BPE that does the same has, for
 * every NORMAL token, each split into two tokens as a merge, ranked by the token's score, highest first
 * (transformers' SentencePieceExtractor); the layout is Llama 2's legacy one (Prepend("▁") when
 * add_space_prefix, Replace(" ", "▁"), byte_fallback, the ByteFallback decoder chain).
 * CONTROL, USER_DEFINED and UNKNOWN tokens, which llama.cpp's parse_special matches in text, are added tokens
 * (special: CONTROL and UNKNOWN); BOS in the template when add_bos_token, EOS when add_eos_token.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_gguf.h"
#include "tokenizer/tok_internal.h"

#define SP "\xE2\x96\x81"   /* U+2581, sentencepiece's space */

/* {"type": type} plus, for a non-NULL k1, the string member k1 = v1. */
static cJSON *stage(const char *type, const char *k1, const char *v1) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", type);
    if (k1) cJSON_AddStringToObject(o, k1, v1);
    return o;
}

/* A ByteLevel pre-tokenizer/decoder/post-processor stage. */
static cJSON *byte_level(int use_regex) {
    cJSON *o = stage("ByteLevel", NULL, NULL);
    cJSON_AddBoolToObject(o, "add_prefix_space", 0);
    cJSON_AddBoolToObject(o, "trim_offsets", 0);
    cJSON_AddBoolToObject(o, "use_regex", use_regex);
    return o;
}

/* The byte-level layout of pre name pre: normalizer, pre_tokenizer and decoder into root. */
static mp_code layout_gpt2(const char *pre, cJSON *root, cJSON *model, mp_err *err) {
    const char *pattern, *normalizer;
    if (!mp_tok_gguf_pre_layout(pre, &pattern, &normalizer))
        return mp_err_set(err, MP_EINPUT, "tokenizer.ggml.pre \"%s\": no tokenizer.json layout for it here (known: "
                          "gpt-2, llama-bpe, qwen2)", pre);
    (void)normalizer;   /* llama.cpp normalizes nothing (Qwen's NFC included): neither does the rebuilt file */
    cJSON_AddItemToObject(root, "normalizer", cJSON_CreateNull());
    if (pattern) {
        cJSON *seq = stage("Sequence", NULL, NULL), *list = cJSON_AddArrayToObject(seq, "pretokenizers");
        cJSON *split = stage("Split", NULL, NULL), *pat = cJSON_AddObjectToObject(split, "pattern");
        cJSON_AddStringToObject(pat, "Regex", pattern);
        cJSON_AddStringToObject(split, "behavior", "Isolated");
        cJSON_AddBoolToObject(split, "invert", 0);
        cJSON_AddItemToArray(list, split);
        cJSON_AddItemToArray(list, byte_level(0));
        cJSON_AddItemToObject(root, "pre_tokenizer", seq);
    } else {
        cJSON_AddItemToObject(root, "pre_tokenizer", byte_level(1));
    }
    cJSON_AddItemToObject(root, "decoder", byte_level(1));
    cJSON_AddBoolToObject(model, "byte_fallback", 0);
    cJSON_AddBoolToObject(model, "ignore_merges", !strcmp(pre, "llama-bpe"));
    return MP_OK;
}

/* The sentencepiece layout: normalizer, decoder, byte fallback (llama.cpp's SPM with add_space_prefix). */
static void layout_llama(const mp_tok_gguf_meta *m, cJSON *root, cJSON *model) {
    cJSON *norm = stage("Sequence", NULL, NULL), *nl = cJSON_AddArrayToObject(norm, "normalizers");
    if (m->add_space_prefix != 0) cJSON_AddItemToArray(nl, stage("Prepend", "prepend", SP));
    cJSON *rep = stage("Replace", NULL, NULL);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(rep, "pattern"), "String", " ");
    cJSON_AddStringToObject(rep, "content", SP);
    cJSON_AddItemToArray(nl, rep);
    cJSON_AddItemToObject(root, "normalizer", norm);
    cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_CreateNull());
    cJSON *dec = stage("Sequence", NULL, NULL), *dl = cJSON_AddArrayToObject(dec, "decoders");
    cJSON *drep = stage("Replace", NULL, NULL);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(drep, "pattern"), "String", SP);
    cJSON_AddStringToObject(drep, "content", " ");
    cJSON_AddItemToArray(dl, drep);
    cJSON_AddItemToArray(dl, stage("ByteFallback", NULL, NULL));
    cJSON_AddItemToArray(dl, stage("Fuse", NULL, NULL));
    if (m->add_space_prefix != 0) {
        cJSON *strip = stage("Strip", "content", " ");
        cJSON_AddNumberToObject(strip, "start", 1);
        cJSON_AddNumberToObject(strip, "stop", 0);
        cJSON_AddItemToArray(dl, strip);
    }
    cJSON_AddItemToObject(root, "decoder", dec);
    cJSON_AddBoolToObject(model, "byte_fallback", 1);
    cJSON_AddBoolToObject(model, "fuse_unk", 1);
    int64_t unk = m->unk;   /* unset: the UNKNOWN token, else llama.cpp's sentencepiece default, id 0 */
    for (int64_t i = 0; unk < 0 && i < m->n_tokens; i++) if (m->token_type[i] == MP_GGUF_TOK_UNKNOWN) unk = i;
    if (unk < 0) unk = 0;
    if (unk < m->n_tokens) cJSON_AddStringToObject(model, "unk_token", m->tokens[unk]);
}

/* One merge candidate of the sentencepiece extraction: the split (left, right) of a token of score s. */
typedef struct sp_merge { float score; int32_t tok, left, right; } sp_merge;

/* Sorts by score, highest first; then by the token's id, then the left part's id (a stable, total order). */
static int sp_merge_cmp(const void *pa, const void *pb) {
    const sp_merge *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->tok != b->tok) return a->tok < b->tok ? -1 : 1;
    return (a->left > b->left) - (a->left < b->left);
}

/* The merges of the sentencepiece extraction (file comment) into the JSON array out. */
static void merges_llama(const mp_tok_gguf_meta *m, cJSON *out) {
    mp_tok_map ids = {0};
    for (int64_t i = 0; i < m->n_tokens; i++) mp_tok_map_put(&ids, m->tokens[i], strlen(m->tokens[i]), (int32_t)i);
    sp_merge *v = NULL;
    int n = 0, cap = 0;
    for (int64_t i = 0; i < m->n_tokens; i++) {
        const char *t = m->tokens[i];
        size_t len = strlen(t);
        if (m->token_type[i] != MP_GGUF_TOK_NORMAL) continue;
        for (size_t k = 1; k < len; k++) {
            if (((unsigned char)t[k] & 0xC0) == 0x80) continue;   /* split between code points only */
            int32_t l = mp_tok_map_get(&ids, t, k), r = mp_tok_map_get(&ids, t + k, len - k);
            if (l < 0 || r < 0) continue;
            mp_tok_grow((void **)&v, &cap, n, sizeof *v);
            v[n++] = (sp_merge){m->scores[i], (int32_t)i, l, r};
        }
    }
    if (n) qsort(v, (size_t)n, sizeof *v, sp_merge_cmp);
    for (int k = 0; k < n; k++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(m->tokens[v[k].left]));
        cJSON_AddItemToArray(pair, cJSON_CreateString(m->tokens[v[k].right]));
        cJSON_AddItemToArray(out, pair);
    }
    free(v);
    mp_tok_map_free(&ids);
}

/* The added_tokens array: every CONTROL, USER_DEFINED and UNKNOWN token (what llama.cpp's parse_special
 * matches), not normalized, special unless USER_DEFINED. */
static cJSON *added_tokens(const mp_tok_gguf_meta *m) {
    cJSON *arr = cJSON_CreateArray();
    for (int64_t i = 0; i < m->n_tokens; i++) {
        int t = m->token_type[i];
        if (t != MP_GGUF_TOK_CONTROL && t != MP_GGUF_TOK_USER_DEFINED && t != MP_GGUF_TOK_UNKNOWN) continue;
        cJSON *a = cJSON_CreateObject();
        cJSON_AddNumberToObject(a, "id", (double)i);
        cJSON_AddStringToObject(a, "content", m->tokens[i]);
        cJSON_AddBoolToObject(a, "single_word", 0);
        cJSON_AddBoolToObject(a, "lstrip", 0);
        cJSON_AddBoolToObject(a, "rstrip", 0);
        cJSON_AddBoolToObject(a, "normalized", 0);
        cJSON_AddBoolToObject(a, "special", t != MP_GGUF_TOK_USER_DEFINED);
        cJSON_AddItemToArray(arr, a);
    }
    return arr;
}

/* A template item {"SpecialToken": {"id": s, "type_id": 0}} or {"Sequence": {"id": s, "type_id": 0}}. */
static cJSON *tmpl_item(const char *kind, const char *s) {
    cJSON *o = cJSON_CreateObject(), *in = cJSON_AddObjectToObject(o, kind);
    cJSON_AddStringToObject(in, "id", s);
    cJSON_AddNumberToObject(in, "type_id", 0);
    return o;
}

/* The post-processor: a TemplateProcessing with BOS/EOS when llama.cpp adds them (its defaults where m does
 * not say: BOS for "llama" and pre llama-bpe), else ByteLevel ("gpt2") or none. */
static cJSON *post_processor(const mp_tok_gguf_meta *m) {
    int spm = !strcmp(m->model, "llama");
    int bos = m->add_bos >= 0 ? m->add_bos : spm || !strcmp(m->pre ? m->pre : "", "llama-bpe");
    int eos = m->add_eos >= 0 ? m->add_eos : 0;
    bos = bos && m->bos >= 0 && m->bos < m->n_tokens;
    eos = eos && m->eos >= 0 && m->eos < m->n_tokens;
    if (!bos && !eos) return spm ? cJSON_CreateNull() : byte_level(1);
    cJSON *tp = stage("TemplateProcessing", NULL, NULL);
    cJSON *single = cJSON_AddArrayToObject(tp, "single"), *pair = cJSON_AddArrayToObject(tp, "pair");
    cJSON *specials = cJSON_AddObjectToObject(tp, "special_tokens");
    for (int k = 0; k < 2; k++) {
        cJSON *t = k ? pair : single;
        if (bos) cJSON_AddItemToArray(t, tmpl_item("SpecialToken", m->tokens[m->bos]));
        cJSON_AddItemToArray(t, tmpl_item("Sequence", "A"));
        if (eos) cJSON_AddItemToArray(t, tmpl_item("SpecialToken", m->tokens[m->eos]));
    }
    if (bos) cJSON_AddItemToArray(pair, tmpl_item("SpecialToken", m->tokens[m->bos]));
    cJSON_AddItemToArray(pair, tmpl_item("Sequence", "B"));
    if (eos) cJSON_AddItemToArray(pair, tmpl_item("SpecialToken", m->tokens[m->eos]));
    for (int k = 0; k < 2; k++) {
        int32_t id = k ? m->eos : m->bos;
        if (!(k ? eos : bos) || cJSON_GetObjectItemCaseSensitive(specials, m->tokens[id])) continue;
        cJSON *e = cJSON_AddObjectToObject(specials, m->tokens[id]);
        cJSON_AddStringToObject(e, "id", m->tokens[id]);
        cJSON_AddItemToObject(e, "ids", cJSON_CreateIntArray(&id, 1));
        cJSON_AddItemToObject(e, "tokens", cJSON_CreateStringArray((const char *const[]){m->tokens[id]}, 1));
    }
    return tp;
}

/* Checks m's shape: a known model, a type for every token, unique token texts. */
static mp_code check_meta(const mp_tok_gguf_meta *m, mp_err *err) {
    int spm = !strcmp(m->model, "llama");
    if (!spm && strcmp(m->model, "gpt2"))
        return mp_err_set(err, MP_EINPUT, "tokenizer.ggml.model \"%s\": not supported (llama, gpt2)", m->model);
    if (spm && !m->scores) return mp_err_set(err, MP_EINPUT, "tokenizer.ggml.scores: missing for model llama");
    mp_tok_map seen = {0};
    mp_code rc = MP_OK;
    for (int64_t i = 0; i < m->n_tokens && rc == MP_OK; i++) {
        if (!m->tokens[i] || m->token_type[i] < MP_GGUF_TOK_NORMAL || m->token_type[i] > MP_GGUF_TOK_BYTE)
            rc = mp_err_set(err, MP_EINPUT, "token %lld: missing, or token type %d out of range 1..6", (long long)i,
                            m->tokens[i] ? m->token_type[i] : 0);
        else if (mp_tok_map_get(&seen, m->tokens[i], strlen(m->tokens[i])) >= 0)
            rc = mp_err_set(err, MP_EINPUT, "token %lld \"%s\": the same text as token %d (a tokenizer.json vocabulary "
                            "needs unique texts)", (long long)i, m->tokens[i],
                            mp_tok_map_get(&seen, m->tokens[i], strlen(m->tokens[i])));
        else
            mp_tok_map_put(&seen, m->tokens[i], strlen(m->tokens[i]), (int32_t)i);
    }
    mp_tok_map_free(&seen);
    return rc;
}

/* tokenizer_config.json: the special tokens by text, add_bos/add_eos as llama.cpp applies them, the template. */
static char *config_json(const mp_tok_gguf_meta *m) {
    cJSON *c = cJSON_CreateObject();
    const struct { const char *key; int32_t id; } named[] = {{"bos_token", m->bos}, {"eos_token", m->eos},
                                                             {"unk_token", m->unk}, {"pad_token", m->pad}};
    for (size_t k = 0; k < sizeof named / sizeof named[0]; k++)
        if (named[k].id >= 0 && named[k].id < m->n_tokens) cJSON_AddStringToObject(c, named[k].key, m->tokens[named[k].id]);
    if (m->add_bos >= 0) cJSON_AddBoolToObject(c, "add_bos_token", m->add_bos);
    if (m->add_eos >= 0) cJSON_AddBoolToObject(c, "add_eos_token", m->add_eos);
    if (m->chat_template) cJSON_AddStringToObject(c, "chat_template", m->chat_template);
    char *p = cJSON_Print(c), *out = mp_strdup(p);
    cJSON_free(p);
    cJSON_Delete(c);
    return out;
}

mp_code mp_tok_gguf_to_json(const mp_tok_gguf_meta *m, char **json_out, char **config_out, mp_err *err) {
    *json_out = *config_out = NULL;
    MP_TRY(check_meta(m, err));
    cJSON *root = cJSON_CreateObject(), *model = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddItemToObject(root, "added_tokens", added_tokens(m));
    cJSON_AddStringToObject(model, "type", "BPE");
    mp_code rc = MP_OK;
    if (!strcmp(m->model, "llama")) layout_llama(m, root, model);
    else rc = layout_gpt2(m->pre ? m->pre : "default", root, model, err);
    if (rc == MP_OK) {
        cJSON_AddItemToObject(root, "post_processor", post_processor(m));
        cJSON *vocab = cJSON_AddObjectToObject(model, "vocab"), *merges = cJSON_AddArrayToObject(model, "merges");
        for (int64_t i = 0; i < m->n_tokens; i++) cJSON_AddNumberToObject(vocab, m->tokens[i], (double)i);
        if (!strcmp(m->model, "llama")) merges_llama(m, merges);
        for (int64_t i = 0; !strcmp(m->model, "gpt2") && i < m->n_merges; i++)
            cJSON_AddItemToArray(merges, cJSON_CreateString(m->merges[i]));
        cJSON_AddItemToObject(root, "model", model);
        model = NULL;
        char *p = cJSON_PrintUnformatted(root);
        *json_out = mp_strdup(p);
        cJSON_free(p);
        *config_out = config_json(m);
    }
    cJSON_Delete(model);
    cJSON_Delete(root);
    return rc;
}
