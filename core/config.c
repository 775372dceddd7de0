/*
 * core/config.c — see config.h: the field-table reader and the training config. Integer fields must be
 * JSON numbers with integral values; bools may be true/false.
 *
 * Crafted numbers: every number is range-checked before it is converted or used. A JSON
 * number that overflows a double (1e999) arrives from cJSON as +-inf: refused for every field, never
 * stored (a checkpoint would write it as null). Doubles reach integers only through mp_double_to_i64,
 * which refuses what a cast would make undefined. A checkpoint's stored configs are read by the same
 * code, so a crafted one meets the same checks.
 */
#include "core/config.h"
#include <assert.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The training fields and their flags (cli/cmd_train.c builds its flag table from this one). */
#define TF(k, kind, ...) {#k, MP_FIELD_##kind, offsetof(mp_train_config, k), __VA_ARGS__}
static const mp_field train_fields[] = {
    TF(steps, I64, "steps", "N", "optimizer steps (in total, counting resumed ones)"),
    TF(batch_size, INT, "batch", "B", "global batch in sequences"),
    TF(grad_accum, INT, "grad-accum", "K", "micro-steps per step"),
    TF(seq_len, INT, "seq-len", "T", "sequence length"),
    TF(lr, DBL, "lr", "X", "peak learning rate"),
    TF(min_lr, DBL, "min-lr", "X", "final learning rate"),
    TF(warmup_steps, I64, "warmup", "N", "linear warmup steps"),
    TF(decay_steps, I64, "decay-steps", "N", "cosine steps after warmup (0: to the end)"),
    TF(weight_decay, DBL, "weight-decay", "X", "AdamW weight decay"),
    TF(beta1, DBL, NULL), TF(beta2, DBL, NULL), TF(adam_eps, DBL, NULL),
    TF(grad_clip, DBL, "grad-clip", "X", "global gradient-norm clip (0: off)"),
    TF(seed, U64, "seed", "S", "seed of the parameter initialisation"),
    TF(train_data, STR, "train-data", "FILE", "training tokens"),
    TF(val_data, STR, "val-data", "FILE", "validation tokens (optional)"),
    TF(eval_every, I64, "eval-every", "N", "validation every N steps (0: at the end)"),
    TF(eval_batches, INT, "eval-batches", "N", "validation batches"),
    TF(log_every, I64, "log-every", "N", "log every N steps"),
    TF(tp, INT, "tp", "N", "tensor-parallel degree"),
    TF(dp, INT, "dp", "N", "data-parallel degree (0: world / tp)"),
    TF(sp, TRI, "sp", NULL, "sequence parallelism (auto: on when tp > 1)"),
    TF(reshard_after_forward, BOOL, "reshard-after-forward", NULL,
       "FSDP: free gathered weights after forward (ZeRO-3)"),
    TF(recompute, STR, "recompute", "MODE",
       "activation recomputation: none, or full (keep each block's input only and run its forward again "
       "before its backward: less memory, bitwise the same numbers)", mp_train_recompute_modes),
};
#undef TF
_Static_assert(sizeof train_fields / sizeof train_fields[0] == MP_TRAIN_NFIELDS, "MP_TRAIN_NFIELDS");
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

const char *const mp_train_recompute_modes[] = {"none", "full", NULL};

const mp_field *mp_train_config_fields(void) { return train_fields; }

void mp_train_config_default(mp_train_config *t) {
    memset(t, 0, sizeof *t);
    t->steps = 100;
    t->batch_size = 8;
    t->grad_accum = 1;
    t->seq_len = 128;
    t->lr = 1e-3;
    t->min_lr = 1e-4;
    t->warmup_steps = 10;
    t->weight_decay = 0.1;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->adam_eps = 1e-8;
    t->grad_clip = 1.0;
    t->seed = 1337;
    t->eval_batches = 8;
    t->log_every = 1;
    t->tp = 1;
    t->dp = 0;
    t->sp = -1;
    t->reshard_after_forward = 1;
    strcpy(t->recompute, "none");
}

/* See config.h: v as an integer in [lo, hi], never through an undefined cast. */
int mp_double_to_i64(double v, int64_t lo, int64_t hi, int64_t *out) {
    assert(lo <= hi);
    /* -2^63 and 2^63 are exact doubles; NaN fails both comparisons */
    if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0)) return 0;
    int64_t i = (int64_t)v;   /* defined: v is inside int64's range */
    if ((double)i != v || i < lo || i > hi) return 0;
    if (out) *out = i;
    return 1;
}

