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
 * Steps 1 (destination and disk) to 4 are cli/convert.c's mp_convert_write_ckpt, which import shares.
 * Test hook: the fault free_bytes overrides the free-disk figure of step 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/convert.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "reshard/reshard.h"

/* ---------------------------------------------------------------------------------- reshard */

static const char *reshard_about =
    "Converts checkpoint SRC (a step directory, a checkpoint root or a run directory: its newest complete\n"
    "checkpoint) into a checkpoint for a tp x dp mesh at --out, exactly what a job on that mesh would save:\n"
    "parameters, both Adam moments (unless --model-only) and all run state (step, data cursor, schedule,\n"
    "configs, carried tokenizer files; only the mesh changes). Streams box by box in bounded memory, reads only the saved tiles each\n"
    "target box needs, commits atomically (OUT.partial, renamed at the end) and reads the result back.\n"
    "Runs in one process or under mpirun -np K (the target rank files divided among the K processes).";

#define RESHARD_FLAGS (MP_CONV_MESH | MP_CONV_MESH_REQUIRED | MP_CONV_PLAN | MP_CONV_SP | MP_CONV_MODEL_ONLY)

int mp_cmd_reshard(int argc, char **argv) {
    mp_convert_opts o;
    mp_convert_opts_default(&o, "DIR");
    mp_arg flags[MP_CONVERT_MAX_FLAGS + 1] = {{0}};
    mp_convert_flags(&o, RESHARD_FLAGS, "the new checkpoint directory (must not exist, unless --force)", flags);
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK);
    char *src_dir = NULL;
    rs_source *src = NULL;
    rs_box *boxes = NULL;
    mp_tokfiles files = {0};
    int n = 0;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint reshard SRC --tp N --dp N --out DIR [options]", reshard_about, flags);
        goto done;
    }
    if (npos == 0) { mp_err_set(&err, MP_EINPUT, "SRC (the checkpoint to convert) is missing"); goto fail; }
    if (npos > 1) { mp_err_set(&err, MP_EINPUT, "one SRC checkpoint expected, got %d arguments", npos); goto fail; }
    if (mp_convert_check_flags(&o, RESHARD_FLAGS, &err)) goto fail;
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", NULL, &err)) goto fail;
    mp_convert_note_sp(&rt, &o);
    llama_config mc;
    if (mp_convert_open_ckpt(argv[0], o.max_bytes / 4, &src_dir, &src, &mc, &err)) goto fail;
    ckpt_reader *r = rs_source_ckpt_reader(src);
    if (mp_convert_target_layout(&mc, &o, o.model_only, &boxes, &n, &err)) goto fail;
    if (mp_convert_check_tensors(r, boxes, n, &err)) goto fail;
    if (mp_tokfiles_from_ckpt(&files, r, &err)) goto fail;
    mp_convert_meta meta = {.copy_from = r, .mc = &mc, .files = &files};
    status = mp_convert_write_ckpt(&rt, "reshard", src, src_dir, "the source checkpoint", boxes, n, &meta, &o);
    goto done;
fail:
    status = mp_runtime_exit_agreed(mp_runtime_agree(&rt, err.code, &err));   /* the source may fail on some ranks only */
done:
    free(boxes);
    mp_tokfiles_free(&files);
    if (src) src->close(src);
    free(src_dir);
    mp_runtime_end(&rt);
    return status;
}

/* ------------------------------------------------------------------------------------- init */

static const char *init_about =
    "Writes a step-0 checkpoint of the seeded initialisation of the config's model (zero Adam moments) laid\n"
    "out for a tp x dp mesh: bitwise what `meshpoint train --steps 0 --ckpt-every 1` saves on that mesh.\n"
    "Any mesh, any model size: the initial values are generated box by box in bounded memory.";

#define INIT_FLAGS (MP_CONV_MESH | MP_CONV_MESH_REQUIRED | MP_CONV_PLAN | MP_CONV_SP)

int mp_cmd_init(int argc, char **argv) {
    mp_convert_opts o;
    mp_convert_opts_default(&o, "DIR");
    const char *config = NULL;
    mp_train_config tc;
    mp_train_config_default(&tc);
    int64_t seed = (int64_t)tc.seed;
    int set_seed = 0;
    mp_arg flags[MP_CONVERT_MAX_FLAGS + 3] = {
        {"config", MP_ARG_STRING, &config, "FILE", "model config (JSON, HF field names; its \"train\" object too)"},
        {"seed", MP_ARG_I64, &seed, "S", "initialisation seed", .set = &set_seed, .dflt = "the config's train.seed"}};
    mp_convert_flags(&o, INIT_FLAGS, "the new checkpoint directory (must not exist, unless --force)", flags + 2);
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
    if (mp_convert_check_flags(&o, INIT_FLAGS, &err)) goto fail;
    if (set_seed && seed < 0) { mp_err_set(&err, MP_EINPUT, "--seed must be >= 0, got %lld", (long long)seed); goto fail; }
    llama_config mc;
    llama_config_default(&mc);
    if (llama_config_load(config, &mc, &tc, &err)) goto fail;
    if (set_seed) tc.seed = (uint64_t)seed;
    tc.tp = o.tp;
    tc.dp = o.dp;
    if (mp_train_config_validate(&tc, &err)) { mp_err_wrap(&err, "%s: train", config); goto fail; }
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", NULL, &err)) goto fail;
    mp_convert_note_sp(&rt, &o);
    if (mp_convert_target_layout(&mc, &o, 0, &boxes, &n, &err)) goto fail;
    if (rs_source_init(&src, &mc, tc.seed, &err)) goto fail;
    mp_convert_meta meta = {.mc = &mc, .tc = &tc};
    status = mp_convert_write_ckpt(&rt, "init", src, NULL, NULL, boxes, n, &meta, &o);
    goto done;
fail:
    status = mp_runtime_exit_agreed(mp_runtime_agree(&rt, err.code, &err));   /* the source may fail on some ranks only */
done:
    free(boxes);
    if (src) src->close(src);
    mp_runtime_end(&rt);
    return status;
}
