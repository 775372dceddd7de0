/* core/optim.c — see optim.h. */
#include "core/optim.h"
#include <assert.h>
#include "core/config.h"

_Static_assert(MP_MAX_STEPS <= MP_ADAMW_MAX_T, "a run's steps must fit the optimizer's step counter");

/* Does slot b continue slot a in memory (p, g, m and v each right after a's), with the same decay and
 * no compute copy? Then both are one contiguous range of one update. */
static int slot_continues(const mp_optim_slot *a, const mp_optim_slot *b) {
    return !a->p_act && !b->p_act && a->decay == b->decay && b->p == a->p + a->n && b->g == a->g + a->n &&
           b->m == a->m + a->n && b->v == a->v + a->n;
}

/* See optim.h: one AdamW update of every slot; the arithmetic is the backend's. Runs of slots that lie
 * back to back in memory with the same weight-decay flag (the layers keep every shard in one arena: a
 * layer's matrices are one run, its norm weights another) go to the backend as one call, so the update
 * is one pass over each contiguous range instead of one call per parameter. Each element's arithmetic
 * is the same either way (the op is elementwise): results do not depend on the merging. */
void mp_adamw_step(mp_backend *be, const mp_adamw_hparams *hp, const mp_optim_slot *slots, int nslots,
                   double lr, int64_t t, float grad_scale) {
    assert(t >= 1 && t <= MP_ADAMW_MAX_T);
    for (int i = 0; i < nslots;) {
        mp_optim_slot run = slots[i++];
        while (i < nslots && (slots[i].n == 0 || slot_continues(&run, &slots[i]))) run.n += slots[i++].n;
        if (run.n == 0) continue;
        be->adamw(be, run.p, run.p_act, run.g, run.m, run.v, run.n, (float)lr, (float)hp->beta1,
                  (float)hp->beta2, (float)hp->eps, run.decay ? (float)hp->weight_decay : 0.0f, (int)t, grad_scale);
    }
}
