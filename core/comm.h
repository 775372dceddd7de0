/*
 * core/comm.h — collectives over one group of ranks: a const table of operations per kind (self, MPI;
 * for device buffers NCCL, or the staged copy through host memory and MPI) and an instance per group.
 * Every op counts the bytes it sends from this rank, per op kind, with the accounting of a ring
 * algorithm, so tests can check the traffic of the parallel plan against a formula (docs/PARALLEL.md):
 *   all_reduce(n bytes)      2 * (p-1)/p * n
 *   all_gather(n per rank)   (p-1) * n        (each rank's n bytes reach p-1 others)
 *   reduce_scatter(n total)  (p-1)/p * n
 *   broadcast(n bytes)       n on the root, 0 elsewhere
 *   gather/gatherv(n bytes)  n on every rank but the root, 0 on the root (its own block does not move)
 *   scatterv(counts)         on the root the sum of counts[r] over r != root, 0 elsewhere
 *   send / recv(n bytes)     n on the sender, 0 on the receiver (MP_COMM_P2P)
 * A group of size 1 moves nothing and counts nothing (neither bytes nor calls).
 *
 * Exact per-rank formulas (integers, deterministic, also for uneven sizes). p = group size, r = this
 * rank, e = element size (4 for fp32, 8 for all_reduce_f64), c[] = counts, T = sum of c[]:
 *   all_gatherv         e * (p-1) * c[r]       this rank's block goes to the p-1 others
 *   reduce_scatterv     e * (T - c[r])         this rank's share of every other rank's block
 *   all_reduce(n elems) e * ((n - b_r) + (p-1) * b_r), b_r = count of part r of mp_split(n, p, r):
 *                       a reduce-scatter then an all-gather over the mp_split blocks of the vector
 *   broadcast(B bytes)  B on the root, 0 elsewhere
 *   gather(v)(B bytes)  B on every rank but the root, 0 on the root: the root receives the sum over the
 *                       others and no other rank receives anything (the checkpoint commit's layout
 *                       exchange, ckpt/writer.c, so that its cost is linear in the world)
 * Summed over the group these are exactly the ring totals: e*(p-1)*T for all_gatherv and
 * reduce_scatterv, 2*(p-1)*e*n for all_reduce, so with even sizes each rank's count is the ring one
 * ((p-1)*n, (p-1)/p*n, 2(p-1)/p*n). calls[op] counts one per call; all_reduce_f64 counts as ALLREDUCE.
 * The counters describe the plan's traffic; they are not read back from the MPI library.
 *
 * Results: all_reduce returns bitwise the same values on every rank of the group; on a fixed mesh the
 * summation order, hence the bits, are the same from run to run (see core/comm_mpi.h).
 * Buffers are device buffers of the backend the communicator was made for. all_reduce, all_gatherv and
 * reduce_scatterv take the element type: MP_F32, or MP_BF16 (a backend's compute tensors, core/backend.h;
 * sums and maxima of bf16 are formed in fp32 per pairwise step and rounded to bf16, as NCCL does).
 */
#ifndef MP_COMM_H
#define MP_COMM_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "core/tensor.h"

typedef enum { MP_COMM_ALLREDUCE = 0, MP_COMM_ALLGATHER, MP_COMM_REDUCE_SCATTER, MP_COMM_BCAST,
               MP_COMM_GATHER, MP_COMM_SCATTER, MP_COMM_P2P, MP_COMM_NOPS } mp_comm_op;

typedef struct mp_comm mp_comm;

/* The operations of one kind of communicator (self, mpi, nccl, staged, the mesh's device wrappers): one
 * static const table per kind, shared by all its instances, as a backend's table is (core/backend.h).
 * What varies per instance (rank, size, the counters, the implementation's state) is in mp_comm. */
typedef struct mp_comm_ops {
    const char *name;   /* "self", "mpi", "nccl", "staged" */
    /* In place: sum (op_max = 0) or max (op_max = 1) of x[n] over the group. */
    void (*all_reduce)(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max);
    /* Same in double (for norms and loss sums that must not lose precision). */
    void (*all_reduce_f64)(mp_comm *c, double *x, int64_t n);
    /* out[sum counts] = concatenation over ranks r of in_r[counts[r]]; counts may differ (uneven). */
    void (*all_gatherv)(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt);
    /* Split-phase all_gatherv (optional: NULL where not offered; callers then use all_gatherv). start
     * begins what all_gatherv(c, out, in, counts, dt) does and may return before it is done; wait ends it.
     * Until wait, out must not be read and in not written. On a host communicator the data are in out
     * when wait returns; on a device one (NCCL) wait makes the compute stream's later work wait for the
     * gather, with no host wait, and start orders the gather after the compute queued before it. One
     * split-phase gather in flight per communicator; other collectives may be called in between (every
     * rank of the group in the same order, as always). Traffic is counted by start, as all_gatherv's.
     * FSDP prefetches the next unit's weights with it (layers/llama_fsdp.c). */
    void (*all_gatherv_start)(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt);
    void (*all_gatherv_wait)(mp_comm *c);
    /* in[sum counts] summed over the group; rank r receives elements [displ_r, displ_r + counts[r]). */
    void (*reduce_scatterv)(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt);
    /* Broadcast of raw bytes from root. */
    void (*broadcast)(mp_comm *c, void *buf, size_t bytes, int root);
    /* Gather of raw bytes to root: every rank sends its n bytes from in; root's out[size * n] gets
     * rank r's at r * n (out is read on root only). */
    void (*gather)(mp_comm *c, void *out, const void *in, size_t n, int root);
    /* Uneven gather of raw bytes to root: every rank sends its n bytes from in; root's out[sum counts]
     * gets rank r's counts[r] bytes after those of ranks < r. counts[size] (counts[rank] == n) and
     * out are read on root only (NULL elsewhere is fine). */
    void (*gatherv)(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root);
    /* Uneven scatter of raw bytes from root: rank r receives into out its n bytes (n == counts[r]), the
     * counts[r] bytes of root's in after those of ranks < r. counts[size] and in are read on root only
     * (NULL elsewhere is fine). The loaders' per-rank plans (ckpt_open_planned). */
    void (*scatterv)(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root);
    void (*barrier)(mp_comm *c);
    /* Point-to-point raw host bytes: send blocks until buf may be reused, recv until its `bytes` have
     * arrived from src (the message must be exactly that long). Messages of one (peer, tag) pair arrive
     * in order. Host communicators only (MPI): NULL on device ones (NCCL) and on a group of one (no
     * peer). Counted as MP_COMM_P2P: send counts its bytes and a call, recv a call. The checkpoint's
     * file groups (ckpt/group.c) use them on the world communicator. */
    void (*send)(mp_comm *c, const void *buf, size_t bytes, int dst, int tag);
    void (*recv)(mp_comm *c, void *buf, size_t bytes, int src, int tag);
    void (*destroy)(mp_comm *c);

} mp_comm_ops;

