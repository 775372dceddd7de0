/*
 * cli/convert.h — the front end that `meshpoint reshard`, `init`, `export` and `import` share: they are
 * the one engine of reshard/ with different ends. Their options (one struct, one flag table), their
 * checkpoint source, their target layout, the check of the source's tensors against it, the destination
 * check and, for the three that write a checkpoint, the whole write (metadata, run, commit, read back)
 * are here, once. Each function returns an mp_code with its message in err (or, for the collective
 * write, the exit status); the commands decide what to do with it.
 */
#ifndef MP_CONVERT_H
#define MP_CONVERT_H

#include <stddef.h>
#include "ckpt/ckpt.h"
#include "cli/args.h"
#include "cli/runtime.h"
#include "cli/tokfiles.h"
#include "cli/train_ckpt.h"
#include "core/error.h"
#include "layers/llama_config.h"
#include "reshard/dcp_source.h"
#include "reshard/reshard.h"

/* The options of the four commands; which of them a command takes is the `which` mask below. */
typedef struct mp_convert_opts {
    const char *out, *out_metavar, *max_memory;
    int tp, dp, set_tp, set_dp;   /* target mesh (MP_CONV_MESH); default 1 x 1 */
    const char *ckpt_files;       /* MP_CONV_MESH: --ckpt-files rank|N (default rank) */
    int ranks_per_file;           /* parsed from it by mp_convert_check_flags: 1, or N */
    int force, no_verify;
    int plan, json;               /* MP_CONV_PLAN */
    int sp, set_sp;               /* MP_CONV_SP: accepted, no effect */
    int model_only;               /* MP_CONV_MODEL_ONLY */
    size_t max_bytes;             /* --max-memory, parsed by mp_convert_check_flags */
} mp_convert_opts;

enum {
    MP_CONV_MESH = 1,           /* --tp N --dp N (default 1 each), --ckpt-files rank|N */
    MP_CONV_MESH_REQUIRED = 2,  /* with MP_CONV_MESH: both must be given */
    MP_CONV_PLAN = 4,           /* --plan, --json (then --out is optional) */
    MP_CONV_SP = 8,             /* --sp, for symmetry with train */
    MP_CONV_MODEL_ONLY = 16     /* --model-only */
};
#define MP_CONVERT_MAX_FLAGS 11   /* the most entries mp_convert_flags appends */

/* Sets o to the defaults (mesh 1 x 1, --max-memory 256M); out_metavar is --out's placeholder ("DIR"). */
void mp_convert_opts_default(mp_convert_opts *o, const char *out_metavar);

/* Appends to flags the shared flags over o that which selects (--out described by out_help) and returns
 * how many (at most MP_CONVERT_MAX_FLAGS); the caller ends its table with {0}. */
int mp_convert_flags(mp_convert_opts *o, unsigned which, const char *out_help, mp_arg *flags);

/* The checks of the shared flags after parsing (MP_EINPUT naming the flag); parses --max-memory. */
mp_code mp_convert_check_flags(mp_convert_opts *o, unsigned which, mp_err *err);

/* Notes on rank 0 that --sp, when given, changes nothing in a checkpoint. */
void mp_convert_note_sp(const mp_runtime *rt, const mp_convert_opts *o);

/* A PyTorch DCP directory dir as an engine source of the model of config (the model's HF config.json:
 * required, MP_EINPUT naming the flag when NULL) under names ("hf", "torchtitan"; NULL: detected from the
 * keys). *mc gets the model, *info what the DCP holds, *tokdir (malloc'd) config's directory, whose
 * tokenizer files travel with the model. The one opening of a DCP source that import and export share. */
mp_code mp_convert_open_dcp(const char *dir, const char *config, const char *names, llama_config *mc,
                            rs_source **src, rs_dcp_info *info, char **tokdir, mp_err *e);
/* A GGUF file (cli/import_gguf.c) as an engine source: the model its metadata describes into *mc, and the
 * tokenizer its tokenizer.ggml.* keys hold as tokenizer.json + tokenizer_config.json into files (none, with a
 * warning, when it holds none). MP_EINPUT naming the key or tensor. */
mp_code mp_convert_open_gguf(const char *path, llama_config *mc, rs_source **src, mp_tokfiles *files, mp_err *e);
/* 1 if path is a file that starts with GGUF's magic. */
int mp_convert_is_gguf(const char *path);
/* Opens the checkpoint named by arg (a step directory, a checkpoint root or a run directory: its newest
 * complete checkpoint) as an engine source with scratch bytes of read buffer, and parses its model
 * config into *mc. *src_dir (malloc'd) and *src are set as far as they got, for the caller to free
 * also on failure. A checkpoint that is incomplete, unreadable or has no model_config is MP_EINPUT. */
mp_code mp_convert_open_ckpt(const char *arg, size_t scratch, char **src_dir, rs_source **src, llama_config *mc,
                             mp_err *err);

/* The target layout of model mc on o's tp x dp mesh (model_only: no optimizer moments), its rank files
 * grouped as o->ranks_per_file says, into *boxes (malloc'd) and *n; a model that does not fit the mesh
 * is refused naming the mesh flags. */
mp_code mp_convert_target_layout(const llama_config *mc, const mp_convert_opts *o, int model_only, rs_box **boxes,
                                 int *n, mp_err *err);

/* Refuses (MP_EINPUT) a target box whose tensor the source checkpoint r lacks (naming --model-only when
 * an optimizer moment is missing) or holds with another global shape. */
mp_code mp_convert_check_tensors(ckpt_reader *r, const rs_box *b, int n, mp_err *err);

/* The bytes the n boxes take as fp32: what a destination must have room for. */
int64_t mp_convert_bytes(const rs_box *b, int n);

/* What a written checkpoint's metadata is: a copy of checkpoint copy_from's (only the mesh changes), or,
 * when copy_from is NULL, that of a fresh checkpoint at step (0, or an imported optimizer's) of model mc
 * trained with tc; and the
 * tokenizer files it carries (files; NULL: none). mc is always set (copy_from's parsed model_config):
 * its family gives the format version (mp_ckpt_format_version). */
typedef struct mp_convert_meta {
    ckpt_reader *copy_from;
    const llama_config *mc;
    const mp_train_config *tc;
    const mp_tokfiles *files;
    int64_t step;   /* copy_from NULL: the step (and AdamW t) of the written checkpoint (0: a fresh one) */
} mp_convert_meta;

/* Writes the n boxes of src as a checkpoint for o's tp x dp mesh at o->out: the test hook and the
 * agreement that every rank's source checks passed ("<cmd>: source"), --plan (prints and stops), the
 * destination check (never src_dir, described as src_what, itself; free disk), the sink with meta's
 * metadata and carried files, the run and atomic commit, the summary line, and unless --no-verify the read-back.
 * Collective over the runtime's world. Returns the exit status. */
int mp_convert_write_ckpt(mp_runtime *rt, const char *cmd, rs_source *src, const char *src_dir, const char *src_what,
                          const rs_box *boxes, int n, const mp_convert_meta *meta, const mp_convert_opts *o);

#endif
