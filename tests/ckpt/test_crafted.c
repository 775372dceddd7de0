/*
 * tests/ckpt/test_crafted.c — crafted numbers and hostile layouts at the library level:
 *   - config values: non-finite numbers (a literal like 1e999 overflows a double to inf) are refused for
 *     every real field, from the file and from flags (mp_train_config_validate); integers never reach a
 *     cast out of range (seed 1e30, head_dim, int64 fields, num_hidden_layers 2^31-1, steps past the
 *     optimizer's counter); the parameter count never overflows; mp_double_to_i64 at its edges;
 *   - box arithmetic (ckpt/box.c) on huge shapes: messages and tile geometry saturate instead of
 *     wrapping or dividing by zero; the writer refuses a box whose end overflows;
 *   - retention and leftover cleanup never follow a symbolic link: a step directory (or a .partial)
 *     that is a link to a checkpoint outside the root is removed as a link, its target left whole.
 * The CLI side (crafted checkpoints: metadata step, num_hidden_layers, tensor shapes; `ckpt ls`) is
 * tests/crafted.sh.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "ckpt/ckpt_internal.h"
#include "core/comm.h"
#include "core/optim.h"
#include "layers/llama_config.h"
#include "tests/testutil.h"

/* A valid model (cli_tiny's shape) followed by `extra` (", ..." inside the object, or ""). */
static char *model_json(const char *extra) {
    char *s = NULL;
    cr_assert(asprintf(&s,
                       "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, "
                       "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256%s}",
                       extra) > 0);
    return s;
}

/* Parses model_json(extra): asserts MP_EINPUT with a message containing want. */
static void expect_refused(const char *extra, const char *want) {
    char *text = model_json(extra);
    llama_config m;
    mp_train_config t;
    mp_train_config_default(&t);
    mp_err e;
    mp_err_clear(&e);
    mp_code rc = llama_config_parse(text, "x.json", &m, &t, &e);
    cr_assert_eq(rc, MP_EINPUT, "accepted: %s", text);
    cr_assert(strstr(e.msg, want), "message '%s' lacks '%s' (config %s)", e.msg, want, text);
    free(text);
}

/* Parses model_json(extra): asserts it is accepted. */
static void expect_accepted(const char *extra, llama_config *m, mp_train_config *t) {
    char *text = model_json(extra);
    mp_err e;
    mp_train_config_default(t);
    cr_assert_eq(llama_config_parse(text, "x.json", m, t, &e), MP_OK, "%s: %s", text, e.msg);
    free(text);
}

Test(crafted_config, non_finite_reals_refused) {
    expect_refused(", \"rope_theta\": 1e999", "\"rope_theta\": inf is not a finite number");
    expect_refused(", \"rms_norm_eps\": -1e999", "\"rms_norm_eps\"");
    expect_refused(", \"initializer_range\": 1e999", "\"initializer_range\"");
    expect_refused(", \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 1e999}", "rope_theta");
    expect_refused(", \"train\": {\"lr\": 1e999}", "\"lr\"");
    expect_refused(", \"train\": {\"grad_clip\": 1e999}", "\"grad_clip\"");
    expect_refused(", \"train\": {\"beta2\": -1e999}", "\"beta2\"");
    /* an integer field given inf names the key too */
    expect_refused(", \"max_position_embeddings\": 1e999", "\"max_position_embeddings\"");
}

Test(crafted_config, non_finite_flags_refused) {
    /* flags are applied after parsing: mp_train_config_validate checks them */
    mp_train_config t;
    mp_train_config_default(&t);
    mp_err e;
    t.lr = INFINITY;
    cr_assert_eq(mp_train_config_validate(&t, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "lr (--lr): must be a finite number"), "%s", e.msg);
    mp_train_config_default(&t);
    t.grad_clip = INFINITY;
    cr_assert_eq(mp_train_config_validate(&t, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "grad_clip"), "%s", e.msg);
    mp_train_config_default(&t);
    t.weight_decay = NAN;
    cr_assert_eq(mp_train_config_validate(&t, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "weight_decay"), "%s", e.msg);
}

Test(crafted_config, integers_out_of_range_refused) {
    expect_refused(", \"train\": {\"seed\": 1e30}", "\"seed\"");
    expect_refused(", \"train\": {\"seed\": 9223372036854775808}", "\"seed\"");
    expect_refused(", \"train\": {\"steps\": 1e19}", "\"steps\"");
    expect_refused(", \"train\": {\"warmup_steps\": -1e300}", "\"warmup_steps\"");
    expect_refused(", \"train\": {\"decay_steps\": 9223372036854775807}", "\"decay_steps\"");   /* = 2^63 as a double */
    expect_refused(", \"train\": {\"eval_every\": 1e999}", "\"eval_every\"");
    expect_refused(", \"train\": {\"batch_size\": 4294967300}", "\"batch_size\"");
    expect_refused(", \"head_dim\": 1e30", "head_dim");
    expect_refused(", \"head_dim\": 4294967304", "head_dim");
    expect_refused(", \"head_dim\": 1e999", "head_dim");
    /* steps beyond the optimizer's int step counter (core/optim.h) */
    expect_refused(", \"train\": {\"steps\": 1e12}", "steps (--steps)");
    llama_config m;
    mp_train_config t;
    expect_accepted(", \"head_dim\": 8, \"train\": {\"seed\": 9007199254740992, \"steps\": 2147483647}", &m, &t);
    cr_assert_eq(t.seed, 9007199254740992ull);
    cr_assert_eq(t.steps, 2147483647);
}

