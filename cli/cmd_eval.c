/*
 * cli/cmd_eval.c — `meshpoint eval`: the mean per-token loss of a model over a token file. The model is
 * the config's architecture with weights from the seeded initialisation (a baseline) or, with
 * --checkpoint, from a saved checkpoint. Runs on any mesh, like train.
 *
 * --checkpoint names a checkpoint as `meshpoint ckpt` does: a step directory, a checkpoint root, or a run
 * directory (its newest complete checkpoint). Without --config the architecture is the checkpoint's own
 * (its model_config metadata); a --config that disagrees with it is refused (exit 2, naming the field).
 *
 * Output: "eval loss L (...)" on stdout, or with --json one JSON object (print_json lists the fields);
 * the exit status is the same either way, and errors go to stderr only. A "model: ..." line on stderr
 * comes before the model is built and loaded (the slow part), as in train.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/memplan.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/log.h"

static const char *eval_about =
    "Prints the mean per-token cross-entropy of the model over the first N batches of a token file. The\n"
    "defaults of --batch and --seq-len apply where the config's \"train\" object sets nothing. --json prints\n"
    "{loss, batches, batches_requested, batch_size, seq_len, tokens, data, weights, checkpoint, step, tp, dp}\n"
    "(checkpoint and step null without --checkpoint), with the same exit status.";

/* What one evaluation reports. */
typedef struct eval_result {
    double loss;
    int used, requested, batch, seq, tp, dp;
    const char *data, *checkpoint;   /* checkpoint NULL: the seeded initialisation */
    int64_t step;                    /* of the checkpoint, else -1 */
} eval_result;

/* Prints the --json object of e on stdout: loss (exact), batches (used), batches_requested, batch_size,
 * seq_len, tokens (= batches x batch_size x seq_len), data, weights ("initialisation" or the checkpoint
 * directory), checkpoint (null without one), step (null without one), tp, dp. */
static void print_json(const eval_result *e) {
    cJSON *o = cJSON_CreateObject();
    char num[64];
    snprintf(num, sizeof num, "%.17g", e->loss);
    cJSON_AddItemToObject(o, "loss", cJSON_CreateRaw(num));
    cJSON_AddNumberToObject(o, "batches", e->used);
    cJSON_AddNumberToObject(o, "batches_requested", e->requested);
    cJSON_AddNumberToObject(o, "batch_size", e->batch);
    cJSON_AddNumberToObject(o, "seq_len", e->seq);
    cJSON_AddNumberToObject(o, "tokens", (double)e->used * e->batch * e->seq);
    cJSON_AddStringToObject(o, "data", e->data);
    cJSON_AddStringToObject(o, "weights", e->checkpoint ? e->checkpoint : "initialisation");
    if (e->checkpoint) {
        cJSON_AddStringToObject(o, "checkpoint", e->checkpoint);
        cJSON_AddNumberToObject(o, "step", (double)e->step);
    } else {
        cJSON_AddNullToObject(o, "checkpoint");
        cJSON_AddNullToObject(o, "step");
    }
    cJSON_AddNumberToObject(o, "tp", e->tp);
    cJSON_AddNumberToObject(o, "dp", e->dp);
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
}

/* The flags of `meshpoint eval`. */
typedef struct eval_flags {
    const char *config, *data, *checkpoint, *fmt_name, *device, *comm, *max_memory;
    int batches, batch, seq, tp, dp, json, sp;
    int set_batch, set_seq, set_tp, set_dp, set_sp;
    int64_t seed;
} eval_flags;

/* The state the phases of an evaluation share, owned by mp_cmd_eval. */
typedef struct eval_run {
    eval_flags f;
    mp_runtime rt;
    mp_err err;
    mp_train_config tc;
    llama_config mc;
    size_t max_bytes;               /* --max-memory, 0: the host's available memory */
    char ckpt_dir[4096];            /* "" without --checkpoint */
    mp_batch_split bs;
    mp_token_file file;
    llama_model *model;
    mp_run_state st;                /* of the loaded checkpoint (step -1 without one) */
    int32_t *in, *tgt;
    mp_memplan plan;                /* printed at the start, compared with the peak at the end */
} eval_run;

