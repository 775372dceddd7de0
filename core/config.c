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

/* HF keys accepted without effect on the math: bookkeeping, token ids, and the generation defaults that
 * older transformers kept in config.json (transformers ignores them all when it builds the model). */
static const char *hf_ignored[] = {
    "torch_dtype", "dtype", "transformers_version", "_name_or_path", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "use_cache", "pretraining_tp",
    "output_attentions", "output_hidden_states", "return_dict", "use_bfloat16", "is_llama_config",
    "rope_interleaved", "tokenizer_class", "id2label", "label2id", "problem_type", "finetuning_task",
    "task_specific_params", "prefix",
    /* generation keys */
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens"};

/* The meaning of a missing model key (transformers' LlamaConfig), by model_fields index; REQUIRED: no
 * default (LlamaConfig's is a 7B shape, never what a config that forgot the key meant). */
#define REQUIRED NAN
static const double hf_default[] = {
    /* hidden_size (4096) */ REQUIRED, /* intermediate_size (11008) */ REQUIRED,
    /* num_hidden_layers (32) */ REQUIRED, /* num_attention_heads (32) */ REQUIRED,
    /* num_key_value_heads: = num_attention_heads, set after parsing */ 0,
    /* vocab_size (32000) */ REQUIRED, /* max_position_embeddings */ 2048, /* rms_norm_eps */ 1e-6,
    /* rope_theta */ 10000.0, /* tie_word_embeddings */ 0, /* initializer_range */ 0.02,
};
_Static_assert(sizeof hf_default / sizeof hf_default[0] == sizeof model_fields / sizeof model_fields[0],
               "one HF default per model field");
/* model_fields indices */
enum { K_HIDDEN, K_INTER, K_LAYERS, K_HEADS, K_KV, K_VOCAB, K_MAXPOS, K_EPS, K_THETA, K_NMODEL = NFIELDS(model_fields) };

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
            if (d < -9223372036854775808.0 || d >= 9223372036854775808.0)
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is out of range", where, f->key, d);
            *(int64_t *)p = (int64_t)d;
        } else {
            if (d < 0) return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": must be >= 0", where, f->key);
            if (d >= 9223372036854775808.0)   /* below 2^63, as a flag (int64) can give */
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %g is out of range (< 2^63)", where, f->key, d);
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

/* rope_scaling / rope_parameters (transformers 5): null, or an object whose rope_type (or the older
 * "type") is "default"; in rope_parameters also rope_theta (stored in *theta, *have_theta = 1). Any other
 * RoPE variant, and any other key, changes the math or is unknown: refused. */
static mp_code check_rope(const cJSON *item, const char *name, int is_params, double *theta, int *have_theta,
                          mp_err *err) {
    const char *k = item->string;
    if (cJSON_IsNull(item)) return MP_OK;
    if (!cJSON_IsObject(item))
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected an object or null, got %s", name, k,
                          json_type(item));
    int have_type = 0;
    for (const cJSON *c = item->child; c; c = c->next) {
        if (!strcmp(c->string, "rope_type") || !strcmp(c->string, "type")) {
            if (!cJSON_IsString(c) || strcmp(c->valuestring, "default"))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %s %s%s%s is not supported (only \"default\")",
                                  name, k, c->string, cJSON_IsString(c) ? "\"" : "",
                                  cJSON_IsString(c) ? c->valuestring : json_type(c), cJSON_IsString(c) ? "\"" : "");
            have_type = 1;
        } else if (is_params && !strcmp(c->string, "rope_theta")) {
            if (!cJSON_IsNumber(c) || !(c->valuedouble > 0))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": rope_theta must be a number > 0", name, k);
            *theta = c->valuedouble;
            *have_theta = 1;
        } else if (!strcmp(c->string, "partial_rotary_factor")) {
            if (!cJSON_IsNumber(c) || c->valuedouble != 1.0)
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": only partial_rotary_factor 1 is supported",
                                  name, k);
        } else {
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": unsupported key \"%s\"", name, k, c->string);
        }
    }
    if (!have_type)
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": needs \"rope_type\": \"default\" (or null)", name, k);
    return MP_OK;
}

/* What the parser learnt besides the model fields. */
typedef struct {
    int head_dim;              /* -1: not given */
    double rope_theta;         /* from rope_parameters */
    int have_rope_theta;
} hf_extra;