const char *mp_json_type(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

/* See config.h. Numbers are range-checked before any conversion: non-finite values (a literal like 1e999
 * overflows to inf) are refused for every kind, integers must be integral and fit the field's C type. */
mp_code mp_field_set(void *base, const mp_field *f, const cJSON *v, const char *where, mp_err *err) {
    assert(base && f && v && where);
    char *p = (char *)base + f->off;
    if (cJSON_IsNumber(v) && !isfinite(v->valuedouble))
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is not a finite number (too large for a double?)",
                          where, f->key, v->valuedouble);
    switch (f->kind) {
    case MP_FIELD_INT: case MP_FIELD_I64: case MP_FIELD_U64: {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected an integer, got %s", where, f->key,
                              cJSON_IsNumber(v) ? "a non-integral number" : mp_json_type(v));
        double d = v->valuedouble;
        int64_t i;
        if (f->kind == MP_FIELD_INT) {
            if (!mp_double_to_i64(d, INT32_MIN, INT32_MAX, &i))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is out of range (a 32-bit integer)", where,
                                  f->key, d);
            *(int *)p = (int)i;
        } else if (f->kind == MP_FIELD_I64) {
            if (!mp_double_to_i64(d, INT64_MIN, INT64_MAX, &i))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is out of range (a 64-bit integer)", where,
                                  f->key, d);
            *(int64_t *)p = i;
        } else {
            if (d < 0) return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": must be >= 0", where, f->key);
            if (!mp_double_to_i64(d, 0, INT64_MAX, &i))   /* below 2^63, as a flag (int64) can give */
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is out of range (< 2^63)", where, f->key, d);
            *(uint64_t *)p = (uint64_t)i;
        }
        return MP_OK;
    }
    case MP_FIELD_DBL:
        if (!cJSON_IsNumber(v))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected a number, got %s", where, f->key,
                              mp_json_type(v));
        *(double *)p = v->valuedouble;
        return MP_OK;
    case MP_FIELD_BOOL:
        if (!cJSON_IsBool(v))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true or false, got %s", where, f->key,
                              mp_json_type(v));
        *(int *)p = cJSON_IsTrue(v);
        return MP_OK;
    case MP_FIELD_TRI:
        if (cJSON_IsBool(v)) { *(int *)p = cJSON_IsTrue(v); return MP_OK; }
        if (cJSON_IsNull(v)) { *(int *)p = -1; return MP_OK; }
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true, false or null, got %s", where,
                          f->key, mp_json_type(v));
    case MP_FIELD_STR:
        if (!cJSON_IsString(v))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected a string, got %s", where, f->key,
                              mp_json_type(v));
        if (strlen(v->valuestring) >= MP_PATH_MAX)
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": string too long", where, f->key);
        if (f->choices && mp_choice_index(f->choices, v->valuestring) < 0) {
            char allowed[256] = "";
            for (int i = 0; f->choices[i]; i++)
                snprintf(allowed + strlen(allowed), sizeof allowed - strlen(allowed), "%s\"%s\"", i ? ", " : "",
                         f->choices[i]);
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected one of %s, got \"%s\"", where, f->key,
                              allowed, v->valuestring);
        }
        strcpy(p, v->valuestring);
        return MP_OK;
    }
    return mp_err_set(err, MP_EINTERNAL, "config field kind");
}

int mp_choice_index(const char *const *choices, const char *s) {
    for (int i = 0; choices[i]; i++)
        if (!strcmp(choices[i], s)) return i;
    return -1;
}

const mp_field *mp_field_find(const mp_field *fs, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fs[i].key, key)) return &fs[i];
    return NULL;
}

mp_code mp_json_parse(const char *text, const char *name, cJSON **out, mp_err *err) {
    *out = cJSON_Parse(text);
    if (*out) return MP_OK;
    const char *at = cJSON_GetErrorPtr();
    int line = 1, col = 1;
    for (const char *c = text; at && c < at && *c; c++) {
        if (*c == '\n') { line++; col = 1; } else col++;
    }
    return mp_err_set(err, MP_EINPUT, "%s: malformed JSON near line %d, column %d", name, line, col);
}

mp_code mp_train_config_apply_json(const cJSON *v, const char *name, mp_train_config *t, mp_err *err) {
    if (!cJSON_IsObject(v))
        return mp_err_set(err, MP_EINPUT, "%s: key \"train\": expected an object, got %s", name, mp_json_type(v));
    char where[512];
    snprintf(where, sizeof where, "%s: train", name);
    for (const cJSON *tv = v->child; tv; tv = tv->next) {
        const mp_field *tf = mp_field_find(train_fields, NFIELDS(train_fields), tv->string);
        if (!tf) return mp_err_set(err, MP_EINPUT, "%s: unknown key \"%s\"", where, tv->string);
        MP_TRY(mp_field_set(t, tf, tv, where, err));
    }
    return MP_OK;
}

