/*
 * core/mesh.c — the 2-D process mesh (core/mesh.h): world = dp x tp with tp innermost, so
 * rank = dp_rank * tp + tp_rank, and the balanced split used for FSDP shards and dp batch splits.
 *
 * Under MPI the three communicators are built from MPI_COMM_WORLD: world_comm is a dup of it, tp_comm
 * is MPI_Comm_split by dp_rank (key tp_rank, so tp_comm->rank == tp_rank) and dp_comm is split by
 * tp_rank (key dp_rank). The size checks run before any collective and depend only on the world size
 * and the arguments, so every rank returns the same error and none is left waiting in a split.
 * The single-process mesh uses three distinct mp_comm_self() objects; mp_mesh_destroy destroys each
 * distinct communicator once (world, tp, dp, ctl_dp and ctl_tp: after mp_mesh_attach_device the ctl_
 * ones are communicators of their own) and clears the pointers, so it is safe whichever way they were
 * made and safe to call twice. Before the attach (and on the CPU unless --comm staged) ctl_dp ==
 * dp_comm and ctl_tp == tp_comm.
 *
 * Device communicators (mp_mesh_attach_device). On a GPU backend tp_comm and dp_comm are
 * replaced by "device" communicators whose buffers are device memory; the host ones stay, for host
 * buffers, as ctl_tp and ctl_dp. A device communicator is:
 *   - for a group of more than one rank, a GPU per rank: an NCCL communicator (core/cuda/comm_nccl.h: the unique id
 *     drawn by the group's rank 0 and broadcast over the group's MPI communicator) on a stream of its own
 *     (be->stream_create), made by the CUDA module's comm_create (core/cuda_module.h: this file sees no
 *     CUDA type, and a build without CUDA compiles it too and never reaches it), behind a thin wrapper
 *     that orders it with the backend's compute stream through two events: the collective's stream
 *     waits for the compute queued before the call, and the compute stream's later work waits for the
 *     collective. So callers keep the contract of the host communicators (a collective is "done" for
 *     every op issued after it, with no host wait), and the collective still runs on its own stream
 *     (later overlap work can move the waits out of the wrapper). The split-phase all_gatherv does
 *     that: its start makes the collective's stream wait for the compute queued so far but leaves the
 *     compute stream free, and its wait makes the compute stream wait for it (FSDP prefetch).
 *     The wrapper's counters are the NCCL communicator's (core/comm.h's formulas), added per call;
 *   - for a group of more than one rank whose ranks share GPUs (a host with more ranks than GPUs: NCCL
 *     refuses two ranks on a device), or under --comm staged on any backend, the staged communicator
 *     (core/comm_staged.h: to_host, MPI, to_device; ordered with the compute stream by those copies);
 *   - for a group of one rank, a communicator of no traffic whose all_gatherv / reduce_scatterv copy
 *     in to out with be->copy when they differ (mp_comm_self's memmove would touch device memory from
 *     the host). No NCCL is created for it: a 1x1 CUDA run needs neither NCCL nor MPI.
 * The backend must outlive the mesh: mp_mesh_destroy frees the device communicators' streams and events
 * through it (tear down the mesh before the backend).
 * NCCL failures are agreed over the world (mp_comm_agree) before the next collective (a tp group that
 * failed on one dp row must not leave the other rows waiting in the dp group's set-up): every rank
 * returns the same code with the message of the lowest failing rank.
 */
#include "core/mesh.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "core/comm_mpi.h"
#include "core/comm_staged.h"
#include "core/log.h"
#include <assert.h>
#include <mpi.h>
#include <stdio.h>
#include <string.h>
#include "core/cuda_module.h"

void mp_mesh_init_single(mp_mesh *m) {
    assert(m);
    memset(m, 0, sizeof *m);
    m->world = 1;
    m->rank = 0;
    m->tp = m->dp = 1;
    m->tp_rank = m->dp_rank = 0;
    m->world_comm = mp_comm_self();
    m->tp_comm = mp_comm_self();
    m->dp_comm = mp_comm_self();
    m->ctl_dp = m->dp_comm;
    m->ctl_tp = m->tp_comm;
    m->uses_mpi = 0;
}

/* mp_comm over a split of MPI_COMM_WORLD (the split itself is freed: mp_comm_mpi_create dups it). */
static mp_comm *split_comm(int color, int key) {
    MPI_Comm part;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &part);
    mp_comm *c = mp_comm_mpi_create(part);
    MPI_Comm_free(&part);
    return c;
}

