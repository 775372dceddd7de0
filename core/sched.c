/* core/sched.c — see sched.h. Warmup uses (step+1)/warmup so the first update is not zero. */
#include "core/sched.h"
#include <math.h>

double mp_lr_at(const mp_lr_schedule *s, int64_t step) {
    if (s->warmup > 0 && step < s->warmup) return s->lr * (double)(step + 1) / (double)s->warmup;
    int64_t t = step - s->warmup;
    if (s->decay <= 0 || t >= s->decay) return s->decay <= 0 ? s->lr : s->min_lr;
    double cosine = 0.5 * (1.0 + cos(M_PI * (double)t / (double)s->decay));
    return s->min_lr + (s->lr - s->min_lr) * cosine;
}
