/*
 * tests/ckpt/test_ckpt_files.c — carried files (ckpt/files.c) in one process (mp_comm_self): the allow-list
 * when saving and when listing, a replaced name, the strict parsing of the "files" list, and what
 * ckpt_files_verify / ckpt_file_read make of a damaged files/ directory (an unlisted entry, files/ not a
 * directory, a link, a FIFO, a wrong size), every problem reported, none blocking.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "core/alloc.h"
#include "core/comm.h"
#include "core/fsutil.h"
#include "tests/testutil.h"

static const float g_x[4] = {1, 2, 3, 4};

/* dir/rel in one of 4 rotating static buffers (no leak to track in the tests). */
static const char *at(const char *dir, const char *rel) {
    static char buf[4][4096];
    static int k;
    char *b = buf[k++ % 4];
    snprintf(b, sizeof buf[0], "%s/%s", dir, rel);
    return b;
}

/* Starts a save of one small tensor into dir. */
static ckpt_save *begin(mp_comm *w, const char *dir) {
    ckpt_save *s = NULL;
    mp_err e;
    cr_assert_eq(ckpt_save_begin_dir(&s, w, dir, 1, NULL, 0, &e), MP_OK, "%s", e.msg);
    int64_t shp[1] = {4}, off[1] = {0};
    cr_assert_eq(ckpt_save_add(s, "model/x", MP_F32, 1, shp, off, shp, g_x, &e), MP_OK, "%s", e.msg);
    return s;
}

/* Commits s (expecting want) and frees it and w. */
static void commit(ckpt_save *s, mp_comm *w, mp_code want) {
    mp_err e;
    mp_code rc = ckpt_save_commit(s, NULL, &e);
    cr_assert_eq(rc, want, "commit: %d %s", rc, rc ? e.msg : "");
    ckpt_save_free(s);
    w->ops->destroy(w);
}

/* A checkpoint in tmp/name whose "files" metadata is list (NULL: saved through ckpt_save_file with a
 * tokenizer.json of "{}" and a generation_config.json). */
static char *make(const char *tmp, const char *name, const char *list) {
    char *dir = tu_path(tmp, name);
    mp_comm *w = mp_comm_self();
    ckpt_save *s = begin(w, dir);
    mp_err e;
    if (list) cr_assert_eq(ckpt_save_meta(s, CKPT_FILES_META, list, &e), MP_OK, "%s", e.msg);
    else {
        cr_assert_eq(ckpt_save_file(s, "tokenizer.json", "{}", 2, &e), MP_OK, "%s", e.msg);
        cr_assert_eq(ckpt_save_file(s, "generation_config.json", "{\"eos_token_id\": 2}", 19, &e), MP_OK, "%s", e.msg);
    }
    commit(s, w, MP_OK);
    return dir;
}

/* Collects problems (ckpt_file_report_fn). */
typedef struct { int n; char text[8][512]; } reports;
static void report(void *ctx, const char *p) {
    reports *r = ctx;
    if (r->n < 8) snprintf(r->text[r->n], sizeof r->text[0], "%s", p);
    r->n++;
}

/* ckpt_files_verify of dir: its code, the problems in *rep. */
static mp_code verify(const char *dir, reports *rep) {
    memset(rep, 0, sizeof *rep);
    ckpt_reader *r = tu_open_dir(dir);
    mp_err e;
    int n = -1;
    mp_code rc = ckpt_files_verify(r, report, rep, &n, &e);
    cr_assert((rc == MP_OK) == (rep->n == 0), "code %d with %d problems", rc, rep->n);
    if (rc) cr_assert(strstr(e.msg, rep->text[0]) || rep->n > 1, "%s", e.msg);
    ckpt_close(r);
    return rc;
}