mp_code mp_mesh_init_mpi(mp_mesh *m, int tp, int dp, mp_err *err) {
    assert(m);
    memset(m, 0, sizeof *m);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return mp_err_set(err, MP_EINTERNAL, "mesh: MPI is %s", fin ? "already finalised" : "not initialised");
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (tp <= 0)
        return mp_err_set(err, MP_EINPUT, "mesh: tp must be >= 1 (got tp %d, world size %d)", tp, world);
    if (dp < 0)
        return mp_err_set(err, MP_EINPUT, "mesh: dp must be >= 1, or 0 for world / tp (got dp %d)", dp);
    if (dp > 0 && (int64_t)tp * dp != world)
        return mp_err_set(err, MP_EINPUT, "mesh: world size %d != tp %d x dp %d", world, tp, dp);
    if (world % tp != 0)
        return mp_err_set(err, MP_EINPUT, "mesh: world size %d is not a multiple of tp %d", world, tp);
    if (dp == 0) dp = world / tp;
    assert((int64_t)tp * dp == world);

    m->world = world;
    m->rank = rank;
    m->tp = tp;
    m->dp = dp;
    m->tp_rank = rank % tp;
    m->dp_rank = rank / tp;
    m->uses_mpi = 1;
    m->world_comm = mp_comm_mpi_create(MPI_COMM_WORLD);
    m->tp_comm = split_comm(m->dp_rank, m->tp_rank);
    m->dp_comm = split_comm(m->tp_rank, m->dp_rank);
    m->ctl_dp = m->dp_comm;
    m->ctl_tp = m->tp_comm;
    assert(m->world_comm->size == world && m->world_comm->rank == rank);
    assert(m->tp_comm->size == tp && m->tp_comm->rank == m->tp_rank);
    assert(m->dp_comm->size == dp && m->dp_comm->rank == m->dp_rank);
    return MP_OK;
}

/* ---- device communicators (see the top of this file) ---- */
typedef struct {
    mp_backend *be;
    mp_comm *inner;        /* the NCCL communicator; NULL for a group of one */
    mp_stream stream;      /* inner's stream */
    mp_event before, after;
    mp_event gathered;     /* recorded after a split-phase all_gatherv (the compute stream waits in wait) */
    int gather_pending;
} dev_comm;

static dev_comm *dev_of(const mp_comm *c) {
    assert(c && c->impl);
    return (dev_comm *)c->impl;
}

/* Group of one, device buffers: nothing moves, nothing is counted; out = in by a device copy. */
static void dev1_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    assert(c->size == 1 && n >= 0 && (x || n == 0) && (dt == MP_F32 || dt == MP_BF16));
    (void)op_max;
}
static void dev1_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    assert(c->size == 1 && n >= 0 && (x || n == 0));
}
static void dev1_copy(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c->size == 1 && counts && counts[0] >= 0);
    if (counts[0] == 0 || out == in) return;
    size_t bytes = (size_t)counts[0] * mp_dtype_size(dt);
    /* be->copy is a device memcpy: no overlap (the layers' gathers and scatters never overlap) */
    assert((const char *)out + bytes <= (const char *)in || (const char *)in + bytes <= (const char *)out);
    mp_backend *be = dev_of(c)->be;
    be->copy(be, out, in, bytes);
}
static void dev1_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    assert(c->size == 1 && root == 0 && (buf || bytes == 0));
}
static void dev1_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    assert(c->size == 1 && root == 0);
    if (n == 0 || out == in) return;
    assert((const char *)out + n <= (const char *)in || (const char *)in + n <= (const char *)out);
    mp_backend *be = dev_of(c)->be;
    be->copy(be, out, in, n);
}
static void dev1_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    assert(c->size == 1 && root == 0 && n >= 0 && (!counts || counts[0] == n));
    dev1_gather(c, out, in, (size_t)n, root);
}
static void dev1_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    assert(c->size == 1 && root == 0 && n >= 0 && (!counts || counts[0] == n));
    dev1_gather(c, out, in, (size_t)n, root);
}
static void dev1_barrier(mp_comm *c) { assert(c->size == 1); }

/* The wrapper around an NCCL communicator: the collective's stream waits for the compute queued so far,
 * the inner call enqueues it, the compute stream waits for it; the inner counters of this one call are
 * added to the wrapper's (the inner's are private and reset before every call). */
