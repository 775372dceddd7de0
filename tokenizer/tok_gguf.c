/*
 * tokenizer/tok_gguf.c — tokenizer.json -> GGUF's tokenizer.ggml.* keys (mp_tok_gguf_from_json), as
 * llama.cpp's convert_hf_to_gguf.py computes them; the way back is tok_gguf_json.c.
 *
 * Which of the converter's paths a tokenizer.json takes is decided as LlamaModel.set_vocab decides it
 * for a directory without tokenizer.model: a BPE with byte_fallback and a Sequence decoder (Llama 2,
 * Mistral, Phi-3's files) is gguf-py's LlamaHfVocab, model "llama", pre "default": the vocabulary's ids in
 * order, byte tokens BYTE, the special tokens tokenizer_config.json names CONTROL, then the added tokens
 * past the vocabulary; the model's unk_token is UNKNOWN, as the converter's sentencepiece path (a
 * tokenizer.model) writes it and llama.cpp needs to match "<unk>" in text as `tokenizers` does (the
 * tokenizer.json-only path writes NORMAL: the second stated difference). Anything else is _set_vocab_gpt2, model "gpt2": ids 0..vocab_size-1 ("[PADi]" UNUSED where
 * no token has the id), added tokens CONTROL (special, or looking special: "<|...|>") or USER_DEFINED,
 * merges "a b" (a space inside a part written as U+0120, as SpecialVocab does).
 *
 * `.pre`: the converter hashes the ids of a fixed text and looks the hash up in a table of published
 * models, so a vocabulary it has not seen is refused. The name only selects llama.cpp's pre-tokenizer
 * regex, which is what the tokenizer.json's pre-tokenizer says directly; so the name is chosen from that
 * (the pattern, and the normalizer) as the table would choose it for the published models that have it,
 * and a layout llama.cpp has no name for is refused by name.
 *
 * Special ids and add_bos/add_eos follow SpecialVocab: the post-processor (ByteLevel: add nothing;
 * TemplateProcessing: its single template's leading/trailing special token), then tokenizer_config.json
 * (add_*_token, *_token looked up among the added tokens), then config.json's *_token_id; the first
 * that sets a value wins.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_gguf.h"
#include "tokenizer/tok_internal.h"

/* llama.cpp pre-tokenizer names and the tokenizer.json layouts that select them (shared with tok_gguf_json.c
 * through mp_tok_gguf_pre_layout): the Split pattern, and the normalizer the published files have beside it
 * (none also accepted: llama.cpp normalizes nothing, so to_json writes none). */
static const struct { const char *name, *pattern, *normalizer; } PRE_TABLE[] = {
    {"llama-bpe", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
                  "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", NULL},
    {"qwen2", "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+", "NFC"},
    {"gpt-2", NULL, NULL},   /* the ByteLevel pre-tokenizer's own (GPT-2) pattern */
};

int mp_tok_gguf_pre_layout(const char *name, const char **pattern, const char **normalizer) {
    for (size_t i = 0; i < sizeof PRE_TABLE / sizeof PRE_TABLE[0]; i++)
        if (!strcmp(PRE_TABLE[i].name, name)) {
            *pattern = PRE_TABLE[i].pattern;
            *normalizer = PRE_TABLE[i].normalizer;
            return 1;
        }
    return 0;
}

void mp_tok_gguf_meta_free(mp_tok_gguf_meta *m) {
    for (int64_t i = 0; m->tokens && i < m->n_tokens; i++) free(m->tokens[i]);
    for (int64_t i = 0; m->merges && i < m->n_merges; i++) free(m->merges[i]);
    free(m->tokens);
    free(m->merges);
    free(m->token_type);
    free(m->scores);
    free(m->pre);
    free(m->chat_template);
    memset(m, 0, sizeof *m);
    m->bos = m->eos = m->unk = m->sep = m->pad = m->cls = m->mask = -1;
    m->add_bos = m->add_eos = m->add_sep = m->add_space_prefix = -1;
}

/* 1 if the JSON boolean member name of j is true, dflt when it is absent or not a boolean. */
static int json_bool(const cJSON *j, const char *name, int dflt) {
    const cJSON *m = j ? cJSON_GetObjectItemCaseSensitive(j, name) : NULL;
    return cJSON_IsBool(m) ? cJSON_IsTrue(m) : dflt;
}

