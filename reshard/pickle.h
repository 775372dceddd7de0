/*
 * reshard/pickle.h — a Python pickle reader that builds data and executes nothing, for the pickles
 * PyTorch's Distributed Checkpoint (DCP) writes: `.metadata` (protocol 4, torch >= 2.4) and the
 * `data.pkl` of each torch.save record (protocol 2). See docs/DCP.md.
 *
 * Python's unpickler is a stack machine whose GLOBAL / STACK_GLOBAL opcodes import any module
 * attribute and whose REDUCE / NEWOBJ / BUILD opcodes call it: loading an untrusted pickle runs code.
 * This reader runs the same machine over plain values (pk_val) instead: a GLOBAL becomes a reference
 * to an entry of a fixed allowlist (pk_class: the classes and functions DCP's metadata and torch's
 * tensor records use, found by dumping what torch 2.15 writes), and calling one (REDUCE, NEWOBJ)
 * only records the call — class and arguments — as a PK_OBJ for the caller to interpret; BUILD
 * records the state. Anything outside the allowlist is refused by name ("refusing to load class
 * os.system"), as is calling an allowlisted name in a way it is never used (REDUCE of a dtype).
 *
 * Bounds (untrusted input): every length prefix is checked against the bytes left before anything is
 * allocated; the value stack, the mark stack and the memo are capped (PK_MAX_STACK, PK_MAX_MARKS, memo
 * ids below the input's length), and so is the nesting depth of containers (PK_MAX_DEPTH, checked when
 * a value is put into a container: the level of the container plus the depth of the value). Memory is
 * an arena proportional to the input (each opcode creates at most one value). Consumers walk the
 * result by a fixed schema and never recurse over it (a memo can make a list contain itself).
 * Protocols 2 to 5; the text opcodes of protocols 0/1 (INT, GET, PUT ...) and sets are refused by name.
 */
#ifndef MP_PICKLE_H
#define MP_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

#define PK_MAX_STACK 100000   /* values on the stack at once */
#define PK_MAX_MARKS 64       /* open MARKs at once (DCP's metadata uses < 10) */
#define PK_MAX_DEPTH 64       /* container nesting */

typedef enum {
    PK_NONE, PK_BOOL, PK_INT, PK_FLOAT, PK_STR, PK_BYTES, PK_TUPLE, PK_LIST, PK_DICT,
    PK_CLASS,   /* an allowlisted global (cls) */
    PK_OBJ,     /* cls called with args (REDUCE, NEWOBJ); state set by BUILD (or NULL) */
    PK_PERSID   /* a persistent id (torch.save's storage reference): args is the id's value */
} pk_kind;

/* The allowlist: every global a DCP metadata or torch tensor record may name. */
typedef enum {
    PKC_METADATA, PKC_TENSOR_STORAGE_MD, PKC_BYTES_STORAGE_MD, PKC_CHUNK_STORAGE_MD, PKC_TENSOR_PROPERTIES,
    PKC_METADATA_INDEX, PKC_STORAGE_META, PKC_MEM_FORMAT_ENCODING, PKC_STORAGE_INFO, PKC_SIZE, PKC_DTYPE,
    PKC_GET_LAYOUT, PKC_GETATTR, PKC_REBUILD_TENSOR_V2, PKC_STORAGE_TYPE, PKC_ORDERED_DICT, PKC_PATH,
    PKC_NKINDS
} pk_class_kind;

typedef struct pk_class {
    const char *module, *name;
    pk_class_kind kind;
    int uses;   /* PK_USE_* bits: how the pickle may use it */
} pk_class;
#define PK_USE_VALUE 1    /* pushed and kept as a value (a dtype, a storage type) */
#define PK_USE_NEWOBJ 2   /* cls.__new__(cls, *args) then BUILD (dataclasses) */
#define PK_USE_REDUCE 4   /* called with a tuple of arguments */

typedef struct pk_val pk_val;
struct pk_val {
    pk_kind kind;
    int level, depth;        /* nesting: deepest container above / below (the depth bound) */
    int64_t i;               /* BOOL, INT */
    double f;                /* FLOAT */
    const char *s;           /* STR, BYTES: NUL-terminated copy (BYTES may hold NULs: use len) */
    size_t len;
    pk_val **items;          /* TUPLE, LIST: n items; DICT: 2n (key, value, key, value ...) */
    int n, cap;
    const pk_class *cls;     /* CLASS, OBJ */
    pk_val *args, *state;    /* OBJ: the argument tuple, the BUILD state; PERSID: args */
};

typedef struct pk_doc pk_doc;   /* a parsed pickle: the arena that owns every value */

/* Parses len bytes of pickle (what names the input in every message: "d/.metadata") into *doc and
 * its top value *root. MP_EINPUT naming the input, the byte offset and the opcode or class for
 * anything malformed, refused or over a bound ("refusing to load class os.system"); nothing is
 * executed. Free with pk_free (also after a failure: *doc may be set). */
mp_code pk_parse(const char *what, const uint8_t *buf, size_t len, pk_doc **doc, pk_val **root, mp_err *e);
void pk_free(pk_doc *doc);

/* "module.name" of an allowlisted class into buf; returns buf. */
const char *pk_class_str(const pk_class *c, char *buf, size_t cap);
/* A value's kind for messages ("int", "tuple", "torch.Size(...)"). */
const char *pk_kind_name(const pk_val *v);

/* Schema helpers (NULL-safe, never recursive). */
/* Value of string key k in dict d, or NULL (d not a dict, or no such key). */
pk_val *pk_dict_get(const pk_val *d, const char *k);
/* 1 if v is an OBJ of class kind k. */
int pk_is_obj(const pk_val *v, pk_class_kind k);
/* The attribute dict of a dataclass-like OBJ: its BUILD state when a dict, or the dict of a
 * (dict, slots) state tuple; NULL otherwise. */
pk_val *pk_obj_dict(const pk_val *v);
/* 1 and *out when v is an int (bools excluded). */
int pk_int(const pk_val *v, int64_t *out);

#endif