static dev_comm *wrap_enter(mp_comm *c) {
    dev_comm *d = dev_of(c);
    mp_backend *be = d->be;
    be->event_record(be, d->before, NULL);
    be->stream_wait_event(be, d->stream, d->before);
    mp_comm_reset_counters(d->inner);
    return d;
}
static void wrap_leave(mp_comm *c, dev_comm *d) {
    mp_backend *be = d->be;
    be->event_record(be, d->after, d->stream);
    be->stream_wait_event(be, NULL, d->after);
    mp_comm_add_counters(c, d->inner);
}
static void wrap_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->all_reduce(d->inner, x, n, dt, op_max);
    wrap_leave(c, d);
}
static void wrap_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->all_reduce_f64(d->inner, x, n);
    wrap_leave(c, d);
}
static void wrap_all_gatherv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->all_gatherv(d->inner, out, in, counts, dt);
    wrap_leave(c, d);
}
/* Split-phase gather (core/comm.h): enqueued on the collective's stream after the compute queued so far,
 * like every wrapped call, but the compute stream is not made to wait until wait: the compute issued in
 * between (the current FSDP unit's) overlaps the gather. */
static void wrap_all_gatherv_start(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    dev_comm *d = wrap_enter(c);
    assert(!d->gather_pending && "comm: one split-phase all_gatherv in flight per communicator");
    d->inner->ops->all_gatherv(d->inner, out, in, counts, dt);
    d->be->event_record(d->be, d->gathered, d->stream);
    d->gather_pending = 1;
    mp_comm_add_counters(c, d->inner);
}
static void wrap_all_gatherv_wait(mp_comm *c) {
    dev_comm *d = dev_of(c);
    if (!d->gather_pending) return;
    d->be->stream_wait_event(d->be, NULL, d->gathered);
    d->gather_pending = 0;
}
/* Group of one: start copies (on the compute stream, in order), wait has nothing to do. */
static void dev1_wait(mp_comm *c) { assert(c->size == 1); }
static void wrap_reduce_scatterv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->reduce_scatterv(d->inner, out, in, counts, dt);
    wrap_leave(c, d);
}
static void wrap_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->broadcast(d->inner, buf, bytes, root);
    wrap_leave(c, d);
}
static void wrap_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->gather(d->inner, out, in, n, root);
    wrap_leave(c, d);
}
static void wrap_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->gatherv(d->inner, out, in, n, counts, root);
    wrap_leave(c, d);
}
static void wrap_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->scatterv(d->inner, out, n, in, counts, root);
    wrap_leave(c, d);
}
/* The compute queued so far and the group's collectives have finished, then the group meets (the inner
 * barrier synchronises its stream, which waits for the compute first). */
static void wrap_barrier(mp_comm *c) {
    dev_comm *d = wrap_enter(c);
    d->inner->ops->barrier(d->inner);
    wrap_leave(c, d);
}

/* Frees a device communicator: the NCCL one (collective over the group), its events and stream. */
static void dev_destroy(mp_comm *c) {
    if (!c) return;
    dev_comm *d = dev_of(c);
    mp_backend *be = d->be;
    if (d->inner) d->inner->ops->destroy(d->inner);
    if (d->before) be->event_destroy(be, d->before);
    if (d->after) be->event_destroy(be, d->after);
    if (d->gathered) be->event_destroy(be, d->gathered);
    if (d->stream) be->stream_destroy(be, d->stream);
    mp_free_acct(d, sizeof *d, MP_MEM_COMM);
    mp_comm_free(c);
}

/* A device group of one. */
static const mp_comm_ops dev1_ops = {
    .name = "self",
    .all_reduce = dev1_all_reduce,
    .all_reduce_f64 = dev1_all_reduce_f64,
    .all_gatherv = dev1_copy,
    .all_gatherv_start = dev1_copy,
    .all_gatherv_wait = dev1_wait,
    .reduce_scatterv = dev1_copy,
    .broadcast = dev1_broadcast,
    .gather = dev1_gather,
    .gatherv = dev1_gatherv,
    .scatterv = dev1_scatterv,
    .barrier = dev1_barrier,
    .destroy = dev_destroy,
};
/* NCCL behind the stream wrapper; wrap_blocking_ops offers no split phase (mp_mesh_attach_device). */
#define WRAP_OPS(start_, wait_)                                                                            \
    {                                                                                                      \
        .name = "nccl", .all_reduce = wrap_all_reduce, .all_reduce_f64 = wrap_all_reduce_f64,              \
        .all_gatherv = wrap_all_gatherv, .all_gatherv_start = (start_), .all_gatherv_wait = (wait_),       \
        .reduce_scatterv = wrap_reduce_scatterv, .broadcast = wrap_broadcast, .gather = wrap_gather,      \
        .gatherv = wrap_gatherv, .scatterv = wrap_scatterv, .barrier = wrap_barrier, .destroy = dev_destroy \
    }
