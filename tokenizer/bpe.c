/*
 * tokenizer/bpe.c — the BPE model of tokenizer.json ("model": {"type": "BPE", ...}).
 *
 * Loading: the vocabulary (token -> id) into a hash map; each merge, spelled "a b" (older files) or
 * ["a", "b"] (tokenizers >= 0.20), becomes rank r = its index, keyed by the id pair (id(a), id(b)) with
 * the merged id id(a b) beside it. dropout, continuing_subword_prefix and end_of_word_suffix (not used by
 * Llama-family models) are refused when set.
 *
 * Encoding one word does what tokenizers' Word::merge_all does: the word's characters become symbols
 * (a character missing from the vocabulary becomes its bytes' "<0xNN>" tokens under byte_fallback, else
 * the unk token, consecutive unks fused into one under fuse_unk, else it is dropped); then, while any
 * adjacent pair has a merge, the pair of lowest rank (leftmost among equals) is merged. Symbols form a
 * linked list over an array and candidate pairs sit in a binary heap keyed by (rank, position): a word of
 * n characters costs O(n log n). With ignore_merges a word that is itself a token is that token (Llama 3).
 * Each thread keeps a cache of word -> ids (words up to CACHE_WORD_MAX bytes), emptied when full.
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"

#define CACHE_WORD_MAX 128
#define CACHE_ENTRIES_MAX 200000

/* Reads the vocabulary object into b->vocab and b->id_text. */
static mp_code parse_vocab(const cJSON *vocab, mp_bpe *b, mp_err *err) {
    if (!cJSON_IsObject(vocab)) return mp_err_set(err, MP_EINPUT, "model: no \"vocab\" object");
    const cJSON *it;
    int64_t maxid = -1;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > INT32_MAX - 1 ||
            it->valuedouble != (double)(int32_t)it->valuedouble)
            return mp_err_set(err, MP_EINPUT, "model vocab: token \"%s\" has no valid id", it->string);
        if (it->valueint > maxid) maxid = it->valueint;
    }
    b->nid = maxid + 1;
    b->id_text = mp_xcalloc((size_t)(b->nid > 0 ? b->nid : 1) * sizeof *b->id_text);
    cJSON_ArrayForEach(it, vocab) {
        mp_tok_map_put(&b->vocab, it->string, strlen(it->string), it->valueint);
        b->id_text[it->valueint] = mp_strdup(it->string);
    }
    return MP_OK;
}

/* The 8-byte key of the id pair (a, b). */
static void pair_key(int32_t a, int32_t b, char key[8]) {
    memcpy(key, &a, 4);
    memcpy(key + 4, &b, 4);
}

/* Splits merge number r into its two halves *a, *alen, *b (pointers into the JSON). */
static mp_code merge_halves(const cJSON *m, int64_t r, const char **a, size_t *alen, const char **b, mp_err *err) {
    if (cJSON_IsString(m)) {
        const char *sp = strchr(m->valuestring, ' ');
        if (!sp || strchr(sp + 1, ' '))
            return mp_err_set(err, MP_EINPUT, "model merges[%lld]: \"%s\" is not two tokens separated by one space",
                              (long long)r, m->valuestring);
        *a = m->valuestring;
        *alen = (size_t)(sp - m->valuestring);
        *b = sp + 1;
        return MP_OK;
    }
    if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
        cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        *a = cJSON_GetArrayItem(m, 0)->valuestring;
        *alen = strlen(*a);
        *b = cJSON_GetArrayItem(m, 1)->valuestring;
        return MP_OK;
    }
    return mp_err_set(err, MP_EINPUT, "model merges[%lld]: neither \"a b\" nor [\"a\", \"b\"]", (long long)r);
}

