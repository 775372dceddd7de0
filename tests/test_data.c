/*
 * tests/test_data.c — token files (core/data.c), the batch loader, `meshpoint data` and
 * scripts/make_demo_data.sh.
 *
 * Every validation error is produced by writing a bad file into a fresh temp dir and checking that the
 * code is MP_EINPUT and the message names the file and the problem. Loader tests compare against the
 * token stream computed by hand from the definition in core/data.h. CLI tests run $MP_BIN.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/data.h"
#include "tests/testutil.h"

/* ---- helpers ---- */

static char *path_in(const char *dir, const char *name) {
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/%s", dir, name) > 0);
    return p;
}

static void write_bytes(const char *path, const void *buf, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "fopen %s", path);
    cr_assert_eq(fwrite(buf, 1, n, f), n);
    cr_assert_eq(fclose(f), 0);
}

/* An llm.c file with the given header fields followed by nt uint16 tokens. */
static void write_llmc_raw(const char *path, int32_t magic, int32_t version, int32_t count,
                           const uint16_t *tok, size_t nt) {
    size_t bytes = 1024 + nt * 2;
    unsigned char *buf = calloc(1, bytes);
    int32_t *h = (int32_t *)buf;
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    if (nt) memcpy(buf + 1024, tok, nt * 2);
    write_bytes(path, buf, bytes);
    free(buf);
}

/* Opens path expecting MP_EINPUT whose message contains path and each of the NULL-terminated words. */
static void expect_open_error(const char *path, mp_data_format fmt, int vocab, ...) {
    mp_token_file f;
    mp_err err;
    mp_err_clear(&err);
    mp_code rc = mp_token_file_open(&f, path, fmt, vocab, &err);
    cr_assert_eq(rc, MP_EINPUT, "expected MP_EINPUT for %s, got %d (%s)", path, rc, err.msg);
    cr_assert_eq(err.code, MP_EINPUT);
    cr_assert(strstr(err.msg, path), "message does not name the file: %s", err.msg);
    va_list ap;
    va_start(ap, vocab);
    for (const char *w; (w = va_arg(ap, const char *));)
        cr_assert(strstr(err.msg, w), "message lacks \"%s\": %s", w, err.msg);
    va_end(ap);
    cr_assert_null(f.map, "a failed open must not leave a mapping");
}

static uint16_t *pattern_tokens(int64_t n, int mod) {
    uint16_t *t = malloc((size_t)n * 2);
    for (int64_t i = 0; i < n; i++) t[i] = (uint16_t)((i * 7919 + 13) % mod);
    return t;
}

/* ---- validation at open ---- */

Test(data_open, missing_file) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "nothere.bin");
    expect_open_error(p, MP_DATA_LLMC, 256, "cannot open", "No such file", NULL);
    expect_open_error(p, MP_DATA_U16, 256, "No such file", NULL);
}

Test(data_open, directory_is_not_a_file) {
    char *d = tu_mkdtemp("data");
    expect_open_error(d, MP_DATA_LLMC, 256, "not a regular file", NULL);
}

Test(data_open, shorter_than_header) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "short.bin");
    unsigned char buf[100] = {0};
    write_bytes(p, buf, sizeof buf);
    expect_open_error(p, MP_DATA_LLMC, 256, "shorter than", "header", "100 bytes", NULL);
    char *e = path_in(d, "zero.bin");
    write_bytes(e, buf, 0);
    expect_open_error(e, MP_DATA_LLMC, 256, "header", NULL);
}

Test(data_open, wrong_magic_suggests_u16) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "magic.bin");
    uint16_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    write_llmc_raw(p, 12345, 1, 8, t, 8);
    expect_open_error(p, MP_DATA_LLMC, 256, "magic", "12345", "20240520", "--data-format u16", NULL);
}

Test(data_open, unsupported_version) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "ver.bin");
    uint16_t t[4] = {1, 2, 3, 4};
    write_llmc_raw(p, MP_LLMC_MAGIC, 2, 4, t, 4);
    expect_open_error(p, MP_DATA_LLMC, 256, "version 2", NULL);
}

Test(data_open, truncated_llmc) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "trunc.bin");
    uint16_t t[50] = {0};
    write_llmc_raw(p, MP_LLMC_MAGIC, 1, 100, t, 50);
    expect_open_error(p, MP_DATA_LLMC, 256, "truncated", "100 tokens", "100 token bytes", NULL);
}

Test(data_open, trailing_bytes_llmc) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "long.bin");
    uint16_t t[10] = {0};
    write_llmc_raw(p, MP_LLMC_MAGIC, 1, 8, t, 10);
    expect_open_error(p, MP_DATA_LLMC, 256, "4 unexpected bytes", NULL);
}

Test(data_open, empty) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "empty.bin");
    write_llmc_raw(p, MP_LLMC_MAGIC, 1, 0, NULL, 0);
    expect_open_error(p, MP_DATA_LLMC, 256, "empty", NULL);
    char *r = path_in(d, "empty_raw.bin");
    write_bytes(r, "", 0);
    expect_open_error(r, MP_DATA_U16, 256, "empty", NULL);
    expect_open_error(r, MP_DATA_U32, 256, "empty", NULL);
}

Test(data_open, raw_size_not_multiple) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "odd.bin");
    unsigned char b[7] = {1, 0, 2, 0, 3, 0, 4};
    write_bytes(p, b, 7);
    expect_open_error(p, MP_DATA_U16, 256, "truncated", "not a multiple", "2-byte", NULL);
    char *q = path_in(d, "six.bin");
    write_bytes(q, b, 6);
    expect_open_error(q, MP_DATA_U32, 256, "truncated", "not a multiple", "4-byte", NULL);
}