/* The type of stage j ("" when j is absent or null). */
static const char *stage_type(const cJSON *j) {
    const char *t = mp_tok_json_str(j, "type");
    return t ? t : "";
}

/* The llama.cpp pre name of a byte-level tokenizer.json's normalizer + pre-tokenizer (see the file comment). */
static mp_code pre_name(const cJSON *tj, const char **out, mp_err *err) {
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(tj, "normalizer");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(tj, "pre_tokenizer");
    const char *nt = stage_type(norm), *pt = stage_type(pre);
    if (!strcmp(pt, "ByteLevel") && json_bool(pre, "use_regex", 1) && !json_bool(pre, "add_prefix_space", 0) && !*nt) {
        *out = "gpt-2";
        return MP_OK;
    }
    if (!strcmp(pt, "ByteLevel") && json_bool(pre, "add_prefix_space", 0))
        return mp_err_set(err, MP_EINPUT, "pre-tokenizer ByteLevel with add_prefix_space=true: llama.cpp's byte-level "
                          "BPE adds no prefix space");
    if (!strcmp(pt, "Metaspace"))
        return mp_err_set(err, MP_EINPUT, "a sentencepiece-style (Metaspace) BPE without byte_fallback: llama.cpp's "
                          "\"llama\" model falls back to bytes where this tokenizer gives <unk>");
    const cJSON *seq = cJSON_GetObjectItemCaseSensitive(pre, "pretokenizers");
    if (!strcmp(pt, "Sequence") && cJSON_GetArraySize(seq) == 2) {
        const cJSON *split = cJSON_GetArrayItem(seq, 0), *bl = cJSON_GetArrayItem(seq, 1);
        const char *pat = mp_tok_json_str(cJSON_GetObjectItemCaseSensitive(split, "pattern"), "Regex");
        const char *beh = mp_tok_json_str(split, "behavior");
        int ok = !strcmp(stage_type(split), "Split") && pat && beh && !strcmp(beh, "Isolated") &&
                 !json_bool(split, "invert", 0) && !strcmp(stage_type(bl), "ByteLevel") &&
                 !json_bool(bl, "use_regex", 1) && !json_bool(bl, "add_prefix_space", 0);
        for (size_t i = 0; ok && i < sizeof PRE_TABLE / sizeof PRE_TABLE[0]; i++) {
            if (!PRE_TABLE[i].pattern || strcmp(PRE_TABLE[i].pattern, pat)) continue;
            if (*nt && strcmp(nt, PRE_TABLE[i].normalizer ? PRE_TABLE[i].normalizer : "")) continue;
            *out = PRE_TABLE[i].name;
            return MP_OK;
        }
        if (ok)
            return mp_err_set(err, MP_EINPUT, "the Split pattern %s (normalizer %s) is not one llama.cpp has a "
                              "pre-tokenizer name for here (known: llama-bpe, qwen2, gpt-2)", pat, *nt ? nt : "none");
    }
    return mp_err_set(err, MP_EINPUT, "pre-tokenizer %s (normalizer %s) has no llama.cpp pre-tokenizer name (known: "
                      "ByteLevel = gpt-2, Split(Llama 3 pattern) + ByteLevel = llama-bpe, NFC + Split(Qwen2 pattern) "
                      "+ ByteLevel = qwen2)", *pt ? pt : "none", *nt ? nt : "none");
}

/* The converter's does_token_look_special. */
static int looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return 1;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return 1;
    if (n >= 8 && !strncmp(s, "<\xEF\xBD\x9C", 4) && !strcmp(s + n - 4, "\xEF\xBD\x9C>")) return 1;   /* <｜ ... ｜> */
    return n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

/* id -> token text of the model's vocab (NULL where none) in *names (n = one past the largest id, at least
 * min_n), and the added tokens' entries by id in *added (NULL where none). Borrowed from tj. */
