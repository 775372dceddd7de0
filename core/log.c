/* core/log.c — see log.h. Info/debug lines come from rank 0 only, so 8 ranks do not print 8 copies;
 * warnings and errors come from every rank, tagged with it. */
#include "core/log.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int g_rank = -1, g_world = 1;
static int g_level = -1; /* -1: MP_LOG not read yet (level_now reads it once) */
static char g_prog[64] = "meshpoint";

void mp_log_set_rank(int rank, int world) { g_rank = rank; g_world = world; }
void mp_log_set_prog(const char *prog) { snprintf(g_prog, sizeof g_prog, "%s", prog && *prog ? prog : "meshpoint"); }
const char *mp_log_prog(void) { return g_prog; }
int mp_log_is_main(void) { return g_world <= 1 || g_rank <= 0; }

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
    if (lvl >= MP_LOG_INFO) { fprintf(stderr, "%s\n", line); return; }
    const char *tag = lvl == MP_LOG_ERROR ? "error" : "warning";
    if (g_world > 1 && g_rank >= 0)
        fprintf(stderr, "%s: %s: [rank %d] %s\n", g_prog, tag, g_rank, line);
    else
        fprintf(stderr, "%s: %s: %s\n", g_prog, tag, line);
}

void mp_log_fail(const char *fmt, ...) {
    char line[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s: error: %s\n", g_prog, line);
}

double mp_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
