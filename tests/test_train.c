/*
 * tests/test_train.c — end-to-end tests of `meshpoint train` and `meshpoint eval` (single process):
 * training memorises a repeated sequence, same seed means bitwise-identical loss sequences, and every
 * kind of bad input is refused with a message naming it and exit status 2.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/data.h"
#include "tests/testutil.h"

static const char *small_model =
    "{\"hidden_size\": 64, \"intermediate_size\": 128, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 2, \"vocab_size\": 256, \"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-5}";

/* Writes an llm.c token file of the repeated text into dir/name and returns its path. */
static char *write_repeated(const char *dir, const char *name, const char *text, int repeats) {
    size_t len = strlen(text);
    uint16_t *tok = malloc(sizeof(uint16_t) * len * (size_t)repeats);
    for (int r = 0; r < repeats; r++)
        for (size_t i = 0; i < len; i++) tok[r * len + i] = (unsigned char)text[i];
    char *path = NULL;
    cr_assert(asprintf(&path, "%s/%s", dir, name) > 0);
    mp_err err;
    cr_assert_eq(mp_token_file_write_llmc(path, tok, (int64_t)len * repeats, &err), MP_OK, "%s", err.msg);
    free(tok);
    return path;
}

/* Writes the small model's config into dir/c.json and returns its path. */
static char *small_config(const char *dir) {
    char *cfg = NULL;
    cr_assert(asprintf(&cfg, "%s/c.json", dir) > 0);
    tu_write_file(cfg, small_model);
    return cfg;
}

/* Reads the "loss" values of RUN/metrics.jsonl as text (bitwise comparison) and the last one as double. */
static int read_losses(const char *run, char lines[][64], int max, double *last) {
    char *path = NULL;
    cr_assert(asprintf(&path, "%s/metrics.jsonl", run) > 0);
    FILE *f = fopen(path, "r");
    cr_assert(f, "no %s", path);
    char buf[512];
    int n = 0;
    while (fgets(buf, sizeof buf, f)) {
        char *p = strstr(buf, "\"loss\": ");
        if (!p || n >= max) continue;
        p += 8;
        size_t k = strcspn(p, ",}");
        memcpy(lines[n], p, k < 63 ? k : 63);
        lines[n][k < 63 ? k : 63] = '\0';
        *last = atof(lines[n]);
        n++;
    }
    fclose(f);
    free(path);
    return n;
}

Test(train, memorises_a_repeated_sequence, .timeout = 300) {
    char *dir = tu_mkdtemp("mem");
    char *data = write_repeated(dir, "rep.bin", "meshpoint trains llamas! ", 400);
    char *cfg = small_config(dir), *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --run-dir %s/run --steps 300 --batch 8 "
                             "--seq-len 64 --lr 3e-3 --min-lr 1e-4 --warmup 20 --weight-decay 0 --log-every 50",
                       tu_bin(), cfg, data, dir) > 0);
    int rc = tu_run(cmd, &out);
    cr_assert_eq(rc, 0, "train failed (%d): %s", rc, out);
    char run[1024], lines[400][64];
    snprintf(run, sizeof run, "%s/run", dir);
    double last = 1e9;
    int n = read_losses(run, lines, 400, &last);
    cr_assert_eq(n, 300);
    cr_assert(atof(lines[0]) > 4.0, "initial loss %s should be near ln(256)", lines[0]);
    cr_assert_lt(last, 0.05, "loss after 300 steps is %g, expected < 0.05\n%s", last, out);
}

Test(train, same_seed_gives_bitwise_identical_losses, .timeout = 300) {
    char *dir = tu_mkdtemp("det");
    char *data = write_repeated(dir, "d.bin", "The quick brown fox jumps over the lazy dog. 0123456789\n", 100);
    char *cfg = small_config(dir);
    char lines[2][64][64];
    double last;
    int n[2];
    for (int r = 0; r < 2; r++) {
        char *cmd = NULL, *out = NULL;
        cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --run-dir %s/run%d --steps 20 --batch 4 "
                                 "--grad-accum 2 --seq-len 32 --seed 7",
                           tu_bin(), cfg, data, dir, r) > 0);
        cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
        char run[1024];
        snprintf(run, sizeof run, "%s/run%d", dir, r);
        n[r] = read_losses(run, lines[r], 64, &last);
    }
    cr_assert_eq(n[0], 20);
    cr_assert_eq(n[1], 20);
    for (int i = 0; i < 20; i++) cr_assert_str_eq(lines[0][i], lines[1][i], "step %d differs", i + 1);
    /* a different seed must give a different run (the check above is not vacuous) */
    char *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --run-dir %s/run2 --steps 2 --batch 4 "
                             "--grad-accum 2 --seq-len 32 --seed 8",
                       tu_bin(), cfg, data, dir) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    char other[2][64];
    char run[1024];
    snprintf(run, sizeof run, "%s/run2", dir);
    read_losses(run, other, 2, &last);
    cr_assert_str_neq(other[0], lines[0][0]);
}

