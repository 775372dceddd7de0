/*
 * cli/convert.c — the conversion front end of reshard, init, export and import (cli/convert.h): their
 * options, flags, checks and the checkpoint write they share, written once, with the messages the
 * commands have always printed.
 */
#include "cli/convert.h"
#include "cli/memplan.h"
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/ckpt_common.h"
#include "core/fsutil.h"
#include "core/log.h"

void mp_convert_opts_default(mp_convert_opts *o, const char *out_metavar) {
    memset(o, 0, sizeof *o);
    o->out_metavar = out_metavar;
    o->max_memory = "256M";
    o->tp = o->dp = 1;
    o->ckpt_files = "rank";
    o->ranks_per_file = 1;
}

int mp_convert_flags(mp_convert_opts *o, unsigned which, const char *out_help, mp_arg *flags) {
    int k = 0, req = (which & MP_CONV_MESH_REQUIRED) != 0;
    if (which & MP_CONV_MESH) {
        flags[k++] = (mp_arg){"tp", MP_ARG_INT, &o->tp, "N", req ? "target tensor-parallel degree" : "tensor-parallel degree of the target layout",
                              .set = &o->set_tp, .dflt = req ? "required" : NULL};
        flags[k++] = (mp_arg){"dp", MP_ARG_INT, &o->dp, "N", req ? "target data-parallel degree" : "data-parallel degree of the target layout",
                              .set = &o->set_dp, .dflt = req ? "required" : NULL};
        flags[k++] = (mp_arg){"ckpt-files", MP_ARG_STRING, &o->ckpt_files, "F",
                              "rank files of the target: rank (one per rank) or N (ranks r..r+N-1 in rank r's file, "
                              "as train --ckpt-files N writes them; fewer files for a parallel file system)"};
    }
    flags[k++] = (mp_arg){"out", MP_ARG_STRING, &o->out, o->out_metavar, out_help};
    flags[k++] = (mp_arg){"max-memory", MP_ARG_STRING, &o->max_memory, "SIZE", "memory bound for data buffers (e.g. 256M, 1G)"};
    if (which & MP_CONV_PLAN) {
        flags[k++] = (mp_arg){"plan", MP_ARG_SWITCH, &o->plan, NULL, "dry run: print what each target rank reads and writes"};
        flags[k++] = (mp_arg){"json", MP_ARG_SWITCH, &o->json, NULL, "the --plan as JSON"};
    }
    flags[k++] = (mp_arg){"force", MP_ARG_SWITCH, &o->force, NULL,
                          "replace an existing --out (swapped only once the new one is complete)"};
    flags[k++] = (mp_arg){"no-verify", MP_ARG_SWITCH, &o->no_verify, NULL, "skip reading the result back"};
    if (which & MP_CONV_SP)
        flags[k++] = (mp_arg){"sp", MP_ARG_SWITCH, &o->sp, NULL, "accepted for symmetry with train; no effect on a checkpoint",
                              .set = &o->set_sp, .dflt = ""};
    if (which & MP_CONV_MODEL_ONLY)
        flags[k++] = (mp_arg){"model-only", MP_ARG_SWITCH, &o->model_only, NULL, "drop the optimizer moments (for eval and export)"};
    return k;
}

mp_code mp_convert_check_flags(mp_convert_opts *o, unsigned which, mp_err *e) {
    if ((which & MP_CONV_MESH_REQUIRED) && (!o->set_tp || !o->set_dp))
        return mp_err_set(e, MP_EINPUT, "--tp N and --dp N (the target mesh) are required");
    if (o->tp < 1 || o->dp < 1) return mp_err_set(e, MP_EINPUT, "--tp and --dp must be >= 1 (got %d, %d)", o->tp, o->dp);
    if (which & MP_CONV_MESH) {
        if (o->ckpt_files && !strcmp(o->ckpt_files, "node"))
            return mp_err_set(e, MP_EINPUT, "--ckpt-files node: an offline conversion knows no nodes; give the ranks "
                              "per file, N (the target job's ranks per node for its node files)");
        if (ckpt_files_parse(o->ckpt_files, &o->ranks_per_file, e)) return mp_err_wrap(e, "--ckpt-files");
    }
    if (!o->plan && (!o->out || !*o->out))
        return mp_err_set(e, MP_EINPUT, "--out %s is required%s", o->out_metavar,
                          which & MP_CONV_PLAN ? " (or --plan for a dry run)" : "");
    if (o->json && !o->plan) return mp_err_set(e, MP_EINPUT, "--json goes with --plan");
    return mp_args_parse_size(o->max_memory, "--max-memory", 4 * 1048576, &o->max_bytes, e);
}