/* Parses the command line into r->f (with --help prints the help on rank 0 and sets *help). Fails alike
 * on every rank (the caller declares it: mp_alike_of). */
static mp_code parse_flags(eval_run *r, int argc, char **argv, int *help) {
    eval_flags *f = &r->f;
    static const char *const formats[] = {"llmc", "u16", "u32", NULL};
    const mp_arg flags[] = {
        {"config", MP_ARG_STRING, &f->config, "FILE", "model config (JSON, HF field names)",
         .dflt = "the checkpoint's model_config"},
        {"data", MP_ARG_STRING, &f->data, "FILE", "token file to evaluate on"},
        {"data-format", MP_ARG_STRING, &f->fmt_name, "FMT", "token file format", formats},
        {"batches", MP_ARG_INT, &f->batches, "N", "batches to average over"},
        {"batch", MP_ARG_INT, &f->batch, "B", "sequences per batch", .set = &f->set_batch},
        {"seq-len", MP_ARG_INT, &f->seq, "T", "sequence length", .set = &f->set_seq},
        {"checkpoint", MP_ARG_STRING, &f->checkpoint, "DIR",
         "weights from this checkpoint: RUN, RUN/checkpoints (newest complete) or RUN/checkpoints/step_N"},
        {"seed", MP_ARG_I64, &f->seed, "S", "initialisation seed (without --checkpoint)"},
        {"tp", MP_ARG_INT, &f->tp, "N", "tensor-parallel degree", .set = &f->set_tp},
        {"dp", MP_ARG_INT, &f->dp, "N", "data-parallel degree (0: world / tp)", .set = &f->set_dp},
        {"sp", MP_ARG_SWITCH, &f->sp, NULL,
         "sequence parallelism (auto: on when tp > 1 and tp divides --seq-len; the loss is the same either way)",
         .set = &f->set_sp},
        {"device", MP_ARG_STRING, &f->device, "DEV", MP_RUNTIME_DEVICE_HELP, mp_runtime_devices},
        {"comm", MP_ARG_STRING, &f->comm, "C", MP_RUNTIME_COMM_HELP, mp_mesh_comm_names},
        {"max-memory", MP_ARG_STRING, &f->max_memory, "SIZE",
         "memory bound per rank for the plan checked at start (e.g. 8G), replacing the measured one", .dflt = "what the host and ulimit allow"},
        {"json", MP_ARG_SWITCH, &f->json, NULL, "print one JSON object (see above) instead of the loss line"},
        {0}};
    int npos = 0;
    MP_TRY(mp_args_parse(flags, argc, argv, &npos, help, &r->err));
    if (*help) {
        if (r->rt.rank == 0)
            mp_args_help(stdout, "meshpoint eval (--config FILE | --checkpoint DIR) --data FILE [options]", eval_about,
                         flags);
        return MP_OK;
    }
    if (npos) return mp_err_set(&r->err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]);
    if (!f->data || (!f->config && !f->checkpoint))
        return mp_err_set(&r->err, MP_EINPUT, "--data FILE and one of --config FILE / --checkpoint DIR are required");
    if (f->batches <= 0) return mp_err_set(&r->err, MP_EINPUT, "--batches must be > 0, got %d", f->batches);
    if (f->seed < 0) return mp_err_set(&r->err, MP_EINPUT, "--seed must be >= 0, got %lld", (long long)f->seed);
    if (f->max_memory) MP_TRY(mp_args_parse_size(f->max_memory, "--max-memory", 1, &r->max_bytes, &r->err));
    return MP_OK;
}

/* Loads --config (when given) and applies the flags to the evaluation settings. The config file may be
 * missing on some ranks only (node-local paths): local, agreed by the caller. */