/* ---- bad input: exit 2 and a message naming the problem ---- */

typedef struct bad_case {
    const char *what;
    const char *config;   /* NULL: the good config */
    const char *data;     /* "good", "missing", "truncated", "magic", "bigtoken" */
    const char *extra;    /* extra flags */
    const char *expect;   /* substring of the message */
} bad_case;

static void run_bad(const bad_case *bc) {
    char *dir = tu_mkdtemp("bad");
    char *cfg = NULL, *data = NULL, *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cfg, "%s/c.json", dir) > 0);
    tu_write_file(cfg, bc->config ? bc->config : small_model);
    char *good = write_repeated(dir, "good.bin", "abcdefghijklmnopqrstuvwxyz", 40);
    if (!strcmp(bc->data, "good")) {
        data = good;
    } else if (!strcmp(bc->data, "missing")) {
        cr_assert(asprintf(&data, "%s/nothere.bin", dir) > 0);
    } else {
        cr_assert(asprintf(&data, "%s/bad.bin", dir) > 0);
        FILE *in = fopen(good, "rb"), *o = fopen(data, "wb");
        static char buf[1 << 16];
        size_t n = fread(buf, 1, sizeof buf, in);
        fclose(in);
        int32_t *hdr = (int32_t *)buf;
        if (!strcmp(bc->data, "truncated")) n -= 100;
        if (!strcmp(bc->data, "magic")) hdr[0] = 12345;
        if (!strcmp(bc->data, "bigtoken")) ((uint16_t *)(buf + 1024))[17] = 300;
        fwrite(buf, 1, n, o);
        fclose(o);
    }
    cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --run-dir %s/run --steps 1 --batch 2 "
                             "--seq-len 16 %s",
                       tu_bin(), cfg, data, dir, bc->extra ? bc->extra : "") > 0);
    int rc = tu_run(cmd, &out);
    cr_assert_eq(rc, 2, "%s: expected exit 2, got %d: %s", bc->what, rc, out);
    cr_assert(strstr(out, bc->expect), "%s: message should mention \"%s\": %s", bc->what, bc->expect, out);
    cr_assert(strstr(out, "error"), "%s: no error line: %s", bc->what, out);
}

Test(train_errors, malformed_json) {
    run_bad(&(bad_case){"malformed JSON", "{\"hidden_size\": 64,, }", "good", NULL, "malformed JSON"});
}
/* A top-level key far from every known key is not an error by itself (transformers keeps unknown keys;
 * tests/config_keys.sh): the warning names it, and the key it was meant to be is then missing, which is.
 * (A near typo of an absent key, rope_thetta, is an error of its own: test_core's config tests.) */
