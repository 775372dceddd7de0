/*
 * tests/test_core.c — core/ pieces that everything else leans on: the Philox RNG (known-answer vectors
 * of Random123), the LR schedule, bf16 rounding, error wrapping and exit statuses, config parsing (a key
 * means what it means in transformers' LlamaConfig, or is required) and training-config validation.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/error.h"
#include "core/fault.h"
#include "core/fsutil.h"
#include "core/rng.h"
#include "core/sched.h"
#include "core/tensor.h"
#include "layers/llama_config.h"
#include "tests/testutil.h"

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

/* The words core/error.h documents for each code: the writer prints them when a failure left no message. */
Test(error, code_names_are_the_documented_words) {
    static const struct { mp_code code; const char *name; } want[] = {
        {MP_OK, "ok"}, {MP_ECHECK, "check failed"}, {MP_EINPUT, "bad input"}, {MP_EIO, "i/o error"},
        {MP_ENOMEM, "out of memory"}, {MP_EDEVICE, "device error"}, {MP_EINTERNAL, "internal error"},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert_str_eq(mp_code_name(want[i].code), want[i].name, "code %d", (int)want[i].code);
    cr_assert_str_eq(mp_code_name((mp_code)99), "unknown error");
}

/* Small text inputs are streams: a pipe (no size), a directory named as one, the cap enforced. */
/* MP_FAULT (core/fault.h): name or name:arg entries, comma-separated; the rank rule of the ckpt faults;
 * integers; and the start-up check that refuses a name not in the table (a misspelt fault). */
Test(fault, parses_entries_ranks_and_refuses_unknown_names) {
    char buf[32];
    mp_err e;
    setenv("MP_FAULT", "ckpt_crash_at:after_index,ckpt_crash_rank:1,ckpt_serial_fill,free_bytes:12x,mem_available:77", 1);
    cr_assert_str_eq(mp_fault_arg("ckpt_crash_at", buf, sizeof buf), "after_index");
    cr_assert_str_eq(mp_fault_arg("ckpt_serial_fill", buf, sizeof buf), "");
    cr_assert_null(mp_fault_arg("ckpt_fail_at", buf, sizeof buf));
    cr_assert(mp_fault_on("ckpt_serial_fill"));
    cr_assert(!mp_fault_on("no_rename_exchange"));
    cr_assert_eq(mp_fault_int("mem_available", -1), 77);
    cr_assert_eq(mp_fault_int("free_bytes", -1), -1, "not a whole number: the default");
    cr_assert_eq(mp_fault_int("rlimit_room", -5), -5);
    cr_assert(mp_fault_rank_matches("ckpt_crash_rank", 1));
    cr_assert(!mp_fault_rank_matches("ckpt_crash_rank", 0));
    cr_assert(mp_fault_rank_matches("ckpt_fail_rank", 0), "no rank given: every rank");
    cr_assert_eq(mp_fault_check(&e), MP_OK, "%s", e.msg);
    setenv("MP_FAULT", "ckpt_serial_fill:0", 1);
    cr_assert(!mp_fault_on("ckpt_serial_fill"), "\"0\" is off");
    setenv("MP_FAULT", "ckpt_crash_at:begin,ckpt_crash_ta:begin", 1);
    cr_assert_eq(mp_fault_check(&e), MP_EINPUT);
    cr_assert(strstr(e.msg, "\"ckpt_crash_ta\""), "%s", e.msg);
    unsetenv("MP_FAULT");
    cr_assert_null(mp_fault_arg("ckpt_crash_at", buf, sizeof buf));
    cr_assert_eq(mp_fault_check(&e), MP_OK);
}

Test(fsutil, read_text_takes_pipes_and_names_directories) {
    int fds[2];
    cr_assert_eq(pipe(fds), 0);
    const char *msg = "{\"hidden_size\": 8}\n";
    cr_assert_eq(write(fds[1], msg, strlen(msg)), (ssize_t)strlen(msg));
    close(fds[1]);
    char path[64], *text;
    size_t n;
    mp_err e;
    snprintf(path, sizeof path, "/dev/fd/%d", fds[0]);
    cr_assert_eq(mp_read_text(path, 1 << 20, &text, &n, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(n, strlen(msg));
    cr_assert_str_eq(text, msg);
    free(text);
    close(fds[0]);
    cr_assert_eq(mp_read_text("/tmp", 1 << 20, &text, NULL, &e), MP_EINPUT);
    cr_assert_null(text);
    cr_assert(strstr(e.msg, "/tmp: is a directory"), "%s", e.msg);
    cr_assert_eq(mp_read_text("/nonexistent/x.json", 1 << 20, &text, NULL, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "/nonexistent/x.json: cannot open: No such file"), "%s", e.msg);
    char tmpl[] = "/tmp/mp_read_text_XXXXXX";
    int fd = mkstemp(tmpl);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "0123456789", 10), 10);
    close(fd);
    cr_assert_eq(mp_read_text(tmpl, 9, &text, NULL, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "larger than 9 bytes"), "%s", e.msg);
    cr_assert_eq(mp_read_text(tmpl, 10, &text, &n, &e), MP_OK);
    cr_assert_eq(n, 10);
    cr_assert_str_eq(text, "0123456789");
    free(text);
    unlink(tmpl);
}

/* Writes text to path (test set-up). */
static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    cr_assert(f, "%s", path);
    fputs(text, f);
    fclose(f);
}

