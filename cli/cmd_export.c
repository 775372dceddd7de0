/*
 * cli/cmd_export.c — `meshpoint export CKPT --out DIR`: a checkpoint's model as a Hugging Face
 * directory (config.json, generation_config.json, safetensors) that transformers' class of the model's
 * family (LlamaForCausalLM, Qwen3ForCausalLM, ...: layers/family.h) loads. The reshard/ engine with a checkpoint source and an HF sink: each model/ tensor is one box,
 * read from whatever mesh saved it (only its tiles) and streamed to the safetensors file in row bands
 * under --max-memory; optimizer moments are never read, so full and --model-only checkpoints export
 * alike.
 *
 * Order of work, so that a refusal leaves nothing behind: flags; the checkpoint (complete, its model
 * config, every model tensor present with its shape); the destination (exists -> refuse unless
 * --force; never the checkpoint itself; free disk: cli/ckpt_common.c's mp_ckpt_check_out, as import
 * and reshard); then DIR.partial is written and renamed to DIR (the HF
 * sink); finally the result is read back: every safetensors header validated, every tensor of the
 * model present with its shape, config.json parsed back to the same model config, and the carried files
 * compared. The tokenizer files the checkpoint carries (cli/tokfiles.h) are read, checked (their bytes count
 * in the free-disk check), and written beside them by the sink.
 * CKPT may also be a PyTorch DCP directory (recognised by its `.metadata`) with --config, the model's HF
 * config.json: the same sink reads through reshard/dcp_source.c (torchtitan or HF names, detected) and the
 * tokenizer files of CONFIG's directory travel: DCP -> HF in bounded memory, no meshpoint checkpoint between.
 * One process: under mpirun with more than one rank it refuses.
 *
 * --format dcp: the same engine with reshard/dcp_sink.c's sink (a PyTorch DCP directory), the target
 * layout of --tp x --dp (default 1 x 1) so each rank's box is one chunk, read back with reshard/dcp.c and
 * `ckpt verify`'s checks (cli/ckpt_dcp.c). Carried tokenizer files have no place in a DCP directory.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/convert.h"
#include "cli/memplan.h"
#include "cli/runtime.h"
#include "cli/tokfiles.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "reshard/dcp.h"
#include "reshard/dcp_source.h"
#include "reshard/gguf.h"
#include "reshard/reshard.h"
#include "tokenizer/tok_gguf.h"

/* --max-shard-size: "5GB", "500MB", "10KB" are decimal units as transformers reads them (5GB = 5e9
 * bytes); "5G", "5GiB", "256M" powers of 1024 as every other size flag (mp_args_parse_size). */
static mp_code parse_shard_size(const char *s, int64_t *out, mp_err *e) {
    size_t n = strlen(s);
    size_t v = 0;
    if (n >= 3 && s[n - 1] == 'B' && strchr("KMGT", s[n - 2])) {
        char num[64];
        if (n - 2 >= sizeof num) return mp_err_set(e, MP_EINPUT, "--max-shard-size: \"%s\" is not a size", s);
        memcpy(num, s, n - 2);
        num[n - 2] = '\0';
        MP_TRY(mp_args_parse_size(num, "--max-shard-size", 1, &v, e));
        double mul = s[n - 2] == 'K' ? 1e3 : s[n - 2] == 'M' ? 1e6 : s[n - 2] == 'G' ? 1e9 : 1e12;
        if ((double)v * mul >= 0x1p62) return mp_err_set(e, MP_EINPUT, "--max-shard-size: %s is out of range", s);
        *out = (int64_t)((double)v * mul);
        return MP_OK;
    }
    MP_TRY(mp_args_parse_size(s, "--max-shard-size", 1, &v, e));
    *out = (int64_t)v;
    return MP_OK;
}

/* Reads the exported directory back: headers, tensor set and shapes, config.json = cfg, and the carried
 * files byte for byte. */
static mp_code verify_export(const char *dir, const llama_config *cfg, const mp_tokfiles *files, mp_err *e) {
    rs_source *s = NULL;
    MP_TRY(rs_source_hf(&s, dir, cfg, e));
    mp_code rc = rs_source_hf_check(s, e);
    s->close(s);
    MP_TRY(rc);
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/config.json", dir);
    llama_config back;
    MP_TRY(llama_config_load(path, &back, NULL, e));
    if (llama_config_diff(&back, cfg, LLAMA_CF_NONE))   /* every field, rope_scaling included */
        return mp_err_set(e, MP_ECHECK, "%s does not read back as the checkpoint's model config", path);
    return mp_tokfiles_check_dir(files, dir, e);
}

