/*
 * layers/llama_fsdp.c — fully-sharded data parallelism (FSDP2-style) over the dp group.
 *
 * Every parameter's TP slice is split along dim 0 over the dp ranks (mp_split: uneven sizes allowed);
 * a unit's shards are contiguous in the shard storage, so one all_gatherv per unit brings the whole unit
 * in, rank-major ([rank 0's shards | rank 1's | ...]); unpacking copies each rank's rows into place in
 * the full TP slices. Gradients go the other way: pack rank-major, one reduce_scatterv, add to the shard
 * gradients (adding, so micro-batches accumulate).
 *
 * Precision: what is gathered is the shards' compute copy (act_dtype: bf16 on a GPU), what is
 * reduce-scattered is fp32 gradients, which add into the fp32 shard gradients.
 *
 * Buffers (MP_MEM_GATHER): with reshard_after_forward every unit's gathered weights share one pool the
 * size of the largest unit (a block is gathered again in backward); without it each unit keeps its own
 * gathered copy from forward to backward (ZeRO-2 memory). Gathered gradients use two buffers: one for
 * unit 0, whose gradient accumulates across the whole backward (the tied embedding is used by the head
 * at the start of backward and by the embedding at its end), and one shared by the other units.
 *
 * Prefetch (FSDP2's forward and backward prefetch): the forward and backward start the gather of the
 * next unit (llama_fsdp_prefetch) right after the current one is in place, before computing with it,
 * through the communicator's split-phase all_gatherv; llama_fsdp_gather of that unit ends it. On NCCL the
 * gather runs on the communicator's stream while the compute stream works on the current unit; on MPI
 * Open MPI progresses it inside the later MPI calls and the wait (little overlap on the CPU, the same
 * bytes). The gather lands in its own stage (gstage), not in the pool or the unit's buffer, which the
 * current unit's compute is still reading, and not in the gradients' pack stage, which the current
 * unit's reduce-scatter fills while the next gather may be in flight. One unit in flight at a time is
 * enough: the next start is issued after the unpack that read gstage, and a device communicator orders
 * its start after the compute queued before it. The gathered bytes are the same either way, so results
 * are bitwise those of the blocking gathers (tests/mpi_llama.c).
 */
#include <assert.h>
#include <string.h>
#include "layers/llama_impl.h"

static int64_t cols_of(const llama_param *p) { return p->tp_shape[1]; }

/* The largest shard of any unit on this rank (the reduce-scatter output's size). */
static int64_t max_unit_shard(const llama_model *m) {
    int64_t max_shard = 0;
    for (int u = 0; u < m->nunits; u++)
        if (m->units[u].shard_numel > max_shard) max_shard = m->units[u].shard_numel;
    return max_shard;
}

size_t llama_fsdp_plan_bytes(const llama_model *m) {
    if (m->dp == 1) return 0;
    size_t fb = (size_t)m->max_unit_full * sizeof(float), b = 0;
    /* gathered weights are compute copies (act_size an element); gradients and the stages are fp32 */
    if (m->opt.reshard_after_forward) b += (size_t)m->max_unit_full * m->act_size;   /* one pool, every unit */
    else
        for (int u = 0; u < m->nunits; u++) b += (size_t)m->units[u].full_numel * m->act_size;
    b += (size_t)m->max_unit_full * m->act_size;   /* the gather stage */
    /* unit 0's gathered grads, the shared grad pool, the pack stage, the reduce-scatter output */
    return b + (size_t)m->units[0].full_numel * sizeof(float) + 2 * fb + (size_t)max_unit_shard(m) * sizeof(float);
}

