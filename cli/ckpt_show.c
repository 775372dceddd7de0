/*
 * cli/ckpt_show.c — `meshpoint ckpt show DIR [--tensors] [--boxes] [--stats] [--json]`: format, step,
 * mesh, configs, data cursor, LR schedule, optimizer; optionally the tensor table, the shard map and
 * per-tensor statistics; text or --json.
 *
 * --stats streams every tensor through the shared chunks (cli/ckpt_common.h), holding one chunk plus
 * the reader's own scratch for a partial read (about one chunk plus a band of edge tiles). JSON numbers of
 * the statistics read back exactly (json_exact); NaN/Inf become null.
 * Exit status: 0 ok, 2 bad usage or unreadable/missing input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/tokfiles.h"
#include "cli/progress.h"
#include "core/alloc.h"
#include "core/log.h"
#include "core/sched.h"
#include "reshard/dcp.h"

/* Bytes of tensor t in memory (elements x dtype size). */
static int64_t tensor_bytes(const ckpt_tensor_info *t) {
    return mp_ckpt_numel(t->ndim, t->shape) * (int64_t)mp_dtype_size(t->dtype);
}

/* Prints "k1 v1, k2 v2, ..." for the fields of object o (all of them when fields is NULL, else those
 * listed that are present). */
static void print_json_fields(FILE *f, const cJSON *o, const char *const *fields) {
    int first = 1;
    if (!fields) {
        for (const cJSON *it = o->child; it; it = it->next) {
            fprintf(f, "%s%s ", first ? "" : ", ", it->string);
            mp_ckpt_print_json_value(f, it);
            first = 0;
        }
        return;
    }
    for (int i = 0; fields[i]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, fields[i]);
        if (!it) continue;
        fprintf(f, "%s%s ", first ? "" : ", ", fields[i]);
        mp_ckpt_print_json_value(f, it);
        first = 0;
    }
}

static const char *const train_fields[] = {"steps", "batch_size", "grad_accum", "seq_len", "lr", "min_lr",
                                           "warmup_steps", "decay_steps", "weight_decay", "beta1", "beta2",
                                           "grad_clip", "seed", "train_data", NULL};

/* 1 if k is one of mp_ckpt_known_meta. */
static int is_known_meta(const char *k) {
    for (int i = 0; mp_ckpt_known_meta[i]; i++)
        if (!strcmp(mp_ckpt_known_meta[i], k)) return 1;
    return 0;
}

/* Prints one "label  fields" line for a JSON metadata entry (or its raw text / "(absent)"). */
static void show_meta_line(const ckpt_reader *r, const char *label, const char *key, const char *const *fields) {
    const char *text = ckpt_meta_get(r, key);
    printf("%-15s", label);
    if (!text) { printf("(absent)\n"); return; }
    cJSON *j = cJSON_Parse(text);
    if (cJSON_IsObject(j)) print_json_fields(stdout, j, fields);
    else if (j) mp_ckpt_print_json_value(stdout, j);
    else printf("%s (not JSON)", text);
    cJSON_Delete(j);
    printf("\n");
}

/* The LR the schedule of r gives for the next step, if lr_schedule parses. */
static int next_lr(const ckpt_reader *r, double *lr) {
    cJSON *j = mp_ckpt_meta_json(r, "lr_schedule");
    int64_t w, d, st;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "lr"), *b = cJSON_GetObjectItemCaseSensitive(j, "min_lr");
    int ok = cJSON_IsNumber(a) && cJSON_IsNumber(b) && mp_ckpt_json_int(j, "warmup_steps", &w) && mp_ckpt_json_int(j, "decay_steps", &d) &&
             mp_ckpt_json_int(j, "step", &st);
    if (ok) {
        mp_lr_schedule s = {a->valuedouble, b->valuedouble, w, d};
        *lr = mp_lr_at(&s, st);
    }
    cJSON_Delete(j);
    return ok;
}

/* Adds the JSON value of a metadata entry to o under key (parsed JSON, else the text). */
static void json_add_meta(cJSON *o, const ckpt_reader *r, const char *key) {
    const char *text = ckpt_meta_get(r, key);
    if (!text) { cJSON_AddNullToObject(o, key); return; }
    cJSON *j = cJSON_Parse(text);
    cJSON_AddItemToObject(o, key, j ? j : cJSON_CreateString(text));
}