typedef struct export_opts {
    mp_convert_opts c;   /* --out, --max-memory, --force, --no-verify; DCP: --tp, --dp, --model-only */
    const char *dtype, *max_shard, *format, *names, *config;
    int64_t shard_bytes;
} export_opts;

/* Reads a written DCP directory back with meshpoint's own reader: what `ckpt verify` checks (coverage,
 * every record's zip and pickle, files and offsets), and every chunk of boxes there with its tensor's
 * shape (under its DCP name). */
static mp_code verify_dcp(const char *dir, const llama_config *cfg, rs_dcp_names names, const rs_box *b, int n,
                          mp_err *e) {
    dcp_dir *d = NULL;
    MP_TRY(dcp_open(&d, dir, e));
    mp_ckpt_problems pr = {.list = cJSON_CreateArray(), .notes = cJSON_CreateArray()};
    mp_ckpt_dcp_check(d, &pr);
    mp_code rc = MP_OK;
    if (pr.n) rc = mp_err_set(e, MP_ECHECK, "%d problem%s, the first: %s", pr.n, pr.n == 1 ? "" : "s",
                              cJSON_GetArrayItem(pr.list, 0)->valuestring);
    rs_dcp_spelling sp = rs_dcp_spelling_of(names);
    for (int i = 0; i < n && !rc; i++) {
        rs_dcp_place pl;
        rc = rs_dcp_name(cfg, &sp, b[i].name, &pl, e);
        int k = rc ? -1 : dcp_find(d, pl.fqn);
        if (rc) break;
        int64_t rows = pl.rows ? pl.rows : b[i].gshape[0];
        if (k < 0 || d->t[k].ndim != b[i].ndim || d->t[k].shape[0] != rows || (b[i].ndim == 2 && d->t[k].shape[1] != b[i].gshape[1]))
            rc = mp_err_set(e, MP_ECHECK, "%s: tensor %s (of %s) is %s", dir, pl.fqn, b[i].name, k < 0 ? "missing" : "of another shape");
    }
    cJSON_Delete(pr.list);
    cJSON_Delete(pr.notes);
    dcp_close(d);
    return rc;
}

/* `export --format dcp`: the boxes of the checkpoint's tp x dp layout (each rank's box a chunk, each rank
 * a file), the Adam moments when the checkpoint has them (unless --model-only), into a DCP sink. */
static mp_code run_export_dcp(const mp_runtime *rt, const char *arg, export_opts *o, mp_err *err) {
    char *src_dir = NULL;
    rs_source *src = NULL;
    rs_sink *sink = NULL;
    rs_box *boxes = NULL;
    int n = 0;
    rs_dcp_names names = (rs_dcp_names)rs_dcp_names_parse(o->names);
    llama_config mc;
    mp_code rc = mp_convert_open_ckpt(arg, o->c.max_bytes / 4, &src_dir, &src, &mc, err);
    ckpt_reader *r = rc ? NULL : rs_source_ckpt_reader(src);
    int model_only = o->c.model_only || (r && ckpt_tensor_find(r, "optim/exp_avg/model.embed_tokens.weight") < 0);
    if (!rc) rc = rs_dcp_check_names(&mc, names, err);
    if (!rc) rc = mp_convert_target_layout(&mc, &o->c, model_only, &boxes, &n, err);
    if (!rc) rc = mp_convert_check_tensors(r, boxes, n, err);
    if (!rc) rc = mp_ckpt_check_out(o->c.out, src_dir, "the source checkpoint", o->c.force, mp_convert_bytes(boxes, n), err);
    if (!rc) rc = rs_sink_dcp(&sink, o->c.out, &mc, names, !strcmp(o->dtype, "bf16") ? "BF16" : "F32",
                              model_only ? -1 : ckpt_reader_step(r), o->c.max_bytes / 4, o->c.force, err);
    rs_stats st;
    if (!rc) rc = rs_run(src, sink, boxes, n, 0, 1, &st, err);
    if (!rc)
        fprintf(stderr, "meshpoint export: wrote %s (DCP, %s names, %s, %s, %d chunks in %d files, %.2f MiB as fp32) in "
                        "%.2f s; largest piece in memory %.2f MiB (--max-memory %.0f MiB)\n", o->c.out, o->names, o->dtype,
                model_only ? "model only" : "model and Adam moments", n, rs_num_files(boxes, n),
                st.bytes_written / 1048576.0, st.seconds, st.largest_band / 1048576.0, o->c.max_bytes / 1048576.0);
    if (!rc && !o->c.no_verify) {
        if ((rc = verify_dcp(o->c.out, &mc, names, boxes, n, err))) mp_err_wrap(err, "reading %s back after writing it", o->c.out);
        else fprintf(stderr, "meshpoint export: verified %s with meshpoint's DCP reader: every tensor and shape, chunks "
                             "covering each once, every record's zip and pickle\n", o->c.out);
    }
    if (!rc) mp_memplan_report(rt, (int64_t)o->c.max_bytes);
    if (sink) sink->free(sink);
    if (src) src->close(src);
    free(boxes);
    free(src_dir);
    return rc;
}

