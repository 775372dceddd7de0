/*
 * cli/train_ckpt.h — the bridge between the training run and the checkpoint library: which tensors and
 * which metadata a training checkpoint holds, and how a run is restored from one.
 *
 * Tensors (canonical HF names and shapes, vocab unpadded, each element written by exactly one rank):
 *   model/<hf name>                 fp32 parameters
 *   optim/exp_avg/<hf name>         AdamW first moment
 *   optim/exp_avg_sq/<hf name>      AdamW second moment
 * Every rank writes its FSDP shard of its TP slice as one box (vocab padding rows clipped off);
 * replicated tensors (the norms) are written by tp rank 0 only.
 * Format version 3 for Llama models, 4 for the other families (mp_ckpt_format_version).
 * Metadata (JSON text): model_config (HF config.json), train_config, mesh, step, data_cursor,
 * lr_schedule, optimizer, rng. See docs/FORMAT.md. "mesh" also carries "elapsed_s", the run's wall time
 * up to the saved step (bookkeeping, not compared by `ckpt diff`; absent in older checkpoints: 0).
 * A save refuses shards holding a non-finite value (NaN, inf), naming the tensor.
 *
 * Loading reads, for every parameter, exactly the box this rank's new shard covers — through the
 * reader's box intersection, so the saved mesh need not equal the current one.
 */
#ifndef MP_TRAIN_CKPT_H
#define MP_TRAIN_CKPT_H

#include "ckpt/ckpt.h"
#include "core/data.h"
#include "layers/llama.h"
#include "cli/tokfiles.h"
#include "layers/llama_config.h"

/* The non-tensor state of a run: everything besides the shards needed to continue exactly. */
typedef struct mp_run_state {
    int64_t step;               /* optimizer steps completed */
    mp_loader_cursor cursor;    /* the data loader's position for the next step */
    int64_t bytes_read, bytes_needed;   /* set by mp_checkpoint_load: this rank's reader counters */
    double elapsed_s;           /* wall time of the run up to step (saved; loaded, 0 if absent) */
    int batch_size, seq_len, grad_accum;   /* set by mp_checkpoint_load: the saved ones (0: unknown) */
    /* set by mp_checkpoint_load: the loaded checkpoint's metadata "init_from" (JSON text; "" if none), so
     * a resumed run keeps recording where its weights came from */
    char init_from[MP_PATH_MAX + 128];
} mp_run_state;

/* The format_version of a training checkpoint of model mc (ckpt_save_opts.format_version): 3 for Llama,
 * whose checkpoints stay what they were before the families, 4 for every other family (layers/family.h),
 * so that a build that knows no families (format 3 at most) refuses the checkpoint instead of reading it
 * as a Llama. Every writer of training checkpoints (train, reshard, init, import) uses it. */
int mp_ckpt_format_version(const llama_config *mc);

/* Stores one metadata entry (a ckpt save, a reshard sink, ...). */
typedef mp_code (*mp_meta_put)(void *ctx, const char *key, const char *value, mp_err *err);
/* The metadata of a training checkpoint (docs/FORMAT.md, "Training checkpoints") for a tp x dp mesh
 * and run state st, each entry through put. The one definition that `train` saves and `init` writes. */
mp_code mp_run_meta(mp_meta_put put, void *ctx, const llama_config *mc, const mp_train_config *tc, int tp,
                    int dp, const mp_run_state *st, mp_err *err);

/* A checkpointer owns the host staging buffer (parameters + both moments of the local shards) and the
 * save in flight, if any. */
typedef struct mp_checkpointer {
    char root[1024];
    ckpt_save_opts opts;
    int async;
    float *host;                /* staging: what the save reads while training goes on */
    size_t host_bytes;
    mp_backend *host_be;        /* whose host_alloc made host (pinned memory on a GPU) */
    ckpt_save *inflight;        /* async save not yet committed */
    int64_t inflight_step;
    double last_stall_s;
    /* metadata "init_from" of every save (JSON text; "" for none): the checkpoint whose weights this run
     * started from (train --init-from), {"checkpoint": DIR, "step": N} */
    char init_from[MP_PATH_MAX + 128];
    /* the tokenizer files every save carries (rank 0; from --init-from's or --resume's checkpoint) */
    mp_tokfiles files;
} mp_checkpointer;

void mp_checkpointer_init(mp_checkpointer *c, const char *root, const ckpt_save_opts *opts, int async);
/* Saves step st->step: copies the state into the staging buffer (the only stall for async saves),
 * then commits (sync) or starts the background write (async; a previous save is waited for first).
 * Collective. stats (may be NULL) gets the timings of a sync save. */
mp_code mp_checkpointer_save(mp_checkpointer *c, llama_model *m, const llama_config *mc,
                             const mp_train_config *tc, const mp_run_state *st, ckpt_stats *stats, mp_err *err);
/* Once per step (collective): commits an async save whose files are all written. *committed_step is
 * set to its step when it commits in this call, else -1. */
mp_code mp_checkpointer_poll(mp_checkpointer *c, int64_t *committed_step, ckpt_stats *stats, mp_err *err);
/* Collective: waits for an async save in flight, and logs its commit. */
mp_code mp_checkpointer_wait(mp_checkpointer *c, ckpt_stats *stats, mp_err *err);
void mp_checkpointer_free(mp_checkpointer *c);

/* What mp_checkpoint_load reads besides the parameters. */
enum {
    MP_LOAD_FULL = 0,        /* moments and run state: resuming */
    MP_LOAD_MODEL_ONLY = 1,  /* the run state (step, data cursor, saved batch shape), no moments: eval */
    MP_LOAD_WEIGHTS = 2      /* the parameters alone (st->step: the saved step if recorded, else 0); a
                              * checkpoint needs only model_config and the model/ tensors: train --init-from */
};
/* Restores the shards of m, and per mode (MP_LOAD_*) the moments and run state, from the checkpoint
 * directory dir (saved by any mesh). Checks that the checkpoint's model config equals mc (a mismatch
 * names the field, rope_scaling included) and every tensor's global shape. st->bytes_read/bytes_needed
 * get this rank's reader counters, st->init_from the metadata "init_from" ("" if absent). */
mp_code mp_checkpoint_load(llama_model *m, const char *dir, const llama_config *mc, int mode,
                           mp_run_state *st, mp_err *err);
/* Collective: logs "WHAT DIR at step N: read X MiB for Y MiB needed (ratio R); index.h5 read by K of W
 * ranks" with the counters summed over the world (K: the ranks whose process read any index.h5 so far,
 * ckpt_index_reads; 1 with the collective load). */
void mp_checkpoint_log_io(mp_mesh *mesh, const char *what, const char *dir, const mp_run_state *st);

#endif
