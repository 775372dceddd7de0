/*
 * core/comm_mpi.c — mp_comm over MPI (see core/comm_mpi.h for the design and determinism notes).
 *
 * Each op checks its arguments, counts its traffic with the exact formulas of core/comm.h, then calls
 * the matching MPI collective. The operations are one const table (mpi_ops); a group of one rank gets
 * mpi1_ops, mp_comm_self's operations under the name "mpi" with this file's destroy (copy, no MPI call,
 * nothing counted), so a tp = 1 or dp = 1 group under MPI behaves exactly as mp_comm_self().
 */
#include "core/comm_mpi.h"
#include "core/alloc.h"
#include "core/comm_self.h"
#include "core/mesh.h"
#include <assert.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    MPI_Comm comm;
    int *counts;     /* [size] int element counts, scratch for the v-collectives */
    int *displs;     /* [size] */
    /* the split-phase all_gatherv in flight: MPI reads its count arrays until the request completes, so
     * they are its own, not the scratch above that the next v-collective refills */
    int *ag_counts, *ag_displs;
    MPI_Request ag_req;
    int ag_pending;
    /* the ring collectives' piece buffers (MP_COMM_MPI_SCRATCH_BYTES, made at the first large collective,
     * kept until destroy) */
    char *scratch;
} mpi_impl;

static size_t g_bcast_chunk = INT_MAX;
/* Largest element count (and displacement) handed to one MPI call; larger operations are split into
 * several calls. INT_MAX (MPI's int count type) except under the test hook mp_comm_mpi_set_max_count. */
static int64_t g_max_count = INT_MAX;

/* bf16 elements travel as MPI_UINT16_T with user reductions that widen to fp32, add (or take the
 * max) and round to nearest even, as NCCL reduces bf16: each pairwise step rounds once. Made once, on
 * the first communicator's creation (after MPI_Init); MPI frees them at MPI_Finalize. */
static MPI_Op g_bf16_sum = MPI_OP_NULL, g_bf16_max = MPI_OP_NULL;

static void bf16_sum(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) b[i] = mp_f32_to_bf16(mp_bf16_to_f32(a[i]) + mp_bf16_to_f32(b[i]));
}
static void bf16_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *len; i++) {
        float x = mp_bf16_to_f32(a[i]), y = mp_bf16_to_f32(b[i]);
        if (x > y || x != x) b[i] = a[i];
    }
}

/* The MPI element type of dt (MP_F32 or MP_BF16). */
static MPI_Datatype mpi_type(mp_dtype dt) {
    assert(dt == MP_F32 || dt == MP_BF16);
    return dt == MP_F32 ? MPI_FLOAT : MPI_UINT16_T;
}
/* The reduction op of dt: sum, or max when op_max. */
static MPI_Op mpi_op(mp_dtype dt, int op_max) {
    if (dt == MP_F32) return op_max ? MPI_MAX : MPI_SUM;
    assert(g_bf16_sum != MPI_OP_NULL);
    return op_max ? g_bf16_max : g_bf16_sum;
}

/* Runs one MPI call and adds its wall time to c->seconds[op]. */
#define TIMED(c, op, call) do { double t0_ = MPI_Wtime(); call; (c)->seconds[op] += MPI_Wtime() - t0_; } while (0)

static const mp_comm_ops mpi_ops, mpi1_ops;   /* defined at the end, after their functions */

/* By name, not by table: a test may run an instance under a copy of the table with one op swapped. */
static mpi_impl *impl_of(const mp_comm *c) {
    assert(c && c->impl && strcmp(c->ops->name, "mpi") == 0);
    return (mpi_impl *)c->impl;
}

/* Checks counts[size] (each >= 0) and returns their total. Fills the int arrays icounts/idispls[size]
 * and sets *fits when every count, displacement and the total are at most g_max_count (one v-collective
 * call will do); otherwise *fits = 0 and the caller splits the operation. */
static int64_t fill_counts_into(mp_comm *c, const int64_t *counts, int *icounts, int *idispls, int *fits) {
    assert(counts);
    int64_t total = 0;
    *fits = 1;
    for (int r = 0; r < c->size; r++) {
        assert(counts[r] >= 0 && "comm: negative count");
        assert(counts[r] <= INT64_MAX - total && "comm: total count overflows");
        if (total > g_max_count || counts[r] > g_max_count) *fits = 0;
        if (*fits) {
            icounts[r] = (int)counts[r];
            idispls[r] = (int)total;
        }
        total += counts[r];
    }
    if (total > g_max_count) *fits = 0;
    return total;
}

