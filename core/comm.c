/*
 * core/comm.c — the backend-independent part of the communicator: making and freeing an instance of a
 * kind's const ops table (mp_comm_new, mp_comm_free), reading, adding and resetting the per-op traffic counters that every implementation (self, MPI, NCCL) fills in with the formulas of
 * core/comm.h. Implementations live in comm_self.c, comm_mpi.c (and a CUDA file for NCCL). Also the
 * one agreement on a failure over a group (mp_comm_agree), built on the table's all_reduce and
 * broadcast, so every layer (mesh set-up, checkpoint commit, the CLI) agrees the same way.
 */
#include "core/comm.h"
#include <assert.h>
#include "core/alloc.h"
#include "core/mesh.h"
#include <stdio.h>
#include <string.h>

/* 1 if msg already opens with an agreement's "[rank N] " (it came from an earlier mp_comm_agree). */
static int has_rank_prefix(const char *msg) {
    if (strncmp(msg, "[rank ", 6) != 0) return 0;
    const char *p = msg + 6;
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') p++;
    return p[0] == ']' && p[1] == ' ';
}

mp_comm *mp_comm_new(const mp_comm_ops *ops, int rank, int size, void *impl) {
    assert(ops && ops->name && ops->destroy && size >= 1 && rank >= 0 && rank < size);
    mp_comm *c = mp_calloc(sizeof *c, MP_MEM_COMM);
    c->ops = ops;
    c->rank = rank;
    c->size = size;
    c->impl = impl;
    return c;
}

void mp_comm_free(mp_comm *c) {
    if (c) mp_free_acct(c, sizeof *c, MP_MEM_COMM);
}

mp_code mp_comm_agree(mp_comm *c, mp_code local, mp_err *err, int *from) {
    assert(c && c->size >= 1 && c->size <= (1 << 24));   /* ranks and codes travel exactly as floats */
    if (from) *from = local != MP_OK ? c->rank : -1;
    if (c->size == 1) return local;
    /* one all_reduce(max): the worst code, and -rank of the lowest failing rank (-size if none) */
    float v[2] = {(float)local, local != MP_OK ? -(float)c->rank : -(float)c->size};
    c->ops->all_reduce(c, v, 2, MP_F32, 1);
    mp_code worst = (mp_code)(int)v[0];
    if (worst == MP_OK) return MP_OK;
    int src = (int)-v[1];
    assert(src >= 0 && src < c->size);
    if (from) *from = src;
    char msg[MP_ERR_MSG_MAX];
    if (c->rank == src) {
        /* one prefix: a message an earlier agreement prefixed (the library's, then the CLI's) goes as it is.
         * The precision keeps prefix and message inside msg, truncating the message. */
        const char *own = err ? err->msg : mp_code_name(local);
        if (has_rank_prefix(own)) snprintf(msg, sizeof msg, "%s", own);
        else snprintf(msg, sizeof msg, "[rank %d] %.2000s", src, own);
    }
    c->ops->broadcast(c, msg, sizeof msg, src);
    msg[sizeof msg - 1] = '\0';
    return mp_err_set(err, worst, "%s", msg);
}

/* Sum of bytes_sent over every op kind of c. */
int64_t mp_comm_total_bytes(const mp_comm *c) {
    assert(c);
    int64_t total = 0;
    for (int op = 0; op < MP_COMM_NOPS; op++) {
        assert(c->bytes_sent[op] >= 0);
        total += c->bytes_sent[op];
    }
    return total;
}

/* Zeroes bytes_sent and calls of every op kind. */
void mp_comm_reset_counters(mp_comm *c) {
    assert(c);
    memset(c->bytes_sent, 0, sizeof c->bytes_sent);
    memset(c->seconds, 0, sizeof c->seconds);
    memset(c->calls, 0, sizeof c->calls);
}

void mp_comm_add_counters(mp_comm *dst, const mp_comm *src) {
    assert(dst && src);
    for (int op = 0; op < MP_COMM_NOPS; op++) {
        dst->bytes_sent[op] += src->bytes_sent[op];
        dst->calls[op] += src->calls[op];
        dst->seconds[op] += src->seconds[op];
    }
}

/* Sum of seconds over every op kind of c. */
double mp_comm_total_seconds(const mp_comm *c) {
    double t = 0;
    for (int op = 0; op < MP_COMM_NOPS; op++) t += c->seconds[op];
    return t;
}

void mp_comm_count_all_reduce(mp_comm *c, int64_t n, int64_t elem_bytes) {
    assert(c && n >= 0 && elem_bytes > 0);
    int64_t s, b;   /* this rank's block of the reduce-scatter + all-gather the formula describes */
    mp_split(n, c->size, c->rank, &s, &b);
    c->bytes_sent[MP_COMM_ALLREDUCE] += elem_bytes * ((n - b) + (int64_t)(c->size - 1) * b);
    c->calls[MP_COMM_ALLREDUCE]++;
}

/* Checks counts[size] (each >= 0, no overflow) and returns their total. */
static int64_t total_count(const mp_comm *c, const int64_t *counts) {
    assert(counts);
    int64_t total = 0;
    for (int r = 0; r < c->size; r++) {
        assert(counts[r] >= 0 && "comm: negative count");
        assert(counts[r] <= INT64_MAX - total && "comm: total count overflows");
        total += counts[r];
    }
    return total;
}

int64_t mp_comm_count_all_gatherv(mp_comm *c, const int64_t *counts, int64_t elem_bytes) {
    assert(elem_bytes > 0);
    int64_t total = total_count(c, counts);
    c->bytes_sent[MP_COMM_ALLGATHER] += elem_bytes * (c->size - 1) * counts[c->rank];
    c->calls[MP_COMM_ALLGATHER]++;
    return total;
}

int64_t mp_comm_count_reduce_scatterv(mp_comm *c, const int64_t *counts, int64_t elem_bytes) {
    assert(elem_bytes > 0);
    int64_t total = total_count(c, counts);
    c->bytes_sent[MP_COMM_REDUCE_SCATTER] += elem_bytes * (total - counts[c->rank]);
    c->calls[MP_COMM_REDUCE_SCATTER]++;
    return total;
}

void mp_comm_count_broadcast(mp_comm *c, size_t bytes, int root) {
    assert(c && root >= 0 && root < c->size);
    if (c->rank == root) c->bytes_sent[MP_COMM_BCAST] += (int64_t)bytes;
    c->calls[MP_COMM_BCAST]++;
}

void mp_comm_count_gather(mp_comm *c, int64_t n, const int64_t *counts, int root) {
    assert(c && n >= 0 && root >= 0 && root < c->size);
    if (c->rank == root && counts) {
        (void)total_count(c, counts);
        assert(counts[root] == n && "comm: gatherv counts[root] differs from the root's n");
    }
    if (c->rank != root) c->bytes_sent[MP_COMM_GATHER] += n;
    c->calls[MP_COMM_GATHER]++;
}

void mp_comm_count_p2p(mp_comm *c, int64_t n) {
    assert(c && n >= 0);
    c->bytes_sent[MP_COMM_P2P] += n;
    c->calls[MP_COMM_P2P]++;
}

void mp_comm_count_scatter(mp_comm *c, int64_t n, const int64_t *counts, int root) {
    assert(c && n >= 0 && root >= 0 && root < c->size);
    if (c->rank == root) {
        assert(counts && counts[root] == n && "comm: scatterv counts[root] differs from the root's n");
        c->bytes_sent[MP_COMM_SCATTER] += total_count(c, counts) - n;
    }
    c->calls[MP_COMM_SCATTER]++;
}