Test(crafted_config, model_shape_bounded) {
    /* 2^31-1 layers: llama_tensor_specs would count 9L+3 in an int, verify would allocate them */
    expect_refused(", \"num_hidden_layers\": 2147483647", "num_hidden_layers");
    /* each dim an int, but the parameter count past int64 (it used to wrap: 3*D*I*L) */
    const char *text = "{\"hidden_size\": 2147483646, \"intermediate_size\": 2147483647, \"num_hidden_layers\": 16384, "
                 "\"num_attention_heads\": 1, \"vocab_size\": 2147483647}";
    llama_config m;
    mp_err e;
    cr_assert_eq(llama_config_parse(text, "x.json", &m, NULL, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "too many parameters to count in 64 bits"), "%s", e.msg);
    /* the count itself saturates instead of wrapping negative */
    llama_config h = {.hidden_size = 2147483646, .intermediate_size = 2147483647, .num_hidden_layers = 2147483647,
                         .num_attention_heads = 1, .num_key_value_heads = 1, .vocab_size = 2147483647};
    cr_assert_eq(llama_config_num_params(&h), INT64_MAX);
    /* and agrees with the old formula where that did not overflow */
    llama_config d;
    llama_config_default(&d);
    int64_t D = d.hidden_size, I = d.intermediate_size, V = d.vocab_size, hd = D / d.num_attention_heads;
    int64_t per = 2 * D + D * d.num_attention_heads * hd + 2 * D * d.num_key_value_heads * hd +
                  d.num_attention_heads * hd * D + 3 * D * I;
    cr_assert_eq(llama_config_num_params(&d), V * D + d.num_hidden_layers * per + D + V * D);
    /* the limit itself is accepted */
    char extra[96];
    mp_train_config t;
    snprintf(extra, sizeof extra, ", \"num_hidden_layers\": %d", LLAMA_CONFIG_MAX_LAYERS);
    char *ok = model_json(extra);
    mp_train_config_default(&t);
    cr_assert_eq(llama_config_parse(ok, "x.json", &m, &t, &e), MP_OK, "%s", e.msg);
    free(ok);
}

Test(crafted_config, double_to_i64_edges) {
    int64_t v = 7;
    cr_assert(mp_double_to_i64(-9223372036854775808.0, INT64_MIN, INT64_MAX, &v) && v == INT64_MIN);
    cr_assert(!mp_double_to_i64(9223372036854775808.0, INT64_MIN, INT64_MAX, &v));
    cr_assert(!mp_double_to_i64(NAN, INT64_MIN, INT64_MAX, &v));
    cr_assert(!mp_double_to_i64(INFINITY, INT64_MIN, INT64_MAX, &v));
    cr_assert(!mp_double_to_i64(1.5, INT64_MIN, INT64_MAX, &v));
    cr_assert(!mp_double_to_i64(-5, 0, 10, &v));
    cr_assert(!mp_double_to_i64(11, 0, 10, &v));
    cr_assert(mp_double_to_i64(10, 0, 10, &v) && v == 10);
    cr_assert(!mp_double_to_i64(1e300, 0, INT64_MAX, &v));
    cr_assert_eq(v, 10, "a refused value leaves *out alone");
    /* the optimizer's step counter: an int in the backend */
    cr_assert_eq(MP_ADAMW_MAX_T, INT32_MAX);
    cr_assert(MP_MAX_STEPS <= MP_ADAMW_MAX_T);
}

/* ------------------------------------------------------------------------------------ box arithmetic */

Test(crafted_box, messages_saturate) {
    char buf[256];
    int64_t off[2] = {INT64_MAX - 1, 5}, shp[2] = {INT64_MAX, 3};
    ck_box_str(buf, sizeof buf, 2, off, shp);
    cr_assert_str_eq(buf, "[9223372036854775806:9223372036854775807, 5:8]");
}

