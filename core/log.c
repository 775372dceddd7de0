/* core/log.c — see log.h. Info/debug lines come from rank 0 only, so 8 ranks do not print 8 copies;
 * warnings and errors come from every rank, tagged with it. */
#include "core/log.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank = -1, g_world = 1;
static int g_level = -1;

void mp_log_set_rank(int rank, int world) { g_rank = rank; g_world = world; }
void mp_log_set_level(mp_log_level lvl) { g_level = (int)lvl; }

static int level_now(void) {
    if (g_level >= 0) return g_level;
    const char *s = getenv("MP_LOG");
    if (!s) g_level = MP_LOG_INFO;
    else if (!strcmp(s, "error")) g_level = MP_LOG_ERROR;
    else if (!strcmp(s, "warn")) g_level = MP_LOG_WARN;
    else if (!strcmp(s, "debug")) g_level = MP_LOG_DEBUG;
    else g_level = MP_LOG_INFO;
    return g_level;
}

void mp_log(mp_log_level lvl, const char *fmt, ...) {
    if ((int)lvl > level_now()) return;
    if (lvl >= MP_LOG_INFO && g_world > 1 && g_rank > 0) return;
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    const char *tag = lvl == MP_LOG_ERROR ? "error: " : lvl == MP_LOG_WARN ? "warning: " : "";
    if (g_world > 1 && g_rank >= 0 && lvl < MP_LOG_INFO)
        fprintf(stderr, "[rank %d] %s%s\n", g_rank, tag, line);
    else
        fprintf(stderr, "%s%s\n", tag, line);
}

double mp_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
