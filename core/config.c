/*
 * core/config.c — see config.h. A table of fields drives both parsing and type checking, so adding a
 * field is one line. Integer fields must be JSON numbers with integral values; bools may be true/false.
 */
#include "core/config.h"
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"

typedef enum { F_INT, F_I64, F_U64, F_DBL, F_BOOL, F_STR, F_TRI } field_kind;  /* TRI: -1/0/1 or bool */

typedef struct { const char *key; field_kind kind; size_t off; } field;

#define MF(k, kind) {#k, kind, offsetof(mp_model_config, k)}
static const field model_fields[] = {
    MF(hidden_size, F_INT), MF(intermediate_size, F_INT), MF(num_hidden_layers, F_INT),
    MF(num_attention_heads, F_INT), MF(num_key_value_heads, F_INT), MF(vocab_size, F_INT),
    MF(max_position_embeddings, F_INT), MF(rms_norm_eps, F_DBL), MF(rope_theta, F_DBL),
    MF(tie_word_embeddings, F_BOOL), MF(initializer_range, F_DBL),
};
#define TF(k, kind) {#k, kind, offsetof(mp_train_config, k)}
static const field train_fields[] = {
    TF(steps, F_I64), TF(batch_size, F_INT), TF(grad_accum, F_INT), TF(seq_len, F_INT), TF(lr, F_DBL),
    TF(min_lr, F_DBL), TF(warmup_steps, F_I64), TF(decay_steps, F_I64), TF(weight_decay, F_DBL),
    TF(beta1, F_DBL), TF(beta2, F_DBL), TF(adam_eps, F_DBL), TF(grad_clip, F_DBL), TF(seed, F_U64),
    TF(train_data, F_STR), TF(val_data, F_STR), TF(eval_every, F_I64), TF(eval_batches, F_INT),
    TF(log_every, F_I64), TF(tp, F_INT), TF(dp, F_INT), TF(sp, F_TRI), TF(reshard_after_forward, F_BOOL),
};
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* HF keys accepted without effect on the math. */
static const char *hf_ignored[] = {"architectures", "model_type", "torch_dtype", "transformers_version",
                                   "bos_token_id", "eos_token_id", "pad_token_id", "use_cache",
                                   "pretraining_tp", "_name_or_path", "output_attentions", "output_hidden_states"};

void mp_model_config_default(mp_model_config *m) {
    memset(m, 0, sizeof *m);
    m->hidden_size = 256;
    m->intermediate_size = 704;
    m->num_hidden_layers = 4;
    m->num_attention_heads = 4;
    m->num_key_value_heads = 4;
    m->vocab_size = 256;
    m->max_position_embeddings = 2048;
    m->rms_norm_eps = 1e-5;
    m->rope_theta = 10000.0;
    m->tie_word_embeddings = 0;
    m->initializer_range = 0.02;
}

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
}

static const char *json_type(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsArray(v)) return "an array";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

/* Stores JSON value v into the field f of struct base; errors name `where` and the key. */
static mp_code set_field(void *base, const field *f, const cJSON *v, const char *where, mp_err *err) {
    char *p = (char *)base + f->off;
    switch (f->kind) {
    case F_INT: case F_I64: case F_U64: {
        if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || !isfinite(v->valuedouble))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected an integer, got %s", where, f->key,
                              cJSON_IsNumber(v) ? "a non-integral number" : json_type(v));
        double d = v->valuedouble;
        if (f->kind == F_INT) {
            if (d < -2147483648.0 || d > 2147483647.0)
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is out of range", where, f->key, d);
            *(int *)p = (int)d;
        } else if (f->kind == F_I64) {
            *(int64_t *)p = (int64_t)d;
        } else {
            if (d < 0) return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": must be >= 0", where, f->key);
            *(uint64_t *)p = (uint64_t)d;
        }
        return MP_OK;
    }
    case F_DBL:
        if (!cJSON_IsNumber(v))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected a number, got %s", where, f->key,
                              json_type(v));
        *(double *)p = v->valuedouble;
        return MP_OK;
    case F_BOOL:
        if (!cJSON_IsBool(v))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true or false, got %s", where, f->key,
                              json_type(v));
        *(int *)p = cJSON_IsTrue(v);
        return MP_OK;
    case F_TRI:
        if (cJSON_IsBool(v)) { *(int *)p = cJSON_IsTrue(v); return MP_OK; }
        if (cJSON_IsNull(v)) { *(int *)p = -1; return MP_OK; }
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true, false or null, got %s", where,
                          f->key, json_type(v));
    case F_STR:
        if (!cJSON_IsString(v))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected a string, got %s", where, f->key,
                              json_type(v));
        if (strlen(v->valuestring) >= MP_PATH_MAX)
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": string too long", where, f->key);
        strcpy(p, v->valuestring);
        return MP_OK;
    }
    return mp_err_set(err, MP_EINTERNAL, "config field kind");
}