void llama_fsdp_alloc(llama_model *m) {
    m->pool_unit = -1;
    m->gather_unit = -1;
    if (m->dp == 1) return;
    mp_backend *be = m->be;
    for (int u = 0; u < m->nunits; u++) {
        llama_unit *un = &m->units[u];
        un->dp_counts = mp_calloc(sizeof(int64_t) * (size_t)m->dp, MP_MEM_OTHER);
        for (int d = 0; d < m->dp; d++) {
            for (int i = un->first; i < un->first + un->count; i++) {
                int64_t r0, nr;
                mp_split(m->params[i].tp_shape[0], m->dp, d, &r0, &nr);
                un->dp_counts[d] += nr * cols_of(&m->params[i]);
            }
        }
        assert(un->dp_counts[m->dp_rank] == un->shard_numel);
    }
    int64_t max_shard = max_unit_shard(m);
    size_t fb = (size_t)m->max_unit_full * sizeof(float);
    if (m->opt.reshard_after_forward) {
        m->pool = be->alloc(be, (size_t)m->max_unit_full * m->act_size, MP_MEM_GATHER);
    } else {
        for (int u = 0; u < m->nunits; u++)
            m->units[u].full = be->alloc(be, (size_t)m->units[u].full_numel * m->act_size, MP_MEM_GATHER);
    }
    m->grad_unit0 = be->alloc(be, (size_t)m->units[0].full_numel * sizeof(float), MP_MEM_GATHER);
    m->grad_pool = be->alloc(be, fb, MP_MEM_GATHER);
    m->stage = be->alloc(be, fb, MP_MEM_GATHER);
    m->gstage = be->alloc(be, (size_t)m->max_unit_full * m->act_size, MP_MEM_GATHER);
    m->stage2 = be->alloc(be, (size_t)max_shard * sizeof(float), MP_MEM_GATHER);
    m->fsdp_bytes = llama_fsdp_plan_bytes(m);
    m->stage2_numel = max_shard;
}

/* Ends the gather in flight, if any, and forgets which unit it was: llama_fsdp_gather before unpacking
 * it, and everywhere else a stray one (that no llama_fsdp_gather took) would be unpacked later as if it
 * were current or land in freed memory. */
static void gather_end(llama_model *m) {
    if (m->gather_unit < 0) return;
    mp_comm *c = m->mesh->dp_comm;
    if (c->ops->all_gatherv_wait) c->ops->all_gatherv_wait(c);
    m->gather_unit = -1;
}

void llama_fsdp_free(llama_model *m) {
    if (m->dp == 1) return;
    gather_end(m);   /* its destination is freed below */
    mp_backend *be = m->be;
    size_t fb = (size_t)m->max_unit_full * sizeof(float);
    if (m->pool) be->free(be, m->pool, (size_t)m->max_unit_full * m->act_size, MP_MEM_GATHER);
    for (int u = 0; u < m->nunits; u++) {
        if (m->units[u].full) be->free(be, m->units[u].full, (size_t)m->units[u].full_numel * m->act_size, MP_MEM_GATHER);
        mp_free_acct(m->units[u].dp_counts, sizeof(int64_t) * (size_t)m->dp, MP_MEM_OTHER);
    }
    be->free(be, m->grad_unit0, (size_t)m->units[0].full_numel * sizeof(float), MP_MEM_GATHER);
    be->free(be, m->grad_pool, fb, MP_MEM_GATHER);
    be->free(be, m->stage, fb, MP_MEM_GATHER);
    be->free(be, m->gstage, (size_t)m->max_unit_full * m->act_size, MP_MEM_GATHER);
    be->free(be, m->stage2, (size_t)m->stage2_numel * sizeof(float), MP_MEM_GATHER);
}

void llama_fsdp_invalidate(llama_model *m) {
    gather_end(m);   /* gathered from the shards before they changed */
    m->pool_unit = -1;
    for (int u = 0; u < m->nunits; u++) m->units[u].resident = 0;
}

/* Calls fn(param, rank d, element offset of d's rows of that param in the rank-major buffer,
 * first row, row count) for every (rank, param) of unit u, in rank-major order. */
