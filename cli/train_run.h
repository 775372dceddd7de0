/*
 * cli/train_run.h — the state of one `meshpoint train` run, shared by the files that make up the command:
 * cmd_train.c (the phases in order and the step loop), train_flags.c (flags and config), run_dir.c (the
 * run directory and checkpoint root: lock, refusal of a used one, setting a past branch aside),
 * train_resume.c (--resume, --resume-from, --init-from) and train_metrics.c (metrics.jsonl and the step
 * log). Internal to cli/: not an interface for other commands.
 *
 * The phases' two failure protocols are their return types (cli/runtime.h): a phase returning mp_alike
 * "fails alike", leaving the same message in r->err on every rank (rank 0 prints it); a phase returning
 * mp_agreed is collective and returns the code agreed over the ranks (the failing rank printed it).
 * mp_cmd_train runs each through MP_PHASE_ALIKE or MP_PHASE_AGREED, which the type picks.
 */
#ifndef MP_TRAIN_RUN_H
#define MP_TRAIN_RUN_H

#include <stdio.h>
#include "cli/memplan.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/optim.h"
#include "core/sched.h"
#include "layers/llama_train.h"

/* The loader feeding llama_train_step: micro-step k of the current batch, this rank's slice. */
typedef struct train_fill_ctx {
    mp_loader *loader;
    const mp_batch_split *bs;
    int dp_rank;
} train_fill_ctx;

/* The command line as parsed (mp_train_parse_flags): the flags over the default training config. */
typedef struct train_flags {
    const char *config, *run_dir, *device, *comm, *data_format;
    mp_train_config tc;                  /* the training flags' values, over the default training config */
    int set[MP_TRAIN_NFIELDS];           /* set[i]: the flag of mp_train_config_fields()[i] was given */
    const char *str[MP_TRAIN_NFIELDS];   /* a string flag's value (--train-data), copied into tc once parsed */
    /* checkpoints */
    const char *ckpt_dir, *resume_from, *compress, *on_save_error, *on_nonfinite, *max_memory;
    const char *init_from;     /* --init-from: a new run from this checkpoint's weights */
    const char *ckpt_files;    /* --ckpt-files: rank, node or N (ckpt_files_parse) */
    int64_t ckpt_every, stop_at;
    int keep, resume, async_save, overwrite;
} train_flags;

/* The run: the state the phases share, owned by mp_cmd_train. */
typedef struct train_run {
    train_flags f;
    mp_runtime rt;
    mp_err err;                     /* the message of a failing phase */
    llama_config mc;
    ckpt_save_opts sopts;
    mp_mesh *mesh;                  /* &rt.mesh once built */
    mp_batch_split bs;
    mp_token_file train, val;
    mp_loader loader;
    llama_model *model;
    mp_checkpointer ck;
    char ckpt_root[MP_PATH_MAX];
    ckpt_lock *lock;                /* rank 0: the root's job lock, held for the run's life */
    mp_run_state rs;                /* the resumed state (step 0 when starting fresh) */
    char resume_dir[MP_PATH_MAX];   /* "" when starting fresh */
    char init_dir[MP_PATH_MAX];     /* --init-from, resolved to a step directory ("" without it) */
    size_t max_bytes;               /* --max-memory per rank, 0: the host's available memory bounds the plan */
    mp_memplan plan;                /* this rank's memory plan (printed at start, compared at the end) */
    FILE *metrics;                  /* rank 0 only */
    char metrics_path[MP_PATH_MAX + 32];
    mp_code metrics_rc;             /* rank 0: the first failed write of metrics.jsonl (agreed each step) */
    mp_err metrics_err;
    llama_token_bufs tok;           /* the steps' double host token buffers (the backend's host_alloc);
                                     * evaluation between steps reuses slot 0 */
    /* the step loop */
    mp_lr_schedule sched;
    mp_adamw_hparams hp;
    double tokens_per_step, t_start, last_loss;
    double load_s, init_s;          /* start-up: checkpoint load (resume or --init-from), random init */
    double steps_s, steps_comm_s;   /* time inside optimizer steps, and inside their collectives */
    int64_t steps_tp_bytes, steps_dp_bytes;   /* bytes this rank's step collectives sent */
    int continue_on_error, skip_nonfinite;
    int64_t first_step, skipped;    /* skipped: updates skipped for a non-finite gradient norm */
    train_fill_ctx fc;
} train_run;

