/*
 * core/config.h — configuration read from JSON (cJSON): the one reader of config objects, and the
 * training config.
 *
 * The reader is a table of fields (mp_field: JSON key, C kind, offset in the struct), so a config struct
 * is described once and that one table parses it, type-checks and range-checks each value (a number that
 * overflows a double, a non-integral or out-of-range integer, a wrong JSON type are refused naming the
 * key), compares and prints it, and writes it back as JSON that reads back bit for bit. The training
 * config (mp_train_config) is read with it here; the model's config, which core/ knows nothing of, is read
 * with it by the layer that owns the model. In a config file the training config is the "train" object
 * (mp_train_config_apply_json reads it; mp_train_config_fields lists its keys, each with the flag of
 * `meshpoint train` that overrides it); any other key is an error naming it, so a typo never silently
 * falls back to a default.
 */
#ifndef MP_CONFIG_H
#define MP_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

struct cJSON;

#define MP_PATH_MAX 1024

/* ---- the field-table reader ---- */

typedef enum {
    MP_FIELD_INT,    /* int: an integral JSON number in int32 range */
    MP_FIELD_I64,    /* int64_t: an integral number in int64 range */
    MP_FIELD_U64,    /* uint64_t: an integral number in [0, 2^63) */
    MP_FIELD_DBL,    /* double: a finite number */
    MP_FIELD_BOOL,   /* int 0/1: true or false */
    MP_FIELD_STR,    /* char[MP_PATH_MAX]: a string shorter than MP_PATH_MAX */
    MP_FIELD_TRI     /* int -1/0/1: null (-1), false or true */
} mp_field_kind;

/* One field of a config struct: its JSON key (the member's name), kind and offset; and, for a field a
 * command-line flag overrides, that flag as the flag table (cli/args.h) shows it. */
typedef struct mp_field {
    const char *key;
    mp_field_kind kind;
    size_t off;
    const char *flag;      /* without the leading "--"; NULL: set in the config file only */
    const char *metavar;   /* the value's placeholder in --help ("N", "FILE"); NULL for a switch */
    const char *help;      /* one line for --help */
    const char *const *choices;   /* MP_FIELD_STR, optional: the NULL-terminated values allowed (a mode, not
                                   * a path); the flag then sits with the options in --help, not the files */
} mp_field;

/* A table entry for member m of struct type T (no flag). */
#define MP_FIELD(T, m, kind) {#m, kind, offsetof(T, m)}

/* The index of s in the NULL-terminated list choices, or -1. */
int mp_choice_index(const char *const *choices, const char *s);
/* The entry of fs[0 .. n) whose key is key, or NULL. */
const mp_field *mp_field_find(const mp_field *fs, size_t n, const char *key);
/* Stores JSON value v into field f of the struct at base, range-checked (see above); MP_EINPUT with
 * "<where>: key \"<key>\": ..." when v does not fit, leaving the field alone. */
mp_code mp_field_set(void *base, const mp_field *f, const struct cJSON *v, const char *where, mp_err *err);
/* Adds field f of the struct at base to the JSON object o, as text that parses back to the same value. */
void mp_field_to_json(struct cJSON *o, const mp_field *f, const void *base);
/* Copies field f's value from the struct at src to the struct at dst. */
void mp_field_copy(const mp_field *f, void *dst, const void *src);
/* 1 if field f holds the same value in the structs at a and b (reals compared with ==, strings by text). */
int mp_field_equal(const mp_field *f, const void *a, const void *b);
/* Field f of the struct at base as messages print it, into buf (cap bytes): integers and booleans as
 * decimal (a tri-state as -1/0/1), reals with %g, strings as they are. */
void mp_field_format(const mp_field *f, const void *base, char *buf, size_t cap);
/* Parses JSON text into *out (the caller cJSON_Deletes it); MP_EINPUT "<name>: malformed JSON near line
 * L, column C" when it does not parse. */