static mp_code load_config(eval_run *r) {
    const eval_flags *f = &r->f;
    llama_config_default(&r->mc);
    if (f->config) MP_TRY(llama_config_load(f->config, &r->mc, &r->tc, &r->err));
    if (f->set_batch) r->tc.batch_size = f->batch;
    if (f->set_seq) r->tc.seq_len = f->seq;
    if (f->set_tp) r->tc.tp = f->tp;
    if (f->set_sp) r->tc.sp = f->sp;
    if (f->set_dp) r->tc.dp = f->dp;
    r->tc.grad_accum = 1;
    return mp_train_config_validate(&r->tc, &r->err);
}

/* Resolves --checkpoint (rank 0 decides) and, without --config, reads the model config the checkpoint
 * was saved with (every rank reads it: no broadcast of a struct). Collective: the agreed code. */
static mp_agreed resolve_checkpoint(eval_run *r) {
    if (!r->f.checkpoint) return (mp_agreed){MP_OK};
    MP_TRY_AGREED(mp_runtime_resolve_ckpt(&r->rt, NULL, r->f.checkpoint, r->ckpt_dir, sizeof r->ckpt_dir, &r->err));
    if (r->f.config) return (mp_agreed){MP_OK};
    return mp_runtime_ckpt_model_config(&r->rt, r->ckpt_dir, &r->mc, &r->err);
}

/* The model options of an evaluation: forward only (no gradients, no moments: the plan and the model
 * hold the weights and the activations). */
static llama_options eval_options(const eval_run *r) {
    llama_options o = mp_runtime_model_options(&r->rt, &r->tc, r->bs.micro);
    o.inference = 1;
    return o;
}

/* The memory plan (printed; refused when it does not fit), then the token file, which may fail to open
 * on some ranks only. Collective: the agreed code. */
static mp_agreed plan_and_open(eval_run *r) {
    /* SP left to us: on where it can be (tp divides the sequence), off elsewhere (eval --tp 3 at T = 128
     * runs instead of being refused; the loss does not depend on it) */
    int tp = r->rt.mesh.tp;
    if (r->tc.sp < 0) r->tc.sp = tp > 1 && r->tc.seq_len % tp == 0;
    llama_options o = eval_options(r);
    mp_memplan_use use = {.loads = r->f.checkpoint != NULL};
    MP_TRY_AGREED(mp_memplan_check(&r->rt, &r->mc, &o, &use, r->max_bytes, &r->plan, &r->err));
    mp_code local = mp_token_file_open(&r->file, r->f.data, (mp_data_format)mp_data_format_parse(r->f.fmt_name),
                                       r->mc.vocab_size, &r->err);
    return mp_runtime_agree(&r->rt, local, &r->err);
}

/* Builds the model with the seeded initialisation, then loads the checkpoint's weights over it (only
 * the weights: a --model-only checkpoint has no moments, and eval needs none). Collective: the agreed
 * code. */
static mp_agreed build_and_load(eval_run *r) {
    mp_info("model: %lld parameters, %d layers, hidden %d; mesh dp %d x tp %d; %s; up to %d batches of %d x %d "
            "tokens", (long long)llama_config_num_params(&r->mc), r->mc.num_hidden_layers, r->mc.hidden_size,
            r->rt.mesh.dp, r->rt.mesh.tp, r->f.checkpoint ? "loading the checkpoint" : "seeded initialisation",
            r->f.batches, r->tc.batch_size, r->tc.seq_len);
    llama_options o = eval_options(r);
    MP_TRY_AGREED(
        mp_runtime_agree(&r->rt, llama_create(&r->model, &r->mc, &o, &r->rt.mesh, r->rt.be, &r->err), &r->err));
    llama_init_weights(r->model, (uint64_t)r->f.seed);
    if (!r->f.checkpoint) return (mp_agreed){MP_OK};
    mp_code local = mp_checkpoint_load(r->model, r->ckpt_dir, &r->mc, 1, &r->st, &r->err);
    if (local && r->f.config) mp_err_wrap(&r->err, "--config %s", r->f.config);
    MP_TRY_AGREED(mp_runtime_agree(&r->rt, local, &r->err));
    mp_checkpoint_log_io(&r->rt.mesh, "loaded", r->ckpt_dir, &r->st);
    return (mp_agreed){MP_OK};
}

