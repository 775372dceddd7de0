/*
 * core/comm_self.c — the communicator of a group of one rank (the 1x1 mesh, no MPI needed).
 *
 * Every collective over one rank is the identity: all_reduce leaves x as it is, all_gatherv and
 * reduce_scatterv, gather, gatherv and scatterv copy in to out (memmove, so in == out is fine), broadcast leaves the
 * buffer. Nothing
 * moves, so nothing is counted: bytes_sent and calls stay 0 (core/comm.h).
 * Each mp_comm_self() call returns a fresh heap object owned by the caller (destroy frees it), so
 * several of them can be destroyed independently. Buffers are host memory.
 */
#include "core/comm.h"
#include "core/alloc.h"
#include <assert.h>
#include <string.h>

static void self_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    assert(c && c->size == 1 && n >= 0 && (x || n == 0) && (dt == MP_F32 || dt == MP_BF16));
    (void)op_max;
}

static void self_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    assert(c && c->size == 1 && n >= 0 && (x || n == 0));
}

/* out[counts[0]] = in[counts[0]]. */
static void self_all_gatherv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c && c->size == 1 && counts && counts[0] >= 0);
    if (counts[0] > 0 && out != in) memmove(out, in, (size_t)counts[0] * mp_dtype_size(dt));
}

/* The split-phase gather's end: start (self_all_gatherv) finished it already. */
static void self_all_gatherv_wait(mp_comm *c) { assert(c && c->size == 1); }

/* out[counts[0]] = in[counts[0]]: the sum over one rank. */
static void self_reduce_scatterv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c && c->size == 1 && counts && counts[0] >= 0);
    if (counts[0] > 0 && out != in) memmove(out, in, (size_t)counts[0] * mp_dtype_size(dt));
}

static void self_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    assert(c && c->size == 1 && root == 0 && (buf || bytes == 0));
}

/* out[n] = in[n]. */
static void self_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    assert(c && c->size == 1 && root == 0 && ((out && in) || n == 0));
    if (n > 0 && out != in) memmove(out, in, n);
}

/* out[n] = in[n]. */
static void self_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    assert(c && c->size == 1 && root == 0 && n >= 0 && (!counts || counts[0] == n));
    self_gather(c, out, in, (size_t)n, root);
}

/* out[n] = in[n]. */
static void self_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    assert(c && c->size == 1 && root == 0 && n >= 0 && (!counts || counts[0] == n));
    self_gather(c, out, in, (size_t)n, root);
}

static void self_barrier(mp_comm *c) { assert(c && c->size == 1); }

static void self_destroy(mp_comm *c) {
    if (!c) return;
    mp_free_acct(c, sizeof *c, MP_MEM_COMM);
}

void mp_comm_use_self_ops(mp_comm *c) {
    assert(c && c->size == 1);
    c->all_reduce = self_all_reduce;
    c->all_reduce_f64 = self_all_reduce_f64;
    c->all_gatherv = self_all_gatherv;
    c->all_gatherv_start = self_all_gatherv;
    c->all_gatherv_wait = self_all_gatherv_wait;
    c->reduce_scatterv = self_reduce_scatterv;
    c->broadcast = self_broadcast;
    c->gather = self_gather;
    c->gatherv = self_gatherv;
    c->scatterv = self_scatterv;
    c->barrier = self_barrier;
    c->send = NULL;   /* a group of one has no peer (core/comm.h) */
    c->recv = NULL;
}

/* A new communicator of one rank; aborts on OOM (as every mp_alloc). */
mp_comm *mp_comm_self(void) {
    mp_comm *c = mp_calloc(sizeof *c, MP_MEM_COMM);
    c->name = "self";
    c->rank = 0;
    c->size = 1;
    mp_comm_use_self_ops(c);
    c->destroy = self_destroy;
    c->impl = NULL;
    return c;
}
