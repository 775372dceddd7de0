/* core/cuda/comm_nccl.c — see comm_nccl.h. */
#include "core/cuda/comm_nccl.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <nccl.h>
#include "core/alloc.h"
#include "core/cuda/cuda_check.h"
#include "core/log.h"

typedef struct {
    ncclComm_t comm;
    MPI_Comm mpi;          /* a dup of the group: the id broadcast, barrier */
    cudaStream_t stream;
} nccl_impl;

/* An NCCL call inside a collective: a failure aborts naming the call (a collective that failed on one
 * rank leaves the others waiting; the newest checkpoint is intact). */
#define NCCL_CHECK(call)                                                                                  \
    do {                                                                                                  \
        ncclResult_t r_ = (call);                                                                         \
        if (r_ != ncclSuccess) {                                                                          \
            fprintf(stderr, "%s: error: %s:%d: %s: %s\n", mp_log_prog(), __FILE__, __LINE__, #call,         \
                    ncclGetErrorString(r_));                                                              \
            abort();                                                                                      \
        }                                                                                                 \
    } while (0)

/* Runs one enqueue and adds its host time to c->seconds[op]. */
#define TIMED(c, op, call) do { double t0_ = mp_time_s(); call; (c)->seconds[op] += mp_time_s() - t0_; } while (0)

static const mp_comm_ops nccl_ops;   /* defined after its functions */

static nccl_impl *impl_of(const mp_comm *c) {
    assert(c && c->impl && c->ops == &nccl_ops);
    return (nccl_impl *)c->impl;
}

/* Whether every count equals counts[0] (one NCCL collective serves). */
static int counts_equal(const mp_comm *c, const int64_t *counts) {
    for (int r = 1; r < c->size; r++)
        if (counts[r] != counts[0]) return 0;
    return 1;
}

/* NCCL's element type of dt: fp32, or bf16 (compute tensors, core/backend.h; NCCL sums and takes maxima of
 * bf16 in fp32 per step and rounds to bf16, as comm.h describes). */
static ncclDataType_t nccl_type(mp_dtype dt) {
    assert(dt == MP_F32 || dt == MP_BF16);
    return dt == MP_F32 ? ncclFloat32 : ncclBfloat16;
}

static void nccl_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    assert(c->size > 1 && n >= 0 && (x || n == 0));
    mp_comm_count_all_reduce(c, n, (int64_t)mp_dtype_size(dt));
    if (n == 0) return;
    nccl_impl *im = impl_of(c);
    TIMED(c, MP_COMM_ALLREDUCE, NCCL_CHECK(ncclAllReduce(x, x, (size_t)n, nccl_type(dt), op_max ? ncclMax : ncclSum,
                                                         im->comm, im->stream)));
}

static void nccl_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    assert(c->size > 1 && n >= 0 && (x || n == 0));
    mp_comm_count_all_reduce(c, n, sizeof(double));
    if (n == 0) return;
    nccl_impl *im = impl_of(c);
    TIMED(c, MP_COMM_ALLREDUCE, NCCL_CHECK(ncclAllReduce(x, x, (size_t)n, ncclFloat64, ncclSum, im->comm, im->stream)));
}

