/*
 * cli/cmd_import.c — `meshpoint import DIR --out CKPT [--tp T --dp D]`: a Hugging Face model directory of
 * a family of layers/family.h — Llama, Mistral, Qwen2/2.5, Qwen3, Phi-3 (docs/FAMILIES.md) — (config.json
 * + model.safetensors, or a sharded index; F32, BF16 or F16) as a model-only meshpoint
 * checkpoint laid out for a tp x dp mesh — exactly what `reshard --model-only` of a checkpoint of the
 * same weights writes for that mesh, so `eval --checkpoint`, `sample` and `train --init-from` take it.
 * The reshard/ engine with an HF source and the checkpoint sink.
 *
 * DIR may also be a PyTorch Distributed Checkpoint (DCP) directory (recognised by its `.metadata`;
 * docs/DCP.md): then --config names the model's HF config.json, the tensors are read through
 * reshard/dcp_source.c under torchtitan's Llama 3 names or HF names (--names, else detected), and when the
 * DCP holds torchtitan's flattened AdamW state (optimizer.state.<fqn>.exp_avg, .exp_avg_sq, .step) the
 * checkpoint gets the moments and the step, so `train --resume-from` continues with them; the tokenizer
 * files come from the directory of CONFIG.
 *
 * DIR may also be a GGUF file (llama.cpp's; recognised by its magic): cli/import_gguf.c opens it as a source
 * (reshard/gguf_source.c: the config from its metadata, tensors dequantized by the block) and rebuilds its
 * tokenizer as the carried tokenizer.json + tokenizer_config.json (docs/GGUF.md, "Import").
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
 * The metadata is that of a step-0 checkpoint (a DCP with AdamW state: at its step) (mp_run_meta) with the default training config and the
 * mesh, at the family's format version (mp_ckpt_format_version: 3 for Llama, 4 for the others). Under
 * mpirun -np K, target rank r's file is written by worker r % K; errors are agreed.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/convert.h"
#include "cli/runtime.h"
#include "cli/train_ckpt.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "reshard/dcp.h"
#include "reshard/dcp_source.h"
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

/* The source of DIR: an HF directory (its config.json), or a DCP directory read as the model of config
 * (--config) under names (--names; NULL: detected). *mc gets the model, *info what the DCP holds (zero for
 * HF), *tokdir the directory whose tokenizer files travel (malloc'd). */
