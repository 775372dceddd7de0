/*
 * tests/test_family_config.c — config.json of every family of the table (layers/family.h) through
 * layers/llama_config.c: the family's defaults for missing keys (as transformers 5.24's config classes
 * have them; tests/python/family_config.py checks the same against transformers itself), each refusal
 * naming its key, the published files of tests/data/hf_configs, the JSON round trip, and
 * llama_config_diff over the family fields.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/llama_config.h"
#include "testutil.h"

/* 32 heads, so that every family's default num_key_value_heads (8, 32) divides them. */
#define SHAPE "\"hidden_size\": 256, \"intermediate_size\": 128, \"num_hidden_layers\": 4, " \
              "\"num_attention_heads\": 32, \"vocab_size\": 256"

static mp_code parse(const char *text, llama_config *m, mp_err *e) {
    llama_config_default(m);
    mp_err_clear(e);
    return llama_config_parse(text, "f.json", m, NULL, e);
}

static mp_code parse_family(const char *model_type, const char *extra, llama_config *m, mp_err *e) {
    char text[2048];
    snprintf(text, sizeof text, "{" SHAPE ", \"model_type\": \"%s\"%s%s}", model_type, *extra ? ", " : "", extra);
    return parse(text, m, e);
}

Test(family_config, missing_keys_take_the_family_defaults) {
    static const struct {
        const char *type;
        llama_family fam;
        int kv, max_pos, head_dim, window, qkv_bias, qk_norm;
        double eps;
    } want[] = {
        {"llama", LLAMA_FAMILY_LLAMA, 32, 2048, 0, 0, 0, 0, 1e-6},
        {"mistral", LLAMA_FAMILY_MISTRAL, 8, 131072, 0, 4096, 0, 0, 1e-6},
        {"qwen2", LLAMA_FAMILY_QWEN2, 32, 32768, 0, 0, 1, 0, 1e-6},
        {"qwen3", LLAMA_FAMILY_QWEN3, 32, 32768, 128, 0, 0, 1, 1e-6},
        {"phi3", LLAMA_FAMILY_PHI3, 32, 4096, 0, 0, 0, 0, 1e-5},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_family(want[i].type, "", &m, &e), MP_OK, "%s: %s", want[i].type, e.msg);
        cr_assert(m.family == want[i].fam && m.num_key_value_heads == want[i].kv &&
                      m.max_position_embeddings == want[i].max_pos && m.head_dim == want[i].head_dim &&
                      m.sliding_window == want[i].window && m.first_sliding_layer == 0 &&
                      m.qkv_bias == want[i].qkv_bias && m.qk_norm == want[i].qk_norm && m.rms_norm_eps == want[i].eps &&
                      m.rope_theta == 10000.0 && !m.tie_word_embeddings,
                  "%s: family %d kv %d max_pos %d head_dim %d window %d bias %d norm %d eps %g", want[i].type,
                  (int)m.family, m.num_key_value_heads, m.max_position_embeddings, m.head_dim, m.sliding_window,
                  m.qkv_bias, m.qk_norm, m.rms_norm_eps);
    }
    /* null num_key_value_heads is num_attention_heads in every family; head_dim null is hidden / heads */
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_family("mistral", "\"num_key_value_heads\": null, \"sliding_window\": null", &m, &e), MP_OK, "%s", e.msg);
    cr_assert(m.num_key_value_heads == 32 && m.sliding_window == 0);
    cr_assert_eq(parse_family("qwen3", "\"head_dim\": null", &m, &e), MP_OK, "%s", e.msg);
    cr_assert(m.head_dim == 0 && llama_head_dim(&m) == 8);
    /* head_dim given as hidden / heads is stored as 0 (one spelling); another even value is kept */
    cr_assert_eq(parse_family("llama", "\"head_dim\": 8", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.head_dim, 0);
    cr_assert_eq(parse_family("mistral", "\"head_dim\": 64", &m, &e), MP_OK, "%s", e.msg);
    cr_assert(m.head_dim == 64 && llama_head_dim(&m) == 64);
    /* an explicit head_dim lifts hidden % heads */
    cr_assert_eq(parse("{\"hidden_size\": 100, \"intermediate_size\": 64, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 8, \"vocab_size\": 64, \"head_dim\": 16}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(llama_head_dim(&m), 16);
}

/* Which layers slide: Mistral and Phi-3 every layer once sliding_window is set; Qwen only with
 * use_sliding_window, from max_window_layers or as layer_types says. */
Test(family_config, window_keys_follow_the_family) {
    static const struct {
        const char *type, *extra;
        int window, first;
    } c[] = {
        {"mistral", "\"sliding_window\": 4096", 4096, 0},
        {"mistral", "\"sliding_window\": 16", 16, 0},
        {"phi3", "\"sliding_window\": 2047", 2047, 0},
        {"phi3", "\"sliding_window\": null", 0, 0},
        {"qwen2", "\"sliding_window\": 64, \"max_window_layers\": 2", 0, 0},   /* use_sliding_window false */
        {"qwen2", "\"use_sliding_window\": true, \"sliding_window\": 64, \"max_window_layers\": 2", 64, 2},
        {"qwen2", "\"use_sliding_window\": true, \"max_window_layers\": 1", 4096, 1},
        {"qwen2", "\"use_sliding_window\": true", 0, 0},   /* max_window_layers 28 >= 4 layers: none slides */
        {"qwen2", "\"use_sliding_window\": true, \"sliding_window\": null, \"max_window_layers\": 0", 0, 0},
        {"qwen3", "\"use_sliding_window\": true, \"sliding_window\": 32, \"max_window_layers\": 0, \"layer_types\": "
                  "[\"full_attention\", \"sliding_attention\", \"sliding_attention\", \"sliding_attention\"]", 32, 1},
        {"qwen3", "\"layer_types\": [\"full_attention\", \"attention\", \"full_attention\", \"full_attention\"]", 0, 0},
        {"llama", "\"sliding_window\": 16, \"use_sliding_window\": true", 0, 0},   /* LlamaConfig ignores them */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_family(c[i].type, c[i].extra, &m, &e), MP_OK, "%s %s: %s", c[i].type, c[i].extra, e.msg);
        cr_assert(m.sliding_window == c[i].window && m.first_sliding_layer == c[i].first,
                  "%s %s: window %d from layer %d", c[i].type, c[i].extra, m.sliding_window, m.first_sliding_layer);
        for (int l = 0; l < m.num_hidden_layers; l++)
            cr_assert_eq(llama_layer_window(&m, l), l >= c[i].first ? c[i].window : 0);
    }
}

/* What meshpoint does not compute is refused, naming the key (and the value or the rule). */
Test(family_config, refusals_name_the_key) {
    static const struct { const char *type, *extra, *want; } c[] = {
        {"qwen3", "\"attention_bias\": true", "\"attention_bias\": Qwen3 then adds biases to q_proj, k_proj, v_proj and o_proj"},
        {"mistral", "\"attention_bias\": true", "\"attention_bias\": biases are not supported"},
        {"phi3", "\"attention_bias\": true", "\"attention_bias\": biases are not supported"},
        {"llama", "\"attention_bias\": true", "\"attention_bias\": biases are not supported"},
        {"qwen2", "\"mlp_bias\": true", "\"mlp_bias\": biases are not supported"},
        {"qwen2", "\"use_mrope\": true", "\"use_mrope\": true"},
        {"qwen2", "\"use_sliding_window\": 1", "\"use_sliding_window\": expected true or false"},
        {"qwen3", "\"layer_types\": [\"sliding_attention\", \"full_attention\", \"full_attention\", \"full_attention\"]",
         "\"layer_types\": layer 1 is \"full_attention\" after sliding layer 0"},
        {"qwen3", "\"use_sliding_window\": true, \"layer_types\": [\"full_attention\", \"linear_attention\", "
                  "\"full_attention\", \"full_attention\"]", "\"layer_types\": layer 1: \"linear_attention\" is not supported"},
        {"qwen2", "\"layer_types\": [\"full_attention\"]", "\"layer_types\": 1 entries for 4 layers"},
        {"qwen2", "\"layer_types\": [\"full_attention\", \"full_attention\", \"full_attention\", \"sliding_attention\"]",
         "\"layer_types\": layer 3 is \"sliding_attention\" but use_sliding_window is false"},
        {"qwen2", "\"max_window_layers\": -1", "\"max_window_layers\": expected an integer >= 0"},
        {"mistral", "\"sliding_window\": 0", "\"sliding_window\": expected an integer >= 1"},
        {"mistral", "\"sliding_window\": \"4096\"", "\"sliding_window\": expected an integer >= 1, got a string"},
        {"phi3", "\"partial_rotary_factor\": 0.5", "\"partial_rotary_factor\": only 1 is supported"},
        {"phi3", "\"resid_pdrop\": 0.1", "\"resid_pdrop\": only 0 is supported"},
        {"phi3", "\"embd_pdrop\": 0.1", "\"embd_pdrop\": only 0 is supported"},
        {"phi3", "\"attention_dropout\": 0.1", "\"attention_dropout\": only 0"},
        {"phi3", "\"original_max_position_embeddings\": 0", "\"original_max_position_embeddings\": expected an integer"},
        {"phi3", "\"rope_scaling\": {\"type\": \"longrope\", \"short_factor\": [1], \"long_factor\": [1]}", "rope_scaling"},
        {"phi3", "\"rope_scaling\": {\"rope_type\": \"su\"}", "\"su\" is not supported"},
        {"qwen2", "\"architectures\": [\"Qwen2ForSequenceClassification\"]", "model_type \"qwen2\" is only \"Qwen2ForCausalLM\""},
        {"qwen3", "\"head_dim\": 127", "\"head_dim\": 127 must be even"},
        {"qwen3", "\"max_window_layer\": 3", "did you mean max_window_layers?"},   /* the typo rule knows family keys */
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_family(c[i].type, c[i].extra, &m, &e), MP_EINPUT, "%s %s accepted", c[i].type, c[i].extra);
        cr_assert(strstr(e.msg, c[i].want) && strstr(e.msg, "f.json"), "%s %s: \"%s\"", c[i].type, c[i].extra, e.msg);
    }
    /* Qwen2's attention_bias has no effect (its q/k/v biases are always there) */
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_family("qwen2", "\"attention_bias\": true", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.qkv_bias, 1);
    /* the key of another family is an unknown key here: warned about, no effect */
    cr_assert_eq(parse_family("mistral", "\"use_sliding_window\": true, \"embd_pdrop\": 0.5", &m, &e), MP_OK, "%s", e.msg);
}

