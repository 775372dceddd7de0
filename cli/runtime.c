/* cli/runtime.c — see runtime.h. */
#include "cli/runtime.h"
#include "core/fault.h"
#include <mpi.h>
#include <assert.h>
#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/ckpt_common.h"
#include "cli/progress.h"
#include "core/alloc.h"
#include "core/comm_mpi.h"
#include "core/log.h"

/* True when an MPI launcher started this process (Open MPI, MPICH/Hydra, Slurm PMI). */
static int launched_by_mpi(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

/* Seconds since this process started (exec included: dynamic loading, MPI start-up), from Linux's
 * /proc/self/stat start time against /proc/uptime (10 ms resolution); 0 when /proc does not say. */
static double process_age_s(void) {
    FILE *f = fopen("/proc/self/stat", "r");
    char buf[1024];
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');   /* the command name may hold spaces and parentheses */
    unsigned long long start = 0;
    /* after ") ": field 3 (state) ... field 22 (starttime, clock ticks since boot) */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d %*d %*d %*d %llu",
                     &start) != 1)
        return 0;
    double up = 0;
    f = fopen("/proc/uptime", "r");
    if (!f) return 0;
    int ok = fscanf(f, "%lf", &up) == 1;
    fclose(f);
    long hz = sysconf(_SC_CLK_TCK);
    double age = up - (double)start / (double)(hz > 0 ? hz : 100);
    return ok && age > 0 && age < 3600 ? age : 0;
}

/* The allocator's failure handler (mp_alloc_on_failure) in an MPI job of several ranks: end every rank
 * with status 1 (mpirun then returns 1), so none is left waiting in a collective for the one that ran out
 * of memory; a single process just exits 1. */
static int g_oom_abort_world;
static void oom_exit(void) {
    if (g_oom_abort_world) MPI_Abort(MPI_COMM_WORLD, mp_exit_status(MP_ENOMEM));
    exit(mp_exit_status(MP_ENOMEM));
}

void mp_runtime_start(mp_runtime *rt, int *argc, char ***argv) {
    memset(rt, 0, sizeof *rt);
    mp_alloc_on_failure(oom_exit);
    rt->t_start = mp_time_s() - process_age_s();
    rt->world = 1;
    if (launched_by_mpi()) {
        /* the async checkpoint writer thread makes no MPI call: only the main thread does */
        int provided = MPI_THREAD_SINGLE;
        MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
        rt->mpi = 1;
        if (provided < MPI_THREAD_FUNNELED) {
            mp_log_fail("the MPI library provides thread level %d, below MPI_THREAD_FUNNELED (%d) that the "
                        "asynchronous checkpoint writer needs", provided, MPI_THREAD_FUNNELED);
            MPI_Abort(MPI_COMM_WORLD, mp_exit_status(MP_EINTERNAL));
        }
        MPI_Comm_size(MPI_COMM_WORLD, &rt->world);
        MPI_Comm_rank(MPI_COMM_WORLD, &rt->rank);
        g_oom_abort_world = rt->world > 1;
    }
    mp_log_set_rank(rt->rank, rt->world);
}

/* The device choice over the world: a GPU host with a broken driver among working ones fails on its
 * ranks only, and those ranks used to leave while the others waited in the mesh's collectives (a
 * silent hang until the job's wall time). So the choice is agreed (mp_runtime_agree: the lowest failing
 * rank prints "[rank N] ...", one line, whether one rank or all met it) and returned on every rank as
 * already reported, a rank that did not fail itself naming the one that did. */
static mp_code agree_device(mp_runtime *rt, mp_code local, mp_err *err) {
    if (!rt->mpi || rt->world == 1) return local;
    mp_code agreed = mp_runtime_agree(rt, local, err).code;
    if (agreed && !local) mp_err_set(err, agreed, "the device could not be set up on another rank (reported there)");
    if (agreed) rt->reported = 1;
    return agreed;
}

