/*
 * cli/cmd_train.c — `meshpoint train`: the training loop, the one place that ties model, optimizer,
 * data and checkpoints together (the checkpoint and run-directory rules live in cli/train_ckpt.c).
 *
 * A step: zero the shard gradients; for each of grad_accum micro-steps, every dp rank takes its slice of
 * the global batch (mp_batch_split: a sequence's rank depends only on its global index), runs forward
 * and backward with scale 1/(B*T); finish the gradients (SP all-reduce), take the global gradient norm,
 * clip, and run AdamW at the scheduled learning rate. The loss reported is the global mean, summed in
 * double over dp. Logs go to stderr (rank 0) and, one JSON object per step, to RUN/metrics.jsonl.
 *
 * A non-finite gradient norm (global, so every rank decides alike) is never applied: by default the run
 * stops with exit 1 naming the step (an async save in flight is committed first, so the newest checkpoint
 * is the last good one); --on-nonfinite skip skips the update, logs it and counts it in the metrics.
 * time_s in the metrics is the run's wall time, continued across resumes (saved as "elapsed_s").
 *
 * --init-from CKPT is a fresh run whose initial weights are loaded (resharded) from a checkpoint instead
 * of drawn from the seed (init_from_run); everything else is as for a fresh run.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/memplan.h"
#include "cli/progress.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "core/sched.h"
#include "layers/llama_train.h"

/* The loader feeding llama_train_step: micro-step k of the current batch, this rank's slice. */
typedef struct train_fill_ctx {
    mp_loader *loader;
    const mp_batch_split *bs;
    int dp_rank;
} train_fill_ctx;

static void train_fill(void *ctx, int k, int32_t *in, int32_t *tgt) {
    train_fill_ctx *f = ctx;
    mp_loader_get(f->loader, mp_batch_first(f->bs, k, f->dp_rank), f->bs->micro, in, tgt);
}

typedef struct train_flags {
    const char *config, *run_dir, *device, *data_format;
    mp_train_config tc;                  /* the training flags' values, over the default training config */
    int set[MP_TRAIN_NFIELDS];           /* set[i]: the flag of mp_train_config_fields()[i] was given */
    const char *str[MP_TRAIN_NFIELDS];   /* a string flag's value (--train-data), copied into tc once parsed */
    /* checkpoints */
    const char *ckpt_dir, *resume_from, *compress, *on_save_error, *on_nonfinite, *max_memory;
    const char *init_from;     /* --init-from: a new run from this checkpoint's weights */
    int64_t ckpt_every, stop_at;
    int keep, resume, async_save, overwrite;
} train_flags;

/* Appends to out the flags of the training fields (mp_train_config_fields, in its order) whose kind is a
 * string (strings = 1: the data files) or is not (0: the schedule, the optimizer, the mesh), each filling
 * its field of f->tc (a string flag: f->str) and marking f->set; returns how many. A seed goes through
 * an int64 flag, so a negative one reaches mp_train_config_validate, which refuses it naming --seed. */
static int train_field_flags(train_flags *f, int strings, mp_arg *out) {
    static const mp_arg_kind arg_kind[] = {
        [MP_FIELD_INT] = MP_ARG_INT, [MP_FIELD_I64] = MP_ARG_I64, [MP_FIELD_U64] = MP_ARG_I64,
        [MP_FIELD_DBL] = MP_ARG_DOUBLE, [MP_FIELD_BOOL] = MP_ARG_SWITCH, [MP_FIELD_STR] = MP_ARG_STRING,
        [MP_FIELD_TRI] = MP_ARG_SWITCH};
    const mp_field *fs = mp_train_config_fields();
    int n = 0;
    for (int i = 0; i < MP_TRAIN_NFIELDS; i++) {
        if (!fs[i].flag || (fs[i].kind == MP_FIELD_STR) != strings) continue;
        void *ptr = fs[i].kind == MP_FIELD_STR ? (void *)&f->str[i] : (void *)((char *)&f->tc + fs[i].off);
        out[n++] = (mp_arg){fs[i].flag, arg_kind[fs[i].kind], ptr, fs[i].metavar, fs[i].help, .set = &f->set[i]};
    }
    return n;
}

/* Copies the {0}-terminated flags of src to dst[n ...]; returns the new count. */
static int append_flags(mp_arg *dst, int n, const mp_arg *src) {
    for (; src->name; src++) dst[n++] = *src;
    return n;
}

/* Flag values override the config file's "train" object; f->set tells which were given. */
static void apply_overrides(const train_flags *f, const mp_train_config *cli, mp_train_config *t) {
    const mp_field *fs = mp_train_config_fields();
    for (int i = 0; i < MP_TRAIN_NFIELDS; i++)
        if (f->set[i]) mp_field_copy(&fs[i], t, cli);
}

static const char *train_about =
    "Trains a Llama model. The config is a JSON file with Hugging Face config.json fields at the top level\n"
    "and an optional \"train\" object (steps, batch_size, seq_len, lr, ...); flags override it, and the\n"
    "defaults shown apply where the file sets nothing. Run under `mpirun -np N` for a dp x tp mesh\n"
    "(N = tp * dp). --init-from CKPT starts a new run from a checkpoint's weights (fine-tuning).";

/* ---- preemption: SIGTERM/SIGINT ask for a checkpoint at the next step boundary ---- */

static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

/* Every rank must agree to stop at the same step (a signal may reach ranks at different moments):
 * one all-reduce of the flag over the world per step. */
