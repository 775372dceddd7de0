/*
 * cli/progress.c — see progress.h. The decision to show a bar is made once, at start (environment,
 * terminal, rank); the 0.5 s grace period and the 100 ms redraw limit are checked on every update
 * against the monotonic clock of core/log.h, so an update that does not draw costs one clock read.
 */
#include "cli/progress.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/log.h"

#define PROGRESS_GRACE_S 0.5     /* a bar appears only for operations running longer than this */
#define PROGRESS_REDRAW_S 0.1    /* at most ten redraws a second */
#define PROGRESS_WIDTH 20        /* characters of the bar itself */

struct mp_progress {
    char label[64];
    int64_t total, done;
    mp_progress_unit unit;
    int tty;            /* stderr is a terminal (else forced on: plain '\r' lines, newline at the end) */
    int forced;         /* MP_PROGRESS=1: draw from the first update */
    int drawn;          /* something is on the line */
    double t0, last;    /* start, last redraw */
};

/* 1 to force on, 0 to force off, -1 when MP_PROGRESS is unset or empty. */
static int progress_env(void) {
    const char *v = getenv("MP_PROGRESS");
    if (!v || !*v) return -1;
    return strcmp(v, "0") != 0;
}

mp_progress *mp_progress_start(const char *label, int64_t total, mp_progress_unit unit) {
    int env = progress_env(), tty = isatty(STDERR_FILENO);
    if (env == 0 || (env < 0 && !tty) || !mp_log_is_main()) return NULL;
    mp_progress *p = mp_xcalloc(sizeof *p);
    snprintf(p->label, sizeof p->label, "%s", label ? label : "");
    p->total = total > 0 ? total : 0;
    p->unit = unit;
    p->tty = tty;
    p->forced = env > 0;
    p->t0 = mp_time_s();
    p->last = p->t0;
    return p;
}

void mp_progress_set_total(mp_progress *p, int64_t total) {
    if (p && total > 0) p->total = total;
}

/* An amount for humans into buf: bytes as B/KiB/MiB/GiB/TiB, items as a plain count. */
static const char *amount_str(char *buf, size_t cap, double v, mp_progress_unit unit) {
    if (unit == MP_PROGRESS_ITEMS) {
        snprintf(buf, cap, "%.0f", v);
        return buf;
    }
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024.0 && u < 4) v /= 1024.0, u++;
    if (u == 0) snprintf(buf, cap, "%.0f B", v);
    else snprintf(buf, cap, "%.2f %s", v, units[u]);
    return buf;
}

const char *mp_progress_duration(char *buf, size_t cap, double s) {
    if (!(s >= 0)) s = 0;
    long t = (long)(s + 0.5);
    if (s < 9.95) snprintf(buf, cap, "%.1fs", s);
    else if (t < 60) snprintf(buf, cap, "%lds", t);
    else if (t < 3600) snprintf(buf, cap, "%ldm%02lds", t / 60, t % 60);
    else snprintf(buf, cap, "%ldh%02ldm", t / 3600, (t % 3600) / 60);
    return buf;
}

/* Draws the bar's line for the state of p at clock now. */
static void draw(mp_progress *p, double now) {
    char line[256], a[32], b[32], r[32], eta[32];
    double el = now - p->t0, rate = el > 0 ? (double)p->done / el : 0;
    size_t n = 0;
    if (p->total > 0) {
        double f = (double)p->done / (double)p->total;
        if (f > 1) f = 1;
        char bar[PROGRESS_WIDTH + 1];
        int full = (int)(f * PROGRESS_WIDTH);
        for (int i = 0; i < PROGRESS_WIDTH; i++) bar[i] = i < full ? '#' : '.';
        bar[PROGRESS_WIDTH] = '\0';
        n = (size_t)snprintf(line, sizeof line, "%s [%s] %3.0f%%  %s of %s", p->label, bar, 100 * f,
                             amount_str(a, sizeof a, (double)p->done, p->unit),
                             amount_str(b, sizeof b, (double)p->total, p->unit));
    } else {
        n = (size_t)snprintf(line, sizeof line, "%s  %s", p->label, amount_str(a, sizeof a, (double)p->done, p->unit));
    }
    if (n < sizeof line && rate > 0)
        n += (size_t)snprintf(line + n, sizeof line - n, "  %s%s", amount_str(r, sizeof r, rate, p->unit),
                              p->unit == MP_PROGRESS_BYTES ? "/s" : " per s");
    if (n < sizeof line && p->total > 0 && rate > 0 && p->done < p->total)
        snprintf(line + n, sizeof line - n, "  ETA %s", mp_progress_duration(eta, sizeof eta, (double)(p->total - p->done) / rate));
    fprintf(stderr, p->tty ? "\r%s\033[K" : "\r%s", line);
    fflush(stderr);
    p->drawn = 1;
    p->last = now;
}

void mp_progress_update(mp_progress *p, int64_t done) {
    if (!p) return;
    p->done = done;
    double now = mp_time_s();
    if (!p->forced && now - p->t0 < PROGRESS_GRACE_S) return;
    int complete = p->total > 0 && done >= p->total;
    if (!p->drawn || complete || now - p->last >= PROGRESS_REDRAW_S) draw(p, now);
}

void mp_progress_clear(mp_progress *p) {
    if (!p || !p->drawn) return;
    fputs(p->tty ? "\r\033[K" : "\n", stderr);
    fflush(stderr);
    p->drawn = 0;
}

void mp_progress_finish(mp_progress *p) {
    if (!p) return;
    if (p->drawn) fputs(p->tty ? "\r\033[K" : "\n", stderr);
    fflush(stderr);
    free(p);
}

void mp_progress_ckpt(void *ctx, int64_t done, int64_t total) {
    mp_progress *p = ctx;
    mp_progress_set_total(p, total);
    mp_progress_update(p, done);
}
