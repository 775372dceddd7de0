/*
 * cli/cmd_plot.c — `meshpoint plot RUN --out FILE.png [--force] [--size WxH]`: the curves of a run from
 * RUN/metrics.jsonl, drawn with PLplot (the C plotting library Debian ships, cairo PNG driver).
 *
 * Three panels against the step: the training loss with the validation loss as points, the learning
 * rate, and the gradient norm (on a log scale when it spans more than a factor 20, as early in a run). The steps of
 * the complete checkpoints under RUN/checkpoints (ckpt_list) are marked by dashed vertical lines in
 * every panel. Steps whose update was skipped for a non-finite gradient norm have grad_norm null and
 * are left out of that panel. A resumed run appends to metrics.jsonl, so the lines are read in order
 * and a step seen again (a rewind's abandoned lines are moved aside, never left here) keeps its last
 * value.
 *
 * The image is written to FILE.png.tmp.<pid> (the fs layer's temp-file convention), fsynced and renamed durably over FILE.png (mp_fs_rename_durable),
 * which must not exist unless --force (a user's file is never overwritten unasked). Exit 2 on bad usage, a missing or empty metrics file, or
 * a line that is not JSON (named by its number); 1 when PLplot cannot write the image.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <plplot.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"

/* One series of (step, value) points. */
typedef struct series {
    PLFLT *x, *y;
    int n, cap;
} series;

/* The curves of a run. */
typedef struct run_curves {
    series loss, val, lr, norm;
    int64_t *ckpt_steps;
    int nckpt;
} run_curves;

/* Appends (x, y) to s (growing it with the checked allocator). */
static void series_add(series *s, double x, double y) {
    if (s->n == s->cap) {
        int cap = s->cap ? 2 * s->cap : 256;
        s->x = mp_realloc(s->x, sizeof(PLFLT) * (size_t)s->cap, sizeof(PLFLT) * (size_t)cap, MP_MEM_OTHER);
        s->y = mp_realloc(s->y, sizeof(PLFLT) * (size_t)s->cap, sizeof(PLFLT) * (size_t)cap, MP_MEM_OTHER);
        s->cap = cap;
    }
    s->x[s->n] = x;
    s->y[s->n] = y;
    s->n++;
}

static void series_free(series *s) {
    mp_free_acct(s->x, sizeof(PLFLT) * (size_t)s->cap, MP_MEM_OTHER);
    mp_free_acct(s->y, sizeof(PLFLT) * (size_t)s->cap, MP_MEM_OTHER);
}

/* The number field `key` of o into *v; 0 when absent or not a finite number (null grad norms). */
static int num(const cJSON *o, const char *key, double *v) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble)) return 0;
    *v = it->valuedouble;
    return 1;
}

/* Reads RUN/metrics.jsonl into c. MP_EINPUT naming the file (and line) when it is missing, holds a line
 * that is not a JSON object, or holds no step. */
static mp_code read_metrics(const char *run, run_curves *c, mp_err *err) {
    char *path = mp_fs_join(run, "metrics.jsonl");
    FILE *f = fopen(path, "r");
    mp_code rc = MP_OK;
    if (!f) {
        rc = mp_err_set(err, MP_EINPUT, "cannot read %s: %s (is %s a run directory?)", path, strerror(errno), run);
        free(path);
        return rc;
    }
    char *line = NULL;
    size_t cap = 0;
    int lineno = 0;
    while (!rc && getline(&line, &cap, f) > 0) {
        lineno++;
        if (line[strspn(line, " \t\r\n")] == '\0') continue;
        cJSON *o = cJSON_Parse(line);
        double step, v;
        if (!cJSON_IsObject(o) || !num(o, "step", &step))
            rc = mp_err_set(err, MP_EINPUT, "%s: line %d is not a metrics object with a step", path, lineno);
        else if (num(o, "val_loss", &v)) series_add(&c->val, step, v);
        else {
            if (num(o, "loss", &v)) series_add(&c->loss, step, v);
            if (num(o, "lr", &v)) series_add(&c->lr, step, v);
            if (num(o, "grad_norm", &v) && v > 0) series_add(&c->norm, step, v);
        }
        cJSON_Delete(o);
    }
    free(line);
    fclose(f);
    if (!rc && c->loss.n == 0) rc = mp_err_set(err, MP_EINPUT, "%s holds no training step", path);
    free(path);
    return rc;
}