static int stop_requested(mp_mesh *mesh) {
    float flag = g_stop_signal ? 1.0f : 0.0f;
    mesh->world_comm->all_reduce(mesh->world_comm, &flag, 1, MP_F32, 1);
    return flag > 0;
}

/* Parses --compress: "none", "zstd" or "zstd:LEVEL" (1..22). */
static mp_code parse_compress(const char *s, int *level, mp_err *err) {
    if (!strcmp(s, "none")) { *level = 0; return MP_OK; }
    if (!strcmp(s, "zstd")) { *level = 3; return MP_OK; }
    if (!strncmp(s, "zstd:", 5)) {
        char *end;
        long v = strtol(s + 5, &end, 10);
        if (*end == '\0' && end != s + 5 && v >= 1 && v <= 22) { *level = (int)v; return MP_OK; }
    }
    return mp_err_set(err, MP_EINPUT, "--compress: expected none, zstd or zstd:LEVEL (1..22), got \"%s\"", s);
}

/* ---- the run: the state the phases below share, owned by mp_cmd_train ---- */

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
    int32_t *in, *tgt;              /* host token buffers, micro x seq_len (the backend's host_alloc) */
    size_t tok_bytes;
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

/* How the loop goes on after a step's checkpoint handling. */
typedef enum step_flow {
    STEP_NEXT,   /* the next step */
    STEP_STOP,   /* stopped (signal or --stop-at) with a checkpoint saved: exit 0 */
    STEP_FAIL    /* r->err set, found alike by every rank: `fail` */
} step_flow;

/* Parses the command line into r->f (the flags over the default training config). With --help/-h, sets
 * *help and prints the help on rank 0. Fails alike on every rank (`fail`): a bad flag, a positional
 * argument. */
static mp_code parse_flags(train_run *r, int argc, char **argv, int *help) {
    train_flags f = {.run_dir = "run", .device = "cpu", .data_format = "llmc", .compress = "none",
                     .on_save_error = "stop", .on_nonfinite = "stop"};
    mp_train_config_default(&f.tc);   /* sp -1: auto (--help shows the defaults actually used) */
    const mp_field *fs = mp_train_config_fields();
    for (int i = 0; i < MP_TRAIN_NFIELDS; i++) f.str[i] = "";
    static const char *const formats[] = {"llmc", "u16", "u32", NULL};
    static const char *const on_err[] = {"stop", "continue", NULL};
    static const char *const on_nf[] = {"stop", "skip", NULL};
    const mp_arg run_flags[] = {
        {"config", MP_ARG_STRING, &f.config, "FILE", "model + training config (JSON, HF field names)"},
        {"run-dir", MP_ARG_STRING, &f.run_dir, "DIR", "run directory (metrics.jsonl, checkpoints/)"},
        {0}};
    const mp_arg format_flag[] = {
        {"data-format", MP_ARG_STRING, &f.data_format, "FMT",
         "token file format (llmc: llm.c files, uint16 GPT-2 or uint32 Llama 3 by their magic)", formats},
        {0}};
    const mp_arg job_flags[] = {
        {"device", MP_ARG_STRING, &f.device, "DEV", MP_RUNTIME_DEVICE_HELP, mp_runtime_devices},
        {"ckpt-dir", MP_ARG_STRING, &f.ckpt_dir, "DIR", "checkpoint directory", .dflt = "RUN/checkpoints"},
        {"ckpt-every", MP_ARG_I64, &f.ckpt_every, "N", "save a checkpoint every N steps and at the end (0: never)"},
        {"keep", MP_ARG_INT, &f.keep, "K", "keep only the newest K checkpoints (0: all)"},
        {"resume", MP_ARG_SWITCH, &f.resume, NULL, "resume from the newest complete checkpoint in --ckpt-dir"},
        {"resume-from", MP_ARG_STRING, &f.resume_from, "DIR", "resume from this checkpoint directory"},
        {"init-from", MP_ARG_STRING, &f.init_from, "CKPT",
         "start a new run (step 0, fresh optimizer, schedule and data cursor) from the weights of this checkpoint "
         "(full or model-only, any mesh; a step directory, checkpoint root or run directory)"},
        {"overwrite", MP_ARG_SWITCH, &f.overwrite, NULL,
         "start over in a used run directory: its checkpoints and metrics are moved aside, never deleted"},
        {"compress", MP_ARG_STRING, &f.compress, "C", "checkpoint compression: none, zstd or zstd:LEVEL"},
        {"stop-at", MP_ARG_I64, &f.stop_at, "STEP", "stop after this step with a checkpoint, as on SIGTERM (0: off)"},
        {"async-save", MP_ARG_SWITCH, &f.async_save, NULL, "write checkpoints on a background thread"},
        {"on-save-error", MP_ARG_STRING, &f.on_save_error, "WHAT", "when a save fails: stop (exit 1) or continue", on_err},
        {"on-nonfinite", MP_ARG_STRING, &f.on_nonfinite, "WHAT",
         "when the gradient norm is NaN/inf: stop (exit 1, no update) or skip the update", on_nf},
        {"max-memory", MP_ARG_STRING, &f.max_memory, "SIZE",
         "memory bound per rank for the plan checked at start (e.g. 8G), replacing the measured one",
         .dflt = "what the host and ulimit allow"},
        {0}};
    /* --help's order: the run, the data files, their format, the training fields, the job */
    mp_arg flags[sizeof run_flags / sizeof *run_flags + sizeof format_flag / sizeof *format_flag +
                 sizeof job_flags / sizeof *job_flags + MP_TRAIN_NFIELDS];
    int n = append_flags(flags, 0, run_flags);
    n += train_field_flags(&f, 1, flags + n);
    n = append_flags(flags, n, format_flag);
    n += train_field_flags(&f, 0, flags + n);
    n = append_flags(flags, n, job_flags);
    flags[n] = (mp_arg){0};
    int npos = 0;
    mp_code rc = mp_args_parse(flags, argc, argv, &npos, help, &r->err);
    for (int i = 0; i < MP_TRAIN_NFIELDS; i++)
        if (f.set[i] && fs[i].kind == MP_FIELD_STR)
            snprintf((char *)&f.tc + fs[i].off, MP_PATH_MAX, "%s", f.str[i]);
    r->f = f;
    if (rc) return rc;
    if (*help) {
        if (r->rt.rank == 0) mp_args_help(stdout, "meshpoint train --config FILE [options]", train_about, flags);
        return MP_OK;
    }
    if (npos) return mp_err_set(&r->err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]);
    return MP_OK;
}

