/*
 * cli/progress.h — one progress bar on stderr for the long operations of the program: checkpoint saves
 * and loads, `ckpt verify`, `ckpt diff`, `ckpt show --stats`.
 *
 *     LABEL [##########..........]  48%  1.20 GiB of 2.50 GiB  310.2 MiB/s  ETA 4s
 *
 * redrawn in place ('\r') at most every 100 ms, and cleared by mp_progress_finish, so a log keeps only
 * the lines the program prints anyway. Without a known total it shows the amount and the rate only.
 *
 * When: only on a terminal (stderr isatty), only on the process that prints info lines (rank 0, see
 * core/log.h), and only once the operation has run for 0.5 s, so small checkpoints stay silent.
 * MP_PROGRESS=1 forces it on from the first update (tests: the bar then goes to a file, each redraw on
 * its own line ending in '\r', and finish ends it with a newline); MP_PROGRESS=0 turns it off.
 *
 * Every function accepts NULL (what mp_progress_start returns when no bar is shown), so callers never
 * test for it. Not thread-safe: one bar is updated from one thread.
 */
#ifndef MP_CLI_PROGRESS_H
#define MP_CLI_PROGRESS_H

#include <stddef.h>
#include <stdint.h>

typedef enum { MP_PROGRESS_BYTES, MP_PROGRESS_ITEMS } mp_progress_unit;

typedef struct mp_progress mp_progress;

/* A bar for an operation over `total` bytes or items (0: not known yet) named by label (copied), or
 * NULL when no bar is to be shown (see the top of this file). */
mp_progress *mp_progress_start(const char *label, int64_t total, mp_progress_unit unit);
/* Sets the total (when it becomes known later). */
void mp_progress_set_total(mp_progress *p, int64_t total);
/* Records that `done` of the total are finished (absolute, not an increment) and redraws if due. */
void mp_progress_update(mp_progress *p, int64_t done);
/* Takes the bar off the line (a newline when forced on without a terminal) so that the caller can
 * print a line of its own; the next update draws it again. */
void mp_progress_clear(mp_progress *p);
/* Clears the bar (a newline when forced on without a terminal) and frees p. */
void mp_progress_finish(mp_progress *p);
/* A ckpt_progress_fn (ckpt/ckpt.h) for ctx = an mp_progress (may be NULL): takes the library's total
 * when it gives one, then mp_progress_update(done). */
void mp_progress_ckpt(void *ctx, int64_t done, int64_t total);
/* A duration for humans into buf ("4.2s", "42s", "3m07s", "2h05m"; negative or NaN as 0.0s); returns buf. */
const char *mp_progress_duration(char *buf, size_t cap, double seconds);

#endif