void mp_convert_note_sp(const mp_runtime *rt, const mp_convert_opts *o) {
    if (o->set_sp && rt->rank == 0)
        fprintf(stderr, "%s: note: --sp%s is ignored: sequence parallelism is chosen when training, it does not "
                        "change what a checkpoint stores (a tp %d job may train with or without it)\n",
                mp_log_prog(), o->sp ? "" : " off", o->tp);
}

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

mp_code mp_convert_target_layout(const llama_config *mc, const mp_convert_opts *o, int model_only, rs_box **boxes,
                                 int *n, mp_err *err) {
    mp_code rc = rs_target_layout(mc, o->tp, o->dp, model_only, boxes, n, err);
    if (rc) return mp_err_wrap(err, "target mesh --tp %d --dp %d", o->tp, o->dp);
    rs_group_files(*boxes, *n, o->ranks_per_file);
    return MP_OK;
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

int64_t mp_convert_bytes(const rs_box *b, int n) {
    int64_t need = 0;
    for (int i = 0; i < n; i++) need += rs_box_bytes(&b[i]);
    return need;
}

/* "mesh" of a copied checkpoint, rewritten for tp x dp; the run's wall time so far (elapsed_s) carries over. */
static void mesh_meta(const char *old_text, int tp, int dp, char *buf, size_t cap) {
    cJSON *old = cJSON_Parse(old_text);
    const cJSON *el = old ? cJSON_GetObjectItemCaseSensitive(old, "elapsed_s") : NULL;
    int n = snprintf(buf, cap, "{\"world\": %d, \"tp\": %d, \"dp\": %d, \"sp\": %s", tp * dp, tp, dp, tp > 1 ? "true" : "false");
    if (cJSON_IsNumber(el)) n += snprintf(buf + n, cap - (size_t)n, ", \"elapsed_s\": %.17g", el->valuedouble);
    snprintf(buf + n, cap - (size_t)n, "}");
    cJSON_Delete(old);
}

/* Copies every metadata entry of the source checkpoint to the sink; only the mesh changes: "mesh" is
 * rewritten for tp x dp, and train_config's tp and dp fields follow it. */
static mp_code copy_meta(ckpt_reader *r, rs_sink *sink, int tp, int dp, mp_err *e) {
    for (int i = 0; i < ckpt_num_meta(r); i++) {
        const char *k = ckpt_meta_key(r, i), *v = ckpt_meta_value(r, i);
        mp_code rc = MP_OK;
        if (!strcmp(k, CKPT_FILES_META)) {
            continue;   /* the carried files' list: ckpt_save_file writes it with the files */
        } else if (!strcmp(k, "mesh")) {
            char buf[256];
            mesh_meta(v, tp, dp, buf, sizeof buf);
            rc = sink->meta(sink, k, buf, e);
        } else if (!strcmp(k, "train_config")) {
            cJSON *j = cJSON_Parse(v);
            if (!j) return mp_err_set(e, MP_ECHECK, "checkpoint %s: metadata train_config is not JSON", ckpt_reader_dir(r));
            if (cJSON_GetObjectItemCaseSensitive(j, "tp")) cJSON_ReplaceItemInObjectCaseSensitive(j, "tp", cJSON_CreateNumber(tp));
            if (cJSON_GetObjectItemCaseSensitive(j, "dp")) cJSON_ReplaceItemInObjectCaseSensitive(j, "dp", cJSON_CreateNumber(dp));
            char *txt = cJSON_PrintUnformatted(j);
            rc = sink->meta(sink, k, txt, e);
            free(txt);
            cJSON_Delete(j);
        } else {
            rc = sink->meta(sink, k, v, e);
        }
        MP_TRY(rc);
    }
    return MP_OK;
}

/* An mp_meta_put into the sink ctx (an rs_sink *). */
static mp_code put_meta(void *ctx, const char *key, const char *value, mp_err *err) {
    rs_sink *s = ctx;
    return s->meta(s, key, value, err);
}

/* The sink's metadata as meta says. */
static mp_code write_meta(const mp_convert_meta *meta, rs_sink *sink, int tp, int dp, mp_err *e) {
    if (meta->copy_from) return copy_meta(meta->copy_from, sink, tp, dp, e);
    mp_train_config tc = *meta->tc;
    tc.tp = tp;
    tc.dp = dp;
    mp_run_state st = {meta->step, {0, 0}, 0, 0};
    return mp_run_meta(put_meta, sink, meta->mc, &tc, tp, dp, &st, e);
}

/* The summary line: bytes read, needed, written and the largest band, summed (maxed) over the workers. */
static void print_stats(mp_runtime *rt, const char *cmd, const rs_stats *st, const mp_convert_opts *o, int files) {
    mp_comm *workers = rt->mesh.world_comm;
    float v[4] = {(float)(st->bytes_read / 1048576.0), (float)(st->bytes_needed / 1048576.0),
                  (float)(st->bytes_written / 1048576.0), (float)(st->largest_band / 1048576.0)};
    workers->ops->all_reduce(workers, v, 3, MP_F32, 0);
    workers->ops->all_reduce(workers, v + 3, 1, MP_F32, 1);
    if (rt->rank == 0)
        fprintf(stderr,
                "meshpoint %s: wrote %s for tp %d x dp %d (%d rank files, %.2f MiB) in %.2f s; read %.2f MiB for "
                "%.2f MiB needed (ratio %.3f); largest piece in memory %.2f MiB (--max-memory %.0f MiB)\n",
                cmd, o->out, o->tp, o->dp, files, v[2], st->seconds, v[0], v[1], v[1] > 0 ? v[0] / v[1] : 1.0,
                v[3], o->max_bytes / 1048576.0);
}

int mp_convert_write_ckpt(mp_runtime *rt, const char *cmd, rs_source *src, const char *src_dir, const char *src_what,
                          const rs_box *boxes, int n, const mp_convert_meta *meta, const mp_convert_opts *o) {
    mp_err err;
    mp_err_clear(&err);
    char what[64];
    snprintf(what, sizeof what, "%s: source", cmd);
    mp_code rc = mp_runtime_test_fail(rt, what, &err);
    mp_agreed agreed = mp_runtime_agree(rt, rc, rc ? &err : NULL);   /* another rank may have failed, and said so */
    if (agreed.code) return mp_runtime_exit_agreed(agreed);
    size_t band = o->max_bytes / 4;
    int world = o->tp * o->dp;
    if (o->plan) {
        int64_t rd = 0, wr = 0;
        if (rt->rank == 0) rc = rs_plan_print(src, boxes, n, world, o->ranks_per_file, band, o->json, stdout, &rd, &wr, &err);
        agreed = mp_runtime_agree(rt, rc, &err);
        return agreed.code ? mp_runtime_exit_agreed(agreed) : mp_exit_status(MP_OK);
    }
    /* the destination is checked on every rank; agreed, so that a rank that finds it unusable does not
     * leave the others waiting in the sink's collective start */
    int64_t need = mp_convert_bytes(boxes, n) + (meta->files ? mp_tokfiles_bytes(meta->files) : 0);
    rc = mp_ckpt_check_out(o->out, src_dir, src_what, o->force, need, &err);
    if ((agreed = mp_runtime_agree(rt, rc, &err)).code) return mp_runtime_exit_agreed(agreed);
    rs_sink *sink = NULL;
    int64_t step = meta->copy_from ? ckpt_reader_step(meta->copy_from) : meta->step;
    int version = mp_ckpt_format_version(meta->mc);
    if (rs_sink_ckpt(&sink, rt->mesh.world_comm, o->out, step, world, o->force, band, 0, version, &err))
        return mp_runtime_exit_alike(rt, mp_alike_of(err.code), &err);   /* agreed inside ckpt_save_begin_dir: alike */
    rc = write_meta(meta, sink, o->tp, o->dp, &err);
    if (!rc && meta->files) rc = mp_tokfiles_put(meta->files, sink, &err);   /* a failure fails the commit */
    rs_stats st;
    mp_err re;
    mp_code rrc = rs_run(src, sink, boxes, n, rt->rank, rt->world, &st, &re);   /* collective commit */
    sink->free(sink);
    if (rc == MP_OK) { rc = rrc; err = re; }
    if (rc) return mp_runtime_exit_alike(rt, mp_alike_of(rc), &err);   /* the commit agreed: the same error everywhere */
    print_stats(rt, cmd, &st, o, rs_num_files(boxes, n));
    int status = o->no_verify ? 0 : mp_runtime_verify_written(rt, o->out, o->max_bytes / 2);
    if (status == 0) mp_memplan_report(rt, (int64_t)o->max_bytes);
    return status;
}

mp_code mp_convert_open_dcp(const char *dir, const char *config, const char *names, llama_config *mc,
                            rs_source **src, rs_dcp_info *info, char **tokdir, mp_err *e) {
    if (!config)
        return mp_err_set(e, MP_EINPUT, "%s is a PyTorch DCP directory: --config CONFIG (the model's HF config.json) "
                          "is required", dir);
    if (!mp_fs_exists(config)) return mp_err_set(e, MP_EINPUT, "--config %s: no such file", config);
    mp_code rc = llama_config_load(config, mc, NULL, e);
    if (rc) return e->code = MP_EINPUT;
    char *slash = strrchr(config, '/');
    *tokdir = mp_strdup(slash ? config : ".");
    if (slash) (*tokdir)[slash - config] = '\0';
    return rs_source_dcp(src, dir, mc, names ? (rs_dcp_names)rs_dcp_names_parse(names) : RS_DCP_NAMES_AUTO, info, e);
}