static mp_code id_tables(const cJSON *tj, int64_t min_n, const char ***names, const cJSON ***added, int64_t *n,
                         int64_t *n_base, mp_err *err) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "vocab");
    const cJSON *adds = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *it;
    if (!cJSON_IsObject(vocab)) return mp_err_set(err, MP_EINPUT, "model.vocab is not an object");
    int64_t top = 0, base = 0;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX - 1)
            return mp_err_set(err, MP_EINPUT, "model.vocab[\"%s\"]: not a valid id", it->string);
        top = it->valueint + 1 > top ? it->valueint + 1 : top;
        base++;
    }
    cJSON_ArrayForEach(it, adds) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > INT32_MAX - 1 || !mp_tok_json_str(it, "content"))
            return mp_err_set(err, MP_EINPUT, "added_tokens: an entry without a valid \"id\" and \"content\"");
        top = id->valueint + 1 > top ? id->valueint + 1 : top;
    }
    *n = top > min_n ? top : min_n;
    *n_base = base;
    *names = mp_xcalloc((size_t)(*n + 1) * sizeof **names);
    *added = mp_xcalloc((size_t)(*n + 1) * sizeof **added);
    cJSON_ArrayForEach(it, vocab) (*names)[it->valueint] = it->string;
    cJSON_ArrayForEach(it, adds) {
        int id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        (*added)[id] = it;
        (*names)[id] = mp_tok_json_str(it, "content");
    }
    return MP_OK;
}

/* Allocates m's token arrays for n tokens (scores too when with_scores). */
static void meta_alloc(mp_tok_gguf_meta *m, int64_t n, int with_scores) {
    m->n_tokens = n;
    m->tokens = mp_xcalloc((size_t)(n + 1) * sizeof *m->tokens);
    m->token_type = mp_xcalloc((size_t)(n + 1) * sizeof *m->token_type);
    if (with_scores) m->scores = mp_xcalloc((size_t)(n + 1) * sizeof *m->scores);
}

/* _set_vocab_gpt2's token list (get_vocab_base): ids 0..max(n_vocab, tokens)-1. */
static mp_code vocab_gpt2(const cJSON *tj, int64_t n_vocab, mp_tok_gguf_meta *m, mp_err *err) {
    const char **names;
    const cJSON **added;
    int64_t n, base;
    MP_TRY(id_tables(tj, n_vocab, &names, &added, &n, &base, err));
    meta_alloc(m, n, 0);
    for (int64_t i = 0; i < n; i++) {
        char pad[32];
        snprintf(pad, sizeof pad, "[PAD%lld]", (long long)i);
        m->tokens[i] = mp_strdup(names[i] ? names[i] : pad);
        m->token_type[i] = !names[i] ? MP_GGUF_TOK_UNUSED : !added[i] ? MP_GGUF_TOK_NORMAL
                         : json_bool(added[i], "special", 0) || looks_special(names[i]) ? MP_GGUF_TOK_CONTROL
                         : MP_GGUF_TOK_USER_DEFINED;
        if (m->token_type[i] == MP_GGUF_TOK_USER_DEFINED) {   /* "pre-normalize user-defined spaces" */
            mp_tok_buf b = {0};
            mp_tok_replace(names[i], strlen(names[i]), "\xE2\x96\x81", " ", &b);
            mp_tok_buf_put(&b, "", 0);
            free(m->tokens[i]);
            m->tokens[i] = b.p;
        }
    }
    free(names);
    free(added);
    return MP_OK;
}

/* Part k (0 or 1) of merge j ("a b" or ["a", "b"]) into out, NUL-terminated; 0 if j is neither. */
static int merge_part(const cJSON *j, int k, mp_tok_buf *out) {
    out->n = 0;
    if (cJSON_IsArray(j) && cJSON_GetArraySize(j) == 2 && cJSON_IsString(cJSON_GetArrayItem(j, k))) {
        const char *s = cJSON_GetArrayItem(j, k)->valuestring;
        mp_tok_buf_put(out, s, strlen(s));
        return 1;
    }
    const char *s = cJSON_IsString(j) ? j->valuestring : NULL, *sp = s ? strchr(s, ' ') : NULL;
    if (!sp || strchr(sp + 1, ' ')) return 0;
    if (k == 0) mp_tok_buf_put(out, s, (size_t)(sp - s));
    else mp_tok_buf_put(out, sp + 1, strlen(sp + 1));
    return 1;
}