/* A shape as a JSON array of numbers. */
static cJSON *json_shape(int ndim, const int64_t *s) {
    cJSON *a = cJSON_CreateArray();
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(a, cJSON_CreateNumber((double)s[d]));
    return a;
}

/* A JSON number that reads back as exactly v (cJSON's own printing may drop the last ulp), or null for
 * NaN/Inf. */
static cJSON *json_exact(double v) {
    if (!isfinite(v)) return cJSON_CreateNull();
    char b[64];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(b, sizeof b, "%.*g", prec, v);
        if (strtod(b, NULL) == v) break;
    }
    return cJSON_CreateRaw(b);
}

/* The statistics of one tensor as a JSON object (NaN/Inf as null). */
static cJSON *json_stats(const mp_ckpt_tstats *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "min", json_exact(s->n ? s->min : NAN));
    cJSON_AddItemToObject(o, "max", json_exact(s->n ? s->max : NAN));
    cJSON_AddItemToObject(o, "mean", json_exact(s->mean));
    cJSON_AddItemToObject(o, "std", json_exact(mp_ckpt_stats_std(s)));
    cJSON_AddItemToObject(o, "l2", json_exact(sqrt(s->sumsq)));
    cJSON_AddNumberToObject(o, "finite", (double)s->n);
    cJSON_AddNumberToObject(o, "nonfinite", (double)s->nonfinite);
    return o;
}

/* What `ckpt show` prints, from its flags. */
typedef struct show_opts {
    int tensors, boxes, stats, json;
} show_opts;

/* The facts about an open checkpoint that both output forms print. */
typedef struct show_facts {
    const char *dir;
    int nt, nfiles;
    int64_t total, elems;         /* tensor bytes and elements */
    mp_ckpt_tstats *st;           /* [nt] with --stats, else NULL */
    llama_config mc;
    mp_err cerr;                  /* why model_config does not parse, when it does not */
    int mc_ok, have_lr;
    double lr_next;
} show_facts;

/* The rank files of r: one per writing rank (rank_%05d.h5), so the distinct ranks among the boxes. */
static int count_rank_files(const ckpt_reader *r) {
    int maxr = 0, nfiles = 0;   /* the reader checks ranks >= 0, not that they are < world_size */
    for (int j = 0; j < ckpt_num_boxes(r); j++)
        if (ckpt_box_at(r, j)->rank > maxr) maxr = ckpt_box_at(r, j)->rank;
    char *seen = mp_xcalloc((size_t)maxr + 1);
    for (int j = 0; j < ckpt_num_boxes(r); j++) {
        int rk = ckpt_box_at(r, j)->rank;
        if (rk >= 0 && !seen[rk]) { seen[rk] = 1; nfiles++; }
    }
    free(seen);
    return nfiles;
}

/* Streams every tensor of r through the shared chunks into *out ([nt], malloc'd even when the read
 * fails), with a progress bar over the tensor bytes. MP_OK, or the reader's error wrapped with the
 * tensor's name. */
static mp_code collect_stats(ckpt_reader *r, int64_t total, mp_ckpt_tstats **out, mp_err *err) {
    int nt = ckpt_num_tensors(r);
    int64_t budget = mp_ckpt_chunk_bytes();
    void *buf = mp_xmalloc((size_t)budget);
    mp_ckpt_tstats *st = mp_xcalloc(sizeof *st * (size_t)(nt ? nt : 1));
    mp_progress *pg = mp_progress_start("ckpt show --stats", total, MP_PROGRESS_BYTES);
    ckpt_reader_set_progress(r, mp_progress_ckpt, pg);   /* per chunk read */
    mp_code rc = MP_OK;
    for (int i = 0; i < nt && !rc; i++)
        if ((rc = mp_ckpt_tensor_stats(r, ckpt_tensor_at(r, i), buf, budget, &st[i], err)))
            mp_err_wrap(err, "reading %s for --stats", ckpt_tensor_at(r, i)->name);
    ckpt_reader_set_progress(r, NULL, NULL);
    mp_progress_finish(pg);
    free(buf);
    *out = st;
    return rc;
}

