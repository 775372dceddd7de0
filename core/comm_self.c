/*
 * core/comm_self.c — the communicator of a group of one rank (the 1x1 mesh, no MPI needed).
 *
 * Every collective over one rank is the identity: all_reduce leaves x as it is, all_gatherv and
 * reduce_scatterv, gather, gatherv and scatterv copy in to out (memmove, so in == out is fine), broadcast
 * leaves the buffer. Nothing moves, so nothing is counted: bytes_sent and calls stay 0 (core/comm.h).
 * The operations are one const table (MP_COMM_SELF_OPS, core/comm_self.h: an MPI group of one uses the
 * same operations under its own name and destroy). Each mp_comm_self() call returns a fresh instance
 * owned by the caller (destroy frees it), so several of them can be destroyed independently. Buffers are
 * host memory.
 */
#include "core/comm_self.h"
#include <assert.h>
#include <string.h>

void mp_comm_self_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    assert(c && c->size == 1 && n >= 0 && (x || n == 0) && (dt == MP_F32 || dt == MP_BF16));
    (void)op_max;
}

void mp_comm_self_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    assert(c && c->size == 1 && n >= 0 && (x || n == 0));
}

/* out[counts[0]] = in[counts[0]]: all_gatherv, its split-phase start, and reduce_scatterv (the sum over
 * one rank). */
void mp_comm_self_copy(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c && c->size == 1 && counts && counts[0] >= 0);
    if (counts[0] > 0 && out != in) memmove(out, in, (size_t)counts[0] * mp_dtype_size(dt));
}

/* The split-phase gather's end: start (mp_comm_self_copy) finished it already. */
void mp_comm_self_wait(mp_comm *c) { assert(c && c->size == 1); }

void mp_comm_self_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    assert(c && c->size == 1 && root == 0 && (buf || bytes == 0));
}

/* out[n] = in[n]. */
void mp_comm_self_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    assert(c && c->size == 1 && root == 0 && ((out && in) || n == 0));
    if (n > 0 && out != in) memmove(out, in, n);
}

/* out[n] = in[n]. */
void mp_comm_self_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    assert(c && c->size == 1 && root == 0 && n >= 0 && (!counts || counts[0] == n));
    mp_comm_self_gather(c, out, in, (size_t)n, root);
}

/* out[n] = in[n]. */
void mp_comm_self_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    assert(c && c->size == 1 && root == 0 && n >= 0 && (!counts || counts[0] == n));
    mp_comm_self_gather(c, out, in, (size_t)n, root);
}

void mp_comm_self_barrier(mp_comm *c) { assert(c && c->size == 1); }

static void self_destroy(mp_comm *c) { mp_comm_free(c); }

static const mp_comm_ops self_ops = MP_COMM_SELF_OPS("self", self_destroy);

/* A new communicator of one rank; aborts on OOM (as every mp_alloc). */
mp_comm *mp_comm_self(void) { return mp_comm_new(&self_ops, 0, 1, NULL); }
