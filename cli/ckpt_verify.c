/*
 * cli/ckpt_verify.c — `meshpoint ckpt verify DIR [--format-only] [--json]`: ckpt_verify (the index, every
 * box's bytes against its checksums, coverage), then the metadata and the tensor set a training
 * checkpoint needs. Every problem found is printed as "problem: ..." before the verdict; with --json the
 * problems and notes go into one JSON object on stdout instead:
 *   {"checkpoint": DIR, "ok": bool, "format_only": bool, "views_pending": bool, "problems": [text...],
 *    "notes": [text...], "tensors": N, "tensor_bytes": B, "bytes_read": R}
 * (tensors/tensor_bytes/bytes_read are null when the index does not open). The exit status is the same
 * either way; a usage error (exit 2) prints no JSON, only the error on stderr. On a terminal, checking the
 * bytes shows a progress bar on stderr (cli/progress.h).
 *
 * verify derives the expected tensor set from the model config through llama_tensor_specs, the same
 * list the model's parameter table is built from (no model is created). When ckpt_verify fails it has
 * stopped at the first bad box, so every tensor is then read in chunks to name each damaged one.
 *
 * Views pending: a format v3 checkpoint without view.h5 — a training save publishes the
 * checkpoint first and writes view.h5 afterwards, in the background, so a kill or a full disk can leave
 * it so — is reported as one note naming `ckpt repair-views DIR` ("views pending"), and does not fail
 * verify: everything verify checks about the checkpoint itself holds, it loads and resumes bitwise, and
 * the views are derived data that training rebuilds at its next start in the run (or repair-views at
 * once). Failing it would make a preempted job's newest checkpoint look broken, and fail a verify run
 * while the live job is still writing the view. A view.h5 that exists but is wrong is a problem (exit 1).
 * docs/DESIGN_NOTES.md, "Views pending".
 * Exit status: 0 ok (views pending included), 1 a check failed, 2 bad usage or missing input.
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/progress.h"
#include "cli/train_ckpt.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "layers/llama.h"
#include "core/log.h"
#include "reshard/dcp.h"

/* The parameters of a model config (any family) in HF names and logical shapes: layers/ keeps the one list
 * (llama_tensor_specs) that the model itself is built from. Returns the count; *out is malloc'd. */