/* fill_counts_into the impl's scratch arrays (the blocking v-collectives). */
static int64_t fill_counts(mp_comm *c, const int64_t *counts, int *fits) {
    mpi_impl *im = impl_of(c);
    return fill_counts_into(c, counts, im->counts, im->displs, fits);
}

/* The length of the piece of an n-element operation that starts at off: at most g_max_count. */
static int piece(int64_t n, int64_t off) {
    int64_t len = n - off < g_max_count ? n - off : g_max_count;
    return (int)len;
}

/* ---- the ring collectives on our own buffers (see core/comm_mpi.h, "Memory") ---- */

/* Elements per piece of a ring step: MP_COMM_MPI_PIECE_BYTES of them, at most g_max_count (one MPI call). */
static int64_t piece_elems(size_t e) {
    int64_t n = (int64_t)(MP_COMM_MPI_PIECE_BYTES / e);
    return n < g_max_count ? n : g_max_count;
}

/* Elements of piece [off, off + len) that a block of count elements has: 0 past its end. */
static int piece_len(int64_t count, int64_t off, int64_t len) {
    return count <= off ? 0 : (int)(count - off < len ? count - off : len);
}

/* y[0..n) = x + y element-wise in dt (the bf16 sum rounds once, as the MPI op does). IEEE addition
 * commutes, so this is the value Open MPI's ring computes from the same two operands. */
static void reduce_into(void *y, const void *x, int n, mp_dtype dt) {
    if (dt == MP_BF16) {
        bf16_sum((void *)(uintptr_t)x, y, &n, NULL);
        return;
    }
    float *b = y;
    const float *a = x;
    for (int i = 0; i < n; i++) b[i] = a[i] + b[i];
}

/* The communicator's two piece buffers, made on first use. */
static char *ring_scratch(mp_comm *c) {
    mpi_impl *im = impl_of(c);
    if (!im->scratch) im->scratch = mp_malloc(MP_COMM_MPI_SCRATCH_BYTES, MP_MEM_COMM);
    return im->scratch;
}

/* One ring exchange: ns elements at send to rank + 1, nr from rank - 1 into recv (a zero count still
 * pairs the calls). Tagged with the collective's tag: one pair's messages never overtake. */
static void ring_exchange(mp_comm *c, const void *send, int ns, void *recv, int nr, MPI_Datatype t, int tag) {
    int p = c->size, r = c->rank;
    MPI_Sendrecv(send, ns, t, (r + 1) % p, tag, recv, nr, t, (r + p - 1) % p, tag, impl_of(c)->comm,
                 MPI_STATUS_IGNORE);
}

/* out[counts[rank]] = the sum over the group of every rank's block `rank` of in (blocks at displs): Open
 * MPI's ring reduce-scatter (ompi_coll_base_reduce_scatter_intra_ring: at step k rank r sends block r-k
 * and receives block r-k-1, adding its own block to it; block b is summed from rank b+1 round to rank
 * b, the same additions in the same order), run piece by piece so that what is in flight is one piece
 * of each block: the pieces go through the scratch's two buffers (ranks between the first and the last
 * of a block's ring), the last step receives into out. Two ranks need no buffer at all. */
static void ring_reduce_scatter(mp_comm *c, void *out, const void *in, const int64_t *counts, const int64_t *displs,
                                mp_dtype dt) {
    enum { TAG = 0x6d72 };
    int p = c->size, r = c->rank;
    size_t e = mp_dtype_size(dt);
    int64_t len = piece_elems(e), most = 0;
    for (int b = 0; b < p; b++) most = counts[b] > most ? counts[b] : most;
    char *buf = p > 2 ? ring_scratch(c) : NULL, none_out[8], none_in[8];   /* zero-count ends: never aliased */
    const char *x = in;
    for (int64_t off = 0; off < most; off += len) {
        const void *send = NULL;
        for (int k = 1; k < p; k++) {
            int sb = (r + p - k) % p, rb = (r + 2 * p - k - 1) % p;   /* the block sent, the block received */
            int ns = piece_len(counts[sb], off, len), nr = piece_len(counts[rb], off, len);
            if (k == 1) send = ns ? x + (size_t)(displs[sb] + off) * e : none_out;
            void *recv = !nr ? none_in : k == p - 1 ? (char *)out + (size_t)off * e
                                    : buf + (size_t)(k & 1) * MP_COMM_MPI_PIECE_BYTES;
            ring_exchange(c, send, ns, recv, nr, mpi_type(dt), TAG);
            if (nr) reduce_into(recv, x + (size_t)(displs[rb] + off) * e, nr, dt);
            send = nr ? recv : none_out;
        }
    }
}

