/*
 * cli/cmd_reshard.c — `meshpoint reshard` and `meshpoint init`: the offline conversions, both the one
 * engine of reshard/ with different sources (a checkpoint; the seeded initialisation) and the same
 * sink (a checkpoint laid out for a target tp x dp mesh, exactly what a job on that mesh saves).
 *
 * Order of work, so that a refusal never leaves anything behind:
 *   1. flags, source (complete checkpoint, its model config), target layout (the model must fit the
 *      mesh), every target tensor present in the source with its shape, the destination (exists ->
 *      refuse unless --force; never the source itself), free disk (statvfs) for the bytes to write;
 *   2. --plan prints the I/O and stops;
 *   3. the sink creates DST.partial, every worker writes its share of the target rank files in row
 *      bands of at most --max-memory / 4 (the reader's scratch gets another quarter), the commit
 *      renames DST.partial -> DST (with --force: an atomic swap, the old one removed after it);
 *   4. unless --no-verify, DST is read back: every byte against its checksums, exact coverage.
 * Under mpirun -np K, target rank r's file is written by worker r % K; errors are agreed (one message).
 * Test hook: MP_RESHARD_FREE_BYTES overrides the free-disk figure of step 1.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/convert.h"
#include "cli/progress.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/alloc.h"
#include "core/log.h"
#include "reshard/reshard.h"

/* Copies every metadata entry of the source checkpoint to the sink; only the mesh changes: "mesh" is
 * rewritten for tp x dp, and train_config's tp and dp fields follow it. */
static mp_code copy_meta(ckpt_reader *r, rs_sink *sink, int tp, int dp, mp_err *e) {
    for (int i = 0; i < ckpt_num_meta(r); i++) {
        const char *k = ckpt_meta_key(r, i), *v = ckpt_meta_value(r, i);
        mp_code rc;
        if (!strcmp(k, "mesh")) {
            /* the mesh fields change; the run's wall time so far (elapsed_s, kept here) carries over */
            cJSON *old = cJSON_Parse(v);
            const cJSON *el = old ? cJSON_GetObjectItemCaseSensitive(old, "elapsed_s") : NULL;
            char buf[256];
            int n = snprintf(buf, sizeof buf, "{\"world\": %d, \"tp\": %d, \"dp\": %d, \"sp\": %s", tp * dp, tp, dp,
                             tp > 1 ? "true" : "false");
            if (cJSON_IsNumber(el)) n += snprintf(buf + n, sizeof buf - (size_t)n, ", \"elapsed_s\": %.17g", el->valuedouble);
            snprintf(buf + n, sizeof buf - (size_t)n, "}");
            cJSON_Delete(old);
            rc = sink->meta(sink, k, buf, e);
        } else if (!strcmp(k, "train_config")) {
            cJSON *j = cJSON_Parse(v);
            if (!j) return mp_err_set(e, MP_ECHECK, "checkpoint %s: metadata train_config is not JSON", ckpt_reader_dir(r));
            if (cJSON_GetObjectItemCaseSensitive(j, "tp")) cJSON_ReplaceItemInObjectCaseSensitive(j, "tp", cJSON_CreateNumber(tp));
            if (cJSON_GetObjectItemCaseSensitive(j, "dp")) cJSON_ReplaceItemInObjectCaseSensitive(j, "dp", cJSON_CreateNumber(dp));
            char *txt = cJSON_PrintUnformatted(j);
            rc = sink->meta(sink, k, txt, e);
            free(txt);
            cJSON_Delete(j);
        } else {
            rc = sink->meta(sink, k, v, e);
        }
        MP_TRY(rc);
    }
    return MP_OK;
}

/* Options shared by reshard and init. */
typedef struct conv_opts {
    const char *out, *max_memory;
    int tp, dp, set_tp, set_dp, force, plan, json, no_verify, model_only, sp, set_sp;
    size_t max_bytes;
} conv_opts;

/* Steps 1 (destination and disk) to 4 of the top of this file, once source, layout and the source's
 * metadata step are known. meta_fn fills the sink's metadata. Collective over the runtime's world. */
