/*
 * core/mesh.h — the 2-D process mesh: world = dp x tp, tp innermost (rank = dp_rank * tp + tp_rank).
 *
 * The tp group holds the ranks with the same dp_rank (they split every layer's weights); the dp group
 * holds the ranks with the same tp_rank (they hold the same TP slice, sharded again by FSDP and fed
 * different sequences). A 1x1 mesh needs no MPI: its communicators are mp_comm_self().
 */
#ifndef MP_MESH_H
#define MP_MESH_H

#include "core/comm.h"
#include "core/error.h"

typedef struct mp_mesh {
    int world, rank;
    int tp, dp;
    int tp_rank, dp_rank;
    mp_comm *world_comm;
    mp_comm *tp_comm;
    mp_comm *dp_comm;
    int uses_mpi;       /* 1 if the communicators are MPI ones */
} mp_mesh;

/* A single-process mesh (1x1) with self communicators. */
void mp_mesh_init_single(mp_mesh *m);
/* Builds the mesh over MPI_COMM_WORLD (MPI must be initialised). MP_EINPUT if world != tp*dp. */
mp_code mp_mesh_init_mpi(mp_mesh *m, int tp, int dp, mp_err *err);
void mp_mesh_destroy(mp_mesh *m);

/* Balanced split of n items over p parts: part i gets [*start, *start + *count). The first n % p
 * parts get one more item. Used for FSDP dim-0 shards and for dp batch splits. */
void mp_split(int64_t n, int p, int i, int64_t *start, int64_t *count);

#endif
