/* core/optim.c — see optim.h. */
#include "core/optim.h"
#include <assert.h>

void mp_adamw_step(mp_backend *be, const mp_adamw_hparams *hp, const mp_optim_slot *slots, int nslots,
                   double lr, int64_t t, float grad_scale) {
    assert(t >= 1);
    for (int i = 0; i < nslots; i++) {
        const mp_optim_slot *s = &slots[i];
        if (s->n == 0) continue;
        be->adamw(be, s->p, s->g, s->m, s->v, s->n, (float)lr, (float)hp->beta1, (float)hp->beta2,
                  (float)hp->eps, s->decay ? (float)hp->weight_decay : 0.0f, (int)t, grad_scale);
    }
}