/* The published files of each family (tests/data/hf_configs, SOURCES.md) read as the model they describe. */
Test(family_config, published_configs_read_as_their_family) {
    static const struct {
        const char *file;
        llama_family fam;
        int hidden, layers, heads, kv, vocab, max_pos, tied, head_dim, window, first, qkv_bias, qk_norm, eos;
    } want[] = {
        {"mistral-7b-v0.3.json", LLAMA_FAMILY_MISTRAL, 4096, 32, 32, 8, 32768, 32768, 0, 128, 0, 0, 0, 0, 2},
        {"qwen2.5-0.5b.json", LLAMA_FAMILY_QWEN2, 896, 24, 14, 2, 151936, 32768, 1, 64, 0, 0, 1, 0, 151643},
        {"qwen2.5-1.5b.json", LLAMA_FAMILY_QWEN2, 1536, 28, 12, 2, 151936, 131072, 1, 128, 0, 0, 1, 0, 151643},
        {"qwen2.5-7b.json", LLAMA_FAMILY_QWEN2, 3584, 28, 28, 4, 152064, 131072, 0, 128, 0, 0, 1, 0, 151643},
        {"qwen3-0.6b.json", LLAMA_FAMILY_QWEN3, 1024, 28, 16, 8, 151936, 40960, 1, 128, 0, 0, 0, 1, 151645},
        {"qwen3-4b.json", LLAMA_FAMILY_QWEN3, 2560, 36, 32, 8, 151936, 40960, 1, 128, 0, 0, 0, 1, 151645},
        {"qwen3-8b.json", LLAMA_FAMILY_QWEN3, 4096, 36, 32, 8, 151936, 40960, 0, 128, 0, 0, 0, 1, 151645},
        {"qwen3-8b-resaved.json", LLAMA_FAMILY_QWEN3, 4096, 36, 32, 8, 151936, 40960, 0, 128, 0, 0, 0, 1, 151645},
        {"phi-3-mini-4k-instruct.json", LLAMA_FAMILY_PHI3, 3072, 32, 32, 32, 32064, 4096, 0, 96, 2047, 0, 0, 0, 32000},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/hf_configs/%s", tu_src(), want[i].file);
        llama_config m;
        mp_err e;
        cr_assert_eq(llama_config_load(path, &m, NULL, &e), MP_OK, "%s: %s", want[i].file, e.msg);
        cr_assert(m.family == want[i].fam && m.hidden_size == want[i].hidden && m.num_hidden_layers == want[i].layers &&
                      m.num_attention_heads == want[i].heads && m.num_key_value_heads == want[i].kv &&
                      m.vocab_size == want[i].vocab && m.max_position_embeddings == want[i].max_pos &&
                      m.tie_word_embeddings == want[i].tied && llama_head_dim(&m) == want[i].head_dim &&
                      m.sliding_window == want[i].window && m.first_sliding_layer == want[i].first &&
                      m.qkv_bias == want[i].qkv_bias && m.qk_norm == want[i].qk_norm && m.n_eos == 1 &&
                      m.eos_token_id[0] == want[i].eos,
                  "%s: family %d hidden %d layers %d heads %d/%d vocab %d max_pos %d tied %d head_dim %d window %d/%d",
                  want[i].file, (int)m.family, m.hidden_size, m.num_hidden_layers, m.num_attention_heads,
                  m.num_key_value_heads, m.vocab_size, m.max_position_embeddings, m.tie_word_embeddings,
                  llama_head_dim(&m), m.sliding_window, m.first_sliding_layer);
    }
}

