/* core/optim.c — see optim.h. */
#include "core/optim.h"
#include <assert.h>
#include "core/config.h"

_Static_assert(MP_MAX_STEPS <= MP_ADAMW_MAX_T, "a run's steps must fit the optimizer's step counter");

/* See optim.h: one AdamW update of every slot; the arithmetic is the backend's. */
void mp_adamw_step(mp_backend *be, const mp_adamw_hparams *hp, const mp_optim_slot *slots, int nslots,
                   double lr, int64_t t, float grad_scale) {
    assert(t >= 1 && t <= MP_ADAMW_MAX_T);
    for (int i = 0; i < nslots; i++) {
        const mp_optim_slot *s = &slots[i];
        if (s->n == 0) continue;
        be->adamw(be, s->p, s->p_act, s->g, s->m, s->v, s->n, (float)lr, (float)hp->beta1, (float)hp->beta2,
                  (float)hp->eps, s->decay ? (float)hp->weight_decay : 0.0f, (int)t, grad_scale);
    }
}
