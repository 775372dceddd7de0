/*
 * cli/runtime.h — what every model-running subcommand sets up: MPI (only when launched by mpirun),
 * the dp x tp mesh, the device backend; and the shared pieces of the train and eval loops (building the
 * model, the dp/micro-batch split of a global batch, evaluation over a token file).
 *
 * Errors found identically on every rank (bad flags, bad config, bad data) are printed by rank 0 only,
 * so an 8-rank job prints one message, not eight.
 *
 * The two failure protocols of a command's phases are two types, so that a phase's protocol is in its
 * signature and each exit path takes only its own kind (passing one where the other is expected, or
 * either where an mp_code is, does not compile; tests/cli_protocols.cmake checks that it does not):
 *   mp_alike   the phase fails alike on every rank: the same code and the same message everywhere (a bad
 *              flag, a bad config, a model the mesh cannot hold). mp_runtime_exit_alike: rank 0 prints.
 *   mp_agreed  the phase may fail on some ranks only (a file on node-local storage, rank 0's file work), so
 *              it agreed the code over the ranks (mp_runtime_agree): every rank holds the same code, the
 *              lowest failing rank printed its message. mp_runtime_exit_agreed prints nothing.
 * A command runs its phases through MP_PHASE_ALIKE and MP_PHASE_AGREED, which pick the exit path from
 * the type. Every exit status comes from core's mp_exit_status, through these two.
 */
#ifndef MP_RUNTIME_H
#define MP_RUNTIME_H

#include "ckpt/ckpt.h"
#include "core/backend.h"
#include "core/data.h"
#include "core/error.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_config.h"

/* A phase's result under "fails alike on every rank" (see the top of this file). */
typedef struct mp_alike {
    mp_code code;
} mp_alike;

/* A phase's result under "collective": the code agreed over the ranks, already printed by the failing
 * rank (see the top of this file). */
typedef struct mp_agreed {
    mp_code code;
} mp_agreed;

/* Declares that code, returned by a step every rank runs alike, is an mp_alike. */
static inline mp_alike mp_alike_of(mp_code code) { return (mp_alike){code}; }

typedef struct mp_runtime {
    int mpi;          /* MPI was initialised by us */
    int world, rank;  /* before the mesh exists */
    mp_mesh mesh;
    int have_mesh;
    mp_backend *be;
    double t_start;   /* when the process started, on mp_time_s()'s clock (startup time is counted from it) */
    int reported;     /* the failure being returned was already printed by the rank that met it */
    int64_t rss_start;   /* resident bytes (VmRSS) once the mesh and backend are up, -1 unknown: the start
                          * the "memory: peak" line measures from (mp_memplan_report) */
} mp_runtime;

/* Initialises MPI if the process was started by an MPI launcher (else world = 1). */
void mp_runtime_start(mp_runtime *rt, int *argc, char ***argv);
/* Builds the mesh (tp, dp; dp = 0 means world / tp), picks the backend ("cpu" | "cpu-bf16" | "cuda") and
 * the device communicators (comm: one of mp_mesh_comm_names, NULL for "auto"; core/mesh.h). Fails alike
 * (mp_alike_of its code): a device that only some ranks cannot use is agreed over the world (printed by
 * the lowest such rank, exit 2 on every rank; rt->reported then keeps rank 0 from printing it again),
 * never left for a collective to hang on. */
mp_code mp_runtime_mesh(mp_runtime *rt, int tp, int dp, const char *device, const char *comm, mp_err *err);
/* The exit of a failure every rank found alike: prints err once as "meshpoint <cmd>: error: ..."
 * (mp_log_fail, from rank 0; nothing when rt->reported says the failing rank printed it) and returns
 * mp_exit_status(f.code). f.code must not be MP_OK (MP_EINTERNAL's status then: a phase that failed
 * without a code is a bug). */
int mp_runtime_exit_alike(const mp_runtime *rt, mp_alike f, const mp_err *err);
/* The exit of an agreed failure: mp_exit_status(f.code), printing nothing (the failing rank did). The
 * same status on every rank, since the code is. f.code must not be MP_OK (as above). */
int mp_runtime_exit_agreed(mp_agreed f);
/* Runs phase expr, which returns mp_alike; on failure sets status to its exit (mp_runtime_exit_alike of
 * rt, err) and jumps to out. */
#define MP_PHASE_ALIKE(status, out, rt, err, expr) \
    do { \
        mp_alike phase_alike_ = (expr); \
        if (phase_alike_.code != MP_OK) { \
            (status) = mp_runtime_exit_alike((rt), phase_alike_, (err)); \
            goto out; \
        } \
    } while (0)
/* Runs phase expr, which returns mp_agreed; on failure sets status to its exit (mp_runtime_exit_agreed)
 * and jumps to out. */
#define MP_PHASE_AGREED(status, out, expr) \
    do { \
        mp_agreed phase_agreed_ = (expr); \
        if (phase_agreed_.code != MP_OK) { \
            (status) = mp_runtime_exit_agreed(phase_agreed_); \
            goto out; \
        } \
    } while (0)
/* Inside a function returning mp_agreed: returns expr's mp_agreed when it failed (MP_TRY's twin). */
#define MP_TRY_AGREED(expr) \
    do { \
        mp_agreed try_agreed_ = (expr); \
        if (try_agreed_.code != MP_OK) return try_agreed_; \
    } while (0)