Test(data_open, token_out_of_vocab) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "vocab.bin");
    uint16_t t[16];
    for (int i = 0; i < 16; i++) t[i] = (uint16_t)i;
    t[7] = 300;
    t[9] = 400;  /* only the first bad one is reported */
    write_llmc_raw(p, MP_LLMC_MAGIC, 1, 16, t, 16);
    expect_open_error(p, MP_DATA_LLMC, 256, "token 7", "id 300", "vocab_size 256", NULL);
    /* the same file is fine with a large enough vocabulary, or with no check */
    mp_token_file f;
    cr_assert_eq(mp_token_file_open(&f, p, MP_DATA_LLMC, 401, NULL), MP_OK);
    mp_token_file_close(&f);
    cr_assert_eq(mp_token_file_open(&f, p, MP_DATA_LLMC, 0, NULL), MP_OK);
    mp_token_file_close(&f);
    /* boundary: id == vocab_size is out */
    expect_open_error(p, MP_DATA_LLMC, 400, "token 9", "id 400", NULL);

    char *q = path_in(d, "vocab32.bin");
    uint32_t w[4] = {1, 2, 70000, 3};
    write_bytes(q, w, sizeof w);
    expect_open_error(q, MP_DATA_U32, 65536, "token 2", "id 70000", "vocab_size 65536", NULL);
}

Test(data_format, names_round_trip) {
    for (int f = MP_DATA_LLMC; f <= MP_DATA_U32; f++)
        cr_assert_eq(mp_data_format_parse(mp_data_format_name((mp_data_format)f)), f);
    cr_assert_eq(mp_data_format_parse("u8"), -1);
    cr_assert_eq(mp_data_format_parse(NULL), -1);
}

/* ---- writing and reading back ---- */

Test(data_write, llmc_round_trip) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "rt.bin");
    const int64_t n = 100003;
    uint16_t *t = pattern_tokens(n, 65536);
    t[5] = 65535;
    mp_err err;
    cr_assert_eq(mp_token_file_write_llmc(p, t, n, &err), MP_OK, "%s", err.msg);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_size, 1024 + 2 * n);
    /* no temp file is left behind */
    DIR *dir = opendir(d);
    int entries = 0;
    for (struct dirent *e; (e = readdir(dir));) entries += e->d_name[0] != '.';
    closedir(dir);
    cr_assert_eq(entries, 1);

    mp_token_file f;
    cr_assert_eq(mp_token_file_open(&f, p, MP_DATA_LLMC, 65536, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f.ntokens, n);
    cr_assert_eq(f.format, MP_DATA_LLMC);
    cr_assert_str_eq(f.path, p);
    for (int64_t i = 0; i < n; i++) cr_assert_eq(mp_token_at(&f, i), t[i], "token %lld", (long long)i);
    mp_token_file_close(&f);
    cr_assert_null(f.map);
    free(t);
}

Test(data_write, overwrite_replaces) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "ow.bin");
    uint16_t a[10] = {9, 9, 9, 9, 9, 9, 9, 9, 9, 9}, b[3] = {1, 2, 3};
    cr_assert_eq(mp_token_file_write_llmc(p, a, 10, NULL), MP_OK);
    cr_assert_eq(mp_token_file_write_llmc(p, b, 3, NULL), MP_OK);
    mp_token_file f;
    cr_assert_eq(mp_token_file_open(&f, p, MP_DATA_LLMC, 256, NULL), MP_OK);
    cr_assert_eq(f.ntokens, 3);
    cr_assert_eq(mp_token_at(&f, 2), 3);
    mp_token_file_close(&f);
}

Test(data_write, failure_is_eio_naming_path) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "no/such/dir/x.bin");
    uint16_t t[2] = {1, 2};
    mp_err err;
    cr_assert_eq(mp_token_file_write_llmc(p, t, 2, &err), MP_EIO);
    cr_assert(strstr(err.msg, p), "%s", err.msg);
    cr_assert(strstr(err.msg, "No such file"), "%s", err.msg);
}