Test(fsutil, remove_tree_never_follows_a_link) {
    char base[] = "/tmp/mp_fs_rm_XXXXXX";
    cr_assert(mkdtemp(base));
    char *out = mp_fs_join(base, "outside"), *keep = mp_fs_join(out, "keep.txt");
    char *tree = mp_fs_join(base, "tree"), *sub = mp_fs_join(tree, "a/b");
    mp_err e;
    cr_assert_eq(mp_fs_mkdirs(out, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(mp_fs_mkdirs(sub, &e), MP_OK, "%s", e.msg);
    cr_assert(mp_fs_is_dir(sub));
    put(keep, "mine");
    cr_assert(mp_fs_exists(keep) && !mp_fs_is_dir(keep));
    char *f = mp_fs_join(sub, "f"), *ln = mp_fs_join(sub, "link"), *top = mp_fs_join(base, "toplink");
    put(f, "x");
    cr_assert_eq(symlink(out, ln), 0);    /* a link inside the tree to a directory outside it */
    cr_assert_eq(symlink(out, top), 0);   /* and a link given as the path itself */
    char *top_slash = mp_fs_join(top, "");   /* "toplink/": a trailing slash must not make it followed */
    cr_assert_eq(mp_fs_remove_tree(top_slash, &e), MP_OK, "%s", e.msg);
    free(top_slash);
    cr_assert_eq(mp_fs_remove_tree(tree, &e), MP_OK, "%s", e.msg);
    cr_assert(!mp_fs_exists(tree) && !mp_fs_exists(top));
    cr_assert(mp_fs_exists(keep), "a link's target was removed");
    cr_assert_eq(mp_fs_remove_tree(tree, &e), MP_OK, "a missing path is no error");
    cr_assert_eq(mp_fs_remove_tree(base, &e), MP_OK, "%s", e.msg);
    cr_assert(!mp_fs_exists(base));
    free(out); free(keep); free(tree); free(sub); free(f); free(ln); free(top);
}

Test(fsutil, durable_text_rename_and_swap) {
    char base[] = "/tmp/mp_fs_sw_XXXXXX";
    cr_assert(mkdtemp(base));
    mp_err e;
    cr_assert_eq(mp_fs_write_text_durable(base, "latest", "step_00000002\n", &e), MP_OK, "%s", e.msg);
    char *latest = mp_fs_join(base, "latest"), *tmp = mp_fs_tmp_name(latest), *text;
    cr_assert_eq(mp_read_text(latest, 100, &text, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_str_eq(text, "step_00000002\n");
    free(text);
    cr_assert(!mp_fs_exists(tmp));
    char *a = mp_fs_join(base, "a"), *b = mp_fs_join(base, "b"), *am = mp_fs_join(a, "m"), *bm = mp_fs_join(b, "m");
    for (int fallback = 0; fallback < 2; fallback++) {
        setenv("MP_FAULT", fallback ? "no_rename_exchange" : "", 1);
        cr_assert_eq(mp_fs_mkdirs(a, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(mp_fs_mkdirs(b, &e), MP_OK, "%s", e.msg);
        put(am, "new");
        put(bm, "old");
        char *old = NULL;
        cr_assert_eq(mp_fs_swap_dirs(a, b, NULL, &old, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(mp_read_text(bm, 100, &text, NULL, &e), MP_OK, "%s", e.msg);
        cr_assert_str_eq(text, "new", "fallback %d", fallback);
        free(text);
        cr_assert(old && mp_fs_is_dir(old));
        cr_assert_eq(mp_fs_remove_tree(old, &e), MP_OK, "%s", e.msg);
        free(old);
        cr_assert_eq(mp_fs_remove_tree(b, &e), MP_OK, "%s", e.msg);
    }
    unsetenv("MP_FAULT");
    cr_assert_eq(mp_fs_mkdirs(a, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(mp_fs_rename_durable(a, b, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert(mp_fs_is_dir(b) && !mp_fs_exists(a));
    cr_assert_eq(mp_fs_rename_durable(a, b, NULL, &e), MP_EIO);
    cr_assert(strstr(e.msg, "rename ") && strstr(e.msg, "No such file"), "%s", e.msg);
    cr_assert_eq(mp_fs_mkdirs(latest, &e), MP_EIO);
    cr_assert(strstr(e.msg, "exists and is not a directory"), "%s", e.msg);
    cr_assert_eq(mp_fs_remove_tree(base, &e), MP_OK, "%s", e.msg);
    free(latest); free(tmp); free(a); free(b); free(am); free(bm);
}

Test(fsutil, step_names_are_step_digits_suffix) {
    int64_t s = -1;
    cr_assert(mp_fs_parse_step_name("step_00000500", NULL, &s) && s == 500);
    cr_assert(mp_fs_parse_step_name("step_7.partial", ".partial", &s) && s == 7);
    cr_assert(!mp_fs_parse_step_name("step_7.partial", "", &s));
    cr_assert(!mp_fs_parse_step_name("step_", NULL, NULL));
    cr_assert(!mp_fs_parse_step_name("step_-1", NULL, NULL));
    cr_assert(!mp_fs_parse_step_name("steps_1", NULL, NULL));
    cr_assert(!mp_fs_parse_step_name("step_99999999999999999999", NULL, NULL), "int64 overflow");
}

/* Names in dir, sorted, joined by ' ' (the listing the temp-file tests compare). */
static void names_in(const char *dir, char *out, size_t cap) {
    struct dirent **v;
    int n = scandir(dir, &v, NULL, alphasort);
    cr_assert(n >= 0);
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        if (v[i]->d_name[0] != '.') snprintf(out + strlen(out), cap - strlen(out), "%s ", v[i]->d_name);
        free(v[i]);
    }
    free(v);
}

Test(fsutil, the_temp_file_convention) {
    char base[] = "/tmp/mp_tmpc_XXXXXX";
    cr_assert(mkdtemp(base));
    mp_err e;
    char *f = mp_fs_join(base, "out.bin"), *t = mp_fs_tmp_name(f), want[256], got[512];
    snprintf(want, sizeof want, "%s.tmp.%ld", f, (long)getpid());
    cr_assert_str_eq(t, want);
    cr_assert(mp_fs_is_tmp_name("latest.tmp.123") && mp_fs_is_tmp_name(".tmp.7"));
    cr_assert(!mp_fs_is_tmp_name("latest.tmp") && !mp_fs_is_tmp_name("latest.tmp.") &&
              !mp_fs_is_tmp_name("a.tmp.12x") && !mp_fs_is_tmp_name("view.h5.repair"));
    /* written under the temp name, the final name only at commit */
    mp_fs_out o;
    cr_assert_eq(mp_fs_out_open(&o, f, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(mp_fs_out_write(&o, "abc", 3, &e), MP_OK, "%s", e.msg);
    names_in(base, got, sizeof got);
    snprintf(want, sizeof want, "out.bin.tmp.%ld ", (long)getpid());
    cr_assert_str_eq(got, want);
    cr_assert_eq(mp_fs_out_commit(&o, &e), MP_OK, "%s", e.msg);
    names_in(base, got, sizeof got);
    cr_assert_str_eq(got, "out.bin ");
    char *text;
    cr_assert_eq(mp_read_text(f, 100, &text, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_str_eq(text, "abc");
    free(text);
    /* abandoned: the old file stays as it was, nothing else is left */
    cr_assert_eq(mp_fs_out_open(&o, f, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(mp_fs_out_write(&o, "xyz!", 4, &e), MP_OK, "%s", e.msg);
    mp_fs_out_abandon(&o);
    mp_fs_out_abandon(&o);   /* released: a no-op */
    names_in(base, got, sizeof got);
    cr_assert_str_eq(got, "out.bin ");
    /* a temp file that cannot be created names the final path */
    char *nodir = mp_fs_join(base, "no/such");
    cr_assert_eq(mp_fs_out_open(&o, nodir, &e), MP_EIO);
    cr_assert(strstr(e.msg, "no/such") && strstr(e.msg, "No such file"), "%s", e.msg);
    /* leftovers of crashed writers of out.bin (any pid) go; other names stay */
    const char *keep[] = {"out.bin.tmp.1", "out.bin.tmp.99999", "out.bin.tmp", "out.bin.tmp.1x", "other.tmp.5"};
    for (int i = 0; i < 5; i++) {
        char *p = mp_fs_join(base, keep[i]);
        FILE *fp = fopen(p, "w");
        cr_assert(fp);
        fclose(fp);
        free(p);
    }
    int removed = -1;
    cr_assert_eq(mp_fs_remove_tmp_leftovers(base, "out.bin", &removed, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(removed, 2);
    names_in(base, got, sizeof got);
    cr_assert_str_eq(got, "other.tmp.5 out.bin out.bin.tmp out.bin.tmp.1x ");
    cr_assert_eq(mp_fs_remove_tree(base, &e), MP_OK, "%s", e.msg);
    free(f); free(t); free(nodir);
}

/* mp_fs_step_fn of the scanner test: records "name:step:k;" into the buffer ctx, stops at step 3. */
static int note_step(void *ctx, const char *name, int64_t step, int k) {
    char *b = ctx;
    snprintf(b + strlen(b), 512 - strlen(b), "%s:%lld:%d;", name, (long long)step, k);
    return step == 3;
}

Test(fsutil, the_step_scanner_takes_step_directories_only) {
    char base[] = "/tmp/mp_scan_XXXXXX";
    cr_assert(mkdtemp(base));
    mp_err e;
    const char *dirs[] = {"step_00000002", "step_5.partial", "step_12abc", "step_", "step_-1", "step_7.tmp", "x"};
    for (size_t i = 0; i < sizeof dirs / sizeof *dirs; i++) {
        char *p = mp_fs_join(base, dirs[i]);
        cr_assert_eq(mp_fs_mkdirs(p, &e), MP_OK, "%s", e.msg);
        free(p);
    }
    char *f = mp_fs_join(base, "step_00000009");   /* a file named like a step */
    FILE *fp = fopen(f, "w");
    cr_assert(fp);
    fclose(fp);
    static const char *const sfx[] = {"", ".partial", NULL};
    char got[512] = "";
    cr_assert_eq(mp_fs_each_step_dir(base, sfx, note_step, got, &e), MP_OK, "%s", e.msg);
    /* readdir order is the file system's: check each entry, and the count */
    cr_assert(strstr(got, "step_00000002:2:0;") && strstr(got, "step_5.partial:5:1;"), "%s", got);
    int n = 0;
    for (const char *q = got; (q = strchr(q, ';')); q++) n++;
    cr_assert_eq(n, 2, "%s", got);
    char *gone = mp_fs_join(base, "none");
    got[0] = '\0';
    cr_assert_eq(mp_fs_each_step_dir(gone, sfx, note_step, got, &e), MP_OK, "a missing root holds no steps");
    cr_assert_str_eq(got, "");
    cr_assert_eq(mp_fs_each_step_dir(f, sfx, note_step, got, &e), MP_EIO);
    cr_assert(strstr(e.msg, "listing ") && strstr(e.msg, "step_00000009"), "%s", e.msg);
    /* a nonzero return stops the scan */
    char *p3 = mp_fs_join(base, "step_3");
    cr_assert_eq(mp_fs_mkdirs(p3, &e), MP_OK, "%s", e.msg);
    static const char *const only[] = {"", NULL};
    cr_assert_eq(mp_fs_each_step_dir(base, only, note_step, got, &e), MP_OK, "%s", e.msg);
    cr_assert(strstr(got, "step_3:3:0;"), "%s", got);
    cr_assert(!strstr(got, "step_3:3:0;step_"), "went on after a stop: %s", got);
    cr_assert_eq(mp_fs_remove_tree(base, &e), MP_OK, "%s", e.msg);
    free(f); free(gone); free(p3);
}

Test(config, hf_config_json_is_accepted_and_round_trips) {
    const char *hf = "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64,"
                     " \"intermediate_size\": 172, \"num_hidden_layers\": 3, \"num_attention_heads\": 8,"
                     " \"num_key_value_heads\": 2, \"vocab_size\": 1000, \"rms_norm_eps\": 1e-6, \"rope_theta\": 500000.0,"
                     " \"hidden_act\": \"silu\", \"attention_bias\": false, \"rope_scaling\": null,"
                     " \"torch_dtype\": \"bfloat16\", \"bos_token_id\": 1, \"tie_word_embeddings\": true}";
    llama_config m;
    llama_config_default(&m);
    mp_err e;
    cr_assert_eq(llama_config_parse(hf, "hf.json", &m, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.intermediate_size, 172);
    cr_assert_eq(m.tie_word_embeddings, 1);
    cr_assert_float_eq(m.rope_theta, 500000.0, 1e-9);
    char *j = llama_config_to_json(&m);
    llama_config m2;
    llama_config_default(&m2);
    cr_assert_eq(llama_config_parse(j, "round trip", &m2, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert(!memcmp(&m, &m2, sizeof m), "config changed in a round trip");
    free(j);
}

Test(config, values_that_change_the_math_are_refused) {
    const char *bad[][2] = {{"{\"hidden_act\": \"gelu\"}", "hidden_act"},
                            {"{\"attention_bias\": true}", "attention_bias"},
                            {"{\"rope_scaling\": {\"type\": \"linear\"}}", "rope_scaling"},
                            {"{\"hidden_size\": 64, \"num_attention_heads\": 4, \"head_dim\": 15}", "head_dim"},
                            {"{\"hidden_size\": -3}", "hidden_size"},
                            {"{\"hidden_size\": 64.5}", "integer"},
                            {"{\"train\": {\"lr\": \"fast\"}}", "lr"},
                            {"{\"train\": 3}", "train"},
                            {"[1, 2]", "object"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llama_config m;
        mp_train_config t;
        llama_config_default(&m);
        mp_train_config_default(&t);
        mp_err e;
        cr_assert_eq(llama_config_parse(bad[i][0], "c.json", &m, &t, &e), MP_EINPUT, "%s accepted", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]) && strstr(e.msg, "c.json"), "%s: message \"%s\"", bad[i][0], e.msg);
    }
}

/* The small shape every case below starts from (the five required keys). */
#define SHAPE "\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, " \
              "\"num_attention_heads\": 4, \"vocab_size\": 256"

static mp_code parse_model(const char *text, llama_config *m, mp_err *e) {
    llama_config_default(m);   /* the parser must not take anything from here */
    mp_err_clear(e);
    return llama_config_parse(text, "c.json", m, NULL, e);
}

static char *config_path(const char *name) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/tests/configs/%s", tu_src(), name);
    return path;
}

Test(config, real_openllama_3b_config_has_as_many_kv_heads_as_heads) {
    /* openlm-research/open_llama_3b's config.json: no num_key_value_heads */
    llama_config m;
    llama_config_default(&m);
    mp_err e;
    cr_assert_eq(llama_config_load(config_path("hf_open_llama_3b.json"), &m, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.num_attention_heads, 32);
    cr_assert_eq(m.num_key_value_heads, 32, "kv heads %d", m.num_key_value_heads);
    cr_assert_eq(m.hidden_size, 3200);
    cr_assert_eq(m.intermediate_size, 8640);
    cr_assert_eq(m.num_hidden_layers, 26);
    cr_assert_eq(m.vocab_size, 32000);
    cr_assert_eq(m.max_position_embeddings, 2048);
    cr_assert_float_eq(m.rms_norm_eps, 1e-6, 1e-15);
    cr_assert_float_eq(m.rope_theta, 10000.0, 1e-9);
    cr_assert_eq(m.tie_word_embeddings, 0);
    /* null is LlamaConfig's None too */
    cr_assert_eq(parse_model("{" SHAPE ", \"num_key_value_heads\": null}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(m.num_key_value_heads, 4);
}

Test(config, missing_keys_take_llamaconfig_defaults) {
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_model("{" SHAPE "}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_float_eq(m.rms_norm_eps, 1e-6, 1e-15);   /* llama_config_default has 1e-5 */
    cr_assert_eq(m.num_key_value_heads, 4);
    cr_assert_eq(m.max_position_embeddings, 2048);
    cr_assert_float_eq(m.rope_theta, 10000.0, 1e-9);
    cr_assert_eq(m.tie_word_embeddings, 0);
    cr_assert_float_eq(m.initializer_range, 0.02, 1e-15);
    cr_assert_eq(llama_head_dim(&m), 16);
    /* given keys win */
    cr_assert_eq(parse_model("{" SHAPE ", \"rms_norm_eps\": 1e-5, \"num_key_value_heads\": 2}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_float_eq(m.rms_norm_eps, 1e-5, 1e-15);
    cr_assert_eq(m.num_key_value_heads, 2);
}

/* One table says what a missing key means (hf_default): the hand-built model takes it for every field
 * it does not choose, so it equals a config file giving only its shape and its rms_norm_eps. */
Test(config, the_default_model_is_a_config_file_that_gives_only_its_shape) {
    llama_config d, m;
    mp_err e;
    llama_config_default(&d);
    cr_assert_eq(parse_model("{\"hidden_size\": 256, \"intermediate_size\": 704, \"num_hidden_layers\": 4, "
                             "\"num_attention_heads\": 4, \"vocab_size\": 256, \"rms_norm_eps\": 1e-5}", &m, &e),
                 MP_OK, "%s", e.msg);
    unsigned diff = llama_config_diff(&d, &m, LLAMA_CF_NONE);
    for (int f = 0; f < LLAMA_CF_COUNT; f++)
        cr_assert(!(diff & LLAMA_CF_BIT(f)), "llama_config_default's %s differs from the parsed one",
                  llama_config_field_name((llama_config_field)f));
    cr_assert(d.n_eos == m.n_eos && d.eos_is_list == m.eos_is_list, "eos ids differ");   /* not in the diff */
}

Test(config, the_shape_keys_are_required) {
    const char *keys[] = {"hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "vocab_size"};
    const char *vals[] = {"64", "128", "2", "4", "256"};
    for (int skip = 0; skip < 5; skip++) {
        char text[512] = "{";
        for (int i = 0; i < 5; i++) {
            if (i == skip) continue;
            snprintf(text + strlen(text), sizeof text - strlen(text), "%s\"%s\": %s", strlen(text) > 1 ? ", " : "",
                     keys[i], vals[i]);
        }
        strcat(text, "}");
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_model(text, &m, &e), MP_EINPUT, "%s accepted", text);
        cr_assert(strstr(e.msg, keys[skip]) && strstr(e.msg, "required") && strstr(e.msg, "c.json"), "%s: %s", text, e.msg);
    }
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_model("{}", &m, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "hidden_size") && strstr(e.msg, "vocab_size") && strstr(e.msg, "are required"), "%s", e.msg);
    /* a wrong value is reported before a missing key */
    cr_assert_eq(parse_model("{\"hidden_size\": 66, \"num_attention_heads\": 4}", &m, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "not divisible by num_attention_heads"), "%s", e.msg);
}

Test(config, only_the_families_of_the_table_are_accepted) {
    const char *bad[][2] = {
        {"{" SHAPE ", \"model_type\": \"gemma\"}", "\"gemma\" is not supported (supported: \"llama\", \"mistral\", "
                                                   "\"qwen2\", \"qwen3\", \"phi3\")"},
        {"{" SHAPE ", \"model_type\": 3}", "model_type"},
        {"{" SHAPE ", \"model_type\": null}", "model_type"},
        {"{" SHAPE ", \"architectures\": [\"MistralForCausalLM\"]}", "MistralForCausalLM"},
        {"{" SHAPE ", \"model_type\": \"qwen2\", \"architectures\": [\"LlamaForCausalLM\"]}",
         "model_type \"qwen2\" is only \"Qwen2ForCausalLM\""},
        {"{" SHAPE ", \"architectures\": [\"LlamaForCausalLM\", \"LlamaModel\"]}", "LlamaModel"},
        {"{" SHAPE ", \"architectures\": \"LlamaForCausalLM\"}", "architectures"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_model(bad[i][0], &m, &e), MP_EINPUT, "%s accepted", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]) && strstr(e.msg, "c.json"), "%s: message \"%s\"", bad[i][0], e.msg);
        cr_assert(strstr(e.msg, "model_type") || strstr(e.msg, "architectures"), "%s: %s", bad[i][0], e.msg);
    }
    llama_config m;
    mp_err e;
    cr_assert_eq(parse_model("{" SHAPE ", \"model_type\": \"llama\", \"architectures\": [\"LlamaForCausalLM\"]}", &m, &e),
                 MP_OK, "%s", e.msg);
    cr_assert_eq(parse_model("{" SHAPE ", \"architectures\": null}", &m, &e), MP_OK, "%s", e.msg);
}

Test(config, keys_transformers_ignores_are_accepted) {
    const char *ok[] = {
        "\"is_llama_config\": true", "\"rope_interleaved\": false", "\"max_length\": 4096", "\"temperature\": 0.6",
        "\"top_p\": 0.9", "\"top_k\": 50", "\"do_sample\": true", "\"repetition_penalty\": 1.1",
        "\"mlp_bias\": null", "\"attention_bias\": null", "\"mlp_bias\": false", "\"dtype\": \"bfloat16\"",
        "\"torch_dtype\": \"float16\"", "\"pretraining_tp\": 1", "\"head_dim\": 16", "\"head_dim\": null",
        "\"rope_scaling\": null", "\"rope_scaling\": {\"rope_type\": \"default\"}", "\"rope_scaling\": {\"type\": \"default\"}",
        "\"rope_parameters\": null", "\"rope_parameters\": {\"rope_type\": \"default\"}",
        "\"pad_token_id\": null", "\"transformers_version\": \"5.0.0\"", "\"use_cache\": false",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{" SHAPE ", \"rms_norm_eps\": 1e-5, \"num_key_value_heads\": 2, %s}", ok[i]);
        llama_config m, ref;
        mp_err e;
        cr_assert_eq(parse_model(text, &m, &e), MP_OK, "%s: %s", ok[i], e.msg);
        cr_assert_eq(parse_model("{" SHAPE ", \"rms_norm_eps\": 1e-5, \"num_key_value_heads\": 2}", &ref, &e), MP_OK);
        cr_assert(!memcmp(&m, &ref, sizeof m), "%s changed the model", ok[i]);
    }
}

/* Published config.json files of Llama-architecture models of several vintages (tests/data/hf_configs,
 * SOURCES.md says where each came from), as transformers wrote them, bookkeeping keys and all: each is
 * accepted and reads as the model it describes. */
Test(config, published_hf_configs_are_accepted) {
    static const struct {
        const char *file;
        int hidden, layers, heads, kv, vocab, max_pos, tied;
        double theta;
        mp_rope_type rope;
    } want[] = {
        {"llama-2-7b-hf.json", 4096, 32, 32, 32, 32000, 4096, 0, 10000.0, MP_ROPE_DEFAULT},
        {"llama-2-7b-chat-hf.json", 4096, 32, 32, 32, 32000, 4096, 0, 10000.0, MP_ROPE_DEFAULT},
        {"codellama-7b-hf.json", 4096, 32, 32, 32, 32016, 16384, 0, 1000000.0, MP_ROPE_DEFAULT},
        {"vicuna-7b-v1.5.json", 4096, 32, 32, 32, 32000, 4096, 0, 10000.0, MP_ROPE_DEFAULT},
        {"meta-llama-3-8b.json", 4096, 32, 32, 8, 128256, 8192, 0, 500000.0, MP_ROPE_DEFAULT},
        {"llama-3.1-8b.json", 4096, 32, 32, 8, 128256, 131072, 0, 500000.0, MP_ROPE_LLAMA3},
        {"llama-3.2-1b.json", 2048, 16, 32, 8, 128256, 131072, 1, 500000.0, MP_ROPE_LLAMA3},
        {"llama-3.2-3b.json", 3072, 28, 24, 8, 128256, 131072, 1, 500000.0, MP_ROPE_LLAMA3},
        {"tinyllama-1.1b-chat-v1.0.json", 2048, 22, 32, 4, 32000, 2048, 0, 10000.0, MP_ROPE_DEFAULT},
        {"open-llama-3b.json", 3200, 26, 32, 32, 32000, 2048, 0, 10000.0, MP_ROPE_DEFAULT},
        {"smollm2-135m.json", 576, 30, 9, 3, 49152, 8192, 1, 100000.0, MP_ROPE_DEFAULT},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/hf_configs/%s", tu_src(), want[i].file);
        llama_config m;
        mp_err e;
        cr_assert_eq(llama_config_load(path, &m, NULL, &e), MP_OK, "%s: %s", want[i].file, e.msg);
        cr_assert(m.hidden_size == want[i].hidden && m.num_hidden_layers == want[i].layers &&
                      m.num_attention_heads == want[i].heads && m.num_key_value_heads == want[i].kv &&
                      m.vocab_size == want[i].vocab && m.max_position_embeddings == want[i].max_pos &&
                      m.tie_word_embeddings == want[i].tied && m.rope_theta == want[i].theta &&
                      m.rope_scaling.type == want[i].rope,
                  "%s: read as hidden %d layers %d heads %d/%d vocab %d max_pos %d tied %d theta %g rope %d",
                  want[i].file, m.hidden_size, m.num_hidden_layers, m.num_attention_heads, m.num_key_value_heads,
                  m.vocab_size, m.max_position_embeddings, m.tie_word_embeddings, m.rope_theta,
                  (int)m.rope_scaling.type);
    }
}

/* eos_token_id: an int or a list (Llama 3.x instruct models list several) is kept, written back in the same
 * form, and survives a round trip; null or absent: none; an id at or above vocab_size is dropped. It is not
 * part of llama_config_diff (it does not change the model). The published configs keep theirs. */
Test(config, eos_token_id_is_kept_as_an_int_or_a_list) {
    static const struct {
        const char *value;
        int n, is_list, ids[3];
    } cases[] = {{"2", 1, 0, {2}}, {"[128001, 128008, 128009]", 3, 1, {128001, 128008, 128009}}, {"[7]", 1, 1, {7}},
                 {"null", 0, 0, {0}}, {"[5, 200000]", 1, 1, {5}}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                 "\"num_attention_heads\": 4, \"vocab_size\": 128256, \"eos_token_id\": %s}", cases[i].value);
        llama_config m, m2;
        mp_err e;
        cr_assert_eq(llama_config_parse(text, "eos.json", &m, NULL, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(m.n_eos, cases[i].n, "%s: %d ids", cases[i].value, m.n_eos);
        for (int k = 0; k < m.n_eos; k++) cr_assert_eq(m.eos_token_id[k], cases[i].ids[k], "%s", cases[i].value);
        char *j = llama_config_to_json(&m);
        cr_assert_eq(llama_config_parse(j, "round trip", &m2, NULL, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(m2.n_eos, m.n_eos);
        if (m.n_eos) cr_assert_eq(m2.eos_is_list, cases[i].is_list, "%s: written back as %s", cases[i].value, j);
        for (int k = 0; k < m.n_eos; k++) cr_assert_eq(m2.eos_token_id[k], m.eos_token_id[k]);
        cr_assert_eq(llama_config_diff(&m, &m2, LLAMA_CF_NONE), 0u);
        free(j);
    }
    static const struct { const char *file; int eos; } pub[] = {
        {"llama-2-7b-hf.json", 2}, {"llama-3.1-8b.json", 128001}, {"smollm2-135m.json", 0}};
    for (size_t i = 0; i < sizeof pub / sizeof pub[0]; i++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/tests/data/hf_configs/%s", tu_src(), pub[i].file);
        llama_config m;
        mp_err e;
        cr_assert_eq(llama_config_load(path, &m, NULL, &e), MP_OK, "%s: %s", pub[i].file, e.msg);
        cr_assert(m.n_eos == 1 && m.eos_token_id[0] == pub[i].eos, "%s: eos %d ids, first %d", pub[i].file, m.n_eos,
                  m.eos_token_id[0]);
    }
}

/* A top-level key transformers' LlamaConfig does not know is kept and ignored there: accepted here too
 * (with one warning, tests/config_keys.sh); in the "train" object a typo stays an error. Keys that change
 * the math and cannot be represented stay errors naming them. */
Test(config, unknown_top_level_keys_are_accepted_train_keys_are_not) {
    llama_config m, ref;
    mp_err e;
    cr_assert_eq(parse_model("{" SHAPE ", \"num_key_value_heads\": 2}", &ref, &e), MP_OK, "%s", e.msg);
    const char *ok[] = {"\"unk_token_id\": 0", "\"auto_map\": {\"AutoConfig\": \"x.Config\"}",
                        "\"quantization_config\": null", "\"_commit_hash\": \"abc\"", "\"pretraining_tp\": 2",
                        "\"some_future_key\": [1, 2]", "\"transformers.js_config\": {}"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{" SHAPE ", \"num_key_value_heads\": 2, %s}", ok[i]);
        cr_assert_eq(parse_model(text, &m, &e), MP_OK, "%s: %s", ok[i], e.msg);
        cr_assert(!memcmp(&m, &ref, sizeof m), "%s changed the model", ok[i]);
    }
    mp_train_config t;
    mp_train_config_default(&t);
    cr_assert_eq(llama_config_parse("{" SHAPE ", \"train\": {\"stepz\": 3}}", "x.json", &m, &t, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "unknown key \"stepz\""), "%s", e.msg);
    cr_assert_eq(parse_model("{" SHAPE ", \"attention_bias\": true}", &m, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "attention_bias"), "%s", e.msg);
}

/* A misspelt key with an effect, absent from the file, is an error naming the file, the key and
 * the key it was meant to be: otherwise that key's default would silently replace the value given. */
Test(config, near_typos_of_absent_keys_are_errors) {
    static const struct { const char *key, *meant; } c[] = {
        {"rope_thetta", "rope_theta"}, {"num_key_value_head", "num_key_value_heads"},
        {"rms_norm_epsilon", "rms_norm_eps"}, {"Rope_Theta", "rope_theta"}, {"rope-theta", "rope_theta"},
        {"tie_word_embedding", "tie_word_embeddings"}, {"max_position_embedding", "max_position_embeddings"},
        {"initalizer_range", "initializer_range"}, {"rope_scalling", "rope_scaling"}, {"trian", "train"},
        {"attention_biass", "attention_bias"}, {"hiddenact", "hidden_act"}, {"eos_token_ids", "eos_token_id"},
        {"max_pos_embeddings", "max_position_embeddings"}, {"Rms_Norm_Epsilon", "rms_norm_eps"},
        {"num_attention_head", "num_attention_heads"}};
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char text[512];
        /* num_attention_heads: the case for it drops the key from the shape */
        snprintf(text, sizeof text, "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, "
                 "\"vocab_size\": 256, %s\"%s\": 1}", strcmp(c[i].meant, "num_attention_heads") ?
                 "\"num_attention_heads\": 4, " : "", c[i].key);
        llama_config m;
        mp_err e;
        cr_assert_eq(llama_config_parse(text, "typo.json", &m, NULL, &e), MP_EINPUT, "%s was accepted", c[i].key);
        char want[256];
        snprintf(want, sizeof want, "typo.json: key \"%s\": not a key of transformers' LlamaConfig; did you mean %s? "
                 "(the file gives no %s", c[i].key, c[i].meant, c[i].meant);
        cr_assert(strstr(e.msg, want), "%s: %s", c[i].key, e.msg);
    }
}

/* Unknown keys that are no typo of an absent key with an effect keep transformers' behaviour (ignored,
 * one warning: tests/config_keys.sh checks its text and hint): far from every known key, near one the
 * file gives (its twin), near a bookkeeping key only, or a real key of another model family. */
Test(config, other_unknown_keys_are_ignored) {
    llama_config m, ref;
    mp_err e;
    cr_assert_eq(parse_model("{" SHAPE ", \"rope_theta\": 1000}", &ref, &e), MP_OK, "%s", e.msg);
    const char *ok[] = {
        "\"rope_thetta\": 5", "\"rope_theta_\": 5", "\"rms_norm_epsilon\": 1e-5, \"rms_norm_eps\": 1e-6",
        "\"some_future_key\": 1", "\"bos_token_idd\": 1", "\"torch_dtypes\": 1",
        /* other families (Mistral, Qwen2/3, Gemma, Falcon, GPT-NeoX, Phi, DeepSeek, BERT, Mixtral) */
        "\"sliding_window\": 4096", "\"use_sliding_window\": false", "\"max_window_layers\": 28",
        "\"num_kv_heads\": 2", "\"layer_norm_eps\": 1e-5", "\"layer_norm_epsilon\": 1e-5", "\"rotary_emb_base\": 1",
        "\"partial_rotary_factor\": 0.5", "\"rope_local_base_freq\": 1", "\"hidden_activation\": \"gelu\"",
        "\"cls_token_id\": 1", "\"mask_token_id\": 1", "\"qk_rope_head_dim\": 64", "\"v_head_dim\": 64",
        "\"num_experts_per_tok\": 2", "\"num_local_experts\": 8", "\"router_aux_loss_coef\": 0.01",
        "\"qkv_bias\": true", "\"n_head\": 4", "\"n_layer\": 2", "\"num_layers\": 2", "\"type_vocab_size\": 2",
        "\"final_logit_softcapping\": 30", "\"query_pre_attn_scalar\": 256", "\"original_max_position_embeddings\": 1",
        "\"layer_types\": []", "\"rope_scaling_type\": 1", "\"norm_topk_prob\": true", "\"use_qk_norm\": true",
        /* tokenizers' own token ids near eos_token_id, and single words near train / architectures */
        "\"eot_token_id\": 1", "\"eom_token_id\": 1", "\"eod_token_id\": 1", "\"sos_token_id\": 1",
        "\"bot_token_id\": 1", "\"training\": {}", "\"trainer\": 1", "\"trainable\": true", "\"arch\": 1"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{" SHAPE ", %s, \"rope_theta\": 1000}", ok[i]);
        if (strstr(ok[i], "rms_norm")) snprintf(text, sizeof text, "{" SHAPE ", \"rope_theta\": 1000, %s}", ok[i]);
        cr_assert_eq(parse_model(text, &m, &e), MP_OK, "%s: %s", ok[i], e.msg);
        if (!strstr(ok[i], "rms_norm")) cr_assert(!memcmp(&m, &ref, sizeof m), "%s changed the model", ok[i]);
    }
}

/* Every config file the project ships or tests with (configs/, tests/configs/, tests/data/hf_configs/) is
 * read without a typo error: the rule has no false positives on them. */
Test(config, every_shipped_config_parses) {
    const char *dirs[] = {"configs", "tests/configs", "tests/data/hf_configs"};
    int n = 0;
    for (size_t d = 0; d < 3; d++) {
        char dir[1024];
        snprintf(dir, sizeof dir, "%s/%s", tu_src(), dirs[d]);
        DIR *h = opendir(dir);
        cr_assert(h, "%s", dir);
        for (struct dirent *f; (f = readdir(h));) {
            size_t L = strlen(f->d_name);
            if (L < 5 || strcmp(f->d_name + L - 5, ".json")) continue;
            char path[2048];
            snprintf(path, sizeof path, "%s/%s", dir, f->d_name);
            llama_config m;
            mp_train_config t;
            mp_train_config_default(&t);
            mp_err e;
            cr_assert_eq(llama_config_load(path, &m, &t, &e), MP_OK, "%s: %s", path, e.msg);
            n++;
        }
        closedir(h);
    }
    cr_assert_geq(n, 25, "only %d config files found", n);
}

Test(config, rope_parameters_carry_rope_theta) {
    llama_config m;
    llama_config_default(&m);
    mp_err e;
    /* a transformers 5 config.json: rope_parameters, dtype, no top-level rope_theta */
    cr_assert_eq(llama_config_load(config_path("hf_tf5_rope_parameters.json"), &m, NULL, &e), MP_OK, "%s", e.msg);
    cr_assert_float_eq(m.rope_theta, 500000.0, 1e-6);
    cr_assert_eq(m.num_key_value_heads, 8);
    cr_assert_eq(m.tie_word_embeddings, 1);
    cr_assert_float_eq(m.rms_norm_eps, 1e-5, 1e-15);
    /* the same value at the top level is fine, another one is a contradiction */
    cr_assert_eq(parse_model("{" SHAPE ", \"rope_theta\": 5e5, \"rope_parameters\": {\"rope_type\": \"default\", "
                             "\"rope_theta\": 500000}}", &m, &e), MP_OK, "%s", e.msg);
    cr_assert_float_eq(m.rope_theta, 500000.0, 1e-6);
    cr_assert_eq(parse_model("{" SHAPE ", \"rope_theta\": 1e4, \"rope_parameters\": {\"rope_type\": \"default\", "
                             "\"rope_theta\": 500000}}", &m, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "rope_theta") && strstr(e.msg, "rope_parameters"), "%s", e.msg);
    /* the JSON round trip of a parsed config is the same config */
    cr_assert_eq(llama_config_load(config_path("hf_tf5_rope_parameters.json"), &m, NULL, &e), MP_OK, "%s", e.msg);
    char *j = llama_config_to_json(&m);
    llama_config m2;
    cr_assert_eq(parse_model(j, &m2, &e), MP_OK, "%s", e.msg);
    cr_assert(!memcmp(&m, &m2, sizeof m));
    free(j);
}

Test(config, other_rope_types_are_refused) {
    const char *bad[][2] = {
        {"\"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}", "llama3"},
        {"\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}", "dynamic"},
        {"\"rope_scaling\": {\"rope_type\": \"default\", \"factor\": 2.0}", "factor"},
        {"\"rope_scaling\": {\"factor\": 2.0}", "rope_scaling"},
        {"\"rope_scaling\": \"default\"", "rope_scaling"},
        {"\"rope_parameters\": {\"rope_type\": \"yarn\", \"rope_theta\": 10000}", "yarn"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": -1}", "rope_theta"},
        {"\"rope_parameters\": {\"rope_type\": \"default\", \"partial_rotary_factor\": 0.5}", "partial_rotary_factor"},
        {"\"mlp_bias\": true", "mlp_bias"},
        {"\"head_dim\": 33", "head_dim"},
        {"\"head_dim\": 0", "head_dim"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[512];
        snprintf(text, sizeof text, "{" SHAPE ", %s}", bad[i][0]);
        llama_config m;
        mp_err e;
        cr_assert_eq(parse_model(text, &m, &e), MP_EINPUT, "%s accepted", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]) && strstr(e.msg, "c.json"), "%s: message \"%s\"", bad[i][0], e.msg);
    }
}

/* The training config: each bad value is refused with MP_EINPUT and a message naming the key and flag. */
Test(config, train_config_validation_names_the_key_and_flag) {
    const char *want[][2] = {{"grad_clip", "--grad-clip"}, {"weight_decay", "--weight-decay"}, {"--seed", "got -1"},
                             {"min_lr", "--lr"}, {"--eval-batches", "validation data"}, {"grad_accum", "batch_size"}};
    for (int i = 0; i < 6; i++) {
        mp_train_config t;
        mp_train_config_default(&t);
        mp_err e;
        cr_assert_eq(mp_train_config_validate(&t, &e), MP_OK, "%s", e.msg);
        switch (i) {
        case 0: t.grad_clip = -1; break;                                  /* --grad-clip -1 */
        case 1: t.weight_decay = -0.1; break;                             /* --weight-decay -0.1 */
        case 2: t.seed = (uint64_t)(int64_t)-1; break;                    /* --seed -1, as cmd_train stores it */
        case 3: t.lr = 1e-3; t.min_lr = 2e-3; break;                      /* --min-lr above --lr */
        case 4: strcpy(t.val_data, "v.bin"); t.eval_batches = 0; break;   /* --val-data v.bin --eval-batches 0 */
        case 5: t.batch_size = 6; t.grad_accum = 4; break;
        }
        mp_err_clear(&e);
        cr_assert_eq(mp_train_config_validate(&t, &e), MP_EINPUT, "case %d accepted", i);
        for (int k = 0; k < 2; k++)
            cr_assert(strstr(e.msg, want[i][k]), "case %d: \"%s\" not in: %s", i, want[i][k], e.msg);
    }
    /* limits that stay allowed: clip 0 (off), decay 0, min_lr == lr, eval_batches 0 without validation data */
    mp_train_config t;
    mp_train_config_default(&t);
    t.grad_clip = 0; t.weight_decay = 0; t.min_lr = t.lr; t.eval_batches = 0; t.seed = 0;
    mp_err e;
    cr_assert_eq(mp_train_config_validate(&t, &e), MP_OK, "%s", e.msg);
}

Test(config, train_object_values_are_checked_relations_after_flags) {
    llama_config m;
    mp_train_config t;
    mp_err e;
    const char *bad[][2] = {
        {"{" SHAPE ", \"train\": {\"grad_clip\": -1}}", "grad_clip"},
        {"{" SHAPE ", \"train\": {\"weight_decay\": -1}}", "weight_decay"},
        {"{" SHAPE ", \"train\": {\"seed\": -1}}", "seed"},
        {"{" SHAPE ", \"train\": {\"seed\": 1e19}}", "seed"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llama_config_default(&m);
        mp_train_config_default(&t);
        cr_assert_eq(llama_config_parse(bad[i][0], "c.json", &m, &t, &e), MP_EINPUT, "%s accepted", bad[i][0]);
        cr_assert(strstr(e.msg, bad[i][1]) && strstr(e.msg, "c.json: train"), "%s: %s", bad[i][0], e.msg);
    }
    /* a relation between fields can still be fixed by a flag: the parse takes it, validate refuses it */
    mp_train_config_default(&t);
    cr_assert_eq(llama_config_parse("{" SHAPE ", \"train\": {\"lr\": 2e-5}}", "c.json", &m, &t, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(mp_train_config_validate(&t, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "min_lr"), "%s", e.msg);
    t.min_lr = 0;   /* --min-lr 0 */
    cr_assert_eq(mp_train_config_validate(&t, &e), MP_OK, "%s", e.msg);
}

Test(config, seq_len_is_at_most_max_position_embeddings) {
    llama_config m;
    mp_train_config t;
    mp_err e;
    cr_assert_eq(parse_model("{" SHAPE ", \"max_position_embeddings\": 256}", &m, &e), MP_OK, "%s", e.msg);
    mp_train_config_default(&t);
    t.seq_len = 256;
    cr_assert_eq(llama_config_validate_pair(&m, &t, &e), MP_OK, "%s", e.msg);
    t.seq_len = 257;
    cr_assert_eq(llama_config_validate_pair(&m, &t, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "max_position_embeddings") && strstr(e.msg, "256") && strstr(e.msg, "--seq-len"), "%s", e.msg);
}

Test(config, diff_names_each_differing_field_less_those_the_caller_allows) {
    llama_config a, b;
    llama_config_default(&a);
    b = a;
    cr_assert_eq(llama_config_diff(&a, &b, LLAMA_CF_NONE), 0u);
    b.max_position_embeddings = 4096;
    b.rms_norm_eps = 1e-6;
    b.rope_scaling = (mp_rope_scaling){.type = MP_ROPE_LINEAR, .factor = 2};
    unsigned want = LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS) | LLAMA_CF_BIT(LLAMA_CF_RMS_NORM_EPS) |
                    LLAMA_CF_BIT(LLAMA_CF_ROPE_SCALING);
    cr_assert_eq(llama_config_diff(&a, &b, LLAMA_CF_NONE), want);
    cr_assert_eq(llama_config_diff(&a, &b, LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS)),
                 want & ~LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS));
    /* numbers a scaling type does not use do not count */
    a.rope_scaling = b.rope_scaling;
    a.rope_scaling.low_freq_factor = 7;
    cr_assert_eq(llama_config_diff(&a, &b, LLAMA_CF_NONE) & LLAMA_CF_BIT(LLAMA_CF_ROPE_SCALING), 0u);
    char buf[256];
    cr_assert_str_eq(llama_config_field_name(LLAMA_CF_MAX_POSITION_EMBEDDINGS), "max_position_embeddings");
    cr_assert_str_eq(llama_config_field_name(LLAMA_CF_ROPE_SCALING), "rope_scaling");
    llama_config_field_format(&b, LLAMA_CF_RMS_NORM_EPS, buf, sizeof buf);
    cr_assert_str_eq(buf, "1e-06");
    llama_config_field_format(&b, LLAMA_CF_TIE_WORD_EMBEDDINGS, buf, sizeof buf);
    cr_assert_str_eq(buf, "0");
    llama_config_field_format(&b, LLAMA_CF_ROPE_SCALING, buf, sizeof buf);
    cr_assert_str_eq(buf, "linear (factor 2)");
}
