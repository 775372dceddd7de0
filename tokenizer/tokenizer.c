/*
 * tokenizer/tokenizer.c — loading a tokenizer.json, its added tokens and post-processor, and the encode
 * and decode entry points that run the pipeline of tok_internal.h.
 *
 * Added tokens (special or not) are matched as tokenizers' AddedVocabulary matches them: those with
 * normalized=false (or all, without a normalizer) in the raw text, leftmost first and the longest at a
 * position (LeftmostLongest), lstrip/rstrip taking the whitespace beside them; the text between them is
 * normalized segment by segment (so Llama 2's Prepend puts a "▁" in front of each segment); then those
 * with normalized=true are matched, by their own normalized form ("<s>" -> "▁<s>" under Llama 2's
 * normalizer, as OpenLLaMA's file has it), in the normalized segment; what is left is pre-tokenized and
 * run through BPE. single_word tokens are refused: no supported family has them. The post-processor's
 * single-sequence template gives the BOS/EOS ids.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "tokenizer/tok_internal.h"

#define JSON_MAX ((size_t)1 << 30)

struct mp_tok_state {
    const mp_tok *t;
    mp_tok_buf text, norm, scratch;
    mp_pre_words words;
    mp_bpe_scratch *bpe;
};

void mp_tok_ids_push(mp_tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        int64_t nc = ids->cap ? 2 * ids->cap : 256;
        ids->v = mp_realloc(ids->v, (size_t)ids->cap * sizeof *ids->v, (size_t)nc * sizeof *ids->v, MP_MEM_OTHER);
        ids->cap = nc;
    }
    ids->v[ids->n++] = id;
}

void mp_tok_ids_free(mp_tok_ids *ids) {
    free(ids->v);
    memset(ids, 0, sizeof *ids);
}

/* Reads one added token j into a (t's normalizer, parsed already, gives a normalized token its match). */
static mp_code parse_added_one(const cJSON *j, const mp_tok *t, mp_added *a, mp_err *err) {
    const char *content = mp_tok_json_str(j, "content");
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(j, "id");
    if (!content || !*content || !cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX - 1)
        return mp_err_set(err, MP_EINPUT, "added_tokens: an entry without a non-empty \"content\" and a valid \"id\"");
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "single_word")))
        return mp_err_set(err, MP_EINPUT, "added token \"%s\": single_word=true is not supported", content);
    a->content = mp_strdup(content);
    a->len = strlen(content);
    a->id = id->valueint;
    a->special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "special"));
    a->lstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "lstrip"));
    a->rstrip = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "rstrip"));
    a->normed = t->nnorm > 0 && cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(j, "normalized"));
    a->match = a->content;
    a->mlen = a->len;
    if (a->normed) {
        mp_tok_buf nb = {0};
        mp_tok_norm_apply(t->norm, t->nnorm, content, a->len, 0, &nb);
        a->match = nb.p;
        a->mlen = nb.n;
    }
    return MP_OK;
}

/* Reads "added_tokens" into t->added and t->added_map. */
static mp_code parse_added(const cJSON *arr, mp_tok *t, mp_err *err) {
    if (arr && !cJSON_IsNull(arr) && !cJSON_IsArray(arr)) return mp_err_set(err, MP_EINPUT, "\"added_tokens\" is not an array");
    int n = cJSON_IsArray(arr) ? cJSON_GetArraySize(arr) : 0;
    t->added = mp_xcalloc((size_t)(n > 0 ? n : 1) * sizeof *t->added);
    const cJSON *it;
    cJSON_ArrayForEach(it, arr) {
        MP_TRY(parse_added_one(it, t, &t->added[t->nadded], err));
        mp_tok_map_put(&t->added_map, t->added[t->nadded].content, t->added[t->nadded].len, t->nadded);
        t->nadded++;
    }
    return MP_OK;
}

/* The ids of special token name in a TemplateProcessing's "special_tokens" map, appended to *v. */
static mp_code template_ids(const cJSON *specials, const char *name, int32_t **v, int *n, mp_err *err) {
    const cJSON *ids = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(specials, name), "ids");
    if (!cJSON_IsArray(ids)) return mp_err_set(err, MP_EINPUT, "post_processor: special token \"%s\" has no \"ids\"", name);
    const cJSON *it;
    cJSON_ArrayForEach(it, ids) {
        *v = mp_realloc(*v, (size_t)*n * sizeof **v, (size_t)(*n + 1) * sizeof **v, MP_MEM_OTHER);
        (*v)[(*n)++] = it->valueint;
    }
    return MP_OK;
}