/* Evaluates and prints the result on rank 0 (text or --json). Fails alike (the loss is global). */
static mp_alike evaluate(eval_run *r) {
    const eval_flags *f = &r->f;
    const mp_train_config *tc = &r->tc;
    size_t tb = (size_t)r->bs.micro * tc->seq_len * sizeof(int32_t);
    r->in = mp_xmalloc(tb);
    r->tgt = mp_xmalloc(tb);
    int used = f->batches;
    double loss = mp_eval_loss_n(r->model, &r->file, &r->bs, tc->seq_len, f->batches, r->in, r->tgt, &used, &r->err);
    if (isnan(loss)) return mp_alike_of(r->err.code ? r->err.code : MP_ECHECK);
    if (r->rt.rank != 0) return mp_alike_of(MP_OK);
    if (used < f->batches)
        mp_warn("--batches %d: %s holds only %d batches of %d x %d tokens; used those %d", f->batches, f->data, used,
                tc->batch_size, tc->seq_len, used);
    const char *ck = f->checkpoint ? r->ckpt_dir : NULL;
    eval_result res = {loss, used, f->batches, tc->batch_size, tc->seq_len, r->rt.mesh.tp, r->rt.mesh.dp, f->data, ck,
                       ck ? r->st.step : -1};
    if (f->json) print_json(&res);
    else printf("eval loss %.6f (%d batches x %d x %d tokens of %s; weights: %s)\n", loss, used, tc->batch_size,
                tc->seq_len, f->data, ck ? ck : "initialisation");
    return mp_alike_of(MP_OK);
}

/* `meshpoint eval`. Errors every rank finds alike go through MP_PHASE_ALIKE (rank 0 prints them); errors
 * only some ranks may find (files on node-local paths, the memory of each host) are agreed on and go
 * through MP_PHASE_AGREED, like train's (cli/runtime.h). */
int mp_cmd_eval(int argc, char **argv) {
    eval_run run = {.f = {.fmt_name = "llmc", .device = "cpu", .comm = "auto", .batches = 8, .tp = 1, .sp = -1}}, *r = &run;
    mp_train_config_default(&r->tc);
    r->f.seed = (int64_t)r->tc.seed;
    r->f.batch = r->tc.batch_size;
    r->f.seq = r->tc.seq_len;
    r->st.step = -1;
    mp_runtime_start(&r->rt, &argc, &argv);
    mp_err_clear(&r->err);
    int help = 0, status = mp_exit_status(MP_OK);
#define ALIKE(expr) MP_PHASE_ALIKE(status, done, &r->rt, &r->err, expr)
#define AGREED(expr) MP_PHASE_AGREED(status, done, expr)
    ALIKE(mp_alike_of(parse_flags(r, argc, argv, &help)));
    if (help) goto done;
    AGREED(mp_runtime_agree(&r->rt, load_config(r), &r->err));
    ALIKE(mp_alike_of(mp_runtime_mesh(&r->rt, r->tc.tp, r->tc.dp, r->f.device, r->f.comm, &r->err)));
    AGREED(resolve_checkpoint(r));
    ALIKE(mp_alike_of(llama_config_validate_pair(&r->mc, &r->tc, &r->err)));
    ALIKE(mp_alike_of(mp_batch_split_init(&r->bs, r->tc.batch_size, 1, r->rt.mesh.dp, &r->err)));
    AGREED(plan_and_open(r));
    AGREED(build_and_load(r));
    ALIKE(evaluate(r));
    mp_memplan_report(&r->rt, r->plan.total);
#undef ALIKE
#undef AGREED
done:
    free(r->in);
    free(r->tgt);
    llama_destroy(r->model);
    mp_token_file_close(&r->file);
    mp_runtime_end(&r->rt);
    return status;
}