static int run_conversion(mp_runtime *rt, const char *cmd, rs_source *src, const char *src_dir, const rs_box *boxes,
                          int n, int64_t step, conv_opts *o,
                          mp_code (*meta_fn)(void *ctx, rs_sink *sink, mp_err *e), void *meta_ctx) {
    mp_err err;
    mp_err_clear(&err);
    size_t band = o->max_bytes / 4;
    int world = o->tp * o->dp;
    if (o->plan) {
        int64_t rd = 0, wr = 0;
        mp_code rc = MP_OK;
        if (rt->rank == 0) rc = rs_plan_print(src, boxes, n, world, band, o->json, stdout, &rd, &wr, &err);
        mp_code agreed = mp_runtime_agree(rt, rc, &err);
        return mp_exit_status(agreed);
    }
    int64_t need = 0;
    for (int i = 0; i < n; i++) need += rs_box_bytes(&boxes[i]);
    /* the destination is checked on every rank; agreed, so that a rank that finds it unusable does not
     * leave the others waiting in the sink's collective start */
    mp_code agreed = mp_runtime_agree(rt, mp_ckpt_check_out(o->out, src_dir, "the source checkpoint", o->force, need, &err),
                                      &err);
    if (agreed) return mp_exit_status(agreed);
    mp_comm *workers = rt->mesh.world_comm;
    rs_sink *sink = NULL;
    mp_code rc = rs_sink_ckpt(&sink, workers, o->out, step, world, o->force, band, 0, &err);
    if (rc) return mp_runtime_fail(rt, &err);   /* agreed inside ckpt_save_begin_dir: same on every rank */
    rc = meta_fn(meta_ctx, sink, &err);
    rs_stats st;
    mp_err re;
    mp_code rrc = rs_run(src, sink, boxes, n, rt->rank, rt->world, &st, &re);   /* collective commit */
    sink->free(sink);
    if (rc == MP_OK) { rc = rrc; err = re; }
    if (rc) return mp_runtime_fail(rt, &err);   /* the commit agreed: every rank has the same error */
    float v[4] = {(float)(st.bytes_read / 1048576.0), (float)(st.bytes_needed / 1048576.0),
                  (float)(st.bytes_written / 1048576.0), (float)(st.largest_band / 1048576.0)};
    workers->all_reduce(workers, v, 3, MP_F32, 0);
    workers->all_reduce(workers, v + 3, 1, MP_F32, 1);
    if (rt->rank == 0)
        fprintf(stderr,
                "meshpoint %s: wrote %s for tp %d x dp %d (%d rank files, %.2f MiB) in %.2f s; read %.2f MiB for "
                "%.2f MiB needed (ratio %.3f); largest piece in memory %.2f MiB (--max-memory %.0f MiB)\n",
                cmd, o->out, o->tp, o->dp, world, v[2], st.seconds, v[0], v[1], v[1] > 0 ? v[0] / v[1] : 1.0, v[3],
                o->max_bytes / 1048576.0);
    return o->no_verify ? 0 : mp_runtime_verify_written(rt, o->out, o->max_bytes / 2);
}

/* The flags reshard and init share: entries of an mp_arg table over a conv_opts o. */
#define CONV_FLAGS(o)                                                                                              \
    {"tp", MP_ARG_INT, &(o).tp, "N", "target tensor-parallel degree", .set = &(o).set_tp, .dflt = "required"},                           \
    {"dp", MP_ARG_INT, &(o).dp, "N", "target data-parallel degree", .set = &(o).set_dp, .dflt = "required"},                             \
    {"out", MP_ARG_STRING, &(o).out, "DIR", "the new checkpoint directory (must not exist, unless --force)"},        \
    {"max-memory", MP_ARG_STRING, &(o).max_memory, "SIZE", "memory bound for data buffers (e.g. 256M, 1G)"},         \
    {"plan", MP_ARG_SWITCH, &(o).plan, NULL, "dry run: print what each target rank reads and writes"},              \
    {"json", MP_ARG_SWITCH, &(o).json, NULL, "the --plan as JSON"},                                                  \
    {"force", MP_ARG_SWITCH, &(o).force, NULL, "replace an existing --out (swapped only once the new one is complete)"}, \
    {"no-verify", MP_ARG_SWITCH, &(o).no_verify, NULL, "skip reading the result back"},                              \
    {"sp", MP_ARG_SWITCH, &(o).sp, NULL, "accepted for symmetry with train; no effect on a checkpoint", .set = &(o).set_sp, .dflt = ""}

