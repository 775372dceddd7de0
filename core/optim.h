/*
 * core/optim.h — AdamW over a list of parameter slots (the local FSDP shards). The arithmetic is the
 * backend's adamw op; this module owns the hyper-parameters and the loop, and knows nothing of models.
 * Weight decay is decoupled (p -= lr * wd * p) and applies only to slots with decay = 1 (matrices, not
 * norms), as in nanoGPT/llm.c. Bias correction uses the 1-based step count.
 */
#ifndef MP_OPTIM_H
#define MP_OPTIM_H

#include <stdint.h>
#include "core/backend.h"

typedef struct mp_adamw_hparams {
    double beta1, beta2, eps, weight_decay;
} mp_adamw_hparams;

typedef struct mp_optim_slot {
    float *p, *g, *m, *v;   /* device buffers of n elements */
    void *p_act;            /* the compute copy of p the update also writes (act_dtype), NULL: p itself */
    int64_t n;
    int decay;
} mp_optim_slot;

/* The largest bias-correction step t: the backend's adamw op takes it as an int. A step count read from
 * outside (a config's steps, a checkpoint's metadata "step") is range-checked against it before it gets
 * here: core/config.c (MP_MAX_STEPS), cli/train_ckpt.c (resuming: completed steps < MP_ADAMW_MAX_T). */
#define MP_ADAMW_MAX_T ((int64_t)INT32_MAX)

/* One update of every slot at learning rate lr; t is the 1-based step, 1 <= t <= MP_ADAMW_MAX_T (an
 * invariant: callers check values from outside); gradients are multiplied by grad_scale first (1.0, or
 * the clipping factor). */
void mp_adamw_step(mp_backend *be, const mp_adamw_hparams *hp, const mp_optim_slot *slots, int nslots,
                   double lr, int64_t t, float grad_scale);

#endif
