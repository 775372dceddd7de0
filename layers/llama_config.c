/*
 * layers/llama_config.c — see llama_config.h: Hugging Face LlamaConfig's rules over core's field-table
 * reader (core/config.h). model_fields drives parsing, the HF defaults, JSON output and the comparison
 * of two configs, so adding a field is one line there (and one in hf_default).
 *
 * Crafted numbers: the reader range-checks every number; the model's shape has upper bounds
 * too (LLAMA_CONFIG_MAX_LAYERS, LLAMA_CONFIG_MAX_PARAMS), so the sizes derived from it (tensor counts, element counts,
 * the parameter count) are computed without overflow; a checkpoint's stored model_config is parsed by
 * the same code, so a crafted one meets the same checks.
 *
 * Misspelt keys: an unknown top-level key is ignored with a warning, as transformers does,
 * unless it looks like a typo of a key with an effect (a model field, "train", a key check_hf_constraint
 * reads) that the file does not give: `"rope_thetta": 500000` without rope_theta would otherwise train
 * with the default theta, another model. That is an error, "did you mean rope_theta?". "Looks like":
 * case aside, Damerau-Levenshtein distance <= 1 (<= 2 for keys of 10 characters or more), or, for a key
 * of several words, the same '_'-separated words with some shortened to a prefix of at least 3 letters
 * (rms_norm_epsilon for rms_norm_eps; never "training" for train or "arch" for architectures). Real keys
 * of other families that the rule would take for typos (hf_other_families) only warn, so does any
 * *_token_id key (tokenizers define many: eot_, eom_, eod_, sep_token_id...), and so does a near key
 * whose twin is in the file.
 */
#include "layers/llama_config.h"
#include "core/log.h"
#include <assert.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "core/fsutil.h"

#define MF(k, kind) MP_FIELD(llama_config, k, MP_FIELD_##kind)
static const mp_field model_fields[] = {
    MF(hidden_size, INT), MF(intermediate_size, INT), MF(num_hidden_layers, INT), MF(num_attention_heads, INT),
    MF(num_key_value_heads, INT), MF(vocab_size, INT), MF(max_position_embeddings, INT), MF(rms_norm_eps, DBL),
    MF(rope_theta, DBL), MF(tie_word_embeddings, BOOL), MF(initializer_range, DBL),
};
#undef MF
#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))

/* HF keys accepted silently, without effect on the math: PretrainedConfig's bookkeeping (names, versions,
 * dtypes, token ids, code and quantization pointers, output switches, encoder-decoder flags that a
 * causal LM ignores), keys other trainers add (nanotron's is_llama_config / rope_interleaved, which
 * LlamaConfig keeps as plain attributes), and the generation defaults that older transformers kept in
 * config.json (transformers ignores them all when it builds the model). A quantization_config is
 * harmless here: the importer reads the tensors as stored and refuses any it cannot read as floats.
 * Keys in none of these lists are accepted with one warning (unknown_key), as transformers keeps and
 * ignores them; keys that change the math and cannot be represented are errors (check_hf_constraint). */
static const char *hf_ignored[] = {
    "torch_dtype", "dtype", "transformers_version", "_name_or_path", "_commit_hash", "bos_token_id",
    "pad_token_id", "unk_token_id", "sep_token_id", "decoder_start_token_id", "use_cache",
    "output_attentions", "output_hidden_states", "return_dict", "use_bfloat16", "is_llama_config",
    "rope_interleaved", "tokenizer_class", "id2label", "label2id", "problem_type", "finetuning_task",
    "task_specific_params", "prefix", "auto_map", "quantization_config", "_attn_implementation",
    "_attn_implementation_autoset", "attn_implementation", "torchscript", "pruned_heads", "tf_legacy_loss",
    "chunk_size_feed_forward", "is_decoder", "is_encoder_decoder", "add_cross_attention",
    "cross_attention_hidden_size", "tie_encoder_decoder", "transformers.js_config",
    /* generation keys */
    "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "num_beam_groups",
    "diversity_penalty", "temperature", "top_k", "top_p", "typical_p", "repetition_penalty",
    "length_penalty", "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty", "suppress_tokens",
    "begin_suppress_tokens"};

/* The keys check_hf_constraint reads (each changes the model, or is checked to hold what meshpoint
 * computes), and meshpoint's own "train" object: with model_fields, the keys a typo must not hide. */
static const char *hf_checked[] = {"model_type", "architectures", "hidden_act", "attention_bias", "mlp_bias",
                                   "rope_scaling", "rope_parameters", "pretraining_tp", "attention_dropout",
                                   "eos_token_id", "head_dim", "train"};

/* Real keys of other model families (BERT-likes, Gemma) within the typo rule's reach of a
 * key above: warned about as unknown, never taken for a typo. */
static const char *hf_other_families[] = {"cls_token_id", "hidden_activation"};

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
/* model_fields is indexed by llama_config_field; rope_scaling, not a plain field, comes after them */
#define K_NMODEL NFIELDS(model_fields)
_Static_assert(K_NMODEL == LLAMA_CF_ROPE_SCALING, "model_fields in llama_config_field order");

static unsigned fill_defaults(llama_config *m, unsigned given, const llama_family_info *fam);

/* Every field a config file may leave out takes hf_default's value (as parsing does), then the small
 * shape. rms_norm_eps is the one chosen value: 1e-5, Llama 2/3's, which every hand-built model and the
 * references computed from them have always used (LlamaConfig's missing-key default is 1e-6). */
void llama_config_default(llama_config *m) {
    memset(m, 0, sizeof *m);
    fill_defaults(m, 0, llama_family_get(LLAMA_FAMILY_LLAMA));
    m->hidden_size = 256;
    m->intermediate_size = 704;
    m->num_hidden_layers = 4;
    m->num_attention_heads = 4;
    m->num_key_value_heads = 4;
    m->vocab_size = 256;
    m->rms_norm_eps = 1e-5;
}

/* The parameter keys of a rope_scaling object, and which types use them. */
static const struct { const char *key; unsigned types; } rope_keys[] = {
    {"factor", (1u << MP_ROPE_LINEAR) | (1u << MP_ROPE_LLAMA3)},
    {"low_freq_factor", 1u << MP_ROPE_LLAMA3},
    {"high_freq_factor", 1u << MP_ROPE_LLAMA3},
    {"original_max_position_embeddings", 1u << MP_ROPE_LLAMA3},
};
#define NROPE_KEYS (sizeof rope_keys / sizeof rope_keys[0])

/* rope_scaling / rope_parameters (transformers 5): null (*have = 0), or an object (*have = 1) whose
 * rope_type (or the older "type"; both given must agree) is "default", "linear" or "llama3", with exactly
 * the parameters that type uses (each a number, range-checked: llama_rope_scaling_check), stored in *out; in
 * rope_parameters also rope_theta (stored in *theta, *have_theta = 1). partial_rotary_factor may be 1.
 * Any other type or key changes the math or is unknown: refused naming it. */