/* Common flag checks after parsing. */
static mp_code check_conv_flags(conv_opts *o, mp_err *e) {
    if (!o->set_tp || !o->set_dp) return mp_err_set(e, MP_EINPUT, "--tp N and --dp N (the target mesh) are required");
    if (o->tp < 1 || o->dp < 1) return mp_err_set(e, MP_EINPUT, "--tp and --dp must be >= 1 (got %d, %d)", o->tp, o->dp);
    if (!o->plan && !o->out) return mp_err_set(e, MP_EINPUT, "--out DIR is required (or --plan for a dry run)");
    if (o->json && !o->plan) return mp_err_set(e, MP_EINPUT, "--json goes with --plan");
    return mp_args_parse_size(o->max_memory, "--max-memory", 4 * 1048576, &o->max_bytes, e);
}

/* Notes that sequence parallelism is no property of a checkpoint. */
static void note_sp(const mp_runtime *rt, const conv_opts *o) {
    if (o->set_sp && rt->rank == 0)
        fprintf(stderr, "%s: note: --sp%s is ignored: sequence parallelism is chosen when training, it does not "
                        "change what a checkpoint stores (a tp %d job may train with or without it)\n",
                mp_log_prog(), o->sp ? "" : " off", o->tp);
}

/* ---------------------------------------------------------------------------------- reshard */

typedef struct reshard_meta_ctx {
    ckpt_reader *r;
    int tp, dp;
} reshard_meta_ctx;

static mp_code reshard_meta(void *ctx, rs_sink *sink, mp_err *e) {
    reshard_meta_ctx *m = ctx;
    return copy_meta(m->r, sink, m->tp, m->dp, e);
}

static const char *reshard_about =
    "Converts checkpoint SRC (a step directory, a checkpoint root or a run directory: its newest complete\n"
    "checkpoint) into a checkpoint for a tp x dp mesh at --out, exactly what a job on that mesh would save:\n"
    "parameters, both Adam moments (unless --model-only) and all run state (step, data cursor, schedule,\n"
    "configs; only the mesh changes). Streams box by box in bounded memory, reads only the saved tiles each\n"
    "target box needs, commits atomically (OUT.partial, renamed at the end) and reads the result back.\n"
    "Runs in one process or under mpirun -np K (the target rank files divided among the K processes).";

int mp_cmd_reshard(int argc, char **argv) {
    conv_opts o = {.max_memory = "256M", .tp = 1, .dp = 1};
    const mp_arg flags[] = {
        CONV_FLAGS(o),
        {"model-only", MP_ARG_SWITCH, &o.model_only, NULL, "drop the optimizer moments (for eval and export)"},
        {0}};
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK);
    char *src_dir = NULL;
    rs_source *src = NULL;
    rs_box *boxes = NULL;
    int n = 0;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint reshard SRC --tp N --dp N --out DIR [options]", reshard_about, flags);
        goto done;
    }
    if (npos == 0) { mp_err_set(&err, MP_EINPUT, "SRC (the checkpoint to convert) is missing"); goto fail; }
    if (npos > 1) { mp_err_set(&err, MP_EINPUT, "one SRC checkpoint expected, got %d arguments", npos); goto fail; }
    if (check_conv_flags(&o, &err)) goto fail;
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", &err)) goto fail;
    note_sp(&rt, &o);
    llama_config mc;
    if (mp_convert_open_ckpt(argv[0], o.max_bytes / 4, &src_dir, &src, &mc, &err)) goto fail;
    ckpt_reader *r = rs_source_ckpt_reader(src);
    if (mp_convert_target_layout(&mc, o.tp, o.dp, o.model_only, &boxes, &n, &err)) goto fail;
    if (mp_convert_check_tensors(r, boxes, n, &err)) goto fail;
    if (mp_runtime_test_fail(&rt, "reshard: source", &err)) goto fail;
    mp_code agreed = mp_runtime_agree(&rt, MP_OK, NULL);   /* another rank may have failed, and said so */
    if (agreed) { status = mp_exit_status(agreed); goto done; }
    reshard_meta_ctx mctx = {r, o.tp, o.dp};
    status = run_conversion(&rt, "reshard", src, src_dir, boxes, n, ckpt_reader_step(r), &o, reshard_meta, &mctx);
    goto done;