/* For a step that can fail on some ranks only (reading a checkpoint, rank-0-only file work): core's
 * mp_comm_agree over the world, plus the CLI's printing policy: the lowest failing rank prints its
 * message — one message, not one per rank. Returns the highest code of any rank (MP_OK if none failed);
 * a rank that did not fail itself exits with that code silently; the message reads "meshpoint <cmd>:
 * error: [rank N] ..." when the world has more than one rank (once: an error a library agreement already
 * prefixed is not prefixed again, mp_comm_agree's rule). err may be NULL when local is MP_OK.
 * Collective over the world (over MPI_COMM_WORLD before the mesh exists; a local check in a single
 * process). */
mp_agreed mp_runtime_agree(const mp_runtime *rt, mp_code local, const mp_err *err);
/* Test hook: MP_EINPUT "simulated failure on rank N" when the fault fail_rank is this
 * rank (tests of the agreement above under mpirun); MP_OK otherwise. `what` names the step. */
mp_code mp_runtime_test_fail(const mp_runtime *rt, const char *what, mp_err *err);
/* Resolves the checkpoint that name names into dir (cap bytes; name may be dir itself), the way `meshpoint
 * ckpt` does (mp_ckpt_resolve: a step directory, a checkpoint root, or a run directory meaning its newest
 * complete checkpoint). Rank 0 decides and broadcasts its answer; an error (prefixed "<what>: " when what
 * is not NULL, e.g. the flag that named the path) is agreed (mp_runtime_agree). Collective over the
 * world; needs the mesh. */
mp_agreed mp_runtime_resolve_ckpt(const mp_runtime *rt, const char *what, const char *name, char *dir, size_t cap,
                                  mp_err *err);
/* A reader of the checkpoint in dir with its metadata only (ckpt_open_planned of no region: rank 0 reads
 * index.h5, every rank gets the metadata; for carried files and config). Collective, before or after
 * the mesh: the agreed code (rank 0's message). */
mp_code mp_runtime_ckpt_open_meta(const mp_runtime *rt, const char *dir, ckpt_reader **r, mp_err *err);
/* The model config the checkpoint in dir was saved with (its model_config metadata) into *mc; rank 0
 * reads the index, every rank parses the metadata (no broadcast of a struct). Collective: the agreed
 * code, the message naming dir. */
mp_agreed mp_runtime_ckpt_model_config(const mp_runtime *rt, const char *dir, llama_config *mc, mp_err *err);
/* Reads the checkpoint a command just wrote to dir back against its checksums and coverage (rank 0,
 * reader scratch bounded by scratch bytes, a progress bar on a terminal) and logs the bytes read.
 * Collective: returns the exit status of the agreed result (0, or 1 naming dir). */
int mp_runtime_verify_written(const mp_runtime *rt, const char *dir, size_t scratch);
/* Tears down the mesh and MPI. */
void mp_runtime_end(mp_runtime *rt);

/* How one global batch of B sequences is split: grad_accum micro-steps, each of B/grad_accum sequences
 * split over dp. Sequence k of the batch goes to micro-step k / (B/ga), dp rank (k % (B/ga)) / mb. */
typedef struct mp_batch_split {
    int global, grad_accum, micro;   /* micro = sequences per rank per micro-step */
} mp_batch_split;

/* MP_EINPUT naming the numbers if B is not divisible by grad_accum * dp. */
mp_code mp_batch_split_init(mp_batch_split *s, int global, int grad_accum, int dp, mp_err *err);
/* First sequence index (in the global batch) of dp rank r's part of micro-step a. */
static inline int mp_batch_first(const mp_batch_split *s, int a, int r) {
    return a * (s->global / s->grad_accum) + r * s->micro;
}

/* The --device choices of train, eval and sample (NULL-terminated): "cpu-bf16" emulates the GPU's
 * precision on the CPU (core/backend.h). */
extern const char *const mp_runtime_devices[];
#define MP_RUNTIME_COMM_HELP                                                                               \
    "communicator of the tp and dp groups' device buffers: auto (NCCL, one GPU per rank; staged when ranks "  \
    "share a GPU; MPI on the CPU), nccl, or staged (through host memory and MPI, any device)"
#define MP_RUNTIME_DEVICE_HELP "compute device (cpu-bf16: the GPU's bf16 precision emulated on the CPU; slow, for checks)"

/* The model options for rt's mesh: micro-batch micro, tc's seq_len, SP (tc->sp < 0: on when tp > 1) and
 * reshard-after-forward. */
llama_options mp_runtime_model_options(const mp_runtime *rt, const mp_train_config *tc, int micro);

/* Builds the model (any family of layers/family.h) for the mesh and options. */
mp_code mp_runtime_model(mp_runtime *rt, const llama_config *cfg, const mp_train_config *tc, int micro,
                         llama_model **out, mp_err *err);

/* Mean per-token loss over the first nbatches global batches of f (batch B sequences of length T,
 * split over dp like training). in/tgt are host buffers of micro*T ints. Identical on every rank. When
 * the file holds fewer batches, each is used once; *used (if not NULL) gets the number averaged over. */
double mp_eval_loss_n(llama_model *m, const mp_token_file *f, const mp_batch_split *bs, int T, int nbatches,
                      int32_t *in, int32_t *tgt, int *used, mp_err *err);
/* mp_eval_loss_n without the count. */
double mp_eval_loss(llama_model *m, const mp_token_file *f, const mp_batch_split *bs, int T, int nbatches,
                    int32_t *in, int32_t *tgt, mp_err *err);

#endif
