/*
 * cli/convert.c — the conversion front end of reshard, init, export and import (cli/convert.h): the
 * checks and steps they share, written once, with the messages the commands have always printed.
 */
#include "cli/convert.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "cli/ckpt_common.h"

mp_code mp_convert_open_ckpt(const char *arg, size_t scratch, char **src_dir, rs_source **src, llama_config *mc,
                             mp_err *err) {
    MP_TRY(mp_ckpt_resolve(arg, src_dir, err));
    if (ckpt_check_complete(*src_dir, err)) {
        err->code = MP_EINPUT;
        return mp_err_wrap(err, "source %s is not a complete checkpoint", *src_dir);
    }
    if (rs_source_ckpt(src, *src_dir, scratch, err)) return err->code = MP_EINPUT;
    const char *mtext = ckpt_meta_get(rs_source_ckpt_reader(*src), "model_config");
    if (!mtext)
        return mp_err_set(err, MP_EINPUT, "checkpoint %s has no model_config: not a training checkpoint", *src_dir);
    char where[PATH_MAX + 32];
    snprintf(where, sizeof where, "%s: model_config", *src_dir);
    llama_config_default(mc);
    return llama_config_parse(mtext, where, mc, NULL, err);
}

mp_code mp_convert_target_layout(const llama_config *mc, int tp, int dp, int model_only, rs_box **boxes, int *n,
                                 mp_err *err) {
    mp_code rc = rs_target_layout(mc, tp, dp, model_only, boxes, n, err);
    if (rc) mp_err_wrap(err, "target mesh --tp %d --dp %d", tp, dp);
    return rc;
}

mp_code mp_convert_check_tensors(ckpt_reader *r, const rs_box *b, int n, mp_err *err) {
    for (int i = 0; i < n; i++) {
        int t = ckpt_tensor_find(r, b[i].name);
        if (t < 0)
            return mp_err_set(err, MP_EINPUT, "checkpoint %s has no tensor %s%s", ckpt_reader_dir(r), b[i].name,
                              strncmp(b[i].name, "optim/", 6) ? "" : " (a --model-only checkpoint? pass --model-only)");
        const ckpt_tensor_info *ti = ckpt_tensor_at(r, t);
        if (ti->ndim != b[i].ndim || ti->shape[0] != b[i].gshape[0] || (ti->ndim == 2 && ti->shape[1] != b[i].gshape[1]))
            return mp_err_set(err, MP_EINPUT, "checkpoint %s: tensor %s has another shape than its model_config implies",
                              ckpt_reader_dir(r), b[i].name);
    }
    return MP_OK;
}

mp_code mp_convert_put_meta(void *ctx, const char *key, const char *value, mp_err *err) {
    rs_sink *s = ctx;
    return s->meta(s, key, value, err);
}
