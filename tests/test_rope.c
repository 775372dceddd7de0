/*
 * tests/test_rope.c — RoPE scaling in the config parser and the tables:
 * rope_scaling / rope_parameters of types "linear" and "llama3" parse into llama_config.rope_scaling,
 * every bad field is refused with a message naming it (unknown types naming the type, also when the
 * type's own keys come first, as in Phi-3's 128k "longrope" / "su" configs), the scaling
 * survives llama_config_to_json (what a checkpoint stores), and the tables (layers/rope.c) are bit for
 * bit what they were: the default as before scaling existed, the scaled ones rounded as it is. The
 * float64 comparison with transformers' formulas is tests/python/rope_reference.py (ctest rope_reference).
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/llama_config.h"
#include "layers/rope.h"

#define SHAPE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, " \
              "\"vocab_size\": 256"
#define L3 "\"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, " \
           "\"original_max_position_embeddings\": 8192"

/* Parses {SHAPE, extra} as "c.json". */
static mp_code parse_with(const char *extra, llama_config *m, mp_err *e) {
    char text[1024];
    snprintf(text, sizeof text, "{" SHAPE ", %s}", extra);
    return llama_config_parse(text, "c.json", m, NULL, e);
}

Test(rope_config, llama3_scaling_parses) {
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_with("\"rope_theta\": 500000.0, \"rope_scaling\": {" L3 ", \"rope_type\": \"llama3\"}", &m, &e),
                 MP_OK, "%s", e.msg);
    cr_assert_eq(m.rope_scaling.type, MP_ROPE_LLAMA3);
    cr_assert_eq(m.rope_scaling.factor, 8.0);
    cr_assert_eq(m.rope_scaling.low_freq_factor, 1.0);
    cr_assert_eq(m.rope_scaling.high_freq_factor, 4.0);
    cr_assert_eq(m.rope_scaling.original_max_position_embeddings, 8192);
    cr_assert_eq(m.rope_theta, 500000.0);
}

Test(rope_config, linear_scaling_parses_with_either_type_key) {
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_with("\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.rope_scaling.type, MP_ROPE_LINEAR);
    cr_assert_eq(m.rope_scaling.factor, 2.0);
    cr_assert_eq(parse_with("\"rope_scaling\": {\"rope_type\": \"linear\", \"type\": \"linear\", \"factor\": 4}", &m, &e),
                 MP_OK, "%s", e.msg);
    cr_assert_eq(m.rope_scaling.factor, 4.0);
}

Test(rope_config, transformers5_rope_parameters_carry_scaling_and_theta) {
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_with("\"rope_parameters\": {\"rope_type\": \"llama3\", " L3 ", \"rope_theta\": 500000.0}",
                            &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.rope_scaling.type, MP_ROPE_LLAMA3);
    cr_assert_eq(m.rope_theta, 500000.0);
    /* both keys, agreeing: accepted; disagreeing: refused naming both */
    cr_assert_eq(parse_with("\"rope_scaling\": {\"rope_type\": \"llama3\", " L3 "}, \"rope_parameters\": "
                            "{\"rope_type\": \"llama3\", " L3 ", \"rope_theta\": 500000.0}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(parse_with("\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8}, \"rope_parameters\": "
                            "{\"rope_type\": \"llama3\", " L3 "}", &m, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "rope_scaling") && strstr(e.msg, "rope_parameters") && strstr(e.msg, "disagrees"),
              "%s", e.msg);
    /* null and default mean no scaling */
    cr_assert_eq(parse_with("\"rope_scaling\": null, \"rope_parameters\": {\"rope_type\": \"default\"}", &m, &e), MP_OK);
    cr_assert_eq(m.rope_scaling.type, MP_ROPE_DEFAULT);
}

