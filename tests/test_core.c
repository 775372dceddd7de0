/*
 * tests/test_core.c — core/ pieces that everything else leans on: the Philox RNG (known-answer vectors
 * of Random123), the LR schedule, bf16 rounding, error wrapping and exit statuses, config parsing.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/sched.h"
#include "core/tensor.h"

Test(rng, philox4x32_10_known_answers) {
    /* Random123's kat_vectors for philox4x32_10 */
    mp_philox_ctr c0 = {{0, 0, 0, 0}};
    mp_philox_key k0 = {{0, 0}};
    mp_philox_ctr r = mp_philox(c0, k0);
    uint32_t want0[4] = {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8};
    for (int i = 0; i < 4; i++) cr_assert_eq(r.v[i], want0[i], "word %d: %08x", i, r.v[i]);
    mp_philox_ctr c1 = {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}};
    mp_philox_key k1 = {{0xffffffff, 0xffffffff}};
    r = mp_philox(c1, k1);
    uint32_t want1[4] = {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd};
    for (int i = 0; i < 4; i++) cr_assert_eq(r.v[i], want1[i], "word %d: %08x", i, r.v[i]);
    mp_philox_ctr c2 = {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    mp_philox_key k2 = {{0xa4093822, 0x299f31d0}};
    r = mp_philox(c2, k2);
    uint32_t want2[4] = {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1};
    for (int i = 0; i < 4; i++) cr_assert_eq(r.v[i], want2[i], "word %d: %08x", i, r.v[i]);
}

Test(rng, normal_draws_depend_on_seed_name_index_only) {
    mp_philox_key a = mp_rng_key(7, "model.norm.weight"), b = mp_rng_key(7, "model.norm.weight");
    mp_philox_key c = mp_rng_key(8, "model.norm.weight"), d = mp_rng_key(7, "lm_head.weight");
    cr_assert_eq(mp_rng_normal(a, 12345), mp_rng_normal(b, 12345));
    cr_assert_neq(mp_rng_normal(a, 12345), mp_rng_normal(c, 12345));
    cr_assert_neq(mp_rng_normal(a, 12345), mp_rng_normal(d, 12345));
    /* moments of 200k draws: mean ~0, variance ~1 */
    double s = 0, s2 = 0;
    int n = 200000;
    for (int i = 0; i < n; i++) { double x = mp_rng_normal(a, (uint64_t)i); s += x; s2 += x * x; }
    cr_assert(fabs(s / n) < 0.01, "mean %g", s / n);
    cr_assert(fabs(s2 / n - 1) < 0.02, "variance %g", s2 / n);
}

Test(sched, warmup_then_cosine_to_the_floor) {
    mp_lr_schedule s = {1e-3, 1e-4, 10, 100};
    cr_assert_float_eq(mp_lr_at(&s, 0), 1e-4, 1e-12);          /* (0+1)/10 of peak */
    cr_assert_float_eq(mp_lr_at(&s, 9), 1e-3, 1e-12);
    cr_assert_float_eq(mp_lr_at(&s, 10), 1e-3, 1e-12);         /* cosine starts at the peak */
    cr_assert_float_eq(mp_lr_at(&s, 60), 5.5e-4, 1e-12);       /* halfway: (peak + floor) / 2 */
    cr_assert_float_eq(mp_lr_at(&s, 110), 1e-4, 1e-12);
    cr_assert_float_eq(mp_lr_at(&s, 5000), 1e-4, 1e-12);
    for (int64_t t = 11; t < 110; t++) cr_assert(mp_lr_at(&s, t) < mp_lr_at(&s, t - 1), "not decreasing at %lld", (long long)t);
}

