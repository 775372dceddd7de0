/*
 * tokenizer/map.c — the containers and small helpers of tokenizer/: a growable byte buffer, a string ->
 * int32 hash map (open addressing with linear probing, power-of-two capacity, load factor <= 1/2; it
 * serves the vocabulary (~128k keys), the merge ranks (8-byte id pairs) and the added tokens; keys are
 * copied), literal replacement, array growth, and reading a string member of a JSON object.
 */
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"

/* Appends n bytes of s, growing by doubling; the buffer stays NUL-terminated past n. */
void mp_tok_buf_put(mp_tok_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        b->p = mp_realloc(b->p, b->cap, nc, MP_MEM_OTHER);
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

/* Frees the buffer's storage and zeroes it. */
void mp_tok_buf_free(mp_tok_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

/* FNV-1a, 64 bit: short keys, no dependency. */
uint64_t mp_tok_hash(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

/* The slot of key k (its own, or the empty one where it would go). */
static size_t map_slot(const mp_tok_map *m, const char *k, size_t n) {
    assert(m->cap && (m->cap & (m->cap - 1)) == 0);
    size_t i = (size_t)mp_tok_hash(k, n) & (m->cap - 1);
    while (m->keys[i] && !(m->klen[i] == n && memcmp(m->keys[i], k, n) == 0)) i = (i + 1) & (m->cap - 1);
    return i;
}

/* Doubles the capacity (or makes the first table) and reinserts every key. */
static void map_grow(mp_tok_map *m) {
    mp_tok_map g = {0};
    g.cap = m->cap ? m->cap * 2 : 64;
    g.keys = mp_xcalloc(g.cap * sizeof *g.keys);
    g.klen = mp_xcalloc(g.cap * sizeof *g.klen);
    g.vals = mp_xcalloc(g.cap * sizeof *g.vals);
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i]) continue;
        size_t j = map_slot(&g, m->keys[i], m->klen[i]);
        g.keys[j] = m->keys[i];
        g.klen[j] = m->klen[i];
        g.vals[j] = m->vals[i];
    }
    g.n = m->n;
    free(m->keys);
    free(m->klen);
    free(m->vals);
    *m = g;
}

/* Sets key k[0..n) to v (replacing an earlier value). */
void mp_tok_map_put(mp_tok_map *m, const char *k, size_t n, int32_t v) {
    assert(n < UINT32_MAX);
    if (2 * (m->n + 1) > m->cap) map_grow(m);
    size_t i = map_slot(m, k, n);
    if (!m->keys[i]) {
        m->keys[i] = mp_xmalloc(n + 1);
        memcpy(m->keys[i], k, n);
        m->keys[i][n] = 0;
        m->klen[i] = (uint32_t)n;
        m->n++;
    }
    m->vals[i] = v;
}

int32_t mp_tok_map_get(const mp_tok_map *m, const char *k, size_t n) {
    if (!m->cap) return -1;
    size_t i = map_slot(m, k, n);
    return m->keys[i] ? m->vals[i] : -1;
}

/* Frees the keys and the table. */
void mp_tok_map_free(mp_tok_map *m) {
    for (size_t i = 0; i < m->cap; i++) free(m->keys[i]);
    free(m->keys);
    free(m->klen);
    free(m->vals);
    memset(m, 0, sizeof *m);
}

void mp_tok_replace(const char *s, size_t n, const char *pat, const char *rep, mp_tok_buf *out) {
    size_t pl = strlen(pat), rl = strlen(rep), i = 0, run = 0;   /* s[run..i) not yet copied */
    assert(pl > 0);
    while (i + pl <= n) {
        if (memcmp(s + i, pat, pl) == 0) {
            mp_tok_buf_put(out, s + run, i - run);
            mp_tok_buf_put(out, rep, rl);
            i += pl;
            run = i;
        } else {
            i++;
        }
    }
    mp_tok_buf_put(out, s + run, n - run);
}

void mp_tok_grow(void **v, int *cap, int n, size_t elem) {
    if (n < *cap) return;
    int nc = *cap ? *cap * 2 : 4;
    while (nc <= n) nc *= 2;
    *v = mp_realloc(*v, (size_t)*cap * elem, (size_t)nc * elem, MP_MEM_OTHER);
    memset((char *)*v + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *cap = nc;
}

const char *mp_tok_json_str(const cJSON *j, const char *name) {
    const cJSON *m = j ? cJSON_GetObjectItemCaseSensitive(j, name) : NULL;
    return cJSON_IsString(m) ? m->valuestring : NULL;
}

/* mp_tok_stages_parse's walk: appends j's stages to l; on error the failed slot is counted in l->n. */
static mp_code stages_add(const cJSON *j, const char *what, const char *member, mp_tok_stage_fn one,
                          mp_tok_stages *l, mp_err *err) {
    const char *type = mp_tok_json_str(j, "type");
    if (!type) return mp_err_set(err, MP_EINPUT, "%s: no \"type\"", what);
    if (!strcmp(type, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(j, member))
            MP_TRY(stages_add(it, what, member, one, l, err));
        return MP_OK;
    }
    mp_tok_grow(&l->v, &l->cap, l->n, l->elem);
    return one(j, type, (char *)l->v + (size_t)l->n++ * l->elem, err);
}

mp_code mp_tok_stages_parse(const cJSON *j, const char *what, const char *member, size_t elem, mp_tok_stage_fn one,
                            void (*free_fn)(void *v, int n), void **out, int *n, mp_err *err) {
    mp_tok_stages l = {.elem = elem};
    mp_code rc = j && !cJSON_IsNull(j) ? stages_add(j, what, member, one, &l, err) : MP_OK;
    if (rc != MP_OK) {
        free_fn(l.v, l.n);
        l.v = NULL;
        l.n = 0;
    }
    *out = l.v;
    *n = l.n;
    return rc;
}