Test(ckpt_files, saved_read_back_and_a_replaced_name) {
    char *tmp = tu_mkdtemp("ckf_ok");
    char *dir = tu_path(tmp, "a");
    mp_comm *w = mp_comm_self();
    ckpt_save *s = begin(w, dir);
    mp_err e;
    cr_assert_eq(ckpt_save_file(s, "tokenizer.json", "old text", 8, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_save_file(s, "tokenizer.model", "", 0, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_save_file(s, "tokenizer.json", "new", 3, &e), MP_OK, "%s", e.msg);   /* replaces it */
    commit(s, w, MP_OK);
    ckpt_reader *r = tu_open_dir(dir);
    ckpt_file_entry *v;
    int n;
    cr_assert_eq(ckpt_files_list(r, &v, &n, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(n, 2);
    free(v);
    char *data;
    size_t len;
    cr_assert_eq(ckpt_file_read(r, "tokenizer.json", &data, &len, &e), MP_OK, "%s", e.msg);
    cr_assert(len == 3 && !strcmp(data, "new"));
    free(data);
    cr_assert_eq(ckpt_file_read(r, "tokenizer.model", &data, &len, &e), MP_OK, "%s", e.msg);
    cr_assert(len == 0);
    free(data);
    cr_assert_eq(ckpt_file_read(r, "chat_template.jinja", &data, &len, &e), MP_EINPUT);
    ckpt_close(r);
    reports rep;
    cr_assert_eq(verify(dir, &rep), MP_OK, "%s", rep.text[0]);
    char *t = mp_fs_tmp_name(at(dir, "files/tokenizer.json"));   /* this process wrote it */
    cr_assert(!mp_fs_exists(t), "%s left", t);
    free(t);
    tu_rm_rf(tmp);
    free(dir);
    free(tmp);
}

Test(ckpt_files, names_outside_the_allow_list_are_refused_when_saving) {
    const char *bad[] = {"config.json", "model.safetensors", "../tokenizer.json", ".tokenizer.json", "Tokenizer.json", "", "x"};
    char *tmp = tu_mkdtemp("ckf_names");
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char *dir = tu_path(tmp, "a");
        mp_comm *w = mp_comm_self();
        ckpt_save *s = begin(w, dir);
        mp_err e;
        cr_assert_eq(ckpt_save_file(s, bad[i], "{}", 2, &e), MP_EINPUT, "%s", bad[i]);
        cr_assert(strstr(e.msg, bad[i]) && strstr(e.msg, "tokenizer.json"), "%s", e.msg);
        commit(s, w, MP_EINPUT);   /* the refusal fails the save: nothing committed */
        cr_assert(!mp_fs_exists(dir), "%s", bad[i]);
        cr_assert_eq(ckpt_file_name_check(bad[i], &e), MP_EINPUT);
        free(dir);
    }
    mp_err e;
    for (int i = 0; ckpt_file_names[i]; i++) cr_assert_eq(ckpt_file_name_check(ckpt_file_names[i], &e), MP_OK);
    /* too large: refused before the data is looked at */
    char *dir = tu_path(tmp, "b");
    mp_comm *w = mp_comm_self();
    ckpt_save *s = begin(w, dir);
    cr_assert_eq(ckpt_save_file(s, "tokenizer.json", "{}", (size_t)CKPT_FILES_MAX_BYTES + 1, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "tokenizer.json"), "%s", e.msg);
    commit(s, w, MP_EINPUT);
    tu_rm_rf(tmp);
    free(dir);
    free(tmp);
}

Test(ckpt_files, a_list_that_is_not_strictly_valid_is_refused) {
    static const struct { const char *list, *what; mp_code code; } cases[] = {
        {"not json", "not a JSON object", MP_ECHECK},
        {"[]", "not a JSON object", MP_ECHECK},
        {"{\"config.json\":{\"bytes\":2,\"xxh3\":\"0123456789abcdef\"}}", "config.json", MP_EINPUT},
        {"{\"tokenizer.json\":{\"bytes\":1.5,\"xxh3\":\"0123456789abcdef\"}}", "\"bytes\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":-1,\"xxh3\":\"0123456789abcdef\"}}", "\"bytes\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":1e12,\"xxh3\":\"0123456789abcdef\"}}", "\"bytes\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":\"2\",\"xxh3\":\"0123456789abcdef\"}}", "\"bytes\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":2,\"xxh3\":\"0123456789ABCDEF\"}}", "\"xxh3\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":2,\"xxh3\":\"0123456789abcde\"}}", "\"xxh3\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":2,\"xxh3\":\"-123456789abcdef\"}}", "\"xxh3\"", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":2,\"xxh3\":\"0123456789abcdef\"},"
         "\"tokenizer.json\":{\"bytes\":2,\"xxh3\":\"0123456789abcdef\"}}", "listed twice", MP_ECHECK},
        {"{\"tokenizer.json\":{\"bytes\":400000000,\"xxh3\":\"0123456789abcdef\"},"
         "\"tokenizer.model\":{\"bytes\":400000000,\"xxh3\":\"0123456789abcdef\"}}", "in all", MP_ECHECK},
    };
    char *tmp = tu_mkdtemp("ckf_list");
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char name[16];
        snprintf(name, sizeof name, "c%zu", i);
        char *dir = make(tmp, name, cases[i].list);
        ckpt_reader *r = tu_open_dir(dir);
        ckpt_file_entry *v = (ckpt_file_entry *)1;
        int n = -1;
        mp_err e;
        cr_assert_eq(ckpt_files_list(r, &v, &n, &e), cases[i].code, "%s", cases[i].list);
        cr_assert(v == NULL && n == 0);
        cr_assert(strstr(e.msg, cases[i].what) && strstr(e.msg, dir), "%s: %s", cases[i].list, e.msg);
        char *data;
        cr_assert_eq(ckpt_file_read(r, "tokenizer.json", &data, NULL, &e), cases[i].code);
        ckpt_close(r);
        reports rep;
        cr_assert_eq(verify(dir, &rep), cases[i].code);
        cr_assert(strstr(rep.text[0], cases[i].what), "%s", rep.text[0]);
        free(dir);
    }
    tu_rm_rf(tmp);
    free(tmp);
}

Test(ckpt_files, every_problem_of_a_damaged_files_directory_is_reported) {
    char *tmp = tu_mkdtemp("ckf_dmg");
    char *dir = make(tmp, "a", NULL);
    tu_write_file(at(dir, "files/extra.txt"), "x");               /* unlisted */
    tu_write_file(at(dir, "files/generation_config.json"), "{}"); /* wrong size */
    reports rep;
    cr_assert_eq(verify(dir, &rep), MP_ECHECK);
    cr_assert_eq(rep.n, 2, "%d: %s | %s", rep.n, rep.text[0], rep.text[1]);
    cr_assert(strstr(rep.text[0], "generation_config.json") && strstr(rep.text[0], "size"), "%s", rep.text[0]);
    cr_assert(strstr(rep.text[1], "extra.txt") && strstr(rep.text[1], "not a listed"), "%s", rep.text[1]);
    /* a flipped byte, same size */
    tu_rm_rf(at(dir, "files/extra.txt"));
    tu_write_file(at(dir, "files/tokenizer.json"), "[]");
    cr_assert_eq(verify(dir, &rep), MP_ECHECK);
    cr_assert_eq(rep.n, 2);
    cr_assert(strstr(rep.text[0], "tokenizer.json") && strstr(rep.text[0], "checksum"), "%s", rep.text[0]);
    tu_rm_rf(tmp);
    free(dir);
    free(tmp);
}

Test(ckpt_files, links_fifos_and_a_non_directory_are_refused_without_blocking, .timeout = 20) {
    char *tmp = tu_mkdtemp("ckf_kind");
    char *dir = make(tmp, "a", NULL);
    char tj[4096], copy[4096];
    snprintf(tj, sizeof tj, "%s", at(dir, "files/tokenizer.json"));
    snprintf(copy, sizeof copy, "%s", at(tmp, "copy.json"));
    tu_write_file(copy, "{}");
    cr_assert_eq(unlink(tj), 0);
    cr_assert_eq(symlink(copy, tj), 0);   /* a link to the right bytes is still refused */
    ckpt_reader *r = tu_open_dir(dir);
    char *data;
    mp_err e;
    cr_assert_eq(ckpt_file_read(r, "tokenizer.json", &data, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "symbolic link") && strstr(e.msg, "tokenizer.json"), "%s", e.msg);
    cr_assert_eq(unlink(tj), 0);
    cr_assert_eq(mkfifo(tj, 0600), 0);    /* a FIFO nobody writes: must not hang */
    cr_assert_eq(ckpt_file_read(r, "tokenizer.json", &data, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
    cr_assert_eq(unlink(tj), 0);
    cr_assert_eq(mkdir(tj, 0700), 0);
    cr_assert_eq(ckpt_file_read(r, "tokenizer.json", &data, NULL, &e), MP_ECHECK);
    cr_assert(strstr(e.msg, "not a regular file"), "%s", e.msg);
    ckpt_close(r);
    /* files/ a plain file: each listed file missing, and files/ itself named */
    tu_rm_rf(at(dir, "files"));
    tu_write_file(at(dir, "files"), "not a directory");
    reports rep;
    cr_assert_eq(verify(dir, &rep), MP_ECHECK);
    cr_assert_eq(rep.n, 3, "%d", rep.n);
    cr_assert(strstr(rep.text[0], "missing") && strstr(rep.text[0], "copy the checkpoint's files/"), "%s", rep.text[0]);
    cr_assert(strstr(rep.text[2], "not a readable directory"), "%s", rep.text[2]);
    tu_rm_rf(tmp);
    free(dir);
    free(tmp);
}