static mp_code check_rope(const cJSON *item, const char *name, int is_params, mp_rope_scaling *out, int *have,
                          double *theta, int *have_theta, mp_err *err) {
    const char *k = item->string;
    memset(out, 0, sizeof *out);
    *have = 0;
    if (cJSON_IsNull(item)) return MP_OK;
    if (!cJSON_IsObject(item))
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected an object or null, got %s", name, k,
                          mp_json_type(item));
    /* an unknown key is refused after the type: an unsupported type's own keys (Phi-3's longrope puts
     * long_factor before "type") must not hide its name */
    const cJSON *type = NULL, *param[NROPE_KEYS] = {0}, *unknown = NULL;
    for (const cJSON *c = item->child; c; c = c->next) {
        size_t j = 0;
        while (j < NROPE_KEYS && strcmp(c->string, rope_keys[j].key)) j++;
        if (j < NROPE_KEYS) {
            if (!cJSON_IsNumber(c))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": \"%s\": expected a number, got %s", name, k,
                                  c->string, mp_json_type(c));
            param[j] = c;
        } else if (!strcmp(c->string, "rope_type") || !strcmp(c->string, "type")) {
            if (!cJSON_IsString(c))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %s: expected a string, got %s", name, k,
                                  c->string, mp_json_type(c));
            if (type && strcmp(type->valuestring, c->valuestring))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %s \"%s\" disagrees with %s \"%s\"", name, k,
                                  c->string, c->valuestring, type->string, type->valuestring);
            type = c;
        } else if (is_params && !strcmp(c->string, "rope_theta")) {
            if (!cJSON_IsNumber(c) || !(c->valuedouble > 0) || !isfinite(c->valuedouble))
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": rope_theta must be a finite number > 0", name, k);
            *theta = c->valuedouble;
            *have_theta = 1;
        } else if (!strcmp(c->string, "partial_rotary_factor")) {
            if (!cJSON_IsNumber(c) || c->valuedouble != 1.0)
                return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": only partial_rotary_factor 1 is supported",
                                  name, k);
        } else if (!unknown) {
            unknown = c;
        }
    }
    if (!type)
        return mp_err_set(err, MP_EINPUT,
                          "%s: key \"%s\": needs \"rope_type\" (\"default\", \"linear\" or \"llama3\"), or null",
                          name, k);
    const char *tn = type->valuestring;
    if (!strcmp(tn, "default")) out->type = MP_ROPE_DEFAULT;
    else if (!strcmp(tn, "linear")) out->type = MP_ROPE_LINEAR;
    else if (!strcmp(tn, "llama3")) out->type = MP_ROPE_LLAMA3;
    else
        return mp_err_set(err, MP_EINPUT,
                          "%s: key \"%s\": %s \"%s\" is not supported (supported: \"default\", \"linear\", \"llama3\")",
                          name, k, type->string, tn);
    if (unknown) return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": unsupported key \"%s\"", name, k, unknown->string);
    for (size_t j = 0; j < NROPE_KEYS; j++) {
        int used = (rope_keys[j].types >> out->type) & 1u;
        if (param[j] && !used)
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": \"%s\" is not a parameter of rope_type \"%s\"", name,
                              k, rope_keys[j].key, tn);
        if (!param[j] && used)
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": rope_type \"%s\" needs \"%s\"", name, k, tn,
                              rope_keys[j].key);
    }
    if (param[0]) out->factor = param[0]->valuedouble;
    if (param[1]) out->low_freq_factor = param[1]->valuedouble;
    if (param[2]) out->high_freq_factor = param[2]->valuedouble;
    if (param[3]) {
        int64_t v;
        if (!mp_double_to_i64(param[3]->valuedouble, 1, INT32_MAX, &v))
            return mp_err_set(err, MP_EINPUT,
                              "%s: key \"%s\": \"original_max_position_embeddings\": expected a positive 32-bit "
                              "integer, got %g", name, k, param[3]->valuedouble);
        out->original_max_position_embeddings = (int)v;
    }
    mp_code rc = llama_rope_scaling_check(out, err);
    if (rc) return mp_err_wrap(err, "%s: key \"%s\"", name, k), rc;
    *have = 1;
    return MP_OK;
}

/* What the parser learnt besides the model fields. */
typedef struct {
    const llama_family_info *fam;   /* from model_type (read_family), before the other keys */
    int head_dim;              /* -1: not given; 0: null (hidden_size / num_attention_heads) */
    int kv_null;               /* num_key_value_heads: null (= num_attention_heads whatever the family) */
    double rope_theta;         /* from rope_parameters */
    int have_rope_theta;
    mp_rope_scaling scaling[2];   /* [0] rope_scaling, [1] rope_parameters */
    int have_scaling[2];          /* given and not null */
    int32_t eos[LLAMA_MAX_EOS];   /* eos_token_id */
    int n_eos, eos_is_list;
    /* the window keys of the family (llama_family_info.window) */
    int have_window, window;   /* sliding_window given; its value (0: null) */
    int use_sliding_window;    /* LLAMA_WINDOW_QWEN */
    int max_window_layers;     /* -1: not given */
    const cJSON *layer_types;  /* NULL: not given or null */
} hf_extra;

/* One warning per key and process, from the rank that prints info lines (every rank parses the config):
 * "config X: key \"k\": why". */
static void warn_once(const char *name, const char *key, const char *why) {
    static char seen[32][64];
    static int nseen;
    for (int i = 0; i < nseen; i++)
        if (!strcmp(seen[i], key)) return;
    if (nseen < 32) snprintf(seen[nseen++], sizeof seen[0], "%s", key);
    if (mp_log_is_main()) mp_warn("config %s: key \"%s\": %s", name, key, why);
}

/* eos_token_id (an int, a list of ints, or null) into x; a malformed value is warned about and ignored,
 * as it does not change the model. Ids are range-checked against vocab_size in finish_model. */
static void read_eos(const cJSON *item, const char *name, hf_extra *x) {
    x->n_eos = 0;
    x->eos_is_list = cJSON_IsArray(item);
    if (cJSON_IsNull(item)) return;
    const cJSON *one = x->eos_is_list ? item->child : item;
    for (; one; one = x->eos_is_list ? one->next : NULL) {
        int64_t id;
        if (!cJSON_IsNumber(one) || !mp_double_to_i64(one->valuedouble, 0, INT32_MAX, &id) || x->n_eos == LLAMA_MAX_EOS) {
            warn_once(name, "eos_token_id", "expected a token id or a list of at most 16; ignored");
            x->n_eos = 0;
            return;
        }
        x->eos[x->n_eos++] = (int32_t)id;
    }
}