/* The source of a DCP directory dir read as the model of o->config, and the tokenizer files of CONFIG's
 * directory; *src_dir gets a copy of dir. */
static mp_code open_dcp(const char *dir, const export_opts *o, char **src_dir, rs_source **src, llama_config *mc,
                        mp_tokfiles *files, mp_err *e) {
    *src_dir = mp_strdup(dir);
    rs_dcp_info info;
    char *tokdir = NULL;
    mp_code rc = mp_convert_open_dcp(dir, o->config, NULL, mc, src, &info, &tokdir, e);
    if (!rc) fprintf(stderr, "meshpoint export: %s: PyTorch DCP, names %s\n", dir, info.spelling);
    if (!rc) rc = mp_tokfiles_from_dir(files, tokdir, e);
    free(tokdir);
    return rc;
}

/* The source of an export of whole tensors (HF, GGUF): a checkpoint (every model tensor checked against
 * the layout, its carried tokenizer files) or a DCP directory with --config (CONFIG's directory's files);
 * the HF layout's boxes into *boxes, *n. The out-parameters are set as far as they got, for the caller to
 * free also on failure. */
static mp_code open_whole(const char *arg, const export_opts *o, char **src_dir, rs_source **src, llama_config *mc,
                          mp_tokfiles *files, rs_box **boxes, int *n, mp_err *err) {
    int dcp = dcp_is_dir(arg);
    mp_code rc = dcp ? open_dcp(arg, o, src_dir, src, mc, files, err)
                     : o->config ? mp_err_set(err, MP_EINPUT, "--config is for a DCP directory; %s has no .metadata", arg)
                     : mp_convert_open_ckpt(arg, o->c.max_bytes / 4, src_dir, src, mc, err);
    if (!rc) rc = rs_hf_layout(mc, boxes, n, err);
    if (!rc && !dcp) rc = mp_convert_check_tensors(rs_source_ckpt_reader(*src), *boxes, *n, err);
    if (!rc && !dcp) rc = mp_tokfiles_from_ckpt(files, rs_source_ckpt_reader(*src), err);
    return rc;
}

/* The conversion once flags are checked: source, layout, sink, run, read back. */
static mp_code run_export(const mp_runtime *rt, const char *arg, export_opts *o, mp_err *err) {
    char *src_dir = NULL;
    rs_source *src = NULL;
    rs_sink *sink = NULL;
    rs_box *boxes = NULL;
    int n = 0;
    llama_config mc;
    mp_tokfiles files = {0};
    int dcp = dcp_is_dir(arg);
    mp_code rc = open_whole(arg, o, &src_dir, &src, &mc, &files, &boxes, &n, err);
    if (!rc)
        rc = mp_ckpt_check_out(o->c.out, src_dir, dcp ? "the DCP directory" : "the source checkpoint", o->c.force,
                               mp_convert_bytes(boxes, n) + mp_tokfiles_bytes(&files), err);
    if (!rc) rc = rs_sink_hf(&sink, o->c.out, &mc, !strcmp(o->dtype, "bf16") ? "BF16" : "F32", o->shard_bytes,
                             o->c.max_bytes / 4, o->c.force, err);
    if (!rc) rc = mp_tokfiles_put(&files, sink, err);
    rs_stats st;
    if (!rc) rc = rs_run(src, sink, boxes, n, 0, 1, &st, err);
    if (!rc)
        fprintf(stderr, "meshpoint export: wrote %s (%s, %d tensors, %.2f MiB as fp32) in %.2f s; read %.2f MiB; largest "
                        "piece in memory %.2f MiB (--max-memory %.0f MiB)\n",
                o->c.out, o->dtype, n, st.bytes_written / 1048576.0, st.seconds, st.bytes_read / 1048576.0,
                st.largest_band / 1048576.0, o->c.max_bytes / 1048576.0);
    if (!rc && !o->c.no_verify) {
        if ((rc = verify_export(o->c.out, &mc, &files, err))) mp_err_wrap(err, "reading %s back after writing it", o->c.out);
        else fprintf(stderr, "meshpoint export: verified %s: every header, tensor and shape, config.json and %d carried "
                             "file%s\n", o->c.out, files.n, files.n == 1 ? "" : "s");
    }
    if (!rc) mp_memplan_report(rt, (int64_t)o->c.max_bytes);
    mp_tokfiles_free(&files);
    if (sink) sink->free(sink);
    if (src) src->close(src);
    free(boxes);
    free(src_dir);
    return rc;
}