/* Checks the checkpoint flags, loads the config file into r->mc and r->f.tc, applies the flag overrides
 * and validates the result. Fails alike on every rank (`fail`). */
static mp_code load_config(train_run *r) {
    train_flags *f = &r->f;
    mp_train_config *c = &f->tc;
    mp_err *err = &r->err;
    mp_code rc;
    if (!f->config) return mp_err_set(err, MP_EINPUT, "--config FILE is required");
    if (f->ckpt_every < 0) return mp_err_set(err, MP_EINPUT, "--ckpt-every must be >= 0");
    if (f->keep < 0) return mp_err_set(err, MP_EINPUT, "--keep must be >= 0");
    if (f->stop_at < 0) return mp_err_set(err, MP_EINPUT, "--stop-at must be >= 0 (0: off), got %lld", (long long)f->stop_at);
    if (f->init_from && (f->resume || f->resume_from))
        return mp_err_set(err, MP_EINPUT,
                          "--init-from starts a new run from a checkpoint's weights; it cannot be combined with %s "
                          "(which continues a run, optimizer and data position included)",
                          f->resume_from ? "--resume-from" : "--resume");
    if (f->overwrite && (f->resume || f->resume_from))
        return mp_err_set(err, MP_EINPUT, "--overwrite starts the run over; it cannot be combined with %s",
                          f->resume_from ? "--resume-from" : "--resume");
    if (f->max_memory && (rc = mp_args_parse_size(f->max_memory, "--max-memory", 1, &r->max_bytes, err))) return rc;
    r->sopts = (ckpt_save_opts){.keep = f->keep};
    if ((rc = parse_compress(f->compress, &r->sopts.zstd_level, err))) return rc;
    mp_train_config cli = *c;
    llama_config_default(&r->mc);
    mp_train_config_default(c);
    if ((rc = llama_config_load(f->config, &r->mc, c, err))) return rc;
    apply_overrides(f, &cli, c);
    if ((rc = mp_train_config_validate(c, err))) { mp_err_wrap(err, "training options"); return rc; }
    if ((rc = llama_config_validate_pair(&r->mc, c, err))) return rc;
    if (!c->train_data[0])
        return mp_err_set(err, MP_EINPUT, "no training data: pass --train-data FILE or set train.train_data");
    return MP_OK;
}

/* Builds the mesh (fixing c->dp) and the batch split. Fails alike on every rank (`fail`). */
static mp_code setup_mesh(train_run *r) {
    mp_train_config *c = &r->f.tc;
    MP_TRY(mp_runtime_mesh(&r->rt, c->tp, c->dp, r->f.device, &r->err));
    r->mesh = &r->rt.mesh;
    c->dp = r->mesh->dp;
    return mp_batch_split_init(&r->bs, c->batch_size, c->grad_accum, r->mesh->dp, &r->err);
}

/* Prints the memory plan and refuses (MP_EINPUT) one that does not fit, before the data and the model
 * allocate anything large. Collective: returns the agreed code (nonzero: `fail_agreed`). */
static mp_code plan_memory(train_run *r) {
    mp_memplan *plan = &r->plan;
    llama_options o = mp_runtime_model_options(&r->rt, &r->f.tc, r->bs.micro);
    int staging = r->f.async_save || !r->rt.be->host_memory;   /* see mp_checkpointer_save */
    return mp_memplan_check(&r->rt, &r->mc, &o, staging, r->max_bytes, plan, &r->err);
}

/* Opens the token files and the training loader, and checks that the validation file holds a batch.
 * A file may fail to open on some ranks only (node-local paths): collective, returns the agreed code
 * (nonzero: `fail_agreed`). */
static mp_code open_data(train_run *r) {
    mp_train_config *c = &r->f.tc;
    mp_err *err = &r->err;
    mp_data_format fmt = (mp_data_format)mp_data_format_parse(r->f.data_format);
    mp_code rc = mp_token_file_open(&r->train, c->train_data, fmt, r->mc.vocab_size, err);
    if (!rc && c->val_data[0]) rc = mp_token_file_open(&r->val, c->val_data, fmt, r->mc.vocab_size, err);
    if (!rc) rc = mp_loader_init(&r->loader, &r->train, c->batch_size, c->seq_len, err);
    if (!rc && c->val_data[0]) {
        mp_loader probe;
        rc = mp_loader_init(&probe, &r->val, c->batch_size, c->seq_len, err);
    }
    return mp_runtime_agree(&r->rt, rc, err);
}

/* Builds the model with its initial weights (with --init-from, init_from_run loads them instead).
 * Fails alike on every rank (`fail`). */
