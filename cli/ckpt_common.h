/*
 * cli/ckpt_common.h — the helpers `meshpoint ckpt ls|show|verify|diff` share (cli/ckpt_*.c; single
 * process, read only, built on the public API of ckpt/ckpt.h only).
 *
 * - Exit status of every subcommand: mp_exit_status(code), as every command's (cli/cli.h): 0 ok, 1 a
 *   check failed or the checkpoints differ (MP_ECHECK), 2 bad usage or unreadable/missing input
 *   (MP_EINPUT).
 * - Locating: a DIR argument is a checkpoint directory (it holds index.h5), or a checkpoint root or a
 *   run directory (PATH/checkpoints), meaning its newest complete checkpoint (mp_ckpt_resolve).
 * - Chunks: every tensor is read through ckpt_read in the same "chunks": boxes that cut the tensor along
 *   one dimension s (all dims after s whole, dims before s one index at a time), sized so that one chunk
 *   is at most mp_ckpt_chunk_bytes() (16 MiB; the fault ckpt_chunk_bytes overrides it, tests use tiny
 *   chunks to exercise the cutting). The reader finds the saved boxes each chunk meets, so two
 *   checkpoints with different box layouts (different meshes) are compared chunk against identical
 *   chunk, and memory stays bounded whatever the model size.
 * - Statistics are over the finite elements (min, max, mean, population std, L2 norm), merged chunk by
 *   chunk with Chan's parallel variance formula in double; NaN/Inf elements are counted separately.
 * - Display: numbers print as integers exactly, else with 10 significant digits; JSON values compactly.
 */
#ifndef MP_CLI_CKPT_COMMON_H
#define MP_CLI_CKPT_COMMON_H

#include <cjson/cJSON.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include "ckpt/ckpt.h"
#include "cli/args.h"
#include "core/error.h"
#include "core/tensor.h"
#include "layers/llama_config.h"

/* ------------------------------------------------------------------------------------ subcommands */

/* `meshpoint ckpt ls ARGS` (argv after "ls"): the checkpoints under a root. Returns the exit status. */
int mp_ckpt_ls(int argc, char **argv);
/* `meshpoint ckpt show ARGS`: what one checkpoint holds, text or JSON. Returns the exit status. */
int mp_ckpt_show(int argc, char **argv);
/* `meshpoint ckpt verify ARGS`: integrity, metadata and tensor set. Returns the exit status. */
int mp_ckpt_verify(int argc, char **argv);
/* `meshpoint ckpt diff ARGS`: two checkpoints tensor by tensor and their metadata. Returns the exit status. */
int mp_ckpt_diff(int argc, char **argv);
/* `meshpoint ckpt repair-views DIR` (cli/ckpt_repair.c). */
int mp_ckpt_repair_views(int argc, char **argv);

/* The same subcommands of a PyTorch DCP directory (cli/ckpt_dcp.c; DIR holds `.metadata`): */
int mp_ckpt_dcp_show(const char *dir, int json);
int mp_ckpt_dcp_verify(const char *dir, int json);
int mp_ckpt_dcp_ls(const char *root, int json);
/* What `ckpt verify` checks of an open DCP directory, each problem reported into pr: every file present;
 * the chunks of every tensor covering it exactly once; every chunk's record inside its file and well
 * formed for its box; bytes items inside their files. Also `export --format dcp`'s read-back. */
struct dcp_dir;
struct mp_ckpt_problems;
void mp_ckpt_dcp_check(struct dcp_dir *d, struct mp_ckpt_problems *pr);
/* 1 if root is a DCP directory or holds one directly (ls hands it to mp_ckpt_dcp_ls). */
int mp_ckpt_dcp_root(const char *root);

/* The start every ckpt subcommand shares: parses flags (the positional arguments are compacted to the
 * front of argv), prints the help (usage, about) on --help, and checks that exactly nargs positional
 * arguments were given (`what` names them in the error, e.g. "one checkpoint DIR"). Returns -1 to go
 * on, else the exit status: mp_exit_status(MP_OK) after the help, mp_exit_status(MP_EINPUT) after
 * reporting the error. */
/* Refuses (MP_EINPUT, naming --out) an output path that is empty, exists without force, is src itself
 * (src_what names it: "the source checkpoint"; src may be NULL), or whose file system lacks room for
 * need bytes plus HDF5's overhead (the fault free_bytes replaces the measured free space, for tests). */
mp_code mp_ckpt_check_out(const char *dst, const char *src, const char *src_what, int force, int64_t need, mp_err *e);

int mp_ckpt_cli_start(const mp_arg *flags, int argc, char **argv, int nargs, const char *what, const char *usage,
                      const char *about);

/* The problems a verify finds: each printed when found ("problem: ..."), or with --json collected (with
 * the notes) into list / notes. Shared by `ckpt verify` of ours and of DCP directories. */