/* The JSON object of one tensor: name, dtype, shape, boxes, bytes; its shard map with --boxes, its
 * statistics (st, may be NULL) with --stats. */
static cJSON *json_tensor(const ckpt_reader *r, int i, const show_opts *o, const mp_ckpt_tstats *st) {
    const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
    cJSON *jt = cJSON_CreateObject();
    cJSON_AddStringToObject(jt, "name", t->name);
    cJSON_AddStringToObject(jt, "dtype", mp_dtype_name(t->dtype));
    cJSON_AddItemToObject(jt, "shape", json_shape(t->ndim, t->shape));
    cJSON_AddNumberToObject(jt, "nboxes", t->nboxes);
    cJSON_AddNumberToObject(jt, "bytes", (double)tensor_bytes(t));
    if (o->boxes) {
        cJSON *jb = cJSON_AddArrayToObject(jt, "boxes");
        for (int j = t->box_first; j < t->box_first + t->nboxes; j++) {
            const ckpt_box_info *b = ckpt_box_at(r, j);
            cJSON *x = cJSON_CreateObject();
            cJSON_AddNumberToObject(x, "rank", b->rank);
            cJSON_AddStringToObject(x, "file", b->file);
            cJSON_AddStringToObject(x, "dataset", b->dataset);
            cJSON_AddItemToObject(x, "offset", json_shape(t->ndim, b->offset));
            cJSON_AddItemToObject(x, "shape", json_shape(t->ndim, b->shape));
            cJSON_AddItemToArray(jb, x);
        }
    }
    if (o->stats && st) cJSON_AddItemToObject(jt, "stats", json_stats(st));
    return jt;
}

/* The model's family and what it adds, as `ckpt show` prints them: the family's model_type and
 * architecture, head_dim, the sliding window (JSON null: none) and the first layer it applies to, the
 * q/k/v biases and the q/k norm. */
static cJSON *json_model(const llama_config *mc) {
    const llama_family_info *fi = llama_family_get(mc->family);
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "family", fi->model_type);
    cJSON_AddStringToObject(m, "architecture", fi->architecture);
    cJSON_AddNumberToObject(m, "head_dim", llama_head_dim(mc));
    if (mc->sliding_window) {
        cJSON_AddNumberToObject(m, "sliding_window", mc->sliding_window);
        cJSON_AddNumberToObject(m, "first_sliding_layer", mc->first_sliding_layer);
    } else {
        cJSON_AddNullToObject(m, "sliding_window");
        cJSON_AddNullToObject(m, "first_sliding_layer");
    }
    cJSON_AddBoolToObject(m, "qkv_bias", mc->qkv_bias);
    cJSON_AddBoolToObject(m, "qk_norm", mc->qk_norm);
    return m;
}

