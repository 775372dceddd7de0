/*
 * core/cuda/comm_nccl.h — the NCCL implementation of the mp_comm table (core/comm.h), for device
 * tensors on GPUs (CUDA builds only).
 *
 * Two kinds of communicator: host scalars (loss sums, the gradient norm, stop flags,
 * checkpoint agreement, ckpt/'s commit exchange) keep going over MPI (core/comm_mpi.h, the mesh's
 * world communicator); device tensors of the tp and dp groups go over NCCL. An NCCL communicator is
 * made over an MPI group: rank 0 of the group draws the ncclUniqueId and broadcasts it over that MPI
 * group, then every rank joins with ncclCommInitRank on its own GPU (chosen by mp_cuda_device_select).
 *
 * Every collective is enqueued on the communicator's own stream (given at creation, so compute can
 * overlap it and events order the two: core/backend.h's stream entries); nothing waits for it except
 * barrier. Buffers must be device memory; counts are element counts, any int64. all_reduce,
 * all_gatherv and reduce_scatterv take the element type (core/comm.h): MP_F32 -> ncclFloat32, MP_BF16 ->
 * ncclBfloat16 (NCCL reduces bf16 in fp32 per step and rounds, as the MPI communicator's bf16 ops do);
 * all_reduce_f64 is ncclFloat64, broadcast moves raw bytes (ncclUint8).
 *
 * Uneven sizes. NCCL has no all-gatherv or reduce-scatterv. meshpoint's FSDP shards are uneven when a
 * dimension does not divide (mp_split: the first n % p ranks hold one row more), and the same boxes are
 * what checkpoints store. Rather than padding shards in memory (which would make GPU memory layouts
 * differ from CPU ones and the disk boxes), all_gatherv / reduce_scatterv with unequal counts run as one
 * NCCL group of per-rank ncclBroadcast / ncclReduce calls (each rank's block from or to it): the same
 * bytes cross each link as in a ring collective, and equal counts (the common case) take the single
 * ncclAllGather / ncclReduceScatter. docs/CUDA.md says more.
 *
 * Counters: bytes and calls with core/comm.h's formulas (mp_comm_count_*, element size from the dtype:
 * 4 for fp32, 2 for bf16), as the MPI communicator counts them. seconds holds the host time spent
 * enqueueing, not the GPU time of the collective (that would need a synchronisation per call); the GPU
 * benchmark measures the latter with events.
 *
 * Determinism: NCCL's ring/tree reductions sum in a fixed order for a fixed topology, algorithm and
 * protocol; runs with the same NCCL_ALGO/NCCL_PROTO on the same nodes repeat bitwise.
 */
#ifndef MP_COMM_NCCL_H
#define MP_COMM_NCCL_H

#include <mpi.h>
#include <cuda_runtime_api.h>
#include "core/comm.h"

/* A communicator over the ranks of group (collective over it), enqueueing on stream (owned by the
 * caller, who keeps it alive until destroy). NULL with err set when NCCL fails. name = "nccl". The group
 * must have more than one rank: a group of one is refused (NULL, MP_EINTERNAL), since mp_comm_self's ops
 * would memmove device memory from the host; core/mesh.c gives such a group a device-copy communicator. */
mp_comm *mp_comm_nccl_create(MPI_Comm group, cudaStream_t stream, mp_err *err);

#endif
