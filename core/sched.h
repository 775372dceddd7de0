/*
 * core/sched.h — learning-rate schedule: linear warmup from 0 to lr over warmup steps, then cosine
 * decay to min_lr over decay steps, then min_lr. A pure function of the step, so it has no state to
 * save beyond the step counter (the checkpoint records its parameters for inspection).
 */
#ifndef MP_SCHED_H
#define MP_SCHED_H

#include <stdint.h>

typedef struct mp_lr_schedule {
    double lr, min_lr;
    int64_t warmup, decay;
} mp_lr_schedule;

/* LR for optimizer step `step` (0-based: the first update uses step 0). */
double mp_lr_at(const mp_lr_schedule *s, int64_t step);

#endif