/* In place sum over the group of x[n], for x of more than a piece: the ring reduce-scatter above over n
 * split in balanced blocks (mp_split), in place (each partial sum is added into x's block and sent on
 * from there; one piece buffer receives), then a ring all-gather of the blocks straight into x. Every
 * element is summed once, on the rank that owns its block, and copied to the others: bitwise the same
 * result on every rank. */
static void ring_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt) {
    enum { TAG = 0x6d73 };
    int p = c->size, r = c->rank;
    size_t e = mp_dtype_size(dt);
    MPI_Datatype t = mpi_type(dt);
    int64_t len = piece_elems(e), most = 0, *start = mp_xmalloc(2 * sizeof(int64_t) * (size_t)p), *cnt = start + p;
    for (int b = 0; b < p; b++) {
        mp_split(n, p, b, &start[b], &cnt[b]);
        most = cnt[b] > most ? cnt[b] : most;
    }
    char *buf = ring_scratch(c), *xs = x, none_out[8], none_in[8];   /* zero-count ends: never aliased */
    for (int64_t off = 0; off < most; off += len)
        for (int k = 1; k < p; k++) {   /* reduce-scatter: block r-k goes on, block r-k-1 comes in */
            int sb = (r + p - k) % p, rb = (r + 2 * p - k - 1) % p;
            int ns = piece_len(cnt[sb], off, len), nr = piece_len(cnt[rb], off, len);
            ring_exchange(c, ns ? xs + (size_t)(start[sb] + off) * e : none_out, ns, nr ? buf : none_in, nr, t, TAG);
            if (nr) reduce_into(xs + (size_t)(start[rb] + off) * e, buf, nr, dt);
        }
    for (int64_t off = 0; off < most; off += len)
        for (int k = 0; k < p - 1; k++) {   /* all-gather: the summed block r-k goes on, r-k-1 comes in */
            int sb = (r + p - k) % p, rb = (r + 2 * p - k - 1) % p;
            int ns = piece_len(cnt[sb], off, len), nr = piece_len(cnt[rb], off, len);
            char *send = ns ? xs + (size_t)(start[sb] + off) * e : none_out;
            char *recv = nr ? xs + (size_t)(start[rb] + off) * e : none_in;
            ring_exchange(c, send, ns, recv, nr, t, TAG);
        }
    free(start);
}

/* In place sum/max over the group. Up to a piece (MP_COMM_MPI_PIECE_BYTES), and every max: MPI_Allreduce
 * with MPI_IN_PLACE (its temporaries are at most the message); a larger sum: ring_all_reduce. */
static void mpi_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    assert(n >= 0 && (x || n == 0));
    assert(c->size > 1);
    size_t e = mp_dtype_size(dt);
    mp_comm_count_all_reduce(c, n, (int64_t)e);
    if (!op_max && n > piece_elems(e)) {
        TIMED(c, MP_COMM_ALLREDUCE, ring_all_reduce(c, x, n, dt));
        return;
    }
    for (int64_t off = 0; off < n; off += g_max_count)
        TIMED(c, MP_COMM_ALLREDUCE, MPI_Allreduce(MPI_IN_PLACE, (char *)x + off * e, piece(n, off), mpi_type(dt),
                                                  mpi_op(dt, op_max), impl_of(c)->comm));
}

static void mpi_all_reduce_f64(mp_comm *c, double *x, int64_t n) {
    assert(n >= 0 && (x || n == 0));
    assert(c->size > 1);
    mp_comm_count_all_reduce(c, n, sizeof(double));
    for (int64_t off = 0; off < n; off += g_max_count)
        TIMED(c, MP_COMM_ALLREDUCE, MPI_Allreduce(MPI_IN_PLACE, x + off, piece(n, off), MPI_DOUBLE, MPI_SUM,
                                                  impl_of(c)->comm));
}