/* Reads the merges array into b->merges and b->merge_new. */
static mp_code parse_merges(const cJSON *merges, mp_bpe *b, mp_err *err) {
    if (merges && !cJSON_IsArray(merges)) return mp_err_set(err, MP_EINPUT, "model: \"merges\" is not an array");
    b->nmerges = merges ? cJSON_GetArraySize(merges) : 0;
    b->merge_new = mp_xmalloc((size_t)(b->nmerges > 0 ? b->nmerges : 1) * sizeof *b->merge_new);
    mp_tok_buf cat = {0};
    int64_t r = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        const char *a = NULL, *bb = NULL;
        size_t alen = 0;
        mp_code rc = merge_halves(m, r, &a, &alen, &bb, err);
        cat.n = 0;
        if (rc == MP_OK) {
            mp_tok_buf_put(&cat, a, alen);
            mp_tok_buf_put(&cat, bb, strlen(bb));
        }
        int32_t ia = rc ? -1 : mp_tok_map_get(&b->vocab, a, alen), ib = rc ? -1 : mp_tok_map_get(&b->vocab, bb, strlen(bb));
        int32_t in = rc ? -1 : mp_tok_map_get(&b->vocab, cat.p, cat.n);
        if (rc == MP_OK && (ia < 0 || ib < 0 || in < 0))
            rc = mp_err_set(err, MP_EINPUT, "model merges[%lld]: \"%.*s\" + \"%s\" uses a token missing from the vocab",
                            (long long)r, (int)alen, a, bb);
        if (rc != MP_OK) {
            mp_tok_buf_free(&cat);
            return rc;
        }
        char key[8];
        pair_key(ia, ib, key);
        if (mp_tok_map_get(&b->merges, key, 8) < 0) mp_tok_map_put(&b->merges, key, 8, (int32_t)r);
        b->merge_new[r++] = in;
    }
    mp_tok_buf_free(&cat);
    return MP_OK;
}

/* Refuses the BPE options Llama-family models do not use. */
static mp_code check_options(const cJSON *model, mp_err *err) {
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble > 0)
        return mp_err_set(err, MP_EINPUT, "model BPE: dropout %g is not supported", drop->valuedouble);
    const char *names[] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const char *v = mp_tok_json_str(model, names[i]);
        if (v && *v) return mp_err_set(err, MP_EINPUT, "model BPE: %s \"%s\" is not supported", names[i], v);
    }
    return MP_OK;
}

mp_code mp_tok_bpe_parse(const cJSON *model, mp_bpe *b, mp_err *err) {
    memset(b, 0, sizeof *b);
    b->unk = -1;
    const char *type = mp_tok_json_str(model, "type");
    if (!cJSON_IsObject(model)) return mp_err_set(err, MP_EINPUT, "no \"model\" object");
    if (!type && cJSON_GetObjectItemCaseSensitive(model, "merges")) type = "BPE";   /* old files omit it */
    if (!type || strcmp(type, "BPE"))
        return mp_err_set(err, MP_EINPUT, "model %s is not supported (supported: BPE)", type ? type : "(no type)");
    MP_TRY(check_options(model, err));
    MP_TRY(parse_vocab(cJSON_GetObjectItemCaseSensitive(model, "vocab"), b, err));
    MP_TRY(parse_merges(cJSON_GetObjectItemCaseSensitive(model, "merges"), b, err));
    const char *unk = mp_tok_json_str(model, "unk_token");
    if (unk && (b->unk = mp_tok_map_get(&b->vocab, unk, strlen(unk))) < 0)
        return mp_err_set(err, MP_EINPUT, "model BPE: unk_token \"%s\" is not in the vocab", unk);
    b->fuse_unk = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "fuse_unk"));
    b->byte_fallback = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"));
    b->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->byte_id[i] = mp_tok_map_get(&b->vocab, name, 6);
    }
    return MP_OK;
}

void mp_tok_bpe_free(mp_bpe *b) {
    mp_tok_map_free(&b->vocab);
    mp_tok_map_free(&b->merges);
    for (int64_t i = 0; i < b->nid; i++) free(b->id_text[i]);
    free(b->id_text);
    free(b->merge_new);
    memset(b, 0, sizeof *b);
}