/* general.name of a GGUF export: --out's file name without its directory and ".gguf" (the converter names
 * the model after its directory). */
static void gguf_model_name(const char *out, char *name, size_t cap) {
    const char *b = strrchr(out, '/');
    snprintf(name, cap, "%s", b ? b + 1 : out);
    size_t n = strlen(name);
    if (n > 5 && !strcmp(name + n - 5, ".gguf")) name[n - 5] = '\0';
}

/* The text of carried file name, or NULL. */
static const char *tokfile(const mp_tokfiles *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->name[i], name)) return f->data[i];
    return NULL;
}

/* The tokenizer's metadata of a GGUF export (tokenizer.ggml.*: model, pre, tokens, types, scores or merges,
 * special ids and flags, chat template) from the carried tokenizer.json, tokenizer_config.json and the
 * model's config (tokenizer/tok_gguf.h: as convert_hf_to_gguf.py computes them). Without a carried
 * tokenizer.json nothing is written, with a warning: llama.cpp needs the keys to load the file. */
static mp_code gguf_put_tokenizer(gguf_writer *w, const mp_tokfiles *files, const llama_config *mc, mp_err *e) {
    const char *tj = tokfile(files, "tokenizer.json");
    if (!tj) {
        mp_warn("export --format gguf: the checkpoint carries no tokenizer.json: the GGUF file has no tokenizer "
                "(tokenizer.ggml.*), which llama.cpp needs to load it");
        return MP_OK;
    }
    char *cfg = llama_config_to_json(mc);
    mp_tok_gguf_meta m = {0};   /* from_json frees what it is given first */
    mp_code rc = mp_tok_gguf_from_json(tj, tokfile(files, "tokenizer_config.json"), cfg, &m, e);
    free(cfg);
    if (rc) return mp_err_wrap(e, "the carried tokenizer.json has no GGUF form"), rc;
    gguf_w_str(w, "tokenizer.ggml.model", m.model);
    if (m.pre) gguf_w_str(w, "tokenizer.ggml.pre", m.pre);
    gguf_w_arr_str(w, "tokenizer.ggml.tokens", (const char *const *)m.tokens, NULL, m.n_tokens);
    if (m.scores) gguf_w_arr_f32(w, "tokenizer.ggml.scores", m.scores, m.n_tokens);
    gguf_w_arr_i32(w, "tokenizer.ggml.token_type", m.token_type, m.n_tokens);
    if (m.merges) gguf_w_arr_str(w, "tokenizer.ggml.merges", (const char *const *)m.merges, NULL, m.n_merges);
    static const char *const idk[] = {"bos", "eos", "unknown", "seperator", "padding", "cls", "mask"};
    const int32_t ids[] = {m.bos, m.eos, m.unk, m.sep, m.pad, m.cls, m.mask};
    char key[64];
    for (int i = 0; i < 7; i++)
        if (ids[i] >= 0) snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", idk[i]), gguf_w_u32(w, key, (uint32_t)ids[i]);
    if (m.add_bos >= 0) gguf_w_bool(w, "tokenizer.ggml.add_bos_token", m.add_bos);
    if (m.add_eos >= 0) gguf_w_bool(w, "tokenizer.ggml.add_eos_token", m.add_eos);
    if (m.add_sep >= 0) gguf_w_bool(w, "tokenizer.ggml.add_sep_token", m.add_sep);
    if (m.add_space_prefix >= 0) gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", m.add_space_prefix);
    if (m.chat_template) gguf_w_str(w, "tokenizer.chat_template", m.chat_template);
    mp_tok_gguf_meta_free(&m);
    return MP_OK;
}