/* What this rank sends in an all_gatherv into out at element displacement displ (e bytes each):
 * MPI_IN_PLACE when in is already its part of out, else in. */
static const void *gather_send(const void *out, const void *in, int displ, size_t e) {
    return in == (const char *)out + (size_t)displ * e ? MPI_IN_PLACE : in;
}

/* out = concat_r in_r[counts[r]]. in may be out + displ[rank] (in place); otherwise the two must not
 * overlap. When a count or displacement exceeds g_max_count: each rank's part is broadcast from it in
 * pieces (same result, more calls). */
static void mpi_all_gatherv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c->size > 1);
    mpi_impl *im = impl_of(c);
    int fits;
    int64_t total = fill_counts(c, counts, &fits);
    int me = c->rank;
    size_t e = mp_dtype_size(dt);
    MPI_Datatype t = mpi_type(dt);
    assert((out || total == 0) && (in || counts[me] == 0));
    mp_comm_count_all_gatherv(c, counts, (int64_t)e);
    if (total == 0) return;
    if (fits) {
        TIMED(c, MP_COMM_ALLGATHER, MPI_Allgatherv(gather_send(out, in, im->displs[me], e), im->counts[me], t, out,
                                                   im->counts, im->displs, t, im->comm));
        return;
    }
    int64_t displ = 0;
    for (int r = 0; r < c->size; r++) {
        char *part = (char *)out + (size_t)displ * e;
        if (r == me && in != part && counts[me]) memcpy(part, in, e * (size_t)counts[me]);
        for (int64_t off = 0; off < counts[r]; off += g_max_count)
            TIMED(c, MP_COMM_ALLGATHER, MPI_Bcast(part + (size_t)off * e, piece(counts[r], off), t, r, im->comm));
        displ += counts[r];
    }
}

/* Split-phase all_gatherv (core/comm.h): MPI_Iallgatherv on the gather's own count arrays; wait is
 * MPI_Wait. Open MPI progresses it inside later MPI calls of this rank (the FSDP gradient reduce-scatters
 * in backward) and in the wait. A gather too large for one call runs blocking in start (as
 * mpi_all_gatherv splits it), and wait has nothing left to do. */
static void mpi_all_gatherv_start(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c->size > 1);
    mpi_impl *im = impl_of(c);
    assert(!im->ag_pending && "comm: one split-phase all_gatherv in flight per communicator");
    int fits, me = c->rank;
    int64_t total = fill_counts_into(c, counts, im->ag_counts, im->ag_displs, &fits);
    if (!fits || total == 0) {
        mpi_all_gatherv(c, out, in, counts, dt);
        return;
    }
    size_t e = mp_dtype_size(dt);
    assert(out && (in || counts[me] == 0));
    mp_comm_count_all_gatherv(c, counts, (int64_t)e);
    MPI_Datatype t = mpi_type(dt);
    TIMED(c, MP_COMM_ALLGATHER, MPI_Iallgatherv(gather_send(out, in, im->ag_displs[me], e), im->ag_counts[me], t, out,
                                                im->ag_counts, im->ag_displs, t, im->comm, &im->ag_req));
    im->ag_pending = 1;
}

static void mpi_all_gatherv_wait(mp_comm *c) {
    assert(c->size > 1);
    mpi_impl *im = impl_of(c);
    if (!im->ag_pending) return;
    TIMED(c, MP_COMM_ALLGATHER, MPI_Wait(&im->ag_req, MPI_STATUS_IGNORE));
    im->ag_pending = 0;
}

/* out[counts[rank]] = sum over the group of in[displ_rank ...]. out must not overlap in. Up to a piece
 * in all (MP_COMM_MPI_PIECE_BYTES): MPI_Reduce_scatter; larger: ring_reduce_scatter on our buffers
 * (Open MPI's algorithms allocate the whole message and more inside the call). */
