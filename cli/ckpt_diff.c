/*
 * cli/ckpt_diff.c — `meshpoint ckpt diff A B [--atol X] [--rtol Y] [--all]`: two checkpoints tensor by
 * tensor, whatever meshes wrote them; metadata differences.
 *
 * - Both checkpoints are read through the same chunks (cli/ckpt_common.h), so different box layouts
 *   are compared chunk against identical chunk, in bounded memory (2 x 16 MiB plus the reader's scratch).
 * - The relative difference is tensor-scaled: max|a-b| / max|b| (as tests/testutil.c's tu_max_rel).
 *   Element-wise |a-b|/|b| is useless across meshes: an element whose gradient is ~0 can flip sign under
 *   a different reduction order, so its Adam update flips too. A tensor matches when it is bitwise
 *   equal, or (only when a tolerance was given) max|a-b| <= atol + rtol * max|b| with NaNs in the same
 *   places.
 * - Metadata that describes the layout (mesh; train_config's tp, dp, sp, reshard_after_forward) or
 *   bookkeeping (log_every, eval_every, eval_batches, val_data) is reported as a note and does not make
 *   checkpoints differ.
 * - --json prints the same findings as one JSON object on stdout (fields in --help); the exit status is
 *   the same, and a usage error (exit 2) prints no JSON. On a terminal a progress bar over the bytes read
 *   goes to stderr (cli/progress.h).
 * Exit status: 0 equal, 1 the checkpoints differ, 2 bad usage or unreadable/missing input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/progress.h"
#include "core/alloc.h"
#include "core/log.h"

/* The comparison of one tensor pair so far. */
typedef struct dstats {
    int64_t n, ndiff, nan_mismatch;
    double max_abs, max_b;
    int bitwise;
} dstats;

/* Folds one chunk pair into d. */
static void diff_add(dstats *d, const void *a, const void *b, mp_dtype dt, int64_t n) {
    if (memcmp(a, b, (size_t)n * mp_dtype_size(dt))) d->bitwise = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = mp_ckpt_elem(a, dt, i), y = mp_ckpt_elem(b, dt, i);
        if (isnan(x) || isnan(y)) {
            if (!(isnan(x) && isnan(y))) { d->nan_mismatch++; d->ndiff++; }
            continue;
        }
        if (fabs(y) > d->max_b && isfinite(y)) d->max_b = fabs(y);
        if (x == y) continue;
        d->ndiff++;
        double e = fabs(x - y);
        if (!(e <= d->max_abs)) d->max_abs = e;   /* also takes Inf */
    }
    d->n += n;
}

/* The tensor-scaled relative difference max|a-b| / max|b| (0 when equal, Inf when max|b| is 0). */
static double diff_rel(const dstats *d) {
    if (d->max_abs == 0) return 0;
    return d->max_b > 0 ? d->max_abs / d->max_b : INFINITY;
}

/* Metadata that does not describe the training state: the layout (mesh; train_config's tp, dp, sp,
 * reshard_after_forward, recompute: memory choices that change no number) and bookkeeping (train_config's
 * log_every, eval_every, eval_batches, val_data). Reported as a note, never counted as a difference. */
static int layout_only(const char *key, const char *field) {
    static const char *const train_fields_ignored[] = {"tp", "dp", "sp", "reshard_after_forward", "recompute",
                                                       "log_every", "eval_every", "eval_batches", "val_data",
                                                       NULL};
    if (!strcmp(key, "mesh")) return 1;
    if (!strcmp(key, "train_config") && field)
        for (int i = 0; train_fields_ignored[i]; i++)
            if (!strcmp(field, train_fields_ignored[i])) return 1;
    return 0;
}

