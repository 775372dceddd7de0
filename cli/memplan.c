/*
 * cli/memplan.c — see memplan.h.
 *
 * The plan comes from the model's own layout code (llama_plan_memory runs the same functions that
 * llama_create allocates with), so it is exact, not an estimate: the multi-rank model test compares it
 * with the allocator's counters on every mesh. Sizes are first bounded in floating point so the exact
 * int64 arithmetic cannot overflow: an absurd config ("hidden_size": 1e9) is refused with exit 2 and
 * the figures, not aborted mid-allocation.
 *
 * The check is per host: ranks sharing a node share its memory, so the ranks of one host
 * (MPI_COMM_TYPE_SHARED) add their plans and compare the sum with what the host has available. Each
 * rank's plan is also compared with what its own process limits leave (RLIMIT_AS, RLIMIT_DATA: clusters
 * set them through the scheduler), so a run that would die at its first large allocation is refused
 * before it starts. With --max-memory the user states the bound per rank instead, and neither the host
 * nor the limits are measured; an allocation that then fails still ends the run with a message and
 * exit 1 (core/alloc.c), never an abort.
 */
#include "cli/memplan.h"
#include "core/fault.h"
#include <mpi.h>
#include <assert.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/ckpt_common.h"
#include "core/comm_mpi.h"
#include "core/alloc.h"
#include "core/log.h"

