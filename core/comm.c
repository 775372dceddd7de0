/*
 * core/comm.c — the backend-independent part of the communicator table: reading and resetting the
 * per-op traffic counters that every implementation (self, MPI, NCCL) fills in with the formulas of
 * core/comm.h. Implementations live in comm_self.c, comm_mpi.c (and a CUDA file for NCCL).
 */
#include "core/comm.h"
#include <assert.h>
#include <string.h>

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

/* Sum of seconds over every op kind of c. */
double mp_comm_total_seconds(const mp_comm *c) {
    double t = 0;
    for (int op = 0; op < MP_COMM_NOPS; op++) t += c->seconds[op];
    return t;
}