/* llama_config_to_json writes what reads back as the same config, for every family and window. */
Test(family_config, json_round_trip_is_the_same_config) {
    static const struct { const char *type, *extra; } c[] = {
        {"llama", ""}, {"llama", "\"head_dim\": 64, \"rope_theta\": 5e5, \"tie_word_embeddings\": true"},
        {"mistral", ""}, {"mistral", "\"sliding_window\": null"}, {"mistral", "\"sliding_window\": 16, \"head_dim\": 16"},
        {"qwen2", ""}, {"qwen2", "\"use_sliding_window\": true, \"sliding_window\": 64, \"max_window_layers\": 2"},
        {"qwen3", ""}, {"qwen3", "\"head_dim\": 8, \"eos_token_id\": [1, 2]"},
        {"qwen3", "\"use_sliding_window\": true, \"sliding_window\": 32, \"layer_types\": [\"full_attention\", "
                  "\"sliding_attention\", \"sliding_attention\", \"sliding_attention\"]"},
        {"phi3", ""}, {"phi3", "\"sliding_window\": 2047"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        llama_config m, m2;
        mp_err e;
        cr_assert_eq(parse_family(c[i].type, c[i].extra, &m, &e), MP_OK, "%s %s: %s", c[i].type, c[i].extra, e.msg);
        char *j = llama_config_to_json(&m);
        cr_assert_eq(parse(j, &m2, &e), MP_OK, "%s", e.msg);
        cr_assert(!memcmp(&m, &m2, sizeof m), "%s %s: another config after a round trip:\n%s", c[i].type, c[i].extra, j);
        cr_assert_eq(llama_config_diff(&m, &m2, LLAMA_CF_NONE), 0u);
        char want[64];
        snprintf(want, sizeof want, "\"model_type\":\t\"%s\"", c[i].type);
        cr_assert(strstr(j, want), "%s", j);
        free(j);
    }
}

/* A resume across families, head dims or windows is refused by the one comparison, naming the field. */
Test(family_config, diff_names_the_family_fields) {
    llama_config a, b;
    mp_err e;
    cr_assert_eq(parse_family("mistral", "\"sliding_window\": 16", &a, &e), MP_OK, "%s", e.msg);
    static const struct { const char *type, *extra; llama_config_field f; const char *name, *va, *vb; } c[] = {
        {"llama", "\"num_key_value_heads\": 8", LLAMA_CF_FAMILY, "model_type", "mistral", "llama"},
        {"mistral", "\"sliding_window\": 32", LLAMA_CF_SLIDING_WINDOW, "sliding_window", "16", "32"},
        {"mistral", "\"sliding_window\": null", LLAMA_CF_SLIDING_WINDOW, "sliding_window", "16", "none"},
        {"mistral", "\"sliding_window\": 16, \"head_dim\": 16", LLAMA_CF_HEAD_DIM, "head_dim", "8", "16"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        cr_assert_eq(parse_family(c[i].type, c[i].extra, &b, &e), MP_OK, "%s", e.msg);
        /* as a resume compares: max_position_embeddings may differ (Llama's default is not Mistral's) */
        unsigned d = llama_config_diff(&a, &b, LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS));
        cr_assert_eq((llama_config_field)__builtin_ctz(d), c[i].f, "%s: diff %#x", c[i].extra, d);
        cr_assert_str_eq(llama_config_field_name(c[i].f), c[i].name);
        char va[64], vb[64];
        llama_config_field_format(&a, c[i].f, va, sizeof va);
        llama_config_field_format(&b, c[i].f, vb, sizeof vb);
        cr_assert(!strcmp(va, c[i].va) && !strcmp(vb, c[i].vb), "%s: %s vs %s", c[i].name, va, vb);
    }
    /* qwen2 vs qwen3 of the same shape: the family first, then the flags it implies */
    cr_assert_eq(parse_family("qwen2", "\"head_dim\": 8", &a, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(parse_family("qwen3", "\"head_dim\": 8", &b, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(llama_config_diff(&a, &b, LLAMA_CF_NONE),
                 LLAMA_CF_BIT(LLAMA_CF_FAMILY) | LLAMA_CF_BIT(LLAMA_CF_QKV_BIAS) | LLAMA_CF_BIT(LLAMA_CF_QK_NORM));
}