/* Prints the whole of `ckpt show --json` to stdout. */
static void show_json(const ckpt_reader *r, const show_opts *o, const show_facts *f) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "checkpoint", f->dir);
    cJSON_AddStringToObject(j, "format", CKPT_FORMAT_NAME);
    cJSON_AddNumberToObject(j, "format_version", ckpt_reader_version(r));
    cJSON_AddNumberToObject(j, "step", (double)ckpt_reader_step(r));
    cJSON_AddNumberToObject(j, "world_size", ckpt_reader_world(r));
    cJSON_AddNumberToObject(j, "rank_files", f->nfiles);
    json_add_meta(j, r, "mesh");
    json_add_meta(j, r, "model_config");
    if (f->mc_ok) cJSON_AddNumberToObject(j, "parameters", (double)llama_config_num_params(&f->mc));
    if (f->mc_ok) cJSON_AddItemToObject(j, "model", json_model(&f->mc));
    for (int i = 1; mp_ckpt_known_meta[i]; i++)
        if (strcmp(mp_ckpt_known_meta[i], "mesh") && strcmp(mp_ckpt_known_meta[i], "step")) json_add_meta(j, r, mp_ckpt_known_meta[i]);
    if (f->have_lr) cJSON_AddItemToObject(j, "next_lr", json_exact(f->lr_next));
    char tb[512];
    mp_tokfiles_describe(r, tb, sizeof tb);
    cJSON_AddStringToObject(j, "tokenizer", tb);   /* as the text line; the files' list is other_metadata.files */
    cJSON *other = cJSON_AddObjectToObject(j, "other_metadata");
    for (int i = 0; i < ckpt_num_meta(r); i++)
        if (!is_known_meta(ckpt_meta_key(r, i))) cJSON_AddStringToObject(other, ckpt_meta_key(r, i), ckpt_meta_value(r, i));
    cJSON_AddNumberToObject(j, "num_tensors", f->nt);
    cJSON_AddNumberToObject(j, "num_boxes", ckpt_num_boxes(r));
    cJSON_AddNumberToObject(j, "tensor_bytes", (double)f->total);
    cJSON_AddBoolToObject(j, "views_pending", ckpt_views_pending(r));
    if (o->tensors || o->boxes || o->stats) {
        cJSON *arr = cJSON_AddArrayToObject(j, "tensors");
        for (int i = 0; i < f->nt; i++) cJSON_AddItemToArray(arr, json_tensor(r, i, o, f->st ? &f->st[i] : NULL));
    }
    char *s = cJSON_Print(j);
    puts(s);
    free(s);
    cJSON_Delete(j);
}

/* Text: the header lines (checkpoint, format, step, mesh, files, tensors). */
static void show_text_header(const ckpt_reader *r, const show_facts *f) {
    char mb[128], hb[32];
    printf("%-15s%s\n", "checkpoint", f->dir);
    printf("%-15s%s v%d\n", "format", CKPT_FORMAT_NAME, ckpt_reader_version(r));
    printf("%-15s%lld\n", "step", (long long)ckpt_reader_step(r));
    printf("%-15s%s", "mesh", mp_ckpt_mesh_str(mb, sizeof mb, r));
    cJSON *m = mp_ckpt_meta_json(r, "mesh");
    const cJSON *sp = cJSON_GetObjectItemCaseSensitive(m, "sp");
    printf(" (world %d%s)\n", ckpt_reader_world(r), cJSON_IsBool(sp) ? (cJSON_IsTrue(sp) ? ", sp on" : ", sp off") : "");
    cJSON_Delete(m);
    printf("%-15s%d rank file%s, %d box%s\n", "saved as", f->nfiles, f->nfiles == 1 ? "" : "s", ckpt_num_boxes(r),
           ckpt_num_boxes(r) == 1 ? "" : "es");
    printf("%-15s%d (%lld elements, %s)\n", "tensors", f->nt, (long long)f->elems, mp_ckpt_human(hb, sizeof hb, f->total));
    if (ckpt_views_pending(r))   /* the checkpoint is complete; only h5py's /view datasets wait for view.h5 */
        printf("%-15spending: no view.h5 yet (the next train --resume writes it, or meshpoint ckpt repair-views %s)\n",
               "views", f->dir);
}