/* Reads a post_processor (TemplateProcessing, ByteLevel, Sequence; null) into t->bos/t->eos. */
static mp_code parse_post(const cJSON *j, mp_tok *t, mp_err *err) {
    if (!j || cJSON_IsNull(j)) return MP_OK;
    const char *type = mp_tok_json_str(j, "type");
    if (type && !strcmp(type, "ByteLevel")) return MP_OK;   /* offsets only */
    if (type && !strcmp(type, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "processors")) MP_TRY(parse_post(it, t, err));
        return MP_OK;
    }
    if (!type || strcmp(type, "TemplateProcessing"))
        return mp_err_set(err, MP_EINPUT, "post_processor %s is not supported (supported: TemplateProcessing, "
                          "ByteLevel, Sequence)", type ? type : "(no type)");
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(j, "special_tokens"), *it;
    int seen_seq = 0;
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "single")) {
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(it, "SpecialToken");
        if (cJSON_GetObjectItemCaseSensitive(it, "Sequence")) seen_seq = 1;
        else if (sp && mp_tok_json_str(sp, "id"))
            MP_TRY(template_ids(specials, mp_tok_json_str(sp, "id"), seen_seq ? &t->eos : &t->bos,
                                seen_seq ? &t->neos : &t->nbos, err));
        else return mp_err_set(err, MP_EINPUT, "post_processor TemplateProcessing: an item of \"single\" is neither "
                               "SpecialToken nor Sequence");
    }
    return MP_OK;
}

/* Orders added-token (length, index) pairs: longest first, then by index. */
static int by_len_desc(const void *x, const void *y) {
    const int64_t *a = x, *b = y;
    return a[0] != b[0] ? (a[0] < b[0] ? 1 : -1) : (a[1] > b[1]) - (a[1] < b[1]);
}

/* Builds t->first_byte[set]: per first byte of the match, the added tokens of the set (normed or not)
 * that start with it, longest first. */
static void index_added(mp_tok *t, int set) {
    int count[256] = {0};
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].normed == set && t->added[i].mlen > 0) count[(unsigned char)t->added[i].match[0]]++;
    int64_t *pairs = mp_xmalloc((size_t)(t->nadded > 0 ? t->nadded : 1) * 2 * sizeof *pairs);
    for (int b = 0; b < 256; b++) {
        if (!count[b]) continue;
        int k = 0;
        for (int i = 0; i < t->nadded; i++)
            if (t->added[i].normed == set && t->added[i].mlen > 0 && (unsigned char)t->added[i].match[0] == b) {
                pairs[2 * k] = (int64_t)t->added[i].mlen;
                pairs[2 * k++ + 1] = i;
            }
        qsort(pairs, (size_t)k, 2 * sizeof *pairs, by_len_desc);
        int32_t *v = mp_xmalloc((size_t)(k + 1) * sizeof *v);
        for (int i = 0; i < k; i++) v[i] = (int32_t)pairs[2 * i + 1];
        v[k] = -1;
        t->first_byte[set][b] = v;
        t->has_normed |= set;
    }
    free(pairs);
}

/* Builds t->id_text, t->id_special and the first-byte index of the added tokens. */
static void build_tables(mp_tok *t) {
    t->vocab_size = t->bpe.nid;
    for (int i = 0; i < t->nadded; i++)
        if (t->added[i].id >= t->vocab_size) t->vocab_size = t->added[i].id + 1;
    size_t nv = (size_t)(t->vocab_size > 0 ? t->vocab_size : 1);
    t->id_text = mp_xcalloc(nv * sizeof *t->id_text);
    t->id_special = mp_xcalloc(nv);
    for (int64_t i = 0; i < t->bpe.nid; i++) t->id_text[i] = t->bpe.id_text[i];
    for (int i = 0; i < t->nadded; i++) {
        /* as tokenizers: a normalized token's text is its normalized form ("▁<s>"), and that form is no
         * special token's content, so skip_special_tokens keeps it */
        t->id_text[t->added[i].id] = t->added[i].match;
        t->id_special[t->added[i].id] = (unsigned char)(t->added[i].special && !t->added[i].normed);
    }
    index_added(t, 0);
    index_added(t, 1);
}

/* The EOS named by tokenizer_config.json's text cfg (eos_token: a string or {"content": ...}); -1 if none
 * (cfg NULL or not naming one). */
static int32_t config_eos(const mp_tok *t, const char *cfg) {
    cJSON *j = cfg ? cJSON_Parse(cfg) : NULL;
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token");
    const char *name = cJSON_IsString(e) ? e->valuestring : mp_tok_json_str(e, "content");
    int32_t id = name ? mp_tok_token_id(t, name) : -1;
    cJSON_Delete(j);
    return id;
}