/* Compares metadata entry key of a and b; prints each difference to out; returns the number that count. */
static int diff_meta_key(FILE *out, const ckpt_reader *a, const ckpt_reader *b, const char *key) {
    const char *ta = ckpt_meta_get(a, key), *tb = ckpt_meta_get(b, key);
    if (!ta || !tb) {
        fprintf(out, "%s: metadata \"%s\" only in %s\n", layout_only(key, NULL) ? "note" : "metadata differs", key, ta ? "A" : "B");
        return !layout_only(key, NULL);
    }
    if (!strcmp(ta, tb)) return 0;
    if (!strcmp(key, "model_config")) {   /* compared as a model: formatting does not matter */
        llama_config x, y;
        mp_err e;
        if (mp_ckpt_parse_model_config(a, &x, &e) == MP_OK && mp_ckpt_parse_model_config(b, &y, &e) == MP_OK) {
            unsigned d = llama_config_diff(&x, &y, LLAMA_CF_NONE);   /* every field counts */
            int n = 0;
            for (llama_config_field f = 0; f < LLAMA_CF_COUNT; f++) {
                if (!(d & LLAMA_CF_BIT(f))) continue;
                char va[256], vb[256];
                llama_config_field_format(&x, f, va, sizeof va);
                llama_config_field_format(&y, f, vb, sizeof vb);
                fprintf(out, "metadata differs: model_config.%s: %s vs %s\n", llama_config_field_name(f), va, vb);
                n++;
            }
            return n;
        }
    }
    cJSON *ja = cJSON_Parse(ta), *jb = cJSON_Parse(tb);
    int n = 0;
    if (cJSON_IsObject(ja) && cJSON_IsObject(jb)) {
        /* field by field, over the union of the fields */
        for (int pass = 0; pass < 2; pass++) {
            cJSON *x = pass ? jb : ja, *y = pass ? ja : jb;
            for (const cJSON *it = x->child; it; it = it->next) {
                const cJSON *other = cJSON_GetObjectItemCaseSensitive(y, it->string);
                if (pass && other) continue;   /* both present: done in pass 0 */
                if (other && cJSON_Compare(it, other, 1)) continue;
                int lay = layout_only(key, it->string);
                fprintf(out, "%s: %s.%s: ", lay ? "note" : "metadata differs", key, it->string);
                const cJSON *va = pass ? other : it, *vb = pass ? it : other;
                if (va) mp_ckpt_print_json_value(out, va); else fprintf(out, "(absent)");
                fprintf(out, " vs ");
                if (vb) mp_ckpt_print_json_value(out, vb); else fprintf(out, "(absent)");
                fprintf(out, "%s\n", lay ? " (layout/bookkeeping only, not compared)" : "");
                n += !lay;
            }
        }
    } else if (!(ja && jb && cJSON_Compare(ja, jb, 1))) {
        int lay = layout_only(key, NULL);
        fprintf(out, "%s: %s: %s vs %s%s\n", lay ? "note" : "metadata differs", key, ta, tb, lay ? " (layout/bookkeeping only, not compared)" : "");
        n = !lay;
    }
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return n;
}

/* Compares all metadata of a and b (and the index step), printing to out; returns the differences that count. */
static int diff_meta(FILE *out, const ckpt_reader *a, const ckpt_reader *b) {
    int n = 0;
    if (ckpt_reader_step(a) != ckpt_reader_step(b) && !ckpt_meta_get(a, "step") && !ckpt_meta_get(b, "step")) {
        fprintf(out, "metadata differs: step: %lld vs %lld\n", (long long)ckpt_reader_step(a), (long long)ckpt_reader_step(b));
        n++;
    }
    for (int i = 0; i < ckpt_num_meta(a); i++) n += diff_meta_key(out, a, b, ckpt_meta_key(a, i));
    for (int i = 0; i < ckpt_num_meta(b); i++)
        if (!ckpt_meta_get(a, ckpt_meta_key(b, i))) n += diff_meta_key(out, a, b, ckpt_meta_key(b, i));
    return n;
}

/* The comparison's outcome, printed as text as it goes or collected for --json. */
typedef struct diff_out {
    cJSON *tensors;     /* --json: the tensor entries; NULL: text output */
    mp_progress *pg;    /* the bar, taken off the line before a text line is printed (may be NULL) */
    int only_a, only_b, mismatch, n_bit, n_tol, n_diff;
    double worst_rel, worst_abs;
} diff_out;

/* A tensor entry {"name", "status", ...} for --json (the caller adds the rest). */
static cJSON *json_entry(diff_out *o, const char *name, const char *status) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", name);
    cJSON_AddStringToObject(e, "status", status);
    cJSON_AddItemToArray(o->tensors, e);
    return e;
}

