/*
 * reshard/pickle.c — see pickle.h. Design:
 *   - One pass over the bytes, a switch per opcode group (scalars, containers, globals and calls,
 *     memo); every read goes through need(), which checks the bytes left first, so a length prefix
 *     can never make the reader allocate or read beyond the input.
 *   - Values live in an arena of 64 KiB blocks (a string longer than a block gets its own), freed at
 *     once by pk_free: the stack and the memo hold pointers into it, a value may be shared (BINGET).
 *   - The memo is an array indexed by id; an id at or above the input's length is refused (a pickler
 *     numbers its memo entries from 0, one per opcode at most), so the array is bounded by the input.
 * Error messages: "WHAT: byte N: ..." where WHAT names the file (and record) being read.
 */
#include "reshard/pickle.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"

static const pk_class allowlist[] = {
    {"torch.distributed.checkpoint.metadata", "Metadata", PKC_METADATA, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "TensorStorageMetadata", PKC_TENSOR_STORAGE_MD, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "BytesStorageMetadata", PKC_BYTES_STORAGE_MD, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "ChunkStorageMetadata", PKC_CHUNK_STORAGE_MD, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "TensorProperties", PKC_TENSOR_PROPERTIES, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "MetadataIndex", PKC_METADATA_INDEX, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "StorageMeta", PKC_STORAGE_META, PK_USE_NEWOBJ},
    {"torch.distributed.checkpoint.metadata", "_MEM_FORMAT_ENCODING", PKC_MEM_FORMAT_ENCODING, PK_USE_VALUE},
    {"torch.distributed.checkpoint.filesystem", "_StorageInfo", PKC_STORAGE_INFO, PK_USE_NEWOBJ},
    {"torch", "Size", PKC_SIZE, PK_USE_REDUCE},
    {"torch", "float32", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "bfloat16", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "float16", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "float64", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "int64", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "int32", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "int16", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "int8", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "uint8", PKC_DTYPE, PK_USE_VALUE},
    {"torch", "bool", PKC_DTYPE, PK_USE_VALUE},
    {"torch.serialization", "_get_layout", PKC_GET_LAYOUT, PK_USE_REDUCE},
    {"builtins", "getattr", PKC_GETATTR, PK_USE_REDUCE},   /* only getattr(_MEM_FORMAT_ENCODING, str) */
    {"torch._utils", "_rebuild_tensor_v2", PKC_REBUILD_TENSOR_V2, PK_USE_REDUCE},
    {"torch", "FloatStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "BFloat16Storage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "HalfStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "DoubleStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "LongStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "IntStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "ShortStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "CharStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "ByteStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"torch", "BoolStorage", PKC_STORAGE_TYPE, PK_USE_VALUE},
    {"collections", "OrderedDict", PKC_ORDERED_DICT, PK_USE_REDUCE},
    {"pathlib", "PosixPath", PKC_PATH, PK_USE_REDUCE},   /* StorageMeta.checkpoint_id */
    {"pathlib", "PurePosixPath", PKC_PATH, PK_USE_REDUCE},
    {"pathlib", "WindowsPath", PKC_PATH, PK_USE_REDUCE},
    {"pathlib", "PureWindowsPath", PKC_PATH, PK_USE_REDUCE},
};

/* ------------------------------------------------------------------------------------------ arena */

#define ARENA_BLOCK 65536

typedef struct pk_block {
    struct pk_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} pk_block;

struct pk_doc {
    pk_block *blocks;
};

/* n zeroed bytes (8-aligned) from doc's arena: the current block, else a new one of max(n, 64 KiB). */
static void *arena_alloc(pk_doc *doc, size_t n) {
    n = (n + 15) & ~(size_t)15;
    pk_block *b = doc->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > ARENA_BLOCK ? n : ARENA_BLOCK;
        b = mp_malloc(sizeof *b + cap, MP_MEM_OTHER);
        b->used = 0;
        b->cap = cap;
        b->next = doc->blocks;
        doc->blocks = b;
    }
    void *p = b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

void pk_free(pk_doc *doc) {
    if (!doc) return;
    for (pk_block *b = doc->blocks, *nx; b; b = nx) {
        nx = b->next;
        free(b);
    }
    free(doc);
}

/* -------------------------------------------------------------------------------------------- vm */

typedef struct vm {
    const char *what;
    const uint8_t *buf;
    size_t len, pos, op_at;   /* op_at: offset of the current opcode (for messages) */
    pk_doc *doc;
    pk_val **stack;
    int sp, scap;
    int marks[PK_MAX_MARKS];
    int nmarks;
    pk_val **memo;
    size_t memo_cap, memo_count;   /* memo_count: ids stored (MEMOIZE's next id) */
    pk_val *result;
    mp_err *e;
} vm;

/* The error for the current opcode: "WHAT: byte N: message". */
static mp_code fail(vm *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static mp_code fail(vm *m, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return mp_err_set(m->e, MP_EINPUT, "%s: byte %zu: %s", m->what, m->op_at, msg);
}

/* Points *p at the next n bytes and advances, or fails naming what was being read. */
static mp_code need(vm *m, uint64_t n, const char *what, const uint8_t **p) {
    if (n > m->len - m->pos)
        return fail(m, "%s of %llu bytes runs past the end of the pickle (%zu bytes left)", what,
                    (unsigned long long)n, m->len - m->pos);
    *p = m->buf + m->pos;
    m->pos += (size_t)n;
    return MP_OK;
}

/* Little-endian unsigned integer of n (1..8) bytes. */
static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = (v << 8) | p[i];
    return v;
}

static pk_val *new_val(vm *m, pk_kind k) {
    pk_val *v = arena_alloc(m->doc, sizeof *v);
    v->kind = k;
    return v;
}

static mp_code push(vm *m, pk_val *v) {
    if (m->sp >= m->scap) return fail(m, "more than %d values on the pickle stack", PK_MAX_STACK);
    m->stack[m->sp++] = v;
    return MP_OK;
}

static mp_code pop(vm *m, pk_val **v) {
    int floor = m->nmarks ? m->marks[m->nmarks - 1] : 0;
    if (m->sp <= floor) return fail(m, "pop from an empty stack (or past a MARK)");
    *v = m->stack[--m->sp];
    return MP_OK;
}

/* Records that c goes into container p and refuses nesting beyond PK_MAX_DEPTH. */
static mp_code nest(vm *m, pk_val *p, pk_val *c) {
    if (p->level + 1 > c->level) c->level = p->level + 1;
    if (c->depth + 1 > p->depth) p->depth = c->depth + 1;
    if (p->level + 1 + c->depth > PK_MAX_DEPTH || c->level + c->depth > PK_MAX_DEPTH)
        return fail(m, "containers nested deeper than %d", PK_MAX_DEPTH);
    return MP_OK;
}

/* Appends c to the items of p (tuple, list, dict) after the depth check. */
static mp_code add_item(vm *m, pk_val *p, pk_val *c) {
    MP_TRY(nest(m, p, c));
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 4;
        pk_val **it = arena_alloc(m->doc, (size_t)cap * sizeof *it);
        if (p->n) memcpy(it, p->items, (size_t)p->n * sizeof *it);
        p->items = it;
        p->cap = cap;
    }
    p->items[p->n++] = c;
    return MP_OK;
}

