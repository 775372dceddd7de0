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

struct mp_backend;

typedef struct mp_mesh {
    int world, rank;
    int tp, dp;
    int tp_rank, dp_rank;
    mp_comm *world_comm;   /* host memory, always MPI (or self): agreement, checkpoint commits, flags */
    mp_comm *tp_comm;      /* device tensors over tp (NCCL or staged after mp_mesh_attach_device) */
    mp_comm *dp_comm;      /* device tensors over dp (NCCL or staged after mp_mesh_attach_device) */
    mp_comm *ctl_dp;       /* host scalars over dp (the loss sum): dp_comm itself unless that is a device one */
    mp_comm *ctl_tp;       /* host buffers over tp (sampling's logits row): tp_comm itself unless a device one */
    int uses_mpi;       /* 1 if the communicators are MPI ones */
} mp_mesh;

/* A single-process mesh (1x1) with self communicators. */
void mp_mesh_init_single(mp_mesh *m);
/* Builds the mesh over MPI_COMM_WORLD (MPI must be initialised). MP_EINPUT if world != tp*dp. */
mp_code mp_mesh_init_mpi(mp_mesh *m, int tp, int dp, mp_err *err);
/* Which communicator the tp and dp groups' device buffers take (`--comm`, in the order of
 * mp_mesh_comm_names): auto (NCCL on a GPU, staged when ranks of one host share a GPU, the host MPI
 * communicators on the CPU), nccl (GPU only), staged (core/comm_staged.h: through host memory and MPI,
 * on any backend). */
typedef enum { MP_MESH_COMM_AUTO = 0, MP_MESH_COMM_NCCL, MP_MESH_COMM_STAGED } mp_mesh_comm;
extern const char *const mp_mesh_comm_names[];   /* "auto", "nccl", "staged", NULL */
/* Gives the mesh device communicators for backend be and the asked kind: tp_comm and dp_comm of more
 * than one rank become NCCL (unique ids broadcast over the MPI groups) or staged communicators, the MPI
 * ones staying for host scalars as ctl_tp / ctl_dp; a GPU group of one gets a device-copy communicator;
 * on the CPU under auto nothing changes. Collective over the world. MP_EDEVICE/MP_EINPUT naming NCCL's
 * reason on failure; MP_EINPUT for nccl on a CPU backend. */
mp_code mp_mesh_attach_device(mp_mesh *m, struct mp_backend *be, mp_mesh_comm asked, mp_err *err);
void mp_mesh_destroy(mp_mesh *m);

/* Balanced split of n items over p parts: part i gets [*start, *start + *count). The first n % p
 * parts get one more item. Used for FSDP dim-0 shards and for dp batch splits. */
void mp_split(int64_t n, int p, int i, int64_t *start, int64_t *count);

#endif