typedef struct mp_ckpt_problems {
    int n;
    int views_pending;     /* a v3 checkpoint without view.h5 (a note, not a problem) */
    cJSON *list, *notes;   /* --json: arrays of the problem and note texts; NULL: print them */
} mp_ckpt_problems;
/* Reports "problem: <fmt>" and counts it in p. */
void mp_ckpt_problem(mp_ckpt_problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Reports "note: <fmt>" (not a problem). */
void mp_ckpt_note(mp_ckpt_problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---------------------------------------------------------------------------------- small helpers */

/* The chunk size in bytes: 16 MiB, or the fault ckpt_chunk_bytes (>= 16) when set. */
int64_t mp_ckpt_chunk_bytes(void);
/* n bytes for humans ("512 B", "1.5 MiB") into buf; returns buf. */
const char *mp_ckpt_human(char *buf, size_t cap, int64_t n);
/* A shape as "[256, 32]" into buf (truncated to cap); returns buf. */
const char *mp_ckpt_shape_str(char *buf, size_t cap, int ndim, const int64_t *s);
/* The element count of a shape (1 for ndim 0). */
int64_t mp_ckpt_numel(int ndim, const int64_t *s);
/* A number for display into buf: integers exactly, other values with 10 significant digits; returns buf. */
const char *mp_ckpt_num_str(char *buf, size_t cap, double v);
/* Prints a JSON value compactly to f (strings without quotes, numbers via mp_ckpt_num_str). */
void mp_ckpt_print_json_value(FILE *f, const cJSON *v);
/* Metadata entry key of r parsed as JSON (caller cJSON_Deletes), or NULL if absent or not JSON. */
cJSON *mp_ckpt_meta_json(const ckpt_reader *r, const char *key);
/* 1 and *out set if field of object o is present and an integer, else 0 (*out untouched). */
int mp_ckpt_json_int(const cJSON *o, const char *field, int64_t *out);
/* "tp 2 x dp 2" from r's mesh metadata, else "world N (no mesh metadata)", into buf; returns buf. */
const char *mp_ckpt_mesh_str(char *buf, size_t cap, const ckpt_reader *r);

/* Element i of a buffer of dtype dt, as a double (inline: the per-element loops of stats and diff). */
/* Element i of a buffer of dtype dt, as a double. */
static inline double mp_ckpt_elem(const void *buf, mp_dtype dt, int64_t i) {
    switch (dt) {
    case MP_F32: return ((const float *)buf)[i];
    case MP_BF16: return mp_bf16_to_f32(((const uint16_t *)buf)[i]);
    case MP_I32: return ((const int32_t *)buf)[i];
    }
    return NAN;
}

/* ---------------------------------------------------------------------------- locating checkpoints */

/* The checkpoint root a path means: the path, or PATH/checkpoints for a run directory. Malloc'd. */
char *mp_ckpt_root_of(const char *path);
/* The checkpoint directory path names (itself, or a root's newest complete checkpoint) into *dir
 * (malloc'd); MP_EINPUT naming path when there is none. */
mp_code mp_ckpt_resolve(const char *path, char **dir, mp_err *err);

/* ----------------------------------------------------------------------------------------- chunks */

/* Cuts a tensor into boxes of at most `budget` bytes along one dimension `split`: dims after it whole,
 * dims before it one index at a time, `step` indices of split per chunk. Visits chunks in row-major
 * order of their offsets, so two iterators over equal shapes yield identical chunks. */
typedef struct mp_ckpt_chunk_iter {
    int ndim, split, done;
    int64_t shape[CKPT_MAX_DIMS], step;
    int64_t off[CKPT_MAX_DIMS], cshape[CKPT_MAX_DIMS];  /* the current chunk */
} mp_ckpt_chunk_iter;

/* Starts it over a tensor of ndim dims, shape, esize-byte elements, chunks of at most budget bytes
 * (budget >= esize). */
void mp_ckpt_chunk_init(mp_ckpt_chunk_iter *it, int ndim, const int64_t *shape, size_t esize, int64_t budget);
/* The current chunk's element count (it->off / it->cshape filled), or 0 when the iteration is over. */
int64_t mp_ckpt_chunk_current(mp_ckpt_chunk_iter *it);
/* Advances it to the next chunk (row-major order of the chunk offsets). */
void mp_ckpt_chunk_next(mp_ckpt_chunk_iter *it);

/* ------------------------------------------------------------------------------------- statistics */

/* Statistics of one tensor's finite elements; min/max are meaningful only when n > 0. */
typedef struct mp_ckpt_tstats {
    int64_t n;          /* finite elements */
    int64_t nonfinite;  /* NaN or +-Inf */
    double min, max, mean, m2, sumsq;
} mp_ckpt_tstats;

/* The population std of s's finite elements, NaN when there are none. */
double mp_ckpt_stats_std(const mp_ckpt_tstats *s);
/* Streams tensor t of r through ckpt_read chunk by chunk (buf holds budget bytes) into *st; the
 * reader's error on a failed read. */
mp_code mp_ckpt_tensor_stats(ckpt_reader *r, const ckpt_tensor_info *t, void *buf, int64_t budget,
                             mp_ckpt_tstats *st, mp_err *err);

/* --------------------------------------------------------------------------------------- metadata */

/* r's "model_config" metadata parsed into *mc (MP_OK), or MP_ECHECK / the parse error. */
mp_code mp_ckpt_parse_model_config(const ckpt_reader *r, llama_config *mc, mp_err *err);
/* The metadata keys a training checkpoint writes, NULL-terminated ("model_config" first). */
extern const char *const mp_ckpt_known_meta[];

#endif
