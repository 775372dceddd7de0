/*
 * cli/run_dir.h — the run directory's rules, the part any caller may use: what an earlier run left in a
 * run directory and its checkpoint root, and setting an abandoned branch aside (its step directories
 * under ROOT/abandoned_<time>/, its metrics lines in RUN/metrics.abandoned_<time>.jsonl). Nothing is
 * ever deleted. The training run's own use of them (lock, refusal, set-aside) is in cli/train_run.h.
 */
#ifndef MP_RUN_DIR_H
#define MP_RUN_DIR_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

/* Sets *used and describes into buf (cap bytes) what an earlier run left in run_dir and the checkpoint
 * root: a non-empty metrics.jsonl (its line count), step directories (how many, which steps),
 * unfinished saves (*.partial), `latest`. Nothing there: *used = 0 and buf "". Reads only. */
mp_code mp_run_dir_describe(const char *run_dir, const char *root, int *used, char *buf, size_t cap, mp_err *err);

/* A fresh name to set an abandoned branch aside under: "abandoned_YYYYmmdd-HHMMSS" (local time), with
 * "-2", "-3", ... appended while ROOT/NAME or RUN/metrics.NAME.jsonl exists. */
void mp_aside_name(const char *run_dir, const char *root, char *buf, size_t cap);

/* Moves the lines of the metrics file `path` whose "step" is greater than `after` (after = -1: every
 * line) into the new file aside_path, keeping the other lines, in order, in path. Nothing is lost at
 * any point: aside_path is written and fsynced before path is replaced (path.tmp.<pid>, fsync, rename, fsync
 * of the directory). No such line (or no file): nothing is written. *moved gets the number of lines
 * moved. */
mp_code mp_metrics_set_aside(const char *path, int64_t after, const char *aside_path, int64_t *moved, mp_err *err);

#endif
