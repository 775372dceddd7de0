/*
 * tokenizer/decode.c — decoders: ids -> text, undoing what the pre-tokenizer and normalizer did. Like
 * tokenizers, a decoder chain maps a list of token strings to a list of strings, each decoder in turn,
 * and the result is their concatenation:
 *   ByteLevel     each token's characters back to the bytes they stand for (a token with a character
 *                 outside the alphabet keeps its own bytes), then the bytes as UTF-8, invalid sequences
 *                 as U+FFFD ("lossy", as Rust's from_utf8_lossy);
 *   Metaspace     "▁" -> " ", the first token's leading space dropped when the pre-tokenizer prepends;
 *   Replace       a literal String pattern -> content;
 *   ByteFallback  runs of "<0xNN>" tokens -> their bytes as UTF-8 (an invalid run: one U+FFFD per byte);
 *   Fuse          all tokens into one;
 *   Strip         up to `start` leading and `stop` trailing `content` characters of each token;
 *   Sequence      the above in order.
 * Others (WordPiece, BPEDecoder, CTC) are refused by name.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"

static int int_member(const cJSON *j, const char *name) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsNumber(m) ? m->valueint : 0;
}

/* Fills *d from one (non-Sequence) decoder j of the given type. */
static mp_code dec_one(const cJSON *j, const char *type, void *elem, mp_err *err) {
    mp_dec *d = elem;
    if (!strcmp(type, "ByteLevel")) d->kind = MP_DEC_BYTELEVEL;
    else if (!strcmp(type, "ByteFallback")) d->kind = MP_DEC_BYTEFALLBACK;
    else if (!strcmp(type, "Fuse")) d->kind = MP_DEC_FUSE;
    else if (!strcmp(type, "Metaspace")) {
        const char *r = mp_tok_json_str(j, "replacement"), *scheme = mp_tok_json_str(j, "prepend_scheme");
        d->kind = MP_DEC_METASPACE;
        d->a = mp_strdup(r ? r : "\xE2\x96\x81");
        d->prepend = scheme ? strcmp(scheme, "never") != 0 : !cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(j, "add_prefix_space"));
    } else if (!strcmp(type, "Replace")) {
        const char *lit = mp_tok_json_str(cJSON_GetObjectItemCaseSensitive(j, "pattern"), "String"), *c = mp_tok_json_str(j, "content");
        if (!lit || !*lit || !c)
            return mp_err_set(err, MP_EINPUT, "decoder Replace: only a non-empty {\"String\": ...} pattern is supported");
        d->kind = MP_DEC_REPLACE;
        d->a = mp_strdup(lit);
        d->b = mp_strdup(c);
    } else if (!strcmp(type, "Strip")) {
        const char *c = mp_tok_json_str(j, "content");
        d->kind = MP_DEC_STRIP;
        d->a = mp_strdup(c ? c : " ");
        d->start = int_member(j, "start");
        d->stop = int_member(j, "stop");
    } else {
        return mp_err_set(err, MP_EINPUT, "decoder %s is not supported (supported: ByteLevel, Metaspace, Replace, "
                          "ByteFallback, Fuse, Strip, Sequence)", type);
    }
    return MP_OK;
}

mp_code mp_tok_dec_parse(const cJSON *j, mp_dec **out, int *n, mp_err *err) {
    return mp_tok_stages_parse(j, "decoder", "decoders", sizeof(mp_dec), dec_one, mp_tok_dec_free, (void **)out, n, err);
}

void mp_tok_dec_free(void *v, int n) {
    mp_dec *dv = v;
    for (int i = 0; i < n; i++) {
        free(dv[i].a);
        free(dv[i].b);
    }
    free(dv);
}

/* ---- running the chain over a list of strings ---- */

typedef struct strlist {
    mp_tok_buf *s;
    int64_t n, cap;
} strlist;

/* Appends an empty string to l and returns it. */
static mp_tok_buf *sl_add(strlist *l) {
    if (l->n == l->cap) {
        int64_t nc = l->cap ? 2 * l->cap : 16;
        l->s = mp_realloc(l->s, (size_t)l->cap * sizeof *l->s, (size_t)nc * sizeof *l->s, MP_MEM_OTHER);
        memset(l->s + l->cap, 0, (size_t)(nc - l->cap) * sizeof *l->s);
        l->cap = nc;
    }
    mp_tok_buf *b = &l->s[l->n++];
    b->n = 0;
    mp_tok_buf_put(b, "", 0);
    return b;
}

static void sl_free(strlist *l) {
    for (int64_t i = 0; i < l->cap; i++) mp_tok_buf_free(&l->s[i]);
    free(l->s);
}

/* The code point at s[*i] (valid UTF-8), advancing *i. */
static uint32_t next_cp(const char *s, size_t n, size_t *i) {
    const unsigned char *u = (const unsigned char *)s + *i;
    int len = mp_tok_utf8_len(u, n - *i);
    assert(len > 0);
    uint32_t c = len == 1 ? u[0] : len == 2 ? u[0] & 0x1Fu : len == 3 ? u[0] & 0x0Fu : u[0] & 0x07u;
    for (int k = 1; k < len; k++) c = c << 6 | (u[k] & 0x3Fu);
    *i += (size_t)len;
    return c;
}