static int training_params(const llama_config *c, llama_tensor_spec **out) {
    int n = llama_tensor_specs(c, NULL, 0);
    llama_tensor_spec *p = mp_xmalloc(sizeof *p * (size_t)n);
    llama_tensor_specs(c, p, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += p[i].shape[0] * p[i].shape[1];
    assert(total == llama_config_num_params(c));   /* the same model as layers/llama_config.c counts */
    *out = p;
    return n;
}

/* The tensor groups a training checkpoint stores for every parameter. */
static const char *const kinds[3] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

/* Reports one problem of the views or the carried files (ckpt_view_report_fn, ckpt_file_report_fn) into a
 * problems list. */
static void report_problem(void *ctx, const char *text) { mp_ckpt_problem(ctx, "%s", text); }

/* Checks index.h5's /view datasets, what other HDF5 tools read (ckpt_views_check: against the tables,
 * reading one element of every box through them; libhdf5 crashes contained); each problem is reported,
 * with the way to fix it once. Views pending (no view.h5) are one note, not a problem (see the top of
 * this file). Returns 1 when libhdf5 crashed reading the index itself (reported): the caller must not
 * open it. */
static int verify_views(const char *dir, mp_ckpt_problems *pr) {
    int n = 0;
    mp_err e;
    mp_err_clear(&e);
    mp_code rc = ckpt_views_check(dir, 1, report_problem, pr, &n, &pr->views_pending, &e);
    if (rc == MP_ECHECK) return n > 0;   /* else the index does not read: ckpt_open reports it next */
    if (rc != MP_OK) mp_ckpt_problem(pr, "views: %s", e.msg);
    else if (n) mp_ckpt_note(pr, "`meshpoint ckpt repair-views %s` rebuilds the views from the tables", dir);
    else if (pr->views_pending)
        mp_ckpt_note(pr, "views pending: %s has no view.h5 yet (the views HDF5 tools read; meshpoint never reads them): "
             "`meshpoint ckpt repair-views %s` writes it, as does the run's next `meshpoint train` start or "
             "--resume", dir, dir);
    return 0;
}

/* Checks that the format version is the one of the model's family (mp_ckpt_format_version): versions 1 to 3
 * hold Llama models only, version 4 the other families. */
static void check_version(const ckpt_reader *r, const llama_config *mc, mp_ckpt_problems *pr) {
    int v = ckpt_reader_version(r), want = mp_ckpt_format_version(mc);
    if (v < 3 ? mc->family != LLAMA_FAMILY_LLAMA : v != want)
        mp_ckpt_problem(pr, "format version %d disagrees with model_config's model_type \"%s\" (a %s checkpoint is version %d)",
                v, llama_family_get(mc->family)->model_type, llama_family_get(mc->family)->model_type, want);
}

/* Checks the metadata a training checkpoint needs; each problem is reported. */
static void verify_meta(const ckpt_reader *r, mp_ckpt_problems *pr) {
    llama_config mc;
    mp_err err;
    if (mp_ckpt_parse_model_config(r, &mc, &err)) mp_ckpt_problem(pr, "%s", err.msg);
    else check_version(r, &mc, pr);
    const char *step = ckpt_meta_get(r, "step");
    if (!step) mp_ckpt_problem(pr, "metadata \"step\" is missing");
    else {
        char *end;
        errno = 0;
        long long v = strtoll(step, &end, 10);
        while (*end == ' ' || *end == '\n') end++;
        if (errno || end == step || *end || v < 0) mp_ckpt_problem(pr, "metadata \"step\" is not a non-negative integer: \"%s\"", step);
        else if (v != ckpt_reader_step(r))
            mp_ckpt_problem(pr, "metadata \"step\" (%lld) disagrees with the index's step (%lld)", v, (long long)ckpt_reader_step(r));
    }
    const char *dc = ckpt_meta_get(r, "data_cursor");
    if (!dc) mp_ckpt_problem(pr, "metadata \"data_cursor\" is missing");
    else {
        cJSON *j = cJSON_Parse(dc);
        int64_t v;
        if (!cJSON_IsObject(j)) mp_ckpt_problem(pr, "metadata \"data_cursor\" is not a JSON object: %s", dc);
        else {
            static const char *const f[] = {"pos", "epoch", "batch_size", "seq_len"};
            for (int i = 0; i < 4; i++)
                if (!mp_ckpt_json_int(j, f[i], &v) || v < (i < 2 ? 0 : 1))
                    mp_ckpt_problem(pr, "metadata \"data_cursor\": field \"%s\" is missing or not a %s integer", f[i],
                            i < 2 ? "non-negative" : "positive");
        }
        cJSON_Delete(j);
    }
    /* the others must parse when present */
    for (int i = 0; mp_ckpt_known_meta[i]; i++) {
        const char *k = mp_ckpt_known_meta[i], *v = ckpt_meta_get(r, k);
        if (!strcmp(k, "model_config") || !strcmp(k, "step") || !strcmp(k, "data_cursor")) continue;
        if (!v) { mp_ckpt_note(pr, "metadata \"%s\" is absent", k); continue; }
        cJSON *j = cJSON_Parse(v);
        if (!cJSON_IsObject(j)) mp_ckpt_problem(pr, "metadata \"%s\" is not a JSON object", k);
        cJSON_Delete(j);
    }
    cJSON *m = mp_ckpt_meta_json(r, "mesh");
    int64_t tp, dp, world;
    if (m && mp_ckpt_json_int(m, "tp", &tp) && mp_ckpt_json_int(m, "dp", &dp) && mp_ckpt_json_int(m, "world", &world)) {
        if (tp < 1 || dp < 1 || tp * dp != world || world != ckpt_reader_world(r))
            mp_ckpt_problem(pr, "metadata \"mesh\" (tp %lld x dp %lld, world %lld) disagrees with itself or with the index's "
                        "world size %d", (long long)tp, (long long)dp, (long long)world, ckpt_reader_world(r));
    } else if (m) {
        mp_ckpt_problem(pr, "metadata \"mesh\" lacks integer fields world, tp, dp");
    }
    cJSON_Delete(m);
}

/* Checks that the tensors are exactly model/, optim/exp_avg/, optim/exp_avg_sq/ of every parameter of
 * the config, f32, with the logical HF shapes. */
static void verify_tensor_set(const ckpt_reader *r, const llama_config *mc, mp_ckpt_problems *pr) {
    llama_tensor_spec *ps;
    int np = training_params(mc, &ps), nt = ckpt_num_tensors(r);
    char *seen = mp_xcalloc((size_t)nt + 1);
    char sa[128], sb[128];
    for (int i = 0; i < np; i++)
        for (int k = 0; k < 3; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s/%s", kinds[k], ps[i].name);
            int t = ckpt_tensor_find(r, name);
            if (t < 0) { mp_ckpt_problem(pr, "tensor %s is missing (the model config needs it)", name); continue; }
            seen[t] = 1;
            const ckpt_tensor_info *ti = ckpt_tensor_at(r, t);
            if (ti->dtype != MP_F32) mp_ckpt_problem(pr, "tensor %s has dtype %s, a training checkpoint stores f32", name, mp_dtype_name(ti->dtype));
            if (ti->ndim != ps[i].ndim || ti->shape[0] != ps[i].shape[0] || (ps[i].ndim == 2 && ti->shape[1] != ps[i].shape[1]))
                mp_ckpt_problem(pr, "tensor %s has shape %s, the model config needs %s", name, mp_ckpt_shape_str(sa, sizeof sa, ti->ndim, ti->shape),
                        mp_ckpt_shape_str(sb, sizeof sb, ps[i].ndim, ps[i].shape));
        }
    for (int t = 0; t < nt; t++)
        if (!seen[t]) mp_ckpt_problem(pr, "tensor %s is not part of the model the config describes", ckpt_tensor_at(r, t)->name);
    free(seen);
    free(ps);
}

/* Checks the bytes of every box (ckpt_verify, with a progress bar); on a failure reads every tensor to
 * name each damaged one. Each problem is reported into pr; *bytes gets the bytes ckpt_verify read. */
static void verify_bytes(ckpt_reader *r, mp_ckpt_problems *pr, int64_t *bytes) {
    mp_err err;
    mp_progress *pg = mp_progress_start("ckpt verify", 0, MP_PROGRESS_BYTES);
    ckpt_reader_set_progress(r, mp_progress_ckpt, pg);
    mp_code rc = ckpt_verify(r, bytes, &err);
    ckpt_reader_set_progress(r, NULL, NULL);
    mp_progress_finish(pg);
    if (!rc) return;
    char first[MP_ERR_MSG_MAX];
    snprintf(first, sizeof first, "%s", err.msg);
    mp_ckpt_problem(pr, "%s", first);
    /* the library stops at the first bad box: read every tensor to name each damaged one */
    int64_t budget = mp_ckpt_chunk_bytes();
    void *buf = mp_xmalloc((size_t)budget);
    for (int i = 0; i < ckpt_num_tensors(r); i++) {
        mp_ckpt_tstats s;
        if (mp_ckpt_tensor_stats(r, ckpt_tensor_at(r, i), buf, budget, &s, &err) && strcmp(err.msg, first))
            mp_ckpt_problem(pr, "%s", err.msg);
    }
    free(buf);
}

/* Notes the temp files of interrupted writes (core/fsutil.h's convention) in the checkpoint directory:
 * never read, not a problem. */
static void note_leftovers(const char *dir, mp_ckpt_problems *pr) {
    char names[1024];
    int n = mp_fs_tmp_leftovers(dir, names, sizeof names);
    if (n) mp_ckpt_note(pr, "%d leftover temp file%s of an interrupted write in %s (never read; safe to delete when "
                        "nothing is writing there): %s", n, n == 1 ? "" : "s", dir, names);
}

/* Checks the files the checkpoint carries (its tokenizer's) against their listed sizes and checksums,
 * and that nothing unlisted lies among them; a problem names the file. */
static void verify_files(const ckpt_reader *r, mp_ckpt_problems *pr) {
    mp_err err;
    int n = 0;
    if (!ckpt_files_verify(r, report_problem, pr, &n, &err) && n) mp_ckpt_note(pr, "%d carried file%s verified", n, n == 1 ? "" : "s");
}

/* The tensor bytes of r (elements x dtype size, all tensors). */
static int64_t all_tensor_bytes(const ckpt_reader *r) {
    int64_t n = 0;
    for (int i = 0; i < ckpt_num_tensors(r); i++) {
        const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
        n += (int64_t)mp_dtype_size(t->dtype) * mp_ckpt_numel(t->ndim, t->shape);
    }
    return n;
}

/* Prints the verdict: the text line, or with --json the one JSON object (r NULL: the index did not
 * open). Frees pr's arrays. */
static void print_verdict(const char *dir, const ckpt_reader *r, mp_ckpt_problems *pr, int format_only, int64_t bytes) {
    int64_t tb = r ? all_tensor_bytes(r) : 0;
    if (!pr->list) {
        if (pr->n) printf("FAILED: %s: %d problem%s\n", dir, pr->n, pr->n == 1 ? "" : "s");
        else
            printf("ok: %d tensors, %lld bytes verified (%lld bytes read with the checksum tiles; %s)%s\n",
                   ckpt_num_tensors(r), (long long)tb, (long long)bytes, dir, pr->views_pending ? "; views pending" : "");
        return;
    }
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "checkpoint", dir);
    cJSON_AddBoolToObject(o, "ok", pr->n == 0);
    cJSON_AddBoolToObject(o, "format_only", format_only);
    cJSON_AddBoolToObject(o, "views_pending", pr->views_pending);
    cJSON_AddItemToObject(o, "problems", pr->list);
    cJSON_AddItemToObject(o, "notes", pr->notes);
    if (r) {
        cJSON_AddNumberToObject(o, "tensors", ckpt_num_tensors(r));
        cJSON_AddNumberToObject(o, "tensor_bytes", (double)tb);
        cJSON_AddNumberToObject(o, "bytes_read", (double)bytes);
    } else {
        cJSON_AddNullToObject(o, "tensors");
        cJSON_AddNullToObject(o, "tensor_bytes");
        cJSON_AddNullToObject(o, "bytes_read");
    }
    char *s = cJSON_Print(o);
    puts(s);
    free(s);
    cJSON_Delete(o);
    pr->list = pr->notes = NULL;
}