/* SpecialVocab's merges: "a b", a space inside a part of the ["a", "b"] spelling written as U+0120. */
static mp_code merges_gpt2(const cJSON *tj, mp_tok_gguf_meta *m, mp_err *err) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
    int n = cJSON_GetArraySize(merges);
    m->merges = mp_xcalloc((size_t)(n + 1) * sizeof *m->merges);
    mp_tok_buf part = {0}, out = {0};
    for (int i = 0; i < n; i++) {
        const cJSON *j = cJSON_GetArrayItem(merges, i);
        out.n = 0;
        for (int k = 0; k < 2; k++) {
            if (!merge_part(j, k, &part)) {
                mp_tok_buf_free(&part);
                mp_tok_buf_free(&out);
                return mp_err_set(err, MP_EINPUT, "model.merges[%d]: neither \"a b\" nor [\"a\", \"b\"]", i);
            }
            if (k) mp_tok_buf_put(&out, " ", 1);
            if (cJSON_IsArray(j)) mp_tok_replace(part.p, part.n, " ", "\xC4\xA0", &out);
            else mp_tok_buf_put(&out, part.p, part.n);
        }
        m->merges[m->n_merges++] = mp_strdup(out.p);
    }
    mp_tok_buf_free(&part);
    mp_tok_buf_free(&out);
    return MP_OK;
}

/* 1 if s is a byte-fallback token "<0xNN>". */
static int is_byte_token(const char *s) {
    return strlen(s) == 6 && !strncmp(s, "<0x", 3) && s[5] == '>' && strchr("0123456789abcdefABCDEF", s[3]) &&
           strchr("0123456789abcdefABCDEF", s[4]) && s[3] && s[4];
}

/* The sentencepiece scores: -rank of the first merge that makes a token; tokens no merge makes get
 * -1e9 (never preferred by llama.cpp's bigram queue), or 0 when not NORMAL (never merged into). */
static mp_code scores_from_merges(const cJSON *tj, const mp_tok_map *ids, mp_tok_gguf_meta *m, mp_err *err) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
    for (int64_t i = 0; i < m->n_tokens; i++) m->scores[i] = m->token_type[i] == MP_GGUF_TOK_NORMAL ? -1e9f : 0.0f;
    mp_tok_buf a = {0}, b = {0};
    for (int r = cJSON_GetArraySize(merges) - 1; r >= 0; r--) {   /* backwards: the first merge's rank wins */
        const cJSON *j = cJSON_GetArrayItem(merges, r);
        if (!merge_part(j, 0, &a) || !merge_part(j, 1, &b)) {
            mp_tok_buf_free(&a);
            mp_tok_buf_free(&b);
            return mp_err_set(err, MP_EINPUT, "model.merges[%d]: neither \"a b\" nor [\"a\", \"b\"]", r);
        }
        mp_tok_buf_put(&a, b.p, b.n);
        int32_t id = mp_tok_map_get(ids, a.p, a.n);
        if (id >= 0 && m->token_type[id] == MP_GGUF_TOK_NORMAL) m->scores[id] = -(float)r;
    }
    mp_tok_buf_free(&a);
    mp_tok_buf_free(&b);
    return MP_OK;
}

/* 1 if text is one of LlamaHfVocab's special tokens: those tokenizer_config.json names (transformers'
 * all_special_tokens; an added token's "special" flag is not consulted). */
static int is_special_id(const char *text, const cJSON *tc) {
    static const char *const kinds[] = {"bos_token", "eos_token", "unk_token", "pad_token", "sep_token",
                                        "cls_token", "mask_token"};
    for (size_t k = 0; tc && k < sizeof kinds / sizeof kinds[0]; k++) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(tc, kinds[k]);
        const char *s = cJSON_IsString(e) ? e->valuestring : mp_tok_json_str(e, "content");
        if (s && !strcmp(s, text)) return 1;
    }
    return 0;
}

/* _set_vocab_llama_hf's token list (LlamaHfVocab): the vocabulary's ids 0..n_base-1, then the added tokens
 * past it in id order; scores from the merges (scores_from_merges). */
