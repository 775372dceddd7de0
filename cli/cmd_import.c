/*
 * cli/cmd_import.c — `meshpoint import DIR --out CKPT [--tp T --dp D]`: a Hugging Face Llama directory
 * (config.json + model.safetensors, or a sharded index; F32, BF16 or F16) as a model-only meshpoint
 * checkpoint laid out for a tp x dp mesh — exactly what `reshard --model-only` of a checkpoint of the
 * same weights writes for that mesh, so `eval --checkpoint`, `sample` and `train --init-from` take it.
 * The reshard/ engine with an HF source and the checkpoint sink.
 *
 * Order of work, so that a refusal leaves nothing behind:
 *   1. flags; DIR/config.json through the one config parser (layers/llama_config.c: it refuses, naming the
 *      key, what the model cannot represent — biases, other architectures or model types, head_dim !=
 *      hidden/heads, RoPE variants it does not implement, unknown keys); every safetensors header
 *      (reshard/safetensors.c validates them); every tensor of the model present with its shape and an
 *      F32/BF16/F16 dtype, and no tensor the model would not use; the layout for the mesh;
 *   2. the destination (exists -> refuse unless --force; never DIR itself) and free disk;
 *   3. the checkpoint sink writes CKPT.partial, each worker its share of the rank files in row bands
 *      of at most --max-memory / 4, renamed to CKPT at the commit;
 *   4. unless --no-verify, CKPT is read back: every checksum, exact coverage.
 * The metadata is that of a step-0 checkpoint (mp_run_meta) with the default training config and the
 * mesh. Under mpirun -np K, target rank r's file is written by worker r % K; errors are agreed.
 */
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
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "reshard/reshard.h"

typedef struct import_opts {
    const char *out, *max_memory;
    int tp, dp, force, no_verify;
    size_t max_bytes;
} import_opts;

/* DIR/config.json parsed into *mc; its messages name the file and the key. */
static mp_code load_hf_config(const char *dir, llama_config *mc, mp_err *e) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!mp_fs_exists(path)) return mp_err_set(e, MP_EINPUT, "%s: no config.json: not a Hugging Face model directory", dir);
    mp_code rc = llama_config_load(path, mc, NULL, e);
    if (rc) e->code = rc = MP_EINPUT;
    return rc;
}

/* Steps 3 and 4 of the top of this file. Collective over the runtime's world. */
static int write_ckpt(mp_runtime *rt, rs_source *src, const rs_box *boxes, int n, const llama_config *mc,
                      const import_opts *o) {
    mp_err err;
    mp_err_clear(&err);
    rs_sink *sink = NULL;
    if (rs_sink_ckpt(&sink, rt->mesh.world_comm, o->out, 0, o->tp * o->dp, o->force, o->max_bytes / 4, 0, &err))
        return mp_runtime_fail(rt, &err);   /* agreed inside ckpt_save_begin_dir */
    mp_train_config tc;
    mp_train_config_default(&tc);
    tc.tp = o->tp;
    tc.dp = o->dp;
    mp_run_state st0 = {0};
    mp_code rc = mp_run_meta(mp_convert_put_meta, sink, mc, &tc, o->tp, o->dp, &st0, &err);
    rs_stats st;
    mp_err re;
    mp_code rrc = rs_run(src, sink, boxes, n, rt->rank, rt->world, &st, &re);   /* collective commit */
    sink->free(sink);
    if (rc == MP_OK) { rc = rrc; err = re; }
    if (rc) return mp_runtime_fail(rt, &err);
    if (rt->rank == 0)
        fprintf(stderr, "meshpoint import: wrote %s for tp %d x dp %d (%d rank files) in %.2f s; largest piece in memory "
                        "%.2f MiB (--max-memory %.0f MiB)\n",
                o->out, o->tp, o->dp, o->tp * o->dp, st.seconds, st.largest_band / 1048576.0, o->max_bytes / 1048576.0);
    return o->no_verify ? 0 : mp_runtime_verify_written(rt, o->out, o->max_bytes / 2);
}

static const char *import_about =
    "Reads a Hugging Face Llama directory DIR (config.json and model.safetensors, or the shards of\n"
    "model.safetensors.index.json; F32, BF16 or F16) into a model-only meshpoint checkpoint at --out laid out\n"
    "for a tp x dp mesh (step 0, no optimizer moments): what `eval --checkpoint` and `train --init-from` take.\n"
    "Configs the model cannot represent are refused naming the key. Streams in bounded memory, commits\n"
    "atomically (OUT.partial, renamed at the end) and reads the result back. Runs in one process or under\n"
    "mpirun -np K (the target rank files divided among the K processes).";

int mp_cmd_import(int argc, char **argv) {
    import_opts o = {.max_memory = "256M", .tp = 1, .dp = 1};
    const mp_arg flags[] = {
        {"out", MP_ARG_STRING, &o.out, "CKPT", "the checkpoint directory to write (must not exist, unless --force)"},
        {"tp", MP_ARG_INT, &o.tp, "N", "tensor-parallel degree of the target layout"},
        {"dp", MP_ARG_INT, &o.dp, "N", "data-parallel degree of the target layout"},
        {"max-memory", MP_ARG_STRING, &o.max_memory, "SIZE", "memory bound for data buffers (e.g. 256M, 1G)"},
        {"force", MP_ARG_SWITCH, &o.force, NULL, "replace an existing --out (swapped only once the new one is complete)"},
        {"no-verify", MP_ARG_SWITCH, &o.no_verify, NULL, "skip reading the result back"},
        {0}};
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK), n = 0;
    rs_source *src = NULL;
    rs_box *boxes = NULL;
    llama_config mc;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint import DIR --out CKPT [--tp N --dp N] [options]", import_about, flags);
        goto done;
    }
    if (npos != 1) {
        mp_err_set(&err, MP_EINPUT, npos ? "one DIR expected, got %d arguments" : "DIR (the HF model directory) is missing", npos);
        goto fail;
    }
    if (!o.out || !*o.out) { mp_err_set(&err, MP_EINPUT, "--out CKPT is required"); goto fail; }
    if (o.tp < 1 || o.dp < 1) { mp_err_set(&err, MP_EINPUT, "--tp and --dp must be >= 1 (got %d, %d)", o.tp, o.dp); goto fail; }
    if (mp_args_parse_size(o.max_memory, "--max-memory", 4 * 1048576, &o.max_bytes, &err)) goto fail;
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", &err)) goto fail;
    if (load_hf_config(argv[0], &mc, &err)) goto fail;
    if (rs_source_hf(&src, argv[0], &err) || rs_source_hf_check(src, &mc, &err)) goto fail;
    if (mp_convert_target_layout(&mc, o.tp, o.dp, 1, &boxes, &n, &err)) goto fail;
    int64_t need = 0;
    for (int i = 0; i < n; i++) need += rs_box_bytes(&boxes[i]);
    if (mp_ckpt_check_out(o.out, argv[0], "the HF directory", o.force, need, &err)) goto fail;
    if (mp_runtime_test_fail(&rt, "import: source", &err)) goto fail;
    mp_code agreed = mp_runtime_agree(&rt, MP_OK, NULL);   /* another rank may have failed, and said so */
    if (agreed) { status = mp_exit_status(agreed); goto done; }
    status = write_ckpt(&rt, src, boxes, n, &mc, &o);
    goto done;
fail:
    status = mp_runtime_fail_agreed(&rt, &err);   /* the source may fail on some ranks only */
done:
    free(boxes);
    if (src) src->close(src);
    mp_runtime_end(&rt);
    return status;
}
