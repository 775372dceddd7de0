/*
 * core/comm_staged.c — the staged communicator (core/comm_staged.h): every collective is to_host, the
 * inner MPI communicator's collective on host memory, to_device. The inner's counters of each call are
 * added to this one's (mp_comm_add_counters), so the traffic is counted once, by the MPI formulas.
 */
#include "core/comm_staged.h"
#include <assert.h>
#include <mpi.h>
#include <string.h>
#include "core/alloc.h"
#include "core/comm_mpi.h"

typedef struct {
    mp_backend *be;
    mp_comm *inner;          /* an "mpi" communicator over a dup of the group */
    char *buf;               /* the blocking collectives' host buffer [cap] */
    size_t cap;
    char *gbuf;              /* the split-phase gather's own [gcap]: other collectives may run meanwhile */
    size_t gcap;
    void *g_out;             /* the gather in flight: its device destination and bytes */
    size_t g_bytes;
    int g_pending;
} staged_impl;

static const mp_comm_ops staged_ops;   /* defined after its functions */

static staged_impl *impl_of(const mp_comm *c) {
    assert(c && c->impl && c->ops == &staged_ops);
    return (staged_impl *)c->impl;
}

/* *buf grown (contents dropped) to hold bytes (at least 64, so that an empty collective still has a
 * buffer to name); *cap its size. Page-locked on a GPU (host_alloc). */
static char *grow(mp_backend *be, char **buf, size_t *cap, size_t bytes) {
    if (bytes < 64) bytes = 64;
    if (*cap >= bytes) return *buf;
    if (*buf) be->host_free(be, *buf, *cap, MP_MEM_COMM);
    *buf = be->host_alloc(be, bytes, MP_MEM_COMM);
    *cap = bytes;
    return *buf;
}

/* The blocking collectives' buffer of at least bytes; the inner's counters zeroed for this call. */
static char *enter(mp_comm *c, size_t bytes) {
    staged_impl *S = impl_of(c);
    mp_comm_reset_counters(S->inner);
    return grow(S->be, &S->buf, &S->cap, bytes);
}

/* Total of counts[size] and the element offset of this rank's block. */
static int64_t displ_total(const mp_comm *c, const int64_t *counts, int64_t *displ) {
    int64_t t = 0;
    for (int r = 0; r < c->size; r++) {
        assert(counts[r] >= 0);
        if (r == c->rank) *displ = t;
        t += counts[r];
    }
    return t;
}

static void st_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    staged_impl *S = impl_of(c);
    size_t bytes = (size_t)n * mp_dtype_size(dt);
    char *h = enter(c, bytes);
    S->be->to_host(S->be, h, x, bytes);
    S->inner->ops->all_reduce(S->inner, h, n, dt, op_max);
    S->be->to_device(S->be, x, h, bytes);
    mp_comm_add_counters(c, S->inner);
}

static void st_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    staged_impl *S = impl_of(c);
    size_t bytes = (size_t)n * sizeof(double);
    char *h = enter(c, bytes);
    S->be->to_host(S->be, h, x, bytes);
    S->inner->ops->all_reduce_f64(S->inner, (double *)(void *)h, n);
    S->be->to_device(S->be, x, h, bytes);
    mp_comm_add_counters(c, S->inner);
}

/* This rank's block goes down into its place of the host image of out, the inner gathers in place, the
 * whole of out goes up. in may be out + displ (in place): it is read before out is written. */
static void st_all_gatherv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    staged_impl *S = impl_of(c);
    size_t e = mp_dtype_size(dt);
    int64_t displ = 0, total = displ_total(c, counts, &displ);
    char *h = enter(c, (size_t)total * e);
    S->be->to_host(S->be, h + (size_t)displ * e, in, (size_t)counts[c->rank] * e);
    S->inner->ops->all_gatherv(S->inner, h, h + (size_t)displ * e, counts, dt);
    S->be->to_device(S->be, out, h, (size_t)total * e);
    mp_comm_add_counters(c, S->inner);
}

/* Split-phase all_gatherv: the block goes down and the inner's split-phase gather starts on the gather's
 * own buffer; wait ends it and copies the result up. One in flight (core/comm.h). */
static void st_all_gatherv_start(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    staged_impl *S = impl_of(c);
    assert(!S->g_pending && "comm: one split-phase all_gatherv in flight per communicator");
    size_t e = mp_dtype_size(dt);
    int64_t displ = 0, total = displ_total(c, counts, &displ);
    char *h = grow(S->be, &S->gbuf, &S->gcap, (size_t)total * e);
    mp_comm_reset_counters(S->inner);
    S->be->to_host(S->be, h + (size_t)displ * e, in, (size_t)counts[c->rank] * e);
    S->inner->ops->all_gatherv_start(S->inner, h, h + (size_t)displ * e, counts, dt);
    mp_comm_add_counters(c, S->inner);
    S->g_out = out;
    S->g_bytes = (size_t)total * e;
    S->g_pending = 1;
}

static void st_all_gatherv_wait(mp_comm *c) {
    staged_impl *S = impl_of(c);
    if (!S->g_pending) return;
    mp_comm_reset_counters(S->inner);
    S->inner->ops->all_gatherv_wait(S->inner);
    mp_comm_add_counters(c, S->inner);
    S->be->to_device(S->be, S->g_out, S->gbuf, S->g_bytes);
    S->g_pending = 0;
}

