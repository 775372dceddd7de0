/*
 * tokenizer/normalize.c — the normalizers Llama-family tokenizer.json files use: Prepend (Llama 2's
 * "▁" in front of a non-empty segment), Replace with a literal String pattern (Llama 2's " " -> "▁"),
 * and Sequence of those. None of the supported families uses Unicode normalization (NFC, NFKC, ...),
 * Lowercase, Strip or a Regex Replace pattern: those are refused by name at load time rather than
 * silently skipped, since skipping one changes the ids.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"

/* A string member of j or NULL. */
/* Appends the normalizer j (one, or a Sequence flattened) to *v (count *n, capacity *cap). */
static mp_code norm_add(const cJSON *j, mp_norm **v, int *n, int *cap, mp_err *err) {
    const char *type = mp_tok_json_str(j, "type");
    if (!type) return mp_err_set(err, MP_EINPUT, "normalizer: no \"type\"");
    if (!strcmp(type, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, "normalizers"))
            MP_TRY(norm_add(it, v, n, cap, err));
        return MP_OK;
    }
    mp_norm nm = {0};
    if (!strcmp(type, "Prepend")) {
        const char *p = mp_tok_json_str(j, "prepend");
        if (!p) return mp_err_set(err, MP_EINPUT, "normalizer Prepend: no \"prepend\" string");
        nm.kind = MP_NORM_PREPEND;
        nm.a = mp_strdup(p);
    } else if (!strcmp(type, "Replace")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
        const char *lit = mp_tok_json_str(pat, "String"), *content = mp_tok_json_str(j, "content");
        if (!lit || !*lit || !content)
            return mp_err_set(err, MP_EINPUT, "normalizer Replace: only a non-empty {\"String\": ...} pattern "
                              "and a \"content\" string are supported (a Regex pattern is not)");
        nm.kind = MP_NORM_REPLACE;
        nm.a = mp_strdup(lit);
        nm.b = mp_strdup(content);
    } else {
        return mp_err_set(err, MP_EINPUT, "normalizer %s is not supported (supported: Prepend, Replace, Sequence)",
                          type);
    }
    mp_tok_grow((void **)v, cap, *n, sizeof **v);
    (*v)[(*n)++] = nm;
    return MP_OK;
}

mp_code mp_tok_norm_parse(const cJSON *j, mp_norm **out, int *n, mp_err *err) {
    *out = NULL;
    *n = 0;
    if (!j || cJSON_IsNull(j)) return MP_OK;
    int cap = 0;
    mp_code rc = norm_add(j, out, n, &cap, err);
    if (rc != MP_OK) {
        mp_tok_norm_free(*out, *n);
        *out = NULL;
        *n = 0;
    }
    return rc;
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
        } else {
            tmp.n = 0;
            mp_tok_replace(out->p, out->n, nv[i].a, nv[i].b, &tmp);
        }
        mp_tok_buf t = *out;
        *out = tmp;
        tmp = t;
    }
    mp_tok_buf_free(&tmp);
}

void mp_tok_norm_free(mp_norm *nv, int n) {
    for (int i = 0; i < n; i++) {
        free(nv[i].a);
        free(nv[i].b);
    }
    free(nv);
}
