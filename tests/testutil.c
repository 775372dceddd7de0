/* tests/testutil.c — see testutil.h. */
#define _GNU_SOURCE
#include "tests/testutil.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

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
