/*
 * ckpt/util.c — small pieces every file of ckpt/ shares: the clock, formatted strings, a growing byte
 * buffer, the checkpoint-directory check of every open, the rounds in which rank 0 gathers and scatters
 * per-rank bytes (the save's box lists, the collective open's region lists and parts), and the crash
 * points of the fault ckpt_crash_at (core/fault.h) that the kill tests use. The file-system steps of the commit protocol (fsync, durable rename, directory swap, mkdir -p, removal) are core/fsutil.h's, shared with every layer.
 */
#define _GNU_SOURCE
#include "core/alloc.h"
#include "core/fault.h"
#include "core/fsutil.h"
#include "ckpt/ckpt_internal.h"
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/log.h"

double ck_now(void) { return mp_time_s(); }

char *ck_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    if (n < 0 || !s) mp_oom(0, MP_MEM_OTHER, "a formatted string");
    return s;
}

void ck_buf_put(ck_buf *b, const void *v, size_t n) {
    if (b->n + n > b->cap) {
        size_t cap = (b->n + n) * 2 + 256;
        b->p = mp_realloc(b->p, b->cap, cap, MP_MEM_OTHER);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, v, n);
    b->n += n;
}

mp_code ck_dir_exists(const char *dir, mp_err *e) {
    if (dir && mp_fs_is_dir(dir)) return MP_OK;
    return mp_err_set(e, MP_EINPUT, "checkpoint directory %s does not exist", dir ? dir : "(null)");
}

int ck_round_ranks(int ranks) {
    int64_t k = mp_fault_int("ckpt_gather_ranks", 0);
    return k > 0 ? (int)k : ranks;
}

/* counts[size] on rank 0 (NULL elsewhere): len[r] for the ranks r of [r0, r1), 0 for the others. */
static int64_t *round_counts(const mp_comm *w, const int64_t *len, int r0, int r1) {
    if (w->rank != 0) return NULL;
    int64_t *c = mp_xcalloc(sizeof(int64_t) * (size_t)w->size);
    for (int r = r0; r < r1; r++) c[r] = len[r];
    return c;
}

char *ck_gather_round(mp_comm *w, const void *mine, int64_t n, const int64_t *len, int r0, int r1) {
    int64_t *counts = round_counts(w, len, r0, r1);
    size_t total = 0;
    for (int r = r0; counts && r < r1; r++) total += (size_t)len[r];
    char *out = counts ? mp_xmalloc(total ? total : 1) : NULL;
    w->ops->gatherv(w, out, mine, w->rank >= r0 && w->rank < r1 ? n : 0, counts, 0);
    free(counts);
    return out;
}

void ck_scatter_round(mp_comm *w, void *out, int64_t n, const void *in, const int64_t *len, int r0, int r1) {
    int64_t *counts = round_counts(w, len, r0, r1);
    w->ops->scatterv(w, out, w->rank >= r0 && w->rank < r1 ? n : 0, in, counts, 0);
    free(counts);
}

/* Whether fault `at` (core/fault.h) names point and fault `rank_name` is unset, empty or rank: the one
 * rule of ckpt_crash_at and ckpt_fail_at. */
static int hook_at(const char *at, const char *rank_name, const char *point, int rank) {
    char buf[256];
    const char *v = mp_fault_arg(at, buf, sizeof buf);
    return v && !strcmp(v, point) && mp_fault_rank_matches(rank_name, rank);
}

void ck_crash_point(const char *point, int rank) {
    if (!hook_at("ckpt_crash_at", "ckpt_crash_rank", point, rank)) return;
    fprintf(stderr, "ckpt: fault ckpt_crash_at:%s: killing rank %d\n", point, rank);
    fflush(NULL);
    raise(SIGKILL);
}

int ck_fail_point(const char *point, int rank) { return hook_at("ckpt_fail_at", "ckpt_fail_rank", point, rank); }