mp_code mp_runtime_mesh(mp_runtime *rt, int tp, int dp, const char *device, const char *comm, mp_err *err) {
    mp_code rc = mp_backend_get(device, &rt->be, err);
    /* fault fail_device_rank: a host whose GPU cannot be used */
    if (!rc && mp_fault_int("fail_device_rank", -1) == rt->rank)
        rc = mp_err_set(err, MP_EINPUT, "device %s: simulated failure on rank %d (fault fail_device_rank)", device,
                        rt->rank);
    MP_TRY(agree_device(rt, rc, err));
    if (rt->mpi) {
        MP_TRY(mp_mesh_init_mpi(&rt->mesh, tp, dp, err));
    } else {
        if (tp != 1 || (dp != 0 && dp != 1))
            return mp_err_set(err, MP_EINPUT,
                              "--tp %d --dp %d needs %d processes, but this is a single process; launch with "
                              "mpirun -np %d",
                              tp, dp, tp * (dp ? dp : 1), tp * (dp ? dp : 1));
        mp_mesh_init_single(&rt->mesh);
    }
    rt->have_mesh = 1;   /* before the attach: a failed one leaves a mesh that mp_runtime_end destroys */
    /* device communicators for the backend (NCCL or staged for the tp / dp groups of a GPU run; nothing on
     * the CPU unless --comm staged).
     * Collective; a failure is agreed inside, every rank returns it with the failing rank's message. */
    mp_mesh_comm kind = MP_MESH_COMM_AUTO;
    for (int k = 0; comm && mp_mesh_comm_names[k]; k++)   /* the flag parser admitted only these names */
        if (!strcmp(comm, mp_mesh_comm_names[k])) kind = (mp_mesh_comm)k;
    MP_TRY(mp_mesh_attach_device(&rt->mesh, rt->be, kind, err));
    rt->rss_start = mp_proc_kb_bytes("/proc/self/status", "VmRSS");   /* the program, MPI, the backend */
    return MP_OK;
}

int mp_runtime_exit_alike(const mp_runtime *rt, mp_alike f, const mp_err *err) {
    assert(f.code != MP_OK);
    if (rt->rank == 0 && !rt->reported) mp_log_fail("%s", err->msg);
    return mp_exit_status(f.code != MP_OK ? f.code : MP_EINTERNAL);
}

int mp_runtime_exit_agreed(mp_agreed f) {
    assert(f.code != MP_OK);
    return mp_exit_status(f.code != MP_OK ? f.code : MP_EINTERNAL);
}

mp_agreed mp_runtime_agree(const mp_runtime *rt, mp_code local, const mp_err *err) {
    assert(local == MP_OK || err);
    mp_err m;
    if (local != MP_OK) m = *err;
    else mp_err_clear(&m);
    /* before the mesh (the config names it): the same agreement over MPI_COMM_WORLD */
    int early = !rt->have_mesh && rt->mpi && rt->world > 1;
    mp_comm *w = rt->have_mesh ? rt->mesh.world_comm : early ? mp_comm_mpi_create(MPI_COMM_WORLD) : NULL;
    int from = local != MP_OK ? 0 : -1;
    mp_code agreed = w ? mp_comm_agree(w, local, &m, &from) : local;
    if (agreed != MP_OK && from == (w ? w->rank : 0)) mp_log_fail("%s", m.msg);   /* the failing rank says it */
    if (early) w->ops->destroy(w);
    return (mp_agreed){agreed};
}

mp_code mp_runtime_test_fail(const mp_runtime *rt, const char *what, mp_err *err) {
    if (mp_fault_int("fail_rank", -1) != rt->rank) return MP_OK;
    return mp_err_set(err, MP_EINPUT, "%s: simulated failure on rank %d (fault fail_rank)", what, rt->rank);
}

mp_agreed mp_runtime_resolve_ckpt(const mp_runtime *rt, const char *what, const char *name, char *dir, size_t cap,
                                  mp_err *err) {
    assert(rt->have_mesh && cap > 0);
    mp_code local = MP_OK;
    if (rt->rank == 0) {
        char *found = NULL;   /* resolved before dir is written: name may be dir */
        local = mp_ckpt_resolve(name, &found, err);
        if (!local && strlen(found) >= cap) local = mp_err_set(err, MP_EINPUT, "checkpoint path too long: %s", found);
        if (!local) snprintf(dir, cap, "%s", found);
        if (local && what) mp_err_wrap(err, "%s", what);
        free(found);
    }
    MP_TRY_AGREED(mp_runtime_agree(rt, local, err));
    mp_comm *w = rt->mesh.world_comm;
    if (rt->mesh.world > 1) w->ops->broadcast(w, dir, cap, 0);
    return (mp_agreed){MP_OK};
}

mp_code mp_runtime_ckpt_open_meta(const mp_runtime *rt, const char *dir, ckpt_reader **r, mp_err *err) {
    /* before the mesh: over MPI_COMM_WORLD, as mp_runtime_agree does */
    int early = !rt->have_mesh && rt->mpi;
    mp_comm *w = rt->have_mesh ? rt->mesh.world_comm : early ? mp_comm_mpi_create(MPI_COMM_WORLD) : mp_comm_self();
    mp_code rc = ckpt_open_planned(r, w, dir, NULL, 0, err);
    if (!rt->have_mesh) w->ops->destroy(w);
    return rc;
}

mp_agreed mp_runtime_ckpt_model_config(const mp_runtime *rt, const char *dir, llama_config *mc, mp_err *err) {
    ckpt_reader *cr = NULL;
    mp_code local = mp_runtime_ckpt_open_meta(rt, dir, &cr, err);
    if (!local && (local = mp_ckpt_parse_model_config(cr, mc, err))) mp_err_wrap(err, "checkpoint %s", dir);
    ckpt_close(cr);
    return mp_runtime_agree(rt, local, err);
}