fail:
    status = mp_runtime_fail_agreed(&rt, &err);   /* the source may fail on some ranks only */
done:
    free(boxes);
    if (src) src->close(src);
    free(src_dir);
    mp_runtime_end(&rt);
    return status;
}

/* ------------------------------------------------------------------------------------- init */

typedef struct init_meta_ctx {
    const llama_config *mc;
    const mp_train_config *tc;
    int tp, dp;
} init_meta_ctx;

static mp_code init_meta(void *ctx, rs_sink *sink, mp_err *e) {
    init_meta_ctx *m = ctx;
    mp_run_state st = {0, {0, 0}, 0, 0};
    return mp_run_meta(mp_convert_put_meta, sink, m->mc, m->tc, m->tp, m->dp, &st, e);
}

static const char *init_about =
    "Writes a step-0 checkpoint of the seeded initialisation of the config's model (zero Adam moments) laid\n"
    "out for a tp x dp mesh: bitwise what `meshpoint train --steps 0 --ckpt-every 1` saves on that mesh.\n"
    "Any mesh, any model size: the initial values are generated box by box in bounded memory.";

int mp_cmd_init(int argc, char **argv) {
    conv_opts o = {.max_memory = "256M", .tp = 1, .dp = 1};
    const char *config = NULL;
    mp_train_config tc;
    mp_train_config_default(&tc);
    int64_t seed = (int64_t)tc.seed;
    int set_seed = 0;
    const mp_arg flags[] = {
        {"config", MP_ARG_STRING, &config, "FILE", "model config (JSON, HF field names; its \"train\" object too)"},
        CONV_FLAGS(o),
        {"seed", MP_ARG_I64, &seed, "S", "initialisation seed", .set = &set_seed, .dflt = "the config's train.seed"},
        {0}};
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK);
    rs_source *src = NULL;
    rs_box *boxes = NULL;
    int n = 0;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint init --config FILE --tp N --dp N --out DIR [options]", init_about, flags);
        goto done;
    }
    if (npos) { mp_err_set(&err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]); goto fail; }
    if (!config) { mp_err_set(&err, MP_EINPUT, "--config FILE is required"); goto fail; }
    if (check_conv_flags(&o, &err)) goto fail;
    if (set_seed && seed < 0) { mp_err_set(&err, MP_EINPUT, "--seed must be >= 0, got %lld", (long long)seed); goto fail; }
    llama_config mc;
    llama_config_default(&mc);
    if (llama_config_load(config, &mc, &tc, &err)) goto fail;
    if (set_seed) tc.seed = (uint64_t)seed;
    tc.tp = o.tp;
    tc.dp = o.dp;
    if (mp_train_config_validate(&tc, &err)) { mp_err_wrap(&err, "%s: train", config); goto fail; }
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", &err)) goto fail;
    note_sp(&rt, &o);
    if (mp_convert_target_layout(&mc, o.tp, o.dp, 0, &boxes, &n, &err)) goto fail;
    if (rs_source_init(&src, &mc, tc.seed, &err)) goto fail;
    init_meta_ctx mctx = {&mc, &tc, o.tp, o.dp};
    mp_code agreed = mp_runtime_agree(&rt, MP_OK, NULL);   /* another rank may have failed, and said so */
    if (agreed) { status = mp_exit_status(agreed); goto done; }
    status = run_conversion(&rt, "init", src, NULL, boxes, n, 0, &o, init_meta, &mctx);
    goto done;
fail:
    status = mp_runtime_fail_agreed(&rt, &err);   /* the source may fail on some ranks only */
done:
    free(boxes);
    if (src) src->close(src);
    mp_runtime_end(&rt);
    return status;
}
