/* tests/testutil.c — see testutil.h. */
#define _GNU_SOURCE
#include "tests/testutil.h"
#include <assert.h>
#include <criterion/criterion.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

char *tu_mkdtemp(const char *tag) {
    const char *base = getenv("TMPDIR");
    if (!base) base = "/tmp";
    char *p = NULL;
    if (asprintf(&p, "%s/mp_%s_XXXXXX", base, tag) < 0 || !mkdtemp(p)) {
        fprintf(stderr, "tu_mkdtemp failed\n");
        abort();
    }
    return p;
}

void tu_write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        fprintf(stderr, "tu_write_file %s failed\n", path);
        abort();
    }
}

int tu_run(const char *cmd, char **out) {
    char *full = NULL;
    if (asprintf(&full, "%s 2>&1", cmd) < 0) abort();
    FILE *p = popen(full, "r");
    free(full);
    if (!p) abort();
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    size_t n;
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int st = pclose(p);
    if (out) *out = buf; else free(buf);
    if (WIFEXITED(st)) return WEXITSTATUS(st);
    if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
    return -1;
}

const char *tu_bin(void) {
    const char *b = getenv("MP_BIN");
    return b ? b : "./meshpoint";
}

const char *tu_src(void) {
    const char *s = getenv("MP_SRC");
    return s ? s : ".";
}

double tu_max_rel(const float *a, const float *b, int64_t n) {
    double md = 0, mb = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md) md = d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / mb;
}

double tu_rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 1e-300;
    for (int64_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    return sqrt(num / den);
}

void *tu_expected_box(tu_vals vf, int tid, const tu_tdesc *t, const int64_t *off, const int64_t *shp, size_t *bytes) {
    size_t n = (size_t)tu_numel(t->nd, shp) * mp_dtype_size(t->dt);
    void *b = malloc(n);
    tu_fill_box(vf, tid, t, off, shp, b);
    if (bytes) *bytes = n;
    return b;
}

void tu_expect_box(ckpt_reader *r, tu_vals vf, int tid, const tu_tdesc *t, const int64_t *off, const int64_t *shp) {
    size_t n;
    void *want = tu_expected_box(vf, tid, t, off, shp, &n);
    void *got = malloc(n);
    memset(got, 0xAB, n);
    mp_err e;
    char reg[256];
    int at = 0;
    for (int d = 0; d < t->nd && at < (int)sizeof reg - 48; d++)
        at += snprintf(reg + at, sizeof reg - (size_t)at, "%s%lld+%lld", d ? ", " : "[", (long long)off[d], (long long)shp[d]);
    snprintf(reg + at, sizeof reg - (size_t)at, "]");
    cr_assert_eq(ckpt_read(r, t->name, off, shp, got, &e), MP_OK, "reading %s %s: %s", t->name, reg, e.msg);
    cr_assert(memcmp(got, want, n) == 0, "tensor %s %s: data differs", t->name, reg);
    free(got);
    free(want);
}

char *tu_path(const char *a, const char *b) {
    char *p;
    cr_assert(asprintf(&p, "%s/%s", a, b) > 0);
    return p;
}

void tu_rm_rf(const char *p) {
    char *cmd;
    cr_assert(asprintf(&cmd, "rm -rf '%s'", p) > 0);
    tu_run(cmd, NULL);
    free(cmd);
}

ckpt_reader *tu_open_dir(const char *dir) {
    ckpt_reader *r;
    mp_err e;
    cr_assert_eq(ckpt_open(&r, dir, &e), MP_OK, "open %s: %s", dir, e.msg);
    return r;
}

ckpt_reader *tu_open_step(const char *root, int64_t step) {
    char *d;
    cr_assert(asprintf(&d, "%s/step_%08lld", root, (long long)step) > 0);
    ckpt_reader *r = tu_open_dir(d);
    free(d);
    return r;
}

hid_t tu_h5_open(const char *path, unsigned flags) {
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_file_locking(fapl, 0, 1);
    hid_t f = H5Fopen(path, flags, fapl);
    H5Pclose(fapl);
    return f;
}

long long tu_h5_data_offset(const char *path, const char *dset) {
    hid_t f = tu_h5_open(path, H5F_ACC_RDONLY);
    cr_assert(f >= 0, "open %s", path);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    cr_assert(d >= 0, "open %s in %s", dset, path);
    haddr_t a = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    cr_assert(a != HADDR_UNDEF);
    return (long long)a;
}

void tu_flip_byte(const char *path, long long at) {
    int fd = open(path, O_RDWR);
    cr_assert(fd >= 0);
    unsigned char c;
    cr_assert_eq(pread(fd, &c, 1, at), 1);
    c ^= 0x10;
    cr_assert_eq(pwrite(fd, &c, 1, at), 1);
    close(fd);
}

double tu_urand(uint64_t *state) {
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

float *tu_frand(uint64_t *state, int64_t n, double amp) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert(p);
    for (int64_t i = 0; i < n; i++) p[i] = (float)(amp * tu_urand(state));
    return p;
}

float *tu_ffill(int64_t n, float val) {
    float *p = malloc((size_t)(n ? n : 1) * sizeof(float));
    assert(p);
    for (int64_t i = 0; i < n; i++) p[i] = val;
    return p;
}
