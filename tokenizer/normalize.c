/*
 * tokenizer/normalize.c — the normalizers of tokenizer.json files: Prepend (Llama 2's "▁" in front of a
 * non-empty segment), Replace with a literal String pattern (Llama 2's " " -> "▁"), the Unicode forms NFC
 * (Qwen2/2.5 and Qwen3), NFD, NFKC and NFKD (unorm.c, Unicode 9.0 as `tokenizers` has it), and Sequence of
 * those. Lowercase, Strip, BertNormalizer, Precompiled and a Regex Replace pattern are refused by name at
 * load time rather than silently skipped, since skipping one changes the ids.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"

/* Fills *nm from one (non-Sequence) normalizer j of the given type. */
static mp_code norm_one(const cJSON *j, const char *type, void *elem, mp_err *err) {
    mp_norm *nm = elem;
    if (!strcmp(type, "Prepend")) {
        const char *p = mp_tok_json_str(j, "prepend");
        if (!p) return mp_err_set(err, MP_EINPUT, "normalizer Prepend: no \"prepend\" string");
        nm->kind = MP_NORM_PREPEND;
        nm->a = mp_strdup(p);
    } else if (!strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *lit = mp_tok_json_str(pat, "String"), *content = mp_tok_json_str(j, "content");
        if (!lit || !*lit || !content)
            return mp_err_set(err, MP_EINPUT, "normalizer Replace: only a non-empty {\"String\": ...} pattern "
                              "and a \"content\" string are supported (a Regex pattern is not)");
        nm->kind = MP_NORM_REPLACE;
        nm->a = mp_strdup(lit);
        nm->b = mp_strdup(content);
    } else if (!strcmp(type, "NFC") || !strcmp(type, "NFD") || !strcmp(type, "NFKC") || !strcmp(type, "NFKD")) {
        nm->kind = MP_NORM_UNICODE;
        nm->form = type[2] == 'K' ? (type[3] == 'C' ? MP_UNORM_NFKC : MP_UNORM_NFKD)
                                  : (type[2] == 'C' ? MP_UNORM_NFC : MP_UNORM_NFD);
    } else {
        return mp_err_set(err, MP_EINPUT, "normalizer %s is not supported (supported: Prepend, Replace, NFC, NFD, "
                          "NFKC, NFKD, Sequence)", type);
    }
    return MP_OK;
}

mp_code mp_tok_norm_parse(const cJSON *j, mp_norm **out, int *n, mp_err *err) {
    return mp_tok_stages_parse(j, "normalizer", "normalizers", sizeof(mp_norm), norm_one, mp_tok_norm_free, (void **)out, n, err);
}

void mp_tok_norm_apply(const mp_norm *nv, int n, const char *seg, size_t len, int no_prepend, mp_tok_buf *out) {
    out->n = 0;
    mp_tok_buf_put(out, seg, len);
    mp_tok_buf tmp = {0};
    for (int i = 0; i < n; i++) {
        if (nv[i].kind == MP_NORM_PREPEND) {
            if (out->n == 0 || no_prepend) continue;   /* tokenizers prepends to non-empty text only */
            tmp.n = 0;
            mp_tok_buf_put(&tmp, nv[i].a, strlen(nv[i].a));
            mp_tok_buf_put(&tmp, out->p, out->n);
        } else if (nv[i].kind == MP_NORM_REPLACE) {
            tmp.n = 0;
            mp_tok_replace(out->p, out->n, nv[i].a, nv[i].b, &tmp);
        } else {
            tmp.n = 0;
            mp_tok_unorm(nv[i].form, out->p, out->n, &tmp);
        }
        mp_tok_buf t = *out;
        *out = tmp;
        tmp = t;
    }
    mp_tok_buf_free(&tmp);
}

void mp_tok_norm_free(void *v, int n) {
    mp_norm *nv = v;
    for (int i = 0; i < n; i++) {
        free(nv[i].a);
        free(nv[i].b);
    }
    free(nv);
}