/* A number for JSON: Inf (a relative difference over max|b| = 0) as null. */
static cJSON *json_num(double v) { return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull(); }

/* Reports a tensor present in one checkpoint only (side "A" or "B"). */
static void report_only(diff_out *o, const char *side, const char *name) {
    if (*side == 'A') o->only_a++;
    else o->only_b++;
    if (o->tensors) json_entry(o, name, *side == 'A' ? "only_in_a" : "only_in_b");
    else {
        mp_progress_clear(o->pg);
        printf("only in %s: %s\n", side, name);
    }
}

/* Reports a dtype or shape mismatch of tensor a against b; returns 1 if there is one. */
static int report_mismatch(diff_out *o, const ckpt_tensor_info *ta, const ckpt_tensor_info *tb) {
    char sa[128], sb[128];
    int dtype = ta->dtype != tb->dtype;
    if (!dtype && ta->ndim == tb->ndim && !memcmp(ta->shape, tb->shape, sizeof ta->shape)) return 0;
    o->mismatch++;
    const char *x = dtype ? mp_dtype_name(ta->dtype) : mp_ckpt_shape_str(sa, sizeof sa, ta->ndim, ta->shape);
    const char *y = dtype ? mp_dtype_name(tb->dtype) : mp_ckpt_shape_str(sb, sizeof sb, tb->ndim, tb->shape);
    if (o->tensors) {
        cJSON *e = json_entry(o, ta->name, dtype ? "dtype_mismatch" : "shape_mismatch");
        cJSON_AddStringToObject(e, "a", x);
        cJSON_AddStringToObject(e, "b", y);
    } else {
        mp_progress_clear(o->pg);
        printf("tensor %s: %s %s vs %s\n", ta->name, dtype ? "dtype" : "shape", x, y);
    }
    return 1;
}

/* Compares tensor t (same dtype and shape in both) of r[0] and r[1] chunk by chunk into *d; the read
 * error names the tensor and the side. */
static mp_code compare_tensor(ckpt_reader *r[2], const ckpt_tensor_info *t, void *ba, void *bb, int64_t budget,
                              dstats *d, mp_err *err) {
    memset(d, 0, sizeof *d);
    d->bitwise = 1;
    mp_ckpt_chunk_iter it;
    mp_ckpt_chunk_init(&it, t->ndim, t->shape, mp_dtype_size(t->dtype), budget);
    for (int64_t n; (n = mp_ckpt_chunk_current(&it)) > 0; mp_ckpt_chunk_next(&it)) {
        for (int k = 0; k < 2; k++)
            if (ckpt_read(r[k], t->name, it.off, it.cshape, k ? bb : ba, err))
                return mp_err_wrap(err, "reading %s from %s", t->name, k ? "B" : "A");
        diff_add(d, ba, bb, t->dtype, n);
    }
    return MP_OK;
}

/* Folds the comparison d of tensor name into o and reports it (equal tensors only with all). */
static void report_tensor(diff_out *o, const char *name, const dstats *d, int ok, int all) {
    double rel = diff_rel(d);
    if (d->bitwise) o->n_bit++;
    else if (ok) o->n_tol++;
    else o->n_diff++;
    if (!d->bitwise) {
        if (rel > o->worst_rel) o->worst_rel = rel;
        if (d->max_abs > o->worst_abs) o->worst_abs = d->max_abs;
    }
    if (d->bitwise && !all) return;
    if (o->tensors) {
        cJSON *e = json_entry(o, name, d->bitwise ? "bitwise_equal" : ok ? "within_tolerance" : "differs");
        cJSON_AddItemToObject(e, "max_abs_diff", json_num(d->max_abs));
        cJSON_AddItemToObject(e, "max_rel_diff", json_num(rel));
        cJSON_AddNumberToObject(e, "elements_differ", (double)d->ndiff);
        cJSON_AddNumberToObject(e, "elements", (double)d->n);
        cJSON_AddNumberToObject(e, "nan_mismatch", (double)d->nan_mismatch);
        return;
    }
    mp_progress_clear(o->pg);
    printf("tensor %s: ", name);
    if (d->bitwise) { printf("bitwise equal\n"); return; }
    printf("max abs diff %.3e, max rel diff %.3e, %lld of %lld elements differ", d->max_abs, rel, (long long)d->ndiff,
           (long long)d->n);
    if (d->nan_mismatch) printf(" (%lld NaN in one only)", (long long)d->nan_mismatch);
    printf(" -> %s\n", ok ? "within tolerance" : "DIFFERS");
}

