/*
 * cli/train_metrics.c — a training run's record: RUN/metrics.jsonl (rank 0 appends one JSON object per
 * step and per evaluation, flushed at once; a failed write stops the run, agreed over the ranks, since
 * its record would have a gap) and the step log on stderr (every --log-every steps, with the run's wall
 * time and an ETA). time_s is the run's wall time, continued across resumes.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "cli/progress.h"
#include "cli/train_run.h"
#include "core/fsutil.h"
#include "core/log.h"

/* Rank 0 creates the run directory, sets aside what lies past this run's starting step
 * (mp_train_set_aside_past) and opens RUN/metrics.jsonl for appending into r->metrics (it never truncates: a
 * fresh run only gets here when the file is missing or empty). Collective: the agreed code. */
mp_agreed mp_train_open_metrics(train_run *r) {
    mp_code local = MP_OK;
    if (r->rt.rank == 0) {
        char *path = r->metrics_path;
        snprintf(path, sizeof r->metrics_path, "%s/metrics.jsonl", r->f.run_dir);
        local = mp_fs_mkdirs(r->f.run_dir, &r->err);
        if (!local) local = mp_train_set_aside_past(r, path);
        if (!local && !(r->metrics = fopen(path, "a")))
            local = mp_err_set(&r->err, MP_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return mp_runtime_agree(&r->rt, local, &r->err);
}

/* Appends one line to metrics.jsonl and flushes it. A failed write (disk full, file too large) is kept
 * in r->metrics_rc with its cause, and the file is not written again; the step loop agrees on it. */
static void metrics_put(train_run *r, const char *line) {
    if (!r->metrics || r->metrics_rc) return;
    errno = 0;
    if (fputs(line, r->metrics) < 0 || fflush(r->metrics) || ferror(r->metrics))
        r->metrics_rc = mp_err_set(&r->metrics_err, MP_EIO, "writing %s: %s (the run stops: its record would have "
                                   "a gap; checkpoints committed so far are intact)", r->metrics_path,
                                   errno ? strerror(errno) : "write error");
}

/* Rank 0: step `step`'s metrics line (a non-finite norm as null; a skipped update marked and counted). */
static void write_metrics(train_run *r, int64_t step, const step_out *s, double tok_s, double time_s) {
    char norm[40], skip[96] = "", line[512];
    if (isfinite(s->norm)) snprintf(norm, sizeof norm, "%.17g", s->norm);
    else snprintf(norm, sizeof norm, "null");
    if (s->skipped) snprintf(skip, sizeof skip, "\"skipped\": true, \"nonfinite_skips\": %lld, ", (long long)r->skipped);
    snprintf(line, sizeof line, "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %s, "
             "\"tokens_per_s\": %.1f, %s\"time_s\": %.3f}\n", (long long)step + 1, s->loss, s->lr, norm, tok_s, skip,
             time_s);
    metrics_put(r, line);
}

/* Logs step `step`: its metrics line, the log line every --log-every steps and at the end, and the
 * validation loss when due (every --eval-every steps and at the end). Collective when evaluating.
 * Fails alike when the evaluation does. */
mp_alike mp_train_log_step(train_run *r, int64_t step, const step_out *s) {
    const mp_train_config *c = &r->f.tc;
    double t = mp_time_s();
    double tok_s = r->tokens_per_step / s->step_s;   /* the step alone: a save before it is not in it */
    if (r->metrics) write_metrics(r, step, s, tok_s, mp_train_elapsed(r, t));
    if (c->log_every && ((step + 1) % c->log_every == 0 || step + 1 == c->steps)) {
        /* wall time of the run (resumes included) and the ETA of the remaining steps at this process's
         * mean step time so far (checkpoint and evaluation time included) */
        char el[32], eta[32];
        double mean = (t - r->t_start) / (double)(step + 1 - r->first_step);
        mp_info("step %5lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | time %s | ETA %s",
                (long long)step + 1, (long long)c->steps, s->loss, s->lr, s->norm, tok_s,
                mp_progress_duration(el, sizeof el, mp_train_elapsed(r, t)),
                mp_progress_duration(eta, sizeof eta, mean * (double)(c->steps - step - 1)));
    }
    int last = step + 1 == c->steps;
    if (c->val_data[0] && ((c->eval_every && (step + 1) % c->eval_every == 0) || last)) {
        double vl = mp_eval_loss(r->model, &r->val, &r->bs, c->seq_len, c->eval_batches, r->tok.in[0],
                                 r->tok.tgt[0], &r->err);
        if (isnan(vl)) return mp_alike_of(r->err.code ? r->err.code : MP_ECHECK);   /* a failure even with err unset */
        mp_info("step %5lld | val loss %.6f", (long long)step + 1, vl);
        char line[128];
        snprintf(line, sizeof line, "{\"step\": %lld, \"val_loss\": %.9g}\n", (long long)step + 1, vl);
        metrics_put(r, line);
    }
    return mp_alike_of(MP_OK);
}

/* Closes metrics.jsonl at the end of the run (rank 0), keeping a failure of the close as a failed
 * write. Collective: the agreed code. */
mp_agreed mp_train_close_metrics(train_run *r) {
    if (r->metrics) {
        errno = 0;
        if (fclose(r->metrics) && !r->metrics_rc)
            r->metrics_rc = mp_err_set(&r->metrics_err, MP_EIO, "closing %s: %s", r->metrics_path,
                                       errno ? strerror(errno) : "write error");
        r->metrics = NULL;
    }
    return mp_runtime_agree(&r->rt, r->metrics_rc, &r->metrics_err);
}