Test(rope_config, bad_scaling_is_refused_naming_the_field) {
    const char *bad[][2] = {
        {"\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 2.0}", "\"yarn\" is not supported"},
        {"\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}", "\"dynamic\""},
        {"\"rope_scaling\": {\"rope_type\": \"longrope\"}", "\"longrope\" is not supported"},
        /* Phi-3's 128k configs as published: the type after its own keys, which must not hide it */
        {"\"rope_scaling\": {\"long_factor\": [1.08, 1.1], \"short_factor\": [1.0, 1.0], \"type\": \"longrope\"}",
         "type \"longrope\" is not supported"},
        {"\"rope_scaling\": {\"long_factor\": [1.08, 1.1], \"short_factor\": [1.0, 1.0], \"type\": \"su\"}",
         "type \"su\" is not supported"},
        {"\"rope_parameters\": {\"rope_type\": \"longrope\", \"long_factor\": [1.0], \"short_factor\": [1.0], "
         "\"long_mscale\": 1.2, \"rope_theta\": 10000.0}", "rope_type \"longrope\" is not supported"},
        {"\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0, \"original_max_position_embeddings\": 32768}",
         "\"yarn\" is not supported"},
        {"\"rope_parameters\": {\"rope_type\": \"ntk\", \"factor\": 2.0}", "\"ntk\""},
        {"\"rope_scaling\": {\"rope_type\": 3}", "rope_type: expected a string"},
        {"\"rope_scaling\": {\"factor\": 2.0}", "needs \"rope_type\""},
        {"\"rope_scaling\": {\"rope_type\": \"linear\"}", "needs \"factor\""},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": \"2\"}", "\"factor\": expected a number"},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0.5}", "\"factor\": must be a finite number >= 1"},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": -2}", "\"factor\""},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 1e999}", "\"factor\""},
        {"\"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2, \"low_freq_factor\": 1}",
         "\"low_freq_factor\" is not a parameter of rope_type \"linear\""},
        {"\"rope_scaling\": {\"rope_type\": \"default\", \"factor\": 2}", "\"factor\" is not a parameter"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", "needs \"low_freq_factor\""},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
         "\"high_freq_factor\": 4.0}", "needs \"original_max_position_embeddings\""},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", "\"low_freq_factor\": must be"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 4.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}", "\"high_freq_factor\": must be"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192.5}", "\"original_max_position_embeddings\""},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
         "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 0}", "\"original_max_position_embeddings\""},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", " L3 ", \"beta_fast\": 32}", "unsupported key \"beta_fast\""},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"type\": \"linear\", " L3 "}", "disagrees"},
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", " L3 ", \"rope_theta\": 5e5}", "unsupported key \"rope_theta\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_with(bad[i][0], &m, &e), MP_EINPUT, "%s accepted", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]) && strstr(e.msg, "c.json") && strstr(e.msg, "rope_"),
                  "%s: message \"%s\"", bad[i][0], e.msg);
    }
}

Test(rope_config, validate_checks_hand_built_scaling) {
    llama_config m;
    llama_config_default(&m);
    mp_err e;
    cr_assert_eq(llama_config_validate(&m, &e), MP_OK);
    m.rope_scaling = (mp_rope_scaling){MP_ROPE_LLAMA3, 8, 1, 4, 8192};
    cr_assert_eq(llama_config_validate(&m, &e), MP_OK, "%s", e.msg);
    m.rope_scaling.high_freq_factor = 0.5;
    cr_assert_eq(llama_config_validate(&m, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "rope_scaling") && strstr(e.msg, "high_freq_factor"), "%s", e.msg);
}

/* A parsed scaling survives the config's own JSON (what a checkpoint's model_config stores). */
Test(rope_config, scaling_round_trips_through_the_checkpoint_json) {
    const char *cases[] = {
        "\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, "
        "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 8192}",
        "\"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.5}",
        "\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 0.1e2, \"low_freq_factor\": 0.3, "
        "\"high_freq_factor\": 0.30000000000000004, \"original_max_position_embeddings\": 77, \"rope_theta\": 1e6}",
        "\"rope_scaling\": null",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        llama_config m, m2;
        mp_err e;
        cr_assert_eq(parse_with(cases[i], &m, &e), MP_OK, "%s: %s", cases[i], e.msg);
        char *j = llama_config_to_json(&m);
        cr_assert_eq(llama_config_parse(j, "round trip", &m2, NULL, &e), MP_OK, "%s\n%s", e.msg, j);
        cr_assert(llama_rope_scaling_equal(&m.rope_scaling, &m2.rope_scaling), "%s", j);
        cr_assert_eq(m.rope_scaling.type, m2.rope_scaling.type);
        cr_assert_eq(m.rope_theta, m2.rope_theta);
        if (m.rope_scaling.type == MP_ROPE_DEFAULT) cr_assert(strstr(j, "\"rope_scaling\":\tnull"), "%s", j);
        else cr_assert(strstr(j, llama_rope_type_name(m.rope_scaling.type)), "%s", j);
        free(j);
    }
}

Test(rope_config, equal_and_describe) {
    mp_rope_scaling a = {MP_ROPE_LINEAR, 2, 0, 0, 0}, b = {MP_ROPE_LINEAR, 2, 7, 9, 11};
    cr_assert(llama_rope_scaling_equal(&a, &b), "unused numbers are ignored");
    b.factor = 3;
    cr_assert(!llama_rope_scaling_equal(&a, &b));
    mp_rope_scaling l = {MP_ROPE_LLAMA3, 8, 1, 4, 8192}, d = {0};
    cr_assert(!llama_rope_scaling_equal(&l, &d));
    char buf[256];
    llama_rope_scaling_describe(&l, buf, sizeof buf);
    cr_assert_str_eq(buf, "llama3 (factor 8, low_freq_factor 1, high_freq_factor 4, original_max_position_embeddings 8192)");
    llama_rope_scaling_describe(&d, buf, sizeof buf);
    cr_assert_str_eq(buf, "default");
}

