/*
 * cli/train_flags.c — `meshpoint train`'s command line and config: the flag table (the run, the data
 * files, the training fields of mp_train_config_fields() in table order, the job), --help, and the
 * config file with the flags laid over its "train" object. Every check here fails alike on every rank.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/train_run.h"
#include "core/log.h"

static const char *train_about =
    "Trains a Llama-style model (Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3: docs/FAMILIES.md). The config is a JSON file with Hugging Face config.json fields at the top level\n"
    "and an optional \"train\" object (steps, batch_size, seq_len, lr, ...); flags override it, and the\n"
    "defaults shown apply where the file sets nothing. Run under `mpirun -np N` for a dp x tp mesh\n"
    "(N = tp * dp). --init-from CKPT starts a new run from a checkpoint's weights (fine-tuning).";

/* Appends to out the flags of the training fields (mp_train_config_fields, in its order) that are files
 * (strings = 1: the data files, free strings) or are not (0: the schedule, the optimizer, the mesh, the
 * modes: strings with choices), each filling
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
        if (!fs[i].flag || (fs[i].kind == MP_FIELD_STR && !fs[i].choices) != strings) continue;
        void *ptr = fs[i].kind == MP_FIELD_STR ? (void *)&f->str[i] : (void *)((char *)&f->tc + fs[i].off);
        out[n++] = (mp_arg){fs[i].flag, arg_kind[fs[i].kind], ptr, fs[i].metavar, fs[i].help, fs[i].choices,
                            .set = &f->set[i]};
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

/* Parses the command line into r->f (the flags over the default training config). With --help/-h, sets
 * *help and prints the help on rank 0. Fails alike on every rank: a bad flag, a positional argument. */
mp_alike mp_train_parse_flags(train_run *r, int argc, char **argv, int *help) {
    train_flags f = {.run_dir = "run", .device = "cpu", .comm = "auto", .data_format = "llmc", .compress = "none", .ckpt_files = "rank",
                     .on_save_error = "stop", .on_nonfinite = "stop"};
    mp_train_config_default(&f.tc);   /* sp -1: auto (--help shows the defaults actually used) */
    const mp_field *fs = mp_train_config_fields();
    for (int i = 0; i < MP_TRAIN_NFIELDS; i++)   /* a mode's default (--help) is its first choice, as in tc */
        f.str[i] = fs[i].choices ? fs[i].choices[0] : "";
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
        {"comm", MP_ARG_STRING, &f.comm, "C", MP_RUNTIME_COMM_HELP, mp_mesh_comm_names},
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
        {"ckpt-files", MP_ARG_STRING, &f.ckpt_files, "F",
         "rank files of a save: rank (one per rank), node (one per node, written by its lowest rank: fewer "
         "files for a parallel file system) or N (one per N ranks of a node); not with --async-save"},
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
    if (!rc && *help && r->rt.rank == 0) mp_args_help(stdout, "meshpoint train --config FILE [options]", train_about, flags);
    if (!rc && !*help && npos) rc = mp_err_set(&r->err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]);
    return mp_alike_of(rc);
}

/* Checks the checkpoint flags, loads the config file into r->mc and r->f.tc, applies the flag overrides
 * and validates the result. Local (cli/train_run.h): the caller agrees the code. */
mp_code mp_train_load_config(train_run *r) {
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
    r->sopts = (ckpt_save_opts){.keep = f->keep, .view_background = 1};   /* view.h5 off the commit (docs/DESIGN_NOTES.md) */
    if ((rc = parse_compress(f->compress, &r->sopts.zstd_level, err))) return rc;
    if ((rc = ckpt_files_parse(f->ckpt_files, &r->sopts.ranks_per_file, err))) { mp_err_wrap(err, "--ckpt-files"); return rc; }
    if (f->async_save && r->sopts.ranks_per_file != 1)
        return mp_err_set(err, MP_EINPUT, "--ckpt-files %s moves each rank's data to the file's writer during the save: "
                          "it needs synchronous saves, drop --async-save (or use --ckpt-files rank)", f->ckpt_files);
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