/* ByteLevel: all tokens -> one string of their bytes, lossily decoded. */
static void dec_bytelevel(const strlist *in, strlist *out) {
    mp_tok_buf bytes = {0};
    for (int64_t t = 0; t < in->n; t++) {
        const mp_tok_buf *tok = &in->s[t];
        size_t start = bytes.n, i = 0;
        int ok = 1;
        while (i < tok->n && ok) {
            int b = mp_tok_bytelevel_byte(next_cp(tok->p, tok->n, &i));
            unsigned char c = (unsigned char)b;
            if (b < 0) ok = 0;
            else mp_tok_buf_put(&bytes, &c, 1);
        }
        if (!ok) {
            bytes.n = start;
            mp_tok_buf_put(&bytes, tok->p, tok->n);
        }
    }
    mp_tok_utf8_sanitize(bytes.p ? bytes.p : "", bytes.n, sl_add(out));
    mp_tok_buf_free(&bytes);
}

/* The byte "<0xNN>" stands for, or -1. */
static int fallback_byte(const mp_tok_buf *t) {
    if (t->n != 6 || memcmp(t->p, "<0x", 3) || t->p[5] != '>') return -1;
    int v = 0;
    for (int k = 3; k < 5; k++) {
        char c = t->p[k];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

int mp_tok_dec_is_fallback_byte(const mp_dec *dv, int n, const char *s) {
    int has = 0;
    for (int i = 0; i < n; i++) has |= dv[i].kind == MP_DEC_BYTEFALLBACK;
    const mp_tok_buf b = {(char *)(uintptr_t)s, s ? strlen(s) : 0, 0};
    return has && s && fallback_byte(&b) >= 0;
}

/* Flushes a run of fallback bytes into out: the UTF-8 text, or one U+FFFD per byte if invalid. */
static void flush_bytes(mp_tok_buf *run, strlist *out) {
    if (run->n == 0) return;
    mp_tok_buf check = {0};
    mp_tok_utf8_sanitize(run->p, run->n, &check);
    int valid = check.n == run->n && memcmp(check.p, run->p, run->n) == 0;
    if (valid) mp_tok_buf_put(sl_add(out), run->p, run->n);
    else
        for (size_t k = 0; k < run->n; k++) mp_tok_buf_put(sl_add(out), "\xEF\xBF\xBD", 3);
    mp_tok_buf_free(&check);
    run->n = 0;
}

static void dec_bytefallback(const strlist *in, strlist *out) {
    mp_tok_buf run = {0};
    for (int64_t t = 0; t < in->n; t++) {
        int b = fallback_byte(&in->s[t]);
        unsigned char c = (unsigned char)b;
        if (b >= 0) {
            mp_tok_buf_put(&run, &c, 1);
            continue;
        }
        flush_bytes(&run, out);
        mp_tok_buf_put(sl_add(out), in->s[t].p, in->s[t].n);
    }
    flush_bytes(&run, out);
    mp_tok_buf_free(&run);
}

/* Metaspace: replacement -> " ", except in the first token where it is dropped (when prepending). */
static void dec_metaspace(const mp_dec *d, const strlist *in, strlist *out) {
    for (int64_t t = 0; t < in->n; t++)
        mp_tok_replace(in->s[t].p, in->s[t].n, d->a, t == 0 && d->prepend ? "" : " ", sl_add(out));
}

/* Replace: every occurrence of a -> b in each token. */
static void dec_replace(const mp_dec *d, const strlist *in, strlist *out) {
    for (int64_t t = 0; t < in->n; t++) mp_tok_replace(in->s[t].p, in->s[t].n, d->a, d->b, sl_add(out));
}

/* Strip: up to start leading and stop trailing copies of the content character of each token. */
static void dec_strip(const mp_dec *d, const strlist *in, strlist *out) {
    size_t cl = strlen(d->a);
    for (int64_t t = 0; t < in->n; t++) {
        const mp_tok_buf *tok = &in->s[t];
        size_t a = 0, b = tok->n;
        for (int k = 0; k < d->start && a + cl <= b && memcmp(tok->p + a, d->a, cl) == 0; k++) a += cl;
        for (int k = 0; k < d->stop && b >= a + cl && memcmp(tok->p + b - cl, d->a, cl) == 0; k++) b -= cl;
        mp_tok_buf_put(sl_add(out), tok->p + a, b - a);
    }
}

char *mp_tok_dec_run(const mp_dec *dv, int n, const char **toks, int64_t ntok, size_t *len) {
    strlist cur = {0}, next = {0};
    for (int64_t t = 0; t < ntok; t++) mp_tok_buf_put(sl_add(&cur), toks[t], strlen(toks[t]));
    for (int k = 0; k < n; k++) {
        next.n = 0;
        switch (dv[k].kind) {
        case MP_DEC_BYTELEVEL: dec_bytelevel(&cur, &next); break;
        case MP_DEC_BYTEFALLBACK: dec_bytefallback(&cur, &next); break;
        case MP_DEC_METASPACE: dec_metaspace(&dv[k], &cur, &next); break;
        case MP_DEC_REPLACE: dec_replace(&dv[k], &cur, &next); break;
        case MP_DEC_STRIP: dec_strip(&dv[k], &cur, &next); break;
        case MP_DEC_FUSE: {
            mp_tok_buf *o = sl_add(&next);
            for (int64_t t = 0; t < cur.n; t++) mp_tok_buf_put(o, cur.s[t].p, cur.s[t].n);
            break;
        }
        }
        strlist t = cur;
        cur = next;
        next = t;
    }
    mp_tok_buf text = {0};
    for (int64_t t = 0; t < cur.n; t++) {   /* no decoder: tokenizers joins the tokens with spaces */
        if (n == 0 && t > 0) mp_tok_buf_put(&text, " ", 1);
        mp_tok_buf_put(&text, cur.s[t].p, cur.s[t].n);
    }
    mp_tok_buf_put(&text, "", 0);
    sl_free(&cur);
    sl_free(&next);
    *len = text.n;
    return text.p;
}