/* Text: the model config block. */
static void show_text_model(const ckpt_reader *r, const show_facts *f) {
    const llama_config *mc = &f->mc;
    printf("model config\n");
    if (f->mc_ok) {
        const llama_family_info *fi = llama_family_get(mc->family);
        printf("  %-26s%s (%s)\n", "family", fi->model_type, fi->architecture);
        printf("  %-26s%d\n", "hidden_size", mc->hidden_size);
        printf("  %-26s%d\n", "intermediate_size", mc->intermediate_size);
        printf("  %-26s%d\n", "num_hidden_layers", mc->num_hidden_layers);
        printf("  %-26s%d\n", "num_attention_heads", mc->num_attention_heads);
        printf("  %-26s%d\n", "num_key_value_heads", mc->num_key_value_heads);
        printf("  %-26s%d\n", "head_dim", llama_head_dim(mc));
        if (mc->sliding_window)
            printf("  %-26s%d from layer %d\n", "sliding_window", mc->sliding_window, mc->first_sliding_layer);
        else
            printf("  %-26snone\n", "sliding_window");
        printf("  %-26s%s\n", "q/k/v biases", mc->qkv_bias ? "yes" : "no");
        printf("  %-26s%s\n", "q/k norm", mc->qk_norm ? "yes" : "no");
        printf("  %-26s%d\n", "vocab_size", mc->vocab_size);
        printf("  %-26s%d\n", "max_position_embeddings", mc->max_position_embeddings);
        printf("  %-26s%g\n", "rms_norm_eps", mc->rms_norm_eps);
        printf("  %-26s%g\n", "rope_theta", mc->rope_theta);
        char rs[256];
        llama_rope_scaling_describe(&mc->rope_scaling, rs, sizeof rs);
        printf("  %-26s%s\n", "rope_scaling", rs);
        printf("  %-26s%s\n", "tie_word_embeddings", mc->tie_word_embeddings ? "true" : "false");
        printf("  %-26s%g\n", "initializer_range", mc->initializer_range);
        printf("  %-26s%lld\n", "parameters", (long long)llama_config_num_params(mc));
    } else if (ckpt_meta_get(r, "model_config")) {
        printf("  (does not parse: %s)\n  %s\n", f->cerr.msg, ckpt_meta_get(r, "model_config"));
    } else {
        printf("  (absent)\n");
    }
}

/* Text: the training metadata lines (train config, data cursor, LR schedule, optimizer, rng, others). */
static void show_text_meta(const ckpt_reader *r, const show_facts *f) {
    char nb[64];
    show_meta_line(r, "train config", "train_config", train_fields);
    show_meta_line(r, "data cursor", "data_cursor", NULL);
    show_meta_line(r, "lr schedule", "lr_schedule", NULL);
    if (f->have_lr) printf("%-15snext step's lr %s\n", "", mp_ckpt_num_str(nb, sizeof nb, f->lr_next));
    show_meta_line(r, "optimizer", "optimizer", NULL);
    show_meta_line(r, "rng", "rng", NULL);
    char tb[512];
    mp_tokfiles_describe(r, tb, sizeof tb);
    printf("%-15s%s\n", "tokenizer", tb);
    for (int i = 0; i < ckpt_num_meta(r); i++)
        if (!is_known_meta(ckpt_meta_key(r, i)) && strcmp(ckpt_meta_key(r, i), CKPT_FILES_META))
            printf("%-15s%s: %s\n", "metadata", ckpt_meta_key(r, i), ckpt_meta_value(r, i));
}

/* Text: the tensor table (--tensors columns and/or --stats columns). */
static void show_text_tensors(const ckpt_reader *r, const show_opts *o, const show_facts *f) {
    char sb[256];
    int w = 4;
    for (int i = 0; i < f->nt; i++) {
        int l = (int)strlen(ckpt_tensor_at(r, i)->name);
        if (l > w) w = l;
    }
    printf("\n  %-*s", w, "NAME");
    if (o->tensors) printf("  %-5s %-20s %5s %12s", "DTYPE", "SHAPE", "BOXES", "BYTES");
    if (o->stats) printf("  %13s %13s %13s %13s %13s", "MIN", "MAX", "MEAN", "STD", "L2");
    printf("\n");
    for (int i = 0; i < f->nt; i++) {
        const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
        printf("  %-*s", w, t->name);
        if (o->tensors)
            printf("  %-5s %-20s %5d %12lld", mp_dtype_name(t->dtype), mp_ckpt_shape_str(sb, sizeof sb, t->ndim, t->shape),
                   t->nboxes, (long long)tensor_bytes(t));
        if (o->stats) {
            const mp_ckpt_tstats *s = &f->st[i];
            printf("  %13.6g %13.6g %13.6g %13.6g %13.6g", s->n ? s->min : NAN, s->n ? s->max : NAN, s->mean,
                   mp_ckpt_stats_std(s), sqrt(s->sumsq));
            if (s->nonfinite) printf("  (%lld NaN/Inf)", (long long)s->nonfinite);
        }
        printf("\n");
    }
    printf("  total: %d tensors, %lld bytes\n", f->nt, (long long)f->total);
}