static const mp_comm_ops wrap_ops = WRAP_OPS(wrap_all_gatherv_start, wrap_all_gatherv_wait);
static const mp_comm_ops wrap_blocking_ops = WRAP_OPS(NULL, NULL);

/* The NCCL device communicator over the group of host communicator host (which stays the caller's;
 * more than one rank). Collective over that group. NULL with err set when NCCL fails. */
static mp_comm *dev_comm_create(mp_backend *be, mp_comm *host, mp_err *err) {
    assert(host->size > 1 && strcmp(host->ops->name, "mpi") == 0);
    dev_comm *d = mp_calloc(sizeof *d, MP_MEM_COMM);
    d->be = be;
    mp_comm *c = mp_comm_new(&wrap_ops, host->rank, host->size, d);
    d->stream = be->stream_create(be);
    d->before = be->event_create(be);
    d->after = be->event_create(be);
    d->gathered = be->event_create(be);
    const mp_cuda_module *mod = NULL;
    if (mp_cuda_module_load(&mod, err) == MP_OK)   /* loaded already: it made be */
        d->inner = mod->comm_create(mp_comm_mpi_handle(host), be, d->stream, err);
    if (!d->inner) {
        dev_destroy(c);
        return NULL;
    }
    assert(d->inner->rank == host->rank && d->inner->size == host->size);
    return c;
}

/* The device communicator of a GPU group of one: copies on the device, nothing counted. */
static mp_comm *dev1_comm_create(mp_backend *be) {
    dev_comm *d = mp_calloc(sizeof *d, MP_MEM_COMM);
    d->be = be;
    return mp_comm_new(&dev1_ops, 0, 1, d);
}

const char *const mp_mesh_comm_names[] = {"auto", "nccl", "staged", NULL};

/* Whether some host runs more ranks than it shows GPUs (NCCL refuses two ranks on one device): each
 * rank counts the ranks of its host (MPI_COMM_TYPE_SHARED) against the CUDA module's device count,
 * agreed over the world (MAX), so every rank picks the same communicator. *ranks, *gpus: the worst
 * host's figures (for the log line). Collective over the world. */
static int gpu_shared(int *ranks, int *gpus) {
    MPI_Comm host;
    int local = 1, n = 0;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host);
    MPI_Comm_size(host, &local);
    MPI_Comm_free(&host);
    const mp_cuda_module *mod = NULL;
    char why[256];
    mp_err e;
    if (mp_cuda_module_load(&mod, &e) == MP_OK) n = mod->device_count(why, sizeof why);   /* it made the backend */
    if (n < 1) n = 1;
    int v[2] = {local > n ? local : 0, local > n ? -n : 0}, w[2];
    MPI_Allreduce(v, w, 2, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    *ranks = w[0];
    *gpus = -w[1];
    return w[0] > 0;
}

/* The kind the groups of mesh m get on backend be for the asked kind (mp_mesh_comm_names): staged or
 * nccl on a GPU (auto: staged when ranks share a GPU, one line logged), staged or the host MPI (-1) on
 * the CPU. MP_EINPUT for nccl on a CPU backend. Collective over the world on a GPU under auto. */
static mp_code comm_kind(const mp_mesh *m, const mp_backend *be, mp_mesh_comm asked, mp_mesh_comm *kind,
                         mp_err *err) {
    int gpu = be->device == MP_DEV_CUDA;
    if (asked == MP_MESH_COMM_NCCL && !gpu)
        return mp_err_set(err, MP_EINPUT, "--comm nccl needs --device cuda (device %s's buffers are host memory: "
                          "use --comm staged or auto)", be->name);
    *kind = asked;
    if (asked == MP_MESH_COMM_STAGED && m->world > 1)
        mp_log(MP_LOG_INFO, "comm: the tp and dp collectives stage through host memory and MPI (--comm staged)");
    if (asked != MP_MESH_COMM_AUTO) return MP_OK;
    *kind = gpu ? MP_MESH_COMM_NCCL : (mp_mesh_comm)-1;
    int ranks = 0, gpus = 0;
    if (gpu && m->uses_mpi && m->world > 1 && gpu_shared(&ranks, &gpus)) {
        *kind = MP_MESH_COMM_STAGED;
        mp_log(MP_LOG_INFO, "comm: %d ranks share %d GPU%s on one host: the tp and dp collectives stage through "
               "host memory and MPI (--comm staged; NCCL needs a GPU per rank)", ranks, gpus, gpus == 1 ? "" : "s");
    }
    return MP_OK;
}