static mp_code vocab_llama(const cJSON *tj, const cJSON *tc, mp_tok_gguf_meta *m, mp_err *err) {
    const char **names;
    const cJSON **added;
    int64_t n, base;
    MP_TRY(id_tables(tj, 0, &names, &added, &n, &base, err));
    mp_code rc = MP_OK;
    for (int64_t i = 0; i < n && rc == MP_OK; i++)
        if (!names[i] || (i >= base && !added[i]))
            rc = mp_err_set(err, MP_EINPUT, "id %lld: no token has it (the vocabulary and the added tokens must "
                            "number 0..%lld without a gap)", (long long)i, (long long)n - 1);
    mp_tok_map ids = {0};
    const char *unk = mp_tok_json_str(cJSON_GetObjectItemCaseSensitive(tj, "model"), "unk_token");
    if (rc == MP_OK) {
        meta_alloc(m, n, 1);
        for (int64_t i = 0; i < n; i++) {
            m->tokens[i] = mp_strdup(names[i]);
            mp_tok_map_put(&ids, names[i], strlen(names[i]), (int32_t)i);
            int special = is_special_id(names[i], tc);
            m->token_type[i] = unk && !strcmp(unk, names[i]) ? MP_GGUF_TOK_UNKNOWN
                             : i < base && is_byte_token(names[i]) ? MP_GGUF_TOK_BYTE
                             : special ? MP_GGUF_TOK_CONTROL : i >= base ? MP_GGUF_TOK_USER_DEFINED : MP_GGUF_TOK_NORMAL;
        }
        rc = scores_from_merges(tj, &ids, m, err);
    }
    mp_tok_map_free(&ids);
    free(names);
    free(added);
    return rc;
}

/* SpecialVocab's state: the token types in its order, the ids set (first wins), add_* flags, and the
 * tokenizer_config.json strings it reads and (for the template) rewrites. */
enum { SV_BOS, SV_EOS, SV_UNK, SV_SEP, SV_PAD, SV_CLS, SV_MASK, SV_N };
static const char *const SV_NAMES[SV_N] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
typedef struct special_vocab {
    int32_t id[SV_N];
    int add[SV_N];                /* -1: unset */
    const char *tok[SV_N];        /* tokenizer_config.json's *_token contents (NULL: none) */
    int has_tc;                   /* tokenizer_config.json present and not empty (Python truthiness) */
    int64_t n_vocab;              /* ids at or past it are skipped; 0: no bound */
} special_vocab;

static int str_eq(const char *a, const char *b) { return a == b || (a && b && !strcmp(a, b)); }

/* The "SpecialToken" id of template item j, or NULL. */
static const char *tmpl_special(const cJSON *j) {
    return mp_tok_json_str(cJSON_GetObjectItemCaseSensitive(j, "SpecialToken"), "id");
}

/* SpecialVocab._set_special_token: the first id set for a type stays. */
static void sv_set(special_vocab *sv, int typ, int64_t id) {
    if (id >= 0 && (sv->n_vocab == 0 || id < sv->n_vocab) && sv->id[typ] < 0) sv->id[typ] = (int32_t)id;
}

/* The pair template's separator (SpecialVocab's add_sep), given the single template's first and last. */
static void sv_pair(special_vocab *sv, const cJSON *pair, const char *first, const char *last) {
    int n = cJSON_GetArraySize(pair);
    int lo = first && str_eq(tmpl_special(cJSON_GetArrayItem(pair, 0)), first) ? 1 : 0;
    int hi = last && str_eq(tmpl_special(cJSON_GetArrayItem(pair, n - 1)), last) ? n - 1 : n;
    if (hi - lo < 1) return;
    const char *a = mp_tok_json_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(pair, lo), "Sequence"), "id");
    const char *b = mp_tok_json_str(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(pair, hi - 1), "Sequence"), "id");
    if (!str_eq(a, "A") || !str_eq(b, "B") || hi - lo < 3) return;
    int add_sep = 0;
    const char *e0 = tmpl_special(cJSON_GetArrayItem(pair, lo + 1));
    if ((str_eq(e0, sv->tok[SV_SEP]) || str_eq(e0, sv->tok[SV_EOS])) && !last) add_sep = 1;
    if (hi - lo - 2 == 2) {
        const char *e1 = tmpl_special(cJSON_GetArrayItem(pair, lo + 2));
        if (str_eq(e1, sv->tok[SV_SEP]) || str_eq(e1, sv->tok[SV_EOS])) add_sep = 1;
    }
    sv->add[SV_SEP] = add_sep;
    if (add_sep && !sv->tok[SV_SEP] && sv->has_tc) sv->tok[SV_SEP] = sv->tok[SV_EOS];
}