#define FOR_RANK_MAJOR(m, un, BODY)                                                   \
    do {                                                                              \
        int64_t off_ = 0;                                                             \
        for (int d_ = 0; d_ < (m)->dp; d_++) {                                        \
            for (int i_ = (un)->first; i_ < (un)->first + (un)->count; i_++) {        \
                llama_param *p = &(m)->params[i_];                                    \
                int64_t row0, nrows;                                                  \
                mp_split(p->tp_shape[0], (m)->dp, d_, &row0, &nrows);                 \
                int64_t seg = off_, n = nrows * p->tp_shape[1];                       \
                (void)seg; (void)n;                                                   \
                BODY;                                                                 \
                off_ += n;                                                            \
            }                                                                         \
        }                                                                             \
    } while (0)

/* Whether unit u's gathered weights are in place (the pool holds u, or u's own buffer is filled). */
static int unit_in_place(const llama_model *m, int u) {
    return m->opt.reshard_after_forward ? m->pool_unit == u : m->units[u].resident;
}

/* Starts (or, without a split phase, runs) the all-gather of unit u's compute copies into gstage. The
 * compute copies travel (bf16 on a GPU: half the bytes of the masters). */
static void gather_start(llama_model *m, int u) {
    assert(m->gather_unit == -1);
    llama_unit *un = &m->units[u];
    mp_comm *c = m->mesh->dp_comm;
    const void *in = mp_act_at(m->be, m->shard_act, un->shard_off);
    if (c->ops->all_gatherv_start) c->ops->all_gatherv_start(c, m->gstage, in, un->dp_counts, m->be->act_dtype);
    else c->ops->all_gatherv(c, m->gstage, in, un->dp_counts, m->be->act_dtype);
    m->gather_unit = u;
}

void llama_fsdp_prefetch(llama_model *m, int u) {
    if (m->dp == 1 || !m->mesh->dp_comm->ops->all_gatherv_start || unit_in_place(m, u) || m->gather_unit == u) return;
    gather_end(m);
    gather_start(m, u);
}

void llama_fsdp_gather(llama_model *m, int u) {
    if (m->dp == 1 || unit_in_place(m, u)) return;
    llama_unit *un = &m->units[u];
    void *base = m->opt.reshard_after_forward ? m->pool : un->full;
    mp_backend *be = m->be;
    if (m->gather_unit != u) {   /* not prefetched: gather now */
        gather_end(m);
        gather_start(m, u);
    }
    gather_end(m);
    int64_t full_off = 0;
    for (int i = un->first; i < un->first + un->count; i++) {
        m->params[i].full = mp_act_at(be, base, full_off);
        full_off += m->params[i].tp_shape[0] * m->params[i].tp_shape[1];
    }
    FOR_RANK_MAJOR(m, un, be->copy(be, mp_act_at(be, p->full, row0 * p->tp_shape[1]), mp_act_at(be, m->gstage, seg),
                                   (size_t)n * m->act_size));
    if (m->opt.reshard_after_forward) m->pool_unit = u;
    else un->resident = 1;
}

void llama_fsdp_grad_begin(llama_model *m, int u) {
    if (m->dp == 1) return;
    llama_unit *un = &m->units[u];
    float *base = u == 0 ? m->grad_unit0 : m->grad_pool;
    m->be->memset0(m->be, base, (size_t)un->full_numel * sizeof(float));
    int64_t off = 0;
    for (int i = un->first; i < un->first + un->count; i++) {
        m->params[i].full_grad = base + off;
        off += m->params[i].tp_shape[0] * m->params[i].tp_shape[1];
    }
}

void llama_fsdp_grad_end(llama_model *m, int u) {
    if (m->dp == 1) return;
    llama_unit *un = &m->units[u];
    mp_backend *be = m->be;
    FOR_RANK_MAJOR(m, un, be->copy(be, m->stage + seg, p->full_grad + row0 * p->tp_shape[1], (size_t)n * sizeof(float)));
    mp_comm *c = m->mesh->dp_comm;
    c->ops->reduce_scatterv(c, m->stage2, m->stage, un->dp_counts, MP_F32);
    be->accumulate(be, m->shard_grads + un->shard_off, m->stage2, un->shard_numel);
}