/* Plain RoPE is what it always was: theta^(-2i/hd), bit for bit (no existing loss may move). */
Test(rope_tables, default_is_unchanged_bit_for_bit) {
    enum { P = 300, HD = 64 };
    static float c[P * HD / 2], s[P * HD / 2], c2[P * HD / 2], s2[P * HD / 2];
    mp_rope_scaling none = {0};
    mp_rope_tables(c, s, P, HD, 10000.0, NULL);
    mp_rope_tables(c2, s2, P, HD, 10000.0, &none);
    for (int p = 0; p < P; p++)
        for (int i = 0; i < HD / 2; i++) {
            double a = (double)p * pow(10000.0, -2.0 * i / HD);
            cr_assert_eq(c[p * HD / 2 + i], (float)cos(a));
            cr_assert_eq(s[p * HD / 2 + i], (float)sin(a));
        }
    cr_assert(!memcmp(c, c2, sizeof c) && !memcmp(s, s2, sizeof s));
}

/* Scaled tables are made as the default ones are: the angle p * inv_freq in double, its cos and sin each
 * rounded to fp32 once, bit for bit (Llama 3.1's llama3 numbers and a linear scaling, at hd 128). With
 * default_is_unchanged_bit_for_bit and llama3_bands this pins the tables the model has always had. */
Test(rope_tables, scaled_tables_round_the_double_angle_once) {
    enum { P = 2048, HD = 128 };
    static float c[P * HD / 2], s[P * HD / 2];
    const mp_rope_scaling sc[] = {{MP_ROPE_LLAMA3, 8, 1, 4, 8192}, {MP_ROPE_LINEAR, 2.5, 0, 0, 0}};
    for (size_t k = 0; k < sizeof sc / sizeof sc[0]; k++) {
        mp_rope_tables(c, s, P, HD, 500000.0, &sc[k]);
        int scaled = 0;
        for (int i = 0; i < HD / 2; i++) {
            double f = mp_rope_inv_freq(i, HD, 500000.0, &sc[k]);
            scaled += f != pow(500000.0, -2.0 * i / HD);
            for (int p = 0; p < P; p++) {
                cr_assert_eq(c[p * HD / 2 + i], (float)cos((double)p * f), "%zu: p %d i %d", k, p, i);
                cr_assert_eq(s[p * HD / 2 + i], (float)sin((double)p * f), "%zu: p %d i %d", k, p, i);
            }
        }
        cr_assert(scaled > 0, "scaling %zu changed no frequency", k);
    }
}

/* The bands of llama3 by hand: high frequencies unchanged, low ones / factor, the medium one smoothed
 * (hd 16, theta 10000: wavelengths 6.3, 19.9, 62.8, 199, ... against 16 and 64). */
Test(rope_tables, llama3_bands) {
    mp_rope_scaling l3 = {MP_ROPE_LLAMA3, 8, 1, 4, 64};
    for (int i = 0; i < 8; i++) {
        double base = pow(10000.0, -2.0 * i / 16), got = mp_rope_inv_freq(i, 16, 10000.0, &l3);
        double wavelen = 2 * M_PI / base;
        if (wavelen < 16) cr_assert_eq(got, base, "pair %d", i);
        else if (wavelen > 64) cr_assert_eq(got, base / 8, "pair %d", i);
        else {
            double sm = (64 / wavelen - 1) / 3;
            cr_assert_float_eq(got, (1 - sm) * base / 8 + sm * base, 1e-18, "pair %d", i);
            cr_assert(got < base && got > base / 8, "pair %d", i);
        }
    }
    mp_rope_scaling lin = {MP_ROPE_LINEAR, 4, 0, 0, 0};
    cr_assert_eq(mp_rope_inv_freq(3, 16, 10000.0, &lin), pow(10000.0, -6.0 / 16) / 4);
}

/* The released Llama 3.x config.json files (tests/configs/hf_llama3_*.json) parse as they are. */
Test(rope_config, llama3_release_configs_parse) {
    const char *src = getenv("MP_SRC") ? getenv("MP_SRC") : ".";
    char path[1024];
    llama_config m;
    mp_err e;
    snprintf(path, sizeof path, "%s/tests/configs/hf_llama3_2_1b.json", src);
    cr_assert_eq(llama_config_load(path, &m, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert(m.rope_scaling.type == MP_ROPE_LLAMA3 && m.rope_scaling.factor == 32.0 &&
              m.rope_scaling.original_max_position_embeddings == 8192 && m.rope_theta == 500000.0);
    cr_assert(m.tie_word_embeddings && m.vocab_size == 128256 && llama_head_dim(&m) == 64 && m.num_key_value_heads == 8);
    snprintf(path, sizeof path, "%s/tests/configs/hf_llama3_1_8b.json", src);
    cr_assert_eq(llama_config_load(path, &m, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert(m.rope_scaling.type == MP_ROPE_LLAMA3 && m.rope_scaling.factor == 8.0 &&
              m.rope_scaling.low_freq_factor == 1.0 && m.rope_scaling.high_freq_factor == 4.0);
    cr_assert(!m.tie_word_embeddings && m.hidden_size == 4096 && m.intermediate_size == 14336);
}
