/*
 * core/comm_mpi.h — the MPI implementation of the mp_comm table (core/comm.h), for CPU buffers.
 *
 * mp_comm_mpi_create dups the MPI communicator it is given, so the caller keeps (and may free) its own;
 * destroy frees the dup. Collectives map one to one onto MPI: MPI_Allreduce (in place, MPI_SUM or
 * MPI_MAX on MPI_FLOAT; MPI_SUM on MPI_DOUBLE), MPI_Allgatherv, MPI_Reduce_scatter, MPI_Bcast (in
 * chunks of at most INT_MAX bytes), MPI_Barrier. Counts above MPI's int (INT_MAX elements) are split
 * into several calls (the "v" collectives then go through per-rank broadcasts / reduces), so any
 * int64 count works. MPI errors abort (the default MPI_ERRORS_ARE_FATAL handler).
 *
 * Determinism. Open MPI chooses its reduction algorithm from the group size and the message size
 * (the tuned component's fixed decision rules), so on a fixed mesh the same call takes the same
 * algorithm and the same summation order every run: results are bitwise reproducible run to run. A
 * different mesh (or a different Open MPI version or tuning parameters, e.g. OMPI_MCA_coll_tuned_*)
 * may sum in a different order: equal up to floating-point reordering only. Every rank of the group
 * receives bitwise the same all_reduce result: Open MPI's allreduce algorithms (ring, recursive
 * doubling, reduce+bcast) compute each element once and send the reduced value on, or combine the
 * same pair of operands commutatively, which IEEE addition and max are; tests/mpi_comm.c checks this.
 */
#ifndef MP_COMM_MPI_H
#define MP_COMM_MPI_H

#include <mpi.h>
#include <stddef.h>
#include "core/comm.h"

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
