/*
 * cli/convert.h — the front end that `meshpoint reshard`, `init`, `export` and `import` share: they are
 * the one engine of reshard/ with different ends, and open their checkpoint source, lay out their
 * target, check the source's tensors against it and fill a sink's metadata the same way, here.
 * Each function returns an mp_code with its message in err; the commands decide the exit status.
 */
#ifndef MP_CONVERT_H
#define MP_CONVERT_H

#include <stddef.h>
#include "ckpt/ckpt.h"
#include "core/error.h"
#include "layers/llama_config.h"
#include "reshard/reshard.h"

/* Opens the checkpoint named by arg (a step directory, a checkpoint root or a run directory: its newest
 * complete checkpoint) as an engine source with scratch bytes of read buffer, and parses its model
 * config into *mc. *src_dir (malloc'd) and *src are set as far as they got, for the caller to free
 * also on failure. A checkpoint that is incomplete, unreadable or has no model_config is MP_EINPUT. */
mp_code mp_convert_open_ckpt(const char *arg, size_t scratch, char **src_dir, rs_source **src, llama_config *mc,
                             mp_err *err);

/* The target layout of model mc on a tp x dp mesh (model_only: no optimizer moments) into *boxes
 * (malloc'd) and *n; a model that does not fit the mesh is refused naming the mesh flags. */
mp_code mp_convert_target_layout(const llama_config *mc, int tp, int dp, int model_only, rs_box **boxes, int *n,
                                 mp_err *err);

/* Refuses (MP_EINPUT) a target box whose tensor the source checkpoint r lacks (naming --model-only when
 * an optimizer moment is missing) or holds with another global shape. */
mp_code mp_convert_check_tensors(ckpt_reader *r, const rs_box *b, int n, mp_err *err);

/* An mp_meta_put (cli/train_ckpt.h) into the sink ctx (an rs_sink *). */
mp_code mp_convert_put_meta(void *ctx, const char *key, const char *value, mp_err *err);

#endif
