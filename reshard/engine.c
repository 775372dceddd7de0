/*
 * reshard/engine.c — the target layout of a mesh, the planner that moves it from a source to a sink
 * in bounded row bands, and the dry-run plan (which source files and bytes each target rank reads).
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/log.h"
#include "layers/llama.h"
#include "reshard/reshard.h"

static const char *const kinds[3] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

mp_code rs_target_layout(const llama_config *cfg, int tp, int dp, int model_only, rs_box **boxes, int *n,
                         mp_err *e) {
    *boxes = NULL;
    *n = 0;
    MP_TRY(llama_config_validate(cfg, e));
    MP_TRY(llama_check_layout(cfg, tp, dp, e));
    int ns = llama_tensor_specs(cfg, NULL, 0);
    llama_tensor_spec *specs = mp_xmalloc(sizeof *specs * (size_t)ns);
    llama_tensor_specs(cfg, specs, ns);
    int nk = model_only ? 1 : 3;
    int64_t cap = (int64_t)tp * dp * ns * nk;
    rs_box *b = mp_xmalloc(sizeof *b * (size_t)(cap + 1));
    int cnt = 0;
    for (int r = 0; r < tp * dp; r++) {
        int tpr = r % tp, dpr = r / tp;
        for (int i = 0; i < ns; i++) {
            llama_placement pl;
            llama_place(cfg, &specs[i], tp, tpr, dp, dpr, &pl);
            int64_t off[2], shape[2];
            if (llama_disk_box(&pl, off, shape) <= 0 || !llama_disk_writer(specs[i].split, tpr)) continue;
            for (int k = 0; k < nk; k++) {
                rs_box *B = &b[cnt++];
                memset(B, 0, sizeof *B);
                B->file_rank = r;
                snprintf(B->name, sizeof B->name, "%s/%s", kinds[k], specs[i].name);
                B->ndim = specs[i].ndim;
                memcpy(B->gshape, specs[i].shape, sizeof B->gshape);
                memcpy(B->off, off, sizeof B->off);
                memcpy(B->shape, shape, sizeof B->shape);
            }
        }
    }
    free(specs);
    *boxes = b;
    *n = cnt;
    return MP_OK;
}

void rs_group_files(rs_box *boxes, int n, int ranks_per_file) {
    assert(ranks_per_file >= 1);
    for (int i = 0; i < n; i++) boxes[i].file_rank = boxes[i].file_rank / ranks_per_file * ranks_per_file;
}

/* Whether box i starts a file (boxes of one file are adjacent). */
static int starts_file(const rs_box *boxes, int i) { return i == 0 || boxes[i].file_rank != boxes[i - 1].file_rank; }

int rs_num_files(const rs_box *boxes, int n) {
    int files = 0;
    for (int i = 0; i < n; i++) files += starts_file(boxes, i);
    return files;
}

/* ------------------------------------------------------------------------------------- run */

typedef struct fill_ctx {
    rs_source *src;
    const rs_box *box;
    const rs_box *next;   /* the box this worker writes after this one (NULL: none) */
    rs_stats *st;
} fill_ctx;

/* ckpt_fill_fn: one row band of a target box, read from the source. */
static mp_code fill_band(void *ctx, const int64_t *off, const int64_t *shape, void *buf, mp_err *e) {
    fill_ctx *f = ctx;
    int64_t bytes = 4 * shape[0] * (f->box->ndim == 2 ? shape[1] : 1);
    if (bytes > f->st->largest_band) f->st->largest_band = bytes;
    mp_code rc = f->src->read(f->src, f->box->name, f->box->ndim, off, shape, buf, e);
    if (rc) {
        mp_err_wrap(e, "reading %s for target rank %d", f->box->name, f->box->file_rank);
        return rc;
    }
    /* the writer asks for consecutive bands of about the same bytes, box after box: let the next
     * band's disk reads overlap the hashing and writing of this one */
    if (!f->src->prefetch) return MP_OK;
    int64_t end = f->box->off[0] + f->box->shape[0];
    const rs_box *nb = f->box;
    int64_t no[2] = {off[0] + shape[0], f->box->ndim == 2 ? off[1] : 0};
    if (no[0] >= end) {
        if (!(nb = f->next)) return MP_OK;
        no[0] = nb->off[0];
        no[1] = nb->ndim == 2 ? nb->off[1] : 0;
        end = nb->off[0] + nb->shape[0];
    }
    int64_t cols = nb->ndim == 2 ? nb->shape[1] : 1, rows = bytes / (4 * cols);
    int64_t ns[2] = {rows < 1 ? 1 : rows, cols};
    if (no[0] + ns[0] > end) ns[0] = end - no[0];
    f->src->prefetch(f->src, nb->name, no, ns);
    return MP_OK;
}

mp_code rs_run(rs_source *src, rs_sink *sink, const rs_box *boxes, int n, int worker, int nworkers, rs_stats *st,
               mp_err *e) {
    assert(worker >= 0 && worker < nworkers);
    double t0 = mp_time_s();
    memset(st, 0, sizeof *st);
    fill_ctx *ctx = mp_xcalloc(sizeof *ctx * (size_t)(n + 1));
    mp_code rc = MP_OK;
    fill_ctx *prev = NULL;   /* boxes are written file by file in rank order, each file's in add order */
    int file = -1;           /* ordinal of B's file among the distinct files (grouped file ranks are not
                              * consecutive: dealing by file_rank % nworkers would leave workers idle) */
    for (int i = 0; i < n; i++) {
        const rs_box *B = &boxes[i];
        file += starts_file(boxes, i);
        if (file % nworkers != worker) continue;
        ctx[i] = (fill_ctx){src, B, NULL, st};
        if (prev) prev->next = B;
        prev = &ctx[i];
        /* an add error is remembered by the sink and fails the commit on every worker */
        if (rc == MP_OK) rc = sink->add(sink, B->file_rank, B->name, B->ndim, B->gshape, B->off, B->shape, fill_band,
                                        &ctx[i], e);
        st->boxes++;
        st->bytes_written += rs_box_bytes(B);
    }
    mp_err ce;
    mp_code crc = sink->commit(sink, &ce);   /* collective: every worker commits, even after a local error */
    if (rc == MP_OK && crc != MP_OK) {
        rc = crc;
        if (e) *e = ce;
    }
    src->io(src, &st->bytes_read, &st->bytes_needed);
    st->seconds = mp_time_s() - t0;
    free(ctx);
    return rc;
}

