/*
 * reshard/pickle_write.h — a Python pickle writer for the two pickles a DCP directory holds (docs/DCP.md):
 * `.metadata` (protocol 4, as torch 2.15 writes it) and each torch.save record's `data.pkl` (protocol 2).
 *
 * Only the opcodes those two use, emitted as a flat byte buffer: the caller spells the object graph
 * as Python's pickler would (a global, then its arguments, then REDUCE / NEWOBJ / BUILD), so the output
 * reads back with Python's unpickler, torch's weights-only unpickler, and meshpoint's own data-only
 * reader (reshard/pickle.[ch]), which refuses anything this writer does not emit. No memo: the pickles
 * are small (a few hundred bytes per tensor chunk) and values are never shared. Strings are written as
 * given (UTF-8); integers in the shortest of BININT1/BININT2/BININT/LONG1, as Python does.
 */
#ifndef MP_PICKLE_WRITE_H
#define MP_PICKLE_WRITE_H

#include <stddef.h>
#include <stdint.h>

typedef struct pkw {
    uint8_t *buf;
    size_t len, cap;
    int proto;   /* 2: GLOBAL (text "module\nname\n"); 4: STACK_GLOBAL */
} pkw;

/* Starts a pickle of protocol 2 or 4 (PROTO). Free with pkw_free. */
void pkw_begin(pkw *w, int proto);
void pkw_free(pkw *w);

void pkw_mark(pkw *w);
void pkw_none(pkw *w);
void pkw_bool(pkw *w, int v);
void pkw_int(pkw *w, int64_t v);
void pkw_str(pkw *w, const char *s);
/* module.name as a global (GLOBAL in protocol 2, two strings and STACK_GLOBAL in 4). */
void pkw_global(pkw *w, const char *module, const char *name);
/* A tuple of the n values on top of the stack (EMPTY_TUPLE, TUPLE1..3, or MARK ... TUPLE: with n > 3
 * the caller must have pushed a MARK before the items; pass PKW_MARKED). */
#define PKW_MARKED (-1)
void pkw_tuple(pkw *w, int n);
/* A tuple of n ints. */
void pkw_int_tuple(pkw *w, int n, const int64_t *v);
void pkw_empty_dict(pkw *w);
void pkw_empty_list(pkw *w);
void pkw_setitems(pkw *w);   /* after MARK k v k v ... */
void pkw_appends(pkw *w);    /* after MARK v v ... */
void pkw_reduce(pkw *w);     /* callable, args tuple -> callable(*args) */
void pkw_newobj(pkw *w);     /* cls, args tuple -> cls.__new__(cls, *args) */
void pkw_build(pkw *w);      /* obj, state -> obj with state */
void pkw_binpersid(pkw *w);  /* pid -> persistent_load(pid) */
/* STOP. */
void pkw_end(pkw *w);

#endif