mp_code mp_mesh_attach_device(mp_mesh *m, mp_backend *be, mp_mesh_comm asked, mp_err *err) {
    assert(m && be && m->world_comm && m->tp_comm && m->dp_comm && m->ctl_dp && m->ctl_tp);
    mp_mesh_comm kind = asked;
    MP_TRY(comm_kind(m, be, asked, &kind, err));
    if (kind != MP_MESH_COMM_NCCL && kind != MP_MESH_COMM_STAGED) return MP_OK;   /* host buffers: host comms */
    if (be->device == MP_DEV_CUDA && (!be->copy || !be->stream_create || !be->stream_destroy ||
                                      !be->event_create || !be->event_destroy || !be->event_record ||
                                      !be->stream_wait_event))
        return mp_err_set(err, MP_EINTERNAL, "mesh: backend %s lacks the copy, stream or event entries its "
                          "device communicators need", be->name);
    /* tp, then dp (a group already given its device communicator is left as it is); each agreed over the
     * world before any rank goes on, so that no rank enters the next set-up while another has failed */
    for (int g = 0; g < 2; g++) {
        mp_comm **dev = g == 0 ? &m->tp_comm : &m->dp_comm, **ctl = g == 0 ? &m->ctl_tp : &m->ctl_dp;
        if (*ctl != *dev) continue;   /* attached already */
        mp_comm *c = NULL;
        mp_err e;
        mp_err_clear(&e);
        mp_code rc = MP_OK;
        if ((*dev)->size > 1 && kind == MP_MESH_COMM_STAGED) c = mp_comm_staged_create(be, *dev);
        else if ((*dev)->size > 1) c = dev_comm_create(be, *dev, &e);
        else if (be->device == MP_DEV_CUDA) c = dev1_comm_create(be);
        else continue;   /* a CPU group of one: the host communicator serves */
        if (!c) rc = mp_err_wrap(&e, "mesh: device communicator of the %s group (%d ranks)", g == 0 ? "tp" : "dp",
                                 g == 0 ? m->tp : m->dp);
        if ((rc = mp_comm_agree(m->world_comm, rc, &e, NULL))) {
            if (c) c->ops->destroy(c);   /* made here but failed elsewhere: freed, this group left as it was */
            if (err) *err = e;
            return rc;
        }
        *ctl = *dev;   /* the host communicator stays, for host buffers and scalars */
        *dev = c;
    }
    /* NCCL does not order the kernels of two communicators the same way on every GPU: a dp gather left
     * running beside the tp group's collectives can hang ("Using multiple NCCL communicators
     * concurrently" in NCCL's guide). So with both groups on NCCL the dp communicator offers no split
     * phase, and FSDP gathers stay blocking (ordered with the compute stream, hence with tp's
     * collectives); a pure-FSDP mesh (tp = 1) prefetches. The staged communicator's MPI has no such
     * hazard: it keeps its split phase. */
    if (m->tp > 1 && m->dp > 1 && m->dp_comm->ops == &wrap_ops) m->dp_comm->ops = &wrap_blocking_ops;
    return MP_OK;
}

void mp_mesh_destroy(mp_mesh *m) {
    if (!m) return;
    /* ctl_dp / ctl_tp are dp_comm / tp_comm themselves until mp_mesh_attach_device, their own after */
    mp_comm *cs[5] = {m->world_comm, m->tp_comm, m->dp_comm, m->ctl_dp, m->ctl_tp};
    for (int i = 0; i < 5; i++) {
        if (!cs[i]) continue;
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= cs[j] == cs[i];
        if (!dup) cs[i]->ops->destroy(cs[i]);
    }
    m->world_comm = m->tp_comm = m->dp_comm = m->ctl_dp = m->ctl_tp = NULL;
}

void mp_split(int64_t n, int p, int i, int64_t *start, int64_t *count) {
    assert(n >= 0 && p >= 1 && i >= 0 && i < p && start && count);
    int64_t base = n / p, rem = n % p;
    *count = base + (i < rem ? 1 : 0);
    *start = (int64_t)i * base + (i < rem ? i : rem);
}