/* ---- encoding ---- */

typedef struct sym {
    int32_t id;
    int prev, next;   /* -1 at the ends */
    int alive;
} sym;

typedef struct cand {
    int32_t rank;
    int pos;          /* index of the left symbol */
} cand;

struct mp_bpe_scratch {
    sym *syms;
    int nsym, capsym;
    cand *heap;
    int nheap, capheap;
    mp_tok_map cache;        /* word -> index into pool: pool[i] = count, then the ids */
    int32_t *pool;
    size_t npool, cappool;
};

mp_bpe_scratch *mp_tok_bpe_scratch_new(void) { return mp_xcalloc(sizeof(mp_bpe_scratch)); }

void mp_tok_bpe_scratch_free(mp_bpe_scratch *s) {
    if (!s) return;
    free(s->syms);
    free(s->heap);
    free(s->pool);
    mp_tok_map_free(&s->cache);
    free(s);
}

/* Orders candidates: lower rank first, then the leftmost. */
static int cand_less(cand x, cand y) { return x.rank != y.rank ? x.rank < y.rank : x.pos < y.pos; }

static void heap_push(mp_bpe_scratch *s, cand c) {
    if (s->nheap == s->capheap) {
        int nc = s->capheap ? 2 * s->capheap : 64;
        s->heap = mp_realloc(s->heap, (size_t)s->capheap * sizeof *s->heap, (size_t)nc * sizeof *s->heap, MP_MEM_OTHER);
        s->capheap = nc;
    }
    int i = s->nheap++;
    while (i > 0 && cand_less(c, s->heap[(i - 1) / 2])) {
        s->heap[i] = s->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    s->heap[i] = c;
}

static cand heap_pop(mp_bpe_scratch *s) {
    assert(s->nheap > 0);
    cand top = s->heap[0], last = s->heap[--s->nheap];
    int i = 0;
    for (;;) {
        int l = 2 * i + 1, m = i;
        cand best = last;
        if (l < s->nheap && cand_less(s->heap[l], best)) { m = l; best = s->heap[l]; }
        if (l + 1 < s->nheap && cand_less(s->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        s->heap[i] = s->heap[m];
        i = m;
    }
    if (s->nheap > 0) s->heap[i] = last;
    return top;
}

/* The rank of merging ids a and b, or -1. */
static int32_t merge_rank(const mp_bpe *b, int32_t x, int32_t y) {
    char key[8];
    pair_key(x, y, key);
    return mp_tok_map_get(&b->merges, key, 8);
}

/* Pushes the candidate merge of symbol i with its successor, if there is one. */
static void push_pair(const mp_bpe *b, mp_bpe_scratch *s, int i) {
    if (i < 0 || s->syms[i].next < 0) return;
    int32_t r = merge_rank(b, s->syms[i].id, s->syms[s->syms[i].next].id);
    if (r >= 0) heap_push(s, (cand){r, i});
}

/* Appends a symbol of id (fusing consecutive unks under fuse_unk). */
static void add_sym(const mp_bpe *b, mp_bpe_scratch *s, int32_t id) {
    if (id == b->unk && b->fuse_unk && s->nsym > 0 && s->syms[s->nsym - 1].id == b->unk) return;
    if (s->nsym == s->capsym) {
        int nc = s->capsym ? 2 * s->capsym : 64;
        s->syms = mp_realloc(s->syms, (size_t)s->capsym * sizeof *s->syms, (size_t)nc * sizeof *s->syms, MP_MEM_OTHER);
        s->capsym = nc;
    }
    int i = s->nsym++;
    s->syms[i] = (sym){id, i - 1, -1, 1};
    if (i > 0) s->syms[i - 1].next = i;
}

/* The word's characters as symbols (see the top comment for missing characters). */
static void initial_symbols(const mp_bpe *b, mp_bpe_scratch *s, const char *w, size_t n) {
    s->nsym = 0;
    size_t i = 0;
    while (i < n) {
        int cl = mp_tok_utf8_len((const unsigned char *)w + i, n - i);
        assert(cl > 0);   /* the text was made valid UTF-8 */
        int32_t id = mp_tok_map_get(&b->vocab, w + i, (size_t)cl);
        int bytes_ok = b->byte_fallback;
        for (int k = 0; k < cl && bytes_ok; k++) bytes_ok = b->byte_id[(unsigned char)w[i + k]] >= 0;
        if (id >= 0) add_sym(b, s, id);
        else if (bytes_ok)
            for (int k = 0; k < cl; k++) add_sym(b, s, b->byte_id[(unsigned char)w[i + k]]);
        else if (b->unk >= 0) add_sym(b, s, b->unk);
        i += (size_t)cl;
    }
}

/* Runs the merges over s->syms. */
static void merge_all(const mp_bpe *b, mp_bpe_scratch *s) {
    s->nheap = 0;
    for (int i = 0; i + 1 < s->nsym; i++) push_pair(b, s, i);
    while (s->nheap > 0) {
        cand c = heap_pop(s);
        sym *l = &s->syms[c.pos];
        if (!l->alive || l->next < 0) continue;
        sym *r = &s->syms[l->next];
        if (merge_rank(b, l->id, r->id) != c.rank) continue;   /* stale: a neighbour merged first */
        l->id = b->merge_new[c.rank];
        r->alive = 0;
        l->next = r->next;
        if (r->next >= 0) s->syms[r->next].prev = c.pos;
        push_pair(b, s, l->prev);
        push_pair(b, s, c.pos);
    }
}

/* Stores the ids out->v[from..] of word w in the cache (emptied first when full). */
static void cache_put(mp_bpe_scratch *s, const char *w, size_t n, const mp_tok_ids *out, int64_t from) {
    size_t cnt = (size_t)(out->n - from);
    if (s->cache.n >= CACHE_ENTRIES_MAX) {
        mp_tok_map_free(&s->cache);
        s->npool = 0;
    }
    if (s->npool + cnt + 1 > s->cappool) {
        size_t nc = s->cappool ? s->cappool : 4096;
        while (nc < s->npool + cnt + 1) nc *= 2;
        s->pool = mp_realloc(s->pool, s->cappool * sizeof *s->pool, nc * sizeof *s->pool, MP_MEM_OTHER);
        s->cappool = nc;
    }
    mp_tok_map_put(&s->cache, w, n, (int32_t)s->npool);
    s->pool[s->npool++] = (int32_t)cnt;
    memcpy(s->pool + s->npool, out->v + from, cnt * sizeof *s->pool);
    s->npool += cnt;
}

void mp_tok_bpe_word(const mp_bpe *b, mp_bpe_scratch *s, const char *w, size_t n, mp_tok_ids *out) {
    int32_t whole = b->ignore_merges ? mp_tok_map_get(&b->vocab, w, n) : -1;
    if (whole >= 0) {
        mp_tok_ids_push(out, whole);
        return;
    }
    int cacheable = n <= CACHE_WORD_MAX;
    int32_t at = cacheable ? mp_tok_map_get(&s->cache, w, n) : -1;
    if (at >= 0) {
        for (int32_t k = 0; k < s->pool[at]; k++) mp_tok_ids_push(out, s->pool[at + 1 + k]);
        return;
    }
    int64_t from = out->n;
    initial_symbols(b, s, w, n);
    merge_all(b, s);
    for (int i = 0; i < s->nsym; i++)
        if (s->syms[i].alive) mp_tok_ids_push(out, s->syms[i].id);
    if (cacheable && s->cache.n < (size_t)INT32_MAX / 2 && s->npool < (size_t)INT32_MAX / 2) cache_put(s, w, n, out, from);
}