static mp_code build_model(train_run *r) {
    MP_TRY(mp_runtime_model(&r->rt, &r->mc, &r->f.tc, r->bs.micro, &r->model, &r->err));
    return MP_OK;
}

/* A fresh run (nothing resumed, no --init-from) gets the seeded random initialisation; a resumed or
 * initialised-from run does not: its load wrote every parameter (and, resuming, every moment), so the
 * init would only be overwritten (issue 11: it was ~20% of a resume's start-up). Called after
 * resume_run and init_from_run; records its time for the start-up log. Local. */
static void init_fresh_weights(train_run *r) {
    if (r->resume_dir[0] || r->f.init_from) return;
    double t0 = mp_time_s();
    llama_init_weights(r->model, r->f.tc.seed);
    r->init_s = mp_time_s() - t0;
}

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
 * interrupted saves (a live job's *.partial is never touched). Collective. Returns the agreed code:
 * nonzero means `fail_agreed` (the failing rank printed the message). */
static mp_code claim_ckpt_root(train_run *r) {
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
    }
    return mp_runtime_agree(&r->rt, local, &r->err);
}

/* Rank 0 picks the checkpoint to resume from (--resume-from, or for --resume the newest complete one
 * under the root: none starts from step 0) and broadcasts its directory: ranks never decide alone, so
 * file systems that look different from different nodes cannot split the job. Collective. Returns the
 * agreed code. */
static mp_code pick_resume_dir(train_run *r) {
    mp_code local = MP_OK;
    if (r->rt.rank == 0 && r->f.resume_from) {
        snprintf(r->resume_dir, sizeof r->resume_dir, "%s", r->f.resume_from);
    } else if (r->rt.rank == 0 && r->f.resume) {
        mp_err miss;
        local = ckpt_find_latest(r->ckpt_root, r->resume_dir, sizeof r->resume_dir, NULL, &miss);
        if (local == MP_EINPUT) {
            mp_warn("--resume: no complete checkpoint under %s (%s): starting from step 0", r->ckpt_root, miss.msg);
            r->resume_dir[0] = '\0';
            local = MP_OK;
        } else if (local) {
            r->err = miss;
            mp_err_wrap(&r->err, "--resume");
        }
    }
    mp_code agreed = mp_runtime_agree(&r->rt, local, &r->err);
    if (agreed) return agreed;
    r->mesh->world_comm->broadcast(r->mesh->world_comm, r->resume_dir, sizeof r->resume_dir, 0);
    return MP_OK;
}

/* Loads the checkpoint rank 0 picked into the model, r->rs and the loader's cursor. Collective when
 * resuming. Returns the agreed code: nonzero means `fail_agreed`. */
static mp_code resume_run(train_run *r) {
    mp_code agreed = pick_resume_dir(r);
    if (agreed || !r->resume_dir[0]) return agreed;
    /* --resume-from names a checkpoint the way `ckpt` does: a step directory, a checkpoint root or a run
     * directory (its newest complete checkpoint); rank 0 decides, like pick_resume_dir */
    if (r->f.resume_from && (agreed = mp_runtime_resolve_ckpt(&r->rt, NULL, r->f.resume_from, r->resume_dir,
                                                                sizeof r->resume_dir, &r->err)))
        return agreed;
    /* a damaged box may fail only the ranks that read it: agree before anyone trains */
    double t0 = mp_time_s();
    mp_code local = mp_checkpoint_load(r->model, r->resume_dir, &r->mc, 0, &r->rs, &r->err);
    r->load_s = mp_time_s() - t0;
    if (local) mp_err_wrap(&r->err, "resuming");
    else if ((local = mp_loader_set_cursor(&r->loader, r->rs.cursor, &r->err)))
        mp_err_wrap(&r->err, "resuming from %s", r->resume_dir);
    agreed = mp_runtime_agree(&r->rt, local, &r->err);
    if (agreed) return agreed;
    mp_checkpoint_log_io(r->mesh, "resumed from", r->resume_dir, &r->rs);
    /* a run started with --init-from keeps recording where its weights came from */
    snprintf(r->ck.init_from, sizeof r->ck.init_from, "%s", r->rs.init_from);
    return MP_OK;
}

/* --init-from: loads the parameters of the named checkpoint (a step directory, a checkpoint root or a run
 * directory, resolved as --resume-from is; full or model-only, saved by any mesh: the load reshards) into
 * the model, whose moments stay zero, and leaves r->rs at step 0 with the loader at the start: a new run
 * with this run's schedule. A model config that disagrees with --config is refused naming the field.
 * The source goes into every save's metadata "init_from" and the log. Collective. Returns the agreed code
 * (nonzero: `fail_agreed`). */
