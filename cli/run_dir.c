/*
 * cli/run_dir.c — the run directory's rules (run_dir.h) and the training run's use of them: the
 * checkpoint root's job lock, the refusal of a fresh run in a used run directory (--resume continues it,
 * --overwrite starts over), the removal of interrupted saves, and, resuming or overwriting, moving aside
 * what lies past the step the run starts from. Rank 0 acts; the outcome is agreed over the ranks.
 */
#define _GNU_SOURCE
#include "cli/run_dir.h"
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "cli/train_run.h"
#include "core/fsutil.h"
#include "core/log.h"

/* Lines of a file (0 if it cannot be read). */
static int64_t count_lines(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    int64_t n = 0;
    int c, last = '\n';
    while ((c = getc(f)) != EOF) {
        if (c == '\n') n++;
        last = c;
    }
    fclose(f);
    return n + (last != '\n');
}

/* Appends ", " (unless at the start) and a formatted piece to buf. */
static void add_piece(char *buf, size_t cap, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void add_piece(char *buf, size_t cap, const char *fmt, ...) {
    size_t n = strlen(buf);
    if (n && n + 2 < cap) { memcpy(buf + n, ", ", 3); n += 2; }
    va_list ap;
    va_start(ap, fmt);
    if (n < cap) vsnprintf(buf + n, cap - n, fmt, ap);
    va_end(ap);
}

mp_code mp_run_dir_describe(const char *run_dir, const char *root, int *used, char *buf, size_t cap, mp_err *err) {
    buf[0] = '\0';
    *used = 0;
    char path[MP_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/metrics.jsonl", run_dir);
    struct stat st;
    if (stat(path, &st) == 0 && st.st_size > 0)
        add_piece(buf, cap, "%s (%lld lines)", path, (long long)count_lines(path));
    ckpt_root_info ri;
    MP_TRY(ckpt_inspect_root(root, &ri, err));
    if (ri.nsteps == 1) add_piece(buf, cap, "a checkpoint (step %lld) in %s", (long long)ri.first, root);
    if (ri.nsteps > 1)
        add_piece(buf, cap, "%d checkpoints (steps %lld to %lld) in %s", ri.nsteps, (long long)ri.first,
                  (long long)ri.last, root);
    if (ri.npartial) add_piece(buf, cap, "%d unfinished save(s) (*.partial) in %s", ri.npartial, root);
    if (ri.has_latest && !ri.nsteps) add_piece(buf, cap, "%s/latest", root);
    *used = buf[0] != '\0';
    return MP_OK;
}

void mp_aside_name(const char *run_dir, const char *root, char *buf, size_t cap) {
    char base[64] = "abandoned";
    time_t now = time(NULL);
    struct tm tm;
    if (localtime_r(&now, &tm)) strftime(base, sizeof base, "abandoned_%Y%m%d-%H%M%S", &tm);
    for (int k = 1;; k++) {
        if (k == 1) snprintf(buf, cap, "%s", base);
        else snprintf(buf, cap, "%s-%d", base, k);
        char a[MP_PATH_MAX + 128], b[MP_PATH_MAX + 128];
        snprintf(a, sizeof a, "%s/%s", root, buf);
        snprintf(b, sizeof b, "%s/metrics.%s.jsonl", run_dir, buf);
        if (access(a, F_OK) != 0 && access(b, F_OK) != 0) return;
    }
}

/* Copies the lines of in to keep / aside (aside opened on first use, exclusively). */
static mp_code split_lines(FILE *in, FILE *keep, int64_t after, const char *aside_path, FILE **aside, int64_t *moved,
                           mp_err *err) {
    char line[4096];
    while (fgets(line, sizeof line, in)) {
        const char *p = strstr(line, "\"step\": ");
        int go = after < 0 || (p && atoll(p + 8) > after);
        if (go && !*aside && !(*aside = fopen(aside_path, "wx")))
            return mp_err_set(err, MP_EIO, "cannot create %s: %s", aside_path, strerror(errno));
        if (fputs(line, go ? *aside : keep) == EOF)
            return mp_err_set(err, MP_EIO, "writing %s: %s", go ? aside_path : "metrics", strerror(errno));
        if (go) (*moved)++;
    }
    return MP_OK;
}

mp_code mp_metrics_set_aside(const char *path, int64_t after, const char *aside_path, int64_t *moved, mp_err *err) {
    *moved = 0;
    FILE *in = fopen(path, "r");
    if (!in) return MP_OK;
    char *tmp = mp_fs_tmp_name(path);   /* the fs layer's temp-file convention */
    FILE *keep = fopen(tmp, "w"), *aside = NULL;
    if (!keep) {
        fclose(in);
        mp_code rc = mp_err_set(err, MP_EIO, "cannot write %s: %s", tmp, strerror(errno));
        free(tmp);
        return rc;
    }
    mp_code rc = split_lines(in, keep, after, aside_path, &aside, moved, err);
    fclose(in);
    if (aside) {
        mp_err *ae = rc ? NULL : err;
        mp_code a = mp_fs_close_durable(aside, aside_path, ae);
        if (!a) a = mp_fs_fsync_parent(aside_path, ae);   /* the lines are safe aside before path changes */
        if (!rc) rc = a;
    }
    mp_code k = mp_fs_close_durable(keep, tmp, rc ? NULL : err);
    if (!rc) rc = k;
    if (!rc && *moved) {
        rc = mp_fs_rename_durable(tmp, path, NULL, err);
    }
    if (rc || !*moved) unlink(tmp);
    free(tmp);
    return rc;
}

/* ---- the training run's run directory ---- */

/* Rank 0, a fresh run (no --resume*, no --overwrite): refuses (MP_EINPUT) a run directory or checkpoint
 * root that an earlier run used, naming what is there and the ways on. Reads only. */
static mp_code refuse_used_run_dir(train_run *r) {
    char what[1024];
    int used;
    MP_TRY(mp_run_dir_describe(r->f.run_dir, r->ckpt_root, &used, what, sizeof what, &r->err));
    if (!used) return MP_OK;
    return mp_err_set(&r->err, MP_EINPUT,
                      "run directory %s already holds a run: %s. Pass --resume to continue it, or --run-dir%s to "
                      "start elsewhere; --overwrite starts over here, moving the old checkpoints and metrics "
                      "aside (nothing is deleted)",
                      r->f.run_dir, what, r->f.ckpt_dir ? " / --ckpt-dir" : "");
}

/* Sets up the checkpointer under r->ckpt_root (--ckpt-dir, else RUN/checkpoints). Rank 0 takes the
 * root's job lock for the run's life (another job holding it: exit 2 naming it), refuses a fresh run
 * in a used run directory, records itself in the lock, and only then removes the leftovers of
 * interrupted saves (a live job's *.partial is never touched) and, with --keep, of an interrupted
 * retention (ckpt_finish_retention). Collective: the agreed code (the failing rank printed the message). */
mp_agreed mp_train_claim_ckpt_root(train_run *r) {
    const train_flags *f = &r->f;
    if (f->ckpt_dir) snprintf(r->ckpt_root, sizeof r->ckpt_root, "%s", f->ckpt_dir);
    else snprintf(r->ckpt_root, sizeof r->ckpt_root, "%s/checkpoints", f->run_dir);
    mp_checkpointer_init(&r->ck, r->ckpt_root, &r->sopts, f->async_save);
    mp_code local = MP_OK;
    if (r->rt.rank == 0) {
        int removed = 0;
        local = ckpt_lock_acquire(r->ckpt_root, &r->lock, &r->err);
        if (local == MP_EINPUT) {
            size_t n = strlen(r->err.msg);
            snprintf(r->err.msg + n, sizeof r->err.msg - n, ": wait for it to end, or pass another --run-dir%s",
                     f->ckpt_dir ? " / --ckpt-dir" : "");
        }
        if (!local && !f->resume && !f->resume_from && !f->overwrite) local = refuse_used_run_dir(r);
        if (!local) local = ckpt_lock_publish(r->lock, &r->err);
        if (!local) local = ckpt_cleanup_partials(r->ckpt_root, &removed, &r->err);
        if (removed) mp_warn("removed %d unfinished checkpoint(s) (*.partial) under %s", removed, r->ckpt_root);
        if (!local && f->keep > 0) local = ckpt_finish_retention(r->ckpt_root, f->keep, NULL, &r->err);   /* logs each */
    }
    return mp_runtime_agree(&r->rt, local, &r->err);
}

/* Rank 0, resuming or --overwrite: moves aside what lies past the step this run starts from, so that
 * no later save collides with it, no retention removes the wrong branch and no later --resume loads it:
 * the step directories newer than the resumed step (a rewind with --resume-from, or --resume falling
 * back past a damaged or unfinished newest checkpoint; all of them with --overwrite or when --resume
 * found none) into ROOT/abandoned_<time>/, and the metrics lines logged after that step into
 * RUN/metrics.abandoned_<time>.jsonl. Nothing is deleted. */
mp_code mp_train_set_aside_past(train_run *r, const char *metrics) {
    const train_flags *f = &r->f;
    if (!f->resume && !f->resume_from && !f->overwrite) return MP_OK;
    int64_t after = r->resume_dir[0] ? r->rs.step : -1;
    char name[96], apath[MP_PATH_MAX + 128];
    mp_aside_name(f->run_dir, r->ckpt_root, name, sizeof name);
    int moved = 0;
    int64_t lines = 0;
    MP_TRY(ckpt_set_aside(r->ckpt_root, after, name, &moved, &r->err));
    char past[64];
    if (after >= 0) snprintf(past, sizeof past, "after step %lld", (long long)after);
    else snprintf(past, sizeof past, "by the earlier run");
    if (moved)
        mp_warn("%s: moved %d checkpoint director%s saved %s into %s/%s (kept, not deleted)",
                f->overwrite ? "--overwrite" : after >= 0 ? "resuming" : "--resume found nothing to resume", moved,
                moved == 1 ? "y" : "ies", past, r->ckpt_root, name);
    snprintf(apath, sizeof apath, "%s/metrics.%s.jsonl", f->run_dir, name);
    MP_TRY(mp_metrics_set_aside(metrics, after, apath, &lines, &r->err));
    if (lines) mp_info("metrics: moved %lld line(s) logged %s to %s", (long long)lines, past, apath);
    return MP_OK;
}
