/*
 * cli/cmd_train.c — `meshpoint train`: the training loop, the one place that ties model, optimizer,
 * data and checkpoints together. The run's phases in order (mp_cmd_train), the step and its checkpoint
 * handling; the other concerns have files of their own (cli/train_run.h lists them): flags and config
 * (train_flags.c), the run directory (run_dir.c), resuming (train_resume.c), metrics (train_metrics.c),
 * the checkpoint contents (train_ckpt.c).
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
 * Rank 0 also writes, in the background, the view.h5 that earlier saves of the root left pending (a kill or
 * a full disk after a checkpoint's commit: ckpt_views_heal_start), once it holds the job lock and resumed.
 *
 * --init-from CKPT is a fresh run whose initial weights are loaded (resharded) from a checkpoint instead
 * of drawn from the seed (mp_train_init_from); everything else is as for a fresh run.
 */
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/train_run.h"
#include "core/log.h"
#include "layers/llama_train.h"

/* The loader feeding llama_train_step: micro-step k of the current batch, this rank's slice. */
static void train_fill(void *ctx, int k, int32_t *in, int32_t *tgt) {
    train_fill_ctx *f = ctx;
    mp_loader_get(f->loader, mp_batch_first(f->bs, k, f->dp_rank), f->bs->micro, in, tgt);
}

/* ---- preemption: SIGTERM/SIGINT ask for a checkpoint at the next step boundary ---- */

static volatile sig_atomic_t g_stop_signal;
static void on_stop_signal(int sig) { g_stop_signal = sig; }

/* Every rank must agree to stop at the same step (a signal may reach ranks at different moments):
 * one all-reduce of the flag over the world per step. */
static int stop_requested(mp_mesh *mesh) {
    float flag = g_stop_signal ? 1.0f : 0.0f;
    mesh->world_comm->ops->all_reduce(mesh->world_comm, &flag, 1, MP_F32, 1);
    return flag > 0;
}

/* ---- the run's phases (the state they share: train_run, cli/train_run.h) ---- */

/* How the loop goes on after a step's checkpoint handling. */
typedef enum step_flow {
    STEP_NEXT,   /* the next step */
    STEP_STOP,   /* stopped (signal or --stop-at) with a checkpoint saved: exit 0 */
    STEP_FAIL    /* r->err set, found alike by every rank (an mp_alike failure) */
} step_flow;

/* Builds the mesh (fixing c->dp) and the batch split. Fails alike on every rank. */
static mp_alike setup_mesh(train_run *r) {
    mp_train_config *c = &r->f.tc;
    mp_code rc = mp_runtime_mesh(&r->rt, c->tp, c->dp, r->f.device, r->f.comm, &r->err);
    if (rc) return mp_alike_of(rc);
    r->mesh = &r->rt.mesh;
    c->dp = r->mesh->dp;
    return mp_alike_of(mp_batch_split_init(&r->bs, c->batch_size, c->grad_accum, r->mesh->dp, &r->err));
}

/* Prints the memory plan and refuses (MP_EINPUT) one that does not fit, before the data and the model
 * allocate anything large. Collective: the agreed code. */
static mp_agreed plan_memory(train_run *r) {
    mp_memplan *plan = &r->plan;
    llama_options o = mp_runtime_model_options(&r->rt, &r->f.tc, r->bs.micro);
    mp_memplan_use use = {.staging = r->f.async_save || !r->rt.be->host_memory,   /* see mp_checkpointer_save */
                          .saves = 1,   /* a stop signal saves even without --ckpt-every */
                          .loads = r->f.resume || r->f.resume_from || r->f.init_from,
                          .ckpt_bands = mp_memplan_ckpt_bands(r->sopts.ranks_per_file, r->mesh->world)};
    return mp_memplan_check(&r->rt, &r->mc, &o, &use, r->max_bytes, plan, &r->err);
}

/* Opens the token files and the training loader, and checks that the validation file holds a batch.
 * A file may fail to open on some ranks only (node-local paths): collective, the agreed code. */
