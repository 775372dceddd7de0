/*
 * core/comm_self.h — the one-rank operations of mp_comm_self (core/comm_self.c), for the other kinds
 * whose group of one behaves as the self communicator (nothing moved, nothing counted) but which free
 * state of their own: an MPI communicator of one rank keeps its dup'ed MPI communicator (and its name),
 * so its const table is MP_COMM_SELF_OPS("mpi", mpi_destroy). Host buffers only (memmove): a device
 * group of one has its own table (core/mesh.c).
 */
#ifndef MP_COMM_SELF_H
#define MP_COMM_SELF_H

#include "core/comm.h"

void mp_comm_self_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max);
void mp_comm_self_all_reduce_f64(mp_comm *c, double *x, int64_t n);
void mp_comm_self_copy(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt);
void mp_comm_self_wait(mp_comm *c);
void mp_comm_self_broadcast(mp_comm *c, void *buf, size_t bytes, int root);
void mp_comm_self_gather(mp_comm *c, void *out, const void *in, size_t n, int root);
void mp_comm_self_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root);
void mp_comm_self_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root);
void mp_comm_self_barrier(mp_comm *c);

/* The const table of a one-rank kind named name_ whose destroy is destroy_: the self collectives, the
 * split-phase gather done by its start, no point-to-point (a group of one has no peer, core/comm.h). */
#define MP_COMM_SELF_OPS(name_, destroy_)                                                                  \
    {                                                                                                      \
        .name = (name_), .all_reduce = mp_comm_self_all_reduce, .all_reduce_f64 = mp_comm_self_all_reduce_f64, \
        .all_gatherv = mp_comm_self_copy, .all_gatherv_start = mp_comm_self_copy,                          \
        .all_gatherv_wait = mp_comm_self_wait, .reduce_scatterv = mp_comm_self_copy,                       \
        .broadcast = mp_comm_self_broadcast, .gather = mp_comm_self_gather, .gatherv = mp_comm_self_gatherv, \
        .scatterv = mp_comm_self_scatterv, .barrier = mp_comm_self_barrier, .send = NULL, .recv = NULL,     \
        .destroy = (destroy_)                                                                              \
    }

#endif
