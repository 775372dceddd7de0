/*
 * core/comm_mpi.h — the MPI implementation of the mp_comm table (core/comm.h), for CPU buffers.
 *
 * mp_comm_mpi_create dups the MPI communicator it is given, so the caller keeps (and may free) its own;
 * destroy frees the dup. Collectives map onto MPI: MPI_Allreduce (in place, MPI_SUM or MPI_MAX on
 * MPI_FLOAT; MPI_SUM on MPI_DOUBLE), MPI_Allgatherv, MPI_Reduce_scatter, MPI_Bcast (in chunks of at
 * most INT_MAX bytes), MPI_Barrier, except the large sums (next paragraph). Counts above MPI's int
 * (INT_MAX elements) are split into several calls (all_gatherv then goes through per-rank broadcasts),
 * so any int64 count works. MPI errors abort (the default MPI_ERRORS_ARE_FATAL handler).
 *
 * Memory. Open MPI's reduce-scatter and all-reduce allocate temporaries of the whole message inside the
 * call (4.1's tuned ring reduce-scatter: the total plus one block, two blocks beyond 2 ranks; recursive
 * halving and butterfly: twice the total; the all-reduce's reduce-scatter + all-gather: the total):
 * for FSDP's gradient reduce-scatter that is 1.5x the largest unit's gradient, outside any plan. So a
 * reduce_scatterv of more than a piece (MP_COMM_MPI_PIECE_BYTES in all) and an all_reduce sum of more
 * than a piece run a ring of our own, Open MPI's ring algorithm piece by piece with MPI_Sendrecv:
 * what it holds besides the caller's buffers is the communicator's scratch of two pieces
 * (MP_COMM_MPI_SCRATCH_BYTES, made at the first such call; a 2-rank reduce_scatterv needs none), which
 * the memory plan counts (cli/memplan.c). Smaller ones, and max reductions, stay Open MPI's (their
 * temporaries are at most twice a piece). docs/DESIGN_NOTES.md, "The memory plan is an upper bound".
 *
 * Determinism. Open MPI chooses its reduction algorithm from the group size and the message size
 * (the tuned component's fixed decision rules), and the ring above depends on the sizes alone, so on a
 * fixed mesh the same call takes the same algorithm and the same summation order every run: results
 * are bitwise reproducible run to run (the ring reduce-scatter adds in Open MPI's ring order). A
 * different mesh (or a different Open MPI version or tuning parameters, e.g. OMPI_MCA_coll_tuned_*)
 * may sum in a different order: equal up to floating-point reordering only. Every rank of the group
 * receives bitwise the same all_reduce result: Open MPI's allreduce algorithms (ring, recursive
 * doubling, reduce+bcast) and the ring above compute each element once and send the reduced value on,
 * or combine the same pair of operands commutatively, which IEEE addition and max are;
 * tests/mpi_comm.c checks this.
 */
#ifndef MP_COMM_MPI_H
#define MP_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>
#include "core/comm.h"

/* The bytes of one piece of the ring collectives, and of a communicator's scratch (two pieces). */
#define MP_COMM_MPI_PIECE_BYTES ((size_t)1 << 20)
#define MP_COMM_MPI_SCRATCH_BYTES (2 * MP_COMM_MPI_PIECE_BYTES)

/* A communicator over a dup of c (MPI must be initialised). Aborts on OOM. name = "mpi". */
mp_comm *mp_comm_mpi_create(MPI_Comm c);
/* The underlying (dup'ed) MPI communicator of an "mpi" mp_comm. */
MPI_Comm mp_comm_mpi_handle(const mp_comm *c);
/* Largest number of bytes one MPI_Bcast call carries (process-wide; default INT_MAX). Tests lower it
 * to exercise the chunked path with small buffers. bytes must be >= 1 and <= INT_MAX. */
void mp_comm_mpi_set_bcast_chunk(size_t bytes);
/* Largest element count one MPI call carries (process-wide; default INT_MAX). Tests lower it to
 * exercise the split path of every collective with small buffers. n >= 1. */
void mp_comm_mpi_set_max_count(int64_t n);

#endif