/* `export --format gguf`: the HF layout's whole tensors into the GGUF sink, the tokenizer's metadata,
 * then the file read back (header byte for byte, every tensor's bytes by hash). */
static mp_code run_export_gguf(const mp_runtime *rt, const char *arg, export_opts *o, mp_err *err) {
    char *src_dir = NULL;
    rs_source *src = NULL;
    rs_sink *sink = NULL;
    rs_box *boxes = NULL;
    int n = 0;
    llama_config mc;
    mp_tokfiles files = {0};
    char name[256];
    int dcp = dcp_is_dir(arg);
    const char *dtype = !strcmp(o->dtype, "fp32") ? "f32" : o->dtype;
    mp_code rc = open_whole(arg, o, &src_dir, &src, &mc, &files, &boxes, &n, err);
    if (!rc && mp_fs_is_dir(o->c.out)) rc = mp_err_set(err, MP_EINPUT, "--out %s is a directory (a GGUF export is one file)", o->c.out);
    if (!rc)
        rc = mp_ckpt_check_out(o->c.out, src_dir, dcp ? "the DCP directory" : "the source checkpoint", o->c.force,
                               mp_convert_bytes(boxes, n), err);
    gguf_model_name(o->c.out, name, sizeof name);
    if (!rc) rc = rs_sink_gguf(&sink, o->c.out, &mc, dtype, name, o->c.max_bytes / 4, err);
    if (!rc) rc = gguf_put_tokenizer(rs_sink_gguf_writer(sink), &files, &mc, err);
    rs_stats st;
    if (!rc) rc = rs_run(src, sink, boxes, n, 0, 1, &st, err);
    if (!rc)
        fprintf(stderr, "meshpoint export: wrote %s (GGUF, %s, %d tensors, %.2f MiB as fp32) in %.2f s; read %.2f MiB; "
                        "largest piece in memory %.2f MiB (--max-memory %.0f MiB)\n", o->c.out, dtype, n,
                st.bytes_written / 1048576.0, st.seconds, st.bytes_read / 1048576.0, st.largest_band / 1048576.0,
                o->c.max_bytes / 1048576.0);
    if (!rc && !o->c.no_verify) {
        if ((rc = rs_sink_gguf_verify(sink, err))) mp_err_wrap(err, "reading %s back after writing it", o->c.out);
        else fprintf(stderr, "meshpoint export: verified %s: every offset and bound, the metadata and tensor infos byte "
                             "for byte, every tensor's bytes\n", o->c.out);
    }
    if (!rc) mp_memplan_report(rt, (int64_t)o->c.max_bytes);
    mp_tokfiles_free(&files);
    if (sink) sink->free(sink);
    if (src) src->close(src);
    free(boxes);
    free(src_dir);
    return rc;
}

static const char *export_about =
    "Writes the model of checkpoint CKPT (a step directory, a checkpoint root or a run directory: its newest\n"
    "complete checkpoint; saved on any mesh, full or --model-only) as a Hugging Face directory that\n"
    "transformers' AutoModelForCausalLM.from_pretrained loads: config.json, generation_config.json and\n"
    "model.safetensors, or model-0000i-of-0000N.safetensors + model.safetensors.index.json above\n"
    "--max-shard-size. Streams in bounded memory, commits atomically (DIR.partial, renamed at the end) and\n"
    "reads the result back. --max-shard-size 5GB means 5e9 bytes, as in transformers (5G or 5GiB: 5 x 2^30).\n"
    "The tokenizer files the checkpoint carries (from `import`) are written beside them, so that\n"
    "AutoTokenizer.from_pretrained loads the model's own tokenizer.\n"
    "--format dcp writes a PyTorch Distributed Checkpoint directory instead (docs/DCP.md): one __R_0.distcp\n"
    "per rank R of the --tp x --dp mesh (each rank's box of a tensor one chunk) and .metadata, which\n"
    "torch.distributed.checkpoint.load reads into an HF-named state dict (--names hf, the default) or\n"
    "torchtitan's Llama 3 model (--names torchtitan: its names, wq/wk rows permuted as its HF adapter does);\n"
    "the Adam moments come along under torchtitan's optimizer names when the checkpoint has them (not with\n"
    "--model-only). Atomic and read back with meshpoint's own DCP reader, as the HF directory.\n"
    "CKPT may be a PyTorch DCP directory (torchtitan, FSDP2: it has a .metadata) with --config, the model's HF\n"
    "config.json: converted straight to HF (torchtitan or HF names, detected; the tokenizer files of CONFIG's\n"
    "directory travel).\n"
    "--format gguf writes one GGUF file (--out model.gguf) that llama.cpp loads (docs/GGUF.md): its\n"
    "architecture's metadata and tensor names for the family, q/k rows in llama.cpp's order, 2-D weights as\n"
    "--dtype f32 (fp32), f16, bf16 or q8_0 (norms and biases f32), and the carried tokenizer.json as its\n"
    "tokenizer.ggml.* keys. Atomic (model.gguf.partial, renamed) and read back: every offset and bound, the\n"
    "header byte for byte, every tensor's bytes.";

