/* core/optim.c — see optim.h. */
#include "core/optim.h"
#include <assert.h>
#include "core/config.h"

_Static_assert(MP_MAX_STEPS <= MP_ADAMW_MAX_T, "a run's steps must fit the optimizer's step counter");

/* Segments one backend call takes at most (4 KiB on the stack): a longer run of contiguous slots is cut
 * into several calls. A Llama model's shards are one run of 4 L + 3 segments (each layer's norm weights
 * between its matrices; bench_tiny 19, bench_small 51, 80 layers 323: two calls). */
enum { OPTIM_MAX_SEGS = 256 };

/* Does slot b continue run a in memory (p, g, m, v and the compute copy, if any, each right after a's)?
 * Then both are one contiguous range of one update, whatever their weight-decay flags. */
static int slot_continues(const mp_backend *be, const mp_optim_slot *a, const mp_optim_slot *b) {
    const int act = (!a->p_act && !b->p_act) || (a->p_act && b->p_act && b->p_act == mp_act_at(be, a->p_act, a->n));
    return act && b->p == a->p + a->n && b->g == a->g + a->n && b->m == a->m + a->n && b->v == a->v + a->n;
}

/* See optim.h: one AdamW update of every slot; the arithmetic is the backend's. Runs of slots that lie
 * back to back in memory (the layers keep every shard, its moments and gradients in arenas, so a model's
 * shards are one run) go to the backend as one call whose segments say which elements decay (matrices)
 * and which do not (norm weights): one pass over each contiguous range, with the weight-decay mask and
 * the clip scale in it, instead of one call per parameter. Each element's arithmetic is the same either
 * way (the op is elementwise): results do not depend on the merging. */
void mp_adamw_step(mp_backend *be, const mp_adamw_hparams *hp, const mp_optim_slot *slots, int nslots,
                   double lr, int64_t t, float grad_scale) {
    assert(t >= 1 && t <= MP_ADAMW_MAX_T);
    int i = 0;
    while (i < nslots) {
        while (i < nslots && slots[i].n == 0) i++;   /* empty shards (a rank past a tensor's rows) */
        if (i == nslots) break;
        mp_optim_slot run = slots[i];
        mp_adamw_seg segs[OPTIM_MAX_SEGS] = {{run.n, run.decay}};
        int nsegs = 1;
        for (i++; i < nslots; i++) {
            const mp_optim_slot *s = &slots[i];
            if (s->n == 0) continue;
            if (!slot_continues(be, &run, s)) break;
            if (s->decay == segs[nsegs - 1].decay) segs[nsegs - 1].n += s->n;
            else if (nsegs == OPTIM_MAX_SEGS) break;
            else segs[nsegs++] = (mp_adamw_seg){s->n, s->decay};
            run.n += s->n;
        }
        be->adamw(be, run.p, run.p_act, run.g, run.m, run.v, run.n, segs, nsegs, (float)lr, (float)hp->beta1,
                  (float)hp->beta2, (float)hp->eps, (float)hp->weight_decay, (int)t, grad_scale);
    }
}