/* One communicator: its kind's const table and this instance's group position, counters and state.
 * Call an op as c->ops->ops->all_reduce(c, ...). */
struct mp_comm {
    const mp_comm_ops *ops;
    int rank, size;
    int64_t bytes_sent[MP_COMM_NOPS];   /* counted per op kind, see the formulas above */
    int64_t calls[MP_COMM_NOPS];
    double seconds[MP_COMM_NOPS];       /* wall time spent inside the collectives (benchmarks) */
    void *impl;                         /* the kind's private state (NULL for self) */
};

/* A new instance of kind ops at rank of size, over impl (its owner: ops->destroy frees it), counters
 * zero; charged to MP_MEM_COMM, aborts on OOM. Every constructor makes its instance here. */
mp_comm *mp_comm_new(const mp_comm_ops *ops, int rank, int size, void *impl);
/* Frees the instance itself (not impl): the last step of every ops->destroy. NULL is fine. */
void mp_comm_free(mp_comm *c);

/* Agrees on a result that only some ranks may have failed to reach. Collective over c: every rank calls
 * it with its own local code and, when local != MP_OK, its message in *err (err may be NULL: the code's
 * name stands in for the message). Returns the highest code of any rank (MP_OK when none failed); then
 * *err, on every rank, holds that code and the message of the lowest failing rank, prefixed "[rank N] "
 * (N its rank in c) when c has more than one rank. *from (from may be NULL) gets that rank, -1 when none
 * failed. A group of one returns local and leaves *err as it is. One all_reduce, and one broadcast only
 * on failure.
 *
 * The one agreement of the program, and its one message rule: mesh set-up, the checkpoint open (plan.c)
 * and commit (writer.c) and the CLI (cli/runtime.c mp_runtime_agree) all call it, none keeps a rule of
 * its own. Every rank, the failing one included, holds the same text, "[rank N] <that rank's own
 * message>", so whichever rank prints it prints the same line. An error agreed twice (by the library,
 * then by the CLI over the same world) keeps one prefix: a message that already opens with "[rank K] "
 * travels as it is. */
mp_code mp_comm_agree(mp_comm *c, mp_code local, mp_err *err, int *from);
/* A communicator of one rank: every op is an identity (copy where in != out). */
mp_comm *mp_comm_self(void);
/* Adds src's counters (bytes, calls, seconds of every op kind) to dst's: a communicator that runs its
 * collectives through an inner one of its own (the mesh's NCCL wrapper, the staged communicator) reports
 * the inner's traffic as its own. */
void mp_comm_add_counters(mp_comm *dst, const mp_comm *src);
/* The traffic formulas above, counted into c by every implementation (MPI, NCCL) so that they cannot
 * disagree: all_reduce of n elements of elem_bytes each; all_gatherv / reduce_scatterv over counts[size]
 * (returns the total count; elem_bytes from mp_dtype_size); broadcast of bytes from root. Each also counts one call. */
void mp_comm_count_all_reduce(mp_comm *c, int64_t n, int64_t elem_bytes);
int64_t mp_comm_count_all_gatherv(mp_comm *c, const int64_t *counts, int64_t elem_bytes);
int64_t mp_comm_count_reduce_scatterv(mp_comm *c, const int64_t *counts, int64_t elem_bytes);
void mp_comm_count_broadcast(mp_comm *c, size_t bytes, int root);
/* gather / gatherv of this rank's n bytes to root (counts[size] checked on root, may be NULL elsewhere). */
void mp_comm_count_gather(mp_comm *c, int64_t n, const int64_t *counts, int root);
/* scatterv of counts[size] (checked and summed on root, may be NULL elsewhere) from root; n this rank's. */
void mp_comm_count_scatter(mp_comm *c, int64_t n, const int64_t *counts, int root);
/* send (n > 0: this rank sends n bytes) or recv (n == 0) of one point-to-point message: counts n and a call. */
void mp_comm_count_p2p(mp_comm *c, int64_t n);
/* Sum of bytes_sent (and of seconds) over all op kinds; reset of all counters. */
double mp_comm_total_seconds(const mp_comm *c);
int64_t mp_comm_total_bytes(const mp_comm *c);
void mp_comm_reset_counters(mp_comm *c);

#endif