/* HF keys that must hold a value meshpoint implements. */
static mp_code check_hf_constraint(const cJSON *item, const char *name, hf_extra *x, int *handled, mp_err *err) {
    const char *k = item->string;
    *handled = 1;
    if (!strcmp(k, "model_type")) {
        if (!cJSON_IsString(item) || strcmp(item->valuestring, "llama"))
            return mp_err_set(err, MP_EINPUT, "%s: key \"model_type\": %s%s%s is not supported (only \"llama\")",
                              name, cJSON_IsString(item) ? "\"" : "",
                              cJSON_IsString(item) ? item->valuestring : json_type(item), cJSON_IsString(item) ? "\"" : "");
    } else if (!strcmp(k, "architectures")) {
        if (cJSON_IsNull(item)) return MP_OK;
        if (!cJSON_IsArray(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"architectures\": expected an array, got %s", name,
                              json_type(item));
        for (const cJSON *a = item->child; a; a = a->next)
            if (!cJSON_IsString(a) || strcmp(a->valuestring, "LlamaForCausalLM"))
                return mp_err_set(err, MP_EINPUT,
                                  "%s: key \"architectures\": %s%s%s is not supported (only \"LlamaForCausalLM\")", name,
                                  cJSON_IsString(a) ? "\"" : "", cJSON_IsString(a) ? a->valuestring : json_type(a),
                                  cJSON_IsString(a) ? "\"" : "");
    } else if (!strcmp(k, "hidden_act")) {
        if (!cJSON_IsString(item) || strcmp(item->valuestring, "silu"))
            return mp_err_set(err, MP_EINPUT, "%s: key \"hidden_act\": only \"silu\" is supported", name);
    } else if (!strcmp(k, "attention_bias") || !strcmp(k, "mlp_bias")) {
        /* null: transformers passes bias=None to nn.Linear, i.e. no bias */
        if (!cJSON_IsBool(item) && !cJSON_IsNull(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true, false or null, got %s", name, k,
                              json_type(item));
        if (cJSON_IsTrue(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": biases are not supported", name, k);
    } else if (!strcmp(k, "rope_scaling")) {
        double unused;
        int unused_have;
        return check_rope(item, name, 0, &unused, &unused_have, err);
    } else if (!strcmp(k, "rope_parameters")) {
        return check_rope(item, name, 1, &x->rope_theta, &x->have_rope_theta, err);
    } else if (!strcmp(k, "attention_dropout")) {
        if (!cJSON_IsNumber(item) || item->valuedouble != 0.0)
            return mp_err_set(err, MP_EINPUT, "%s: key \"attention_dropout\": only 0 is supported", name);
    } else if (!strcmp(k, "head_dim")) {
        if (cJSON_IsNull(item)) return MP_OK;   /* None: hidden_size / num_attention_heads */
        if (!cJSON_IsNumber(item) || item->valuedouble != floor(item->valuedouble) || !(item->valuedouble > 0) ||
            item->valuedouble > 1e9)
            return mp_err_set(err, MP_EINPUT, "%s: key \"head_dim\": expected a positive integer, got %s", name,
                              cJSON_IsNumber(item) ? "another number" : json_type(item));
        x->head_dim = (int)item->valuedouble;
    } else {
        *handled = 0;
    }
    return MP_OK;
}

/* Model checks; with `known` (a bit per model_fields index), only those whose fields are all known, so
 * that a config is first told about what it says wrong, then about what it omits. */
static mp_code validate_model(const mp_model_config *m, unsigned known, mp_err *err) {
#define KNOWN(i) ((known >> (i)) & 1u)
#define POS(i, k) if (KNOWN(i) && m->k <= 0) return mp_err_set(err, MP_EINPUT, "key \"" #k "\": must be > 0, got %d", m->k)
    POS(K_HIDDEN, hidden_size); POS(K_INTER, intermediate_size); POS(K_LAYERS, num_hidden_layers);
    POS(K_HEADS, num_attention_heads); POS(K_KV, num_key_value_heads); POS(K_VOCAB, vocab_size);
    POS(K_MAXPOS, max_position_embeddings);
#undef POS
    if (KNOWN(K_HIDDEN) && KNOWN(K_HEADS)) {
        if (m->hidden_size % m->num_attention_heads)
            return mp_err_set(err, MP_EINPUT, "hidden_size (%d) is not divisible by num_attention_heads (%d)",
                              m->hidden_size, m->num_attention_heads);
        if (mp_head_dim(m) % 2)
            return mp_err_set(err, MP_EINPUT, "head dim hidden_size/num_attention_heads = %d must be even (RoPE)",
                              mp_head_dim(m));
    }
    if (KNOWN(K_HEADS) && KNOWN(K_KV) && m->num_attention_heads % m->num_key_value_heads)
        return mp_err_set(err, MP_EINPUT,
                          "num_attention_heads (%d) is not divisible by num_key_value_heads (%d)",
                          m->num_attention_heads, m->num_key_value_heads);
#undef KNOWN
    if (!(m->rms_norm_eps > 0)) return mp_err_set(err, MP_EINPUT, "key \"rms_norm_eps\": must be > 0");
    if (!(m->rope_theta > 0)) return mp_err_set(err, MP_EINPUT, "key \"rope_theta\": must be > 0");
    if (!(m->initializer_range >= 0)) return mp_err_set(err, MP_EINPUT, "key \"initializer_range\": must be >= 0");
    return MP_OK;
}

/* Fields of the model config: given, defaulted as LlamaConfig does, or missing (required). */
static mp_code finish_model(mp_model_config *m, const unsigned given, const hf_extra *x, const char *name,
                            mp_err *err) {
    unsigned known = given;
    for (size_t i = 0; i < K_NMODEL; i++) {
        if ((given >> i) & 1u) continue;
        if (i == K_KV || isnan(hf_default[i])) continue;
        const field *f = &model_fields[i];
        char *p = (char *)m + f->off;
        if (f->kind == F_DBL) *(double *)p = hf_default[i];
        else *(int *)p = (int)hf_default[i];
        known |= 1u << i;
    }
    if (x->have_rope_theta) {
        if (((given >> K_THETA) & 1u) && m->rope_theta != x->rope_theta)
            return mp_err_set(err, MP_EINPUT, "%s: key \"rope_theta\" (%g) disagrees with rope_parameters.rope_theta (%g)",
                              name, m->rope_theta, x->rope_theta);
        m->rope_theta = x->rope_theta;
    }
    if (!((given >> K_KV) & 1u) && ((given >> K_HEADS) & 1u)) {   /* None: multi-head attention */
        m->num_key_value_heads = m->num_attention_heads;
        known |= 1u << K_KV;
    }
    mp_code rc = validate_model(m, known, err);
    if (rc) return mp_err_wrap(err, "%s", name), rc;
    if (((known >> K_HIDDEN) & (known >> K_HEADS) & 1u) && x->head_dim >= 0 && x->head_dim != mp_head_dim(m))
        return mp_err_set(err, MP_EINPUT, "%s: key \"head_dim\": %d != hidden_size / num_attention_heads = %d",
                          name, x->head_dim, mp_head_dim(m));
    char missing[512] = "";
    size_t at = 0;
    int nmiss = 0;
    for (size_t i = 0; i < K_NMODEL; i++)
        if (!((known >> i) & 1u) && i != K_KV && at < sizeof missing) {
            at += (size_t)snprintf(missing + at, sizeof missing - at, "%s\"%s\"", nmiss ? ", " : "", model_fields[i].key);
            nmiss++;
        }
    if (nmiss)
        return mp_err_set(err, MP_EINPUT, "%s: key%s %s %s required (the model's shape has no default)", name,
                          nmiss > 1 ? "s" : "", missing, nmiss > 1 ? "are" : "is");
    if ((rc = mp_model_config_validate(m, err))) return mp_err_wrap(err, "%s", name), rc;
    return MP_OK;
}

static mp_code validate_train_fields(const mp_train_config *t, mp_err *err);

mp_code mp_config_parse(const char *text, const char *name, mp_model_config *m_out, mp_train_config *t_out,
                        mp_err *err) {
    mp_model_config m;
    mp_train_config t;
    mp_model_config_default(&m);
    mp_train_config_default(&t);
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
    unsigned given = 0;
    hf_extra x = {.head_dim = -1};
    for (cJSON *it = root->child; it; it = it->next) {
        const field *f = find_field(model_fields, NFIELDS(model_fields), it->string);
        if (f) {
            /* num_key_value_heads: null is LlamaConfig's None (= num_attention_heads) */
            if (f == &model_fields[K_KV] && cJSON_IsNull(it)) { given &= ~(1u << K_KV); continue; }
            if ((rc = set_field(&m, f, it, name, err))) goto out;
            given |= 1u << (unsigned)(f - model_fields);
            continue;
        }
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
        if ((rc = check_hf_constraint(it, name, &x, &handled, err))) goto out;
        if (handled) continue;
        int ignored = 0;
        for (size_t i = 0; i < NFIELDS(hf_ignored); i++) ignored |= !strcmp(hf_ignored[i], it->string);
        if (!ignored) { rc = mp_err_set(err, MP_EINPUT, "%s: unknown key \"%s\"", name, it->string); goto out; }
    }
    if ((rc = finish_model(&m, given, &x, name, err))) goto out;
    if ((rc = validate_train_fields(&t, err))) { mp_err_wrap(err, "%s: train", name); goto out; }
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
    return validate_model(m, ~0u, err);
}

/* Each training field on its own (the config file's "train" object is checked with this at parse time;
 * the relations between fields are checked once flags have been applied, by mp_train_config_validate).
 * Messages name the config key and the flag. */
static mp_code validate_train_fields(const mp_train_config *t, mp_err *err) {
    if (t->steps < 0) return mp_err_set(err, MP_EINPUT, "steps: must be >= 0");
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
    MP_TRY(validate_train_fields(t, err));
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

mp_code mp_config_validate_pair(const mp_model_config *m, const mp_train_config *t, mp_err *err) {
    if (t->seq_len > m->max_position_embeddings)
        return mp_err_set(err, MP_EINPUT,
                          "seq_len (--seq-len, %d) is above max_position_embeddings (%d), the longest sequence of "
                          "the model config", t->seq_len, m->max_position_embeddings);
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
