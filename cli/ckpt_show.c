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
#include "core/alloc.h"
#include "core/sched.h"

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

/* `meshpoint ckpt show`: see the top of this file. Returns the exit status. */
int mp_ckpt_show(int argc, char **argv) {
    int tensors = 0, boxes = 0, stats = 0, json = 0, npos = 0, help = 0;
    const mp_arg flags[] = {
        {"tensors", MP_ARG_SWITCH, &tensors, NULL, "every tensor: name, dtype, shape, boxes, bytes"},
        {"boxes", MP_ARG_SWITCH, &boxes, NULL, "the shard map: every saved box (rank file, offset, shape)"},
        {"stats", MP_ARG_SWITCH, &stats, NULL, "per tensor min/max/mean/std/L2 norm (reads every tensor in bounded chunks)"},
        {"json", MP_ARG_SWITCH, &json, NULL, "print JSON"},
        {0}};
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) {
        fprintf(stderr, "meshpoint ckpt show: %s\n", err.msg);
        return MP_CKPT_ST_USAGE;
    }
    if (help) {
        mp_args_help(stdout, "meshpoint ckpt show DIR [--tensors] [--boxes] [--stats] [--json]",
                     "Prints what a checkpoint holds: format, step, mesh, model config, training config, data "
                     "cursor, LR schedule, optimizer state. DIR is a checkpoint directory, or a checkpoint root "
                     "or run directory (then its newest complete checkpoint). Statistics are over the finite "
                     "elements (std is the population std); NaN/Inf are counted.",
                     flags);
        return MP_CKPT_ST_OK;
    }
    if (npos != 1) {
        fprintf(stderr, "meshpoint ckpt show: expected one checkpoint DIR (see --help)\n");
        return MP_CKPT_ST_USAGE;
    }
    char *dir = NULL;
    ckpt_reader *r = NULL;
    if (mp_ckpt_resolve(argv[0], &dir, &err) || ckpt_open(&r, dir, &err)) {
        fprintf(stderr, "meshpoint ckpt show: %s\n", err.msg);
        free(dir);
        return MP_CKPT_ST_USAGE;
    }
    int nt = ckpt_num_tensors(r), status = MP_CKPT_ST_OK;
    int64_t total = 0, elems = 0;
    for (int i = 0; i < nt; i++) {
        total += tensor_bytes(ckpt_tensor_at(r, i));
        elems += mp_ckpt_numel(ckpt_tensor_at(r, i)->ndim, ckpt_tensor_at(r, i)->shape);
    }
    /* rank files: one per writing rank (rank_%05d.h5), so the distinct ranks among the boxes */
    int nfiles = 0;
    {
        int maxr = 0;   /* the reader checks ranks >= 0, not that they are < world_size */
        for (int j = 0; j < ckpt_num_boxes(r); j++)
            if (ckpt_box_at(r, j)->rank > maxr) maxr = ckpt_box_at(r, j)->rank;
        char *seen = mp_xcalloc((size_t)maxr + 1);
        for (int j = 0; j < ckpt_num_boxes(r); j++) {
            int rk = ckpt_box_at(r, j)->rank;
            if (rk >= 0 && !seen[rk]) { seen[rk] = 1; nfiles++; }
        }
        free(seen);
    }
    mp_ckpt_tstats *st = NULL;
    if (stats) {
        int64_t budget = mp_ckpt_chunk_bytes();
        void *buf = mp_xmalloc((size_t)budget);
        st = mp_xcalloc(sizeof *st * (size_t)(nt ? nt : 1));
        for (int i = 0; i < nt && !status; i++)
            if (mp_ckpt_tensor_stats(r, ckpt_tensor_at(r, i), buf, budget, &st[i], &err)) {
                fprintf(stderr, "meshpoint ckpt show: reading %s for --stats: %s\n", ckpt_tensor_at(r, i)->name, err.msg);
                status = MP_CKPT_ST_USAGE;
            }
        free(buf);
    }
    mp_model_config mc;
    mp_err cerr;
    int mc_ok = mp_ckpt_parse_model_config(r, &mc, &cerr) == MP_OK;
    double lr_next = 0;
    int have_lr = next_lr(r, &lr_next);
    char sb[256], hb[32], mb[128], nb[64];
    if (status) goto out;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "checkpoint", dir);
        cJSON_AddStringToObject(o, "format", CKPT_FORMAT_NAME);
        cJSON_AddNumberToObject(o, "format_version", ckpt_reader_version(r));
        cJSON_AddNumberToObject(o, "step", (double)ckpt_reader_step(r));
        cJSON_AddNumberToObject(o, "world_size", ckpt_reader_world(r));
        cJSON_AddNumberToObject(o, "rank_files", nfiles);
        json_add_meta(o, r, "mesh");
        json_add_meta(o, r, "model_config");
        if (mc_ok) cJSON_AddNumberToObject(o, "parameters", (double)mp_model_num_params(&mc));
        for (int i = 1; mp_ckpt_known_meta[i]; i++)
            if (strcmp(mp_ckpt_known_meta[i], "mesh") && strcmp(mp_ckpt_known_meta[i], "step")) json_add_meta(o, r, mp_ckpt_known_meta[i]);
        if (have_lr) cJSON_AddItemToObject(o, "next_lr", json_exact(lr_next));
        cJSON *other = cJSON_AddObjectToObject(o, "other_metadata");
        for (int i = 0; i < ckpt_num_meta(r); i++)
            if (!is_known_meta(ckpt_meta_key(r, i))) cJSON_AddStringToObject(other, ckpt_meta_key(r, i), ckpt_meta_value(r, i));
        cJSON_AddNumberToObject(o, "num_tensors", nt);
        cJSON_AddNumberToObject(o, "num_boxes", ckpt_num_boxes(r));
        cJSON_AddNumberToObject(o, "tensor_bytes", (double)total);
        if (tensors || boxes || stats) {
            cJSON *arr = cJSON_AddArrayToObject(o, "tensors");
            for (int i = 0; i < nt; i++) {
                const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
                cJSON *jt = cJSON_CreateObject();
                cJSON_AddStringToObject(jt, "name", t->name);
                cJSON_AddStringToObject(jt, "dtype", mp_dtype_name(t->dtype));
                cJSON_AddItemToObject(jt, "shape", json_shape(t->ndim, t->shape));
                cJSON_AddNumberToObject(jt, "nboxes", t->nboxes);
                cJSON_AddNumberToObject(jt, "bytes", (double)tensor_bytes(t));
                if (boxes) {
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
                if (stats) cJSON_AddItemToObject(jt, "stats", json_stats(&st[i]));
                cJSON_AddItemToArray(arr, jt);
            }
        }
        char *s = cJSON_Print(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
        goto out;
    }
    printf("%-15s%s\n", "checkpoint", dir);
    printf("%-15s%s v%d\n", "format", CKPT_FORMAT_NAME, ckpt_reader_version(r));
    printf("%-15s%lld\n", "step", (long long)ckpt_reader_step(r));
    printf("%-15s%s", "mesh", mp_ckpt_mesh_str(mb, sizeof mb, r));
    {
        cJSON *m = mp_ckpt_meta_json(r, "mesh");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(m, "sp");
        printf(" (world %d%s)\n", ckpt_reader_world(r), cJSON_IsBool(sp) ? (cJSON_IsTrue(sp) ? ", sp on" : ", sp off") : "");
        cJSON_Delete(m);
    }
    printf("%-15s%d rank file%s, %d box%s\n", "saved as", nfiles, nfiles == 1 ? "" : "s", ckpt_num_boxes(r),
           ckpt_num_boxes(r) == 1 ? "" : "es");
    printf("%-15s%d (%lld elements, %s)\n", "tensors", nt, (long long)elems, mp_ckpt_human(hb, sizeof hb, total));
    printf("model config\n");
    if (mc_ok) {
        printf("  %-26s%d\n", "hidden_size", mc.hidden_size);
        printf("  %-26s%d\n", "intermediate_size", mc.intermediate_size);
        printf("  %-26s%d\n", "num_hidden_layers", mc.num_hidden_layers);
        printf("  %-26s%d\n", "num_attention_heads", mc.num_attention_heads);
        printf("  %-26s%d\n", "num_key_value_heads", mc.num_key_value_heads);
        printf("  %-26s%d\n", "head_dim", mp_head_dim(&mc));
        printf("  %-26s%d\n", "vocab_size", mc.vocab_size);
        printf("  %-26s%d\n", "max_position_embeddings", mc.max_position_embeddings);
        printf("  %-26s%g\n", "rms_norm_eps", mc.rms_norm_eps);
        printf("  %-26s%g\n", "rope_theta", mc.rope_theta);
        printf("  %-26s%s\n", "tie_word_embeddings", mc.tie_word_embeddings ? "true" : "false");
        printf("  %-26s%g\n", "initializer_range", mc.initializer_range);
        printf("  %-26s%lld\n", "parameters", (long long)mp_model_num_params(&mc));
    } else if (ckpt_meta_get(r, "model_config")) {
        printf("  (does not parse: %s)\n  %s\n", cerr.msg, ckpt_meta_get(r, "model_config"));
    } else {
        printf("  (absent)\n");
    }
    show_meta_line(r, "train config", "train_config", train_fields);
    show_meta_line(r, "data cursor", "data_cursor", NULL);
    show_meta_line(r, "lr schedule", "lr_schedule", NULL);
    if (have_lr) printf("%-15snext step's lr %s\n", "", mp_ckpt_num_str(nb, sizeof nb, lr_next));
    show_meta_line(r, "optimizer", "optimizer", NULL);
    show_meta_line(r, "rng", "rng", NULL);
    for (int i = 0; i < ckpt_num_meta(r); i++)
        if (!is_known_meta(ckpt_meta_key(r, i)))
            printf("%-15s%s: %s\n", "metadata", ckpt_meta_key(r, i), ckpt_meta_value(r, i));
    if (tensors || stats) {
        int w = 4;
        for (int i = 0; i < nt; i++) {
            int l = (int)strlen(ckpt_tensor_at(r, i)->name);
            if (l > w) w = l;
        }
        printf("\n  %-*s", w, "NAME");
        if (tensors) printf("  %-5s %-20s %5s %12s", "DTYPE", "SHAPE", "BOXES", "BYTES");
        if (stats) printf("  %13s %13s %13s %13s %13s", "MIN", "MAX", "MEAN", "STD", "L2");
        printf("\n");
        for (int i = 0; i < nt; i++) {
            const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
            printf("  %-*s", w, t->name);
            if (tensors)
                printf("  %-5s %-20s %5d %12lld", mp_dtype_name(t->dtype), mp_ckpt_shape_str(sb, sizeof sb, t->ndim, t->shape),
                       t->nboxes, (long long)tensor_bytes(t));
            if (stats) {
                const mp_ckpt_tstats *s = &st[i];
                printf("  %13.6g %13.6g %13.6g %13.6g %13.6g", s->n ? s->min : NAN, s->n ? s->max : NAN, s->mean,
                       mp_ckpt_stats_std(s), sqrt(s->sumsq));
                if (s->nonfinite) printf("  (%lld NaN/Inf)", (long long)s->nonfinite);
            }
            printf("\n");
        }
        printf("  total: %d tensors, %lld bytes\n", nt, (long long)total);
    }
    if (boxes) {
        printf("\nshard map (%d boxes)\n", ckpt_num_boxes(r));
        for (int i = 0; i < nt; i++) {
            const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
            printf("  %s %s\n", t->name, mp_ckpt_shape_str(sb, sizeof sb, t->ndim, t->shape));
            for (int j = t->box_first; j < t->box_first + t->nboxes; j++) {
                const ckpt_box_info *b = ckpt_box_at(r, j);
                char ob[128];
                printf("    rank %-4d %-14s offset %-14s shape %s\n", b->rank, b->file,
                       mp_ckpt_shape_str(ob, sizeof ob, t->ndim, b->offset), mp_ckpt_shape_str(sb, sizeof sb, t->ndim, b->shape));
            }
        }
    }
out:
    free(st);
    ckpt_close(r);
    free(dir);
    return status;
}