/* Pops the values above the innermost MARK into *first / *n (they stay in the stack array) and the mark. */
static mp_code pop_mark(vm *m, int *first, int *n) {
    if (!m->nmarks) return fail(m, "no MARK to pop to");
    *first = m->marks[--m->nmarks];
    *n = m->sp - *first;
    m->sp = *first;
    return MP_OK;
}

/* A tuple of the n values at stack[first..]. */
static mp_code make_tuple(vm *m, int first, int n, pk_val **out) {
    pk_val *t = new_val(m, PK_TUPLE);
    for (int i = 0; i < n; i++) MP_TRY(add_item(m, t, m->stack[first + i]));
    *out = t;
    return MP_OK;
}

/* A STR or BYTES value of the next n bytes (NUL-terminated copy). */
static mp_code read_str(vm *m, pk_kind k, uint64_t n, pk_val **out) {
    const uint8_t *p = NULL;
    MP_TRY(need(m, n, k == PK_STR ? "string" : "bytes", &p));
    pk_val *v = new_val(m, k);
    char *s = arena_alloc(m->doc, (size_t)n + 1);
    memcpy(s, p, (size_t)n);
    v->s = s;
    v->len = (size_t)n;
    *out = v;
    return MP_OK;
}

/* An n-byte length prefix, then a string or bytes of that length. */
static mp_code op_str(vm *m, pk_kind k, int prefix) {
    const uint8_t *p = NULL;
    MP_TRY(need(m, (uint64_t)prefix, "length prefix", &p));
    pk_val *v = NULL;
    MP_TRY(read_str(m, k, le(p, prefix), &v));
    return push(m, v);
}