/* The Damerau-Levenshtein (optimal string alignment) distance between a, lowercased, and b; 99 when
 * either is longer than 63 bytes or the lengths differ by more than 2 (never near). */
static int key_distance(const char *a, const char *b) {
    int n = (int)strlen(a), m = (int)strlen(b);
    if (n > 63 || m > 63 || abs(n - m) > 2) return 99;
    int d[64][64];
    for (int i = 0; i <= n; i++) d[i][0] = i;
    for (int j = 0; j <= m; j++) d[0][j] = j;
    for (int i = 1; i <= n; i++)
        for (int j = 1; j <= m; j++) {
            char ai = (char)(a[i - 1] >= 'A' && a[i - 1] <= 'Z' ? a[i - 1] - 'A' + 'a' : a[i - 1]);
            char ap = (char)(i > 1 && a[i - 2] >= 'A' && a[i - 2] <= 'Z' ? a[i - 2] - 'A' + 'a' : i > 1 ? a[i - 2] : 0);
            int v = d[i - 1][j - 1] + (ai != b[j - 1]);
            if (d[i - 1][j] + 1 < v) v = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < v) v = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && ai == b[j - 2] && ap == b[j - 1] && d[i - 2][j - 2] + 1 < v) v = d[i - 2][j - 2] + 1;
            d[i][j] = v;
        }
    return d[n][m];
}

/* 1 if u and k have the same '_'-separated words (case aside) but for some that one shortens to a prefix
 * of at least 3 letters of the other (eps / epsilon): an abbreviated or spelt-out key. */
static int key_abbreviates(const char *u, const char *k) {
    if (!strcmp(u, k)) return 0;
    while (*u && *k) {
        size_t a = strcspn(u, "_"), b = strcspn(k, "_"), s = a < b ? a : b;
        if (a != b && (s < 3 || strncasecmp(u, k, s))) return 0;
        if (a == b && strncasecmp(u, k, a)) return 0;
        u += a;
        k += b;
        if (*u != *k) return 0;   /* one has more words */
        if (*u) u++, k++;
    }
    return !*u && !*k;
}

/* The typo rule of the top comment: how near unknown key u is to known key k; -1 if not near, else the
 * distance (an abbreviation counts as 3: a letter typo is the likelier meaning). */
static int key_nearness(const char *u, const char *k) {
    size_t len = strlen(k);
    int d = key_distance(u, k);
    if (d <= (len >= 10 ? 2 : len >= 4 ? 1 : 0)) return d;   /* (0: u differs from k in case only) */
    return strchr(k, '_') && key_abbreviates(u, k) ? 3 : -1;   /* of keys of several words only */
}

/* The known key nearest to u (NULL if none is near) and whether it is one a typo must not hide (a model
 * field or hf_checked, not a bookkeeping key) and absent from root. Ties go to an absent key with an
 * effect, so "did you mean" names what the typo would hide. */
static const char *nearest_known_key(const cJSON *root, const llama_family_info *fam, const char *u, int *hides) {
    const char *best = NULL;
    int best_d = 99;
    *hides = 0;
    size_t nfam = 0;
    while (fam->keys && fam->keys[nfam]) nfam++;
    for (int pass = 0; pass < 4; pass++) {   /* the family's own keys (pass 3) have an effect too */
        size_t n = pass == 0 ? K_NMODEL : pass == 1 ? NFIELDS(hf_checked) : pass == 2 ? NFIELDS(hf_ignored) : nfam;
        for (size_t i = 0; i < n; i++) {
            const char *k = pass == 0 ? model_fields[i].key : pass == 1 ? hf_checked[i] : pass == 2 ? hf_ignored[i]
                                                                                                    : fam->keys[i];
            int d = key_nearness(u, k);
            int h = pass != 2 && !cJSON_GetObjectItemCaseSensitive(root, k);
            if (d < 0 || d > best_d || (d == best_d && (*hides || !h))) continue;
            best = k;
            best_d = d;
            *hides = h;
        }
    }
    for (size_t i = 0; i < NFIELDS(hf_other_families); i++)
        if (!strcmp(u, hf_other_families[i])) *hides = 0;
    size_t lu = strlen(u), lt = strlen("_token_id");
    if (lu > lt && !strcmp(u + lu - lt, "_token_id")) *hides = 0;   /* eot_, eom_, eod_, sep_...: tokenizers' own */
    return best;
}

/* A top-level key none of the lists knows: an error if it looks like a typo of a key with an effect that
 * root lacks (the default would silently replace the value given), else one warning, with the near key
 * as a hint when there is one. */
static mp_code unknown_key(const cJSON *root, const llama_family_info *fam, const char *key, const char *name,
                           mp_err *err) {
    int hides;
    const char *near = nearest_known_key(root, fam, key, &hides);
    if (hides)
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": not a key of transformers' %s; did you mean %s? "
                          "(the file gives no %s: this value would be ignored)", name, key, fam->config_class, near, near);
    char why[256];
    snprintf(why, sizeof why, "not a key of transformers' %s; ignored, as transformers does%s%s%s", fam->config_class,
             near ? " (did you mean " : "", near ? near : "", near ? "?)" : "");
    warn_once(name, key, why);
    return MP_OK;
}

/* A number key that must be an integer in [lo, INT32_MAX], into *out; else MP_EINPUT naming it. */
static mp_code key_int(const cJSON *item, const char *name, int64_t lo, int *out, mp_err *err) {
    int64_t v;
    if (!cJSON_IsNumber(item) || !mp_double_to_i64(item->valuedouble, lo, INT32_MAX, &v))
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected an integer >= %lld, got %s", name, item->string,
                          (long long)lo, cJSON_IsNumber(item) ? "another number" : mp_json_type(item));
    *out = (int)v;
    return MP_OK;
}

/* A number key whose only supported value is `only` (a dropout, a partial rotary factor). */
static mp_code key_only(const cJSON *item, const char *name, double only, const char *why, mp_err *err) {
    if (!cJSON_IsNumber(item) || item->valuedouble != only)
        return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": only %g is supported (%s)", name, item->string, only, why);
    return MP_OK;
}

/* The keys of x->fam's row beyond Llama's (llama_family_info.keys): the window keys are kept in x (the
 * family's rule resolves them in apply_family, when the layer count is known); the rest must hold what
 * meshpoint computes. */
