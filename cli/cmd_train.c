/*
 * cli/cmd_train.c — `meshpoint train`: the training loop, the one place that ties model, optimizer,
 * data and (later) checkpoints together.
 *
 * A step: zero the shard gradients; for each of grad_accum micro-steps, every dp rank takes its slice of
 * the global batch (mp_batch_split: a sequence's rank depends only on its global index), runs forward
 * and backward with scale 1/(B*T); finish the gradients (SP all-reduce), take the global gradient norm,
 * clip, and run AdamW at the scheduled learning rate. The loss reported is the global mean, summed in
 * double over dp. Logs go to stderr (rank 0) and, one JSON object per step, to RUN/metrics.jsonl.
 */
#include <errno.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/log.h"
#include "core/sched.h"
#include "layers/llama_train.h"

/* mkdir -p for one or two levels; MP_EIO naming the path. */
static mp_code make_dir(const char *path, mp_err *err) {
    char buf[MP_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) && errno != EEXIST) return mp_err_set(err, MP_EIO, "cannot create %s: %s", buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) && errno != EEXIST) return mp_err_set(err, MP_EIO, "cannot create %s: %s", buf, strerror(errno));
    return MP_OK;
}

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

/* On resume, drops the lines of RUN/metrics.jsonl logged after the checkpoint's step (a crashed run may
 * have logged steps it never saved: they are run again and logged anew). Rewrites through a temporary
 * file and a rename. A missing file is fine. */
static mp_code trim_metrics(const char *path, int64_t step, mp_err *err) {
    FILE *in = fopen(path, "r");
    if (!in) return MP_OK;
    char tmp[MP_PATH_MAX + 40];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) { fclose(in); return mp_err_set(err, MP_EIO, "cannot write %s: %s", tmp, strerror(errno)); }
    char line[4096];
    int64_t dropped = 0;
    while (fgets(line, sizeof line, in)) {
        const char *p = strstr(line, "\"step\": ");
        if (p && atoll(p + 8) > step) { dropped++; continue; }
        fputs(line, out);
    }
    fclose(in);
    if (fclose(out) != 0 || rename(tmp, path) != 0)
        return mp_err_set(err, MP_EIO, "cannot rewrite %s: %s", path, strerror(errno));
    if (dropped) mp_info("metrics: dropped %lld lines logged after step %lld (not in the checkpoint)", (long long)dropped,
                         (long long)step);
    return MP_OK;
}

typedef struct train_flags {
    const char *config, *run_dir, *device, *data_format, *train_data, *val_data;
    mp_train_config tc;
    int set_steps, set_batch, set_seq, set_lr, set_min_lr, set_seed, set_warmup, set_accum, set_tp, set_dp,
        set_sp, set_raf, set_eval_every, set_eval_batches, set_log_every, set_clip, set_wd, set_decay, set_train,
        set_val;
    int sp_flag, raf_flag;
    /* checkpoints */
    const char *ckpt_dir, *resume_from, *compress, *on_save_error;
    int64_t ckpt_every, stop_at;
    int keep, resume, async_save;
} train_flags;

/* Flag values override the config file's "train" object; the `set` markers tell which were given. */
static void apply_overrides(train_flags *f, const mp_train_config *cli, mp_train_config *t) {
#define OV(flag, field) if (f->flag) t->field = cli->field
    OV(set_steps, steps); OV(set_batch, batch_size); OV(set_seq, seq_len); OV(set_lr, lr);
    OV(set_min_lr, min_lr); OV(set_seed, seed); OV(set_warmup, warmup_steps); OV(set_accum, grad_accum);
    OV(set_tp, tp); OV(set_dp, dp); OV(set_eval_every, eval_every); OV(set_eval_batches, eval_batches);
    OV(set_log_every, log_every); OV(set_clip, grad_clip); OV(set_wd, weight_decay); OV(set_decay, decay_steps);
#undef OV
    if (f->set_sp) t->sp = f->sp_flag;
    if (f->set_raf) t->reshard_after_forward = f->raf_flag;
    if (f->set_train) snprintf(t->train_data, sizeof t->train_data, "%s", f->train_data);
    if (f->set_val) snprintf(t->val_data, sizeof t->val_data, "%s", f->val_data);
}

static const char *train_about =
    "Trains a Llama model. The config is a JSON file with Hugging Face config.json fields at the top level\n"
    "and an optional \"train\" object (steps, batch_size, seq_len, lr, ...); flags override it. Run under\n"
    "`mpirun -np N` for a dp x tp mesh (N = tp * dp).";