/* LONG1 / LONG4: a little-endian two's complement integer of a prefixed byte count (8 at most). */
static mp_code op_long(vm *m, int prefix) {
    const uint8_t *p = NULL;
    MP_TRY(need(m, (uint64_t)prefix, "length prefix", &p));
    uint64_t n = le(p, prefix);
    if (n > 8) return fail(m, "integer of %llu bytes (at most 8 are read)", (unsigned long long)n);
    MP_TRY(need(m, n, "integer", &p));
    uint64_t u = n ? le(p, (int)n) : 0;
    if (n && n < 8 && (p[n - 1] & 0x80)) u |= ~(uint64_t)0 << (8 * n);   /* sign-extend */
    pk_val *v = new_val(m, PK_INT);
    v->i = (int64_t)u;
    return push(m, v);
}

/* Opcodes that push one scalar (None, bools, ints, floats, strings, bytes). Returns 1 via *handled. */
static mp_code op_scalar(vm *m, uint8_t op, int *handled) {
    const uint8_t *p = NULL;
    pk_val *v = NULL;
    *handled = 1;
    switch (op) {
    case 'N': return push(m, new_val(m, PK_NONE));
    case 0x88: case 0x89:
        v = new_val(m, PK_BOOL);
        v->i = op == 0x88;
        return push(m, v);
    case 'K': case 'M': case 'J': {
        int n = op == 'K' ? 1 : op == 'M' ? 2 : 4;
        MP_TRY(need(m, (uint64_t)n, "integer", &p));
        v = new_val(m, PK_INT);
        v->i = op == 'J' ? (int64_t)(int32_t)(uint32_t)le(p, 4) : (int64_t)le(p, n);
        return push(m, v);
    }
    case 0x8a: return op_long(m, 1);
    case 0x8b: return op_long(m, 4);
    case 'G': {
        MP_TRY(need(m, 8, "float", &p));
        uint64_t u = 0;
        for (int i = 0; i < 8; i++) u = (u << 8) | p[i];   /* big-endian */
        v = new_val(m, PK_FLOAT);
        memcpy(&v->f, &u, 8);
        return push(m, v);
    }
    case 0x8c: return op_str(m, PK_STR, 1);
    case 'X': return op_str(m, PK_STR, 4);
    case 0x8d: return op_str(m, PK_STR, 8);
    case 'C': return op_str(m, PK_BYTES, 1);
    case 'B': return op_str(m, PK_BYTES, 4);
    case 0x8e: case 0x96: return op_str(m, PK_BYTES, 8);
    default: *handled = 0; return MP_OK;
    }
}

/* SETITEM / SETITEMS: key, value pairs into the dict below them. */
static mp_code set_items(vm *m, int first, int n) {
    if (n % 2) return fail(m, "SETITEMS with an odd number of values");
    if (first < 1) return fail(m, "SETITEMS without a dict below");
    pk_val *d = m->stack[first - 1];
    if (d->kind != PK_DICT) return fail(m, "SETITEMS on a %s", pk_kind_name(d));
    for (int i = 0; i < n; i++) MP_TRY(add_item(m, d, m->stack[first + i]));
    return MP_OK;
}

/* APPEND / APPENDS: values into the list below them. */
static mp_code append_items(vm *m, int first, int n) {
    if (first < 1) return fail(m, "APPENDS without a list below");
    pk_val *l = m->stack[first - 1];
    if (l->kind != PK_LIST) return fail(m, "APPENDS on a %s", pk_kind_name(l));
    for (int i = 0; i < n; i++) MP_TRY(add_item(m, l, m->stack[first + i]));
    return MP_OK;
}