/* min and max of s's y (with a margin when they are equal). */
static void y_range(const series *a, const series *b, double *lo, double *hi) {
    *lo = DBL_MAX;
    *hi = -DBL_MAX;
    const series *s[2] = {a, b};
    for (int k = 0; k < 2; k++)
        for (int i = 0; s[k] && i < s[k]->n; i++) {
            if (s[k]->y[i] < *lo) *lo = s[k]->y[i];
            if (s[k]->y[i] > *hi) *hi = s[k]->y[i];
        }
    if (*lo > *hi) *lo = 0, *hi = 1;
    double pad = (*hi - *lo) * 0.05;
    if (pad == 0) pad = fabs(*hi) * 0.05 + 1e-12;
    *lo -= pad;
    *hi += pad;
}

/* Dashed vertical lines at the checkpoint steps, across [lo, hi]. */
static void mark_checkpoints(const run_curves *c, double lo, double hi) {
    pllsty(2);
    plcol0(7);
    for (int i = 0; i < c->nckpt; i++) pljoin((PLFLT)c->ckpt_steps[i], lo, (PLFLT)c->ckpt_steps[i], hi);
    pllsty(1);
}

/* One panel: axes over [x0, x1] x [lo, hi] (log10 of y when logy), the line s and the points p. */
static void panel(const run_curves *c, double x0, double x1, const series *s, const series *p, int logy,
                  const char *ylabel, const char *title) {
    double lo, hi;
    series ls = {0};
    if (logy) {
        for (int i = 0; i < s->n; i++) series_add(&ls, s->x[i], log10(s->y[i]));
        s = &ls;
    }
    y_range(s, p, &lo, &hi);
    plcol0(1);
    plenv(x0, x1, lo, hi, 0, logy ? 20 : 0);
    plcol0(1);
    pllab("step", ylabel, title);
    mark_checkpoints(c, lo, hi);
    plcol0(9);
    plwidth(2);
    if (s->n) plline(s->n, s->x, s->y);
    plwidth(1);
    if (p && p->n) {
        plcol0(3);
        plpoin(p->n, p->x, p->y, 17);
    }
    series_free(&ls);
}

/* Draws the three panels into the PNG at path (w x h pixels). MP_EIO when PLplot has no PNG driver. */
static mp_code draw(const run_curves *c, const char *path, int w, int h, mp_err *err) {
    PLINT ndev = 64;
    const char *menu_arr[64], *devs_arr[64], **menu = menu_arr, **devs = devs_arr;
    plgFileDevs(&menu, &devs, &ndev);
    int have = 0;
    for (int i = 0; i < ndev; i++) have |= !strcmp(devs[i], "pngcairo");
    if (!have) return mp_err_set(err, MP_EIO, "PLplot has no pngcairo driver (install plplot-driver-cairo)");
    double x0 = c->loss.x[0], x1 = c->loss.x[c->loss.n - 1];
    for (int i = 0; i < c->val.n; i++) x1 = c->val.x[i] > x1 ? c->val.x[i] : x1;
    if (x1 <= x0) x1 = x0 + 1;
    char geometry[64];
    snprintf(geometry, sizeof geometry, "%dx%d", w, h);
    plsdev("pngcairo");
    plsfnam(path);
    plsetopt("geometry", geometry);
    plscolbg(255, 255, 255);
    plscol0(1, 0, 0, 0);      /* axes and labels: black */
    plscol0(9, 31, 119, 180); /* curves: blue */
    plscol0(3, 214, 39, 40);  /* validation points: red */
    plscol0(7, 150, 150, 150);/* checkpoint marks: grey */
    plssub(1, 3);
    plinit();
    panel(c, x0, x1, &c->loss, &c->val, 0, "loss", "train loss (line), validation loss (points); checkpoints dashed");
    panel(c, x0, x1, &c->lr, NULL, 0, "learning rate", "learning rate");
    double lo = DBL_MAX, hi = 0;   /* log scale only when the norm spans more than a decade or so */
    for (int i = 0; i < c->norm.n; i++) {
        lo = c->norm.y[i] < lo ? c->norm.y[i] : lo;
        hi = c->norm.y[i] > hi ? c->norm.y[i] : hi;
    }
    int logy = c->norm.n && hi > 20 * lo;
    panel(c, x0, x1, &c->norm, NULL, logy, "grad norm", logy ? "gradient norm (log scale)" : "gradient norm");
    plend();
    return MP_OK;
}

