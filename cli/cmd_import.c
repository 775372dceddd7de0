/*
 * cli/cmd_import.c — `meshpoint import DIR --out CKPT [--tp T --dp D]`: a Hugging Face model directory of
 * a family of layers/family.h — Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3 (docs/FAMILIES.md) — (config.json
 * + model.safetensors, or a sharded index; F32, BF16 or F16) as a model-only meshpoint
 * checkpoint laid out for a tp x dp mesh — exactly what `reshard --model-only` of a checkpoint of the
 * same weights writes for that mesh, so `eval --checkpoint`, `sample` and `train --init-from` take it.
 * The reshard/ engine with an HF source and the checkpoint sink.
 *
 * Order of work, so that a refusal leaves nothing behind:
 *   1. flags; DIR/config.json through the one config parser (layers/llama_config.c: it refuses, naming the
 *      key, what the model cannot represent — a model_type outside the family table (naming the supported
 *      ones), an architecture other than the family's, biases the family does not have, an odd head_dim,
 *      RoPE variants it does not implement, unknown keys: docs/FAMILIES.md); every safetensors header
 *      (reshard/safetensors.c validates them); every tensor of the model present with its shape and an
 *      F32/BF16/F16 dtype, and no tensor the model would not use; the layout for the mesh;
 *   2. the destination (exists -> refuse unless --force; never DIR itself) and free disk;
 *   3. the checkpoint sink writes CKPT.partial, each worker its share of the rank files in row bands
 *      of at most --max-memory / 4, renamed to CKPT at the commit;
 *   4. unless --no-verify, CKPT is read back: every checksum, exact coverage.
 * The tokenizer files of DIR (cli/tokfiles.c) are carried into the checkpoint (docs/FORMAT.md, "Carried
 * files"). Steps 2 to 4 are cli/convert.c's mp_convert_write_ckpt, the one reshard and init use.
 * The metadata is that of a step-0 checkpoint (mp_run_meta) with the default training config and the
 * mesh, at the family's format version (mp_ckpt_format_version: 3 for Llama, 4 for the others). Under
 * mpirun -np K, target rank r's file is written by worker r % K; errors are agreed.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/convert.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/fsutil.h"
#include "reshard/reshard.h"

/* DIR/config.json parsed into *mc; its messages name the file and the key. */
static mp_code load_hf_config(const char *dir, llama_config *mc, mp_err *e) {
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (!mp_fs_exists(path)) return mp_err_set(e, MP_EINPUT, "%s: no config.json: not a Hugging Face model directory", dir);
    mp_code rc = llama_config_load(path, mc, NULL, e);
    if (rc) e->code = rc = MP_EINPUT;
    return rc;
}

static const char *import_about =
    "Reads a Hugging Face model directory DIR of a supported family (Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3;\n"
    "config.json and model.safetensors, or the shards of model.safetensors.index.json; F32, BF16 or F16)\n"
    "into a model-only meshpoint checkpoint at --out laid out for a tp x dp mesh (step 0, no optimizer\n"
    "moments): what `eval --checkpoint` and `train --init-from` take.\n"
    "Configs the model cannot represent are refused naming the key. Streams in bounded memory, commits\n"
    "atomically (OUT.partial, renamed at the end) and reads the result back. Runs in one process or under\n"
    "mpirun -np K (the target rank files divided among the K processes). The tokenizer files DIR has\n"
    "(tokenizer.json, tokenizer_config.json, special_tokens_map.json, added_tokens.json, chat_template.jinja,\n"
    "tokenizer.model, generation_config.json) travel with the checkpoint, checksummed: `sample` speaks text\n"
    "through them, `train --init-from`, `reshard` and `export` carry them on.";

#define IMPORT_FLAGS MP_CONV_MESH

int mp_cmd_import(int argc, char **argv) {
    mp_convert_opts o;
    mp_convert_opts_default(&o, "CKPT");
    mp_arg flags[MP_CONVERT_MAX_FLAGS + 1] = {{0}};
    mp_convert_flags(&o, IMPORT_FLAGS, "the checkpoint directory to write (must not exist, unless --force)", flags);
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK), n = 0;
    rs_source *src = NULL;
    rs_box *boxes = NULL;
    mp_tokfiles files = {0};
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
    if (mp_convert_check_flags(&o, IMPORT_FLAGS, &err)) goto fail;
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", &err)) goto fail;
    if (load_hf_config(argv[0], &mc, &err)) goto fail;
    if (rs_source_hf(&src, argv[0], &mc, &err) || rs_source_hf_check(src, &err)) goto fail;
    if (mp_convert_target_layout(&mc, &o, 1, &boxes, &n, &err)) goto fail;
    mp_train_config tc;
    mp_train_config_default(&tc);
    if (mp_tokfiles_from_dir(&files, argv[0], &err)) goto fail;
    mp_convert_meta meta = {.mc = &mc, .tc = &tc, .files = &files};
    status = mp_convert_write_ckpt(&rt, "import", src, argv[0], "the HF directory", boxes, n, &meta, &o);
    goto done;
fail:
    status = mp_runtime_fail_agreed(&rt, &err);   /* the source may fail on some ranks only */
done:
    free(boxes);
    mp_tokfiles_free(&files);
    if (src) src->close(src);
    mp_runtime_end(&rt);
    return status;
}