/* Opcodes that build containers and manage the stack. */
static mp_code op_container(vm *m, uint8_t op, int *handled) {
    pk_val *v = NULL;
    int first = 0, n = 0;
    *handled = 1;
    switch (op) {
    case '(':
        if (m->nmarks >= PK_MAX_MARKS) return fail(m, "more than %d nested MARKs", PK_MAX_MARKS);
        m->marks[m->nmarks++] = m->sp;
        return MP_OK;
    case ')': return push(m, new_val(m, PK_TUPLE));
    case ']': return push(m, new_val(m, PK_LIST));
    case '}': return push(m, new_val(m, PK_DICT));
    case 't': case 'l':
        MP_TRY(pop_mark(m, &first, &n));
        MP_TRY(make_tuple(m, first, n, &v));
        if (op == 'l') v->kind = PK_LIST;
        return push(m, v);
    case 0x85: case 0x86: case 0x87:
        n = op - 0x84;
        if (m->sp - n < (m->nmarks ? m->marks[m->nmarks - 1] : 0)) return fail(m, "TUPLE%d on a short stack", n);
        m->sp -= n;
        MP_TRY(make_tuple(m, m->sp, n, &v));
        return push(m, v);
    case 'a':
        MP_TRY(pop(m, &v));
        m->stack[m->sp] = v;
        return append_items(m, m->sp, 1);
    case 'e': MP_TRY(pop_mark(m, &first, &n)); return append_items(m, first, n);
    case 's':
        if (m->sp < 3) return fail(m, "SETITEM on a short stack");
        m->sp -= 2;
        return set_items(m, m->sp, 2);
    case 'u': MP_TRY(pop_mark(m, &first, &n)); return set_items(m, first, n);
    case '0': return pop(m, &v);
    case '1': return pop_mark(m, &first, &n);
    case '2':
        MP_TRY(pop(m, &v));
        m->sp++;
        return push(m, v);
    default: *handled = 0; return MP_OK;
    }
}

/* The allowlist entry for module.name, or NULL. */
static const pk_class *lookup_class(const char *module, size_t ml, const char *name, size_t nl) {
    for (size_t i = 0; i < sizeof allowlist / sizeof *allowlist; i++)
        if (strlen(allowlist[i].module) == ml && !memcmp(allowlist[i].module, module, ml) &&
            strlen(allowlist[i].name) == nl && !memcmp(allowlist[i].name, name, nl))
            return &allowlist[i];
    return NULL;
}

/* Pushes the class module.name, or refuses it by name. */
static mp_code push_class(vm *m, const char *module, size_t ml, const char *name, size_t nl) {
    const pk_class *c = lookup_class(module, ml, name, nl);
    if (!c)
        return fail(m, "refusing to load class %.*s.%.*s (not one of the classes of DCP metadata and torch tensor "
                    "records; nothing is executed)", (int)(ml > 200 ? 200 : ml), module, (int)(nl > 200 ? 200 : nl),
                    name);
    pk_val *v = new_val(m, PK_CLASS);
    v->cls = c;
    return push(m, v);
}

/* GLOBAL: "module\nname\n" inline (each line at most 256 bytes). */
static mp_code op_global(vm *m) {
    const char *line[2];
    size_t n[2];
    for (int k = 0; k < 2; k++) {
        line[k] = (const char *)m->buf + m->pos;
        const uint8_t *nl = memchr(m->buf + m->pos, '\n', m->len - m->pos < 257 ? m->len - m->pos : 257);
        if (!nl) return fail(m, "GLOBAL without a newline within 256 bytes");
        n[k] = (size_t)(nl - (m->buf + m->pos));
        m->pos += n[k] + 1;
    }
    return push_class(m, line[0], n[0], line[1], n[1]);
}

/* STACK_GLOBAL: module and name strings from the stack. */
static mp_code op_stack_global(vm *m) {
    pk_val *mod = NULL, *name = NULL;
    MP_TRY(pop(m, &name));
    MP_TRY(pop(m, &mod));
    if (mod->kind != PK_STR || name->kind != PK_STR) return fail(m, "STACK_GLOBAL of a non-string");
    return push_class(m, mod->s, mod->len, name->s, name->len);
}

/* The checks of calls beyond the allowlist: getattr only reads a member of the memory-format enum. */
static mp_code check_call(vm *m, const pk_class *c, const pk_val *args) {
    if (c->kind != PKC_GETATTR) return MP_OK;
    if (args->n != 2 || args->items[0]->kind != PK_CLASS || args->items[0]->cls->kind != PKC_MEM_FORMAT_ENCODING ||
        args->items[1]->kind != PK_STR)
        return fail(m, "refusing builtins.getattr other than of torch.distributed.checkpoint.metadata."
                       "_MEM_FORMAT_ENCODING");
    return MP_OK;
}