Test(tensor, bf16_rounds_to_nearest_even) {
    cr_assert_eq(mp_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_eq(mp_bf16_to_f32(0x3f80), 1.0f);
    union { uint32_t u; float f; } v;
    v.u = 0x3f808000u;   /* exactly halfway between 0x3f80 and 0x3f81: to even (0x3f80) */
    cr_assert_eq(mp_f32_to_bf16(v.f), 0x3f80);
    v.u = 0x3f818000u;   /* halfway between 0x3f81 and 0x3f82: to even (0x3f82) */
    cr_assert_eq(mp_f32_to_bf16(v.f), 0x3f82);
    v.u = 0x3f808001u;   /* above halfway: up */
    cr_assert_eq(mp_f32_to_bf16(v.f), 0x3f81);
    cr_assert(isnan(mp_bf16_to_f32(mp_f32_to_bf16(NAN))));
    cr_assert_eq(mp_dtype_parse("bfloat16"), MP_BF16);
    cr_assert_eq(mp_dtype_parse("f64"), -1);
}

Test(error, wrap_builds_context_and_maps_exit_status) {
    mp_err e;
    cr_assert_eq(mp_err_set(&e, MP_EINPUT, "key \"%s\": bad", "x"), MP_EINPUT);
    mp_err_wrap(&e, "config %s", "c.json");
    cr_assert_str_eq(e.msg, "config c.json: key \"x\": bad");
    cr_assert_eq(mp_exit_status(MP_OK), 0);
    cr_assert_eq(mp_exit_status(MP_EINPUT), 2);
    cr_assert_eq(mp_exit_status(MP_ECHECK), 1);
    cr_assert_eq(mp_exit_status(MP_EIO), 1);
    char longp[3000];
    memset(longp, 'a', sizeof longp - 1);
    longp[sizeof longp - 1] = '\0';
    mp_err_wrap(&e, "%s", longp);   /* truncated, never overflowed */
    cr_assert_eq(strlen(e.msg), MP_ERR_MSG_MAX - 1);
}

Test(config, hf_config_json_is_accepted_and_round_trips) {
    const char *hf = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
                     " \"intermediate_size\": 172, \"num_hidden_layers\": 3, \"num_attention_heads\": 8,"
                     " \"num_key_value_heads\": 2, \"vocab_size\": 1000, \"rms_norm_eps\": 1e-6, \"rope_theta\": 500000.0,"
                     " \"hidden_act\": \"silu\", \"attention_bias\": false, \"rope_scaling\": null,"
                     " \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, \"tie_word_embeddings\": true}";
    mp_model_config m;
    mp_model_config_default(&m);
    mp_err e;
    cr_assert_eq(mp_config_parse(hf, "hf.json", &m, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.intermediate_size, 172);
    cr_assert_eq(m.tie_word_embeddings, 1);
    cr_assert_float_eq(m.rope_theta, 500000.0, 1e-9);
    char *j = mp_model_config_to_json(&m);
    mp_model_config m2;
    mp_model_config_default(&m2);
    cr_assert_eq(mp_config_parse(j, "round trip", &m2, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert(!memcmp(&m, &m2, sizeof m), "config changed in a round trip");
    free(j);
}

Test(config, values_that_change_the_math_are_refused) {
    const char *bad[][2] = {{"{\"hidden_act\": \"gelu\"}", "hidden_act"},
                            {"{\"attention_bias\": true}", "attention_bias"},
                            {"{\"rope_scaling\": {\"type\": \"linear\"}}", "rope_scaling"},
                            {"{\"hidden_size\": 64, \"num_attention_heads\": 4, \"head_dim\": 32}", "head_dim"},
                            {"{\"hidden_size\": -3}", "hidden_size"},
                            {"{\"hidden_size\": 64.5}", "integer"},
                            {"{\"train\": {\"lr\": \"fast\"}}", "lr"},
                            {"{\"train\": 3}", "train"},
                            {"[1, 2]", "object"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        mp_model_config m;
        mp_train_config t;
        mp_model_config_default(&m);
        mp_train_config_default(&t);
        mp_err e;
        cr_assert_eq(mp_config_parse(bad[i][0], "c.json", &m, &t, &e), MP_EINPUT, "%s accepted", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]) && strstr(e.msg, "c.json"), "%s: message \"%s\"", bad[i][0], e.msg);
    }
}