/* out = concat_r in_r[counts[r]] (elements of dt); in may be out + displ[rank] (in place). */
static void nccl_all_gatherv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c->size > 1);
    const size_t e = mp_dtype_size(dt);
    const ncclDataType_t t = nccl_type(dt);
    int64_t total = mp_comm_count_all_gatherv(c, counts, (int64_t)e);
    if (total == 0) return;
    nccl_impl *im = impl_of(c);
    double t0 = mp_time_s();
    if (counts_equal(c, counts)) {
        NCCL_CHECK(ncclAllGather(in, out, (size_t)counts[0], t, im->comm, im->stream));
    } else {
        /* uneven: every rank broadcasts its block into place, all in one group (see comm_nccl.h) */
        NCCL_CHECK(ncclGroupStart());
        int64_t displ = 0;
        for (int r = 0; r < c->size; r++) {
            char *part = (char *)out + (size_t)displ * e;
            const void *send = r == c->rank ? in : (const void *)part;
            if (counts[r]) NCCL_CHECK(ncclBroadcast(send, part, (size_t)counts[r], t, r, im->comm, im->stream));
            displ += counts[r];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    c->seconds[MP_COMM_ALLGATHER] += mp_time_s() - t0;
}

/* out[counts[rank]] = sum over the group of in[displ_rank ...] (elements of dt); out must not overlap in. */
static void nccl_reduce_scatterv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c->size > 1);
    const size_t e = mp_dtype_size(dt);
    const ncclDataType_t t = nccl_type(dt);
    int64_t total = mp_comm_count_reduce_scatterv(c, counts, (int64_t)e);
    if (total == 0) return;
    nccl_impl *im = impl_of(c);
    double t0 = mp_time_s();
    if (counts_equal(c, counts)) {
        NCCL_CHECK(ncclReduceScatter(in, out, (size_t)counts[0], t, ncclSum, im->comm, im->stream));
    } else {
        /* uneven: one reduce to each rank of its block, all in one group */
        NCCL_CHECK(ncclGroupStart());
        int64_t displ = 0;
        for (int r = 0; r < c->size; r++) {
            /* the receive buffer is used on the root only; the others name their own out (never written) */
            if (counts[r])
                NCCL_CHECK(ncclReduce((const char *)in + (size_t)displ * e, out, (size_t)counts[r], t, ncclSum, r,
                                      im->comm, im->stream));
            displ += counts[r];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    c->seconds[MP_COMM_REDUCE_SCATTER] += mp_time_s() - t0;
}

static void nccl_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    assert(c->size > 1 && (buf || bytes == 0));
    mp_comm_count_broadcast(c, bytes, root);
    if (bytes == 0) return;
    nccl_impl *im = impl_of(c);
    TIMED(c, MP_COMM_BCAST, NCCL_CHECK(ncclBroadcast(buf, buf, bytes, ncclUint8, root, im->comm, im->stream)));
}

/* Uneven gather of device bytes to root: NCCL has no gather, so one group of point-to-point calls: every
 * rank but root sends its n bytes, root receives counts[r] bytes of each rank r after those of ranks < r
 * and copies its own block on the stream. counts are read on root only. */
static void nccl_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    assert(c->size > 1 && root >= 0 && root < c->size && n >= 0 && (in || n == 0));
    assert(c->rank != root || counts);
    mp_comm_count_gather(c, n, c->rank == root ? counts : NULL, root);
    nccl_impl *im = impl_of(c);
    double t0 = mp_time_s();
    if (c->rank != root) {
        if (n) NCCL_CHECK(ncclSend(in, (size_t)n, ncclUint8, root, im->comm, im->stream));
    } else {
        NCCL_CHECK(ncclGroupStart());
        int64_t displ = 0;
        for (int r = 0; r < c->size; r++) {
            char *part = (char *)out + displ;
            if (r != root && counts[r]) NCCL_CHECK(ncclRecv(part, (size_t)counts[r], ncclUint8, r, im->comm, im->stream));
            if (r == root && n && part != (const char *)in)
                MP_CUDA_CHECK(cudaMemcpyAsync(part, in, (size_t)n, cudaMemcpyDeviceToDevice, im->stream));
            displ += counts[r];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    c->seconds[MP_COMM_GATHER] += mp_time_s() - t0;
}

/* Gather of n device bytes per rank to root (out[size * n] on root): nccl_gatherv with equal counts. */
static void nccl_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    int64_t *counts = NULL;
    if (c->rank == root) {
        counts = mp_xmalloc(sizeof(int64_t) * (size_t)c->size);
        for (int r = 0; r < c->size; r++) counts[r] = (int64_t)n;
    }
    nccl_gatherv(c, out, in, (int64_t)n, counts, root);
    free(counts);
}

/* Uneven scatter of device bytes from root: one group of point-to-point calls, the mirror of
 * nccl_gatherv: root sends counts[r] bytes to each rank r and copies its own block on the stream; the
 * others receive their n bytes. counts are read on root only. */