/* Each training field on its own (the config file's "train" object is checked with this at parse time;
 * the relations between fields are checked once flags have been applied, by mp_train_config_validate).
 * Messages name the config key and the flag. */
mp_code mp_train_config_check_fields(const mp_train_config *t, mp_err *err) {
    /* a flag (--lr 1e999) can bring what the parser refuses: every real field must be finite */
    static const struct { const char *key; size_t off; } reals[] = {
        {"lr (--lr)", offsetof(mp_train_config, lr)}, {"min_lr (--min-lr)", offsetof(mp_train_config, min_lr)},
        {"weight_decay (--weight-decay)", offsetof(mp_train_config, weight_decay)},
        {"beta1", offsetof(mp_train_config, beta1)}, {"beta2", offsetof(mp_train_config, beta2)},
        {"adam_eps", offsetof(mp_train_config, adam_eps)},
        {"grad_clip (--grad-clip)", offsetof(mp_train_config, grad_clip)}};
    for (size_t i = 0; i < NFIELDS(reals); i++) {
        double v = *(const double *)((const char *)t + reals[i].off);
        if (!isfinite(v)) return mp_err_set(err, MP_EINPUT, "%s: must be a finite number, got %g", reals[i].key, v);
    }
    if (t->steps < 0) return mp_err_set(err, MP_EINPUT, "steps: must be >= 0");
    if (t->steps > MP_MAX_STEPS)
        return mp_err_set(err, MP_EINPUT,
                          "steps (--steps): %lld is above the limit of %lld (the optimizer's step counter)",
                          (long long)t->steps, (long long)MP_MAX_STEPS);
    if (t->batch_size <= 0) return mp_err_set(err, MP_EINPUT, "batch_size: must be > 0, got %d", t->batch_size);
    if (t->grad_accum <= 0) return mp_err_set(err, MP_EINPUT, "grad_accum: must be > 0, got %d", t->grad_accum);
    if (t->seq_len <= 0) return mp_err_set(err, MP_EINPUT, "seq_len: must be > 0, got %d", t->seq_len);
    if (!(t->lr >= 0) || !(t->min_lr >= 0)) return mp_err_set(err, MP_EINPUT, "lr and min_lr must be >= 0");
    if (t->warmup_steps < 0 || t->decay_steps < 0) return mp_err_set(err, MP_EINPUT, "warmup_steps/decay_steps: must be >= 0");
    if (!(t->weight_decay >= 0))
        return mp_err_set(err, MP_EINPUT, "weight_decay (--weight-decay): must be >= 0, got %g", t->weight_decay);
    if (!(t->beta1 >= 0 && t->beta1 < 1) || !(t->beta2 >= 0 && t->beta2 < 1))
        return mp_err_set(err, MP_EINPUT, "beta1 and beta2 must be in [0, 1)");
    if (!(t->adam_eps > 0)) return mp_err_set(err, MP_EINPUT, "adam_eps: must be > 0");
    if (!(t->grad_clip >= 0))
        return mp_err_set(err, MP_EINPUT, "grad_clip (--grad-clip): must be >= 0 (0 turns clipping off), got %g",
                          t->grad_clip);
    if (t->seed > (uint64_t)INT64_MAX)   /* a negative --seed, converted */
        return mp_err_set(err, MP_EINPUT, "seed (--seed): must be >= 0, got %lld", (long long)(int64_t)t->seed);
    if (t->eval_batches < 0 || t->eval_every < 0 || t->log_every < 0)
        return mp_err_set(err, MP_EINPUT, "eval_every, eval_batches and log_every must be >= 0");
    if (t->tp <= 0) return mp_err_set(err, MP_EINPUT, "tp: must be > 0, got %d", t->tp);
    if (t->dp < 0) return mp_err_set(err, MP_EINPUT, "dp: must be >= 0, got %d", t->dp);
    return MP_OK;
}

mp_code mp_train_config_validate(const mp_train_config *t, mp_err *err) {
    MP_TRY(mp_train_config_check_fields(t, err));
    if (t->batch_size % t->grad_accum)
        return mp_err_set(err, MP_EINPUT, "batch_size (%d) is not divisible by grad_accum (%d)", t->batch_size,
                          t->grad_accum);
    if (t->min_lr > t->lr)
        return mp_err_set(err, MP_EINPUT,
                          "min_lr (--min-lr, %g) is above lr (--lr, %g): the schedule decays from lr to min_lr",
                          t->min_lr, t->lr);
    if (t->val_data[0] && t->eval_batches == 0)
        return mp_err_set(err, MP_EINPUT,
                          "eval_batches (--eval-batches): must be > 0 when there is validation data (val_data, --val-data %s)",
                          t->val_data);
    return MP_OK;
}

