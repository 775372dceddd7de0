/*
 * cli/train_resume.c — where a training run's state comes from: --resume (the newest complete
 * checkpoint under the root, none: step 0), --resume-from (a named checkpoint; an earlier one rewinds)
 * and --init-from (a new run from a checkpoint's weights: step 0, fresh moments, schedule and cursor).
 * Rank 0 decides which checkpoint and broadcasts it, so ranks that see different file systems cannot
 * split the job; every load is agreed over the ranks before anyone trains. The tokenizer files the
 * loaded checkpoint carries are carried into every save of the run (cli/tokfiles.h).
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/train_run.h"
#include "core/log.h"

/* Rank 0 picks the checkpoint to resume from (--resume-from, or for --resume the newest complete one
 * under the root: none starts from step 0) and broadcasts its directory: ranks never decide alone, so
 * file systems that look different from different nodes cannot split the job. Collective. Returns the
 * agreed code. */
static mp_agreed pick_resume_dir(train_run *r) {
    mp_code local = MP_OK;
    if (r->rt.rank == 0 && r->f.resume_from) {
        snprintf(r->resume_dir, sizeof r->resume_dir, "%s", r->f.resume_from);
    } else if (r->rt.rank == 0 && r->f.resume) {
        mp_err miss;
        local = ckpt_find_latest(r->ckpt_root, r->resume_dir, sizeof r->resume_dir, NULL, &miss);
        if (local == MP_EINPUT) {
            mp_warn("--resume: no complete checkpoint under %s (%s): starting from step 0", r->ckpt_root, miss.msg);
            r->resume_dir[0] = '\0';
            local = MP_OK;
        } else if (local) {
            r->err = miss;
            mp_err_wrap(&r->err, "--resume");
        }
    }
    MP_TRY_AGREED(mp_runtime_agree(&r->rt, local, &r->err));
    r->mesh->world_comm->ops->broadcast(r->mesh->world_comm, r->resume_dir, sizeof r->resume_dir, 0);
    return (mp_agreed){MP_OK};
}

/* Rank 0 reads the tokenizer files the checkpoint in dir carries (checked) into the checkpointer, for
 * every save of this run to carry on. Collective: returns the agreed code. */
static mp_agreed carry_tokfiles(train_run *r, const char *dir) {
    mp_code local = MP_OK;
    mp_tokfiles_free(&r->ck.files);
    if (r->rt.rank == 0 && (local = mp_tokfiles_from_ckpt_dir(&r->ck.files, dir, &r->err)))
        mp_err_wrap(&r->err, "the tokenizer files of %s", dir);
    mp_agreed agreed = mp_runtime_agree(&r->rt, local, &r->err);
    if (!agreed.code && r->ck.files.n) mp_info("carrying the tokenizer files of %s into this run's checkpoints", dir);
    return agreed;
}

/* Loads the checkpoint rank 0 picked into the model, r->rs and the loader's cursor. Collective when
 * resuming: the agreed code. */
mp_agreed mp_train_resume(train_run *r) {
    mp_agreed agreed = pick_resume_dir(r);
    if (agreed.code || !r->resume_dir[0]) return agreed;
    /* --resume-from names a checkpoint the way `ckpt` does: a step directory, a checkpoint root or a run
     * directory (its newest complete checkpoint); rank 0 decides, like pick_resume_dir */
    if (r->f.resume_from)
        MP_TRY_AGREED(mp_runtime_resolve_ckpt(&r->rt, NULL, r->f.resume_from, r->resume_dir, sizeof r->resume_dir,
                                              &r->err));
    /* a damaged box may fail only the ranks that read it: agree before anyone trains */
    double t0 = mp_time_s();
    mp_code local = mp_checkpoint_load(r->model, r->resume_dir, &r->mc, 0, &r->rs, &r->err);
    r->load_s = mp_time_s() - t0;
    if (local) mp_err_wrap(&r->err, "resuming");
    else if ((local = mp_loader_set_cursor(&r->loader, r->rs.cursor, &r->err)))
        mp_err_wrap(&r->err, "resuming from %s", r->resume_dir);
    MP_TRY_AGREED(mp_runtime_agree(&r->rt, local, &r->err));
    mp_checkpoint_log_io(r->mesh, "resumed from", r->resume_dir, &r->rs);
    MP_TRY_AGREED(carry_tokfiles(r, r->resume_dir));
    /* a run started with --init-from keeps recording where its weights came from */
    snprintf(r->ck.init_from, sizeof r->ck.init_from, "%s", r->rs.init_from);
    return (mp_agreed){MP_OK};
}