static void mpi_reduce_scatterv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    assert(c->size > 1);
    mpi_impl *im = impl_of(c);
    int fits;
    int64_t total = fill_counts(c, counts, &fits);
    int me = c->rank;
    size_t e = mp_dtype_size(dt);
    assert((in || total == 0) && (out || counts[me] == 0));
    assert((total == 0 || counts[me] == 0 ||
            (uintptr_t)out + (size_t)counts[me] * e <= (uintptr_t)in ||
            (uintptr_t)in + (size_t)total * e <= (uintptr_t)out) &&
           "comm: reduce_scatterv out overlaps in");
    mp_comm_count_reduce_scatterv(c, counts, (int64_t)e);
    if (total == 0) return;
    if (total <= piece_elems(e)) {
        /* MPI_Reduce_scatter needs a valid recvbuf even for a zero count on some paths. */
        float dummy;
        TIMED(c, MP_COMM_REDUCE_SCATTER, MPI_Reduce_scatter(in, counts[me] ? out : (void *)&dummy, im->counts,
                                                            mpi_type(dt), mpi_op(dt, 0), im->comm));
        return;
    }
    int64_t *displs = mp_xmalloc(sizeof(int64_t) * (size_t)c->size);
    int64_t d = 0;
    for (int r = 0; r < c->size; r++) {
        displs[r] = d;
        d += counts[r];
    }
    TIMED(c, MP_COMM_REDUCE_SCATTER, ring_reduce_scatter(c, out, in, counts, displs, dt));
    free(displs);
}

/* bytes from root to every rank, in chunks of at most g_bcast_chunk (and g_max_count) bytes. */
static void mpi_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    assert(root >= 0 && root < c->size && (buf || bytes == 0));
    assert(c->size > 1);
    mp_comm_count_broadcast(c, bytes, root);
    MPI_Comm comm = impl_of(c)->comm;
    size_t chunk = g_bcast_chunk < (size_t)g_max_count ? g_bcast_chunk : (size_t)g_max_count;
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t len = bytes - off < chunk ? bytes - off : chunk;
        TIMED(c, MP_COMM_BCAST, MPI_Bcast((char *)buf + off, (int)len, MPI_BYTE, root, comm));
    }
}

/* The root's side of the point-to-point gathers and scatters: for every rank r but root, one receive
 * (gather) or send (scatter) per piece of at most g_max_count of its counts[r] bytes at its place in buf
 * (after the blocks of ranks < r), then a wait for all; the time goes to op. Messages of one pair never
 * overtake, so one tag serves every piece. */
static void root_pieces(mp_comm *c, char *buf, const int64_t *counts, int root, int scatter, int tag) {
    MPI_Comm comm = impl_of(c)->comm;
    int64_t nreq = 0, displ = 0;
    for (int r = 0; r < c->size; r++)
        if (r != root) nreq += (counts[r] + g_max_count - 1) / g_max_count;
    MPI_Request *req = mp_xmalloc(sizeof *req * (size_t)(nreq + 1));
    nreq = 0;
    double t0 = MPI_Wtime();
    for (int r = 0; r < c->size; r++) {
        for (int64_t off = 0; r != root && off < counts[r]; off += g_max_count) {
            if (scatter) MPI_Isend(buf + displ + off, piece(counts[r], off), MPI_BYTE, r, tag, comm, &req[nreq++]);
            else MPI_Irecv(buf + displ + off, piece(counts[r], off), MPI_BYTE, r, tag, comm, &req[nreq++]);
        }
        displ += counts[r];
    }
    MPI_Waitall((int)nreq, req, MPI_STATUSES_IGNORE);
    c->seconds[scatter ? MP_COMM_SCATTER : MP_COMM_GATHER] += MPI_Wtime() - t0;
    free(req);
}

/* The offset of root's own block in a gather's or scatter's buffer: the sum of counts[< root]. */
static int64_t root_displ(const int64_t *counts, int root) {
    int64_t d = 0;
    for (int r = 0; r < root; r++) d += counts[r];
    return d;
}

/* Point-to-point part of the gathers: every rank but root sends its n bytes to root in pieces of at most
 * g_max_count; root copies its own block into out and receives every other rank's (root_pieces). */
static void gather_p2p(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    enum { TAG = 0x6d70 };
    if (c->rank != root) {
        for (int64_t off = 0; off < n; off += g_max_count)
            TIMED(c, MP_COMM_GATHER, MPI_Send((const char *)in + off, piece(n, off), MPI_BYTE, root, TAG,
                                              impl_of(c)->comm));
        return;
    }
    char *own = (char *)out + root_displ(counts, root);
    if (n > 0 && own != in) memmove(own, in, (size_t)n);
    root_pieces(c, out, counts, root, 0, TAG);
}

/* out[size * n] on root = rank r's n bytes at r * n: one MPI_Gather, or the point-to-point pieces when n
 * exceeds g_max_count (every rank knows n, so all take the same path). */