/* Adds key = v to o as JSON text that parses back to exactly v: the shortest of %.15g, %.16g, %.17g
 * that strtod reads back bit for bit (1e-05 stays "1e-05"). cJSON's own printing stops at 15 digits
 * whenever they come within an epsilon of v, so a checkpoint's config lost the last bits of a double
 * (found by tests/fuzz/fuzz_config.c: a resume then refused the same config). Non-finite values never
 * reach here (the parser refuses them); they would print as null as cJSON does. */
void mp_json_add_exact_double(cJSON *o, const char *key, double v) {
    char buf[40];
    if (!isfinite(v)) { cJSON_AddNullToObject(o, key); return; }
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) break;
    }
    cJSON_AddRawToObject(o, key, buf);
}

/* Adds key = v to o as an integer literal (cJSON prints integers beyond int range with 15 digits). */
void mp_json_add_exact_int(cJSON *o, const char *key, long long v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", v);
    cJSON_AddRawToObject(o, key, buf);
}

void mp_field_to_json(cJSON *o, const mp_field *f, const void *base) {
    const char *p = (const char *)base + f->off;
    switch (f->kind) {
    case MP_FIELD_INT: cJSON_AddNumberToObject(o, f->key, *(const int *)p); break;
    case MP_FIELD_I64: mp_json_add_exact_int(o, f->key, (long long)*(const int64_t *)p); break;
    case MP_FIELD_U64: /* seeds: < 2^63 once validated; an unvalidated larger one prints as a double */
        if (*(const uint64_t *)p <= INT64_MAX) mp_json_add_exact_int(o, f->key, (long long)*(const uint64_t *)p);
        else mp_json_add_exact_double(o, f->key, (double)*(const uint64_t *)p);
        break;
    case MP_FIELD_DBL: mp_json_add_exact_double(o, f->key, *(const double *)p); break;
    case MP_FIELD_BOOL: cJSON_AddBoolToObject(o, f->key, *(const int *)p); break;
    case MP_FIELD_TRI:
        if (*(const int *)p < 0) cJSON_AddNullToObject(o, f->key);
        else cJSON_AddBoolToObject(o, f->key, *(const int *)p);
        break;
    case MP_FIELD_STR: cJSON_AddStringToObject(o, f->key, p); break;
    }
}

/* The bytes of a field of kind k. */
static size_t field_size(mp_field_kind k) {
    switch (k) {
    case MP_FIELD_INT: case MP_FIELD_BOOL: case MP_FIELD_TRI: return sizeof(int);
    case MP_FIELD_I64: return sizeof(int64_t);
    case MP_FIELD_U64: return sizeof(uint64_t);
    case MP_FIELD_DBL: return sizeof(double);
    case MP_FIELD_STR: return MP_PATH_MAX;
    }
    return 0;
}

void mp_field_copy(const mp_field *f, void *dst, const void *src) {
    memcpy((char *)dst + f->off, (const char *)src + f->off, field_size(f->kind));
}

int mp_field_equal(const mp_field *f, const void *a, const void *b) {
    const char *pa = (const char *)a + f->off, *pb = (const char *)b + f->off;
    switch (f->kind) {
    case MP_FIELD_INT: case MP_FIELD_BOOL: case MP_FIELD_TRI: return *(const int *)pa == *(const int *)pb;
    case MP_FIELD_I64: return *(const int64_t *)pa == *(const int64_t *)pb;
    case MP_FIELD_U64: return *(const uint64_t *)pa == *(const uint64_t *)pb;
    case MP_FIELD_DBL: return *(const double *)pa == *(const double *)pb;
    case MP_FIELD_STR: return !strcmp(pa, pb);
    }
    return 0;
}

void mp_field_format(const mp_field *f, const void *base, char *buf, size_t cap) {
    const char *p = (const char *)base + f->off;
    switch (f->kind) {
    case MP_FIELD_INT: case MP_FIELD_BOOL: case MP_FIELD_TRI: snprintf(buf, cap, "%d", *(const int *)p); return;
    case MP_FIELD_I64: snprintf(buf, cap, "%lld", (long long)*(const int64_t *)p); return;
    case MP_FIELD_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)p); return;
    case MP_FIELD_DBL: snprintf(buf, cap, "%g", *(const double *)p); return;
    case MP_FIELD_STR: snprintf(buf, cap, "%s", p); return;
    }
    snprintf(buf, cap, "?");
}

char *mp_train_config_to_json(const mp_train_config *t) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < NFIELDS(train_fields); i++) {
        const mp_field *f = &train_fields[i];
        /* a mode at its default (its first choice) is left out: absent means the default when read
         * (docs/FORMAT.md), and a run that does not use a mode added later writes the bytes it wrote before */
        if (f->choices && mp_choice_index(f->choices, (const char *)t + f->off) == 0) continue;
        mp_field_to_json(o, f, t);
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}