/* REDUCE (callable, args) and NEWOBJ (cls, args): an OBJ recording the call, if the global may be used so. */
static mp_code op_call(vm *m, int use) {
    pk_val *args = NULL, *f = NULL;
    MP_TRY(pop(m, &args));
    MP_TRY(pop(m, &f));
    const char *opname = use == PK_USE_REDUCE ? "REDUCE" : "NEWOBJ";
    if (f->kind != PK_CLASS) return fail(m, "%s of a %s (only allowlisted globals are called)", opname, pk_kind_name(f));
    char nm[160];
    if (!(f->cls->uses & use))
        return fail(m, "refusing to call %s (%s): it is not used so by DCP metadata or torch tensor records",
                    pk_class_str(f->cls, nm, sizeof nm), opname);
    if (args->kind != PK_TUPLE) return fail(m, "%s of %s with a %s for arguments", opname,
                                            pk_class_str(f->cls, nm, sizeof nm), pk_kind_name(args));
    MP_TRY(check_call(m, f->cls, args));
    pk_val *o = new_val(m, PK_OBJ);
    o->cls = f->cls;
    o->args = args;
    MP_TRY(nest(m, o, args));
    return push(m, o);
}

/* BUILD: the state for the object below it (set once). */
static mp_code op_build(vm *m) {
    pk_val *st = NULL, *o = NULL;
    MP_TRY(pop(m, &st));
    MP_TRY(pop(m, &o));
    if (o->kind != PK_OBJ || o->state) return fail(m, "BUILD on a %s", o->state ? "built object" : pk_kind_name(o));
    o->state = st;
    MP_TRY(nest(m, o, st));
    return push(m, o);
}

/* Stores the top of the stack as memo entry id (< the input's length). */
static mp_code memo_put(vm *m, uint64_t id) {
    if (!m->sp) return fail(m, "memo put on an empty stack");
    if (id >= m->len) return fail(m, "memo id %llu beyond the pickle's size", (unsigned long long)id);
    if (id >= m->memo_cap) {
        size_t cap = m->memo_cap ? m->memo_cap : 64;
        while (cap <= id) cap *= 2;
        if (cap > m->len) cap = m->len;
        m->memo = mp_realloc(m->memo, m->memo_cap * sizeof *m->memo, cap * sizeof *m->memo, MP_MEM_OTHER);
        memset(m->memo + m->memo_cap, 0, (cap - m->memo_cap) * sizeof *m->memo);
        m->memo_cap = cap;
    }
    if (!m->memo[id]) m->memo_count++;
    m->memo[id] = m->stack[m->sp - 1];
    return MP_OK;
}

static mp_code memo_get(vm *m, uint64_t id) {
    if (id >= m->memo_cap || !m->memo[id]) return fail(m, "memo id %llu was never stored", (unsigned long long)id);
    return push(m, m->memo[id]);
}

/* Memo opcodes (BINPUT, LONG_BINPUT, MEMOIZE, BINGET, LONG_BINGET). */
static mp_code op_memo(vm *m, uint8_t op, int *handled) {
    const uint8_t *p = NULL;
    *handled = 1;
    switch (op) {
    case 'q': MP_TRY(need(m, 1, "memo id", &p)); return memo_put(m, p[0]);
    case 'r': MP_TRY(need(m, 4, "memo id", &p)); return memo_put(m, le(p, 4));
    case 0x94: return memo_put(m, m->memo_count);   /* MEMOIZE: the next id, the memo's length */
    case 'h': MP_TRY(need(m, 1, "memo id", &p)); return memo_get(m, p[0]);
    case 'j': MP_TRY(need(m, 4, "memo id", &p)); return memo_get(m, le(p, 4));
    default: *handled = 0; return MP_OK;
    }
}

/* The name of an opcode this reader refuses (protocol 0/1 text opcodes, sets, extensions, buffers). */
static const char *refused_name(uint8_t op) {
    switch (op) {
    case 'I': return "INT";
    case 'L': return "LONG";
    case 'F': return "FLOAT";
    case 'S': return "STRING";
    case 'T': return "BINSTRING";
    case 'U': return "SHORT_BINSTRING";
    case 'V': return "UNICODE";
    case 'P': return "PERSID";
    case 'g': return "GET";
    case 'p': return "PUT";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 'd': return "DICT";
    case 0x82: case 0x83: case 0x84: return "EXT (copyreg extension registry)";
    case 0x8f: return "EMPTY_SET";
    case 0x90: return "ADDITEMS";
    case 0x91: return "FROZENSET";
    case 0x92: return "NEWOBJ_EX";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return NULL;
    }
}