static void nccl_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    assert(c->size > 1 && root >= 0 && root < c->size && n >= 0 && (out || n == 0));
    assert(c->rank != root || counts);
    mp_comm_count_scatter(c, n, c->rank == root ? counts : NULL, root);
    nccl_impl *im = impl_of(c);
    double t0 = mp_time_s();
    if (c->rank != root) {
        if (n) NCCL_CHECK(ncclRecv(out, (size_t)n, ncclUint8, root, im->comm, im->stream));
    } else {
        NCCL_CHECK(ncclGroupStart());
        int64_t displ = 0;
        for (int r = 0; r < c->size; r++) {
            const char *part = (const char *)in + displ;
            if (r != root && counts[r]) NCCL_CHECK(ncclSend(part, (size_t)counts[r], ncclUint8, r, im->comm, im->stream));
            if (r == root && n && part != (const char *)out)
                MP_CUDA_CHECK(cudaMemcpyAsync(out, part, (size_t)n, cudaMemcpyDeviceToDevice, im->stream));
            displ += counts[r];
        }
        NCCL_CHECK(ncclGroupEnd());
    }
    c->seconds[MP_COMM_SCATTER] += mp_time_s() - t0;
}

/* Every rank's enqueued collectives have finished on its stream, then the group meets. */
static void nccl_barrier(mp_comm *c) {
    nccl_impl *im = impl_of(c);
    MP_CUDA_CHECK(cudaStreamSynchronize(im->stream));
    MPI_Barrier(im->mpi);
}

/* Frees the NCCL communicator, the MPI dup and the table (NULL ok). Collective over the group. */
static void nccl_destroy(mp_comm *c) {
    if (!c) return;
    nccl_impl *im = impl_of(c);
    if (im->comm) ncclCommDestroy(im->comm);
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin) MPI_Comm_free(&im->mpi);
    mp_free_acct(im, sizeof *im, MP_MEM_COMM);
    mp_comm_free(c);
}

/* No split-phase gather of its own (the mesh's wrapper makes one from its stream and events) and no
 * point-to-point (device buffers; core/comm.h). */
static const mp_comm_ops nccl_ops = {
    .name = "nccl",
    .all_reduce = nccl_all_reduce,
    .all_reduce_f64 = nccl_all_reduce_f64,
    .all_gatherv = nccl_all_gatherv,
    .reduce_scatterv = nccl_reduce_scatterv,
    .broadcast = nccl_broadcast,
    .gather = nccl_gather,
    .gatherv = nccl_gatherv,
    .scatterv = nccl_scatterv,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
};

mp_comm *mp_comm_nccl_create(MPI_Comm group, cudaStream_t stream, mp_err *err) {
    nccl_impl *im = mp_calloc(sizeof *im, MP_MEM_COMM);
    int rank = 0, size = 0;
    MPI_Comm_dup(group, &im->mpi);
    MPI_Comm_rank(im->mpi, &rank);
    MPI_Comm_size(im->mpi, &size);
    im->stream = stream;
    mp_comm *c = mp_comm_new(&nccl_ops, rank, size, im);
    if (c->size == 1) {
        /* Refused: the self operations' all_gatherv / reduce_scatterv memmove from the host, and these
         * buffers are device memory (a host memmove of a device pointer faults). A group of one takes
         * core/mesh.c's device-copy communicator instead (dev_comm_create), which never calls this. */
        mp_err_set(err, MP_EINTERNAL, "NCCL communicator: a group of one rank has no NCCL communicator (use the "
                   "mesh's device communicator of one rank)");
        nccl_destroy(c);
        return NULL;
    }
    ncclUniqueId id;
    ncclResult_t r = ncclSuccess;
    if (c->rank == 0) r = ncclGetUniqueId(&id);
    /* rank 0's failure reaches every rank with the id broadcast: all fail alike */
    int failed = r != ncclSuccess;
    MPI_Bcast(&failed, 1, MPI_INT, 0, im->mpi);
    if (!failed) {
        MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, im->mpi);
        r = ncclCommInitRank(&im->comm, c->size, id, c->rank);
    }
    /* a rank that could not join fails the group: agree, so no rank trains with a broken communicator */
    int bad = failed || r != ncclSuccess, any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, im->mpi);
    if (any) {
        mp_err_set(err, MP_EDEVICE, "NCCL communicator of %d ranks: %s", c->size,
                   r != ncclSuccess ? ncclGetErrorString(r) : "another rank failed to join");
        if (r == ncclSuccess && im->comm) {
            ncclCommDestroy(im->comm);
        }
        im->comm = NULL;
        nccl_destroy(c);
        return NULL;
    }
    return c;
}