/* A cgroup v2 file holding one number ("max" and unreadable files: -1). */
static int64_t cgroup_value(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    long long v = -1;
    if (fscanf(f, "%lld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

int64_t mp_memplan_available(void) {
    int64_t test = mp_fault_int("mem_available", -1);
    if (test >= 0) return test;
    int64_t avail = mp_proc_kb_bytes("/proc/meminfo", "MemAvailable");
    int64_t max = cgroup_value("/sys/fs/cgroup/memory.max"), cur = cgroup_value("/sys/fs/cgroup/memory.current");
    if (max > 0 && cur >= 0) {
        int64_t room = max > cur ? max - cur : 0;
        if (avail < 0 || room < avail) avail = room;
    }
    return avail;
}

/* The largest total over the mesh, and the sum and count of the totals of this host's ranks. */
static void combine_ranks(const mp_runtime *rt, mp_memplan *p) {
    p->largest = p->total;
    p->host_total = p->total;
    p->host_ranks = 1;
    if (!rt->mpi || rt->world == 1) return;
    MPI_Allreduce(MPI_IN_PLACE, &p->largest, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm host;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &host);
    MPI_Allreduce(MPI_IN_PLACE, &p->host_total, 1, MPI_INT64_T, MPI_SUM, host);
    MPI_Comm_size(host, &p->host_ranks);
    MPI_Comm_free(&host);
}

/* The plan's line in the log (rank 0 prints its own rank's categories and the mesh's figures). */
static void print_plan(const mp_memplan *p, size_t max_bytes) {
    char b[13][32], kv[64] = "", bands[64] = "", io[64] = "", own[64] = "", comm[64] = "";
    const int64_t *c = p->model.bytes;
    if (p->model.kv_cache)
        snprintf(kv, sizeof kv, " (KV cache %s of them)", mp_ckpt_human(b[8], 32, p->model.kv_cache));
    if (p->ckpt_bands)
        snprintf(bands, sizeof bands, ", checkpoint band buffers %s", mp_ckpt_human(b[9], 32, p->ckpt_bands));
    if (p->ckpt_io) snprintf(io, sizeof io, ", checkpoint I/O %s", mp_ckpt_human(b[10], 32, p->ckpt_io));
    if (p->own) snprintf(own, sizeof own, ", command buffers %s", mp_ckpt_human(b[11], 32, p->own));
    if (p->comm) snprintf(comm, sizeof comm, ", collective buffers %s", mp_ckpt_human(b[12], 32, p->comm));
    mp_info("memory plan, rank 0: parameters %s, gradients %s, optimizer %s, FSDP buffers %s, activations %s%s, "
            "checkpoint staging %s%s%s%s%s, other %s; total %s",
            mp_ckpt_human(b[0], 32, c[MP_MEM_PARAMS]), mp_ckpt_human(b[1], 32, c[MP_MEM_GRADS]),
            mp_ckpt_human(b[2], 32, c[MP_MEM_OPTIM]), mp_ckpt_human(b[3], 32, c[MP_MEM_GATHER]),
            mp_ckpt_human(b[4], 32, c[MP_MEM_ACTS]), kv, mp_ckpt_human(b[5], 32, p->staging), bands, io, own, comm,
            mp_ckpt_human(b[6], 32, c[MP_MEM_OTHER] + p->data + p->init), mp_ckpt_human(b[7], 32, p->total));
    if (max_bytes)
        mp_info("memory plan: largest rank %s, bound %s per rank (--max-memory)", mp_ckpt_human(b[0], 32, p->largest),
                mp_ckpt_human(b[1], 32, (int64_t)max_bytes));
    else
        mp_info("memory plan: largest rank %s; %d rank(s) on this host %s of %s available",
                mp_ckpt_human(b[0], 32, p->largest), p->host_ranks, mp_ckpt_human(b[1], 32, p->host_total),
                p->available < 0 ? "(unknown)" : mp_ckpt_human(b[2], 32, p->available));
    if (!max_bytes && p->rlimit_room >= 0)
        mp_info("memory plan: rank 0 is under %s, which leaves it %s", p->rlimit_name,
                mp_ckpt_human(b[0], 32, p->rlimit_room));
}

/* The plan's line comparing the two --recompute modes' activations (a training model: rank 0's). */
static void print_recompute(const mp_memplan *p, const llama_options *opt) {
    if (!p->acts_other) return;
    int full = opt->recompute == LLAMA_RECOMPUTE_FULL;
    int64_t acts = p->model.bytes[MP_MEM_ACTS], none = full ? p->acts_other : acts, with = full ? acts : p->acts_other;
    char b[3][32];
    mp_info("memory plan: activations %s with --recompute none, %s with --recompute full (this run: %s; "
            "total %s)", mp_ckpt_human(b[0], 32, none), mp_ckpt_human(b[1], 32, with), full ? "full" : "none",
            mp_ckpt_human(b[2], 32, p->total));
}

/* MP_EINPUT when this rank's plan does not fit (rank's own figures in the message), else MP_OK. Without
 * recomputation, the advice names --recompute full and what it would save. */
static mp_code check_fits(const mp_memplan *p, const llama_options *opt, size_t max_bytes, mp_err *err) {
    char need[32], have[32], ways[192];
    int64_t saving = p->acts_other ? p->model.bytes[MP_MEM_ACTS] - p->acts_other : 0;
    snprintf(ways, sizeof ways, "use more processes (--dp, --tp), a smaller --batch or --seq-len, or --grad-accum");
    if (opt->recompute == LLAMA_RECOMPUTE_NONE && saving > 0)
        snprintf(ways, sizeof ways, "use more processes (--dp, --tp), --recompute full (activations %s less), a "
                 "smaller --batch or --seq-len, or --grad-accum", mp_ckpt_human((char[32]){0}, 32, saving));
    if (max_bytes) {
        if (p->total <= (int64_t)max_bytes) return MP_OK;
        return mp_err_set(err, MP_EINPUT, "memory plan: this rank needs %s, above --max-memory %s; %s",
                          mp_ckpt_human(need, sizeof need, p->total), mp_ckpt_human(have, sizeof have, (int64_t)max_bytes),
                          ways);
    }
    if (p->rlimit_room >= 0 && p->total > p->rlimit_room)
        return mp_err_set(err, MP_EINPUT,
                          "memory plan: this rank needs %s but %s leaves it %s; %s, raise the limit, or set the "
                          "bound yourself with --max-memory",
                          mp_ckpt_human(need, sizeof need, p->total), p->rlimit_name,
                          mp_ckpt_human(have, sizeof have, p->rlimit_room), ways);
    if (p->available < 0 || p->host_total <= p->available) return MP_OK;
    return mp_err_set(err, MP_EINPUT,
                      "memory plan: the %d rank(s) on this host need %s (this rank %s) but %s is available; %s, or "
                      "set the bound yourself with --max-memory",
                      p->host_ranks, mp_ckpt_human(need, sizeof need, p->host_total),
                      mp_ckpt_human((char[32]){0}, 32, p->total), mp_ckpt_human(have, sizeof have, p->available), ways);
}

int64_t mp_memplan_ckpt_bands(int ranks_per_file, int world) {
    return ckpt_files_grouped(ranks_per_file, world) ? 2 * (int64_t)CKPT_FILL_BYTES_DEFAULT : 0;
}

/* Whether c is a staged communicator (core/comm_staged.h): its host buffers are the plan's. */
static int staged(const mp_comm *c) { return !strcmp(c->ops->name, "staged"); }

/* The collectives' own host memory. The ring collectives' scratch of an MPI group whose sums exceed a
 * piece (core/comm_mpi.h, "Memory"): the host communicators' on a CPU backend, a staged one's inner MPI
 * communicator's, none for NCCL (device buffers). A staged group's two host buffers (core/comm_staged.h)
 * at their largest: the blocking one holds a reduce-scatter's input and this rank's part ((1 + 1/p) x the
 * group's largest sum: a unit's fp32 gradients over dp, N x D activations over tp), which exceeds every
 * gather and all-reduce of the step; the split-phase one a gathered unit in the compute dtype (the dp
 * group's FSDP prefetch). */
static int64_t comm_bytes(const mp_runtime *rt, const llama_memory_plan *mp) {
    const int64_t piece = (int64_t)MP_COMM_MPI_PIECE_BYTES, scratch = (int64_t)MP_COMM_MPI_SCRATCH_BYTES;
    const mp_mesh *m = &rt->mesh;
    int tp_st = staged(m->tp_comm), dp_st = staged(m->dp_comm), host = rt->be->host_memory;
    int64_t b = scratch * (((host || dp_st) && mp->dp_sum_bytes > piece) + ((host || tp_st) && mp->tp_sum_bytes > piece));
    if (tp_st) b += 64 + mp->tp_sum_bytes + mp->tp_sum_bytes / m->tp;
    if (dp_st)
        b += 2 * 64 + mp->dp_sum_bytes + mp->dp_sum_bytes / m->dp +
             mp->dp_sum_bytes / (int64_t)sizeof(float) * (int64_t)mp_act_size(rt->be);
    return b;
}

/* The plan's terms beyond the model's own (see mp_memplan). */
static void command_terms(const mp_runtime *rt, const llama_options *opt, const mp_memplan_use *use, mp_memplan *p) {
    const int64_t *c = p->model.bytes;
    p->staging = use->staging ? c[MP_MEM_PARAMS] + c[MP_MEM_OPTIM] : 0;
    /* inputs and targets, two slots of each (llama_token_bufs: the train step double-buffers them) */
    p->data = 4 * (int64_t)opt->micro_batch * opt->seq_len * (int64_t)sizeof(int32_t);
    p->init = rt->be->host_memory ? 0 : LLAMA_INIT_STAGING_BYTES;
    p->ckpt_bands = use->ckpt_bands;
    p->ckpt_io = use->saves ? ckpt_save_hash_bytes(p->model.largest_shard) : 0;
    if (use->loads) {   /* a load after a save's end: the larger, not both */
        int64_t load = (int64_t)ckpt_reader_scratch_bytes() + (rt->be->host_memory ? 0 : p->model.largest_shard);
        if (load > p->ckpt_io) p->ckpt_io = load;
    }
    p->own = use->own;
    p->comm = comm_bytes(rt, &p->model);
    /* each term < 2^58: no overflow */
    p->total = p->model.total + p->staging + p->data + p->init + p->ckpt_bands + p->ckpt_io + p->own + p->comm;
}

mp_agreed mp_memplan_check(mp_runtime *rt, const llama_config *cfg, const llama_options *opt,
                           const mp_memplan_use *use, size_t max_bytes, mp_memplan *plan, mp_err *err) {
    assert(rt->have_mesh && plan && use);
    memset(plan, 0, sizeof *plan);
    const mp_mesh *mesh = &rt->mesh;
    mp_code rc = llama_plan_memory(cfg, opt, rt->be, mesh->tp, mesh->tp_rank, mesh->dp, mesh->dp_rank, &plan->model,
                                   err);
    if (!rc) command_terms(rt, opt, use, plan);
    if (!rc && !opt->inference) {   /* the other --recompute mode, for comparison (same checks: cannot fail) */
        llama_options other = *opt;
        llama_memory_plan alt;
        other.recompute = opt->recompute == LLAMA_RECOMPUTE_FULL ? LLAMA_RECOMPUTE_NONE : LLAMA_RECOMPUTE_FULL;
        rc = llama_plan_memory(cfg, &other, rt->be, mesh->tp, mesh->tp_rank, mesh->dp, mesh->dp_rank, &alt, err);
        plan->acts_other = alt.bytes[MP_MEM_ACTS];
    }
    /* a plan that fails fails alike on every rank (same config): agree before the collectives below */
    MP_TRY_AGREED(mp_runtime_agree(rt, rc, err));
    combine_ranks(rt, plan);
    plan->available = max_bytes ? -1 : mp_memplan_available();
    plan->rlimit_room = max_bytes ? -1 : mp_mem_rlimit_room(plan->rlimit_name, sizeof plan->rlimit_name);
    if (rt->rank == 0) print_plan(plan, max_bytes);
    if (rt->rank == 0) print_recompute(plan, opt);
    return mp_runtime_agree(rt, check_fits(plan, opt, max_bytes, err), err);
}

/* The figures of one rank's "memory: peak" line. */
enum { PEAK_ABOVE, PEAK_PLAN, PEAK_START, PEAK_HWM, PEAK_ALLOC, PEAK_N };

void mp_memplan_report(const mp_runtime *rt, int64_t planned) {
    int64_t hwm = mp_proc_kb_bytes("/proc/self/status", "VmHWM");
    int64_t mine[PEAK_N] = {[PEAK_ABOVE] = hwm >= 0 && rt->rss_start >= 0 ? hwm - rt->rss_start : -1,
                            [PEAK_PLAN] = planned, [PEAK_START] = rt->rss_start, [PEAK_HWM] = hwm,
                            [PEAK_ALLOC] = mp_mem_peak_total()};
    int world = rt->mpi ? rt->world : 1, worst = 0;
    int64_t *all = rt->rank == 0 ? mp_xmalloc(sizeof mine * (size_t)world) : NULL;
    if (world > 1) MPI_Gather(mine, PEAK_N, MPI_INT64_T, all, PEAK_N, MPI_INT64_T, 0, MPI_COMM_WORLD);
    else if (all) memcpy(all, mine, sizeof mine);
    if (rt->rank != 0) return;
    /* the rank whose peak is highest above (or least below) its own plan: FSDP shards are uneven, so
     * each rank's plan differs, and an unknown peak (-1) is the worst */
    for (int r = 1; r < world; r++) {
        const int64_t *a = all + r * PEAK_N, *w = all + worst * PEAK_N;
        int64_t margin = a[PEAK_ABOVE] - a[PEAK_PLAN], worst_margin = w[PEAK_ABOVE] - w[PEAK_PLAN];
        if (a[PEAK_ABOVE] < 0 ? w[PEAK_ABOVE] >= 0 : w[PEAK_ABOVE] >= 0 && margin > worst_margin) worst = r;
    }
    const int64_t *f = all + worst * PEAK_N;
    char b[4][32], on[64] = "";
    if (world > 1) snprintf(on, sizeof on, " on rank %d of %d (the least below its plan)", worst, world);
    mp_info("memory: peak %s (%lld bytes)%s resident above the %s at start-up (VmHWM %s), plan %s (%lld bytes); "
            "allocator peak %s (%lld bytes)",
            mp_ckpt_human(b[0], 32, f[PEAK_ABOVE]), (long long)f[PEAK_ABOVE], on,
            mp_ckpt_human(b[1], 32, f[PEAK_START]),
            mp_ckpt_human(b[2], 32, f[PEAK_HWM]), mp_ckpt_human(b[3], 32, f[PEAK_PLAN]), (long long)f[PEAK_PLAN],
            mp_ckpt_human((char[32]){0}, 32, f[PEAK_ALLOC]), (long long)f[PEAK_ALLOC]);
    free(all);
}