static mp_code init_from_run(train_run *r) {
    if (!r->f.init_from) return MP_OK;
    /* rank 0 resolves the name (the flag named in a message) and broadcasts it */
    mp_code agreed = mp_runtime_resolve_ckpt(&r->rt, "--init-from", r->f.init_from, r->init_dir, sizeof r->init_dir,
                                             &r->err);
    if (agreed) return agreed;
    mp_run_state src;
    memset(&src, 0, sizeof src);
    /* a damaged box may fail only the ranks that read it: agree before anyone trains */
    double t0 = mp_time_s();
    mp_code local = mp_checkpoint_load(r->model, r->init_dir, &r->mc, MP_LOAD_WEIGHTS, &src, &r->err);
    r->load_s = mp_time_s() - t0;
    if (local) mp_err_wrap(&r->err, "--init-from");
    if ((agreed = mp_runtime_agree(&r->rt, local, &r->err))) return agreed;
    mp_checkpoint_log_io(r->mesh, "initialised from", r->init_dir, &src);
    char abs[PATH_MAX];
    const char *dir = realpath(r->init_dir, abs) ? abs : r->init_dir;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "checkpoint", dir);
    cJSON_AddNumberToObject(o, "step", (double)src.step);
    char *text = cJSON_PrintUnformatted(o);   /* NULL only when out of memory: no record, the run goes on */
    snprintf(r->ck.init_from, sizeof r->ck.init_from, "%s",
             text && strlen(text) < sizeof r->ck.init_from ? text : "");
    free(text);
    cJSON_Delete(o);
    mp_info("a new run from the weights of %s (its step %lld): step 0, fresh optimizer moments, schedule and "
            "data cursor", dir, (long long)src.step);
    return MP_OK;
}

/* Rank 0, resuming or --overwrite: moves aside what lies past the step this run starts from, so that
 * no later save collides with it, no retention removes the wrong branch and no later --resume loads it:
 * the step directories newer than the resumed step (a rewind with --resume-from, or --resume falling
 * back past a damaged or unfinished newest checkpoint; all of them with --overwrite or when --resume
 * found none) into ROOT/abandoned_<time>/, and the metrics lines logged after that step into
 * RUN/metrics.abandoned_<time>.jsonl. Nothing is deleted. */
