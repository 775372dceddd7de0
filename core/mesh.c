/*
 * core/mesh.c — the 2-D process mesh (core/mesh.h): world = dp x tp with tp innermost, so
 * rank = dp_rank * tp + tp_rank, and the balanced split used for FSDP shards and dp batch splits.
 *
 * Under MPI the three communicators are built from MPI_COMM_WORLD: world_comm is a dup of it, tp_comm
 * is MPI_Comm_split by dp_rank (key tp_rank, so tp_comm->rank == tp_rank) and dp_comm is split by
 * tp_rank (key dp_rank). The size checks run before any collective and depend only on the world size
 * and the arguments, so every rank returns the same error and none is left waiting in a split.
 * The single-process mesh uses three distinct mp_comm_self() objects; mp_mesh_destroy destroys each
 * distinct communicator once and clears the pointers, so it is safe whichever way they were made and
 * safe to call twice.
 */
#include "core/mesh.h"
#include "core/comm_mpi.h"
#include <assert.h>
#include <mpi.h>
#include <string.h>

void mp_mesh_init_single(mp_mesh *m) {
    assert(m);
    memset(m, 0, sizeof *m);
    m->world = 1;
    m->rank = 0;
    m->tp = m->dp = 1;
    m->tp_rank = m->dp_rank = 0;
    m->world_comm = mp_comm_self();
    m->tp_comm = mp_comm_self();
    m->dp_comm = mp_comm_self();
    m->uses_mpi = 0;
}

/* mp_comm over a split of MPI_COMM_WORLD (the split itself is freed: mp_comm_mpi_create dups it). */
static mp_comm *split_comm(int color, int key) {
    MPI_Comm part;
    MPI_Comm_split(MPI_COMM_WORLD, color, key, &part);
    mp_comm *c = mp_comm_mpi_create(part);
    MPI_Comm_free(&part);
    return c;
}

mp_code mp_mesh_init_mpi(mp_mesh *m, int tp, int dp, mp_err *err) {
    assert(m);
    memset(m, 0, sizeof *m);
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    if (!init || fin)
        return mp_err_set(err, MP_EINTERNAL, "mesh: MPI is %s", fin ? "already finalised" : "not initialised");
    int world, rank;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (tp <= 0)
        return mp_err_set(err, MP_EINPUT, "mesh: tp must be >= 1 (got tp %d, world size %d)", tp, world);
    if (dp < 0)
        return mp_err_set(err, MP_EINPUT, "mesh: dp must be >= 1, or 0 for world / tp (got dp %d)", dp);
    if (dp > 0 && (int64_t)tp * dp != world)
        return mp_err_set(err, MP_EINPUT, "mesh: world size %d != tp %d x dp %d", world, tp, dp);
    if (world % tp != 0)
        return mp_err_set(err, MP_EINPUT, "mesh: world size %d is not a multiple of tp %d", world, tp);
    if (dp == 0) dp = world / tp;
    assert((int64_t)tp * dp == world);

    m->world = world;
    m->rank = rank;
    m->tp = tp;
    m->dp = dp;
    m->tp_rank = rank % tp;
    m->dp_rank = rank / tp;
    m->uses_mpi = 1;
    m->world_comm = mp_comm_mpi_create(MPI_COMM_WORLD);
    m->tp_comm = split_comm(m->dp_rank, m->tp_rank);
    m->dp_comm = split_comm(m->tp_rank, m->dp_rank);
    assert(m->world_comm->size == world && m->world_comm->rank == rank);
    assert(m->tp_comm->size == tp && m->tp_comm->rank == m->tp_rank);
    assert(m->dp_comm->size == dp && m->dp_comm->rank == m->dp_rank);
    return MP_OK;
}

void mp_mesh_destroy(mp_mesh *m) {
    if (!m) return;
    mp_comm *cs[3] = {m->world_comm, m->tp_comm, m->dp_comm};
    for (int i = 0; i < 3; i++) {
        if (!cs[i]) continue;
        int dup = 0;
        for (int j = 0; j < i; j++) dup |= cs[j] == cs[i];
        if (!dup && cs[i]->destroy) cs[i]->destroy(cs[i]);
    }
    m->world_comm = m->tp_comm = m->dp_comm = NULL;
}

void mp_split(int64_t n, int p, int i, int64_t *start, int64_t *count) {
    assert(n >= 0 && p >= 1 && i >= 0 && i < p && start && count);
    int64_t base = n / p, rem = n % p;
    *count = base + (i < rem ? 1 : 0);
    *start = (int64_t)i * base + (i < rem ? i : rem);
}