/* Parses "WxH" into *w, *h (each 200..8000). */
static mp_code parse_size(const char *s, int *w, int *h, mp_err *err) {
    char tail;
    if (sscanf(s, "%dx%d%c", w, h, &tail) != 2 || *w < 200 || *h < 200 || *w > 8000 || *h > 8000)
        return mp_err_set(err, MP_EINPUT, "--size: \"%s\" is not WIDTHxHEIGHT in pixels (200..8000 each)", s);
    return MP_OK;
}

int mp_cmd_plot(int argc, char **argv) {
    const char *out = NULL, *size = "1200x1200";
    int force = 0, npos = 0, help = 0, w, h;
    const mp_arg flags[] = {
        {"out", MP_ARG_STRING, &out, "FILE.png", "the image to write"},
        {"size", MP_ARG_STRING, &size, "WxH", "image size in pixels"},
        {"force", MP_ARG_SWITCH, &force, NULL, "replace an existing --out file"},
        {0}};
    mp_err err;
    mp_err_clear(&err);
    run_curves c = {0};
    char *tmp = NULL, *root = NULL;
    int status = mp_exit_status(MP_EINPUT);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) goto fail;
    if (help) {
        mp_args_help(stdout, "meshpoint plot RUN --out FILE.png [options]",
                     "Draws the training and validation loss, the learning rate and the gradient norm of a run against "
                     "the step from RUN/metrics.jsonl, with its checkpoint steps marked (PLplot, PNG).",
                     flags);
        return mp_exit_status(MP_OK);
    }
    if (npos != 1 || !out) { mp_err_set(&err, MP_EINPUT, "expected one RUN directory and --out FILE.png (see --help)"); goto fail; }
    if (parse_size(size, &w, &h, &err)) goto fail;
    if (!force && access(out, F_OK) == 0) {
        mp_err_set(&err, MP_EINPUT, "--out %s exists (--force replaces it)", out);
        goto fail;
    }
    if (read_metrics(argv[0], &c, &err)) goto fail;
    root = mp_fs_join(argv[0], "checkpoints");
    if (ckpt_list(root, &c.ckpt_steps, &c.nckpt, &err)) goto fail;
    tmp = mp_fs_tmp_name(out);   /* the fs layer's temp-file convention: OUT.tmp.<pid> */
    status = mp_exit_status(MP_ECHECK);
    FILE *probe = fopen(tmp, "w");   /* PLplot exits the process on a file it cannot open: check first */
    if (!probe || fclose(probe)) {
        mp_err_set(&err, MP_EIO, "cannot write %s: %s", tmp, strerror(errno));
        goto fail;
    }
    if (draw(&c, tmp, w, h, &err)) goto fail;
    if (access(tmp, F_OK) != 0) {   /* PLplot says nothing when it wrote no file */
        mp_err_set(&err, MP_EIO, "writing %s: %s", out, strerror(errno));
        goto fail;
    }
    if (mp_fs_fsync_path(tmp, 0, &err) || mp_fs_rename_durable(tmp, out, NULL, &err)) goto fail;
    printf("wrote %s: %d steps, %d validation points, %d checkpoints\n", out, c.loss.n, c.val.n, c.nckpt);
    status = mp_exit_status(MP_OK);
    goto done;
fail:
    mp_log_fail("%s", err.msg);
    if (tmp) unlink(tmp);
done:
    free(tmp);
    free(root);
    free(c.ckpt_steps);
    series_free(&c.loss);
    series_free(&c.val);
    series_free(&c.lr);
    series_free(&c.norm);
    return status;
}
