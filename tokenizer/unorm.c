/*
 * tokenizer/unorm.c — Unicode normalization (NFD, NFC, NFKD, NFKC) as Hugging Face's `tokenizers` applies
 * it: the Unicode algorithm (full decomposition, canonical ordering of combining marks by class, then, for
 * the composing forms, canonical composition of each unblocked pair into its primary composite; Hangul by
 * arithmetic) over Unicode 9.0.0's data, the data of the crate `tokenizers` uses. The tables are generated
 * (tokenizer/unorm_data.c by scripts/gen_unorm.py, which says why 9.0 and not a newer Unicode or ICU).
 *
 * Cost: text whose code points all pass the form's quick check (class 0 and no flag: ASCII, and most text
 * already in NFC) is copied as it is after one table lookup per non-ASCII code point. Otherwise the text
 * from the code point before the first that fails is decoded to code points and normalized: linear, except
 * the reordering of a run of combining marks (insertion sort, runs are short).
 * The tokenizer keeps no offsets, so no alignment bookkeeping is needed.
 */
#include <stdlib.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/unorm_data.h"

enum { S_BASE = 0xAC00, L_BASE = 0x1100, V_BASE = 0x1161, T_BASE = 0x11A7, L_COUNT = 19, V_COUNT = 21,
       T_COUNT = 28, N_COUNT = V_COUNT * T_COUNT, S_COUNT = L_COUNT * N_COUNT };

/* The normalization properties of code point c. */
static const mp_unorm_prop *prop(uint32_t c) {
    if (c >= MP_UNORM_LIMIT) return &mp_unorm_props[0];
    size_t blk = (size_t)mp_unorm_stage1[c >> MP_UNORM_SHIFT] << MP_UNORM_SHIFT;
    return &mp_unorm_props[mp_unorm_stage2[blk | (c & ((1u << MP_UNORM_SHIFT) - 1))]];
}

/* The code point of the valid UTF-8 sequence at s[*i], advancing *i past it. */
static uint32_t utf8_next(const unsigned char *s, size_t *i) {
    uint32_t c = s[*i];
    if (c < 0x80) {
        (*i)++;
        return c;
    }
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    c &= 0x3F >> (len - 1);
    for (int k = 1; k < len; k++) c = (c << 6) | (s[*i + k] & 0x3F);
    *i += (size_t)len;
    return c;
}

/* The quick-check flag of a form. */
static unsigned form_flag(mp_unorm_form form) {
    static const unsigned f[] = {MP_UNORM_F_D, MP_UNORM_F_C, MP_UNORM_F_KD, MP_UNORM_F_KC};
    return f[form];
}

/* A growable array of code points. */
typedef struct cpbuf {
    uint32_t *v;
    size_t n, cap;
} cpbuf;

/* Appends c to b. */
static void cp_put(cpbuf *b, uint32_t c) {
    if (b->n == b->cap) {
        size_t nc = b->cap ? 2 * b->cap : 256;
        b->v = mp_realloc(b->v, b->cap * sizeof *b->v, nc * sizeof *b->v, MP_MEM_OTHER);
        b->cap = nc;
    }
    b->v[b->n++] = c;
}

/* Appends the full canonical (compat: compatibility) decomposition of c to b. */
static void decompose(uint32_t c, int compat, cpbuf *b) {
    if (c - S_BASE < (uint32_t)S_COUNT) {
        uint32_t s = c - S_BASE;
        cp_put(b, L_BASE + s / N_COUNT);
        cp_put(b, V_BASE + (s % N_COUNT) / T_COUNT);
        if (s % T_COUNT) cp_put(b, T_BASE + s % T_COUNT);
        return;
    }
    const mp_unorm_prop *p = prop(c);
    unsigned off = compat ? p->koff : p->doff, len = compat ? p->klen : p->dlen;
    if (!len) cp_put(b, c);
    for (unsigned k = 0; k < len; k++) cp_put(b, mp_unorm_pool[off + k]);
}

/* Canonical ordering: each run of combining marks (class != 0) sorted by class, stably. */
static void reorder(cpbuf *b) {
    for (size_t i = 1; i < b->n; i++) {
        uint32_t c = b->v[i];
        unsigned cc = prop(c)->ccc;
        if (!cc) continue;
        size_t j = i;
        for (; j > 0 && prop(b->v[j - 1])->ccc > cc; j--) b->v[j] = b->v[j - 1];
        b->v[j] = c;
    }
}

/* The primary composite of the pair (a, b), or 0 if they do not compose. */
static uint32_t compose_pair(uint32_t a, uint32_t b) {
    if (a - L_BASE < (uint32_t)L_COUNT && b - V_BASE < (uint32_t)V_COUNT)
        return S_BASE + ((a - L_BASE) * V_COUNT + (b - V_BASE)) * T_COUNT;
    if (a - S_BASE < (uint32_t)S_COUNT && (a - S_BASE) % T_COUNT == 0 && b - T_BASE - 1 < (uint32_t)(T_COUNT - 1))
        return a + (b - T_BASE);
    if (!(prop(b)->flags & MP_UNORM_F_C)) return 0;   /* every second of a pair has the flag */
    int lo = 0, hi = mp_unorm_ncomp - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        const mp_unorm_pair *m = &mp_unorm_comp[mid];
        if (m->first == a && m->second == b) return m->composite;
        if (m->first < a || (m->first == a && m->second < b)) lo = mid + 1;
        else hi = mid - 1;
    }
    return 0;
}

/* Canonical composition in place (UAX #15): a mark composes with the last starter unless a character
 * between them has class 0 or a class >= its own. */
static void compose(cpbuf *b) {
    if (b->n == 0) return;
    size_t starter = 0, out = 1;
    unsigned last = prop(b->v[0])->ccc ? 256 : 0;   /* a leading mark is no starter: nothing composes with it */
    for (size_t i = 1; i < b->n; i++) {
        uint32_t c = b->v[i], comp;
        unsigned cc = prop(c)->ccc;
        if ((last < cc || last == 0) && (comp = compose_pair(b->v[starter], c)) != 0) {
            b->v[starter] = comp;
            continue;
        }
        if (cc == 0) starter = out;
        last = cc;
        b->v[out++] = c;
    }
    b->n = out;
}

void mp_tok_unorm(mp_unorm_form form, const char *s, size_t n, mp_tok_buf *out) {
    const unsigned char *u = (const unsigned char *)s;
    unsigned flag = form_flag(form);
    size_t i = 0, prev = 0;   /* prev: where the code point before i starts */
    while (i < n) {
        if (u[i] < 0x80) {
            prev = i++;
            continue;
        }
        size_t at = i;
        const mp_unorm_prop *p = prop(utf8_next(u, &i));
        if (p->ccc || (p->flags & flag)) {
            i = at;
            break;
        }
        prev = at;
    }
    if (i >= n) {   /* the quick check passed: already in the form */
        mp_tok_buf_put(out, s, n);
        return;
    }
    /* the code point before the first that fails is a starter that composes with nothing before it */
    mp_tok_buf_put(out, s, prev);
    cpbuf b = {0};
    for (size_t k = prev; k < n;) decompose(utf8_next(u, &k), form >= MP_UNORM_NFKD, &b);
    reorder(&b);
    if (form == MP_UNORM_NFC || form == MP_UNORM_NFKC) compose(&b);
    for (size_t k = 0; k < b.n; k++) mp_tok_utf8_put(out, b.v[k]);
    free(b.v);
}
