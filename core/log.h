/*
 * core/log.h — leveled logging to stderr, prefixed with the rank when the world has more than one.
 * Level from MP_LOG (error|warn|info|debug), default info. Library code logs; it never exits.
 */
#ifndef MP_LOG_H
#define MP_LOG_H

typedef enum { MP_LOG_ERROR = 0, MP_LOG_WARN, MP_LOG_INFO, MP_LOG_DEBUG } mp_log_level;

/* Sets the rank shown in the prefix (-1: none) and whether non-zero ranks print info/debug lines. */
void mp_log_set_rank(int rank, int world);
void mp_log_set_level(mp_log_level lvl);
void mp_log(mp_log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Monotonic wall-clock seconds (for step timings and I/O statistics). */
double mp_time_s(void);

#define mp_info(...) mp_log(MP_LOG_INFO, __VA_ARGS__)
#define mp_warn(...) mp_log(MP_LOG_WARN, __VA_ARGS__)
#define mp_debug(...) mp_log(MP_LOG_DEBUG, __VA_ARGS__)
#define mp_error(...) mp_log(MP_LOG_ERROR, __VA_ARGS__)

#endif