static mp_code open_import_source(const char *dir, const char *config, const char *names, llama_config *mc,
                                  rs_source **src, rs_dcp_info *info, char **tokdir, mp_err *e) {
    memset(info, 0, sizeof *info);
    if (!dcp_is_dir(dir)) {
        if (config || names)
            return mp_err_set(e, MP_EINPUT, "%s is a Hugging Face directory (no .metadata): --%s is for DCP directories",
                              dir, config ? "config" : "names");
        *tokdir = mp_strdup(dir);
        MP_TRY(load_hf_config(dir, mc, e));
        return rs_source_hf(src, dir, mc, e) || rs_source_hf_check(*src, e) ? e->code : MP_OK;
    }
    return mp_convert_open_dcp(dir, config, names, mc, src, info, tokdir, e);
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
    "through them, `train --init-from`, `reshard` and `export` carry them on.\n"
    "DIR may be a PyTorch Distributed Checkpoint directory (torchtitan, FSDP2: it has a .metadata) with\n"
    "--config the model's HF config.json: torchtitan's Llama 3 names (q/k rows permuted to HF's RoPE layout\n"
    "as torchtitan's HF adapter does) or HF names, detected or --names. When it holds torchtitan's AdamW state\n"
    "(optimizer.state.<name>.exp_avg, exp_avg_sq, step) the checkpoint has the moments and the step, for\n"
    "`train --resume-from`; otherwise it is model-only. The tokenizer files come from CONFIG's directory.\n"
    "DIR may be a GGUF file (llama.cpp's model file: architecture llama, qwen2, qwen3 or phi3): the config\n"
    "from its metadata, weights F32/F16/BF16 as they are and Q8_0/Q4_0/Q4_1 dequantized as ggml does (other\n"
    "types refused naming the tensor), its tokenizer carried as a rebuilt tokenizer.json + tokenizer_config.json.";

#define IMPORT_FLAGS MP_CONV_MESH

int mp_cmd_import(int argc, char **argv) {
    mp_convert_opts o;
    mp_convert_opts_default(&o, "CKPT");
    static const char *const name_sets[] = {"torchtitan", "hf", NULL};
    const char *config = NULL, *names = NULL;
    mp_arg flags[MP_CONVERT_MAX_FLAGS + 3] = {
        {"config", MP_ARG_STRING, &config, "CONFIG", "a DCP DIR's model: its HF config.json"},
        {"names", MP_ARG_STRING, &names, "SET", "a DCP DIR's tensor names (default: detected from the keys)", name_sets}};
    mp_convert_flags(&o, IMPORT_FLAGS, "the checkpoint directory to write (must not exist, unless --force)", flags + 2);
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK), n = 0;
    rs_source *src = NULL;
    rs_box *boxes = NULL;
    mp_tokfiles files = {0};
    llama_config mc;
    rs_dcp_info info;
    char *tokdir = NULL;
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0)
            mp_args_help(stdout, "meshpoint import DIR|DCP_DIR|MODEL.gguf [--config CONFIG] --out CKPT [--tp N --dp N] [options]",
                         import_about, flags);
        goto done;
    }
    if (npos != 1) {
        mp_err_set(&err, MP_EINPUT, npos ? "one DIR expected, got %d arguments" : "DIR (the HF model directory) is missing", npos);
        goto fail;
    }
    if (mp_convert_check_flags(&o, IMPORT_FLAGS, &err)) goto fail;
    if (mp_runtime_mesh(&rt, 1, rt.world, "cpu", NULL, &err)) goto fail;
    int gguf = mp_convert_is_gguf(argv[0]);
    memset(&info, 0, sizeof info);
    if (gguf ? (config || names ? mp_err_set(&err, MP_EINPUT, "%s is a GGUF file: --%s is for DCP directories", argv[0],
                                             config ? "config" : "names")
                                : mp_convert_open_gguf(argv[0], &mc, &src, &files, &err))
             : open_import_source(argv[0], config, names, &mc, &src, &info, &tokdir, &err))
        goto fail;
    if (mp_convert_target_layout(&mc, &o, !info.moments, &boxes, &n, &err)) goto fail;
    mp_train_config tc;
    mp_train_config_default(&tc);
    if (!gguf && mp_tokfiles_from_dir(&files, tokdir, &err)) goto fail;
    if (info.spelling && rt.rank == 0)
        fprintf(stderr, "meshpoint import: %s: PyTorch DCP, names %s, %d tensors read; %s\n", argv[0], info.spelling,
                info.ntensors, info.moments ? "AdamW moments carried" : "model only (no AdamW state)");
    if (info.moments && rt.rank == 0) fprintf(stderr, "meshpoint import: AdamW step %lld\n", (long long)info.step);
    mp_convert_meta meta = {.mc = &mc, .tc = &tc, .files = &files, .step = info.step};
    status = mp_convert_write_ckpt(&rt, "import", src, argv[0],
                                   gguf ? "the GGUF file" : info.spelling ? "the DCP directory" : "the HF directory",
                                   boxes, n, &meta, &o);
    goto done;
fail:
    status = mp_runtime_exit_agreed(mp_runtime_agree(&rt, err.code, &err));   /* the source may fail on some ranks only */
done:
    free(boxes);
    free(tokdir);
    mp_tokfiles_free(&files);
    if (src) src->close(src);
    mp_runtime_end(&rt);
    return status;
}
