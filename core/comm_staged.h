/*
 * core/comm_staged.h — a communicator for device buffers that stages through host memory and MPI: the
 * path of meshes of processes that share a GPU (NCCL refuses two ranks on one device), and, forced by
 * `--comm staged`, of any backend (on the CPU it proves the path bitwise against the plain MPI one).
 *
 * Every collective copies its device input to a host buffer with the backend's to_host, runs the same
 * collective of an MPI communicator of its own (a dup of the group's; core/comm_mpi.h) on host memory,
 * and copies the result back with to_device. So the results are those of the MPI communicator on the
 * same group: the same algorithms, the same summation order, bitwise (tests/staged_comm.sh checks
 * trains against the MPI comm's on cpu and cpu-bf16, fp32 and bf16 collectives alike).
 *
 * Streams and events (core/backend.h, the contract the mesh's NCCL wrapper keeps): to_host is enqueued
 * on the compute stream after everything queued before it and waits for it (the staging synchronises
 * the compute stream), and to_device is ordered there and waits too, so a collective is done for every
 * op issued after it, with no event. The split-phase all_gatherv (the FSDP prefetch) stages its input
 * and starts the MPI gather (MPI_Iallgatherv) in start, and waits for MPI and copies the result up in
 * wait: MPI moves the bytes while the device runs what the host queued in between. It has its own host
 * buffer, so other collectives may run while it is in flight (core/comm.h).
 *
 * Cost: two copies over the host link per collective (n bytes down, the result up) besides MPI's own
 * traffic, and a drain of the compute stream in each copy: this is the path for a GPU shared by ranks
 * (tests and small meshes), not for speed. Memory: two host buffers (page-locked: host_alloc) grown to
 * the largest blocking collective and the largest split-phase gather seen, kept until destroy;
 * mp_comm_staged_host_bytes names them. Counters: those of the inner MPI communicator, call by call
 * (core/comm.h's formulas; the staging copies are not traffic between ranks). send / recv are NULL
 * (device buffers, as NCCL's).
 */
#ifndef MP_COMM_STAGED_H
#define MP_COMM_STAGED_H

#include "core/backend.h"
#include "core/comm.h"

/* A staged communicator for buffers of backend be over the group of host, an "mpi" communicator of more
 * than one rank (the caller keeps it; this one dups its MPI communicator). Collective over the group;
 * aborts on OOM. name = "staged". be must outlive it. */
mp_comm *mp_comm_staged_create(mp_backend *be, mp_comm *host);
/* The host bytes c's staging buffers hold now (0 before its first collective). */
size_t mp_comm_staged_host_bytes(const mp_comm *c);

#endif