int mp_runtime_verify_written(const mp_runtime *rt, const char *dir, size_t scratch) {
    mp_err err;
    mp_err_clear(&err);
    mp_code vrc = MP_OK;
    int64_t vbytes = 0;
    double t0 = mp_time_s();
    if (rt->rank == 0) {
        ckpt_reader *r = NULL;
        vrc = ckpt_open(&r, dir, &err);
        if (!vrc) ckpt_reader_set_scratch(r, scratch);   /* verifying stays under the command's memory bound */
        mp_progress *pg = vrc ? NULL : mp_progress_start("verifying", 0, MP_PROGRESS_BYTES);
        if (!vrc) ckpt_reader_set_progress(r, mp_progress_ckpt, pg);
        if (!vrc) vrc = ckpt_verify(r, &vbytes, &err);
        int nfiles = 0;
        if (!vrc) vrc = ckpt_files_verify(r, NULL, NULL, &nfiles, &err);   /* the carried files too */
        mp_progress_finish(pg);
        ckpt_close(r);
        if (vrc) mp_err_wrap(&err, "verifying %s after writing it", dir);
        else fprintf(stderr, "%s: verified %s: %.2f MiB read back, every checksum and the coverage hold, %d carried "
                     "file%s (%.2f s)\n", mp_log_prog(), dir, vbytes / 1048576.0, nfiles, nfiles == 1 ? "" : "s",
                     mp_time_s() - t0);
    }
    mp_agreed agreed = mp_runtime_agree(rt, vrc, &err);
    return agreed.code ? mp_runtime_exit_agreed(agreed) : mp_exit_status(MP_OK);
}

void mp_runtime_end(mp_runtime *rt) {
    if (rt->have_mesh) mp_mesh_destroy(&rt->mesh);
    rt->have_mesh = 0;
    if (rt->mpi) MPI_Finalize();
    rt->mpi = 0;
}

mp_code mp_batch_split_init(mp_batch_split *s, int global, int grad_accum, int dp, mp_err *err) {
    if (global % (grad_accum * dp))
        return mp_err_set(err, MP_EINPUT,
                          "the global batch (%d sequences) is not divisible by grad_accum (%d) x dp (%d)", global,
                          grad_accum, dp);
    s->global = global;
    s->grad_accum = grad_accum;
    s->micro = global / grad_accum / dp;
    return MP_OK;
}

const char *const mp_runtime_devices[] = {"cpu", "cpu-bf16", "cuda", NULL};

llama_options mp_runtime_model_options(const mp_runtime *rt, const mp_train_config *tc, int micro) {
    llama_options o = {.micro_batch = micro, .seq_len = tc->seq_len,
                       .sp = tc->sp < 0 ? rt->mesh.tp > 1 : tc->sp,
                       .reshard_after_forward = tc->reshard_after_forward,
                       /* "none", "full": llama_recompute's order (a value outside them was refused) */
                       .recompute = mp_choice_index(mp_train_recompute_modes, tc->recompute) > 0,
                       .act_dtype = rt->be ? rt->be->act_dtype : MP_F32};
    return o;
}

mp_code mp_runtime_model(mp_runtime *rt, const llama_config *cfg, const mp_train_config *tc, int micro,
                         llama_model **out, mp_err *err) {
    llama_options o = mp_runtime_model_options(rt, tc, micro);
    return llama_create(out, cfg, &o, &rt->mesh, rt->be, err);
}

double mp_eval_loss(llama_model *m, const mp_token_file *f, const mp_batch_split *bs, int T, int nbatches,
                    int32_t *in, int32_t *tgt, mp_err *err) {
    return mp_eval_loss_n(m, f, bs, T, nbatches, in, tgt, NULL, err);
}

double mp_eval_loss_n(llama_model *m, const mp_token_file *f, const mp_batch_split *bs, int T, int nbatches,
                      int32_t *in, int32_t *tgt, int *used, mp_err *err) {
    mp_loader l;
    if (mp_loader_init(&l, f, bs->global, T, err) != MP_OK) return NAN;
    mp_mesh *mesh = llama_mesh(m);
    double sum = 0;
    for (int b = 0; b < nbatches; b++) {
        for (int a = 0; a < bs->grad_accum; a++) {
            mp_loader_get(&l, mp_batch_first(bs, a, mesh->dp_rank), bs->micro, in, tgt);
            sum += llama_forward(m, in, tgt);
        }
        mp_loader_advance(&l);
        if (l.cur.epoch > 0) { nbatches = b + 1; break; }   /* the file holds fewer batches: use them once */
    }
    mesh->ctl_dp->ops->all_reduce_f64(mesh->ctl_dp, &sum, 1);
    if (used) *used = nbatches;
    return sum / ((double)nbatches * bs->global * T);
}