/* The bytes of the tensors of a that b holds too (what the comparison reads from a), for the bar. */
static int64_t common_bytes(const ckpt_reader *a, const ckpt_reader *b) {
    int64_t n = 0;
    for (int i = 0; i < ckpt_num_tensors(a); i++) {
        const ckpt_tensor_info *t = ckpt_tensor_at(a, i);
        if (ckpt_tensor_find(b, t->name) >= 0) n += (int64_t)mp_dtype_size(t->dtype) * mp_ckpt_numel(t->ndim, t->shape);
    }
    return n;
}

/* Compares the tensors of r[0] and r[1] (tables sorted by name: merged) into o, with a progress bar
 * over the bytes read from A. MP_OK, or the error of an unreadable tensor. */
static mp_code diff_tensors(ckpt_reader *r[2], double atol, double rtol, int all, diff_out *o, mp_err *err) {
    int tolerant = atol > 0 || rtol > 0;
    int64_t budget = mp_ckpt_chunk_bytes();
    void *ba = mp_xmalloc((size_t)budget), *bb = mp_xmalloc((size_t)budget);
    int na = ckpt_num_tensors(r[0]), nb = ckpt_num_tensors(r[1]);
    mp_progress *pg = mp_progress_start("ckpt diff", common_bytes(r[0], r[1]), MP_PROGRESS_BYTES);
    ckpt_reader_set_progress(r[0], mp_progress_ckpt, pg);
    o->pg = pg;
    mp_code rc = MP_OK;
    int i = 0, j = 0;
    while ((i < na || j < nb) && !rc) {
        const ckpt_tensor_info *ta = i < na ? ckpt_tensor_at(r[0], i) : NULL, *tb = j < nb ? ckpt_tensor_at(r[1], j) : NULL;
        int c = !ta ? 1 : !tb ? -1 : strcmp(ta->name, tb->name);
        if (c < 0) { report_only(o, "A", ta->name); i++; continue; }
        if (c > 0) { report_only(o, "B", tb->name); j++; continue; }
        i++, j++;
        if (report_mismatch(o, ta, tb)) continue;
        dstats d;
        if ((rc = compare_tensor(r, ta, ba, bb, budget, &d, err))) break;
        report_tensor(o, ta->name, &d, d.bitwise || (tolerant && !d.nan_mismatch && d.max_abs <= atol + rtol * d.max_b), all);
    }
    ckpt_reader_set_progress(r[0], NULL, NULL);
    mp_progress_finish(pg);
    o->pg = NULL;
    free(ba);
    free(bb);
    return rc;
}

/* Splits the metadata report text (lines "metadata differs: X" / "note: X") into the arrays
 * "metadata_differences" and "notes" of j. */
static void json_meta_lines(cJSON *j, const char *text) {
    cJSON *md = cJSON_AddArrayToObject(j, "metadata_differences"), *notes = cJSON_AddArrayToObject(j, "notes");
    static const char md_tag[] = "metadata differs: ", note_tag[] = "note: ";
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        char *line = mp_xmalloc(n + 1);
        memcpy(line, p, n);
        line[n] = '\0';
        if (!strncmp(line, md_tag, sizeof md_tag - 1)) cJSON_AddItemToArray(md, cJSON_CreateString(line + sizeof md_tag - 1));
        else if (!strncmp(line, note_tag, sizeof note_tag - 1)) cJSON_AddItemToArray(notes, cJSON_CreateString(line + sizeof note_tag - 1));
        else if (n) cJSON_AddItemToArray(md, cJSON_CreateString(line));
        free(line);
        p = e ? e + 1 : NULL;
    }
}