/* ---- preemption: SIGTERM/SIGINT ask for a checkpoint at the next step boundary ---- */

static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

/* Every rank must agree to stop at the same step (a signal may reach ranks at different moments):
 * one all-reduce of the flag over the world per step. */
static int stop_requested(mp_mesh *mesh) {
    float flag = g_stop_signal ? 1.0f : 0.0f;
    mesh->world_comm->all_reduce(mesh->world_comm, &flag, 1, 1);
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

int mp_cmd_train(int argc, char **argv) {
    train_flags f = {.run_dir = "run", .device = "cpu", .data_format = "llmc", .train_data = "", .val_data = "",
                     .compress = "none", .on_save_error = "stop"};
    mp_train_config_default(&f.tc);
    mp_train_config *c = &f.tc;
    int64_t seed = (int64_t)c->seed;
    static const char *const formats[] = {"llmc", "u16", "u32", NULL};
    static const char *const devices[] = {"cpu", "cuda", NULL};
    static const char *const on_err[] = {"stop", "continue", NULL};
    const mp_arg flags[] = {
        {"config", MP_ARG_STRING, &f.config, "FILE", "model + training config (JSON, HF field names)"},
        {"run-dir", MP_ARG_STRING, &f.run_dir, "DIR", "run directory (metrics.jsonl, checkpoints/)"},
        {"train-data", MP_ARG_STRING, &f.train_data, "FILE", "training tokens", .set = &f.set_train},
        {"val-data", MP_ARG_STRING, &f.val_data, "FILE", "validation tokens (optional)", .set = &f.set_val},
        {"data-format", MP_ARG_STRING, &f.data_format, "FMT", "token file format", formats},
        {"steps", MP_ARG_I64, &c->steps, "N", "optimizer steps (in total, counting resumed ones)", .set = &f.set_steps},
        {"batch", MP_ARG_INT, &c->batch_size, "B", "global batch in sequences", .set = &f.set_batch},
        {"grad-accum", MP_ARG_INT, &c->grad_accum, "K", "micro-steps per step", .set = &f.set_accum},
        {"seq-len", MP_ARG_INT, &c->seq_len, "T", "sequence length", .set = &f.set_seq},
        {"lr", MP_ARG_DOUBLE, &c->lr, "X", "peak learning rate", .set = &f.set_lr},
        {"min-lr", MP_ARG_DOUBLE, &c->min_lr, "X", "final learning rate", .set = &f.set_min_lr},
        {"warmup", MP_ARG_I64, &c->warmup_steps, "N", "linear warmup steps", .set = &f.set_warmup},
        {"decay-steps", MP_ARG_I64, &c->decay_steps, "N", "cosine steps after warmup (0: to the end)", .set = &f.set_decay},
        {"weight-decay", MP_ARG_DOUBLE, &c->weight_decay, "X", "AdamW weight decay", .set = &f.set_wd},
        {"grad-clip", MP_ARG_DOUBLE, &c->grad_clip, "X", "global gradient-norm clip (0: off)", .set = &f.set_clip},
        {"seed", MP_ARG_I64, &seed, "S", "seed of the parameter initialisation", .set = &f.set_seed},
        {"eval-every", MP_ARG_I64, &c->eval_every, "N", "validation every N steps (0: at the end)", .set = &f.set_eval_every},
        {"eval-batches", MP_ARG_INT, &c->eval_batches, "N", "validation batches", .set = &f.set_eval_batches},
        {"log-every", MP_ARG_I64, &c->log_every, "N", "log every N steps", .set = &f.set_log_every},
        {"tp", MP_ARG_INT, &c->tp, "N", "tensor-parallel degree", .set = &f.set_tp},
        {"dp", MP_ARG_INT, &c->dp, "N", "data-parallel degree (0: world / tp)", .set = &f.set_dp},
        {"sp", MP_ARG_SWITCH, &f.sp_flag, NULL, "sequence parallelism (default: on when tp > 1)", .set = &f.set_sp},
        {"reshard-after-forward", MP_ARG_SWITCH, &f.raf_flag, NULL,
         "FSDP: free gathered weights after forward (ZeRO-3; default on)", .set = &f.set_raf},
        {"device", MP_ARG_STRING, &f.device, "DEV", "compute device", devices},
        {"ckpt-dir", MP_ARG_STRING, &f.ckpt_dir, "DIR", "checkpoint directory (default RUN/checkpoints)"},
        {"ckpt-every", MP_ARG_I64, &f.ckpt_every, "N", "save a checkpoint every N steps and at the end (0: never)"},
        {"keep", MP_ARG_INT, &f.keep, "K", "keep only the newest K checkpoints (0: all)"},
        {"resume", MP_ARG_SWITCH, &f.resume, NULL, "resume from the newest complete checkpoint in --ckpt-dir"},
        {"resume-from", MP_ARG_STRING, &f.resume_from, "DIR", "resume from this checkpoint directory"},
        {"compress", MP_ARG_STRING, &f.compress, "C", "checkpoint compression: none, zstd or zstd:LEVEL"},
        {"stop-at", MP_ARG_I64, &f.stop_at, "STEP", "stop after this step with a checkpoint, as on SIGTERM (0: off)"},
        {"async-save", MP_ARG_SWITCH, &f.async_save, NULL, "write checkpoints on a background thread"},
        {"on-save-error", MP_ARG_STRING, &f.on_save_error, "WHAT", "when a save fails: stop (exit 1) or continue", on_err},
        {0}};
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = 0;
    llama_model *model = NULL;
    mp_token_file train = {0}, val = {0};
    int32_t *in = NULL, *tgt = NULL;
    FILE *metrics = NULL;
    mp_checkpointer ck;
    mp_checkpointer_init(&ck, "", NULL, 0);
    char ckpt_root[MP_PATH_MAX];
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint train --config FILE [options]", train_about, flags);
        goto done;
    }
    if (npos) { mp_err_set(&err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]); goto fail; }
    if (!f.config) { mp_err_set(&err, MP_EINPUT, "--config FILE is required"); goto fail; }
    if (f.ckpt_every < 0) { mp_err_set(&err, MP_EINPUT, "--ckpt-every must be >= 0"); goto fail; }
    if (f.keep < 0) { mp_err_set(&err, MP_EINPUT, "--keep must be >= 0"); goto fail; }
    ckpt_save_opts sopts = {.keep = f.keep};
    if (parse_compress(f.compress, &sopts.zstd_level, &err)) goto fail;
    mp_train_config cli = *c;
    cli.seed = (uint64_t)seed;
    mp_model_config mc;
    mp_model_config_default(&mc);
    mp_train_config_default(c);
    if (mp_config_load(f.config, &mc, c, &err)) goto fail;
    apply_overrides(&f, &cli, c);
    if (mp_train_config_validate(c, &err)) { mp_err_wrap(&err, "training options"); goto fail; }
    if (!c->train_data[0]) { mp_err_set(&err, MP_EINPUT, "no training data: pass --train-data FILE or set train.train_data"); goto fail; }
    if (mp_runtime_mesh(&rt, c->tp, c->dp, f.device, &err)) goto fail;
    mp_mesh *mesh = &rt.mesh;
    c->dp = mesh->dp;
    mp_batch_split bs;
    if (mp_batch_split_init(&bs, c->batch_size, c->grad_accum, mesh->dp, &err)) goto fail;
    mp_data_format fmt = (mp_data_format)mp_data_format_parse(f.data_format);
    if (mp_token_file_open(&train, c->train_data, fmt, mc.vocab_size, &err)) goto fail;
    if (c->val_data[0] && mp_token_file_open(&val, c->val_data, fmt, mc.vocab_size, &err)) goto fail;
    mp_loader loader;
    if (mp_loader_init(&loader, &train, c->batch_size, c->seq_len, &err)) goto fail;
    if (c->val_data[0]) {
        mp_loader probe;
        if (mp_loader_init(&probe, &val, c->batch_size, c->seq_len, &err)) goto fail;
    }
    if (mp_runtime_model(&rt, &mc, c, bs.micro, &model, &err)) goto fail;
    llama_init_weights(model, c->seed);

    /* checkpoints: leftovers of interrupted saves go first, then resume */
    if (f.ckpt_dir) snprintf(ckpt_root, sizeof ckpt_root, "%s", f.ckpt_dir);
    else snprintf(ckpt_root, sizeof ckpt_root, "%s/checkpoints", f.run_dir);
    mp_checkpointer_init(&ck, ckpt_root, &sopts, f.async_save);
    mp_code local = MP_OK, agreed;
    if (rt.rank == 0) {
        int removed = 0;
        local = ckpt_cleanup_partials(ckpt_root, &removed, &err);
        if (removed) mp_warn("removed %d unfinished checkpoint(s) (*.partial) under %s", removed, ckpt_root);
    }
    if ((agreed = mp_runtime_agree(&rt, local, &err))) goto fail_agreed;
    mp_run_state rs = {0, {0, 0}, 0, 0};
    char resume_dir[MP_PATH_MAX] = "";
    if (f.resume_from) {
        snprintf(resume_dir, sizeof resume_dir, "%s", f.resume_from);
    } else if (f.resume) {
        mp_err miss;
        if (ckpt_find_latest(ckpt_root, resume_dir, sizeof resume_dir, NULL, &miss)) {
            mp_warn("--resume: no complete checkpoint under %s (%s): starting from step 0", ckpt_root, miss.msg);
            resume_dir[0] = '\0';
        }
    }
    if (resume_dir[0]) {
        /* a damaged box may fail only the ranks that read it: agree before anyone trains */
        local = mp_checkpoint_load(model, resume_dir, &mc, 0, &rs, &err);
        if (local) mp_err_wrap(&err, "resuming");
        else if ((local = mp_loader_set_cursor(&loader, rs.cursor, &err))) mp_err_wrap(&err, "resuming from %s", resume_dir);
        if ((agreed = mp_runtime_agree(&rt, local, &err))) goto fail_agreed;
        mp_checkpoint_log_io(mesh, "resumed from", resume_dir, &rs);
    }

    if (rt.rank == 0) {
        local = make_dir(f.run_dir, &err);
        char path[MP_PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/metrics.jsonl", f.run_dir);
        if (!local && resume_dir[0]) local = trim_metrics(path, rs.step, &err);
        if (!local && !(metrics = fopen(path, resume_dir[0] ? "a" : "w")))
            local = mp_err_set(&err, MP_EIO, "cannot write %s: %s", path, strerror(errno));
    }
    if ((agreed = mp_runtime_agree(&rt, local, &err))) goto fail_agreed;
    size_t tok_bytes = (size_t)bs.micro * c->seq_len * sizeof(int32_t);
    in = mp_xmalloc(tok_bytes);
    tgt = mp_xmalloc(tok_bytes);
    mp_info("model: %lld parameters, %d layers, hidden %d; mesh dp %d x tp %d%s; batch %d x %d tokens "
            "(micro %d x accum %d per rank)",
            (long long)mp_model_num_params(&mc), mc.num_hidden_layers, mc.hidden_size, mesh->dp, mesh->tp,
            mesh->tp > 1 ? (c->sp < 0 || c->sp ? ", SP" : ", no SP") : "", c->batch_size, c->seq_len, bs.micro,
            bs.grad_accum);
    signal(SIGTERM, on_stop_signal);
    signal(SIGINT, on_stop_signal);
    mp_lr_schedule sched = {c->lr, c->min_lr, c->warmup_steps,
                            c->decay_steps ? c->decay_steps : c->steps - c->warmup_steps};
    mp_adamw_hparams hp = {c->beta1, c->beta2, c->adam_eps, c->weight_decay};
    double tokens_per_step = (double)c->batch_size * c->seq_len;
    double t_start = mp_time_s(), t_last = t_start;
    double last_loss = NAN;
    int continue_on_error = !strcmp(f.on_save_error, "continue");
    int64_t first_step = rs.step;
    if (c->steps == 0 && !resume_dir[0] && f.ckpt_every) {
        /* "every N steps and at the end": the end of a 0-step run is its initial state, saved as step 0
         * (what `meshpoint init` writes offline) */
        mp_run_state now = {0, loader.cur, 0, 0};
        ckpt_stats cs;
        if (mp_checkpointer_save(&ck, model, &mc, c, &now, &cs, &err) || mp_checkpointer_wait(&ck, NULL, &err)) {
            mp_err_wrap(&err, "saving the initial state (step 0)");
            goto fail;
        }
        mp_info("checkpoint step 0 (the initial state) saved under %s", ckpt_root);
    }
    train_fill_ctx fc = {&loader, &bs, mesh->dp_rank};
    for (int64_t step = first_step; step < c->steps; step++) {
        double lr = mp_lr_at(&sched, step);
        llama_step_args sa = {hp, lr, step + 1, c->grad_clip, bs.grad_accum, tokens_per_step};
        llama_step_result sr;
        llama_train_step(model, &sa, train_fill, &fc, in, tgt, &sr);
        mp_loader_advance(&loader);
        double loss = sr.loss, norm = sr.grad_norm;
        last_loss = loss;
        if (!isfinite(loss)) {
            mp_err_set(&err, MP_ECHECK, "loss is %g at step %lld: training diverged", loss, (long long)step + 1);
            goto fail;
        }
        double t = mp_time_s();
        double tok_s = tokens_per_step / (t - t_last);
        t_last = t;
        if (metrics) {
            fprintf(metrics,
                    "{\"step\": %lld, \"loss\": %.17g, \"lr\": %.9g, \"grad_norm\": %.17g, \"tokens_per_s\": %.1f, "
                    "\"time_s\": %.3f}\n",
                    (long long)step + 1, loss, lr, norm, tok_s, t - t_start);
            fflush(metrics);
        }
        if (c->log_every && ((step + 1) % c->log_every == 0 || step + 1 == c->steps))
            mp_info("step %5lld/%lld | loss %.6f | lr %.3e | grad norm %.4f | %.0f tok/s", (long long)step + 1,
                    (long long)c->steps, loss, lr, norm, tok_s);
        int last = step + 1 == c->steps;
        if (c->val_data[0] && ((c->eval_every && (step + 1) % c->eval_every == 0) || last)) {
            double vl = mp_eval_loss(model, &val, &bs, c->seq_len, c->eval_batches, in, tgt, &err);
            if (isnan(vl)) goto fail;
            mp_info("step %5lld | val loss %.6f", (long long)step + 1, vl);
            if (metrics) fprintf(metrics, "{\"step\": %lld, \"val_loss\": %.9g}\n", (long long)step + 1, vl);
        }
        /* checkpoints: commit a finished async save, then maybe start the next one */
        ckpt_stats cs;
        int64_t committed;
        if (mp_checkpointer_poll(&ck, &committed, &cs, &err)) goto save_failed;
        if (committed >= 0)
            mp_info("checkpoint step %lld committed: stall %.3f s, write %.3f s, commit %.3f s", (long long)committed,
                    ck.last_stall_s, cs.write_s, cs.commit_s);
        int stop = stop_requested(mesh) || (f.stop_at && step + 1 == f.stop_at && !last);
        int due = f.ckpt_every && ((step + 1) % f.ckpt_every == 0 || last);
        if (due || stop) {
            mp_run_state now = {step + 1, loader.cur};
            memset(&cs, 0, sizeof cs);
            if (mp_checkpointer_save(&ck, model, &mc, c, &now, &cs, &err)) goto save_failed;
            if (f.async_save)
                mp_info("checkpoint step %lld: stall %.3f s (copy to host), writing in the background",
                        (long long)now.step, ck.last_stall_s);
            else
                mp_info("checkpoint step %lld saved: %.3f s (write %.3f s, commit %.3f s, %.1f MiB this rank)",
                        (long long)now.step, cs.stall_s, cs.write_s, cs.commit_s, cs.bytes / 1048576.0);
        }
        if (stop) {
            if (mp_checkpointer_wait(&ck, NULL, &err)) goto save_failed;
            mp_info("stopped%s after step %lld; checkpoint saved under %s", g_stop_signal ? " by signal" : "",
                    (long long)step + 1, ckpt_root);
            goto done;
        }
        continue;
    save_failed:
        mp_err_wrap(&err, "saving a checkpoint at step %lld", (long long)step + 1);
        if (!continue_on_error) goto fail;
        mp_error("%s (continuing: --on-save-error continue)", err.msg);
        mp_err_clear(&err);
    }
    if (mp_checkpointer_wait(&ck, NULL, &err)) { mp_err_wrap(&err, "saving the last checkpoint"); goto fail; }
    if (c->steps > first_step) {
        double elapsed = mp_time_s() - t_start;
        mp_info("done: %lld steps, final train loss %.6f, %.1f s", (long long)c->steps, last_loss, elapsed);
        if (mesh->world > 1) {
            double comm_s = mp_comm_total_seconds(mesh->tp_comm) + mp_comm_total_seconds(mesh->dp_comm) +
                            mp_comm_total_seconds(mesh->world_comm);
            int64_t ran = c->steps - first_step;
            mp_info("comm: tp %.3f MiB/step, dp %.3f MiB/step (sent by this rank), %.1f%% of the time in "
                    "collectives",
                    mp_comm_total_bytes(mesh->tp_comm) / 1048576.0 / (double)ran,
                    mp_comm_total_bytes(mesh->dp_comm) / 1048576.0 / (double)ran, 100.0 * comm_s / elapsed);
        }
    }
    goto done;
fail_agreed:
    status = mp_exit_status(agreed);   /* the failing rank printed the message */
    goto done;
fail:
    status = mp_runtime_fail(&rt, &err);
done:
    mp_checkpointer_free(&ck);
    if (metrics) fclose(metrics);
    free(in);
    free(tgt);
    llama_destroy(model);
    mp_token_file_close(&train);
    mp_token_file_close(&val);
    mp_runtime_end(&rt);
    return status;
}