/* in goes down whole, the inner reduce-scatters it into the buffer's tail (out must not overlap in on
 * the host either), this rank's block goes up. */
static void st_reduce_scatterv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    staged_impl *S = impl_of(c);
    size_t e = mp_dtype_size(dt);
    int64_t displ = 0, total = displ_total(c, counts, &displ);
    size_t tb = (size_t)total * e, mine = (size_t)counts[c->rank] * e;
    char *h = enter(c, tb + mine);
    S->be->to_host(S->be, h, in, tb);
    S->inner->ops->reduce_scatterv(S->inner, h + tb, h, counts, dt);
    S->be->to_device(S->be, out, h + tb, mine);
    mp_comm_add_counters(c, S->inner);
}

static void st_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    staged_impl *S = impl_of(c);
    char *h = enter(c, bytes);
    if (c->rank == root) S->be->to_host(S->be, h, buf, bytes);
    S->inner->ops->broadcast(S->inner, h, bytes, root);
    if (c->rank != root) S->be->to_device(S->be, buf, h, bytes);
    mp_comm_add_counters(c, S->inner);
}

/* The gathers: this rank's n bytes go down after the root's image of out (sum bytes on root, none
 * elsewhere), the inner gathers (gatherv when v, counts read on root only; gather of n from every rank
 * otherwise), the root's out goes up. */
static void st_gather_any(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root, int v) {
    staged_impl *S = impl_of(c);
    int64_t sum = 0;
    for (int r = 0; c->rank == root && r < c->size; r++) sum += v ? counts[r] : n;
    char *h = enter(c, (size_t)(sum + n));
    S->be->to_host(S->be, h + sum, in, (size_t)n);
    if (v) S->inner->ops->gatherv(S->inner, h, h + sum, n, counts, root);
    else S->inner->ops->gather(S->inner, h, h + sum, (size_t)n, root);
    if (c->rank == root) S->be->to_device(S->be, out, h, (size_t)sum);
    mp_comm_add_counters(c, S->inner);
}
static void st_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    st_gather_any(c, out, in, (int64_t)n, NULL, root, 0);
}
static void st_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    assert(c->rank != root || counts);
    st_gather_any(c, out, in, n, counts, root, 1);
}

/* The root's in goes down whole, the inner scatters, every rank's n bytes go up. */
static void st_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    staged_impl *S = impl_of(c);
    int64_t sum = 0;
    for (int r = 0; c->rank == root && r < c->size; r++) sum += counts[r];
    char *h = enter(c, (size_t)(sum + n));
    if (c->rank == root) S->be->to_host(S->be, h, in, (size_t)sum);
    S->inner->ops->scatterv(S->inner, h + sum, n, h, counts, root);
    S->be->to_device(S->be, out, h + sum, (size_t)n);
    mp_comm_add_counters(c, S->inner);
}

/* The device has finished what this rank queued, then the group meets. */
static void st_barrier(mp_comm *c) {
    staged_impl *S = impl_of(c);
    S->be->synchronize(S->be);
    S->inner->ops->barrier(S->inner);
}

/* Frees the inner communicator (collective over the group), the host buffers and the instance. */
static void st_destroy(mp_comm *c) {
    if (!c) return;
    staged_impl *S = impl_of(c);
    assert(!S->g_pending && "comm: destroyed with a split-phase all_gatherv in flight");
    S->inner->ops->destroy(S->inner);
    if (S->buf) S->be->host_free(S->be, S->buf, S->cap, MP_MEM_COMM);
    if (S->gbuf) S->be->host_free(S->be, S->gbuf, S->gcap, MP_MEM_COMM);
    mp_free_acct(S, sizeof *S, MP_MEM_COMM);
    mp_comm_free(c);
}

static const mp_comm_ops staged_ops = {
    .name = "staged",
    .all_reduce = st_all_reduce,
    .all_reduce_f64 = st_all_reduce_f64,
    .all_gatherv = st_all_gatherv,
    .all_gatherv_start = st_all_gatherv_start,
    .all_gatherv_wait = st_all_gatherv_wait,
    .reduce_scatterv = st_reduce_scatterv,
    .broadcast = st_broadcast,
    .gather = st_gather,
    .gatherv = st_gatherv,
    .scatterv = st_scatterv,
    .barrier = st_barrier,
    .destroy = st_destroy,
};

mp_comm *mp_comm_staged_create(mp_backend *be, mp_comm *host) {
    assert(be && host && host->size > 1 && strcmp(host->ops->name, "mpi") == 0);
    assert(be->to_host && be->to_device && be->host_alloc && be->host_free && be->synchronize);
    staged_impl *S = mp_calloc(sizeof *S, MP_MEM_COMM);
    S->be = be;
    S->inner = mp_comm_mpi_create(mp_comm_mpi_handle(host));
    assert(S->inner->rank == host->rank && S->inner->size == host->size);
    return mp_comm_new(&staged_ops, host->rank, host->size, S);
}

size_t mp_comm_staged_host_bytes(const mp_comm *c) {
    const staged_impl *S = impl_of(c);
    return S->cap + S->gcap;
}