/* One side of the comparison as JSON: {"checkpoint", "step", "mesh", "tensors"}. */
static cJSON *json_side(const char *dir, const ckpt_reader *r) {
    char mb[128];
    cJSON *s = cJSON_CreateObject();
    cJSON_AddStringToObject(s, "checkpoint", dir);
    cJSON_AddNumberToObject(s, "step", (double)ckpt_reader_step(r));
    cJSON_AddStringToObject(s, "mesh", mp_ckpt_mesh_str(mb, sizeof mb, r));
    cJSON_AddNumberToObject(s, "tensors", ckpt_num_tensors(r));
    return s;
}

/* Prints the --json object of a finished comparison (see --help). */
static void print_json(char *const dir[2], ckpt_reader *const r[2], const char *meta_text, int nmeta, diff_out *o,
                       double atol, double rtol, int differ) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "a", json_side(dir[0], r[0]));
    cJSON_AddItemToObject(j, "b", json_side(dir[1], r[1]));
    cJSON_AddBoolToObject(j, "equal", !differ);
    if (atol > 0 || rtol > 0) {
        cJSON *t = cJSON_AddObjectToObject(j, "tolerance");
        cJSON_AddNumberToObject(t, "atol", atol);
        cJSON_AddNumberToObject(t, "rtol", rtol);
    } else {
        cJSON_AddNullToObject(j, "tolerance");   /* bitwise */
    }
    cJSON *sm = cJSON_AddObjectToObject(j, "summary");
    cJSON_AddNumberToObject(sm, "in_both", o->n_bit + o->n_tol + o->n_diff + o->mismatch);
    cJSON_AddNumberToObject(sm, "bitwise_equal", o->n_bit);
    cJSON_AddNumberToObject(sm, "within_tolerance", o->n_tol);
    cJSON_AddNumberToObject(sm, "differ", o->n_diff);
    cJSON_AddNumberToObject(sm, "mismatched", o->mismatch);
    cJSON_AddNumberToObject(sm, "only_in_a", o->only_a);
    cJSON_AddNumberToObject(sm, "only_in_b", o->only_b);
    cJSON_AddNumberToObject(sm, "metadata_differences", nmeta);
    cJSON_AddItemToObject(sm, "worst_max_abs_diff", json_num(o->worst_abs));
    cJSON_AddItemToObject(sm, "worst_max_rel_diff", json_num(o->worst_rel));
    cJSON_AddItemToObject(j, "tensors", o->tensors);
    o->tensors = NULL;
    json_meta_lines(j, meta_text);
    char *s = cJSON_Print(j);
    puts(s);
    free(s);
    cJSON_Delete(j);
}

/* Parses the flags of `ckpt diff`; returns -1 to go on, else the exit status (help printed, or a usage
 * error reported). */
static int diff_parse(int argc, char **argv, double *atol, double *rtol, int *all, int *json) {
    const mp_arg flags[] = {
        {"atol", MP_ARG_DOUBLE, atol, "X", "absolute tolerance", .dflt = "0: bitwise equality"},
        {"rtol", MP_ARG_DOUBLE, rtol, "Y", "tolerance relative to the tensor's max |B|", .dflt = "0: bitwise equality"},
        {"all", MP_ARG_SWITCH, all, NULL, "list bitwise-equal tensors too"},
        {"json", MP_ARG_SWITCH, json, NULL, "print one JSON object (see above) instead of text"},
        {0}};
    static const char *about =
        "Compares two checkpoints tensor by tensor, whatever meshes wrote them (both are read through "
        "the same box chunks, in bounded memory), and their metadata. Per tensor: max |a-b|, the "
        "relative difference max|a-b| / max|b|, and whether it is bitwise equal. Without a tolerance "
        "tensors must be bitwise equal; with one, max|a-b| <= atol + rtol * max|b|. The mesh (and "
        "train_config's tp, dp, sp, reshard_after_forward, recompute, log_every, eval_every, eval_batches, "
        "val_data) is shown but not compared. Exit 0 equal, 1 different, 2 unreadable input.\n"
        "--json prints {a, b: {checkpoint, step, mesh, tensors}, equal, tolerance: {atol, rtol} or "
        "null, summary: {in_both, bitwise_equal, within_tolerance, differ, mismatched, only_in_a, "
        "only_in_b, metadata_differences, worst_max_abs_diff, worst_max_rel_diff}, tensors: [{name, "
        "status (differs, within_tolerance, bitwise_equal, dtype_mismatch, shape_mismatch, only_in_a, "
        "only_in_b), max_abs_diff, max_rel_diff, elements_differ, elements, nan_mismatch}], "
        "metadata_differences: [text], notes: [text]}, with the same exit status.";
    int st = mp_ckpt_cli_start(flags, argc, argv, 2, "two checkpoint directories A B",
                               "meshpoint ckpt diff A B [--atol X] [--rtol Y] [--all] [--json]", about);
    if (st >= 0) return st;
    if (*atol < 0 || *rtol < 0) {
        mp_log_fail("--atol and --rtol must be >= 0, got %g and %g", *atol, *rtol);
        return mp_exit_status(MP_EINPUT);
    }
    return -1;
}

