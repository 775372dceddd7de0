/*
 * cli/cmd_eval.c — `meshpoint eval`: the mean per-token loss of a model over a token file. The model is
 * the config's architecture with weights from the seeded initialisation (a baseline) or, with
 * --checkpoint, from a saved checkpoint. Runs on any mesh, like train.
 *
 * --checkpoint names a checkpoint as `meshpoint ckpt` does: a step directory, a checkpoint root, or a run
 * directory (its newest complete checkpoint). Without --config the architecture is the checkpoint's own
 * (its model_config metadata); a --config that disagrees with it is refused (exit 2, naming the field).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/log.h"

static const char *eval_about =
    "Prints the mean per-token cross-entropy of the model over the first N batches of a token file.";

int mp_cmd_eval(int argc, char **argv) {
    const char *config = NULL, *data = NULL, *checkpoint = NULL, *fmt_name = "llmc", *device = "cpu";
    mp_train_config tc;
    mp_train_config_default(&tc);
    int batches = 8, set_batch = 0, set_seq = 0, set_tp = 0, set_dp = 0;
    int64_t seed = (int64_t)tc.seed;
    int batch = tc.batch_size, seq = tc.seq_len, tp = 1, dp = 0;
    static const char *const formats[] = {"llmc", "u16", "u32", NULL};
    static const char *const devices[] = {"cpu", "cuda", NULL};
    const mp_arg flags[] = {
        {"config", MP_ARG_STRING, &config, "FILE", "model config (JSON, HF field names); default: the checkpoint's"},
        {"data", MP_ARG_STRING, &data, "FILE", "token file to evaluate on"},
        {"data-format", MP_ARG_STRING, &fmt_name, "FMT", "token file format", formats},
        {"batches", MP_ARG_INT, &batches, "N", "batches to average over"},
        {"batch", MP_ARG_INT, &batch, "B", "sequences per batch", .set = &set_batch},
        {"seq-len", MP_ARG_INT, &seq, "T", "sequence length", .set = &set_seq},
        {"checkpoint", MP_ARG_STRING, &checkpoint, "DIR",
         "weights from this checkpoint: RUN, RUN/checkpoints (newest complete) or RUN/checkpoints/step_N"},
        {"seed", MP_ARG_I64, &seed, "S", "initialisation seed (without --checkpoint)"},
        {"tp", MP_ARG_INT, &tp, "N", "tensor-parallel degree", .set = &set_tp},
        {"dp", MP_ARG_INT, &dp, "N", "data-parallel degree (0: world / tp)", .set = &set_dp},
        {"device", MP_ARG_STRING, &device, "DEV", "compute device", devices},
        {0}};
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = 0;
    llama_model *model = NULL;
    mp_token_file file = {0};
    int32_t *in = NULL, *tgt = NULL;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint eval (--config FILE | --checkpoint DIR) --data FILE [options]", eval_about, flags);
        goto done;
    }
    if (npos) { mp_err_set(&err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]); goto fail; }
    if (!data || (!config && !checkpoint)) {
        mp_err_set(&err, MP_EINPUT, "--data FILE and one of --config FILE / --checkpoint DIR are required");
        goto fail;
    }
    if (batches <= 0) { mp_err_set(&err, MP_EINPUT, "--batches must be > 0, got %d", batches); goto fail; }
    mp_model_config mc;
    mp_model_config_default(&mc);
    if (config && mp_config_load(config, &mc, &tc, &err)) goto fail;
    if (set_batch) tc.batch_size = batch;
    if (set_seq) tc.seq_len = seq;
    if (set_tp) tc.tp = tp;
    if (set_dp) tc.dp = dp;
    tc.grad_accum = 1;
    if (mp_train_config_validate(&tc, &err)) goto fail;
    if (seed < 0) { mp_err_set(&err, MP_EINPUT, "--seed must be >= 0, got %lld", (long long)seed); goto fail; }
    if (mp_runtime_mesh(&rt, tc.tp, tc.dp, device, &err)) goto fail;
    char ckpt_dir[4096] = "";
    if (checkpoint) {
        snprintf(ckpt_dir, sizeof ckpt_dir, "%s", checkpoint);
        mp_code agreed = mp_runtime_resolve_ckpt(&rt, ckpt_dir, sizeof ckpt_dir, &err);
        if (agreed) { status = mp_exit_status(agreed); goto done; }
        if (!config) {
            /* the architecture the checkpoint was saved with (every rank reads it: no broadcast of a struct) */
            ckpt_reader *cr = NULL;
            mp_code local = ckpt_open(&cr, ckpt_dir, &err);
            if (!local && (local = mp_ckpt_parse_model_config(cr, &mc, &err))) mp_err_wrap(&err, "checkpoint %s", ckpt_dir);
            ckpt_close(cr);
            if ((agreed = mp_runtime_agree(&rt, local, &err))) { status = mp_exit_status(agreed); goto done; }
        }
    }
    if (mp_config_validate_pair(&mc, &tc, &err)) goto fail;
    mp_batch_split bs;
    if (mp_batch_split_init(&bs, tc.batch_size, 1, rt.mesh.dp, &err)) goto fail;
    if (mp_token_file_open(&file, data, (mp_data_format)mp_data_format_parse(fmt_name), mc.vocab_size, &err)) goto fail;
    if (mp_runtime_model(&rt, &mc, &tc, bs.micro, &model, &err)) goto fail;
    llama_init_weights(model, (uint64_t)seed);
    if (checkpoint) {
        mp_run_state st;
        /* the weights only: a --model-only checkpoint (reshard) has no moments, and eval needs none */
        mp_code local = mp_checkpoint_load(model, ckpt_dir, &mc, 1, &st, &err);
        if (local && config) mp_err_wrap(&err, "--config %s", config);
        mp_code agreed = mp_runtime_agree(&rt, local, &err);
        if (agreed) { status = mp_exit_status(agreed); goto done; }
        mp_checkpoint_log_io(&rt.mesh, "loaded", ckpt_dir, &st);
    }
    size_t tb = (size_t)bs.micro * tc.seq_len * sizeof(int32_t);
    in = mp_xmalloc(tb);
    tgt = mp_xmalloc(tb);
    int used = batches;
    double loss = mp_eval_loss_n(model, &file, &bs, tc.seq_len, batches, in, tgt, &used, &err);
    if (isnan(loss)) goto fail;
    if (rt.rank == 0) {
        if (used < batches)
            mp_warn("--batches %d: %s holds only %d batches of %d x %d tokens; used those %d", batches, data, used,
                    tc.batch_size, tc.seq_len, used);
        printf("eval loss %.6f (%d batches x %d x %d tokens of %s; weights: %s)\n", loss, used, tc.batch_size,
               tc.seq_len, data, checkpoint ? ckpt_dir : "initialisation");
    }
    goto done;
fail:
    status = mp_runtime_fail(&rt, &err);
done:
    free(in);
    free(tgt);
    llama_destroy(model);
    mp_token_file_close(&file);
    mp_runtime_end(&rt);
    return status;
}