/* Parses the whole tokenizer.json j into t. */
static mp_code parse_all(const cJSON *j, mp_tok *t, mp_err *err) {
    if (!cJSON_IsObject(j)) return mp_err_set(err, MP_EINPUT, "not a JSON object");
    MP_TRY(mp_tok_bpe_parse(cJSON_GetObjectItemCaseSensitive(j, "model"), &t->bpe, err));
    MP_TRY(mp_tok_norm_parse(cJSON_GetObjectItemCaseSensitive(j, "normalizer"), &t->norm, &t->nnorm, err));
    MP_TRY(mp_tok_pre_parse(cJSON_GetObjectItemCaseSensitive(j, "pre_tokenizer"), &t->pre, &t->npre, err));
    MP_TRY(mp_tok_dec_parse(cJSON_GetObjectItemCaseSensitive(j, "decoder"), &t->dec, &t->ndec, err));
    MP_TRY(parse_added(cJSON_GetObjectItemCaseSensitive(j, "added_tokens"), t, err));
    MP_TRY(parse_post(cJSON_GetObjectItemCaseSensitive(j, "post_processor"), t, err));
    build_tables(t);
    return MP_OK;
}

mp_code mp_tok_load_text(const char *json, const char *config, const char *name, mp_tok **out, mp_err *err) {
    *out = NULL;
    cJSON *j = cJSON_Parse(json);
    if (!j) return mp_err_set(err, MP_EINPUT, "loading tokenizer %s: not valid JSON", name);
    mp_tok *t = mp_xcalloc(sizeof *t);
    snprintf(t->path, sizeof t->path, "%s", name);
    mp_code rc = parse_all(j, t, err);
    cJSON_Delete(j);
    if (rc != MP_OK) {
        mp_tok_free(t);
        return mp_err_wrap(err, "loading tokenizer %s", name);
    }
    t->eos_id = config_eos(t, config);
    if (t->eos_id < 0 && t->neos > 0) t->eos_id = t->eos[t->neos - 1];
    *out = t;
    return MP_OK;
}