/* `meshpoint ckpt verify`: see the top of this file. Returns the exit status. */
int mp_ckpt_verify(int argc, char **argv) {
    int format_only = 0, json = 0;
    const mp_arg flags[] = {
        {"format-only", MP_ARG_SWITCH, &format_only, NULL, "only the format checks (any checkpoint, not only training ones)"},
        {"json", MP_ARG_SWITCH, &json, NULL, "print one JSON object: ok, problems, notes, tensors, bytes"},
        {0}};
    static const char *about =
        "Verifies a checkpoint: the index, every box's bytes against its checksums, coverage, and index.h5's views "
        "(what other HDF5 tools read), the files it carries (its tokenizer's); then that the metadata a training run needs (model_config, step, "
        "data_cursor) is present and valid and that the tensors are exactly model/, optim/exp_avg/ and "
        "optim/exp_avg_sq/ of every parameter of the model config, with its logical shape. Exit 1 naming every "
        "problem found. A checkpoint whose view.h5 is not written yet (a save interrupted after publishing it) "
        "passes with a note, \"views pending\", naming `meshpoint ckpt repair-views`. --json: {checkpoint, ok, "
        "format_only, views_pending, problems[], notes[], tensors, tensor_bytes, bytes_read}, same exit status.";
    int st = mp_ckpt_cli_start(flags, argc, argv, 1, "one checkpoint DIR",
                               "meshpoint ckpt verify DIR [--format-only] [--json]", about);
    if (st >= 0) return st;
    if (dcp_is_dir(argv[0])) return mp_ckpt_dcp_verify(argv[0], json);   /* a PyTorch DCP directory */
    mp_err err;
    mp_err_clear(&err);
    char *dir = NULL;
    if (mp_ckpt_resolve(argv[0], &dir, &err)) {
        mp_log_fail("%s", err.msg);
        return mp_exit_status(MP_EINPUT);
    }
    mp_ckpt_problems pr = {0};
    if (json) {
        pr.list = cJSON_CreateArray();
        pr.notes = cJSON_CreateArray();
    }
    int index_crashed = verify_views(dir, &pr);   /* first: it needs a process with no HDF5 file open */
    note_leftovers(dir, &pr);
    ckpt_reader *r = NULL;
    if (index_crashed || ckpt_open(&r, dir, &err)) {
        if (!index_crashed) mp_ckpt_problem(&pr, "%s", err.msg);
        print_verdict(dir, NULL, &pr, format_only, 0);
        free(dir);
        return mp_exit_status(MP_ECHECK);
    }
    int64_t bytes = 0;
    verify_bytes(r, &pr, &bytes);
    verify_files(r, &pr);
    if (!format_only) {
        verify_meta(r, &pr);
        llama_config mc;
        mp_err ce;
        if (mp_ckpt_parse_model_config(r, &mc, &ce) == MP_OK) verify_tensor_set(r, &mc, &pr);
    }
    int failed = pr.n > 0;
    print_verdict(dir, r, &pr, format_only, bytes);
    ckpt_close(r);
    free(dir);
    return mp_exit_status(failed ? MP_ECHECK : MP_OK);
}