Test(data_raw, u16_and_u32) {
    char *d = tu_mkdtemp("data");
    char *p16 = path_in(d, "raw16.bin"), *p32 = path_in(d, "raw32.bin");
    uint16_t a[1001];
    uint32_t b[999];
    for (int i = 0; i < 1001; i++) a[i] = (uint16_t)(i * 65 % 65536);
    for (int i = 0; i < 999; i++) b[i] = (uint32_t)i * 100003u % 200000u;
    write_bytes(p16, a, sizeof a);
    write_bytes(p32, b, sizeof b);
    mp_token_file f;
    mp_err err;
    cr_assert_eq(mp_token_file_open(&f, p16, MP_DATA_U16, 65536, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f.ntokens, 1001);
    for (int i = 0; i < 1001; i++) cr_assert_eq(mp_token_at(&f, i), a[i]);
    mp_token_file_close(&f);
    cr_assert_eq(mp_token_file_open(&f, p32, MP_DATA_U32, 200000, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f.ntokens, 999);
    for (int i = 0; i < 999; i++) cr_assert_eq(mp_token_at(&f, i), (int32_t)b[i]);
    mp_token_file_close(&f);
    /* an llm.c file read as raw u16 sees the header as tokens: 512 + n of them */
    char *pl = path_in(d, "l.bin");
    cr_assert_eq(mp_token_file_write_llmc(pl, a, 1001, NULL), MP_OK);
    cr_assert_eq(mp_token_file_open(&f, pl, MP_DATA_U16, 0, NULL), MP_OK);
    cr_assert_eq(f.ntokens, 512 + 1001);
    cr_assert_eq(mp_token_at(&f, 512 + 7), a[7]);
    mp_token_file_close(&f);
}

/* ---- loader ---- */

typedef struct { char *dir; mp_token_file f; uint16_t *tok; int64_t n; } fixture;

static void fixture_make(fixture *x, int64_t n) {
    x->dir = tu_mkdtemp("data");
    char *p = path_in(x->dir, "tok.bin");
    x->n = n;
    x->tok = pattern_tokens(n, 50000);
    mp_err err;
    cr_assert_eq(mp_token_file_write_llmc(p, x->tok, n, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_token_file_open(&x->f, p, MP_DATA_LLMC, 50000, &err), MP_OK, "%s", err.msg);
    free(p);
}

/* Checks the whole current batch against the definition: sequence k reads [pos+k*T, pos+k*T+T+1). */
static void check_batch(const mp_loader *l, const uint16_t *tok) {
    const int B = l->batch, T = l->seq_len;
    int32_t *in = malloc((size_t)B * T * 4), *tg = malloc((size_t)B * T * 4);
    mp_loader_get(l, 0, B, in, tg);
    for (int k = 0; k < B; k++)
        for (int t = 0; t < T; t++) {
            int64_t s = l->cur.pos + (int64_t)k * T + t;
            cr_assert_eq(in[k * T + t], tok[s], "input k=%d t=%d", k, t);
            cr_assert_eq(tg[k * T + t], tok[s + 1], "target k=%d t=%d", k, t);
        }
    /* targets are inputs shifted by one within each sequence */
    for (int k = 0; k < B; k++)
        for (int t = 0; t + 1 < T; t++) cr_assert_eq(tg[k * T + t], in[k * T + t + 1]);
    free(in);
    free(tg);
}

Test(loader, init_too_small) {
    fixture x;
    fixture_make(&x, 4 * 16);   /* B*T tokens: one short of B*T + 1 */
    mp_loader l;
    mp_err err;
    cr_assert_eq(mp_loader_init(&l, &x.f, 4, 16, &err), MP_EINPUT);
    cr_assert(strstr(err.msg, x.f.path) && strstr(err.msg, "too small") && strstr(err.msg, "65"), "%s", err.msg);
    cr_assert_eq(mp_loader_init(&l, &x.f, 3, 21, &err), MP_OK, "%s", err.msg);  /* 3*21+1 = 64 */
    cr_assert_eq(mp_loader_init(&l, &x.f, 0, 16, &err), MP_EINPUT);
    cr_assert_eq(mp_loader_init(&l, &x.f, 4, -1, &err), MP_EINPUT);
}

Test(loader, batches_advance_and_wrap) {
    const int B = 3, T = 8;
    fixture x;
    fixture_make(&x, 4 * B * T + 1);  /* exactly 4 batches per epoch */
    mp_loader l;
    mp_err err;
    cr_assert_eq(mp_loader_init(&l, &x.f, B, T, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(l.cur.pos, 0);
    cr_assert_eq(l.cur.epoch, 0);
    for (int epoch = 0; epoch < 3; epoch++)
        for (int b = 0; b < 4; b++) {
            cr_assert_eq(l.cur.pos, (int64_t)b * B * T, "epoch %d batch %d", epoch, b);
            cr_assert_eq(l.cur.epoch, epoch);
            check_batch(&l, x.tok);
            mp_loader_advance(&l);
        }
    cr_assert_eq(l.cur.pos, 0);
    cr_assert_eq(l.cur.epoch, 3);
}

Test(loader, wrap_when_next_batch_runs_past_end) {
    const int B = 2, T = 5;
    fixture x;
    fixture_make(&x, 3 * B * T);  /* the third batch would need one more token: 2 batches per epoch */
    mp_loader l;
    cr_assert_eq(mp_loader_init(&l, &x.f, B, T, NULL), MP_OK);
    mp_loader_advance(&l);
    cr_assert_eq(l.cur.pos, B * T);
    cr_assert_eq(l.cur.epoch, 0);
    check_batch(&l, x.tok);
    mp_loader_advance(&l);
    cr_assert_eq(l.cur.pos, 0);
    cr_assert_eq(l.cur.epoch, 1);
}

Test(loader, cursor_save_restore_continues_identically) {
    const int B = 4, T = 16;
    fixture x;
    fixture_make(&x, 5 * B * T + 37);
    mp_loader a, b;
    cr_assert_eq(mp_loader_init(&a, &x.f, B, T, NULL), MP_OK);
    for (int i = 0; i < 7; i++) mp_loader_advance(&a);   /* crosses an epoch boundary */
    cr_assert_eq(a.cur.epoch, 1);
    mp_loader_cursor saved = a.cur;

    cr_assert_eq(mp_loader_init(&b, &x.f, B, T, NULL), MP_OK);
    mp_err err;
    cr_assert_eq(mp_loader_set_cursor(&b, saved, &err), MP_OK, "%s", err.msg);
    int32_t ia[B * T], ta[B * T], ib[B * T], tb[B * T];
    for (int step = 0; step < 12; step++) {
        cr_assert_eq(a.cur.pos, b.cur.pos);
        cr_assert_eq(a.cur.epoch, b.cur.epoch);
        mp_loader_get(&a, 0, B, ia, ta);
        mp_loader_get(&b, 0, B, ib, tb);
        cr_assert_arr_eq(ia, ib, sizeof ia, "step %d", step);
        cr_assert_arr_eq(ta, tb, sizeof ta, "step %d", step);
        mp_loader_advance(&a);
        mp_loader_advance(&b);
    }
}

Test(loader, set_cursor_rejects_out_of_range) {
    const int B = 2, T = 4;
    fixture x;
    fixture_make(&x, 100);
    mp_loader l;
    cr_assert_eq(mp_loader_init(&l, &x.f, B, T, NULL), MP_OK);
    mp_err err;
    mp_loader_cursor c = {100 - B * T - 1, 3};  /* last valid position */
    cr_assert_eq(mp_loader_set_cursor(&l, c, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(l.cur.pos, c.pos);
    cr_assert_eq(l.cur.epoch, 3);
    mp_loader_cursor bad = {100 - B * T, 0};
    cr_assert_eq(mp_loader_set_cursor(&l, bad, &err), MP_EINPUT);
    cr_assert(strstr(err.msg, x.f.path) && strstr(err.msg, "cursor"), "%s", err.msg);
    cr_assert_eq(l.cur.pos, c.pos, "a rejected cursor must not be applied");
    mp_loader_cursor neg = {-1, 0};
    cr_assert_eq(mp_loader_set_cursor(&l, neg, &err), MP_EINPUT);
}

Test(loader, slices_equal_whole_batch) {
    /* Any split of the batch into ranges [first, first+count) gives the same sequences as the whole
     * batch: this is what makes batches independent of the mesh. */
    const int B = 6, T = 7;
    fixture x;
    fixture_make(&x, 3 * B * T + 2);
    mp_loader l;
    cr_assert_eq(mp_loader_init(&l, &x.f, B, T, NULL), MP_OK);
    int32_t win[B * T], wtg[B * T], sin[B * T], stg[B * T];
    for (int step = 0; step < 8; step++) {
        mp_loader_get(&l, 0, B, win, wtg);
        for (int parts = 1; parts <= B; parts++) {
            if (B % parts) continue;
            int per = B / parts;
            for (int r = 0; r < parts; r++) {
                mp_loader_get(&l, r * per, per, sin, stg);
                cr_assert_arr_eq(sin, win + r * per * T, (size_t)per * T * 4, "step %d parts %d r %d", step, parts, r);
                cr_assert_arr_eq(stg, wtg + r * per * T, (size_t)per * T * 4);
            }
        }
        /* uneven ranges too */
        mp_loader_get(&l, 1, 4, sin, stg);
        cr_assert_arr_eq(sin, win + 1 * T, 4u * T * 4);
        cr_assert_arr_eq(stg, wtg + 1 * T, 4u * T * 4);
        mp_loader_get(&l, 5, 0, sin, stg);
        mp_loader_advance(&l);
    }
}

/* ---- `meshpoint data` ---- */

/* Runs `$MP_BIN data ARGS`; returns the status, output in *out. */
static int run_data(char **out, const char *fmt, ...) {
    char args[4096], *cmd = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    cr_assert(asprintf(&cmd, "'%s' data %s", tu_bin(), args) > 0);
    int rc = tu_run(cmd, out);
    free(cmd);
    return rc;
}

/* The tokens of an llm.c file as a NUL-terminated string (byte-level vocab). */
static char *read_tokens_as_text(const char *path, int64_t *n) {
    mp_token_file f;
    mp_err err;
    cr_assert_eq(mp_token_file_open(&f, path, MP_DATA_LLMC, 256, &err), MP_OK, "%s", err.msg);
    char *s = malloc((size_t)f.ntokens + 1);
    for (int64_t i = 0; i < f.ntokens; i++) s[i] = (char)mp_token_at(&f, i);
    s[f.ntokens] = '\0';
    *n = f.ntokens;
    mp_token_file_close(&f);
    return s;
}

Test(cli_data, splits_on_newline_and_round_trips) {
    char *d = tu_mkdtemp("datacli");
    char *a = path_in(d, "a.txt"), *b = path_in(d, "b.txt");
    /* 200 lines of 20 bytes = 4000 bytes, plus a file with UTF-8 text */
    char *text = malloc(4001);
    for (int i = 0; i < 200; i++) {
        char line[32];
        snprintf(line, sizeof line, "line %03d: abcdefghi\n", i % 1000);
        memcpy(text + 20 * i, line, 20);
    }
    text[4000] = '\0';
    tu_write_file(a, text);
    tu_write_file(b, "h\xc3\xa9llo w\xc3\xb6rld\n");
    char *out = NULL;
    int rc = run_data(&out, "--out '%s/o' --name t --val-fraction 0.25 '%s' '%s'", d, a, b);
    cr_assert_eq(rc, 0, "%s", out);
    int64_t ntr, nva;
    char *tp = path_in(d, "o/t_train.bin"), *vp = path_in(d, "o/t_val.bin");
    char *tr = read_tokens_as_text(tp, &ntr), *va = read_tokens_as_text(vp, &nva);
    /* concatenation in order, byte for byte */
    char *all = NULL;
    cr_assert(asprintf(&all, "%s%s", text, "h\xc3\xa9llo w\xc3\xb6rld\n") > 0);
    int64_t n = (int64_t)strlen(all);
    cr_assert_eq(ntr + nva, n);
    cr_assert(!memcmp(tr, all, (size_t)ntr));
    cr_assert(!memcmp(va, all + ntr, (size_t)nva));
    /* the cut is after a newline, near the nominal point n - round(0.25 n) */
    cr_assert_eq(tr[ntr - 1], '\n');
    int64_t nominal = n - (int64_t)(0.25 * n + 0.5);
    cr_assert(llabs(ntr - nominal) <= 20, "cut %lld nominal %lld", (long long)ntr, (long long)nominal);
    /* summary line: files and tokens of each split */
    char want[256];
    snprintf(want, sizeof want, "2 files, %lld tokens", (long long)n);
    cr_assert(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "(%lld train tokens)", (long long)ntr);
    cr_assert(strstr(out, want), "%s", out);
    snprintf(want, sizeof want, "(%lld val tokens)", (long long)nva);
    cr_assert(strstr(out, want), "%s", out);
    cr_assert(strstr(out, tp) && strstr(out, vp), "%s", out);
}

Test(cli_data, no_newline_nearby_cuts_at_fraction) {
    char *d = tu_mkdtemp("datacli");
    char *a = path_in(d, "a.txt");
    char *text = malloc(3001);
    for (int i = 0; i < 3000; i++) text[i] = (char)('a' + i % 26);
    text[3000] = '\0';
    tu_write_file(a, text);
    char *out = NULL;
    cr_assert_eq(run_data(&out, "--out='%s' '%s'", d, a), 0, "%s", out);  /* defaults: 0.1, name data */
    int64_t ntr, nva;
    char *tp = path_in(d, "data_train.bin"), *vp = path_in(d, "data_val.bin");
    free(read_tokens_as_text(tp, &ntr));
    free(read_tokens_as_text(vp, &nva));
    cr_assert_eq(ntr, 2700);
    cr_assert_eq(nva, 300);
}

/* The whole content of path (caller frees); *n its length. */
static char *slurp(const char *path, size_t *n) {
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    char *buf = malloc(1 << 20);
    *n = fread(buf, 1, 1 << 20, f);
    fclose(f);
    return buf;
}

Test(cli_data, val_fraction_0_writes_the_train_file_alone, .timeout = 120) {
    char *d = tu_mkdtemp("datacli");
    char *a = path_in(d, "a.txt"), *b = path_in(d, "b.txt");
    char *text = malloc(4001);
    for (int i = 0; i < 200; i++) snprintf(text + 20 * i, 21, "line %03d: abcdefghi\n", i);
    tu_write_file(a, text);
    tu_write_file(b, "tail without newline");
    int64_t n = 4000 + (int64_t)strlen("tail without newline");
    char *out = NULL;
    cr_assert_eq(run_data(&out, "--out '%s/z' --name t --val-fraction 0 '%s' '%s'", d, a, b), 0, "%s", out);
    char want[512];
    snprintf(want, sizeof want, "2 files, %lld tokens -> %s/z/t_train.bin (%lld train tokens), no validation file "
             "(--val-fraction 0)", (long long)n, d, (long long)n);
    cr_assert(strstr(out, want), "summary line: want \"%s\" in %s", want, out);
    cr_assert(!strstr(out, "warning"), "%s", out);
    char *tp = path_in(d, "z/t_train.bin"), *vp = path_in(d, "z/t_val.bin");
    cr_assert(access(vp, F_OK) != 0, "--val-fraction 0 wrote %s", vp);
    /* every token, in order: the train and val files of a nonzero fraction, end to end */
    cr_assert_eq(run_data(&out, "--out '%s/h' --name t --val-fraction 0.25 '%s' '%s'", d, a, b), 0, "%s", out);
    int64_t nz, ntr, nva;
    char *z = read_tokens_as_text(tp, &nz), *tr = read_tokens_as_text(path_in(d, "h/t_train.bin"), &ntr),
         *va = read_tokens_as_text(path_in(d, "h/t_val.bin"), &nva);
    cr_assert_eq(nz, n);
    cr_assert(ntr + nva == n && !memcmp(z, tr, (size_t)ntr) && !memcmp(z + ntr, va, (size_t)nva));
    /* a validation file an earlier run left is warned about and left byte for byte */
    cr_assert_eq(run_data(&out, "--out '%s/h' --name t --val-fraction 0 '%s' '%s'", d, a, b), 0, "%s", out);
    cr_assert(strstr(out, "t_val.bin is from an earlier run and was left as it is"), "%s", out);
    int64_t nva2;
    char *va2 = read_tokens_as_text(path_in(d, "h/t_val.bin"), &nva2);
    cr_assert(nva2 == nva && !memcmp(va, va2, (size_t)nva));
    /* train reads it without --val-data */
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "'%s' train --config '%s/tests/configs/cli_tiny.json' --train-data '%s' --steps 2 "
                       "--run-dir '%s/run' --log-every 0", tu_bin(), tu_src(), tp, d) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0, "%s", out);
    /* too little input: one token is enough without a split, none is not */
    char *e = path_in(d, "empty.txt"), *one = path_in(d, "one.txt");
    tu_write_file(e, "");
    tu_write_file(one, "x");
    cr_assert_eq(run_data(&out, "--out '%s/o1' --val-fraction 0 '%s'", d, one), 0, "%s", out);
    cr_assert_eq(run_data(&out, "--out '%s/o0' --val-fraction 0 '%s'", d, e), 2, "%s", out);
    cr_assert(strstr(out, "hold 0 bytes; need at least 1"), "%s", out);
}

Test(cli_data, val_fraction_0_with_a_tokenizer) {
    char *d = tu_mkdtemp("datacli");
    char *tok = path_in(d, "tokenizer.json"), *a = path_in(d, "a.txt"), *b = path_in(d, "b.txt");
    tu_write_file(tok, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"\\n\": 3, "
                       "\"</s>\": 4}, \"merges\": [], \"unk_token\": \"<unk>\"}, \"added_tokens\": [{\"id\": 4, "
                       "\"content\": \"</s>\", \"special\": true}]}");
    tu_write_file(a, "ab\nba\n");
    tu_write_file(b, "bb");
    char *out = NULL;
    cr_assert_eq(run_data(&out, "--tokenizer '%s' --eos '</s>' --out '%s/z' --val-fraction 0 '%s' '%s'", tok, d, a, b),
                 0, "%s", out);
    char want[512];
    snprintf(want, sizeof want, "2 documents, 10 tokens (vocab 5, uint16) -> %s/z/data_train.bin (10 train tokens), "
             "no validation file (--val-fraction 0)", d);
    cr_assert(strstr(out, want), "summary line: want \"%s\" in %s", want, out);
    char *vp = path_in(d, "z/data_val.bin");
    cr_assert(access(vp, F_OK) != 0, "--val-fraction 0 wrote %s", vp);
    size_t nz, ns;
    char *z = slurp(path_in(d, "z/data_train.bin"), &nz);
    static const uint16_t ids[10] = {1, 2, 3, 2, 1, 3, 4, 2, 2, 4};   /* each document, then </s> */
    cr_assert(nz == 1024 + sizeof ids && !memcmp(z + 1024, ids, sizeof ids), "%zu bytes", nz);
    /* the same tokens as the train and val files of a nonzero fraction, end to end */
    cr_assert_eq(run_data(&out, "--tokenizer '%s' --eos '</s>' --out '%s/h' --val-fraction 0.3 '%s' '%s'", tok, d, a, b),
                 0, "%s", out);
    char *tr = slurp(path_in(d, "h/data_train.bin"), &ns);
    size_t nv;
    char *va = slurp(path_in(d, "h/data_val.bin"), &nv);
    cr_assert(ns == 1024 + 7 * 2 && nv == 1024 + 3 * 2, "%zu %zu", ns, nv);
    cr_assert(!memcmp(tr + 1024, ids, 14) && !memcmp(va + 1024, ids + 7, 6));
}

Test(cli_data, help_to_stdout) {
    char *out = NULL;
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "'%s' data --help 2>/dev/null", tu_bin()) > 0);
    cr_assert_eq(tu_run(cmd, &out), 0);
    cr_assert(strstr(out, "usage: meshpoint data") && strstr(out, "--val-fraction") && strstr(out, "--out") &&
              strstr(out, "--name"), "%s", out);
}

Test(cli_data, usage_errors_exit_2) {
    char *d = tu_mkdtemp("datacli");
    char *a = path_in(d, "a.txt");
    tu_write_file(a, "some text\nmore text\n");
    struct { const char *args, *word; } cases[] = {
        {"--bogus 1 '%s'", "--bogus"},
        {"'%s' --out", "--out"},
        {"--val-fraction 1 '%s'", "--val-fraction: 1 is not in [0,1)"},
        {"--val-fraction 1.5 '%s'", "--val-fraction: 1.5 is not in [0,1)"},
        {"--val-fraction=-0.5 '%s'", "--val-fraction: -0.5 is not in [0,1)"},
        {"--val-fraction abc '%s'", "--val-fraction"},
        {"--name '' '%s'", "--name"},
        {"--out '%s.d'", "no input files"},
        {"'%s.missing'", "a.txt.missing"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL;
        int rc = run_data(&out, cases[i].args, a);
        cr_assert_eq(rc, 2, "case %zu (%s): rc %d: %s", i, cases[i].args, rc, out);
        cr_assert(strstr(out, cases[i].word), "case %zu: message lacks %s: %s", i, cases[i].word, out);
        free(out);
    }
}

Test(cli_data, write_failure_exits_1) {
    char *d = tu_mkdtemp("datacli");
    char *a = path_in(d, "a.txt"), *blocker = path_in(d, "file");
    tu_write_file(a, "some text\nmore text\n");
    tu_write_file(blocker, "x");
    char *out = NULL;
    int rc = run_data(&out, "--out '%s/sub' '%s'", blocker, a);  /* a file where a directory should be */
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, blocker), "%s", out);
}

/* ---- scripts/make_demo_data.sh ---- */

Test(demo_script, builds_fortunes_dataset, .timeout = 120) {
    DIR *fd = opendir("/usr/share/games/fortunes");
    if (!fd) cr_skip_test("the fortunes package is not installed");
    /* expected token count: the plain text files, as the script picks them */
    long long bytes = 0;
    int files = 0;
    for (struct dirent *e; (e = readdir(fd));) {
        size_t L = strlen(e->d_name);
        if (e->d_name[0] == '.' || (L > 4 && !strcmp(e->d_name + L - 4, ".dat")) ||
            (L > 3 && !strcmp(e->d_name + L - 3, ".u8")))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "/usr/share/games/fortunes/%s", e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISREG(st.st_mode)) { bytes += st.st_size; files++; }
    }
    closedir(fd);
    char *d = tu_mkdtemp("demo");
    char *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "MP_BIN='%s' sh '%s/scripts/make_demo_data.sh' '%s/o'", tu_bin(), tu_src(), d) > 0);
    int rc = tu_run(cmd, &out);
    if (files == 0) {
        cr_assert_eq(rc, 1, "%s", out);
        return;
    }
    cr_assert_eq(rc, 0, "%s", out);
    char want[64];
    snprintf(want, sizeof want, "%d files, %lld tokens", files, bytes);
    cr_assert(strstr(out, want), "want \"%s\" in: %s", want, out);
    int64_t ntr, nva;
    char *tp = path_in(d, "o/fortunes_train.bin"), *vp = path_in(d, "o/fortunes_val.bin");
    free(read_tokens_as_text(tp, &ntr));
    free(read_tokens_as_text(vp, &nva));
    cr_assert_eq(ntr + nva, bytes);
    cr_assert(nva > bytes / 20 && nva < bytes / 5);
}