/* The TemplateProcessing step of SpecialVocab._try_load_from_tokenizer_json. */
static void sv_template(special_vocab *sv, const cJSON *proc) {
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(proc, "single");
    const char *first = NULL, *last = NULL;
    int n = cJSON_GetArraySize(single);
    if (n > 1 && (first = tmpl_special(cJSON_GetArrayItem(single, 0)))) {
        if (!sv->has_tc) sv->tok[SV_BOS] = first;
        else if (!str_eq(first, sv->tok[SV_BOS]) && !str_eq(first, sv->tok[SV_CLS])) {
            if (!sv->tok[SV_BOS]) sv->tok[SV_BOS] = first;
            if (!sv->tok[SV_CLS]) sv->tok[SV_CLS] = first;
        }
        sv->add[SV_BOS] = str_eq(first, sv->tok[SV_BOS]) || str_eq(first, sv->tok[SV_CLS]);
    }
    if (n > 1 && (last = tmpl_special(cJSON_GetArrayItem(single, n - 1)))) {
        sv->tok[SV_EOS] = last;   /* (the converter keeps an overridden EOS as eot_token: not written here) */
        sv->add[SV_EOS] = 1;
    }
    const cJSON *pair = cJSON_GetObjectItemCaseSensitive(proc, "pair");
    if (cJSON_GetArraySize(pair) > 0) sv_pair(sv, pair, first, last);
}

/* SpecialVocab on tokenizer.json tj, tokenizer_config.json tc (may be NULL) and config.json mc (may be NULL). */
static mp_code special_vocab_run(const cJSON *tj, const cJSON *tc, const cJSON *mc, special_vocab *sv, mp_err *err) {
    for (int t = 0; t < SV_N; t++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token", SV_NAMES[t]);
        const cJSON *e = tc ? cJSON_GetObjectItemCaseSensitive(tc, key) : NULL;
        sv->tok[t] = cJSON_IsString(e) ? e->valuestring : mp_tok_json_str(e, "content");
        sv->id[t] = -1;
        sv->add[t] = -1;
    }
    sv->has_tc = tc && tc->child;
    if (!sv->tok[SV_BOS] && sv->tok[SV_CLS] && sv->has_tc) sv->tok[SV_BOS] = sv->tok[SV_CLS];
    if (!sv->tok[SV_EOS] && sv->tok[SV_SEP] && sv->has_tc) sv->tok[SV_EOS] = sv->tok[SV_SEP];
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor"), *procs, *p;
    procs = cJSON_GetObjectItemCaseSensitive(pp, "processors");
    for (int i = 0; pp && !cJSON_IsNull(pp) && i < (procs ? cJSON_GetArraySize(procs) : 1); i++) {
        p = procs ? cJSON_GetArrayItem(procs, i) : pp;
        const char *type = stage_type(p);
        if (!strcmp(type, "ByteLevel")) {
            if (sv->add[SV_BOS] < 0) sv->add[SV_BOS] = 0;
            if (sv->add[SV_EOS] < 0) sv->add[SV_EOS] = 0;
        } else if (!strcmp(type, "TemplateProcessing")) {
            sv_template(sv, p);
        } else {
            return mp_err_set(err, MP_EINPUT, "post-processor %s: not supported (ByteLevel, TemplateProcessing)", type);
        }
    }
    const cJSON *adds = cJSON_GetObjectItemCaseSensitive(tj, "added_tokens"), *it;
    for (int t = 0; sv->has_tc && t < SV_N; t++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", SV_NAMES[t]);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(tc, key);
        if (cJSON_IsBool(a) && sv->add[t] < 0) sv->add[t] = cJSON_IsTrue(a);
        cJSON_ArrayForEach(it, adds)
            if (sv->tok[t] && str_eq(mp_tok_json_str(it, "content"), sv->tok[t])) {
                sv_set(sv, t, cJSON_GetObjectItemCaseSensitive(it, "id")->valueint);
                break;
            }
    }
    for (int t = 0; mc && t < SV_N; t++) {
        char key[32];
        snprintf(key, sizeof key, "%s_token_id", SV_NAMES[t]);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(mc, key);
        if (!v && cJSON_GetObjectItemCaseSensitive(mc, "text_config"))
            v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(mc, "text_config"), key);
        if (cJSON_IsNumber(v) && v->valuedouble == (double)v->valueint) sv_set(sv, t, v->valueint);
    }
    return MP_OK;
}