static mp_agreed open_data(train_run *r) {
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

/* Builds the model with its initial weights (with --init-from, mp_train_init_from loads them instead).
 * Fails alike on every rank. */
static mp_alike build_model(train_run *r) {
    return mp_alike_of(mp_runtime_model(&r->rt, &r->mc, &r->f.tc, r->bs.micro, &r->model, &r->err));
}

/* A fresh run (nothing resumed, no --init-from) gets the seeded random initialisation; a resumed or
 * initialised-from run does not: its load wrote every parameter (and, resuming, every moment), so the
 * init would only be overwritten (it was ~20% of a resume's start-up). Called after
 * mp_train_resume and mp_train_init_from; records its time for the start-up log. Local. */
static void init_fresh_weights(train_run *r) {
    if (r->resume_dir[0] || r->f.init_from) return;
    double t0 = mp_time_s();
    llama_init_weights(r->model, r->f.tc.seed);
    r->init_s = mp_time_s() - t0;
}

/* Gets the step loop ready: the token buffers, the "model: ..." line, the stop-signal handlers, the
 * schedule and optimizer settings, the clock. Cannot fail. */
static void prepare_loop(train_run *r) {
    mp_train_config *c = &r->f.tc;
    const mp_mesh *mesh = r->mesh;
    /* the batch's host buffers, two of each: pinned on a GPU, so each upload runs at full speed, and
     * micro-batch k+1 is filled while k's upload may still be queued (llama_token_bufs) */
    llama_token_bufs_init(&r->tok, r->rt.be, r->bs.micro, c->seq_len);
    mp_info("model: %lld parameters, %d layers, hidden %d; mesh dp %d x tp %d%s; batch %d x %d tokens "
            "(micro %d x accum %d per rank); recompute %s; CPU kernels %s, OpenBLAS %s",
            (long long)llama_config_num_params(&r->mc), r->mc.num_hidden_layers, r->mc.hidden_size, mesh->dp, mesh->tp,
            mesh->tp > 1 ? (c->sp < 0 || c->sp ? ", SP" : ", no SP") : "", c->batch_size, c->seq_len, r->bs.micro,
            r->bs.grad_accum, c->recompute, mp_cpu_isa(), mp_cpu_blas_core());
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
    /* start-up against the load it contains (a resume should cost little more than its load) */
    if (r->resume_dir[0] || r->f.init_from)
        mp_info("startup: %.2f s from process start to the first step (checkpoint load %.2f s, no random init)",
                r->t_start - r->rt.t_start, r->load_s);
    else
        mp_info("startup: %.2f s from process start to the first step (random init %.2f s)",
                r->t_start - r->rt.t_start, r->init_s);
}

/* A fresh 0-step run with --ckpt-every saves its initial state as step 0 ("at the end" of no steps:
 * what `meshpoint init` writes offline). Collective when it saves. Fails alike (the save agrees inside). */
static mp_alike save_initial_state(train_run *r) {
    if (!(r->f.tc.steps == 0 && !r->resume_dir[0] && r->f.ckpt_every)) return mp_alike_of(MP_OK);
    mp_run_state now = {0, r->loader.cur, 0, 0};
    ckpt_stats cs;
    mp_code rc;
    if ((rc = mp_checkpointer_save(&r->ck, r->model, &r->mc, &r->f.tc, &now, &cs, &r->err)) ||
        (rc = mp_checkpointer_wait(&r->ck, NULL, &r->err))) {
        mp_err_wrap(&r->err, "saving the initial state (step 0)");
        return mp_alike_of(rc);
    }
    mp_info("checkpoint step 0 (the initial state) saved under %s", r->ckpt_root);
    return mp_alike_of(MP_OK);
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
 * norm. Collective. A non-finite norm: nonfinite_step. Fails alike when the loss is not finite (the loss
 * is global). */
static mp_alike run_step(train_run *r, int64_t step, step_out *out) {
    const mp_train_config *c = &r->f.tc;
    const mp_mesh *mesh = r->mesh;
    /* the step's own time and collectives: checkpoints and evaluations between steps are not in them */
    double t0 = mp_time_s(), comm0 = step_comm_seconds(mesh);
    int64_t tp0 = mp_comm_total_bytes(mesh->tp_comm), dp0 = mp_comm_total_bytes(mesh->dp_comm);
    out->lr = mp_lr_at(&r->sched, step);
    llama_step_args sa = {r->hp, out->lr, step + 1, c->grad_clip, r->bs.grad_accum, r->tokens_per_step};
    llama_step_result sr;
    llama_train_step(r->model, &sa, train_fill, &r->fc, &r->tok, &sr);
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
    if (!isfinite(out->norm)) return mp_alike_of(nonfinite_step(r, step, out));
    if (!isfinite(out->loss))
        return mp_alike_of(mp_err_set(&r->err, MP_ECHECK, "loss is %g at step %lld: training diverged", out->loss,
                                      (long long)step + 1));
    return mp_alike_of(MP_OK);
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
        mp_run_state now = {step + 1, r->loader.cur, .elapsed_s = mp_train_elapsed(r, mp_time_s())};
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
 * communication volume on a multi-rank mesh) if this run took any step. Collective. Fails alike when the
 * save does (the save agrees inside). */
static mp_alike finish_run(train_run *r) {
    const mp_train_config *c = &r->f.tc;
    const mp_mesh *mesh = r->mesh;
    mp_code rc = mp_checkpointer_wait(&r->ck, NULL, &r->err);
    if (rc) {
        mp_err_wrap(&r->err, "saving the last checkpoint");
        last_save_failed(r);
        return mp_alike_of(rc);
    }
    if (c->steps <= r->first_step) return mp_alike_of(MP_OK);
    double elapsed = mp_time_s() - r->t_start;
    mp_info("done: %lld steps, final train loss %.6f, %.1f s", (long long)c->steps, r->last_loss, elapsed);
    mp_memplan_report(&r->rt, r->plan.total);
    if (r->skipped)
        mp_warn("%lld update(s) skipped for a non-finite gradient norm (--on-nonfinite skip)", (long long)r->skipped);
    if (mesh->world > 1) {
        /* the steps' own collectives over the steps' own time: checkpoints (their commit exchange, the
         * time they take), evaluations and start-up are in neither */
        int64_t ran = c->steps - r->first_step;
        mp_info("comm: tp %.3f MiB/step, dp %.3f MiB/step (sent by this rank), %.1f%% of the step time in "
                "collectives",
                r->steps_tp_bytes / 1048576.0 / (double)ran, r->steps_dp_bytes / 1048576.0 / (double)ran,
                r->steps_s > 0 ? 100.0 * r->steps_comm_s / r->steps_s : 0.0);
    }
    return mp_alike_of(MP_OK);
}

/* Frees what the run holds (each piece may not have been set up). */
static void release_run(train_run *r) {
    mp_checkpointer_free(&r->ck);
    ckpt_lock_release(r->lock);
    if (r->metrics) fclose(r->metrics);
    llama_token_bufs_free(&r->tok);
    llama_destroy(r->model);
    mp_token_file_close(&r->train);
    mp_token_file_close(&r->val);
}

/* `meshpoint train`: the phases in order, each run by the macro of its failure protocol (cli/runtime.h):
 * MP_PHASE_ALIKE (rank 0 prints the failure every rank found) or MP_PHASE_AGREED (the failing rank
 * printed it). The type a phase returns picks the macro; a mismatch does not compile. */
int mp_cmd_train(int argc, char **argv) {
    train_run run = {0}, *r = &run;
    mp_runtime_start(&r->rt, &argc, &argv);
    mp_err_clear(&r->err);
    mp_checkpointer_init(&r->ck, "", NULL, 0);
    int help = 0, status = mp_exit_status(MP_OK);
#define ALIKE(expr) MP_PHASE_ALIKE(status, done, &r->rt, &r->err, expr)
#define AGREED(expr) MP_PHASE_AGREED(status, done, expr)

    /* flags and config; mesh, data, model */
    ALIKE(mp_train_parse_flags(r, argc, argv, &help));
    if (help) goto done;
    /* the config file may be missing on some ranks only (node-local paths): agreed before the mesh */
    AGREED(mp_runtime_agree(&r->rt, mp_train_load_config(r), &r->err));
    ALIKE(setup_mesh(r));
    AGREED(plan_memory(r));
    AGREED(open_data(r));
    ALIKE(build_model(r));
    /* checkpoints: the root's lock, leftovers of interrupted saves, resume; then what lies past the
     * resumed step is set aside and the metrics file opened */
    AGREED(mp_train_claim_ckpt_root(r));
    AGREED(mp_train_resume(r));
    AGREED(mp_train_init_from(r));
    init_fresh_weights(r);
    mp_train_note_resume(r);
    AGREED(mp_train_open_metrics(r));
    /* views a kill or a full disk left pending in the root: rank 0, under the job lock, after the
     * load and the set-aside, writes them in the background; the run's first save waits for it, the exit too */
    if (r->rt.rank == 0) ckpt_views_heal_start(r->ckpt_root);
    prepare_loop(r);
    ALIKE(save_initial_state(r));
    /* the steps */
    for (int64_t step = r->first_step; step < r->f.tc.steps; step++) {
        step_out s;
        ALIKE(run_step(r, step, &s));
        ALIKE(mp_train_log_step(r, step, &s));
        AGREED(mp_runtime_agree(&r->rt, r->metrics_rc, &r->metrics_err));
        step_flow flow = checkpoint_step(r, step);
        ALIKE(mp_alike_of(flow == STEP_FAIL ? (r->err.code ? r->err.code : MP_EINTERNAL) : MP_OK));
        if (flow == STEP_STOP) goto done;
    }
    ALIKE(finish_run(r));
    AGREED(mp_train_close_metrics(r));
#undef ALIKE
#undef AGREED
done:
    release_run(r);
    mp_runtime_end(&r->rt);
    return status;
}