static void mpi_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    assert(c->size > 1 && root >= 0 && root < c->size && (in || n == 0) && (out || n == 0 || c->rank != root));
    mp_comm_count_gather(c, (int64_t)n, NULL, root);
    if (n == 0) return;
    if (n <= (size_t)g_max_count) {
        const void *send = c->rank == root && in == (char *)out + (size_t)root * n ? MPI_IN_PLACE : in;
        TIMED(c, MP_COMM_GATHER, MPI_Gather(send, (int)n, MPI_BYTE, out, (int)n, MPI_BYTE, root, impl_of(c)->comm));
        return;
    }
    int64_t *counts = c->rank == root ? mp_xmalloc(sizeof(int64_t) * (size_t)c->size) : NULL;
    for (int r = 0; counts && r < c->size; r++) counts[r] = (int64_t)n;
    gather_p2p(c, out, in, (int64_t)n, counts, root);
    free(counts);
}

/* Uneven gather of bytes to root: point-to-point pieces (gather_p2p). Only the root knows the counts,
 * so no rank can tell whether they would fit MPI_Gatherv's int displacements: one path for all sizes. */
static void mpi_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    assert(c->size > 1 && root >= 0 && root < c->size && n >= 0 && (in || n == 0));
    assert(c->rank != root || counts);
    mp_comm_count_gather(c, n, c->rank == root ? counts : NULL, root);
    gather_p2p(c, out, in, n, counts, root);
}

/* Uneven scatter of bytes from root: point-to-point pieces of at most g_max_count, the mirror of
 * gather_p2p (only the root knows the counts, so MPI_Scatterv's int displacements are never at stake):
 * root copies its own block and sends every other rank's (root_pieces); the others receive their n bytes. */
static void mpi_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    assert(c->size > 1 && root >= 0 && root < c->size && n >= 0 && (out || n == 0));
    assert(c->rank != root || counts);
    mp_comm_count_scatter(c, n, c->rank == root ? counts : NULL, root);
    enum { TAG = 0x6d71 };
    if (c->rank != root) {
        for (int64_t off = 0; off < n; off += g_max_count)
            TIMED(c, MP_COMM_SCATTER, MPI_Recv((char *)out + off, piece(n, off), MPI_BYTE, root, TAG, impl_of(c)->comm,
                                               MPI_STATUS_IGNORE));
        return;
    }
    const char *own = (const char *)in + root_displ(counts, root);
    if (n > 0 && own != out) memmove(out, own, (size_t)n);
    root_pieces(c, (char *)(uintptr_t)in, counts, root, 1, TAG);   /* only sent from: MPI_Isend takes const */
}

/* Point-to-point bytes to dst with tag, in pieces of at most g_max_count (one pair's messages never
 * overtake, so the receiver's pieces match). */
static void mpi_send(mp_comm *c, const void *buf, size_t bytes, int dst, int tag) {
    assert(c->size > 1 && dst >= 0 && dst < c->size && dst != c->rank && tag >= 0 && (buf || bytes == 0));
    mp_comm_count_p2p(c, (int64_t)bytes);
    int64_t n = (int64_t)bytes;
    int64_t off = 0;
    do {   /* a zero-byte message is still one message: the receiver expects it */
        TIMED(c, MP_COMM_P2P, MPI_Send((const char *)buf + off, piece(n, off), MPI_BYTE, dst, tag, impl_of(c)->comm));
        off += g_max_count;
    } while (off < n);
}

/* The mirror of mpi_send: exactly bytes from src with tag. */
static void mpi_recv(mp_comm *c, void *buf, size_t bytes, int src, int tag) {
    assert(c->size > 1 && src >= 0 && src < c->size && src != c->rank && tag >= 0 && (buf || bytes == 0));
    mp_comm_count_p2p(c, 0);
    int64_t n = (int64_t)bytes;
    int64_t off = 0;
    do {
        MPI_Status st;
        int got = -1;
        TIMED(c, MP_COMM_P2P, MPI_Recv((char *)buf + off, piece(n, off), MPI_BYTE, src, tag, impl_of(c)->comm, &st));
        MPI_Get_count(&st, MPI_BYTE, &got);
        if (got != piece(n, off)) {   /* a longer one is MPI's truncation error (fatal); a shorter one a protocol bug */
            fprintf(stderr, "comm: rank %d expected %d bytes from rank %d (tag %d), got %d\n", c->rank, piece(n, off),
                    src, tag, got);
            MPI_Abort(impl_of(c)->comm, 1);
        }
        off += g_max_count;
    } while (off < n);
}