Test(demo_script, missing_fortunes_fails_clearly) {
    char *d = tu_mkdtemp("demo");
    char *cmd = NULL, *out = NULL;
    cr_assert(asprintf(&cmd, "FORTUNES_DIR='%s/none' MP_BIN='%s' sh '%s/scripts/make_demo_data.sh' '%s/o'", d,
                       tu_bin(), tu_src(), d) > 0);
    int rc = tu_run(cmd, &out);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "fortunes") && strstr(out, "missing"), "%s", out);
}

/* ---- llm.c Llama 3 files (magic 20240801, version 7, uint32 tokens) ---- */

/* An llm.c file with the given header fields followed by nt uint32 tokens. */
static void write_llmc3_raw(const char *path, int32_t magic, int32_t version, int32_t count, const uint32_t *tok,
                            size_t nt) {
    size_t bytes = 1024 + nt * 4;
    unsigned char *buf = calloc(1, bytes);
    int32_t *h = (int32_t *)buf;
    h[0] = magic;
    h[1] = version;
    h[2] = count;
    if (nt) memcpy(buf + 1024, tok, nt * 4);
    write_bytes(path, buf, bytes);
    free(buf);
}

Test(data_llmc3, reads_uint32_tokens_by_magic) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "l3.bin");
    enum { N = 5000 };
    static uint32_t t[N];
    for (int i = 0; i < N; i++) t[i] = (uint32_t)((int64_t)i * 104729 % 128256);   /* ids past 65535 */
    write_llmc3_raw(p, 20240801, 7, N, t, N);
    mp_token_file f;
    mp_err err;
    cr_assert_eq(mp_token_file_open(&f, p, MP_DATA_LLMC, 128256, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f.format, MP_DATA_LLMC);
    cr_assert_eq(f.token_bytes, 4);
    cr_assert_eq(f.ntokens, N);
    for (int i = 0; i < N; i++) cr_assert_eq(mp_token_at(&f, i), (int32_t)t[i], "token %d", i);
    /* the loader reads them like any other file */
    mp_loader l;
    cr_assert_eq(mp_loader_init(&l, &f, 3, 100, &err), MP_OK, "%s", err.msg);
    mp_loader_advance(&l);
    int32_t in[300], tg[300];
    mp_loader_get(&l, 1, 2, in, tg);
    for (int k = 0; k < 200; k++) {
        cr_assert_eq(in[k], (int32_t)t[300 + 100 + k]);
        cr_assert_eq(tg[k], (int32_t)t[300 + 100 + k + 1]);
    }
    mp_token_file_close(&f);
    /* ids are checked against the vocabulary, naming the first one too large */
    expect_open_error(p, MP_DATA_LLMC, 100000, "token 1", "id 104729", "vocab_size 100000", NULL);
    /* GPT-2 files still read as uint16 */
    char *q = path_in(d, "g.bin");
    uint16_t *g = pattern_tokens(100, 256);
    cr_assert_eq(mp_token_file_write_llmc(q, g, 100, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(mp_token_file_open(&f, q, MP_DATA_LLMC, 256, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(f.token_bytes, 2);
    for (int i = 0; i < 100; i++) cr_assert_eq(mp_token_at(&f, i), g[i]);
    mp_token_file_close(&f);
}

Test(data_llmc3, header_errors) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "bad.bin");
    uint32_t t[64] = {0};
    write_llmc3_raw(p, 20240801, 1, 8, t, 8);   /* the GPT-2 version under the Llama 3 magic */
    expect_open_error(p, MP_DATA_LLMC, 256, "version 1", "magic 20240801", "supported: 7", "uint32", NULL);
    write_llmc_raw(p, MP_LLMC_MAGIC, 7, 4, (const uint16_t *)t, 4);   /* and the other way round */
    expect_open_error(p, MP_DATA_LLMC, 256, "version 7", "magic 20240520", "supported: 1", NULL);
    write_llmc3_raw(p, 20240802, 7, 8, t, 8);
    expect_open_error(p, MP_DATA_LLMC, 256, "bad magic number 20240802", "20240520", "20240801", NULL);
    write_llmc3_raw(p, 20240801, 7, 100, t, 50);   /* 100 tokens declared, 200 bytes given */
    expect_open_error(p, MP_DATA_LLMC, 256, "truncated", "100 tokens (400 bytes)", "only 200 token bytes", NULL);
    write_llmc3_raw(p, 20240801, 7, 8, t, 9);
    expect_open_error(p, MP_DATA_LLMC, 256, "4 unexpected bytes", NULL);
    write_llmc3_raw(p, 20240801, 7, 0, NULL, 0);
    expect_open_error(p, MP_DATA_LLMC, 256, "empty", NULL);
    /* a GPT-2 header declaring n uint16 tokens with 2n uint16s after it (a Llama 3 body) */
    write_llmc_raw(p, MP_LLMC_MAGIC, 1, 8, (const uint16_t *)t, 16);
    expect_open_error(p, MP_DATA_LLMC, 256, "16 unexpected bytes", NULL);
}

Test(data_llmc3, writer_layout_and_round_trip) {
    char *d = tu_mkdtemp("data");
    char *p = path_in(d, "w.bin");
    uint32_t t[7] = {0, 1, 65535, 65536, 128000, 128255, 4000000000u};
    mp_err err;
    cr_assert_eq(mp_token_file_write_llmc3(p, t, 7, &err), MP_OK, "%s", err.msg);
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(st.st_size, 1024 + 7 * 4);
    FILE *f = fopen(p, "rb");
    int32_t h[256];
    uint32_t body[7];
    cr_assert_eq(fread(h, 4, 256, f), 256);
    cr_assert_eq(fread(body, 4, 7, f), 7);
    fclose(f);
    cr_assert(h[0] == 20240801 && h[1] == 7 && h[2] == 7);
    for (int i = 3; i < 256; i++) cr_assert_eq(h[i], 0);
    cr_assert(!memcmp(body, t, sizeof t));
    mp_token_file tf;
    cr_assert_eq(mp_token_file_open(&tf, p, MP_DATA_LLMC, 0, &err), MP_OK, "%s", err.msg);   /* no id check */
    for (int i = 0; i < 6; i++) cr_assert_eq(mp_token_at(&tf, i), (int32_t)t[i]);
    mp_token_file_close(&tf);
    /* read as raw u32, the header shows up as 256 tokens */
    cr_assert_eq(mp_token_file_open(&tf, p, MP_DATA_U32, 0, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(tf.ntokens, 256 + 7);
    mp_token_file_close(&tf);
}

/* docs/TOKENIZER.md's Python writer (the block after "<!-- llmc3-writer -->"), run with a stand-in tokenizer:
 * what it writes opens as an llm.c Llama 3 file holding the ids it was given. */
Test(data_llmc3, readme_python_writer, .timeout = 60) {
    char *d = tu_mkdtemp("data");
    char *readme = NULL, *script = path_in(d, "w.py"), *out = path_in(d, "t.bin"), *cmd = NULL, *log = NULL;
    cr_assert(asprintf(&readme, "%s/docs/TOKENIZER.md", tu_src()) > 0);
    FILE *in = fopen(readme, "r"), *py = fopen(script, "w");
    cr_assert(in && py);
    char line[1024];
    int state = 0;   /* 0: before the marker, 1: before the fence, 2: in the block, 3: done */
    while (fgets(line, sizeof line, in) && state < 3) {
        if (state == 0 && strstr(line, "<!-- llmc3-writer -->")) state = 1;
        else if (state == 1 && !strncmp(line, "```python", 9)) state = 2;
        else if (state == 2 && !strncmp(line, "```", 3)) state = 3;
        else if (state == 2) fputs(line, py);
    }
    fclose(in);
    cr_assert_eq(state, 3, "docs/TOKENIZER.md lacks the llmc3-writer block");
    /* a stand-in for a pretrained tokenizer: ids past 65535, as Llama 3's */
    fprintf(py, "class FakeTokenizer:\n"
                "    eos_token_id = 128001\n"
                "    def encode(self, text):\n"
                "        return [128000] + [70000 + ord(c) for c in text]\n"
                "tok = FakeTokenizer()\n"
                "ids = [i for d in ['ab', 'xyz'] for i in tok.encode(d) + [tok.eos_token_id]]\n"
                "write_llmc3(%s%s%s, ids)\n", "'", out, "'");
    fclose(py);
    cr_assert(asprintf(&cmd, "/usr/bin/python3 '%s'", script) > 0);
    int rc = tu_run(cmd, &log);
    cr_assert_eq(rc, 0, "%s", log);
    mp_token_file f;
    mp_err err;
    cr_assert_eq(mp_token_file_open(&f, out, MP_DATA_LLMC, 128256, &err), MP_OK, "%s", err.msg);
    int32_t want[] = {128000, 70000 + 'a', 70000 + 'b', 128001, 128000, 70000 + 'x', 70000 + 'y', 70000 + 'z', 128001};
    cr_assert_eq(f.ntokens, 9);
    for (int i = 0; i < 9; i++) cr_assert_eq(mp_token_at(&f, i), want[i], "token %d", i);
    mp_token_file_close(&f);
    free(readme);
    free(script);
    free(out);
    free(cmd);
    free(log);
}

/* `meshpoint train` on a Llama 3 file trains exactly as on the same tokens in a GPT-2 file. */
Test(data_llmc3, train_reads_it_like_a_gpt2_file, .timeout = 120) {
    char *d = tu_mkdtemp("data");
    enum { N = 3000 };
    static uint16_t a[N];
    static uint32_t b[N];
    for (int i = 0; i < N; i++) b[i] = a[i] = (uint16_t)((i * 31 + i / 7) % 256);
    char *pa = path_in(d, "a.bin"), *pb = path_in(d, "b.bin"), *cfg = NULL;
    mp_err err;
    cr_assert_eq(mp_token_file_write_llmc(pa, a, N, &err), MP_OK);
    cr_assert_eq(mp_token_file_write_llmc3(pb, b, N, &err), MP_OK);
    cr_assert(asprintf(&cfg, "%s/tests/configs/cli_tiny.json", tu_src()) > 0);
    char *metrics[2];
    for (int k = 0; k < 2; k++) {
        char *cmd = NULL, *out = NULL;
        cr_assert(asprintf(&cmd, "%s train --config %s --train-data %s --steps 3 --run-dir %s/run%d --log-every 0",
                           tu_bin(), cfg, k ? pb : pa, d, k) > 0);
        int rc = tu_run(cmd, &out);
        cr_assert_eq(rc, 0, "%s", out);
        free(cmd);
        free(out);
        char *mp = NULL;
        cr_assert(asprintf(&mp, "%s/run%d/metrics.jsonl", d, k) > 0);
        FILE *f = fopen(mp, "r");
        cr_assert(f);
        free(mp);
        static char buf[2][8192];
        size_t n = fread(buf[k], 1, sizeof buf[k] - 1, f);
        buf[k][n] = '\0';
        fclose(f);
        /* drop the timing fields: only the losses, lrs and norms must agree */
        metrics[k] = buf[k];
        for (char *s = buf[k]; (s = strstr(s, "\"tokens_per_s\"")); ) {
            char *e = strchr(s, '}');
            cr_assert(e);
            memmove(s, e, strlen(e) + 1);
        }
    }
    cr_assert_str_eq(metrics[0], metrics[1]);
    free(pa);
    free(pb);
    free(cfg);
}
