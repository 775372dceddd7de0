/*
 * reshard/sink.c — the engine's sink for meshpoint checkpoints: a directory-mode save (ckpt/:
 * DST.partial, renamed to DST at the commit; an existing DST is swapped out only then with --force)
 * whose boxes are fill boxes, pulled in row bands while each rank file is written, for the rank files
 * of a target job that this worker writes. Also the publication step of the directory sinks (HF, DCP).
 */
#include <stdlib.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "reshard/reshard.h"

static mp_code sk_add(rs_sink *s, int file_rank, const char *name, int ndim, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e) {
    return ckpt_save_add_fill(s->impl, file_rank, name, MP_F32, ndim, gshape, off, shape, fill, ctx, e);
}

static mp_code sk_meta(rs_sink *s, const char *key, const char *value, mp_err *e) {
    return ckpt_save_meta(s->impl, key, value, e);
}

static mp_code sk_file(rs_sink *s, const char *name, const void *data, size_t n, mp_err *e) {
    return ckpt_save_file(s->impl, name, data, n, e);
}

static mp_code sk_commit(rs_sink *s, mp_err *e) { return ckpt_save_commit(s->impl, NULL, e); }

static void sk_free(rs_sink *s) {
    if (!s) return;
    ckpt_save_free(s->impl);
    free(s);
}

mp_code rs_sink_ckpt(rs_sink **out, mp_comm *workers, const char *dir, int64_t step, int world_size, int replace,
                     size_t band_bytes, int zstd_level, int version, mp_err *e) {
    *out = NULL;
    ckpt_save_opts o = {.zstd_level = zstd_level, .world_size = world_size, .fill_bytes = band_bytes,
                        .fill_any_thread = 1, .format_version = version};   /* sources read on the writer's helper (reshard.h) */
    ckpt_save *cs = NULL;
    MP_TRY(ckpt_save_begin_dir(&cs, workers, dir, step, &o, replace, e));
    rs_sink *s = mp_xcalloc(sizeof *s);
    *s = (rs_sink){.kind = "checkpoint", .add = sk_add, .meta = sk_meta, .file = sk_file, .commit = sk_commit, .free = sk_free, .impl = cs};
    *out = s;
    return MP_OK;
}

mp_code rs_out_dir_check(const char *dir, int replace, mp_err *e) {
    if (mp_fs_exists(dir) && !replace)
        return mp_err_set(e, MP_EINPUT, "%s already exists (use --force to replace it)", dir);
    if (mp_fs_exists(dir) && !mp_fs_is_dir(dir)) return mp_err_set(e, MP_EINPUT, "%s exists and is not a directory", dir);
    return MP_OK;
}

mp_code rs_publish_dir(const char *partial, const char *dir, const char *what, mp_err *e) {
    mp_code rc = mp_fs_fsync_path(partial, 1, e);
    if (!rc && !mp_fs_exists(dir)) rc = mp_fs_rename_durable(partial, dir, NULL, e);
    else if (!rc) {
        char *old = NULL;
        rc = mp_fs_swap_dirs(partial, dir, NULL, &old, e);
        if (!rc && old) {
            mp_err re;
            if (mp_fs_remove_tree(old, &re)) mp_warn("%s: could not remove the replaced %s: %s", what, old, re.msg);
        }
        free(old);
    }
    return rc;
}