/* ------------------------------------------------------------------------------------- plan */

typedef struct file_bytes {
    char name[64];
    int64_t bytes, boxes;   /* bytes read from the file, saved boxes of it read (counted per target box) */
} file_bytes;

typedef struct plan_acc {
    file_bytes *f;
    int n, cap;
} plan_acc;

static void plan_cb(void *ctx, const char *file, int64_t bytes) {
    plan_acc *a = ctx;
    for (int i = 0; i < a->n; i++)
        if (!strcmp(a->f[i].name, file)) {
            a->f[i].bytes += bytes;
            a->f[i].boxes++;
            return;
        }
    if (a->n == a->cap) {
        a->cap = a->cap * 2 + 8;
        file_bytes *g = mp_xmalloc(sizeof *g * (size_t)a->cap);
        if (a->n) memcpy(g, a->f, sizeof *g * (size_t)a->n);
        free(a->f);
        a->f = g;
    }
    snprintf(a->f[a->n].name, sizeof a->f[a->n].name, "%s", file);
    a->f[a->n].boxes = 1;
    a->f[a->n++].bytes = bytes;
}

static double mib(int64_t b) { return (double)b / 1048576.0; }

mp_code rs_plan_print(rs_source *src, const rs_box *boxes, int n, int world, int ranks_per_file, size_t max_band,
                      int json, FILE *out, int64_t *read_total, int64_t *write_total, mp_err *e) {
    assert(ranks_per_file >= 1);
    int64_t rt = 0, wt = 0, largest = 0;
    cJSON *root = json ? cJSON_CreateObject() : NULL;
    cJSON *ranks = json ? cJSON_AddArrayToObject(root, "ranks") : NULL;
    mp_code rc = MP_OK;
    for (int r = 0; r < world && rc == MP_OK; r += ranks_per_file) {
        int in_file = world - r < ranks_per_file ? world - r : ranks_per_file;
        plan_acc acc = {0};
        int64_t rr = 0, ww = 0;
        int nb = 0;
        for (int i = 0; i < n && rc == MP_OK; i++) {
            const rs_box *B = &boxes[i];
            if (B->file_rank != r) continue;
            int64_t b = 0;
            rc = src->plan(src, B->name, B->ndim, B->off, B->shape, plan_cb, &acc, &b, e);
            rr += b;
            ww += rs_box_bytes(B);
            int64_t piece = rs_box_bytes(B) < (int64_t)max_band ? rs_box_bytes(B) : (int64_t)max_band;
            if (piece > largest) largest = piece;
            nb++;
        }
        rt += rr;
        wt += ww;
        if (json) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "rank", r);
            if (ranks_per_file > 1) cJSON_AddNumberToObject(o, "ranks_in_file", in_file);
            cJSON_AddNumberToObject(o, "boxes", nb);
            cJSON_AddNumberToObject(o, "write_bytes", (double)ww);
            cJSON_AddNumberToObject(o, "read_bytes", (double)rr);
            cJSON *fs = cJSON_AddObjectToObject(o, "source_files");
            for (int k = 0; k < acc.n; k++) {
                cJSON *fo = cJSON_AddObjectToObject(fs, acc.f[k].name);
                cJSON_AddNumberToObject(fo, "bytes", (double)acc.f[k].bytes);
                cJSON_AddNumberToObject(fo, "boxes", (double)acc.f[k].boxes);
            }
            cJSON_AddItemToArray(ranks, o);
        } else {
            if (in_file > 1) fprintf(out, "target ranks %d-%d (rank_%05d.h5):", r, r + in_file - 1, r);
            else fprintf(out, "target rank %d:", r);
            fprintf(out, " %d boxes, writes %.2f MiB, reads %.2f MiB from", nb, mib(ww), mib(rr));
            if (!acc.n) fprintf(out, " (generated, no files)");
            for (int k = 0; k < acc.n; k++)
                fprintf(out, "%s %s (%lld box reads, %.2f MiB)", k ? "," : "", acc.f[k].name, (long long)acc.f[k].boxes,
                        mib(acc.f[k].bytes));
            fprintf(out, "\n");
        }
        free(acc.f);
    }
    if (rc == MP_OK) {
        if (json) {
            cJSON *t = cJSON_AddObjectToObject(root, "totals");
            cJSON_AddNumberToObject(t, "read_bytes", (double)rt);
            cJSON_AddNumberToObject(t, "write_bytes", (double)wt);
            cJSON_AddNumberToObject(t, "largest_piece_bytes", (double)largest);
            char *txt = cJSON_Print(root);
            fprintf(out, "%s\n", txt);
            free(txt);
        } else {
            fprintf(out, "total: reads %.2f MiB, writes %.2f MiB; largest piece in memory %.2f MiB\n", mib(rt), mib(wt),
                    mib(largest));
        }
    }
    cJSON_Delete(root);
    if (read_total) *read_total = rt;
    if (write_total) *write_total = wt;
    return rc;
}
