/*
 * core/log.h — leveled logging to stderr, prefixed with the rank when the world has more than one.
 * Level from MP_LOG (error|warn|info|debug), default info. Library code logs; it never exits.
 *
 * Errors and warnings carry the program's one prefix, "PROG: error: " / "PROG: warning: ", where PROG
 * is the command that runs ("meshpoint train", "meshpoint ckpt verify"; set once by cli/main.c, default
 * "meshpoint"); a multi-rank job adds "[rank N] " after it for lines that only some ranks print.
 */
#ifndef MP_LOG_H
#define MP_LOG_H

typedef enum { MP_LOG_ERROR = 0, MP_LOG_WARN, MP_LOG_INFO, MP_LOG_DEBUG } mp_log_level;

/* Sets the rank shown in the prefix (-1: none) and whether non-zero ranks print info/debug lines. */
void mp_log_set_rank(int rank, int world);
/* Sets PROG, the command named in error and warning lines (copied; at most 63 bytes kept). */
void mp_log_set_prog(const char *prog);
/* PROG: "meshpoint" until mp_log_set_prog. */
const char *mp_log_prog(void);
/* Whether this process is rank 0 of its world or alone (the one that prints info lines and progress). */
int mp_log_is_main(void);
/* Prints "PROG: error: <message>" on stderr from the calling process, without a rank tag: for errors
 * every rank found alike (printed by one rank) and for single-process commands. */
void mp_log_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void mp_log(mp_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic wall-clock seconds (for step timings and I/O statistics). */
double mp_time_s(void);

#define mp_info(...) mp_log(MP_LOG_INFO, __VA_ARGS__)
#define mp_warn(...) mp_log(MP_LOG_WARN, __VA_ARGS__)
#define mp_debug(...) mp_log(MP_LOG_DEBUG, __VA_ARGS__)
#define mp_error(...) mp_log(MP_LOG_ERROR, __VA_ARGS__)

#endif