/* --init-from: loads the parameters of the named checkpoint (a step directory, a checkpoint root or a run
 * directory, resolved as --resume-from is; full or model-only, saved by any mesh: the load reshards) into
 * the model, whose moments stay zero, and leaves r->rs at step 0 with the loader at the start: a new run
 * with this run's schedule. A model config that disagrees with --config is refused naming the field.
 * The source goes into every save's metadata "init_from" and the log. Collective: the agreed code. */
mp_agreed mp_train_init_from(train_run *r) {
    if (!r->f.init_from) return (mp_agreed){MP_OK};
    /* rank 0 resolves the name (the flag named in a message) and broadcasts it */
    MP_TRY_AGREED(mp_runtime_resolve_ckpt(&r->rt, "--init-from", r->f.init_from, r->init_dir, sizeof r->init_dir,
                                          &r->err));
    mp_run_state src;
    memset(&src, 0, sizeof src);
    /* a damaged box may fail only the ranks that read it: agree before anyone trains */
    double t0 = mp_time_s();
    mp_code local = mp_checkpoint_load(r->model, r->init_dir, &r->mc, MP_LOAD_WEIGHTS, &src, &r->err);
    r->load_s = mp_time_s() - t0;
    if (local) mp_err_wrap(&r->err, "--init-from");
    MP_TRY_AGREED(mp_runtime_agree(&r->rt, local, &r->err));
    mp_checkpoint_log_io(r->mesh, "initialised from", r->init_dir, &src);
    MP_TRY_AGREED(carry_tokfiles(r, r->init_dir));
    char abs[PATH_MAX];
    const char *dir = realpath(r->init_dir, abs) ? abs : r->init_dir;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "checkpoint", dir);
    cJSON_AddNumberToObject(o, "step", (double)src.step);
    char *text = cJSON_PrintUnformatted(o);   /* NULL only when out of memory: no record, the run goes on */
    snprintf(r->ck.init_from, sizeof r->ck.init_from, "%s",
             text && strlen(text) < sizeof r->ck.init_from ? text : "");
    free(text);
    cJSON_Delete(o);
    mp_info("a new run from the weights of %s (its step %lld): step 0, fresh optimizer moments, schedule and "
            "data cursor", dir, (long long)src.step);
    return (mp_agreed){MP_OK};
}

/* Logs, when resuming: that there is nothing to do when the checkpoint is at or past --steps, and every
 * batch setting (--batch, --seq-len, --grad-accum) that differs from the checkpoint's (allowed: it
 * changes only the steps to come). Cannot fail. */
void mp_train_note_resume(const train_run *r) {
    const mp_train_config *c = &r->f.tc;
    const mp_run_state *st = &r->rs;
    if (!r->resume_dir[0]) return;
    if (st->step >= c->steps)
        mp_info("nothing to do: already at step %lld of %lld (resumed from %s); pass a larger --steps to train on",
                (long long)st->step, (long long)c->steps, r->resume_dir);
    char what[256] = "";
    size_t n = 0;
#define CHANGED(flag, saved, now)                                                                            \
    if ((saved) && (saved) != (now) && n < sizeof what)                                                     \
        n += (size_t)snprintf(what + n, sizeof what - n, "%s" flag " %d (was %d)", n ? ", " : "", now, saved)
    CHANGED("--batch", st->batch_size, c->batch_size);
    CHANGED("--seq-len", st->seq_len, c->seq_len);
    CHANGED("--grad-accum", st->grad_accum, c->grad_accum);
#undef CHANGED
    if (what[0])
        mp_info("resuming with a changed batch: %s in the checkpoint at step %lld; this changes only the steps "
                "from %lld on", what, (long long)st->step, (long long)st->step + 1);
}