static mp_code set_aside_past(train_run *r, const char *metrics) {
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

/* Logs, when resuming: that there is nothing to do when the checkpoint is at or past --steps, and every
 * batch setting (--batch, --seq-len, --grad-accum) that differs from the checkpoint's (allowed: it
 * changes only the steps to come). Cannot fail. */
static void note_resume(const train_run *r) {
    const mp_train_config *c = &r->f.tc;
    const mp_run_state *st = &r->rs;
    if (!r->resume_dir[0]) return;
    if (st->step >= c->steps)
        mp_info("nothing to do: already at step %lld of %lld (resumed from %s); pass a larger --steps to train on",
                (long long)st->step, (long long)c->steps, r->resume_dir);
    char what[256] = "";
    size_t n = 0;
#define CHANGED(flag, saved, now)                                                                            \
    if ((saved) && (saved) != (now) && n < sizeof what)                                                     \
        n += (size_t)snprintf(what + n, sizeof what - n, "%s" flag " %d (was %d)", n ? ", " : "", now, saved)
    CHANGED("--batch", st->batch_size, c->batch_size);
    CHANGED("--seq-len", st->seq_len, c->seq_len);
    CHANGED("--grad-accum", st->grad_accum, c->grad_accum);
#undef CHANGED
    if (what[0])
        mp_info("resuming with a changed batch: %s in the checkpoint at step %lld; this changes only the steps "
                "from %lld on", what, (long long)st->step, (long long)st->step + 1);
}

/* Rank 0 creates the run directory, sets aside what lies past this run's starting step
 * (set_aside_past) and opens RUN/metrics.jsonl for appending into r->metrics (it never truncates: a
 * fresh run only gets here when the file is missing or empty). Collective. Returns the agreed code:
 * nonzero means `fail_agreed`. */
static mp_code open_metrics(train_run *r) {
    mp_code local = MP_OK;
    if (r->rt.rank == 0) {
        char *path = r->metrics_path;
        snprintf(path, sizeof r->metrics_path, "%s/metrics.jsonl", r->f.run_dir);
        local = mp_fs_mkdirs(r->f.run_dir, &r->err);
        if (!local) local = set_aside_past(r, path);
        if (!local && !(r->metrics = fopen(path, "a")))
            local = mp_err_set(&r->err, MP_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    return mp_runtime_agree(&r->rt, local, &r->err);
}

/* Gets the step loop ready: the token buffers, the "model: ..." line, the stop-signal handlers, the
 * schedule and optimizer settings, the clock. Cannot fail. */
static void prepare_loop(train_run *r) {
    mp_train_config *c = &r->f.tc;
    const mp_mesh *mesh = r->mesh;
    /* the batch's host buffers: pinned on a GPU, so each upload runs at full speed */
    mp_backend *be = r->rt.be;
    r->tok_bytes = (size_t)r->bs.micro * c->seq_len * sizeof(int32_t);
    r->in = be->host_alloc(be, r->tok_bytes, MP_MEM_OTHER);
    r->tgt = be->host_alloc(be, r->tok_bytes, MP_MEM_OTHER);
    mp_info("model: %lld parameters, %d layers, hidden %d; mesh dp %d x tp %d%s; batch %d x %d tokens "
            "(micro %d x accum %d per rank); CPU kernels %s",
            (long long)llama_config_num_params(&r->mc), r->mc.num_hidden_layers, r->mc.hidden_size, mesh->dp, mesh->tp,
            mesh->tp > 1 ? (c->sp < 0 || c->sp ? ", SP" : ", no SP") : "", c->batch_size, c->seq_len, r->bs.micro,
            r->bs.grad_accum, mp_cpu_isa());
    signal(SIGTERM, on_stop_signal);
    signal(SIGINT, on_stop_signal);
    r->sched = (mp_lr_schedule){c->lr, c->min_lr, c->warmup_steps,
                                c->decay_steps ? c->decay_steps : c->steps - c->warmup_steps};
    r->hp = (mp_adamw_hparams){c->beta1, c->beta2, c->adam_eps, c->weight_decay};
    r->tokens_per_step = (double)c->batch_size * c->seq_len;
    r->t_start = mp_time_s();
    r->last_loss = NAN;
    r->continue_on_error = !strcmp(r->f.on_save_error, "continue");
    r->skip_nonfinite = !strcmp(r->f.on_nonfinite, "skip");
    r->first_step = r->rs.step;
    r->fc = (train_fill_ctx){&r->loader, &r->bs, r->mesh->dp_rank};
    /* start-up against the load it contains (issue 11: a resume should cost little more than its load) */
    if (r->resume_dir[0] || r->f.init_from)
        mp_info("startup: %.2f s from process start to the first step (checkpoint load %.2f s, no random init)",
                r->t_start - r->rt.t_start, r->load_s);
    else
        mp_info("startup: %.2f s from process start to the first step (random init %.2f s)",
                r->t_start - r->rt.t_start, r->init_s);
}

/* A fresh 0-step run with --ckpt-every saves its initial state as step 0 ("at the end" of no steps:
 * what `meshpoint init` writes offline). Collective when it saves. Fails alike (`fail`). */
static mp_code save_initial_state(train_run *r) {
    if (!(r->f.tc.steps == 0 && !r->resume_dir[0] && r->f.ckpt_every)) return MP_OK;
    mp_run_state now = {0, r->loader.cur, 0, 0};
    ckpt_stats cs;
    mp_code rc;
    if ((rc = mp_checkpointer_save(&r->ck, r->model, &r->mc, &r->f.tc, &now, &cs, &r->err)) ||
        (rc = mp_checkpointer_wait(&r->ck, NULL, &r->err))) {
        mp_err_wrap(&r->err, "saving the initial state (step 0)");
        return rc;
    }
    mp_info("checkpoint step 0 (the initial state) saved under %s", r->ckpt_root);
    return MP_OK;
}

/* Step `step` (0-based) had a non-finite gradient norm, and llama_train_step applied no update. With
 * --on-nonfinite skip: counts and logs it (MP_OK). Else waits for a save in flight (the last good
 * checkpoint commits) and fails naming the step. Collective; alike on every rank (the norm is global). */
static mp_code nonfinite_step(train_run *r, int64_t step, step_out *out) {
    if (r->skip_nonfinite) {
        out->skipped = 1;
        r->skipped++;
        mp_warn("step %lld: gradient norm is %g: update skipped (%lld skipped so far, --on-nonfinite skip)",
                (long long)step + 1, out->norm, (long long)r->skipped);
        return MP_OK;
    }
    mp_code rc = mp_checkpointer_wait(&r->ck, NULL, &r->err);
    if (rc) return rc;
    return mp_err_set(&r->err, MP_ECHECK,
                      "gradient norm is %g at step %lld: not applied, training stopped (the newest checkpoint is "
                      "the last good one; --on-nonfinite skip skips such updates)",
                      out->norm, (long long)step + 1);
}

/* Seconds this rank has spent in collectives of the mesh's communicators so far. */
static double step_comm_seconds(const mp_mesh *mesh) {
    return mp_comm_total_seconds(mesh->tp_comm) + mp_comm_total_seconds(mesh->dp_comm) +
           mp_comm_total_seconds(mesh->world_comm);
}

/* Runs optimizer step `step` (0-based) and advances the loader; *out gets its lr, loss and gradient
 * norm. Collective. A non-finite norm: nonfinite_step. Fails alike (`fail`) when the loss is not finite
 * (the loss is global). */
static mp_code run_step(train_run *r, int64_t step, step_out *out) {
    const mp_train_config *c = &r->f.tc;
    const mp_mesh *mesh = r->mesh;
    /* the step's own time and collectives: checkpoints and evaluations between steps are not in them */
    double t0 = mp_time_s(), comm0 = step_comm_seconds(mesh);
    int64_t tp0 = mp_comm_total_bytes(mesh->tp_comm), dp0 = mp_comm_total_bytes(mesh->dp_comm);
    out->lr = mp_lr_at(&r->sched, step);
    llama_step_args sa = {r->hp, out->lr, step + 1, c->grad_clip, r->bs.grad_accum, r->tokens_per_step};
    llama_step_result sr;
    llama_train_step(r->model, &sa, train_fill, &r->fc, r->in, r->tgt, &sr);
    mp_loader_advance(&r->loader);
    out->step_s = mp_time_s() - t0;
    r->steps_s += out->step_s;
    r->steps_comm_s += step_comm_seconds(mesh) - comm0;
    r->steps_tp_bytes += mp_comm_total_bytes(mesh->tp_comm) - tp0;
    r->steps_dp_bytes += mp_comm_total_bytes(mesh->dp_comm) - dp0;
    out->loss = sr.loss;
    out->norm = sr.grad_norm;
    out->skipped = 0;
    r->last_loss = out->loss;
    if (!isfinite(out->norm)) return nonfinite_step(r, step, out);
    if (!isfinite(out->loss))
        return mp_err_set(&r->err, MP_ECHECK, "loss is %g at step %lld: training diverged", out->loss,
                          (long long)step + 1);
    return MP_OK;
}

/* The run's wall time at clock t: this process's part plus what the resumed checkpoint carried. */
static double run_elapsed(const train_run *r, double t) {
    return t - r->t_start + r->rs.elapsed_s;
}

/* Rank 0: step `step`'s metrics line (a non-finite norm as null; a skipped update marked and counted). */
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
 * Fails alike (`fail`) when the evaluation does. */
static mp_code log_step(train_run *r, int64_t step, const step_out *s) {
    const mp_train_config *c = &r->f.tc;
    double t = mp_time_s();
    double tok_s = r->tokens_per_step / s->step_s;   /* the step alone: a save before it is not in it */
    if (r->metrics) write_metrics(r, step, s, tok_s, run_elapsed(r, t));
    if (c->log_every && ((step + 1) % c->log_every == 0 || step + 1 == c->steps)) {
        /* wall time of the run (resumes included) and the ETA of the remaining steps at this process's
         * mean step time so far (checkpoint and evaluation time included) */
        char el[32], eta[32];
        double mean = (t - r->t_start) / (double)(step + 1 - r->first_step);
        mp_info("step %5lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s | time %s | ETA %s",
                (long long)step + 1, (long long)c->steps, s->loss, s->lr, s->norm, tok_s,
                mp_progress_duration(el, sizeof el, run_elapsed(r, t)),
                mp_progress_duration(eta, sizeof eta, mean * (double)(c->steps - step - 1)));
    }
    int last = step + 1 == c->steps;
    if (c->val_data[0] && ((c->eval_every && (step + 1) % c->eval_every == 0) || last)) {
        double vl = mp_eval_loss(r->model, &r->val, &r->bs, c->seq_len, c->eval_batches, r->in, r->tgt, &r->err);
        if (isnan(vl)) return r->err.code ? r->err.code : MP_ECHECK;   /* `fail` even with err unset */
        mp_info("step %5lld | val loss %.6f", (long long)step + 1, vl);
        char line[128];
        snprintf(line, sizeof line, "{\"step\": %lld, \"val_loss\": %.9g}\n", (long long)step + 1, vl);
        metrics_put(r, line);
    }
    return MP_OK;
}

/* A save that failed and is not the run's last (r->err holds it): STEP_FAIL, or with --on-save-error
 * continue logged and cleared (STEP_NEXT). */
static step_flow save_failed(train_run *r) {
    if (!r->continue_on_error) return STEP_FAIL;
    mp_error("%s (continuing: --on-save-error continue)", r->err.msg);
    mp_err_clear(&r->err);
    return STEP_NEXT;
}

/* The run's last save (at the end, or on a stop) failed: the checkpoint the run exists to leave is not
 * there, which fails the run in every mode, sync or async, --on-save-error continue or not. */
static step_flow last_save_failed(train_run *r) {
    if (r->continue_on_error)
        mp_err_wrap(&r->err, "the run's last save failed (--on-save-error continue covers earlier saves only)");
    return STEP_FAIL;
}

/* After step `step`: commits a finished async save, agrees on a stop (signal or --stop-at), saves when
 * due (every --ckpt-every steps, at the end) or stopping, and on a stop waits for the save. An earlier
 * save's failure (found by the poll, or by the wait before the next save) and a failed save that is not
 * the run's last go through save_failed; the last save's through last_save_failed. Collective. */
static step_flow checkpoint_step(train_run *r, int64_t step) {
    const mp_train_config *c = &r->f.tc;
    const train_flags *f = &r->f;
    int last = step + 1 == c->steps;
    /* checkpoints: commit a finished async save, then maybe start the next one */
    ckpt_stats cs;
    int64_t committed;
    if (mp_checkpointer_poll(&r->ck, &committed, &cs, &r->err) && save_failed(r) == STEP_FAIL) return STEP_FAIL;
    if (committed >= 0)
        mp_info("checkpoint step %lld committed: stall %.3f s, write %.3f s, commit %.3f s", (long long)committed,
                r->ck.last_stall_s, cs.write_s, cs.commit_s);
    int stop = stop_requested(r->mesh) || (f->stop_at && step + 1 == f->stop_at && !last);
    int due = f->ckpt_every && ((step + 1) % f->ckpt_every == 0 || last);
    if (due || stop) {
        /* a save still in flight ends first: its failure is an earlier save's, not this one's */
        if (mp_checkpointer_wait(&r->ck, NULL, &r->err) && save_failed(r) == STEP_FAIL) return STEP_FAIL;
        mp_run_state now = {step + 1, r->loader.cur, .elapsed_s = run_elapsed(r, mp_time_s())};
        memset(&cs, 0, sizeof cs);
        if (mp_checkpointer_save(&r->ck, r->model, &r->mc, c, &now, &cs, &r->err)) {
            mp_err_wrap(&r->err, "saving a checkpoint at step %lld", (long long)step + 1);
            return last || stop ? last_save_failed(r) : save_failed(r);
        }
        if (f->async_save)
            mp_info("checkpoint step %lld: stall %.3f s (copy to host), writing in the background",
                    (long long)now.step, r->ck.last_stall_s);
        else
            mp_info("checkpoint step %lld saved: %.3f s (write %.3f s, commit %.3f s, %.1f MiB this rank)",
                    (long long)now.step, cs.stall_s, cs.write_s, cs.commit_s, cs.bytes / 1048576.0);
    }
    if (stop) {
        if (mp_checkpointer_wait(&r->ck, NULL, &r->err)) {
            mp_err_wrap(&r->err, "saving a checkpoint at step %lld", (long long)step + 1);
            return last_save_failed(r);
        }
        mp_info("stopped%s after step %lld; checkpoint saved under %s", g_stop_signal ? " by signal" : "",
                (long long)step + 1, r->ckpt_root);
        return STEP_STOP;
    }
    return STEP_NEXT;
}

/* After the last step: waits for a save in flight, then logs the summary (steps, final loss, time; the
 * communication volume on a multi-rank mesh) if this run took any step. Collective. Fails alike
 * (`fail`) when the save does. */
static mp_code finish_run(train_run *r) {
    const mp_train_config *c = &r->f.tc;
    const mp_mesh *mesh = r->mesh;
    mp_code rc = mp_checkpointer_wait(&r->ck, NULL, &r->err);
    if (rc) {
        mp_err_wrap(&r->err, "saving the last checkpoint");
        last_save_failed(r);
        return rc;
    }
    if (c->steps <= r->first_step) return MP_OK;
    double elapsed = mp_time_s() - r->t_start;
    mp_info("done: %lld steps, final train loss %.6f, %.1f s", (long long)c->steps, r->last_loss, elapsed);
    char peak[32], planned[32];   /* the plan against what the allocator saw (checkpoint I/O buffers add a little) */
    mp_info("memory: peak %s (%lld bytes) allocated on rank 0, plan %s", mp_ckpt_human(peak, sizeof peak,
            mp_mem_peak_total()), (long long)mp_mem_peak_total(), mp_ckpt_human(planned, sizeof planned, r->plan.total));
    if (r->skipped)
        mp_warn("%lld update(s) skipped for a non-finite gradient norm (--on-nonfinite skip)", (long long)r->skipped);
    if (mesh->world > 1) {
        /* the steps' own collectives over the steps' own time: checkpoints (their commit exchange, the
         * time they take), evaluations and start-up are in neither (issue 11 item 5) */
        int64_t ran = c->steps - r->first_step;
        mp_info("comm: tp %.3f MiB/step, dp %.3f MiB/step (sent by this rank), %.1f%% of the step time in "
                "collectives",
                r->steps_tp_bytes / 1048576.0 / (double)ran, r->steps_dp_bytes / 1048576.0 / (double)ran,
                r->steps_s > 0 ? 100.0 * r->steps_comm_s / r->steps_s : 0.0);
    }
    return MP_OK;
}

/* Closes metrics.jsonl at the end of the run (rank 0), keeping a failure of the close as a failed
 * write. Collective: returns the agreed code (nonzero: `fail_agreed`). */
static mp_code close_metrics(train_run *r) {
    if (r->metrics) {
        errno = 0;
        if (fclose(r->metrics) && !r->metrics_rc)
            r->metrics_rc = mp_err_set(&r->metrics_err, MP_EIO, "closing %s: %s", r->metrics_path,
                                       errno ? strerror(errno) : "write error");
        r->metrics = NULL;
    }
    return mp_runtime_agree(&r->rt, r->metrics_rc, &r->metrics_err);
}

/* Frees what the run holds (each piece may not have been set up). */
static void release_run(train_run *r) {
    mp_checkpointer_free(&r->ck);
    ckpt_lock_release(r->lock);
    if (r->metrics) fclose(r->metrics);
    if (r->in) r->rt.be->host_free(r->rt.be, r->in, r->tok_bytes, MP_MEM_OTHER);
    if (r->tgt) r->rt.be->host_free(r->rt.be, r->tgt, r->tok_bytes, MP_MEM_OTHER);
    llama_destroy(r->model);
    mp_token_file_close(&r->train);
    mp_token_file_close(&r->val);
}

/* `meshpoint train`. Errors every rank finds alike go to `fail` (rank 0 prints them); errors only some
 * ranks may find are agreed on (mp_runtime_agree: the failing rank prints) and go to `fail_agreed`. */
int mp_cmd_train(int argc, char **argv) {
    train_run run = {0}, *r = &run;
    mp_runtime_start(&r->rt, &argc, &argv);
    mp_err_clear(&r->err);
    mp_checkpointer_init(&r->ck, "", NULL, 0);
    int help = 0, status = 0;
    mp_code agreed;

    /* flags and config; mesh, data, model */
    if (parse_flags(r, argc, argv, &help)) goto fail;
    if (help) goto done;
    /* the config file may be missing on some ranks only (node-local paths): agreed before the mesh */
    if ((agreed = mp_runtime_agree(&r->rt, load_config(r), &r->err))) goto fail_agreed;
    if (setup_mesh(r)) goto fail;
    if ((agreed = plan_memory(r)) || (agreed = open_data(r))) goto fail_agreed;
    if (build_model(r)) goto fail;
    /* checkpoints: the root's lock, leftovers of interrupted saves, resume; then what lies past the
     * resumed step is set aside and the metrics file opened */
    if ((agreed = claim_ckpt_root(r))) goto fail_agreed;
    if ((agreed = resume_run(r)) || (agreed = init_from_run(r))) goto fail_agreed;
    init_fresh_weights(r);
    note_resume(r);
    if ((agreed = open_metrics(r))) goto fail_agreed;
    prepare_loop(r);
    if (save_initial_state(r)) goto fail;
    /* the steps */
    for (int64_t step = r->first_step; step < r->f.tc.steps; step++) {
        step_out s;
        if (run_step(r, step, &s) || log_step(r, step, &s)) goto fail;
        if ((agreed = mp_runtime_agree(&r->rt, r->metrics_rc, &r->metrics_err))) goto fail_agreed;
        step_flow flow = checkpoint_step(r, step);
        if (flow == STEP_FAIL) goto fail;
        if (flow == STEP_STOP) goto done;
    }
    if (finish_run(r)) goto fail;
    if ((agreed = close_metrics(r))) goto fail_agreed;
    goto done;
fail_agreed:
    status = mp_exit_status(agreed);   /* the failing rank printed the message */
    goto done;
fail:
    status = mp_runtime_fail(&r->rt, &r->err);
done:
    release_run(r);
    mp_runtime_end(&r->rt);
    return status;
}