mp_code mp_tok_load(const char *path, mp_tok **out, mp_err *err) {
    *out = NULL;
    char dir[1024], file[1200], cfg_path[1200];
    struct stat st;
    int is_dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    snprintf(dir, sizeof dir, "%s", path);
    if (is_dir) snprintf(file, sizeof file, "%s/tokenizer.json", path);
    else {
        snprintf(file, sizeof file, "%s", path);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    char *text = NULL, *cfg = NULL;
    mp_code rc = mp_read_text(file, JSON_MAX, &text, NULL, err);
    if (rc != MP_OK) return mp_err_wrap(err, "loading tokenizer");
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    if (stat(cfg_path, &st) != 0 || mp_read_text(cfg_path, JSON_MAX, &cfg, NULL, NULL) != MP_OK) cfg = NULL;
    rc = mp_tok_load_text(text, cfg, file, out, err);
    free(text);
    free(cfg);
    return rc;
}

const char *mp_tok_kind(const mp_tok *t) {
    if (t->bpe.byte_fallback) return "sentencepiece-style BPE (byte fallback)";
    for (int i = 0; i < t->npre; i++)
        if (t->pre[i].kind == MP_PRE_BYTELEVEL) return "byte-level BPE";
    for (int i = 0; i < t->ndec; i++)
        if (t->dec[i].kind == MP_DEC_BYTELEVEL) return "byte-level BPE";
    return "BPE";
}

void mp_tok_free(mp_tok *t) {
    if (!t) return;
    mp_tok_norm_free(t->norm, t->nnorm);
    mp_tok_pre_free(t->pre, t->npre);
    mp_tok_dec_free(t->dec, t->ndec);
    mp_tok_bpe_free(&t->bpe);
    for (int i = 0; i < t->nadded; i++) {
        if (t->added[i].normed) free(t->added[i].match);
        free(t->added[i].content);
    }
    free(t->added);
    mp_tok_map_free(&t->added_map);
    free(t->bos);
    free(t->eos);
    free(t->id_text);
    free(t->id_special);
    for (int b = 0; b < 256; b++) {
        free(t->first_byte[0][b]);
        free(t->first_byte[1][b]);
    }
    free(t);
}

int64_t mp_tok_vocab_size(const mp_tok *t) { return t->vocab_size; }

int32_t mp_tok_token_id(const mp_tok *t, const char *s) {
    int32_t a = mp_tok_map_get(&t->added_map, s, strlen(s));
    return a >= 0 ? t->added[a].id : mp_tok_map_get(&t->bpe.vocab, s, strlen(s));
}

const char *mp_tok_id_token(const mp_tok *t, int32_t id) {
    return id >= 0 && id < t->vocab_size ? t->id_text[id] : NULL;
}

void mp_tok_template(const mp_tok *t, const int32_t **bos, int *nbos, const int32_t **eos, int *neos) {
    *bos = t->bos;
    *nbos = t->nbos;
    *eos = t->eos;
    *neos = t->neos;
}

int32_t mp_tok_eos(const mp_tok *t) { return t->eos_id; }

/* ---- encoding ---- */

mp_tok_state *mp_tok_state_new(const mp_tok *t) {
    mp_tok_state *s = mp_xcalloc(sizeof *s);
    s->t = t;
    s->bpe = mp_tok_bpe_scratch_new();
    return s;
}

void mp_tok_state_free(mp_tok_state *s) {
    if (!s) return;
    mp_tok_buf_free(&s->text);
    mp_tok_buf_free(&s->norm);
    mp_tok_buf_free(&s->scratch);
    mp_tok_pre_words_free(&s->words);
    mp_tok_bpe_scratch_free(s->bpe);
    free(s);
}

static int is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* The first added token of set (0 raw, 1 normed) in text[from..n), leftmost and longest; its index, with
 * *start, *stop the span it takes (lstrip/rstrip whitespace included, never before from); -1 if none. */
static int next_added(const mp_tok *t, int set, const char *text, size_t from, size_t n, size_t *start, size_t *stop) {
    for (size_t i = from; i < n; i++) {
        const int32_t *v = t->first_byte[set][(unsigned char)text[i]];
        for (; v && *v >= 0; v++) {
            const mp_added *a = &t->added[*v];
            if (a->mlen > n - i || memcmp(text + i, a->match, a->mlen) != 0) continue;
            *start = i;
            *stop = i + a->mlen;
            while (a->lstrip && *start > from && is_space(text[*start - 1])) (*start)--;
            while (a->rstrip && *stop < n && is_space(text[*stop])) (*stop)++;
            return *v;
        }
    }
    return -1;
}

/* Pre-tokenizes normalized text s[0..n) and appends the BPE ids of its words; first: it starts the text. */
static void encode_words(mp_tok_state *st, const char *s, size_t n, int first, mp_tok_ids *out) {
    const mp_tok *t = st->t;
    if (n == 0) return;
    mp_tok_pre_apply(t->pre, t->npre, s, n, first, &st->words, &st->scratch);
    for (size_t w = 0; w < st->words.ncuts; w++)
        mp_tok_bpe_word(&t->bpe, st->bpe, st->words.text.p + st->words.cuts[w],
                        st->words.cuts[w + 1] - st->words.cuts[w], out);
}

/* Encodes the segment text[a..b) between raw-matched added tokens: normalize, match the normalized
 * added tokens, then pre-tokenize and BPE what lies between them. */
static void encode_segment(mp_tok_state *s, size_t a, size_t b, int continuation, mp_tok_ids *out) {
    const mp_tok *t = s->t;
    if (b <= a) return;
    int at_start = a == 0;
    mp_tok_norm_apply(t->norm, t->nnorm, s->text.p + a, b - a, at_start && continuation, &s->norm);
    const char *p = s->norm.p;
    size_t q = 0, start, stop;
    int k;
    while (t->has_normed && (k = next_added(t, 1, p, q, s->norm.n, &start, &stop)) >= 0) {
        encode_words(s, p + q, start - q, at_start && !continuation && q == 0, out);
        mp_tok_ids_push(out, t->added[k].id);
        q = stop;
    }
    encode_words(s, p + q, s->norm.n - q, at_start && !continuation && q == 0, out);
}

void mp_tok_encode(mp_tok_state *s, const char *text, size_t n, int continuation, mp_tok_ids *out) {
    const mp_tok *t = s->t;
    s->text.n = 0;
    mp_tok_utf8_sanitize(text, n, &s->text);
    size_t seg = 0, start, stop;   /* text[seg..) is not yet encoded */
    int k;
    while (t->nadded && (k = next_added(t, 0, s->text.p, seg, s->text.n, &start, &stop)) >= 0) {
        encode_segment(s, seg, start, continuation, out);
        mp_tok_ids_push(out, t->added[k].id);
        seg = stop;
    }
    encode_segment(s, seg, s->text.n, continuation, out);
}

/* ---- decoding ---- */

int mp_tok_is_fallback_byte(const mp_tok *t, int32_t id) {
    return mp_tok_dec_is_fallback_byte(t->dec, t->ndec, mp_tok_id_token(t, id));
}

char *mp_tok_decode(const mp_tok *t, const int32_t *ids, int64_t n, int skip_special, size_t *len) {
    const char **toks = mp_xmalloc((size_t)(n > 0 ? n : 1) * sizeof *toks);
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *s = mp_tok_id_token(t, ids[i]);
        if (s && !(skip_special && t->id_special[ids[i]])) toks[k++] = s;
    }
    char *text = mp_tok_dec_run(t->dec, t->ndec, toks, k, len);
    free(toks);
    return text;
}