static const field *find_field(const field *fs, size_t n, const char *key) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(fs[i].key, key)) return &fs[i];
    return NULL;
}

/* HF keys that must hold a value meshpoint implements. */
static mp_code check_hf_constraint(const cJSON *item, const char *name, const mp_model_config *m, int *handled,
                                   mp_err *err) {
    const char *k = item->string;
    *handled = 1;
    if (!strcmp(k, "hidden_act")) {
        if (!cJSON_IsString(item) || strcmp(item->valuestring, "silu"))
            return mp_err_set(err, MP_EINPUT, "%s: key \"hidden_act\": only \"silu\" is supported", name);
    } else if (!strcmp(k, "attention_bias") || !strcmp(k, "mlp_bias")) {
        if (!cJSON_IsBool(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true or false, got %s", name, k,
                              json_type(item));
        if (cJSON_IsTrue(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": biases are not supported", name, k);
    } else if (!strcmp(k, "rope_scaling")) {
        if (!cJSON_IsNull(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"rope_scaling\": only null is supported", name);
    } else if (!strcmp(k, "attention_dropout")) {
        if (!cJSON_IsNumber(item) || item->valuedouble != 0.0)
            return mp_err_set(err, MP_EINPUT, "%s: key \"attention_dropout\": only 0 is supported", name);
    } else if (!strcmp(k, "head_dim")) {
        (void)m;   /* checked after all keys are read */
        if (!cJSON_IsNumber(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"head_dim\": expected an integer, got %s", name,
                              json_type(item));
    } else {
        *handled = 0;
    }
    return MP_OK;
}

mp_code mp_config_parse(const char *text, const char *name, mp_model_config *m_out, mp_train_config *t_out,
                        mp_err *err) {
    mp_model_config m;
    mp_train_config t;
    mp_model_config_default(&m);
    mp_train_config_default(&t);
    if (m_out) m = *m_out;
    if (t_out) t = *t_out;
    cJSON *root = cJSON_Parse(text);
    if (!root) {
        const char *at = cJSON_GetErrorPtr();
        int line = 1, col = 1;
        for (const char *c = text; at && c < at && *c; c++) {
            if (*c == '\n') { line++; col = 1; } else col++;
        }
        return mp_err_set(err, MP_EINPUT, "%s: malformed JSON near line %d, column %d", name, line, col);
    }
    mp_code rc = MP_OK;
    if (!cJSON_IsObject(root)) {
        rc = mp_err_set(err, MP_EINPUT, "%s: expected a JSON object at the top level", name);
        goto out;
    }
    int head_dim = -1;
    for (cJSON *it = root->child; it; it = it->next) {
        const field *f = find_field(model_fields, NFIELDS(model_fields), it->string);
        if (f) { if ((rc = set_field(&m, f, it, name, err))) goto out; continue; }
        if (!strcmp(it->string, "train")) {
            if (!cJSON_IsObject(it)) {
                rc = mp_err_set(err, MP_EINPUT, "%s: key \"train\": expected an object, got %s", name, json_type(it));
                goto out;
            }
            char where[512];
            snprintf(where, sizeof where, "%s: train", name);
            for (cJSON *tv = it->child; tv; tv = tv->next) {
                const field *tf = find_field(train_fields, NFIELDS(train_fields), tv->string);
                if (!tf) { rc = mp_err_set(err, MP_EINPUT, "%s: unknown key \"%s\"", where, tv->string); goto out; }
                if ((rc = set_field(&t, tf, tv, where, err))) goto out;
            }
            continue;
        }
        int handled = 0;
        if ((rc = check_hf_constraint(it, name, &m, &handled, err))) goto out;
        if (handled) {
            if (!strcmp(it->string, "head_dim")) head_dim = (int)it->valuedouble;
            continue;
        }
        int ignored = 0;
        for (size_t i = 0; i < NFIELDS(hf_ignored); i++) ignored |= !strcmp(hf_ignored[i], it->string);
        if (!ignored) { rc = mp_err_set(err, MP_EINPUT, "%s: unknown key \"%s\"", name, it->string); goto out; }
    }
    if ((rc = mp_model_config_validate(&m, err))) { mp_err_wrap(err, "%s", name); goto out; }
    if (head_dim >= 0 && head_dim != mp_head_dim(&m)) {
        rc = mp_err_set(err, MP_EINPUT, "%s: key \"head_dim\": %d != hidden_size / num_attention_heads = %d",
                        name, head_dim, mp_head_dim(&m));
        goto out;
    }
    if ((rc = mp_train_config_validate(&t, err))) { mp_err_wrap(err, "%s: train", name); goto out; }
    if (m_out) *m_out = m;
    if (t_out) *t_out = t;
out:
    cJSON_Delete(root);
    return rc;
}

mp_code mp_config_load(const char *path, mp_model_config *m, mp_train_config *t, mp_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return mp_err_set(err, MP_EINPUT, "config %s: cannot open: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    if (n < 0 || n > (1 << 24)) { fclose(f); return mp_err_set(err, MP_EINPUT, "config %s: bad size", path); }
    char *text = mp_xmalloc((size_t)n + 1);
    size_t got = fread(text, 1, (size_t)n, f);
    fclose(f);
    text[got] = '\0';
    mp_code rc = mp_config_parse(text, path, m, t, err);
    free(text);
    return rc;
}

mp_code mp_model_config_validate(const mp_model_config *m, mp_err *err) {
#define POS(k) if (m->k <= 0) return mp_err_set(err, MP_EINPUT, "key \"" #k "\": must be > 0, got %d", m->k)
    POS(hidden_size); POS(intermediate_size); POS(num_hidden_layers); POS(num_attention_heads);
    POS(num_key_value_heads); POS(vocab_size); POS(max_position_embeddings);
#undef POS
    if (m->hidden_size % m->num_attention_heads)
        return mp_err_set(err, MP_EINPUT, "hidden_size (%d) is not divisible by num_attention_heads (%d)",
                          m->hidden_size, m->num_attention_heads);
    if (m->num_attention_heads % m->num_key_value_heads)
        return mp_err_set(err, MP_EINPUT,
                          "num_attention_heads (%d) is not divisible by num_key_value_heads (%d)",
                          m->num_attention_heads, m->num_key_value_heads);
    if (mp_head_dim(m) % 2)
        return mp_err_set(err, MP_EINPUT, "head dim hidden_size/num_attention_heads = %d must be even (RoPE)",
                          mp_head_dim(m));
    if (!(m->rms_norm_eps > 0)) return mp_err_set(err, MP_EINPUT, "key \"rms_norm_eps\": must be > 0");
    if (!(m->rope_theta > 0)) return mp_err_set(err, MP_EINPUT, "key \"rope_theta\": must be > 0");
    if (!(m->initializer_range >= 0)) return mp_err_set(err, MP_EINPUT, "key \"initializer_range\": must be >= 0");
    return MP_OK;
}

mp_code mp_train_config_validate(const mp_train_config *t, mp_err *err) {
    if (t->steps < 0) return mp_err_set(err, MP_EINPUT, "steps: must be >= 0");
    if (t->batch_size <= 0) return mp_err_set(err, MP_EINPUT, "batch_size: must be > 0, got %d", t->batch_size);
    if (t->grad_accum <= 0) return mp_err_set(err, MP_EINPUT, "grad_accum: must be > 0, got %d", t->grad_accum);
    if (t->seq_len <= 0) return mp_err_set(err, MP_EINPUT, "seq_len: must be > 0, got %d", t->seq_len);
    if (t->batch_size % t->grad_accum)
        return mp_err_set(err, MP_EINPUT, "batch_size (%d) is not divisible by grad_accum (%d)", t->batch_size,
                          t->grad_accum);
    if (!(t->lr >= 0) || !(t->min_lr >= 0)) return mp_err_set(err, MP_EINPUT, "lr and min_lr must be >= 0");
    if (t->warmup_steps < 0 || t->decay_steps < 0) return mp_err_set(err, MP_EINPUT, "warmup_steps/decay_steps: must be >= 0");
    if (!(t->beta1 >= 0 && t->beta1 < 1) || !(t->beta2 >= 0 && t->beta2 < 1))
        return mp_err_set(err, MP_EINPUT, "beta1 and beta2 must be in [0, 1)");
    if (!(t->adam_eps > 0)) return mp_err_set(err, MP_EINPUT, "adam_eps: must be > 0");
    if (t->eval_batches < 0 || t->eval_every < 0 || t->log_every < 0)
        return mp_err_set(err, MP_EINPUT, "eval_every, eval_batches and log_every must be >= 0");
    if (t->tp <= 0) return mp_err_set(err, MP_EINPUT, "tp: must be > 0, got %d", t->tp);
    if (t->dp < 0) return mp_err_set(err, MP_EINPUT, "dp: must be >= 0, got %d", t->dp);
    return MP_OK;
}

char *mp_model_config_to_json(const mp_model_config *m) {
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddStringToObject(o, "model_type", "llama");
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    cJSON_AddBoolToObject(o, "attention_bias", 0);
    cJSON_AddBoolToObject(o, "mlp_bias", 0);
    cJSON_AddNullToObject(o, "rope_scaling");
    cJSON_AddNumberToObject(o, "head_dim", mp_head_dim(m));
    for (size_t i = 0; i < NFIELDS(model_fields); i++) {
        const field *f = &model_fields[i];
        const char *p = (const char *)m + f->off;
        if (f->kind == F_INT) cJSON_AddNumberToObject(o, f->key, *(const int *)p);
        else if (f->kind == F_DBL) cJSON_AddNumberToObject(o, f->key, *(const double *)p);
        else if (f->kind == F_BOOL) cJSON_AddBoolToObject(o, f->key, *(const int *)p);
    }
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

char *mp_train_config_to_json(const mp_train_config *t) {
    cJSON *o = cJSON_CreateObject();
    for (size_t i = 0; i < NFIELDS(train_fields); i++) {
        const field *f = &train_fields[i];
        const char *p = (const char *)t + f->off;
        switch (f->kind) {
        case F_INT: cJSON_AddNumberToObject(o, f->key, *(const int *)p); break;
        case F_I64: cJSON_AddNumberToObject(o, f->key, (double)*(const int64_t *)p); break;
        case F_U64: cJSON_AddNumberToObject(o, f->key, (double)*(const uint64_t *)p); break;
        case F_DBL: cJSON_AddNumberToObject(o, f->key, *(const double *)p); break;
        case F_BOOL: cJSON_AddBoolToObject(o, f->key, *(const int *)p); break;
        case F_TRI:
            if (*(const int *)p < 0) cJSON_AddNullToObject(o, f->key);
            else cJSON_AddBoolToObject(o, f->key, *(const int *)p);
            break;
        case F_STR: cJSON_AddStringToObject(o, f->key, p); break;
        }
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

int64_t mp_model_num_params(const mp_model_config *m) {
    int64_t D = m->hidden_size, I = m->intermediate_size, V = m->vocab_size;
    int64_t hd = mp_head_dim(m), H = m->num_attention_heads, KV = m->num_key_value_heads;
    int64_t per_layer = 2 * D + D * H * hd + 2 * D * KV * hd + H * hd * D + 3 * D * I;
    return V * D + m->num_hidden_layers * per_layer + D + (m->tie_word_embeddings ? 0 : V * D);
}