/* Copies the special vocab's ids/flags and tokenizer_config.json's chat_template and add_prefix_space into m. */
static void meta_specials(const special_vocab *sv, const cJSON *tc, mp_tok_gguf_meta *m) {
    m->bos = sv->id[SV_BOS], m->eos = sv->id[SV_EOS], m->unk = sv->id[SV_UNK], m->sep = sv->id[SV_SEP];
    m->pad = sv->id[SV_PAD], m->cls = sv->id[SV_CLS], m->mask = sv->id[SV_MASK];
    m->add_bos = sv->add[SV_BOS], m->add_eos = sv->add[SV_EOS], m->add_sep = sv->add[SV_SEP];
    const char *ct = sv->has_tc ? mp_tok_json_str(tc, "chat_template") : NULL;
    m->chat_template = ct ? mp_strdup(ct) : NULL;
    const cJSON *asp = tc ? cJSON_GetObjectItemCaseSensitive(tc, "add_prefix_space") : NULL;
    m->add_space_prefix = cJSON_IsBool(asp) ? cJSON_IsTrue(asp) : -1;
}

/* Parses text (NULL: none) as a JSON object into *out; what names it in messages. */
static mp_code parse_obj(const char *text, const char *what, cJSON **out, mp_err *err) {
    *out = NULL;
    if (!text) return MP_OK;
    *out = cJSON_Parse(text);
    if (cJSON_IsObject(*out)) return MP_OK;
    cJSON_Delete(*out);
    *out = NULL;
    return mp_err_set(err, MP_EINPUT, "%s: not a JSON object", what);
}

/* mp_tok_gguf_from_json on parsed documents. */
static mp_code from_parsed(const cJSON *tj, const cJSON *tc, const cJSON *mc, mp_tok_gguf_meta *m, mp_err *err) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const char *type = mp_tok_json_str(model, "type");
    if (!type || strcmp(type, "BPE"))
        return mp_err_set(err, MP_EINPUT, "model %s: GGUF export supports BPE tokenizers only", type ? type : "(none)");
    int byte_fallback = json_bool(model, "byte_fallback", 0);
    const cJSON *vs = mc ? cJSON_GetObjectItemCaseSensitive(mc, "vocab_size") : NULL;
    int64_t n_vocab = cJSON_IsNumber(vs) && vs->valuedouble > 0 ? (int64_t)vs->valuedouble : 0;
    special_vocab sv;
    if (byte_fallback && !strcmp(stage_type(cJSON_GetObjectItemCaseSensitive(tj, "decoder")), "Sequence") &&
        !(json_bool(model, "ignore_merges", 0) && !json_bool(model, "byte_fallback", 1))) {
        snprintf(m->model, sizeof m->model, "llama");
        m->pre = mp_strdup("default");
        MP_TRY(vocab_llama(tj, tc, m, err));
        sv.n_vocab = m->n_tokens;
    } else {
        const char *pre = NULL;
        if (byte_fallback)
            return mp_err_set(err, MP_EINPUT, "a byte_fallback BPE without a Sequence decoder: neither llama.cpp's "
                              "sentencepiece (\"llama\") nor its byte-level (\"gpt2\") layout");
        MP_TRY(pre_name(tj, &pre, err));
        snprintf(m->model, sizeof m->model, "gpt2");
        m->pre = mp_strdup(pre);
        MP_TRY(vocab_gpt2(tj, n_vocab, m, err));
        MP_TRY(merges_gpt2(tj, m, err));
        sv.n_vocab = 0;
    }
    MP_TRY(special_vocab_run(tj, tc, mc, &sv, err));
    meta_specials(&sv, tc, m);
    return MP_OK;
}

mp_code mp_tok_gguf_from_json(const char *tokenizer_json, const char *tokenizer_config_json,
                              const char *model_config_json, mp_tok_gguf_meta *out, mp_err *err) {
    cJSON *tj = NULL, *tc = NULL, *mc = NULL;
    mp_tok_gguf_meta_free(out);
    mp_code rc = parse_obj(tokenizer_json, "tokenizer.json", &tj, err);
    if (rc == MP_OK && !tj) rc = mp_err_set(err, MP_EINPUT, "tokenizer.json: missing");
    if (rc == MP_OK) rc = parse_obj(tokenizer_config_json, "tokenizer_config.json", &tc, err);
    if (rc == MP_OK) rc = parse_obj(model_config_json, "config.json", &mc, err);
    if (rc == MP_OK) rc = from_parsed(tj, tc, mc, out, err);
    if (rc != MP_OK) mp_tok_gguf_meta_free(out);
    cJSON_Delete(tj);
    cJSON_Delete(tc);
    cJSON_Delete(mc);
    return rc;
}
