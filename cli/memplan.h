/*
 * cli/memplan.h — the memory plan: what each rank will allocate, computed before anything large is
 * allocated, printed at start-up and checked against the memory the ranks of each host can have.
 */
#ifndef MP_CLI_MEMPLAN_H
#define MP_CLI_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>
#include "cli/runtime.h"
#include "layers/llama.h"

/* What a command does besides building the model, for its plan. */
typedef struct mp_memplan_use {
    int staging;          /* keeps a checkpoint staging copy of the shards and moments: async saves, or a
                           * device whose memory the host cannot read (a sync save on the CPU writes
                           * straight from the shards) */
    int saves;            /* may write checkpoints (train: a stop signal saves even without --ckpt-every) */
    int loads;            /* reads a checkpoint into the model (resume, --init-from, eval, sample) */
    int64_t ckpt_bands;   /* bytes of checkpoint band buffers its saves use (mp_memplan_ckpt_bands) */
    int64_t own;          /* the command's own buffers that scale with the model (sample: the logits row) */
} mp_memplan_use;

/* One rank's planned bytes: the model's categories (llama_plan_memory) plus the command's own buffers. */
typedef struct mp_memplan {
    llama_memory_plan model;
    int64_t staging;        /* checkpoint staging copy (shards of parameters and both moments) */
    int64_t data;           /* host token buffers */
    int64_t init;           /* host staging of a fresh start's weights on a device (LLAMA_INIT_STAGING_BYTES) */
    int64_t ckpt_bands;     /* the checkpoint writer's band buffers where the command's saves need them */
    int64_t ckpt_io;        /* checkpoint I/O scratch: a save's tile checksums (ckpt_save_hash_bytes), a
                             * load's read scratch (ckpt_reader_scratch_bytes) and, on a device, its host
                             * buffer of the largest shard */
    int64_t own;            /* the command's own buffers (mp_memplan_use.own) */
    int64_t acts_other;     /* a training model's activations with the other --recompute mode (none <->
                             * full), for the plan's comparison line and the refusal's advice; 0 forward only */
    int64_t comm;           /* the ring collectives' scratch of each MPI group whose sums exceed a piece
                             * (MP_COMM_MPI_SCRATCH_BYTES each, core/comm_mpi.h) and a staged group's
                             * host buffers (core/comm_staged.h) */
    int64_t total;          /* this rank */
    int64_t largest;        /* the largest rank's total over the mesh */
    int64_t host_total;     /* the ranks on this host together */
    int host_ranks;
    int64_t available;      /* bytes the host offers (MemAvailable, cgroup limit), -1 unknown */
    int64_t rlimit_room;    /* bytes this process's own limits (ulimit -v / -d) leave, -1 none set */
    char rlimit_name[160];  /* which limit binds, for the messages */
} mp_memplan;

/* Plans this rank's memory for a model with options opt on rt's mesh, used as `use` says, prints the
 * plan (rank 0) and checks it: against max_bytes per rank when nonzero (--max-memory: the user's bound
 * replaces every measurement), else each rank against its own process limits (RLIMIT_AS, RLIMIT_DATA:
 * what a scheduler sets with ulimit) and the host's ranks together against the host's available memory.
 * Collective over the mesh; returns the agreed code (MP_EINPUT: the plan does not fit or the model is
 * beyond planning, naming the figures; the failing rank printed the message). */
mp_agreed mp_memplan_check(mp_runtime *rt, const llama_config *cfg, const llama_options *opt,
                           const mp_memplan_use *use, size_t max_bytes, mp_memplan *plan, mp_err *err);

/* Bytes the host can give this job now: MemAvailable of /proc/meminfo, lowered to the cgroup's
 * memory.max - memory.current when that is set; -1 when neither can be read. The fault mem_available
 * (bytes) replaces the measurement, for tests. */
int64_t mp_memplan_available(void);

/* The checkpoint band buffers of a save with files of several ranks (ranks_per_file, ckpt_save_opts):
 * a group leader writes its members' boxes through the writer's two fill band buffers. Every rank
 * counts them (which rank leads is known only at the save): 2 x CKPT_FILL_BYTES_DEFAULT when a world of
 * more than one rank groups files, else 0 (a rank's own boxes are written from the shards). */
int64_t mp_memplan_ckpt_bands(int ranks_per_file, int world);

/* The "memory: peak" line, at the end of a command: each rank's high-water mark of resident memory
 * (VmHWM) above what it held once its runtime was up (rt->rss_start), beside its own plan (planned
 * bytes) and its allocator's peak (mp_mem_peak_total); rank 0 prints the figures of the rank least
 * below its plan, naming it when there are several. Collective over the world (every rank calls it).
 * See docs/DESIGN_NOTES.md, "The memory plan is an upper bound". */
void mp_memplan_report(const mp_runtime *rt, int64_t planned);

#endif
