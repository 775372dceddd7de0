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
 * Exit status: 0 equal, 1 the checkpoints differ, 2 bad usage or unreadable/missing input.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "core/alloc.h"

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
 * reshard_after_forward) and bookkeeping (train_config's log_every, eval_every, eval_batches, val_data).
 * Reported as a note, never counted as a difference. */
static int layout_only(const char *key, const char *field) {
    static const char *const train_fields_ignored[] = {"tp", "dp", "sp", "reshard_after_forward", "log_every",
                                                       "eval_every", "eval_batches", "val_data", NULL};
    if (!strcmp(key, "mesh")) return 1;
    if (!strcmp(key, "train_config") && field)
        for (int i = 0; train_fields_ignored[i]; i++)
            if (!strcmp(field, train_fields_ignored[i])) return 1;
    return 0;
}

/* Compares metadata entry key of a and b; prints each difference; returns the number that count. */
static int diff_meta_key(const ckpt_reader *a, const ckpt_reader *b, const char *key) {
    const char *ta = ckpt_meta_get(a, key), *tb = ckpt_meta_get(b, key);
    if (!ta || !tb) {
        printf("%s: metadata \"%s\" only in %s\n", layout_only(key, NULL) ? "note" : "metadata differs", key, ta ? "A" : "B");
        return !layout_only(key, NULL);
    }
    if (!strcmp(ta, tb)) return 0;
    if (!strcmp(key, "model_config")) {   /* compared as a model: formatting does not matter */
        mp_model_config x, y;
        mp_err e;
        if (mp_ckpt_parse_model_config(a, &x, &e) == MP_OK && mp_ckpt_parse_model_config(b, &y, &e) == MP_OK) {
            int n = 0;
#define F(f, fmt)                                                                                 \
            if (x.f != y.f) { printf("metadata differs: model_config.%s: " fmt " vs " fmt "\n", #f, x.f, y.f); n++; }
            F(hidden_size, "%d") F(intermediate_size, "%d") F(num_hidden_layers, "%d") F(num_attention_heads, "%d")
            F(num_key_value_heads, "%d") F(vocab_size, "%d") F(max_position_embeddings, "%d") F(rms_norm_eps, "%g")
            F(rope_theta, "%g") F(tie_word_embeddings, "%d") F(initializer_range, "%g")
#undef F
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
                printf("%s: %s.%s: ", lay ? "note" : "metadata differs", key, it->string);
                const cJSON *va = pass ? other : it, *vb = pass ? it : other;
                if (va) mp_ckpt_print_json_value(stdout, va); else printf("(absent)");
                printf(" vs ");
                if (vb) mp_ckpt_print_json_value(stdout, vb); else printf("(absent)");
                printf("%s\n", lay ? " (layout/bookkeeping only, not compared)" : "");
                n += !lay;
            }
        }
    } else if (!(ja && jb && cJSON_Compare(ja, jb, 1))) {
        int lay = layout_only(key, NULL);
        printf("%s: %s: %s vs %s%s\n", lay ? "note" : "metadata differs", key, ta, tb, lay ? " (layout/bookkeeping only, not compared)" : "");
        n = !lay;
    }
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    return n;
}

/* Compares all metadata of a and b (and the index step); returns the differences that count. */
static int diff_meta(const ckpt_reader *a, const ckpt_reader *b) {
    int n = 0;
    if (ckpt_reader_step(a) != ckpt_reader_step(b) && !ckpt_meta_get(a, "step") && !ckpt_meta_get(b, "step")) {
        printf("metadata differs: step: %lld vs %lld\n", (long long)ckpt_reader_step(a), (long long)ckpt_reader_step(b));
        n++;
    }
    for (int i = 0; i < ckpt_num_meta(a); i++) n += diff_meta_key(a, b, ckpt_meta_key(a, i));
    for (int i = 0; i < ckpt_num_meta(b); i++)
        if (!ckpt_meta_get(a, ckpt_meta_key(b, i))) n += diff_meta_key(a, b, ckpt_meta_key(b, i));
    return n;
}

/* `meshpoint ckpt diff`: see the top of this file. Returns the exit status. */
int mp_ckpt_diff(int argc, char **argv) {
    double atol = 0, rtol = 0;
    int all = 0, npos = 0, help = 0, set_atol = 0, set_rtol = 0;
    const mp_arg flags[] = {
        {"atol", MP_ARG_DOUBLE, &atol, "X", "absolute tolerance (default: bitwise equality)", .set = &set_atol},
        {"rtol", MP_ARG_DOUBLE, &rtol, "Y", "tolerance relative to the tensor's max |B| (default: bitwise equality)", .set = &set_rtol},
        {"all", MP_ARG_SWITCH, &all, NULL, "list bitwise-equal tensors too"},
        {0}};
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) {
        fprintf(stderr, "meshpoint ckpt diff: %s\n", err.msg);
        return MP_CKPT_ST_USAGE;
    }
    if (help) {
        mp_args_help(stdout, "meshpoint ckpt diff A B [--atol X] [--rtol Y] [--all]",
                     "Compares two checkpoints tensor by tensor, whatever meshes wrote them (both are read through "
                     "the same box chunks, in bounded memory), and their metadata. Per tensor: max |a-b|, the "
                     "relative difference max|a-b| / max|b|, and whether it is bitwise equal. Without a tolerance "
                     "tensors must be bitwise equal; with one, max|a-b| <= atol + rtol * max|b|. The mesh (and "
                     "train_config's tp, dp, sp, reshard_after_forward, log_every, eval_every, eval_batches, "
                     "val_data) is shown but not compared. Exit 0 equal, 1 different, 2 unreadable input.",
                     flags);
        return MP_CKPT_ST_OK;
    }
    if (npos != 2) {
        fprintf(stderr, "meshpoint ckpt diff: expected two checkpoint directories A B (see --help)\n");
        return MP_CKPT_ST_USAGE;
    }
    if (atol < 0 || rtol < 0) {
        fprintf(stderr, "meshpoint ckpt diff: --atol and --rtol must be >= 0, got %g and %g\n", atol, rtol);
        return MP_CKPT_ST_USAGE;
    }
    int tolerant = atol > 0 || rtol > 0;
    (void)set_atol;
    (void)set_rtol;
    char *dir[2] = {NULL, NULL};
    ckpt_reader *r[2] = {NULL, NULL};
    int status = MP_CKPT_ST_OK;
    for (int k = 0; k < 2 && !status; k++)
        if (mp_ckpt_resolve(argv[k], &dir[k], &err) || ckpt_open(&r[k], dir[k], &err)) {
            fprintf(stderr, "meshpoint ckpt diff: %s\n", err.msg);
            status = MP_CKPT_ST_USAGE;
        }
    if (status) goto out;
    char mb[128], sa[128], sb[128];
    for (int k = 0; k < 2; k++)
        printf("%s  %s  (step %lld, %s, %d tensors)\n", k ? "B" : "A", dir[k], (long long)ckpt_reader_step(r[k]),
               mp_ckpt_mesh_str(mb, sizeof mb, r[k]), ckpt_num_tensors(r[k]));
    int nmeta = diff_meta(r[0], r[1]);
    int64_t budget = mp_ckpt_chunk_bytes();
    void *ba = mp_xmalloc((size_t)budget), *bb = mp_xmalloc((size_t)budget);
    int na = ckpt_num_tensors(r[0]), nb = ckpt_num_tensors(r[1]);
    int only_a = 0, only_b = 0, mismatch = 0, n_bit = 0, n_tol = 0, n_diff = 0;
    double worst_rel = 0, worst_abs = 0;
    /* both tensor tables are sorted by name (strcmp): merge them */
    int i = 0, j = 0;
    while ((i < na || j < nb) && !status) {
        const ckpt_tensor_info *ta = i < na ? ckpt_tensor_at(r[0], i) : NULL, *tb = j < nb ? ckpt_tensor_at(r[1], j) : NULL;
        int c = !ta ? 1 : !tb ? -1 : strcmp(ta->name, tb->name);
        if (c < 0) { printf("only in A: %s\n", ta->name); only_a++; i++; continue; }
        if (c > 0) { printf("only in B: %s\n", tb->name); only_b++; j++; continue; }
        i++, j++;
        if (ta->dtype != tb->dtype) {
            printf("tensor %s: dtype %s vs %s\n", ta->name, mp_dtype_name(ta->dtype), mp_dtype_name(tb->dtype));
            mismatch++;
            continue;
        }
        if (ta->ndim != tb->ndim || memcmp(ta->shape, tb->shape, sizeof ta->shape)) {
            printf("tensor %s: shape %s vs %s\n", ta->name, mp_ckpt_shape_str(sa, sizeof sa, ta->ndim, ta->shape),
                   mp_ckpt_shape_str(sb, sizeof sb, tb->ndim, tb->shape));
            mismatch++;
            continue;
        }
        dstats d = {0};
        d.bitwise = 1;
        mp_ckpt_chunk_iter it;
        mp_ckpt_chunk_init(&it, ta->ndim, ta->shape, mp_dtype_size(ta->dtype), budget);
        for (int64_t n; (n = mp_ckpt_chunk_current(&it)) > 0 && !status; mp_ckpt_chunk_next(&it)) {
            for (int k = 0; k < 2 && !status; k++)
                if (ckpt_read(r[k], ta->name, it.off, it.cshape, k ? bb : ba, &err)) {
                    fprintf(stderr, "meshpoint ckpt diff: reading %s from %s: %s\n", ta->name, k ? "B" : "A", err.msg);
                    status = MP_CKPT_ST_USAGE;
                }
            if (!status) diff_add(&d, ba, bb, ta->dtype, n);
        }
        if (status) break;
        double rel = diff_rel(&d);
        int ok = d.bitwise || (tolerant && !d.nan_mismatch && d.max_abs <= atol + rtol * d.max_b);
        if (d.bitwise) n_bit++;
        else if (ok) n_tol++;
        else n_diff++;
        if (!d.bitwise) {
            if (rel > worst_rel) worst_rel = rel;
            if (d.max_abs > worst_abs) worst_abs = d.max_abs;
        }
        if (!d.bitwise || all) {
            printf("tensor %s: ", ta->name);
            if (d.bitwise) printf("bitwise equal\n");
            else {
                printf("max abs diff %.3e, max rel diff %.3e, %lld of %lld elements differ", d.max_abs, rel,
                       (long long)d.ndiff, (long long)d.n);
                if (d.nan_mismatch) printf(" (%lld NaN in one only)", (long long)d.nan_mismatch);
                printf(" -> %s\n", ok ? "within tolerance" : "DIFFERS");
            }
        }
    }
    free(ba);
    free(bb);
    if (status) goto out;
    int common = n_bit + n_tol + n_diff + mismatch;
    printf("summary: %d tensors in both: %d bitwise equal, %d within tolerance, %d differ, %d shape/dtype mismatches; "
           "%d only in A, %d only in B; %d metadata difference%s; worst max abs diff %.3e, worst max rel diff %.3e\n",
           common, n_bit, n_tol, n_diff, mismatch, only_a, only_b, nmeta, nmeta == 1 ? "" : "s", worst_abs, worst_rel);
    int differ = n_diff || mismatch || only_a || only_b || nmeta;
    char tb[96];
    if (tolerant) snprintf(tb, sizeof tb, "within atol %g, rtol %g", atol, rtol);
    else snprintf(tb, sizeof tb, "bitwise");
    printf("result: %s (%s)\n", differ ? "checkpoints differ" : "equal", tb);
    status = differ ? MP_CKPT_ST_FAIL : MP_CKPT_ST_OK;
out:
    for (int k = 0; k < 2; k++) {
        ckpt_close(r[k]);
        free(dir[k]);
    }
    return status;
}