int mp_cmd_export(int argc, char **argv) {
    static const char *const dtypes[] = {"fp32", "bf16", "f32", "f16", "q8_0", NULL},
                             *const formats[] = {"hf", "dcp", "gguf", NULL},
                             *const names[] = {"hf", "torchtitan", NULL};
    export_opts o = {.dtype = "fp32", .max_shard = "5GB", .format = "hf", .names = "hf"};
    mp_convert_opts_default(&o.c, "DIR");
    mp_arg flags[MP_CONVERT_MAX_FLAGS + 6] = {
        {"format", MP_ARG_STRING, &o.format, "F", "hf (a Hugging Face directory), dcp (PyTorch DCP) or gguf (llama.cpp)", formats},
        {"names", MP_ARG_STRING, &o.names, "N", "dcp: tensor names of hf or torchtitan (Llama 3)", names},
        {"dtype", MP_ARG_STRING, &o.dtype, "T", "tensor dtype in the written files (gguf: also f16, q8_0)", dtypes},
        {"max-shard-size", MP_ARG_STRING, &o.max_shard, "SIZE", "hf: split the weights into files of at most SIZE"},
        {"config", MP_ARG_STRING, &o.config, "CONFIG", "a DCP directory's model: its HF config.json"}};
    mp_convert_flags(&o.c, MP_CONV_MESH | MP_CONV_MODEL_ONLY, "the directory to write (must not exist, unless --force)", flags + 5);
    mp_runtime rt;
    mp_runtime_start(&rt, &argc, &argv);
    mp_err err;
    mp_err_clear(&err);
    int npos = 0, help = 0, status = mp_exit_status(MP_OK);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        if (rt.rank == 0) mp_args_help(stdout, "meshpoint export CKPT --out DIR [options]", export_about, flags);
        goto done;
    }
    if (npos != 1) {
        mp_err_set(&err, MP_EINPUT, npos ? "one CKPT expected, got %d arguments" : "CKPT (the checkpoint to export) is missing", npos);
        goto fail;
    }
    if (mp_convert_check_flags(&o.c, MP_CONV_MESH | MP_CONV_MODEL_ONLY, &err)) goto fail;
    int dcp = !strcmp(o.format, "dcp"), gguf = !strcmp(o.format, "gguf");
    if (!strcmp(o.dtype, "f32")) o.dtype = "fp32";
    if (!gguf && strcmp(o.dtype, "fp32") && strcmp(o.dtype, "bf16")) {
        mp_err_set(&err, MP_EINPUT, "--dtype %s: only with --format gguf (hf and dcp write fp32 or bf16)", o.dtype);
        goto fail;
    }
    if (!dcp && (o.c.set_tp || o.c.set_dp || strcmp(o.names, "hf"))) {
        mp_err_set(&err, MP_EINPUT, "%s: only with --format dcp (an HF directory holds whole tensors)",
                   o.c.set_tp ? "--tp" : o.c.set_dp ? "--dp" : "--names");
        goto fail;
    }
    if (!dcp && o.c.ranks_per_file != 1) { mp_err_set(&err, MP_EINPUT, "--ckpt-files: only with --format dcp"); goto fail; }
    if (parse_shard_size(o.max_shard, &o.shard_bytes, &err)) goto fail;
    if (rt.world > 1) { mp_err_set(&err, MP_EINPUT, "export runs in one process (not under mpirun -np %d)", rt.world); goto fail; }
    if (mp_runtime_mesh(&rt, 1, 1, "cpu", NULL, &err)) goto fail;
    if ((dcp ? run_export_dcp : gguf ? run_export_gguf : run_export)(&rt, argv[0], &o, &err)) goto fail;
    goto done;
fail:
    status = mp_runtime_exit_alike(&rt, mp_alike_of(err.code), &err);
done:
    mp_runtime_end(&rt);
    return status;
}