/* Text: the shard map (every saved box of every tensor). */
static void show_text_boxes(const ckpt_reader *r, const show_facts *f) {
    char sb[256], ob[128];
    printf("\nshard map (%d boxes)\n", ckpt_num_boxes(r));
    for (int i = 0; i < f->nt; i++) {
        const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
        printf("  %s %s\n", t->name, mp_ckpt_shape_str(sb, sizeof sb, t->ndim, t->shape));
        for (int j = t->box_first; j < t->box_first + t->nboxes; j++) {
            const ckpt_box_info *b = ckpt_box_at(r, j);
            printf("    rank %-4d %-14s offset %-14s shape %s\n", b->rank, b->file,
                   mp_ckpt_shape_str(ob, sizeof ob, t->ndim, b->offset), mp_ckpt_shape_str(sb, sizeof sb, t->ndim, b->shape));
        }
    }
}

/* Parses the flags of `ckpt show` into *o; returns -1 to go on, else the exit status (help printed,
 * or a usage error reported). */
static int show_parse(int argc, char **argv, show_opts *o) {
    const mp_arg flags[] = {
        {"tensors", MP_ARG_SWITCH, &o->tensors, NULL, "every tensor: name, dtype, shape, boxes, bytes"},
        {"boxes", MP_ARG_SWITCH, &o->boxes, NULL, "the shard map: every saved box (rank file, offset, shape)"},
        {"stats", MP_ARG_SWITCH, &o->stats, NULL, "per tensor min/max/mean/std/L2 norm (reads every tensor in bounded chunks)"},
        {"json", MP_ARG_SWITCH, &o->json, NULL, "print JSON"},
        {0}};
    return mp_ckpt_cli_start(flags, argc, argv, 1, "one checkpoint DIR",
                             "meshpoint ckpt show DIR [--tensors] [--boxes] [--stats] [--json]",
                             "Prints what a checkpoint holds: format, step, mesh, model config, training config, data "
                             "cursor, LR schedule, optimizer state. DIR is a checkpoint directory, or a checkpoint root "
                             "or run directory (then its newest complete checkpoint). Statistics are over the finite "
                             "elements (std is the population std); NaN/Inf are counted. On a terminal, --stats of a "
                             "large checkpoint shows a progress bar on stderr.");
}

/* `meshpoint ckpt show`: see the top of this file. Returns the exit status. */
int mp_ckpt_show(int argc, char **argv) {
    show_opts o = {0};
    int status = show_parse(argc, argv, &o);
    if (status >= 0) return status;
    if (dcp_is_dir(argv[0])) return mp_ckpt_dcp_show(argv[0], o.json);   /* a PyTorch DCP directory */
    status = mp_exit_status(MP_OK);
    char *dir = NULL;
    ckpt_reader *r = NULL;
    mp_err err;
    mp_err_clear(&err);
    if (mp_ckpt_resolve(argv[0], &dir, &err) || ckpt_open(&r, dir, &err)) {
        mp_log_fail("%s", err.msg);
        free(dir);
        return mp_exit_status(MP_EINPUT);
    }
    show_facts f = {.dir = dir, .nt = ckpt_num_tensors(r)};
    for (int i = 0; i < f.nt; i++) {
        f.total += tensor_bytes(ckpt_tensor_at(r, i));
        f.elems += mp_ckpt_numel(ckpt_tensor_at(r, i)->ndim, ckpt_tensor_at(r, i)->shape);
    }
    f.nfiles = count_rank_files(r);
    if (o.stats && collect_stats(r, f.total, &f.st, &err)) {
        mp_log_fail("%s", err.msg);
        status = mp_exit_status(MP_EINPUT);
        goto out;
    }
    f.mc_ok = mp_ckpt_parse_model_config(r, &f.mc, &f.cerr) == MP_OK;
    f.have_lr = next_lr(r, &f.lr_next);
    if (o.json) {
        show_json(r, &o, &f);
        goto out;
    }
    show_text_header(r, &f);
    show_text_model(r, &f);
    show_text_meta(r, &f);
    if (o.tensors || o.stats) show_text_tensors(r, &o, &f);
    if (o.boxes) show_text_boxes(r, &f);
out:
    free(f.st);
    ckpt_close(r);
    free(dir);
    return status;
}