Test(train_errors, unknown_config_key) {
    run_bad(&(bad_case){"unknown key", "{\"hidden_size\": 64, \"hiden_layers\": 3}", "good", NULL,
                        "key \"hiden_layers\": not a key of transformers' LlamaConfig"});
}
Test(train_errors, unknown_train_key) {
    run_bad(&(bad_case){"unknown train key", "{\"train\": {\"stepz\": 3}}", "good", NULL, "stepz"});
}
Test(train_errors, wrong_type) {
    run_bad(&(bad_case){"wrong type", "{\"hidden_size\": \"64\"}", "good", NULL, "expected an integer"});
}
Test(train_errors, hidden_not_divisible_by_heads) {
    run_bad(&(bad_case){"hidden % heads",
                        "{\"hidden_size\": 66, \"num_attention_heads\": 4, \"num_key_value_heads\": 2}", "good",
                        NULL, "not divisible by num_attention_heads"});
}
Test(train_errors, heads_not_divisible_by_kv_heads) {
    run_bad(&(bad_case){"heads % kv", "{\"hidden_size\": 96, \"num_attention_heads\": 6, \"num_key_value_heads\": 4}",
                        "good", NULL, "not divisible by num_key_value_heads"});
}
Test(train_errors, missing_data_file) {
    run_bad(&(bad_case){"missing data", NULL, "missing", NULL, "nothere.bin"});
}
Test(train_errors, truncated_data_file) {
    run_bad(&(bad_case){"truncated data", NULL, "truncated", NULL, "truncated"});
}
Test(train_errors, wrong_magic) {
    run_bad(&(bad_case){"wrong magic", NULL, "magic", NULL, "magic"});
}
Test(train_errors, token_id_not_below_vocab) {
    run_bad(&(bad_case){"token >= vocab", NULL, "bigtoken", NULL, "300"});
}
Test(train_errors, unknown_flag) {
    run_bad(&(bad_case){"unknown flag", NULL, "good", "--no-such-flag 3", "no-such-flag"});
}
Test(train_errors, bad_flag_value) {
    run_bad(&(bad_case){"bad number", NULL, "good", "--steps many", "steps"});
}
Test(train_errors, mesh_needs_mpirun) {
    run_bad(&(bad_case){"tp without mpirun", NULL, "good", "--tp 2", "mpirun"});
}
Test(train_errors, batch_not_divisible_by_accum) {
    run_bad(&(bad_case){"batch % accum", NULL, "good", "--grad-accum 3", "grad_accum"});
}
Test(train_errors, negative_grad_clip) {
    run_bad(&(bad_case){"--grad-clip -1", NULL, "good", "--grad-clip -1", "--grad-clip"});
}
Test(train_errors, negative_weight_decay) {
    run_bad(&(bad_case){"--weight-decay -0.1", NULL, "good", "--weight-decay -0.1", "--weight-decay"});
}
Test(train_errors, negative_seed) {
    run_bad(&(bad_case){"--seed -1", NULL, "good", "--seed -1", "--seed"});
}
Test(train_errors, no_eval_batches_with_validation_data) {
    run_bad(&(bad_case){"--eval-batches 0", NULL, "good", "--val-data v.bin --eval-batches 0", "--eval-batches"});
}
Test(train_errors, min_lr_above_lr) {
    run_bad(&(bad_case){"--min-lr > --lr", NULL, "good", "--lr 1e-3 --min-lr 2e-3", "min_lr"});
}
Test(train_errors, numbers_are_decimal) {
    run_bad(&(bad_case){"hex steps", NULL, "good", "--steps 0x10", "--steps"});
}
Test(train_errors, model_type_outside_the_families) {
    run_bad(&(bad_case){"model_type gpt2",
                        "{\"model_type\": \"gpt2\", \"hidden_size\": 64, \"intermediate_size\": 128, "
                        "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256}",
                        "good", NULL, "model_type"});
}
Test(train_errors, architecture_not_llama) {
    run_bad(&(bad_case){"MistralForCausalLM",
                        "{\"architectures\": [\"MistralForCausalLM\"], \"hidden_size\": 64, \"intermediate_size\": 128, "
                        "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256}",
                        "good", NULL, "MistralForCausalLM"});
}
Test(train_errors, shape_key_missing) {
    run_bad(&(bad_case){"no intermediate_size",
                        "{\"hidden_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"vocab_size\": 256}",
                        "good", NULL, "intermediate_size"});
}
/* --recompute takes none or full, in the config file ("train": {"recompute": ...}) as on the command line */
Test(train_errors, recompute_mode_unknown_in_config) {
    run_bad(&(bad_case){"recompute partial",
                        "{\"hidden_size\": 32, \"intermediate_size\": 64, \"num_hidden_layers\": 2, "
                        "\"num_attention_heads\": 4, \"vocab_size\": 256, \"train\": {\"recompute\": \"partial\"}}",
                        "good", NULL, "key \"recompute\": expected one of \"none\", \"full\", got \"partial\""});
}
Test(train_errors, recompute_mode_unknown_flag) {
    run_bad(&(bad_case){"--recompute some", NULL, "good", "--recompute some", "--recompute"});
}