Test(crafted_box, tile_geometry_of_huge_boxes) {
    /* a segment past INT64_MAX bytes: it used to wrap to 0 and divide by zero (SIGFPE) */
    int64_t shp[3] = {2, (int64_t)1 << 40, (int64_t)1 << 40}, tr = 0, tc = 0;
    ckpt_tile_geometry(4, 3, shp, &tr, &tc);
    cr_assert_eq(tr, 1);
    cr_assert_eq(tc, ((int64_t)1 << 40) / 8);
    int64_t big[2] = {INT64_MAX, INT64_MAX};
    ckpt_tile_geometry(4, 2, big, &tr, &tc);
    cr_assert(tr >= 1 && tr <= big[0] && tc >= 1 && tc <= big[1]);
    cr_assert(ck_tile_count(2, big, tr, tc) > 0);
    /* ordinary boxes keep the documented geometry (docs/FORMAT.md examples) */
    int64_t a[2] = {256, 1024};
    ckpt_tile_geometry(4, 2, a, &tr, &tc);
    cr_assert(tr == 8 && tc == 128, "%lld x %lld", (long long)tr, (long long)tc);
    int64_t b[2] = {3000, 256};
    ckpt_tile_geometry(4, 2, b, &tr, &tc);
    cr_assert(tr == 16 && tc == 64, "%lld x %lld", (long long)tr, (long long)tc);
    int64_t c[1] = {1000};
    ckpt_tile_geometry(4, 1, c, &tr, &tc);
    cr_assert(tr == 64 && tc == 1, "%lld x %lld", (long long)tr, (long long)tc);
}

Test(crafted_box, writer_refuses_overflowing_box) {
    char *root = tu_mkdtemp("crafted_add");
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin(&s, w, root, 1, NULL, &e), MP_OK, "%s", e.msg);
    float data[4] = {0};
    int64_t g[1] = {8}, off[1] = {INT64_MAX - 1}, shp[1] = {4};
    /* off + shape wraps negative: it used to pass the "inside the tensor" check */
    cr_assert_eq(ckpt_save_add(s, "t", MP_F32, 1, g, off, shp, data, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "outside the tensor"), "%s", e.msg);
    ckpt_save_commit(s, NULL, &e);
    ckpt_save_free(s);
    w->ops->destroy(w);
    tu_rm_rf(root);
    free(root);
}

/* ------------------------------------------------------------------------- retention and links */

/* Saves a one-tensor checkpoint as step into root (asserting success). */
static void save_one(const char *root, int64_t step) {
    mp_comm *w = mp_comm_self();
    ckpt_save *s;
    mp_err e;
    cr_assert_eq(ckpt_save_begin(&s, w, root, step, NULL, &e), MP_OK, "%s", e.msg);
    float data[16];
    for (int i = 0; i < 16; i++) data[i] = (float)(i + step);
    int64_t g[2] = {4, 4}, off[2] = {0, 0};
    cr_assert_eq(ckpt_save_add(s, "w", MP_F32, 2, g, off, g, data, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);
    w->ops->destroy(w);
}

Test(crafted_retention, symlinked_step_directory_keeps_its_target) {
    char *root = tu_mkdtemp("crafted_keep"), *other = tu_mkdtemp("crafted_outside");
    save_one(other, 1);                        /* the checkpoint outside the root */
    char *target = tu_path(other, "step_00000001"), *tindex = tu_path(target, "index.h5");
    char *link = tu_path(root, "step_00000000");
    for (int64_t s = 1; s <= 3; s++) save_one(root, s);
    cr_assert_eq(symlink(target, link), 0);
    mp_err e;
    int removed = -1;
    cr_assert_eq(ckpt_retain(root, 1, &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, 3, "steps 0 (the link), 1 and 2 go");
    struct stat st;
    cr_assert(lstat(link, &st) != 0, "the link is removed");
    cr_assert_eq(access(tindex, F_OK), 0, "the link's target lost its index.h5");
    cr_assert_eq(ckpt_check_complete(target, &e), MP_OK, "the target is no longer complete: %s", e.msg);
    int64_t *steps;
    int n;
    cr_assert_eq(ckpt_list(root, &steps, &n, &e), MP_OK);
    cr_assert(n == 1 && steps[0] == 3);
    free(steps);
    free(target); free(tindex); free(link);
    tu_rm_rf(root); tu_rm_rf(other);
    free(root); free(other);
}

Test(crafted_retention, links_inside_removed_directories_are_not_followed) {
    char *root = tu_mkdtemp("crafted_inner"), *other = tu_mkdtemp("crafted_victim");
    char *victim = tu_path(other, "precious.txt");
    tu_write_file(victim, "keep me");
    for (int64_t s = 1; s <= 2; s++) save_one(root, s);
    /* a link to a directory and one to a file inside the checkpoint that retention removes */
    char *d1 = tu_path(root, "step_00000001");
    char *l1 = tu_path(d1, "dirlink"), *l2 = tu_path(d1, "filelink");
    cr_assert_eq(symlink(other, l1), 0);
    cr_assert_eq(symlink(victim, l2), 0);
    /* and a leftover .partial that is itself a link to a directory outside */
    char *pl = tu_path(root, "step_00000009.partial");
    cr_assert_eq(symlink(other, pl), 0);
    mp_err e;
    int removed = -1;
    cr_assert_eq(ckpt_cleanup_partials(root, &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, 1);
    cr_assert_eq(ckpt_retain(root, 1, &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, 1);
    struct stat st;
    cr_assert(lstat(d1, &st) != 0 && lstat(pl, &st) != 0);
    cr_assert_eq(access(victim, F_OK), 0, "a file behind a link was removed");
    free(victim); free(d1); free(l1); free(l2); free(pl);
    tu_rm_rf(root); tu_rm_rf(other);
    free(root); free(other);
}
