/*
 * layers/llama_train.h — one training step: zero grads; grad_accum x (fill the micro-batch, forward,
 * backward with scale 1/tokens_per_step); finish grads (SP); global loss (summed over dp in double);
 * global grad norm; clip to grad_clip (0: off); AdamW at lr for the 1-based step. A norm that is not
 * finite skips the update (nothing changes; res->clip is 0): the caller stops or skips the step.
 * The micro-batches' tokens go up asynchronously from double host buffers (llama_token_bufs).
 */
#ifndef MP_LLAMA_TRAIN_H
#define MP_LLAMA_TRAIN_H

#include "core/optim.h"
#include "layers/llama.h"

typedef struct llama_step_args {
    mp_adamw_hparams hp;
    double lr;
    int64_t step;              /* 1-based (bias correction) */
    double grad_clip;
    int grad_accum;
    double tokens_per_step;    /* global tokens of the whole step (all micro-steps, all dp ranks) */
} llama_step_args;

typedef struct llama_step_result {
    double loss;               /* global mean per-token loss of the step (before the update) */
    double grad_norm;          /* before clipping; not finite: the update was skipped */
    double clip;               /* factor applied to the gradients (1: none) */
} llama_step_result;

/* Fills this rank's part of micro-step k: in/tgt are [micro_batch, seq_len] host ints. */
typedef void (*llama_fill_fn)(void *ctx, int k, int32_t *in, int32_t *tgt);

/* The host token buffers of a step, two of each (double buffering): micro-batch k is filled into slot
 * k % 2 and uploaded without a host wait (llama_forward_accum), so the host fills and queues micro-batch
 * k+1 while the device still runs k. Before refilling a slot the host waits (event_sync) only for the
 * upload that last read it, micro-batch k-2's, which the device ran before k-2's forward: by then long
 * done unless the host is far ahead. Buffers from the backend's host_alloc (page-locked on CUDA). */
typedef struct llama_token_bufs {
    mp_backend *be;
    size_t bytes;               /* of each buffer: micro_batch x seq_len int32 */
    int32_t *in[2], *tgt[2];
    mp_event uploaded[2];       /* recorded after the last upload from slot i */
} llama_token_bufs;

/* Allocates the four buffers (host_alloc, MP_MEM_OTHER) and two events of be. */
void llama_token_bufs_init(llama_token_bufs *tb, mp_backend *be, int micro_batch, int seq_len);
/* Waits for the uploads in flight, then frees what init made (a zeroed or freed tb: nothing). */
void llama_token_bufs_free(llama_token_bufs *tb);

/* One optimizer step (the file comment): fill(ctx, k, ...) writes micro-batch k into a slot of tb
 * (buffers of m's backend). On return no upload reads tb: the caller may write its buffers. */
void llama_train_step(llama_model *m, const llama_step_args *a, llama_fill_fn fill, void *ctx,
                      llama_token_bufs *tb, llama_step_result *res);

#endif