/* the memory plan is checked before anything large is allocated */
Test(train_errors, memory_plan_above_max_memory) {
    run_bad(&(bad_case){"--max-memory 64K", NULL, "good", "--max-memory 64K", "above --max-memory 64.0 KiB"});
}
Test(train_errors, max_memory_not_a_size) {
    run_bad(&(bad_case){"--max-memory 12X", NULL, "good", "--max-memory 12X", "--max-memory: \"12X\" is not a size"});
}
Test(train_errors, model_beyond_any_memory) {
    /* hidden_size 1e9: the byte counts would overflow; refused with the figures instead of SIGABRT */
    run_bad(&(bad_case){"hidden_size 1e9",
                        "{\"hidden_size\": 1000000000, \"intermediate_size\": 64, \"num_hidden_layers\": 2, "
                        "\"num_attention_heads\": 4, \"vocab_size\": 256}",
                        "good", NULL, "too large to plan"});
}
Test(train_errors, memory_plan_above_the_host) {
    /* 3 TB of parameters and moments on one rank: more than this machine has */
    run_bad(&(bad_case){"beyond the host",
                        "{\"hidden_size\": 65536, \"intermediate_size\": 200000, \"num_hidden_layers\": 2, "
                        "\"num_attention_heads\": 4, \"vocab_size\": 256}",
                        "good", NULL, "available; use more processes"});
}

/* --init-from (a new run from a checkpoint's weights): the combinations and names it refuses */
Test(train_errors, init_from_with_resume) {
    run_bad(&(bad_case){"--init-from --resume", NULL, "good", "--init-from x --resume",
                        "--init-from starts a new run from a checkpoint's weights; it cannot be combined with --resume"});
}
Test(train_errors, init_from_with_resume_from) {
    run_bad(&(bad_case){"--init-from --resume-from", NULL, "good", "--init-from x --resume-from x",
                        "cannot be combined with --resume-from"});
}
Test(train_errors, init_from_empty_path) {
    run_bad(&(bad_case){"--init-from ''", NULL, "good", "--init-from ''", "--init-from: the path is empty"});
}
Test(train_errors, init_from_missing_checkpoint) {
    run_bad(&(bad_case){"--init-from nothere", NULL, "good", "--init-from /nonexistent/nothere",
                        "--init-from: /nonexistent/nothere: no such file or directory"});
}

/* --init-from a real checkpoint: another architecture is refused naming the field, a used run directory
 * is refused as for any fresh run (--overwrite allowed), and the weights are the source's. */
Test(train_errors, init_from_checks_config_and_run_dir, .timeout = 120) {
    char *dir = tu_mkdtemp("initf");
    char *data = write_repeated(dir, "t.bin", "weights from elsewhere. ", 60);
    char *cfg = small_config(dir), *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --run-dir %s/src --steps 2 --batch 2 --seq-len 16 "
                             "--ckpt-every 2", tu_bin(), cfg, data, dir) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    char *cfg2 = NULL, *cmd2 = NULL, *out2 = NULL;
    cr_assert(asprintf(&cfg2, "%s/c2.json", dir) > 0);
    tu_write_file(cfg2, "{\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                        "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256, "
                        "\"max_position_embeddings\": 256, \"rms_norm_eps\": 1e-5}");
    cr_assert(asprintf(&cmd2, "%s train --config %s --train-data %s --run-dir %s/ft --steps 1 --batch 2 --seq-len 16 "
                              "--init-from %s/src", tu_bin(), cfg2, data, dir, dir) > 0);
    cr_assert_eq(tu_run(cmd2, &out2), 2, "%s", out2);
    cr_assert(strstr(out2, "--init-from: checkpoint") && strstr(out2, "intermediate_size = 128, the config says 96"),
              "%s", out2);
    /* into the source's own run directory: refused like any fresh run, unless --overwrite */
    char *cmd3 = NULL, *out3 = NULL;
    cr_assert(asprintf(&cmd3, "%s train --config %s --train-data %s --run-dir %s/src --steps 1 --batch 2 --seq-len 16 "
                              "--init-from %s/src/checkpoints/step_00000002", tu_bin(), cfg, data, dir, dir) > 0);
    cr_assert_eq(tu_run(cmd3, &out3), 2, "%s", out3);
    cr_assert(strstr(out3, "already holds a run"), "%s", out3);
    char *cmd4 = NULL, *out4 = NULL;
    cr_assert(asprintf(&cmd4, "%s --overwrite", cmd3) > 0);
    cr_assert_eq(tu_run(cmd4, &out4), 0, "%s", out4);
    cr_assert(strstr(out4, "a new run from the weights of") && strstr(out4, "(its step 2)"), "%s", out4);
    free(data); free(cfg); free(cmd); free(out); free(cfg2); free(cmd2); free(out2);
    free(cmd3); free(out3); free(cmd4); free(out4);
}