static void mpi_barrier(mp_comm *c) {
    assert(c->size > 1);
    MPI_Barrier(impl_of(c)->comm);
}

/* Frees the dup'ed MPI communicator and the table (NULL ok). Collective over the group. */
static void mpi_destroy(mp_comm *c) {
    if (!c) return;
    mpi_impl *im = impl_of(c);
    int fin = 0;
    MPI_Finalized(&fin);
    assert(!im->ag_pending && "comm: destroyed with a split-phase all_gatherv in flight");
    if (!fin) MPI_Comm_free(&im->comm);
    mp_free_acct(im->counts, sizeof(int) * (size_t)c->size, MP_MEM_COMM);
    mp_free_acct(im->displs, sizeof(int) * (size_t)c->size, MP_MEM_COMM);
    mp_free_acct(im->ag_counts, sizeof(int) * (size_t)c->size, MP_MEM_COMM);
    mp_free_acct(im->ag_displs, sizeof(int) * (size_t)c->size, MP_MEM_COMM);
    if (im->scratch) mp_free_acct(im->scratch, MP_COMM_MPI_SCRATCH_BYTES, MP_MEM_COMM);
    mp_free_acct(im, sizeof *im, MP_MEM_COMM);
    mp_comm_free(c);
}

static const mp_comm_ops mpi_ops = {
    .name = "mpi",
    .all_reduce = mpi_all_reduce,
    .all_reduce_f64 = mpi_all_reduce_f64,
    .all_gatherv = mpi_all_gatherv,
    .all_gatherv_start = mpi_all_gatherv_start,
    .all_gatherv_wait = mpi_all_gatherv_wait,
    .reduce_scatterv = mpi_reduce_scatterv,
    .broadcast = mpi_broadcast,
    .gather = mpi_gather,
    .gatherv = mpi_gatherv,
    .scatterv = mpi_scatterv,
    .barrier = mpi_barrier,
    .send = mpi_send,
    .recv = mpi_recv,
    .destroy = mpi_destroy,
};
/* A group of one: the self path, nothing counted, the dup still freed by mpi_destroy. */
static const mp_comm_ops mpi1_ops = MP_COMM_SELF_OPS("mpi", mpi_destroy);

mp_comm *mp_comm_mpi_create(MPI_Comm comm) {
    int init = 0;
    MPI_Initialized(&init);
    assert(init && "mp_comm_mpi_create: MPI is not initialised");
    if (g_bf16_sum == MPI_OP_NULL) {
        MPI_Op_create(bf16_sum, 1, &g_bf16_sum);
        MPI_Op_create(bf16_max, 1, &g_bf16_max);
    }
    mpi_impl *im = mp_calloc(sizeof *im, MP_MEM_COMM);
    int rank = 0, size = 0;
    MPI_Comm_dup(comm, &im->comm);
    MPI_Comm_rank(im->comm, &rank);
    MPI_Comm_size(im->comm, &size);
    assert(size >= 1 && rank >= 0 && rank < size);
    im->counts = mp_calloc(sizeof(int) * (size_t)size, MP_MEM_COMM);
    im->displs = mp_calloc(sizeof(int) * (size_t)size, MP_MEM_COMM);
    im->ag_counts = mp_calloc(sizeof(int) * (size_t)size, MP_MEM_COMM);
    im->ag_displs = mp_calloc(sizeof(int) * (size_t)size, MP_MEM_COMM);
    return mp_comm_new(size == 1 ? &mpi1_ops : &mpi_ops, rank, size, im);
}

MPI_Comm mp_comm_mpi_handle(const mp_comm *c) { return impl_of(c)->comm; }

void mp_comm_mpi_set_bcast_chunk(size_t bytes) {
    assert(bytes >= 1 && bytes <= INT_MAX);
    g_bcast_chunk = bytes;
}

/* Test hook (internal; tests/mpi_comm.c declares it): the largest element count or displacement one MPI
 * call is given (default INT_MAX), so a test splits small vectors the way real ones above INT_MAX are. */
void mp_comm_mpi_set_max_count(int64_t n) {
    assert(n >= 1 && n <= INT_MAX);
    g_max_count = n;
}
