/*
 * layers/llama_config_keys.c — the top-level keys of a config file that are not model fields: which
 * are accepted silently (hf_ignored), which a typo must not hide, and the typo rule itself.
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
#include "layers/llama_config_impl.h"
#include "core/log.h"
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NFIELDS(a) (sizeof(a) / sizeof((a)[0]))
#define K_NMODEL LLAMA_CF_ROPE_SCALING   /* the plain model fields (llama_config.c's model_fields) */

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
            const char *k = pass == 0   ? llama_config_field_name((llama_config_field)i)
                            : pass == 1 ? hf_checked[i]
                            : pass == 2 ? hf_ignored[i]
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
    llama_cfg_warn_once(name, key, why);
    return MP_OK;
}

/* A key parse found in no other list: silent when hf_ignored has it, else unknown_key's rule. */
mp_code llama_cfg_other_key(const cJSON *root, const llama_family_info *fam, const char *key, const char *name,
                            mp_err *err) {
    int ignored = 0;
    for (size_t i = 0; i < NFIELDS(hf_ignored); i++) ignored |= !strcmp(hf_ignored[i], key);
    return ignored ? MP_OK : unknown_key(root, fam, key, name, err);
}