Test(cli, help_for_program_and_every_command) {
    const char *cmds[] = {"--help", "train --help", "eval --help", "data --help"};
    for (int i = 0; i < 4; i++) {
        char *cmd = NULL, *out = NULL;
        cr_assert(asprintf(&cmd, "%s %s", tu_bin(), cmds[i]) > 0);
        cr_assert_eq(tu_run(cmd, &out), 0, "%s: %s", cmds[i], out);
        cr_assert(strstr(out, "usage"), "%s prints no usage: %s", cmds[i], out);
    }
    char *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "%s frobnicate", tu_bin()) > 0);
    cr_assert_eq(tu_run(cmd, &out), 2);
    cr_assert(strstr(out, "frobnicate"));
}

Test(cli, eval_reports_the_loss_of_the_initialisation) {
    char *dir = tu_mkdtemp("eval");
    char *data = write_repeated(dir, "e.bin", "evaluation text, repeated. ", 50);
    char *cfg = small_config(dir), *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "%s eval --config %s --data %s --batch 2 --seq-len 32 --batches 3", tu_bin(), cfg, data) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    const char *p = strstr(out, "eval loss ");
    cr_assert(p, "%s", out);
    double loss = atof(p + 10);
    /* a fresh model with std 0.02 weights predicts nearly uniformly over 256 ids: loss ~ ln 256 = 5.545 */
    cr_assert(loss > 5.4 && loss < 5.7, "eval loss %g", loss);
}

Test(cli, eval_of_a_checkpoint_equals_the_validation_loss_of_training, .timeout = 120) {
    char *dir = tu_mkdtemp("evck");
    char *data = write_repeated(dir, "t.bin", "checkpointed weights evaluate the same. ", 60);
    char *cfg = small_config(dir), *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --val-data %s --run-dir %s/run --steps 6 "
                             "--batch 2 --seq-len 32 --eval-batches 3 --ckpt-every 6",
                       tu_bin(), cfg, data, data, dir) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    const char *p = strstr(out, "val loss ");
    cr_assert(p, "%s", out);
    char val[32];
    snprintf(val, sizeof val, "%.8s", p + 9);
    char *cmd2 = NULL, *out2 = NULL;
    cr_assert(asprintf(&cmd2, "%s eval --config %s --data %s --batch 2 --seq-len 32 --batches 3 "
                              "--checkpoint %s/run/checkpoints/step_00000006",
                       tu_bin(), cfg, data, dir) > 0);
    cr_assert_eq(tu_run(cmd2, &out2), 0, "%s", out2);
    const char *q = strstr(out2, "eval loss ");
    cr_assert(q, "%s", out2);
    cr_assert(!strncmp(q + 10, val, strlen(val)), "eval of the checkpoint %s vs training's val loss %s", q + 10, val);
    /* a checkpoint of another architecture is refused, naming the field */
    char *cfg2 = NULL, *cmd3 = NULL, *out3 = NULL;
    cr_assert(asprintf(&cfg2, "%s/c2.json", dir) > 0);
    tu_write_file(cfg2, "{\"hidden_size\": 64, \"intermediate_size\": 96, \"num_hidden_layers\": 2, "
                        "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"vocab_size\": 256}");
    cr_assert(asprintf(&cmd3, "%s eval --config %s --data %s --batch 2 --seq-len 32 --checkpoint %s/run/checkpoints/step_00000006",
                       tu_bin(), cfg2, data, dir) > 0);
    cr_assert_eq(tu_run(cmd3, &out3), 2, "%s", out3);
    cr_assert(strstr(out3, "intermediate_size"), "%s", out3);
}
