/*
 * layers/llama_train.h — one training step: zero grads; grad_accum x (fill the micro-batch, forward,
 * backward with scale 1/tokens_per_step); finish grads (SP); global loss (summed over dp in double);
 * global grad norm; clip to grad_clip (0: off); AdamW at lr for the 1-based step. A norm that is not
 * finite skips the update (nothing changes; res->clip is 0): the caller stops or skips the step.
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

void llama_train_step(llama_model *m, const llama_step_args *a, llama_fill_fn fill, void *ctx, int32_t *in,
                      int32_t *tgt, llama_step_result *res);

#endif