/* What one optimizer step hands to its logging. */
typedef struct step_out {
    double lr, loss, norm;
    double step_s;                  /* wall time of the step itself (no checkpoint, no evaluation) */
    int skipped;                    /* the update was skipped (non-finite norm, --on-nonfinite skip) */
} step_out;

/* The run's wall time at clock t: this process's part plus what the resumed checkpoint carried. */
static inline double mp_train_elapsed(const train_run *r, double t) {
    return t - r->t_start + r->rs.elapsed_s;
}

/* ---- cli/train_flags.c ---- */

/* Parses the command line into r->f (the flags over the default training config). With --help/-h, sets
 * *help and prints the help on rank 0. Fails alike on every rank: a bad flag, a positional argument. */
mp_alike mp_train_parse_flags(train_run *r, int argc, char **argv, int *help);

/* Checks the checkpoint flags, loads the config file into r->mc and r->f.tc, applies the flag overrides
 * and validates the result. Local: the config file may be missing on some ranks only (node-local paths),
 * so the caller agrees the code (mp_runtime_agree). */
mp_code mp_train_load_config(train_run *r);

/* ---- cli/run_dir.c ---- */

/* Sets up the checkpointer under r->ckpt_root (--ckpt-dir, else RUN/checkpoints). Rank 0 takes the
 * root's job lock for the run's life (another job holding it: exit 2 naming it), refuses a fresh run
 * in a used run directory, records itself in the lock, and only then removes the leftovers of
 * interrupted saves (a live job's *.partial is never touched). Collective: the agreed code. */
mp_agreed mp_train_claim_ckpt_root(train_run *r);

/* Rank 0, resuming or --overwrite: moves aside what lies past the step this run starts from, so that
 * no later save collides with it, no retention removes the wrong branch and no later --resume loads it:
 * the step directories newer than the resumed step (a rewind with --resume-from, or --resume falling
 * back past a damaged or unfinished newest checkpoint; all of them with --overwrite or when --resume
 * found none) into ROOT/abandoned_<time>/, and the metrics lines logged after that step into
 * RUN/metrics.abandoned_<time>.jsonl. Nothing is deleted. */
mp_code mp_train_set_aside_past(train_run *r, const char *metrics);

/* ---- cli/train_resume.c ---- */

/* Loads the checkpoint rank 0 picked into the model, r->rs and the loader's cursor. Collective when
 * resuming: the agreed code. */
mp_agreed mp_train_resume(train_run *r);

/* --init-from: loads the parameters of the named checkpoint (a step directory, a checkpoint root or a run
 * directory, resolved as --resume-from is; full or model-only, saved by any mesh: the load reshards) into
 * the model, whose moments stay zero, and leaves r->rs at step 0 with the loader at the start: a new run
 * with this run's schedule. A model config that disagrees with --config is refused naming the field.
 * The source goes into every save's metadata "init_from" and the log. Collective: the agreed code. */
mp_agreed mp_train_init_from(train_run *r);

/* Logs, when resuming: that there is nothing to do when the checkpoint is at or past --steps, and every
 * batch setting (--batch, --seq-len, --grad-accum) that differs from the checkpoint's (allowed: it
 * changes only the steps to come). Cannot fail. */
void mp_train_note_resume(const train_run *r);

/* ---- cli/train_metrics.c ---- */

/* Rank 0 creates the run directory, sets aside what lies past this run's starting step
 * (mp_train_set_aside_past) and opens RUN/metrics.jsonl for appending into r->metrics (it never truncates: a
 * fresh run only gets here when the file is missing or empty). Collective: the agreed code. */
mp_agreed mp_train_open_metrics(train_run *r);

/* Logs step `step`: its metrics line, the log line every --log-every steps and at the end, and the
 * validation loss when due (every --eval-every steps and at the end). Collective when evaluating.
 * Fails alike when the evaluation does. */
mp_alike mp_train_log_step(train_run *r, int64_t step, const step_out *s);

/* Closes metrics.jsonl at the end of the run (rank 0), keeping a failure of the close as a failed
 * write. Collective: the agreed code. */
mp_agreed mp_train_close_metrics(train_run *r);

#endif