/* One opcode at m->pos. Sets *stop at STOP. */
static mp_code step(vm *m, int *stop) {
    const uint8_t *p = NULL;
    m->op_at = m->pos;
    MP_TRY(need(m, 1, "opcode", &p));
    uint8_t op = p[0];
    int handled;
    MP_TRY(op_scalar(m, op, &handled));
    if (handled) return MP_OK;
    MP_TRY(op_container(m, op, &handled));
    if (handled) return MP_OK;
    MP_TRY(op_memo(m, op, &handled));
    if (handled) return MP_OK;
    pk_val *v = NULL;
    switch (op) {
    case 0x80:
        MP_TRY(need(m, 1, "protocol", &p));
        if (p[0] < 2 || p[0] > 5) return fail(m, "pickle protocol %d (2 to 5 are read)", p[0]);
        return MP_OK;
    case 0x95: return need(m, 8, "frame length", &p);   /* framing only groups opcodes */
    case 'c': return op_global(m);
    case 0x93: return op_stack_global(m);
    case 'R': return op_call(m, PK_USE_REDUCE);
    case 0x81: return op_call(m, PK_USE_NEWOBJ);
    case 'b': return op_build(m);
    case 'Q':
        MP_TRY(pop(m, &v));
        pk_val *pid = new_val(m, PK_PERSID);
        pid->args = v;
        MP_TRY(nest(m, pid, v));
        return push(m, pid);
    case '.':
        if (m->sp != 1 || m->nmarks) return fail(m, "STOP with %d values on the stack (1 expected)", m->sp);
        m->result = m->stack[0];
        *stop = 1;
        return MP_OK;
    default: {
        const char *nm = refused_name(op);
        if (nm) return fail(m, "pickle opcode %s is not read (DCP writes protocols 2 to 5 without it)", nm);
        return fail(m, "unknown pickle opcode 0x%02x", op);
    }
    }
}

mp_code pk_parse(const char *what, const uint8_t *buf, size_t len, pk_doc **doc, pk_val **root, mp_err *e) {
    *doc = mp_calloc(sizeof **doc, MP_MEM_OTHER);
    *root = NULL;
    vm m = {.what = what, .buf = buf, .len = len, .doc = *doc, .e = e};
    m.scap = len + 1 < PK_MAX_STACK ? (int)len + 1 : PK_MAX_STACK;   /* each push consumes a byte at least */
    m.stack = mp_malloc((size_t)m.scap * sizeof *m.stack, MP_MEM_OTHER);
    int stop = 0;
    mp_code rc = MP_OK;
    while (!stop && rc == MP_OK) {
        if (m.pos == len) {
            m.op_at = len;
            rc = fail(&m, "the pickle ends without STOP (truncated?)");
            break;
        }
        rc = step(&m, &stop);
    }
    free(m.stack);
    free(m.memo);
    if (rc == MP_OK) *root = m.result;
    return rc;
}

/* ---------------------------------------------------------------------------------- public helpers */

const char *pk_class_str(const pk_class *c, char *buf, size_t cap) {
    snprintf(buf, cap, "%s.%s", c ? c->module : "?", c ? c->name : "?");
    return buf;
}

const char *pk_kind_name(const pk_val *v) {
    static const char *const names[] = {"None", "bool", "int", "float", "str", "bytes", "tuple", "list", "dict",
                                        "class", "object", "persistent id"};
    if (!v) return "nothing";
    if (v->kind == PK_OBJ || v->kind == PK_CLASS) return v->cls->name;
    return names[v->kind];
}

pk_val *pk_dict_get(const pk_val *d, const char *k) {
    if (!d || d->kind != PK_DICT) return NULL;
    size_t kl = strlen(k);
    for (int i = 0; i + 1 < d->n; i += 2)
        if (d->items[i]->kind == PK_STR && d->items[i]->len == kl && !memcmp(d->items[i]->s, k, kl))
            return d->items[i + 1];
    return NULL;
}

int pk_is_obj(const pk_val *v, pk_class_kind k) { return v && v->kind == PK_OBJ && v->cls->kind == k; }

pk_val *pk_obj_dict(const pk_val *v) {
    if (!v || v->kind != PK_OBJ || !v->state) return NULL;
    if (v->state->kind == PK_DICT) return v->state;
    if (v->state->kind == PK_TUPLE && v->state->n == 2 && v->state->items[0]->kind == PK_DICT) return v->state->items[0];
    return NULL;
}

int pk_int(const pk_val *v, int64_t *out) {
    if (!v || v->kind != PK_INT) return 0;
    *out = v->i;
    return 1;
}