mp_code mp_json_parse(const char *text, const char *name, struct cJSON **out, mp_err *err);
/* The name of v's JSON type for messages: "a string", "a number", "a boolean", "null", "an array", ... */
const char *mp_json_type(const struct cJSON *v);
/* Adds key = v to o as the shortest of %.15g/%.16g/%.17g that strtod reads back exactly (null if not
 * finite), and key = v as an integer literal: cJSON's own printing loses digits of both. */
void mp_json_add_exact_double(struct cJSON *o, const char *key, double v);
void mp_json_add_exact_int(struct cJSON *o, const char *key, long long v);

/* The one conversion of a double (a JSON number: config values, checkpoint metadata) to an integer:
 * returns 1 and sets *out (may be NULL) when v is finite, integral and in [lo, hi]; else 0 and leaves
 * *out alone. A plain cast of an out-of-range double is undefined behaviour; this never casts one. */
int mp_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out);

/* ---- the training config ---- */

/* The most optimizer steps a run may count: the bias-correction step t (<= steps) is an int in the
 * backend's AdamW (MP_ADAMW_MAX_T in core/optim.h). */
#define MP_MAX_STEPS ((int64_t)INT32_MAX)

typedef struct mp_train_config {
    int64_t steps;             /* optimizer steps to run in total */
    int batch_size;            /* global batch, in sequences, per optimizer step */
    int grad_accum;            /* micro-batches per step (batch_size % (grad_accum*dp) == 0) */
    int seq_len;
    double lr, min_lr;         /* peak and floor of the schedule */
    int64_t warmup_steps;
    int64_t decay_steps;       /* cosine length after warmup; 0 = until `steps` */
    double weight_decay, beta1, beta2, adam_eps, grad_clip;   /* grad_clip <= 0: off */
    uint64_t seed;
    char train_data[MP_PATH_MAX];
    char val_data[MP_PATH_MAX];
    int64_t eval_every;        /* 0 = only at the end */
    int eval_batches;
    int64_t log_every;
    int tp, dp;                /* mesh (0 = dp from world size) */
    int sp;                    /* sequence parallel: -1 auto (on when tp > 1), 0 off, 1 on */
    int reshard_after_forward;
    char recompute[MP_PATH_MAX];   /* activation recomputation: "none" or "full" (mp_train_recompute_modes) */
} mp_train_config;

/* The values of the training config's "recompute" (--recompute), NULL-terminated, in llama_recompute's
 * order (core/ knows nothing of the model: cli/runtime.c maps one to the other). */
extern const char *const mp_train_recompute_modes[];

void mp_train_config_default(mp_train_config *t);

/* The training config's fields, in train_config JSON order, with the `meshpoint train` flag that
 * overrides each one (beta1, beta2, adam_eps have none): the one list that the config file's "train"
 * object, the JSON written into checkpoints and the command line's flags and overrides are read from. */
#define MP_TRAIN_NFIELDS 24
const mp_field *mp_train_config_fields(void);

/* Applies the config file's "train" object v over *t's previous contents (name: the file, for messages):
 * MP_EINPUT naming the key for an unknown key or a value that does not fit its field (mp_field_set), or
 * when v is not an object. Fields are not checked against each other here: mp_train_config_check_fields
 * and mp_train_config_validate do that. */
mp_code mp_train_config_apply_json(const struct cJSON *v, const char *name, mp_train_config *t, mp_err *err);
/* Each field's range on its own (grad_clip, weight_decay >= 0, seed < 2^63 (a negative --seed), finite
 * reals, ...); the message names the key and, where there is one, the flag. */
mp_code mp_train_config_check_fields(const mp_train_config *t, mp_err *err);
/* mp_train_config_check_fields, then the relations: batch_size % grad_accum == 0, min_lr <= lr,
 * eval_batches > 0 when val_data is set. Call it after applying flags. */
mp_code mp_train_config_validate(const mp_train_config *t, mp_err *err);
/* JSON text of the training config, every field in table order. Caller frees. */
char *mp_train_config_to_json(const mp_train_config *t);

#endif