static mp_code check_family_key(const cJSON *item, const char *name, hf_extra *x, mp_err *err) {
    const char *k = item->string;
    if (!strcmp(k, "sliding_window")) {
        x->have_window = 1;
        x->window = 0;
        return cJSON_IsNull(item) ? MP_OK : key_int(item, name, 1, &x->window, err);
    }
    if (!strcmp(k, "use_sliding_window") || !strcmp(k, "use_mrope")) {
        if (!cJSON_IsBool(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true or false, got %s", name, k,
                              mp_json_type(item));
        if (!strcmp(k, "use_mrope") && cJSON_IsTrue(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"use_mrope\": true (multimodal RoPE, Qwen2-VL's) is not "
                              "supported", name);
        if (!strcmp(k, "use_sliding_window")) x->use_sliding_window = cJSON_IsTrue(item);
        return MP_OK;
    }
    if (!strcmp(k, "max_window_layers")) return key_int(item, name, 0, &x->max_window_layers, err);
    if (!strcmp(k, "layer_types")) {
        if (!cJSON_IsNull(item) && !cJSON_IsArray(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"layer_types\": expected a list or null, got %s", name,
                              mp_json_type(item));
        x->layer_types = cJSON_IsArray(item) ? item : NULL;
        return MP_OK;
    }
    if (!strcmp(k, "original_max_position_embeddings")) {   /* read by longrope only, which is refused */
        int unused;
        return key_int(item, name, 1, &unused, err);
    }
    if (!strcmp(k, "partial_rotary_factor")) return key_only(item, name, 1.0, "RoPE over part of each head is not", err);
    if (!strcmp(k, "resid_pdrop") || !strcmp(k, "embd_pdrop")) return key_only(item, name, 0.0, "no dropout", err);
    return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": not read (family table and parser disagree)", name, k);
}

/* The family of the config in root, from its model_type (none: llama, as meshpoint's own configs omit
 * it), before any other key is read: the family decides what the others mean. An unknown model_type is
 * refused naming it and the supported ones. */
static mp_code read_family(const cJSON *root, const char *name, const llama_family_info **out, mp_err *err) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(root, "model_type");
    *out = llama_family_get(LLAMA_FAMILY_LLAMA);
    if (!it) return MP_OK;
    if (cJSON_IsString(it) && (*out = llama_family_by_model_type(it->valuestring))) return MP_OK;
    return mp_err_set(err, MP_EINPUT, "%s: key \"model_type\": %s%s%s is not supported (supported: %s)", name,
                      cJSON_IsString(it) ? "\"" : "", cJSON_IsString(it) ? it->valuestring : mp_json_type(it),
                      cJSON_IsString(it) ? "\"" : "", llama_family_list());
}

/* HF keys that must hold a value meshpoint implements. */
static mp_code check_hf_constraint(const cJSON *item, const char *name, hf_extra *x, int *handled, mp_err *err) {
    const char *k = item->string;
    *handled = 1;
    if (!strcmp(k, "model_type")) {
        return MP_OK;   /* read first, by read_family */
    } else if (!strcmp(k, "architectures")) {
        if (cJSON_IsNull(item)) return MP_OK;
        if (!cJSON_IsArray(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"architectures\": expected an array, got %s", name,
                              mp_json_type(item));
        const char *want = x->fam->architecture;
        for (const cJSON *a = item->child; a; a = a->next)
            if (!cJSON_IsString(a) || strcmp(a->valuestring, want))
                return mp_err_set(err, MP_EINPUT,
                                  "%s: key \"architectures\": %s%s%s is not supported (model_type \"%s\" is only "
                                  "\"%s\")", name, cJSON_IsString(a) ? "\"" : "",
                                  cJSON_IsString(a) ? a->valuestring : mp_json_type(a), cJSON_IsString(a) ? "\"" : "",
                                  x->fam->model_type, want);
    } else if (!strcmp(k, "hidden_act")) {
        if (!cJSON_IsString(item) || strcmp(item->valuestring, "silu"))
            return mp_err_set(err, MP_EINPUT, "%s: key \"hidden_act\": only \"silu\" is supported", name);
    } else if (!strcmp(k, "attention_bias") || !strcmp(k, "mlp_bias")) {
        /* null: transformers passes bias=None to nn.Linear, i.e. no bias */
        if (!cJSON_IsBool(item) && !cJSON_IsNull(item))
            return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": expected true, false or null, got %s", name, k,
                              mp_json_type(item));
        const char *why = !strcmp(k, "mlp_bias") ? "biases are not supported" : x->fam->attention_bias_refusal;
        if (cJSON_IsTrue(item) && why) return mp_err_set(err, MP_EINPUT, "%s: key \"%s\": %s", name, k, why);
    } else if (!strcmp(k, "rope_scaling")) {
        double unused;
        int unused_have;
        return check_rope(item, name, 0, &x->scaling[0], &x->have_scaling[0], &unused, &unused_have, err);
    } else if (!strcmp(k, "rope_parameters")) {
        return check_rope(item, name, 1, &x->scaling[1], &x->have_scaling[1], &x->rope_theta, &x->have_rope_theta,
                          err);
    } else if (!strcmp(k, "pretraining_tp")) {
        /* > 1 makes transformers split each projection's matmul into slices and add them: the same
         * function, other rounding; meshpoint computes it unsplit */
        if (!cJSON_IsNumber(item) || item->valuedouble != 1.0)
            warn_once(name, k, "transformers splits the projections' matmuls for values > 1 (the same math, other "
                               "rounding); meshpoint computes them unsplit");
    } else if (!strcmp(k, "attention_dropout")) {
        if (!cJSON_IsNumber(item) || item->valuedouble != 0.0)
            return mp_err_set(err, MP_EINPUT, "%s: key \"attention_dropout\": only 0 is supported", name);
    } else if (!strcmp(k, "eos_token_id")) {
        read_eos(item, name, x);
    } else if (!strcmp(k, "head_dim")) {
        if (cJSON_IsNull(item)) { x->head_dim = 0; return MP_OK; }   /* None: hidden / heads, in every family */
        int64_t hd;
        if (!cJSON_IsNumber(item) || !mp_double_to_i64(item->valuedouble, 1, INT32_MAX, &hd))
            return mp_err_set(err, MP_EINPUT, "%s: key \"head_dim\": expected a positive 32-bit integer, got %s", name,
                              cJSON_IsNumber(item) ? "another number" : mp_json_type(item));
        x->head_dim = (int)hd;
    } else if (llama_family_has_key(x->fam, k)) {
        return check_family_key(item, name, x, err);
    } else {
        *handled = 0;
    }
    return MP_OK;
}

/* The family fields' ranges: a family of the table, a window >= 0 whose first sliding layer is a layer
 * (0 when there is no window), and a window the family's keys can say (none in Llama, every layer in
 * Mistral and Phi-3). qkv_bias and qk_norm are not tied to the family here: the parser sets them from
 * it, and a hand-built mix that config.json cannot say is caught where a config is written and read
 * back (export, resume: llama_config_diff). */
static mp_code validate_family(const llama_config *m, unsigned known, mp_err *err) {
    if ((int)m->family < 0 || m->family >= LLAMA_FAMILY_COUNT)
        return mp_err_set(err, MP_EINPUT, "family %d is not one of the table's", (int)m->family);
    const llama_family_info *f = llama_family_get(m->family);
    if (m->sliding_window < 0 || m->first_sliding_layer < 0 || (!m->sliding_window && m->first_sliding_layer))
        return mp_err_set(err, MP_EINPUT, "sliding_window %d from layer %d: not a window", m->sliding_window,
                          m->first_sliding_layer);
    if (m->sliding_window && f->window == LLAMA_WINDOW_NONE)
        return mp_err_set(err, MP_EINPUT, "sliding_window %d: model_type \"%s\" has no sliding window",
                          m->sliding_window, f->model_type);
    if (m->first_sliding_layer && f->window == LLAMA_WINDOW_ALL)
        return mp_err_set(err, MP_EINPUT, "model_type \"%s\" slides every layer or none (first_sliding_layer %d)",
                          f->model_type, m->first_sliding_layer);
    if (((known >> LLAMA_CF_NUM_HIDDEN_LAYERS) & 1u) && m->sliding_window &&
        m->first_sliding_layer >= m->num_hidden_layers)
        return mp_err_set(err, MP_EINPUT, "first_sliding_layer %d is not below num_hidden_layers (%d)",
                          m->first_sliding_layer, m->num_hidden_layers);
    return MP_OK;
}

/* Model checks; with `known` (a bit per model_fields index), only those whose fields are all known, so
 * that a config is first told about what it says wrong, then about what it omits. */
static mp_code validate_model(const llama_config *m, unsigned known, mp_err *err) {
#define KNOWN(F) ((known >> LLAMA_CF_##F) & 1u)
#define POS(F, k) if (KNOWN(F) && m->k <= 0) return mp_err_set(err, MP_EINPUT, "key \"" #k "\": must be > 0, got %d", m->k)
    POS(HIDDEN_SIZE, hidden_size); POS(INTERMEDIATE_SIZE, intermediate_size); POS(NUM_HIDDEN_LAYERS, num_hidden_layers);
    POS(NUM_ATTENTION_HEADS, num_attention_heads); POS(NUM_KEY_VALUE_HEADS, num_key_value_heads);
    POS(VOCAB_SIZE, vocab_size); POS(MAX_POSITION_EMBEDDINGS, max_position_embeddings);
#undef POS
    if (m->head_dim < 0) return mp_err_set(err, MP_EINPUT, "key \"head_dim\": must be > 0, got %d", m->head_dim);
    if (m->head_dim % 2)
        return mp_err_set(err, MP_EINPUT, "key \"head_dim\": %d must be even (RoPE)", m->head_dim);
    if (KNOWN(HIDDEN_SIZE) && KNOWN(NUM_ATTENTION_HEADS) && !m->head_dim) {   /* head_dim = hidden / heads */
        if (m->hidden_size % m->num_attention_heads)
            return mp_err_set(err, MP_EINPUT, "hidden_size (%d) is not divisible by num_attention_heads (%d)",
                              m->hidden_size, m->num_attention_heads);
        if (llama_head_dim(m) % 2)
            return mp_err_set(err, MP_EINPUT, "head dim hidden_size/num_attention_heads = %d must be even (RoPE)",
                              llama_head_dim(m));
    }
    MP_TRY(validate_family(m, known, err));
    if (KNOWN(NUM_ATTENTION_HEADS) && KNOWN(NUM_KEY_VALUE_HEADS) && m->num_attention_heads % m->num_key_value_heads)
        return mp_err_set(err, MP_EINPUT,
                          "num_attention_heads (%d) is not divisible by num_key_value_heads (%d)",
                          m->num_attention_heads, m->num_key_value_heads);
    if (KNOWN(NUM_HIDDEN_LAYERS) && m->num_hidden_layers > LLAMA_CONFIG_MAX_LAYERS)
        return mp_err_set(err, MP_EINPUT, "key \"num_hidden_layers\": %d is above the limit of %d layers",
                          m->num_hidden_layers, LLAMA_CONFIG_MAX_LAYERS);
    if (KNOWN(HIDDEN_SIZE) && KNOWN(INTERMEDIATE_SIZE) && KNOWN(NUM_HIDDEN_LAYERS) && KNOWN(NUM_ATTENTION_HEADS) &&
        KNOWN(NUM_KEY_VALUE_HEADS) && KNOWN(VOCAB_SIZE)) {
        int64_t np = llama_config_num_params(m);
        if (np < 0 || np > LLAMA_CONFIG_MAX_PARAMS)
            return mp_err_set(err, MP_EINPUT,
                              "the model's shape (hidden_size %d, intermediate_size %d, num_hidden_layers %d, "
                              "vocab_size %d) has too many parameters to count in 64 bits", m->hidden_size,
                              m->intermediate_size, m->num_hidden_layers, m->vocab_size);
    }
#undef KNOWN
    if (!(m->rms_norm_eps > 0) || !isfinite(m->rms_norm_eps))
        return mp_err_set(err, MP_EINPUT, "key \"rms_norm_eps\": must be a finite number > 0, got %g", m->rms_norm_eps);
    if (!(m->rope_theta > 0) || !isfinite(m->rope_theta))
        return mp_err_set(err, MP_EINPUT, "key \"rope_theta\": must be a finite number > 0, got %g", m->rope_theta);
    if (!(m->initializer_range >= 0) || !isfinite(m->initializer_range))
        return mp_err_set(err, MP_EINPUT, "key \"initializer_range\": must be a finite number >= 0, got %g",
                          m->initializer_range);
    mp_code rc = llama_rope_scaling_check(&m->rope_scaling, err);
    if (rc) return mp_err_wrap(err, "key \"rope_scaling\""), rc;
    return MP_OK;
}

/* The default of model field i when the key is missing, as the family's config class has it; NAN:
 * required. num_key_value_heads is apply_family's. */
static double hf_default_of(const llama_family_info *fam, size_t i) {
    if (i == LLAMA_CF_MAX_POSITION_EMBEDDINGS) return fam->default_max_pos;
    if (i == LLAMA_CF_RMS_NORM_EPS) return fam->default_rms_norm_eps;
    return hf_default[i];
}

/* layer_types (Qwen): "full_attention" (or the older "attention") layers, then "sliding_attention" ones,
 * one per layer (L, < 0: unknown yet); *first = the first sliding layer (L: none). Another order or
 * type is refused naming it: meshpoint's window starts at one layer and covers the rest. */
static mp_code read_layer_types(const cJSON *lt, int L, const char *name, int *first, mp_err *err) {
    int n = cJSON_GetArraySize(lt), i = 0;
    if (L >= 0 && n != L)
        return mp_err_set(err, MP_EINPUT, "%s: key \"layer_types\": %d entries for %d layers", name, n, L);
    *first = n;
    for (const cJSON *t = lt->child; t; t = t->next, i++) {
        const char *v = cJSON_IsString(t) ? t->valuestring : "";
        int sliding = !strcmp(v, "sliding_attention");
        if (!sliding && strcmp(v, "full_attention") && strcmp(v, "attention"))
            return mp_err_set(err, MP_EINPUT, "%s: key \"layer_types\": layer %d: %s%s%s is not supported (only "
                              "\"full_attention\" and \"sliding_attention\")", name, i, cJSON_IsString(t) ? "\"" : "",
                              cJSON_IsString(t) ? v : mp_json_type(t), cJSON_IsString(t) ? "\"" : "");
        if (sliding && *first == n) *first = i;
        if (!sliding && *first < n)
            return mp_err_set(err, MP_EINPUT, "%s: key \"layer_types\": layer %d is \"%s\" after sliding layer %d: "
                              "only full layers, then sliding layers, are supported", name, i, v, *first);
    }
    return MP_OK;
}

/* The family's window rule (llama_family_info.window) over the keys x kept: m->sliding_window and
 * m->first_sliding_layer, 0 and 0 when no layer slides. Qwen: transformers' Qwen2Config.__post_init__
 * (no window unless use_sliding_window; layers i >= max_window_layers slide, or those layer_types says). */
static mp_code resolve_window(llama_config *m, int L, const hf_extra *x, const char *name, mp_err *err) {
    const llama_family_info *f = x->fam;
    int w = x->have_window ? x->window : f->default_window;
    m->sliding_window = m->first_sliding_layer = 0;
    if (f->window == LLAMA_WINDOW_ALL) m->sliding_window = w;
    if (f->window != LLAMA_WINDOW_QWEN) return MP_OK;
    int first = x->max_window_layers >= 0 ? x->max_window_layers : f->default_max_window_layers;
    if (x->layer_types) MP_TRY(read_layer_types(x->layer_types, L, name, &first, err));
    int on = x->use_sliding_window && w;
    if (!on && x->layer_types && first < cJSON_GetArraySize(x->layer_types))
        return mp_err_set(err, MP_EINPUT, "%s: key \"layer_types\": layer %d is \"sliding_attention\" but %s", name,
                          first, x->use_sliding_window ? "sliding_window is null" : "use_sliding_window is false");
    if (on && (L < 0 || first < L)) {
        m->sliding_window = w;
        m->first_sliding_layer = first;
    }
    return MP_OK;
}

/* What the family sets: its flags, num_key_value_heads when missing (*known gains it), head_dim (0 when
 * it is hidden_size / num_attention_heads), the window. */
static mp_code apply_family(llama_config *m, unsigned *known, const hf_extra *x, const char *name, mp_err *err) {
    const llama_family_info *f = x->fam;
    m->family = f->family;
    m->qkv_bias = f->qkv_bias;
    m->qk_norm = f->qk_norm;
    const unsigned kv = LLAMA_CF_BIT(LLAMA_CF_NUM_KEY_VALUE_HEADS), heads = LLAMA_CF_BIT(LLAMA_CF_NUM_ATTENTION_HEADS);
    const unsigned hidden = LLAMA_CF_BIT(LLAMA_CF_HIDDEN_SIZE), layers = LLAMA_CF_BIT(LLAMA_CF_NUM_HIDDEN_LAYERS);
    if (!(*known & kv) && f->default_kv_heads && !x->kv_null) {   /* a missing key: the class default */
        m->num_key_value_heads = f->default_kv_heads;
        *known |= kv;
    } else if (!(*known & kv) && (*known & heads)) {   /* None: multi-head attention */
        m->num_key_value_heads = m->num_attention_heads;
        *known |= kv;
    }
    m->head_dim = x->head_dim >= 0 ? x->head_dim : f->default_head_dim;
    if ((*known & hidden) && (*known & heads) && m->num_attention_heads > 0 &&   /* 0: validate_model says so */
        m->hidden_size % m->num_attention_heads == 0 &&
        m->head_dim == m->hidden_size / m->num_attention_heads)
        m->head_dim = 0;   /* one spelling per model: llama_config_diff compares it */
    return resolve_window(m, (*known & layers) ? m->num_hidden_layers : -1, x, name, err);
}

/* Sets every model field not in the bit set `given` that has a default (hf_default_of: the family's
 * config class) to it; returns given plus the fields set. Required fields and num_key_value_heads
 * (apply_family's) are left as they are. The one place a missing key gets its meaning. */
static unsigned fill_defaults(llama_config *m, unsigned given, const llama_family_info *fam) {
    unsigned known = given;
    for (size_t i = 0; i < K_NMODEL; i++) {
        if ((given >> i) & 1u) continue;
        double d = hf_default_of(fam, i);
        if (i == LLAMA_CF_NUM_KEY_VALUE_HEADS || isnan(d)) continue;
        const mp_field *f = &model_fields[i];
        char *p = (char *)m + f->off;
        if (f->kind == MP_FIELD_DBL) *(double *)p = d;
        else *(int *)p = (int)d;
        known |= 1u << i;
    }
    return known;
}

/* Fields of the model config: given, defaulted as the family's config class does, or missing (required). */
static mp_code finish_model(llama_config *m, const unsigned given, const hf_extra *x, const char *name,
                            mp_err *err) {
    unsigned known = fill_defaults(m, given, x->fam);
    if (x->have_rope_theta) {
        if (((given >> LLAMA_CF_ROPE_THETA) & 1u) && m->rope_theta != x->rope_theta)
            return mp_err_set(err, MP_EINPUT, "%s: key \"rope_theta\" (%g) disagrees with rope_parameters.rope_theta (%g)",
                              name, m->rope_theta, x->rope_theta);
        m->rope_theta = x->rope_theta;
    }
    if (x->have_scaling[0] && x->have_scaling[1] && !llama_rope_scaling_equal(&x->scaling[0], &x->scaling[1])) {
        char a[256], b[256];
        llama_rope_scaling_describe(&x->scaling[0], a, sizeof a);
        llama_rope_scaling_describe(&x->scaling[1], b, sizeof b);
        return mp_err_set(err, MP_EINPUT, "%s: key \"rope_scaling\" (%s) disagrees with rope_parameters (%s)", name,
                          a, b);
    }
    memset(&m->rope_scaling, 0, sizeof m->rope_scaling);
    if (x->have_scaling[1]) m->rope_scaling = x->scaling[1];
    else if (x->have_scaling[0]) m->rope_scaling = x->scaling[0];
    MP_TRY(apply_family(m, &known, x, name, err));
    mp_code rc = validate_model(m, known, err);
    if (rc) return mp_err_wrap(err, "%s", name), rc;
    char missing[512] = "";
    size_t at = 0;
    int nmiss = 0;
    for (size_t i = 0; i < K_NMODEL; i++)
        if (!((known >> i) & 1u) && i != LLAMA_CF_NUM_KEY_VALUE_HEADS && at < sizeof missing) {
            at += (size_t)snprintf(missing + at, sizeof missing - at, "%s\"%s\"", nmiss ? ", " : "", model_fields[i].key);
            nmiss++;
        }
    if (nmiss)
        return mp_err_set(err, MP_EINPUT, "%s: key%s %s %s required (the model's shape has no default)", name,
                          nmiss > 1 ? "s" : "", missing, nmiss > 1 ? "are" : "is");
    if ((rc = llama_config_validate(m, err))) return mp_err_wrap(err, "%s", name), rc;
    m->n_eos = 0;
    m->eos_is_list = x->eos_is_list;
    for (int i = 0; i < x->n_eos; i++) {
        if (x->eos[i] < m->vocab_size) m->eos_token_id[m->n_eos++] = x->eos[i];
        else warn_once(name, "eos_token_id", "an id at or above vocab_size is dropped");
    }
    return MP_OK;
}

mp_code llama_config_parse(const char *text, const char *name, llama_config *m_out, mp_train_config *t_out,
                           mp_err *err) {
    llama_config m;
    mp_train_config t;
    memset(&m, 0, sizeof m);   /* from the JSON alone: a missing key means hf_default's value (finish_model) */
    mp_train_config_default(&t);
    if (t_out) t = *t_out;
    cJSON *root;
    MP_TRY(mp_json_parse(text, name, &root, err));
    mp_code rc = MP_OK;
    if (!cJSON_IsObject(root)) {
        rc = mp_err_set(err, MP_EINPUT, "%s: expected a JSON object at the top level", name);
        goto out;
    }
    unsigned given = 0;
    hf_extra x = {.head_dim = -1, .max_window_layers = -1};
    if ((rc = read_family(root, name, &x.fam, err))) goto out;
    for (cJSON *it = root->child; it; it = it->next) {
        const mp_field *f = mp_field_find(model_fields, NFIELDS(model_fields), it->string);
        if (f) {
            /* num_key_value_heads: null is LlamaConfig's None (= num_attention_heads) */
            if (f == &model_fields[LLAMA_CF_NUM_KEY_VALUE_HEADS] && cJSON_IsNull(it)) {
                given &= ~LLAMA_CF_BIT(LLAMA_CF_NUM_KEY_VALUE_HEADS);
                x.kv_null = 1;
                continue;
            }
            if ((rc = mp_field_set(&m, f, it, name, err))) goto out;
            given |= 1u << (unsigned)(f - model_fields);
            continue;
        }
        if (!strcmp(it->string, "train")) {
            if ((rc = mp_train_config_apply_json(it, name, &t, err))) goto out;
            continue;
        }
        int handled = 0;
        if ((rc = check_hf_constraint(it, name, &x, &handled, err))) goto out;
        if (handled) continue;
        int ignored = 0;
        for (size_t i = 0; i < NFIELDS(hf_ignored); i++) ignored |= !strcmp(hf_ignored[i], it->string);
        if (!ignored && (rc = unknown_key(root, x.fam, it->string, name, err))) goto out;
    }
    if ((rc = finish_model(&m, given, &x, name, err))) goto out;
    if ((rc = mp_train_config_check_fields(&t, err))) { mp_err_wrap(err, "%s: train", name); goto out; }
    if (m_out) *m_out = m;
    if (t_out) *t_out = t;
out:
    cJSON_Delete(root);
    return rc;
}

mp_code llama_config_load(const char *path, llama_config *m, mp_train_config *t, mp_err *err) {
    char *text;
    /* as a stream: `--config <(...)` and /dev/stdin have no size to ask for */
    if (mp_read_text(path, (size_t)1 << 24, &text, NULL, err)) return mp_err_wrap(err, "config");
    mp_code rc = llama_config_parse(text, path, m, t, err);
    free(text);
    return rc;
}

mp_code llama_config_validate(const llama_config *m, mp_err *err) {
    return validate_model(m, ~0u, err);
}

mp_code llama_config_validate_pair(const llama_config *m, const mp_train_config *t, mp_err *err) {
    if (t->seq_len > m->max_position_embeddings)
        return mp_err_set(err, MP_EINPUT,
                          "seq_len (--seq-len, %d) is above max_position_embeddings (%d), the longest sequence of "
                          "the model config", t->seq_len, m->max_position_embeddings);
    return MP_OK;
}

/* The keys of m's family beyond Llama's that say its window (Mistral and Phi-3: sliding_window for every
 * layer, null for none; Qwen: use_sliding_window, sliding_window and max_window_layers, which
 * Qwen2Config turns back into the same layer_types). Llama has none (its text stays as it was). */
static void family_keys_to_json(cJSON *o, const llama_config *m) {
    const llama_family_info *f = llama_family_get(m->family);
    if (f->window == LLAMA_WINDOW_QWEN) cJSON_AddBoolToObject(o, "use_sliding_window", m->sliding_window > 0);
    if (f->window != LLAMA_WINDOW_NONE) {
        if (m->sliding_window) mp_json_add_exact_int(o, "sliding_window", m->sliding_window);
        else cJSON_AddNullToObject(o, "sliding_window");
    }
    if (f->window == LLAMA_WINDOW_QWEN && m->sliding_window)
        mp_json_add_exact_int(o, "max_window_layers", m->first_sliding_layer);
    /* a class default pad_token_id is the embedding's padding_idx, which transformers refuses outside the
     * vocabulary: say "none" for a vocabulary that small (pad ids are not kept) */
    if (f->default_pad_token_id && m->vocab_size <= f->default_pad_token_id) cJSON_AddNullToObject(o, "pad_token_id");
}

char *llama_config_to_json(const llama_config *m) {
    const llama_family_info *f = llama_family_get(m->family);
    cJSON *o = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(o, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString(f->architecture));
    cJSON_AddStringToObject(o, "model_type", f->model_type);
    cJSON_AddStringToObject(o, "hidden_act", "silu");
    /* the bias keys of the classes that read them (Llama's text as before the families) */
    if (f->writes & LLAMA_WRITES_ATTENTION_BIAS) cJSON_AddBoolToObject(o, "attention_bias", 0);
    if (f->writes & LLAMA_WRITES_MLP_BIAS) cJSON_AddBoolToObject(o, "mlp_bias", 0);
    if (m->rope_scaling.type == MP_ROPE_DEFAULT) {
        cJSON_AddNullToObject(o, "rope_scaling");
    } else {   /* the key order of the Llama 3.x config.json files */
        const mp_rope_scaling *rs = &m->rope_scaling;
        cJSON *r = cJSON_AddObjectToObject(o, "rope_scaling");
        mp_json_add_exact_double(r, "factor", rs->factor);
        if (rs->type == MP_ROPE_LLAMA3) {
            mp_json_add_exact_double(r, "low_freq_factor", rs->low_freq_factor);
            mp_json_add_exact_double(r, "high_freq_factor", rs->high_freq_factor);
            mp_json_add_exact_int(r, "original_max_position_embeddings", rs->original_max_position_embeddings);
        }
        cJSON_AddStringToObject(r, "rope_type", llama_rope_type_name(rs->type));
    }
    cJSON_AddNumberToObject(o, "head_dim", llama_head_dim(m));
    for (size_t i = 0; i < NFIELDS(model_fields); i++) mp_field_to_json(o, &model_fields[i], m);
    family_keys_to_json(o, m);
    if (m->n_eos == 1 && !m->eos_is_list) {
        mp_json_add_exact_int(o, "eos_token_id", m->eos_token_id[0]);
    } else if (m->n_eos) {
        cJSON *e = cJSON_AddArrayToObject(o, "eos_token_id");
        for (int i = 0; i < m->n_eos; i++) cJSON_AddItemToArray(e, cJSON_CreateNumber(m->eos_token_id[i]));
    }
    cJSON_AddStringToObject(o, "torch_dtype", "float32");
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

/* a * b + c for a, b, c >= 0, saturated at INT64_MAX. */
static int64_t mul_add_sat(int64_t a, int64_t b, int64_t c) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return INT64_MAX;
    return r;
}

/* The count of (unpadded) parameters: embedding, per layer two norms, q/k/v/o and the three MLP
 * matrices (with head_dim, which may differ from hidden/heads), the q/k/v biases and the q/k norms when
 * the config has them, the final norm and lm_head unless tied: the sum over llama_tensor_specs. Saturates
 * at INT64_MAX (so a shape whose count overflows compares as too large instead of wrapping negative); -1
 * for a shape that is not positive. */
int64_t llama_config_num_params(const llama_config *m) {
    int64_t D = m->hidden_size, I = m->intermediate_size, V = m->vocab_size;
    int64_t H = m->num_attention_heads, KV = m->num_key_value_heads, L = m->num_hidden_layers;
    if (D <= 0 || I <= 0 || V <= 0 || H <= 0 || KV <= 0 || L < 0 || m->head_dim < 0) return -1;
    int64_t hd = llama_head_dim(m);
    int64_t qo = mul_add_sat(2 * H, hd, 0);                  /* q and o: H*hd rows (cols) each */
    int64_t kv = mul_add_sat(2 * KV, hd, 0);                 /* k and v */
    int64_t per_layer = mul_add_sat(D, qo, 0);
    per_layer = mul_add_sat(D, kv, per_layer);
    if (m->qkv_bias) per_layer = mul_add_sat(H + 2 * KV, hd, per_layer);   /* q, k, v biases */
    if (m->qk_norm) per_layer = mul_add_sat(2, hd, per_layer);            /* q_norm, k_norm */
    per_layer = mul_add_sat(3 * D, I, per_layer);
    per_layer = mul_add_sat(2, D, per_layer);                /* the two norms */
    int64_t n = mul_add_sat(L, per_layer, D);                /* layers and the final norm */
    n = mul_add_sat(m->tie_word_embeddings ? 1 : 2, mul_add_sat(V, D, 0), n);
    return n;
}

/* The effective head dim, 0 for a config without heads (a hand-built one: llama_config_diff never divides by 0). */
static int head_dim_of(const llama_config *c) { return c->num_attention_heads > 0 ? llama_head_dim(c) : c->head_dim; }

/* The integer family fields by llama_config_field (LLAMA_CF_HEAD_DIM .. LLAMA_CF_FIRST_SLIDING_LAYER). */
static int family_field(const llama_config *c, llama_config_field f) {
    switch (f) {
    case LLAMA_CF_HEAD_DIM: return head_dim_of(c);
    case LLAMA_CF_QKV_BIAS: return c->qkv_bias;
    case LLAMA_CF_QK_NORM: return c->qk_norm;
    case LLAMA_CF_SLIDING_WINDOW: return c->sliding_window;
    case LLAMA_CF_FIRST_SLIDING_LAYER: return c->first_sliding_layer;
    default: assert(0); return 0;
    }
}

unsigned llama_config_diff(const llama_config *a, const llama_config *b, unsigned may_differ) {
    unsigned d = 0;
    for (size_t i = 0; i < K_NMODEL; i++)
        if (!mp_field_equal(&model_fields[i], a, b)) d |= LLAMA_CF_BIT(i);
    if (!llama_rope_scaling_equal(&a->rope_scaling, &b->rope_scaling)) d |= LLAMA_CF_BIT(LLAMA_CF_ROPE_SCALING);
    if (a->family != b->family) d |= LLAMA_CF_BIT(LLAMA_CF_FAMILY);
    for (llama_config_field f = LLAMA_CF_HEAD_DIM; f < LLAMA_CF_COUNT; f++)
        if (family_field(a, f) != family_field(b, f)) d |= LLAMA_CF_BIT(f);
    return d & ~may_differ;
}

const char *llama_config_field_name(llama_config_field f) {
    static const char *const family_names[] = {"model_type", "head_dim", "qkv_bias", "qk_norm", "sliding_window",
                                               "first_sliding_layer"};
    _Static_assert(sizeof family_names / sizeof *family_names == LLAMA_CF_COUNT - LLAMA_CF_FAMILY, "one per field");
    assert(f >= 0 && f < LLAMA_CF_COUNT);
    if (f >= LLAMA_CF_FAMILY) return family_names[f - LLAMA_CF_FAMILY];
    return f == LLAMA_CF_ROPE_SCALING ? "rope_scaling" : model_fields[f].key;
}

void llama_config_field_format(const llama_config *c, llama_config_field f, char *buf, size_t cap) {
    assert(f >= 0 && f < LLAMA_CF_COUNT);
    if (f == LLAMA_CF_ROPE_SCALING) llama_rope_scaling_describe(&c->rope_scaling, buf, cap);
    else if (f == LLAMA_CF_FAMILY)
        snprintf(buf, cap, "%s", (int)c->family >= 0 && c->family < LLAMA_FAMILY_COUNT ?
                 llama_family_get(c->family)->model_type : "?");
    else if (f == LLAMA_CF_SLIDING_WINDOW && !c->sliding_window) snprintf(buf, cap, "none");
    else if (f > LLAMA_CF_FAMILY) snprintf(buf, cap, "%d", family_field(c, f));
    else mp_field_format(&model_fields[f], c, buf, cap);
}
