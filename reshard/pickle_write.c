/*
 * reshard/pickle_write.c — the pickle writer (see pickle_write.h): opcodes appended to a growing
 * buffer, no memo, no frames (framing is optional in protocol 4; readers take unframed opcodes).
 */
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "reshard/pickle_write.h"

/* Appends n bytes, growing the buffer geometrically. */
static void put(pkw *w, const void *p, size_t n) {
    if (w->len + n > w->cap) {
        size_t cap = w->cap ? w->cap : 256;
        while (cap < w->len + n) cap *= 2;
        w->buf = mp_realloc(w->buf, w->cap, cap, MP_MEM_OTHER);
        w->cap = cap;
    }
    memcpy(w->buf + w->len, p, n);
    w->len += n;
}

static void op(pkw *w, uint8_t c) { put(w, &c, 1); }

/* v as n little-endian bytes. */
static void le(pkw *w, uint64_t v, int n) {
    uint8_t b[8];
    for (int i = 0; i < n; i++) b[i] = (uint8_t)(v >> (8 * i));
    put(w, b, (size_t)n);
}

void pkw_begin(pkw *w, int proto) {
    memset(w, 0, sizeof *w);
    w->proto = proto;
    op(w, 0x80);   /* PROTO */
    op(w, (uint8_t)proto);
}

void pkw_free(pkw *w) {
    mp_free_acct(w->buf, w->cap, MP_MEM_OTHER);
    memset(w, 0, sizeof *w);
}

void pkw_mark(pkw *w) { op(w, '('); }
void pkw_none(pkw *w) { op(w, 'N'); }
void pkw_bool(pkw *w, int v) { op(w, v ? 0x88 : 0x89); }   /* NEWTRUE, NEWFALSE */

void pkw_int(pkw *w, int64_t v) {
    if (v >= 0 && v < 256) { op(w, 'K'); le(w, (uint64_t)v, 1); }                     /* BININT1 */
    else if (v >= 0 && v < 65536) { op(w, 'M'); le(w, (uint64_t)v, 2); }              /* BININT2 */
    else if (v >= INT32_MIN && v <= INT32_MAX) { op(w, 'J'); le(w, (uint64_t)v, 4); }  /* BININT */
    else {                                                                             /* LONG1: two's complement, shortest */
        int n = 8;
        while (n > 1) {
            int64_t top = v >> (8 * (n - 1) - 1);   /* the bits that the shorter form would drop, and its sign bit */
            if (top != 0 && top != -1) break;
            n--;
        }
        op(w, 0x8a);
        op(w, (uint8_t)n);
        le(w, (uint64_t)v, n);
    }
}

void pkw_str(pkw *w, const char *s) {
    size_t n = strlen(s);
    if (w->proto >= 4 && n < 256) { op(w, 0x8c); op(w, (uint8_t)n); }   /* SHORT_BINUNICODE */
    else { op(w, 'X'); le(w, n, 4); }                                   /* BINUNICODE */
    put(w, s, n);
}

void pkw_global(pkw *w, const char *module, const char *name) {
    if (w->proto >= 4) {
        pkw_str(w, module);
        pkw_str(w, name);
        op(w, 0x93);   /* STACK_GLOBAL */
        return;
    }
    op(w, 'c');   /* GLOBAL */
    put(w, module, strlen(module));
    op(w, '\n');
    put(w, name, strlen(name));
    op(w, '\n');
}

void pkw_tuple(pkw *w, int n) {
    static const uint8_t small[4] = {')', 0x85, 0x86, 0x87};   /* EMPTY_TUPLE, TUPLE1, TUPLE2, TUPLE3 */
    if (n >= 0 && n <= 3) op(w, small[n]);
    else op(w, 't');   /* TUPLE: back to the caller's MARK */
}

void pkw_int_tuple(pkw *w, int n, const int64_t *v) {
    if (n > 3) pkw_mark(w);
    for (int i = 0; i < n; i++) pkw_int(w, v[i]);
    pkw_tuple(w, n > 3 ? PKW_MARKED : n);
}

void pkw_empty_dict(pkw *w) { op(w, '}'); }
void pkw_empty_list(pkw *w) { op(w, ']'); }
void pkw_setitems(pkw *w) { op(w, 'u'); }
void pkw_appends(pkw *w) { op(w, 'e'); }
void pkw_reduce(pkw *w) { op(w, 'R'); }
void pkw_newobj(pkw *w) { op(w, 0x81); }
void pkw_build(pkw *w) { op(w, 'b'); }
void pkw_binpersid(pkw *w) { op(w, 'Q'); }
void pkw_end(pkw *w) { op(w, '.'); }