/* `meshpoint ckpt diff`: see the top of this file. Returns the exit status. */
int mp_ckpt_diff(int argc, char **argv) {
    double atol = 0, rtol = 0;
    int all = 0, json = 0;
    int status = diff_parse(argc, argv, &atol, &rtol, &all, &json);
    if (status >= 0) return status;
    status = mp_exit_status(MP_OK);
    mp_err err;
    mp_err_clear(&err);
    char *dir[2] = {NULL, NULL}, *meta_text = NULL;
    size_t meta_len = 0;
    ckpt_reader *r[2] = {NULL, NULL};
    diff_out o = {.tensors = json ? cJSON_CreateArray() : NULL};
    for (int k = 0; k < 2 && !status; k++)
        if (mp_ckpt_resolve(argv[k], &dir[k], &err) || ckpt_open(&r[k], dir[k], &err)) {
            mp_log_fail("%s", err.msg);
            status = mp_exit_status(MP_EINPUT);
        }
    if (status) goto out;
    char mb[128];
    if (!json)
        for (int k = 0; k < 2; k++)
            printf("%s  %s  (step %lld, %s, %d tensors)\n", k ? "B" : "A", dir[k], (long long)ckpt_reader_step(r[k]),
                   mp_ckpt_mesh_str(mb, sizeof mb, r[k]), ckpt_num_tensors(r[k]));
    FILE *mo = json ? open_memstream(&meta_text, &meta_len) : stdout;
    if (!mo) mp_oom(0, MP_MEM_OTHER, "the metadata text (open_memstream)");
    int nmeta = diff_meta(mo, r[0], r[1]);
    if (json) fclose(mo);
    if (diff_tensors(r, atol, rtol, all, &o, &err)) {
        mp_log_fail("%s", err.msg);
        status = mp_exit_status(MP_EINPUT);
        goto out;
    }
    int differ = o.n_diff || o.mismatch || o.only_a || o.only_b || nmeta;
    status = mp_exit_status(differ ? MP_ECHECK : MP_OK);
    if (json) {
        print_json(dir, r, meta_text, nmeta, &o, atol, rtol, differ);
        goto out;
    }
    int common = o.n_bit + o.n_tol + o.n_diff + o.mismatch;
    printf("summary: %d tensors in both: %d bitwise equal, %d within tolerance, %d differ, %d shape/dtype mismatches; "
           "%d only in A, %d only in B; %d metadata difference%s; worst max abs diff %.3e, worst max rel diff %.3e\n",
           common, o.n_bit, o.n_tol, o.n_diff, o.mismatch, o.only_a, o.only_b, nmeta, nmeta == 1 ? "" : "s",
           o.worst_abs, o.worst_rel);
    char tb[96];
    if (atol > 0 || rtol > 0) snprintf(tb, sizeof tb, "within atol %g, rtol %g", atol, rtol);
    else snprintf(tb, sizeof tb, "bitwise");
    printf("result: %s (%s)\n", differ ? "checkpoints differ" : "equal", tb);
out:
    cJSON_Delete(o.tensors);
    free(meta_text);
    for (int k = 0; k < 2; k++) {
        ckpt_close(r[k]);
        free(dir[k]);
    }
    return status;
}
