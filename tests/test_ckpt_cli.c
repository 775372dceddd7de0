/*
 * tests/test_ckpt_cli.c — `meshpoint ckpt ls|show|verify|diff` end to end, on checkpoints written by the
 * real binary (`meshpoint train` on 1 process and under mpiexec on tp 2 x dp 2) and on checkpoints this
 * test derives from them through the checkpoint library (a tensor dropped, added, reshaped, one element
 * nudged; metadata dropped) or writes from scratch (bf16 / i32 / 3-d tensors with known values).
 *
 * Expected values come from elsewhere than the code under test: statistics and shard maps from h5py
 * reading index.h5 (its tables and virtual views) with numpy, sizes from stat(), byte counts from the
 * model config (layers/llama_config.h), damage from flipping a byte inside a dataset found through h5py's
 * ds.id.get_offset(). Chunked streaming is exercised by MP_FAULT=ckpt_chunk_bytes:100 (tensors cut into many
 * row and column pieces) and must give the same results as whole-tensor chunks.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "core/comm.h"
#include "layers/llama_config.h"
#include "tests/testutil.h"

#define PY "/usr/bin/python3"
/* Ranks under mpiexec: no leak report at exit in the sanitizer build — Open MPI's runtime keeps
 * allocations until exit, unsymbolised inside the ranks, so tests/lsan.supp cannot name them. Address
 * and UB checks stay on; single-process runs keep leak checking. */
#define MPI_ENV "OPENBLAS_NUM_THREADS=1 OMPI_MCA_mpi_yield_when_idle=1 ASAN_OPTIONS=$ASAN_OPTIONS:detect_leaks=0 "

/* ---------------------------------------------------------------------------------------- helpers */

static char *fmt(const char *f, ...) __attribute__((format(printf, 1, 2)));
static char *fmt(const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *s = NULL;
    cr_assert(vasprintf(&s, f, ap) >= 0);
    va_end(ap);
    return s;
}

/* Runs a shell command; returns its status, *out (if non-NULL) its stdout+stderr. */
static int run(char **out, const char *f, ...) __attribute__((format(printf, 2, 3)));
static int run(char **out, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *cmd = NULL;
    cr_assert(vasprintf(&cmd, f, ap) >= 0);
    va_end(ap);
    char *o = NULL;
    int rc = tu_run(cmd, &o);
    free(cmd);
    if (out) *out = o;
    else free(o);
    return rc;
}

/* Runs a shell command with stderr dropped (for --json output); returns its status, *out its stdout. */
static int capture(char **out, const char *f, ...) __attribute__((format(printf, 2, 3)));
static int capture(char **out, const char *f, ...) {
    va_list ap;
    va_start(ap, f);
    char *cmd = NULL, *full = NULL;
    cr_assert(vasprintf(&cmd, f, ap) >= 0);
    va_end(ap);
    cr_assert(asprintf(&full, "{ %s ; } 2>/dev/null", cmd) >= 0);
    FILE *p = popen(full, "r");
    cr_assert(p);
    size_t cap = 1 << 16, len = 0, n;
    char *buf = malloc(cap);
    while ((n = fread(buf + len, 1, cap - len - 1, p)) > 0) {
        len += n;
        if (cap - len < 2) buf = realloc(buf, cap *= 2);
    }
    buf[len] = '\0';
    int st = pclose(p);
    free(cmd);
    free(full);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* `meshpoint ckpt ARGS`, stdout only. */
static int ckpt_json(char **out, const char *args) { return capture(out, "%s ckpt %s", tu_bin(), args); }

/* The line of text containing needle (malloc'd), or NULL. */
static char *line_with(const char *text, const char *needle) {
    const char *p = strstr(text, needle);
    if (!p) return NULL;
    const char *a = p, *b = p;
    while (a > text && a[-1] != '\n') a--;
    while (*b && *b != '\n') b++;
    return strndup(a, (size_t)(b - a));
}

/* A token file made by `meshpoint data` from a text file in dir; returns its path. */
static char *make_data(const char *dir) {
    char *txt = fmt("%s/corpus.txt", dir);
    FILE *f = fopen(txt, "w");
    cr_assert(f);
    for (int i = 0; i < 200; i++)
        fprintf(f, "Line %d: checkpoints carry their own layout, so any mesh can read them back.\n", i);
    fclose(f);
    char *out = NULL;
    int rc = run(&out, "%s data --out %s/tok --name t %s", tu_bin(), dir, txt);
    cr_assert_eq(rc, 0, "meshpoint data failed: %s", out);
    free(out);
    free(txt);
    return fmt("%s/tok/t_train.bin", dir);
}

static const char *tiny_config(void) {
    static char path[1024];
    snprintf(path, sizeof path, "%s/tests/configs/cli_tiny.json", tu_src());
    return path;
}

/* Trains the tiny config on one process (np == 1) or under mpiexec -np np with mesh flags into run. */
static void train(const char *data, const char *run_dir, int np, const char *extra) {
    char *out = NULL;
    int rc;
    if (np == 1)
        rc = run(&out, "%s train --config %s --train-data %s --run-dir %s --log-every 0 %s", tu_bin(), tiny_config(),
                 data, run_dir, extra);
    else
        rc = run(&out, MPI_ENV "mpiexec --allow-run-as-root --oversubscribe -np %d %s train --config %s --train-data %s "
                               "--run-dir %s --log-every 0 %s",
                 np, tu_bin(), tiny_config(), data, run_dir, extra);
    cr_assert_eq(rc, 0, "train (np %d) failed: %s", np, out);
    free(out);
}

static int64_t file_size(const char *p) {
    struct stat st;
    cr_assert_eq(stat(p, &st), 0, "stat %s", p);
    return (int64_t)st.st_size;
}

/* Bytes of every tensor of a training checkpoint of the tiny config: 3 f32 copies of the parameters. */
static int64_t tiny_ckpt_bytes(void) {
    llama_config mc;
    mp_err e;
    llama_config_default(&mc);
    cr_assert_eq(llama_config_load(tiny_config(), &mc, NULL, &e), MP_OK, "%s", e.msg);
    return 3 * llama_config_num_params(&mc) * 4;
}

/* Writes an inline Python program to dir/name and returns its path. */
static char *write_py(const char *dir, const char *name, const char *src) {
    char *p = fmt("%s/%s", dir, name);
    tu_write_file(p, src);
    return p;
}

/* Parses JSON text, failing the test if it does not parse. */
static cJSON *parse(const char *text) {
    cJSON *j = cJSON_Parse(text);
    cr_assert(j, "not JSON: %.2000s", text);
    return j;
}

static double jnum(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no number \"%s\"", k);
    return v->valuedouble;
}

static void assert_close(double got, double want, double rtol, const char *what, const char *name) {
    double tol = rtol * fmax(fabs(want), 1e-30);
    cr_assert(fabs(got - want) <= tol, "%s of %s: got %.17g, want %.17g", what, name, got, want);
}

/* ------------------------------------------------------- deriving checkpoints through the library */

typedef struct copy_opts {
    const char *drop;         /* tensor left out */
    const char *reshape;      /* tensor written with one more row (1-d: one more element) */
    const char *nudge;        /* tensor whose element 3 is moved to the next float */
    const char *extra;        /* f32 tensor [32] added */
    const char *drop_meta;    /* metadata key left out */
    const char *bad_step;     /* replaces the "step" metadata */
    int version;              /* the copy's format_version (0: the default) */
} copy_opts;

static double nudge_delta;   /* |new - old| of the element copy_ckpt nudged */

/* Copies checkpoint src into root (as its step) through ckpt_read / ckpt_save with the changes in o.
 * Returns the new checkpoint's directory. */
static char *copy_ckpt(const char *src, const char *root, const copy_opts *o) {
    mp_err e;
    ckpt_reader *r = NULL;
    cr_assert_eq(ckpt_open(&r, src, &e), MP_OK, "%s", e.msg);
    ckpt_save *s = NULL;
    ckpt_save_opts so = {.format_version = o->version};
    cr_assert_eq(ckpt_save_begin(&s, mp_comm_self(), root, ckpt_reader_step(r), &so, &e), MP_OK, "%s", e.msg);
    int nt = ckpt_num_tensors(r);
    void **bufs = calloc((size_t)nt + 1, sizeof *bufs);
    for (int i = 0; i < nt; i++) {
        const ckpt_tensor_info *t = ckpt_tensor_at(r, i);
        if (o->drop && !strcmp(t->name, o->drop)) continue;
        int64_t n = 1, off[CKPT_MAX_DIMS] = {0}, shape[CKPT_MAX_DIMS];
        for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
        memcpy(shape, t->shape, sizeof shape);
        int64_t row = n / t->shape[0];
        bufs[i] = calloc((size_t)(n + row), sizeof(float));
        cr_assert_eq(t->dtype, MP_F32);
        cr_assert_eq(ckpt_read(r, t->name, off, t->shape, bufs[i], &e), MP_OK, "%s", e.msg);
        if (o->nudge && !strcmp(t->name, o->nudge)) {
            float *f = bufs[i];
            float old = f[3];
            f[3] = nextafterf(f[3], INFINITY);
            nudge_delta = (double)f[3] - (double)old;
        }
        if (o->reshape && !strcmp(t->name, o->reshape)) shape[0]++;
        cr_assert_eq(ckpt_save_add(s, t->name, t->dtype, t->ndim, shape, off, shape, bufs[i], &e), MP_OK, "%s", e.msg);
    }
    static float extra[32];
    for (int i = 0; i < 32; i++) extra[i] = 1.0f;
    if (o->extra) {
        int64_t g[1] = {32}, off[1] = {0};
        cr_assert_eq(ckpt_save_add(s, o->extra, MP_F32, 1, g, off, g, extra, &e), MP_OK, "%s", e.msg);
    }
    for (int i = 0; i < ckpt_num_meta(r); i++) {
        const char *k = ckpt_meta_key(r, i), *v = ckpt_meta_value(r, i);
        if (o->drop_meta && !strcmp(k, o->drop_meta)) continue;
        if (o->bad_step && !strcmp(k, "step")) v = o->bad_step;
        cr_assert_eq(ckpt_save_meta(s, k, v, &e), MP_OK, "%s", e.msg);
    }
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    char *dir = strdup(ckpt_save_dir(s));
    ckpt_save_free(s);
    for (int i = 0; i < nt; i++) free(bufs[i]);
    free(bufs);
    ckpt_close(r);
    return dir;
}

/* Flips one bit of the byte at offset k inside dataset ds of rank file path (found through h5py). */
static void flip_byte(const char *dir, const char *path, const char *ds, int k) {
    char *py = write_py(dir, "flip.py",
                        "import sys, h5py\n"
                        "p, ds, k = sys.argv[1], sys.argv[2], int(sys.argv[3])\n"
                        "with h5py.File(p, 'r') as f:\n"
                        "    off = f[ds].id.get_offset()\n"
                        "assert off is not None, 'dataset not contiguous'\n"
                        "with open(p, 'r+b') as g:\n"
                        "    g.seek(off + k); b = g.read(1); g.seek(off + k); g.write(bytes([b[0] ^ 0x10]))\n");
    char *out = NULL;
    int rc = run(&out, PY " %s %s %s %d", py, path, ds, k);
    cr_assert_eq(rc, 0, "flip failed: %s", out);
    free(out);
    free(py);
}

/* ----------------------------------------------------------------------------------------------- ls */

Test(ckpt_cli, ls_lists_steps_latest_and_incomplete, .timeout = 120) {
    char *dir = tu_mkdtemp("ckls");
    char *data = make_data(dir);
    char *runp = fmt("%s/run", dir), *root = fmt("%s/run/checkpoints", dir);
    train(data, runp, 1, "--steps 4 --ckpt-every 2");
    char *partial = fmt("%s/step_00000006.partial", root);
    cr_assert_eq(mkdir(partial, 0755), 0);
    char *junk = fmt("%s/rank_00000.h5", partial);
    tu_write_file(junk, "0123456789");

    char *out = NULL;
    int rc = run(&out, "%s ckpt ls %s", tu_bin(), root);
    cr_assert_eq(rc, 0, "%s", out);
    char *l2 = line_with(out, "step_00000002"), *l4 = line_with(out, "step_00000004"), *lp = line_with(out, "step_00000006.partial");
    cr_assert(l2 && l4 && lp, "%s", out);
    cr_assert(strstr(l4, "<- latest"), "%s", out);
    cr_assert(!strstr(l2, "<- latest"), "%s", out);
    cr_assert(strstr(l2, "tp 1 x dp 1"), "%s", out);
    cr_assert(strstr(lp, "incomplete"), "%s", out);
    /* sizes: the files on disk */
    int64_t want2 = 0;
    for (const char *f = "index.h5"; f; f = strcmp(f, "index.h5") ? NULL : "rank_00000.h5") {
        char *p = fmt("%s/step_00000002/%s", root, f);
        want2 += file_size(p);
        free(p);
    }
    char *vp = fmt("%s/step_00000002/view.h5", root);
    want2 += file_size(vp);   /* format v3: the views' file */
    free(vp);
    char *bytes = fmt("(%lld bytes)", (long long)want2);
    cr_assert(strstr(l2, bytes), "want %s in: %s", bytes, l2);

    /* JSON; and a run directory works as ROOT */
    char *js = NULL;
    char *args = fmt("ls --json %s", runp);
    cr_assert_eq(ckpt_json(&js, args), 0, "%s", js);
    cJSON *j = parse(js);
    const cJSON *cks = cJSON_GetObjectItemCaseSensitive(j, "checkpoints");
    cr_assert_eq(cJSON_GetArraySize(cks), 2);
    const cJSON *c0 = cJSON_GetArrayItem(cks, 0), *c1 = cJSON_GetArrayItem(cks, 1);
    cr_assert_eq(jnum(c0, "step"), 2);
    cr_assert_eq(jnum(c1, "step"), 4);
    cr_assert_eq(jnum(c0, "tp"), 1);
    cr_assert_eq(jnum(c0, "dp"), 1);
    cr_assert_eq((int64_t)jnum(c0, "bytes"), want2);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(c0, "latest")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c1, "latest")));
    const cJSON *inc = cJSON_GetObjectItemCaseSensitive(j, "incomplete");
    cr_assert_eq(cJSON_GetArraySize(inc), 1);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(inc, 0), "dir")->valuestring, "step_00000006.partial");
    cr_assert_eq(jnum(cJSON_GetArrayItem(inc, 0), "bytes"), 10);
    cJSON_Delete(j);
    free(js);

    /* `latest` is read, not assumed: point it at step 2 */
    char *lat = fmt("%s/latest", root);
    tu_write_file(lat, "step_00000002\n");
    free(out);
    rc = run(&out, "%s ckpt ls %s", tu_bin(), root);
    cr_assert_eq(rc, 0, "%s", out);
    free(l2);
    free(l4);
    l2 = line_with(out, "step_00000002  ");
    l4 = line_with(out, "step_00000004  ");
    cr_assert(l2 && l4, "%s", out);
    cr_assert(strstr(l2, "<- latest") && !strstr(l4, "<- latest"), "%s", out);
    cr_assert(strstr(out, "newest complete (what --resume loads): step_00000004"), "%s", out);

    /* a step directory without its index is incomplete, not listed as a checkpoint */
    char *idx = fmt("%s/step_00000004/index.h5", root);
    cr_assert_eq(unlink(idx), 0);
    free(out);
    rc = run(&out, "%s ckpt ls %s", tu_bin(), root);
    cr_assert_eq(rc, 0, "%s", out);
    char *li = line_with(out, "step_00000004");
    cr_assert(li && strstr(li, "incomplete"), "%s", out);

    /* bad usage and missing input */
    cr_assert_eq(run(NULL, "%s ckpt ls", tu_bin()), 2);
    cr_assert_eq(run(NULL, "%s ckpt ls %s/nope", tu_bin(), dir), 2);
    cr_assert_eq(run(NULL, "%s ckpt ls %s --bogus", tu_bin(), root), 2);
    cr_assert_eq(run(NULL, "%s ckpt ls %s/step_00000002", tu_bin(), root), 2);
    run(NULL, "rm -rf %s", dir);
}

/* --------------------------------------------------------------------------------------------- show */

/* numpy's statistics of every tensor of a checkpoint, read through index.h5's virtual views. */
static const char *stats_py =
    "import sys, json, h5py, numpy as np\n"
    "f = h5py.File(sys.argv[1] + '/index.h5', 'r')\n"
    "out = {}\n"
    "for row in f['layout/tensors'][...]:\n"
    "    n = row['name'].decode()\n"
    "    x = f['view/' + n].astype('f4')[...].astype(np.float64).ravel()\n"
    "    out[n] = [x.min(), x.max(), x.mean(), x.std(), float(np.sqrt((x * x).sum()))]\n"
    "print(json.dumps(out))\n";

/* Checks `show --stats --json` of dir against numpy (env: extra environment, e.g. a tiny chunk size). */
static void check_stats(const char *dir, const char *ck, const char *env) {
    char *py = write_py(dir, "stats.py", stats_py), *pyout = NULL;
    int rc = run(&pyout, PY " %s %s", py, ck);
    cr_assert_eq(rc, 0, "%s", pyout);
    cJSON *want = parse(pyout);
    char *js = NULL, *args = fmt("show --stats --json %s", ck);
    rc = capture(&js, "%s %s ckpt %s", env, tu_bin(), args);
    cr_assert_eq(rc, 0, "%s", js);
    cJSON *got = parse(js);
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(got, "tensors");
    cr_assert_eq(cJSON_GetArraySize(ts), cJSON_GetArraySize(want));
    int n = 0;
    for (const cJSON *t = ts->child; t; t = t->next, n++) {
        const char *name = cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring;
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(want, name), *s = cJSON_GetObjectItemCaseSensitive(t, "stats");
        cr_assert(w && s, "%s", name);
        cr_assert_eq(jnum(s, "min"), cJSON_GetArrayItem(w, 0)->valuedouble, "min of %s: %.17g vs %.17g", name,
                     jnum(s, "min"), cJSON_GetArrayItem(w, 0)->valuedouble);
        cr_assert_eq(jnum(s, "max"), cJSON_GetArrayItem(w, 1)->valuedouble, "max of %s: %.17g vs %.17g", name,
                     jnum(s, "max"), cJSON_GetArrayItem(w, 1)->valuedouble);
        /* mean can be ~0 relative to the values: compare it on the scale of the std */
        double sd = cJSON_GetArrayItem(w, 3)->valuedouble;
        cr_assert(fabs(jnum(s, "mean") - cJSON_GetArrayItem(w, 2)->valuedouble) <= 1e-9 * fmax(sd, 1e-30) + 1e-15,
                  "mean of %s: %.17g vs %.17g", name, jnum(s, "mean"), cJSON_GetArrayItem(w, 2)->valuedouble);
        assert_close(jnum(s, "std"), sd, 1e-9, "std", name);
        assert_close(jnum(s, "l2"), cJSON_GetArrayItem(w, 4)->valuedouble, 1e-9, "l2", name);
        cr_assert_eq(jnum(s, "nonfinite"), 0);
        if (!strncmp(name, "optim/exp_avg_sq/", 17)) cr_assert_geq(jnum(s, "min"), 0, "%s", name);
    }
    cr_assert_gt(n, 0);
    cJSON_Delete(want);
    cJSON_Delete(got);
    free(js);
    free(pyout);
    free(py);
    free(args);
}

Test(ckpt_cli, show_prints_config_tensors_and_stats, .timeout = 120) {
    char *dir = tu_mkdtemp("ckshow");
    char *data = make_data(dir);
    char *runp = fmt("%s/run", dir);
    train(data, runp, 1, "--steps 4 --ckpt-every 2");
    char *ck = fmt("%s/checkpoints/step_00000002", runp);
    char *out = NULL;
    int rc = run(&out, "%s ckpt show %s --tensors", tu_bin(), ck);
    cr_assert_eq(rc, 0, "%s", out);
    char *l;
    cr_assert((l = line_with(out, "step  ")) && strstr(l, " 2"), "%s", out);
    cr_assert((l = line_with(out, "mesh  ")) && strstr(l, "tp 1 x dp 1"), "%s", out);
    cr_assert((l = line_with(out, "hidden_size")) && strstr(l, " 32"), "%s", out);
    cr_assert((l = line_with(out, "num_hidden_layers")) && strstr(l, " 2"), "%s", out);
    cr_assert((l = line_with(out, "num_key_value_heads")) && strstr(l, " 2"), "%s", out);
    cr_assert((l = line_with(out, "format ")) && strstr(l, "meshpoint-checkpoint v3"), "%s", out);   /* Llama: v3 */
    cr_assert((l = line_with(out, "family ")) && strstr(l, " llama (LlamaForCausalLM)"), "%s", out);
    cr_assert((l = line_with(out, "head_dim ")) && strstr(l, " 8"), "%s", out);
    cr_assert((l = line_with(out, "sliding_window ")) && strstr(l, " none"), "%s", out);
    cr_assert((l = line_with(out, "q/k/v biases ")) && strstr(l, " no"), "%s", out);
    cr_assert((l = line_with(out, "q/k norm ")) && strstr(l, " no"), "%s", out);
    cr_assert((l = line_with(out, "data cursor")) && strstr(l, "pos 128"), "%s", out);   /* 2 steps x 4 x 16 */
    cr_assert((l = line_with(out, "train config")) && strstr(l, "seq_len 16"), "%s", out);
    cr_assert((l = line_with(out, "optimizer")) && strstr(l, "adamw") && strstr(l, "t 2"), "%s", out);
    cr_assert(line_with(out, "lr schedule"), "%s", out);
    l = line_with(out, "model/model.layers.1.mlp.down_proj.weight ");
    cr_assert(l && strstr(l, "f32") && strstr(l, "[32, 64]") && strstr(l, " 8192"), "%s", out);
    l = line_with(out, "optim/exp_avg_sq/model.norm.weight ");
    cr_assert(l && strstr(l, "[32]") && strstr(l, " 128"), "%s", out);
    char *total = fmt("total: 63 tensors, %lld bytes", (long long)tiny_ckpt_bytes());
    cr_assert(strstr(out, total), "want \"%s\" in %s", total, out);
    free(out);

    /* ROOT means the newest checkpoint; the run directory too */
    rc = run(&out, "%s ckpt show %s/checkpoints", tu_bin(), runp);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert((l = line_with(out, "step  ")) && strstr(l, " 4"), "%s", out);
    free(out);

    /* --json parses and says the same */
    char *js = NULL, *args = fmt("show --json --tensors %s", runp);
    cr_assert_eq(ckpt_json(&js, args), 0, "%s", js);
    cJSON *j = parse(js);
    cr_assert_eq(jnum(j, "step"), 4);
    cr_assert_eq(jnum(j, "format_version"), 3);
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(j, "model");
    cr_assert_str_eq(cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(jm, "family")), "llama");
    cr_assert_eq(jnum(jm, "head_dim"), 8);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(jm, "sliding_window")), "%s", js);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(jm, "qkv_bias")), "%s", js);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(jm, "qk_norm")), "%s", js);
    cr_assert_eq(jnum(cJSON_GetObjectItemCaseSensitive(j, "mesh"), "tp"), 1);
    cr_assert_eq(jnum(cJSON_GetObjectItemCaseSensitive(j, "model_config"), "hidden_size"), 32);
    cr_assert_eq(jnum(cJSON_GetObjectItemCaseSensitive(j, "data_cursor"), "pos"), 256);
    cr_assert_eq(jnum(j, "tensor_bytes"), (double)tiny_ckpt_bytes());
    const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tensors");
    cr_assert_eq(cJSON_GetArraySize(ts), 63);
    for (const cJSON *t = ts->child; t; t = t->next) {
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(t, "shape");
        double n = 1;
        for (const cJSON *d = sh->child; d; d = d->next) n *= d->valuedouble;
        cr_assert_eq(jnum(t, "bytes"), 4 * n);
        cr_assert_eq(jnum(t, "nboxes"), 1);
    }
    cJSON_Delete(j);
    free(js);

    /* statistics against numpy, with whole-tensor chunks and with tiny ones */
    check_stats(dir, ck, "");
    check_stats(dir, ck, "MP_FAULT=ckpt_chunk_bytes:100");

    cr_assert_eq(run(NULL, "%s ckpt show", tu_bin()), 2);
    cr_assert_eq(run(NULL, "%s ckpt show %s/missing", tu_bin(), dir), 2);
    cr_assert_eq(run(NULL, "%s ckpt show %s --stat", tu_bin(), ck), 2);
    cr_assert_eq(run(NULL, "%s ckpt show %s", tu_bin(), dir), 2);   /* no checkpoint there */
    run(NULL, "rm -rf %s", dir);
}

/* A checkpoint written here with known values: bf16 3-d, i32 and f32 tensors split into boxes. */
Test(ckpt_cli, show_stats_of_known_values_any_dtype, .timeout = 60) {
    char *dir = tu_mkdtemp("ckknown");
    char *root = fmt("%s/ck", dir);
    mp_err e;
    ckpt_save *s = NULL;
    cr_assert_eq(ckpt_save_begin(&s, mp_comm_self(), root, 7, NULL, &e), MP_OK, "%s", e.msg);
    /* bf16 [5, 7, 3], values k/8 - 6 (exact in bf16) for element k; saved as boxes of rows 0..1 and 2..4 */
    static uint16_t h[105];
    for (int k = 0; k < 105; k++) h[k] = mp_f32_to_bf16((float)k / 8.0f - 6.0f);
    int64_t g3[3] = {5, 7, 3}, o0[3] = {0, 0, 0}, s0[3] = {2, 7, 3}, o1[3] = {2, 0, 0}, s1[3] = {3, 7, 3};
    cr_assert_eq(ckpt_save_add(s, "w/bf", MP_BF16, 3, g3, o0, s0, h, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_save_add(s, "w/bf", MP_BF16, 3, g3, o1, s1, h + 42, &e), MP_OK, "%s", e.msg);
    /* i32 [1000]: k - 500 */
    static int32_t iv[1000];
    for (int k = 0; k < 1000; k++) iv[k] = k - 500;
    int64_t gi[1] = {1000}, oi[1] = {0};
    cr_assert_eq(ckpt_save_add(s, "w/int", MP_I32, 1, gi, oi, gi, iv, &e), MP_OK, "%s", e.msg);
    /* f32 [4, 3] with a NaN and an Inf: stats over the 10 finite values 1..10 */
    static float fv[12] = {1, 2, 3, NAN, 4, 5, 6, INFINITY, 7, 8, 9, 10};
    int64_t gf[2] = {4, 3}, of[2] = {0, 0};
    cr_assert_eq(ckpt_save_add(s, "w/nf", MP_F32, 2, gf, of, gf, fv, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_save_meta(s, "note", "hello", &e), MP_OK, "%s", e.msg);
    cr_assert_eq(ckpt_save_commit(s, NULL, &e), MP_OK, "%s", e.msg);
    ckpt_save_free(s);

    const char *chunks[] = {"", "MP_FAULT=ckpt_chunk_bytes:16", "MP_FAULT=ckpt_chunk_bytes:50"};
    for (int c = 0; c < 3; c++) {
        char *js = NULL;
        int rc = capture(&js, "%s %s ckpt show --stats --json %s", chunks[c], tu_bin(), root);
        cr_assert_eq(rc, 0, "%s", js);
        cJSON *j = parse(js);
        cr_assert_eq(jnum(j, "step"), 7);
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(j, "other_metadata"), "note")->valuestring,
                         "hello");
        const cJSON *ts = cJSON_GetObjectItemCaseSensitive(j, "tensors");
        cr_assert_eq(cJSON_GetArraySize(ts), 3);
        /* sorted by name: w/bf, w/int, w/nf */
        const cJSON *bf = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ts, 0), "stats");
        const cJSON *in = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ts, 1), "stats");
        const cJSON *nf = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(ts, 2), "stats");
        cr_assert_eq(jnum(cJSON_GetArrayItem(ts, 0), "nboxes"), 2);
        /* bf: k/8 - 6, k = 0..104: min -6, max 7, mean 0.5, var = (105^2 - 1) / 12 / 64 */
        double sum2 = 0;
        for (int k = 0; k < 105; k++) sum2 += ((double)k / 8 - 6) * ((double)k / 8 - 6);
        cr_assert_eq(jnum(bf, "min"), -6);
        cr_assert_eq(jnum(bf, "max"), 7);
        assert_close(jnum(bf, "mean"), 0.5, 1e-12, "mean", "w/bf");
        assert_close(jnum(bf, "std"), sqrt((105.0 * 105.0 - 1) / 12.0) / 8.0, 1e-12, "std", "w/bf");
        assert_close(jnum(bf, "l2"), sqrt(sum2), 1e-12, "l2", "w/bf");
        /* int: -500..499 */
        cr_assert_eq(jnum(in, "min"), -500);
        cr_assert_eq(jnum(in, "max"), 499);
        assert_close(jnum(in, "mean"), -0.5, 1e-12, "mean", "w/int");
        assert_close(jnum(in, "std"), sqrt((1000.0 * 1000.0 - 1) / 12.0), 1e-12, "std", "w/int");
        /* nf: 1..10 finite, 2 non-finite */
        cr_assert_eq(jnum(nf, "min"), 1);
        cr_assert_eq(jnum(nf, "max"), 10);
        assert_close(jnum(nf, "mean"), 5.5, 1e-12, "mean", "w/nf");
        assert_close(jnum(nf, "std"), sqrt(99.0 / 12.0), 1e-12, "std", "w/nf");
        assert_close(jnum(nf, "l2"), sqrt(385.0), 1e-12, "l2", "w/nf");
        cr_assert_eq(jnum(nf, "nonfinite"), 2);
        cJSON_Delete(j);
        free(js);
    }
    /* not a training checkpoint: the format checks pass, the training checks name what is missing */
    char *out = NULL;
    int rc = run(&out, "%s ckpt verify --format-only %s", tu_bin(), root);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), root);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "\"model_config\" is missing") && strstr(out, "\"data_cursor\" is missing"), "%s", out);
    free(out);
    run(NULL, "rm -rf %s", dir);
}

/* ------------------------------------------------------------------------------------- model families */

/* Writes text to dir/name; returns the path. */
static char *write_config(const char *dir, const char *name, const char *text) {
    char *p = fmt("%s/%s", dir, name);
    tu_write_file(p, text);
    return p;
}

/* A Qwen3-shaped model (head_dim 16 != hidden/heads 8, q/k norms) whose layers 1.. slide over 8 tokens. */
static const char qwen3_window_json[] =
    "{\"architectures\": [\"Qwen3ForCausalLM\"], \"model_type\": \"qwen3\", \"hidden_size\": 32,\n"
    " \"intermediate_size\": 64, \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    " \"head_dim\": 16, \"vocab_size\": 64, \"max_position_embeddings\": 128, \"use_sliding_window\": true,\n"
    " \"sliding_window\": 8, \"max_window_layers\": 1, \"tie_word_embeddings\": true,\n"
    " \"train\": {\"batch_size\": 2, \"seq_len\": 8}}\n";
static const char qwen2_json[] =
    "{\"architectures\": [\"Qwen2ForCausalLM\"], \"model_type\": \"qwen2\", \"hidden_size\": 32,\n"
    " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    " \"vocab_size\": 64, \"max_position_embeddings\": 128, \"use_sliding_window\": false}\n";
/* cli_tiny.json as a Mistral v0.3-style model (sliding_window null): Llama's math, another family */
static const char mistral_json[] =
    "{\"architectures\": [\"MistralForCausalLM\"], \"model_type\": \"mistral\", \"hidden_size\": 32,\n"
    " \"intermediate_size\": 64, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,\n"
    " \"vocab_size\": 256, \"max_position_embeddings\": 128, \"rms_norm_eps\": 1e-5, \"sliding_window\": null,\n"
    " \"train\": {\"batch_size\": 4, \"seq_len\": 16, \"lr\": 1e-3, \"warmup_steps\": 1}}\n";

/* `ckpt show --json` of ck parsed; its "model" object into *model. */
static cJSON *show_json_of(const char *ck, const cJSON **model) {
    char *js = NULL, *args = fmt("show --json %s", ck);
    cr_assert_eq(ckpt_json(&js, args), 0, "%s", js);
    cJSON *j = parse(js);
    *model = cJSON_GetObjectItemCaseSensitive(j, "model");
    cr_assert(cJSON_IsObject(*model), "no \"model\" object: %s", js);
    free(js);
    free(args);
    return j;
}

static const char *jstr(const cJSON *o, const char *k) {
    const char *v = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(o, k));
    cr_assert(v, "no string \"%s\"", k);
    return v;
}

/* A checkpoint of a family other than Llama is format version 4 whichever command writes it (init, reshard,
 * train), and `ckpt show` prints the family and what it adds, in text and JSON. */
Test(ckpt_cli, family_checkpoints_are_v4_and_show_the_family, .timeout = 180) {
    char *dir = tu_mkdtemp("ckfam");
    char *q3 = write_config(dir, "q3.json", qwen3_window_json), *q3ck = fmt("%s/q3", dir);
    char *out = NULL, *l;
    int rc = run(&out, "%s init --config %s --out %s --tp 1 --dp 1", tu_bin(), q3, q3ck);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = run(&out, "%s ckpt show %s", tu_bin(), q3ck);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert((l = line_with(out, "format ")) && strstr(l, "meshpoint-checkpoint v4"), "%s", out);
    cr_assert((l = line_with(out, "family ")) && strstr(l, " qwen3 (Qwen3ForCausalLM)"), "%s", out);
    cr_assert((l = line_with(out, "head_dim ")) && strstr(l, " 16"), "%s", out);
    cr_assert((l = line_with(out, "sliding_window ")) && strstr(l, " 8 from layer 1"), "%s", out);
    cr_assert((l = line_with(out, "q/k/v biases ")) && strstr(l, " no"), "%s", out);
    cr_assert((l = line_with(out, "q/k norm ")) && strstr(l, " yes"), "%s", out);
    free(out);
    const cJSON *m;
    cJSON *j = show_json_of(q3ck, &m);
    cr_assert_eq(jnum(j, "format_version"), 4);
    cr_assert_str_eq(jstr(m, "family"), "qwen3");
    cr_assert_str_eq(jstr(m, "architecture"), "Qwen3ForCausalLM");
    cr_assert_eq(jnum(m, "head_dim"), 16);
    cr_assert_eq(jnum(m, "sliding_window"), 8);
    cr_assert_eq(jnum(m, "first_sliding_layer"), 1);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(m, "qkv_bias")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "qk_norm")));
    cJSON_Delete(j);

    /* reshard copies the checkpoint: still version 4 */
    char *q3tp2 = fmt("%s/q3tp2", dir);
    rc = run(&out, "%s reshard %s --tp 2 --dp 1 --out %s", tu_bin(), q3ck, q3tp2);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    j = show_json_of(q3tp2, &m);
    cr_assert_eq(jnum(j, "format_version"), 4);
    cr_assert_str_eq(jstr(m, "family"), "qwen3");
    cJSON_Delete(j);

    /* Qwen2: biases, no window (use_sliding_window false) */
    char *q2 = write_config(dir, "q2.json", qwen2_json), *q2ck = fmt("%s/q2", dir);
    rc = run(&out, "%s init --config %s --out %s --tp 1 --dp 1", tu_bin(), q2, q2ck);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    j = show_json_of(q2ck, &m);
    cr_assert_eq(jnum(j, "format_version"), 4);
    cr_assert_str_eq(jstr(m, "family"), "qwen2");
    cr_assert_eq(jnum(m, "head_dim"), 8);
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "sliding_window")));
    cr_assert(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(m, "first_sliding_layer")));
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(m, "qkv_bias")));
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(m, "qk_norm")));
    cJSON_Delete(j);

    /* train saves a Mistral model as version 4; it verifies */
    char *data = make_data(dir), *mi = write_config(dir, "mi.json", mistral_json), *runp = fmt("%s/run", dir);
    rc = run(&out, "%s train --config %s --train-data %s --run-dir %s --log-every 0 --steps 1 --ckpt-every 1", tu_bin(),
             mi, data, runp);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    char *mck = fmt("%s/checkpoints/step_00000001", runp);
    rc = run(&out, "%s ckpt show %s", tu_bin(), mck);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert((l = line_with(out, "format ")) && strstr(l, "meshpoint-checkpoint v4"), "%s", out);
    cr_assert((l = line_with(out, "family ")) && strstr(l, " mistral (MistralForCausalLM)"), "%s", out);
    cr_assert((l = line_with(out, "sliding_window ")) && strstr(l, " none"), "%s", out);
    free(out);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), mck);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);

    /* verify: the version must be the family's (a v3 Mistral, a v4 Llama: each one problem) */
    copy_opts as3 = {.version = 3}, as4 = {.version = 4};
    char *r3 = fmt("%s/as3", dir), *c3 = copy_ckpt(mck, r3, &as3);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), c3);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "format version 3 disagrees with model_config's model_type \"mistral\" (a mistral "
                          "checkpoint is version 4)") && strstr(out, "1 problem"), "%s", out);
    free(out);
    char *lrun = fmt("%s/lrun", dir);
    train(data, lrun, 1, "--steps 1 --ckpt-every 1");
    char *lck = fmt("%s/checkpoints/step_00000001", lrun), *r4 = fmt("%s/as4", dir), *c4 = copy_ckpt(lck, r4, &as4);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), c4);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "format version 4 disagrees with model_config's model_type \"llama\" (a llama checkpoint "
                          "is version 3)"), "%s", out);
    free(out);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), lck);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    run(NULL, "rm -rf %s", dir);
}

/* ------------------------------------------------------------------------------------------- verify */

Test(ckpt_cli, verify_passes_good_and_names_every_problem, .timeout = 120) {
    char *dir = tu_mkdtemp("ckver");
    char *data = make_data(dir);
    char *runp = fmt("%s/run", dir);
    train(data, runp, 1, "--steps 2 --ckpt-every 2");
    char *ck = fmt("%s/checkpoints/step_00000002", runp);
    char *out = NULL;
    int rc = run(&out, "%s ckpt verify %s", tu_bin(), ck);
    cr_assert_eq(rc, 0, "%s", out);
    char *ok = fmt("ok: 63 tensors, %lld bytes verified", (long long)tiny_ckpt_bytes());
    cr_assert(strstr(out, ok), "want \"%s\" in %s", ok, out);
    free(out);

    /* a flipped byte inside two datasets: both tensors named */
    char *bad_root = fmt("%s/bad", dir);
    cr_assert_eq(run(NULL, "mkdir -p %s && cp -r %s %s/", bad_root, ck, bad_root), 0);
    char *rf = fmt("%s/step_00000002/rank_00000.h5", bad_root);
    flip_byte(dir, rf, "/model/model.layers.1.mlp.up_proj.weight/box_0", 1001);
    flip_byte(dir, rf, "/optim/exp_avg/model.norm.weight/box_0", 5);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), bad_root);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "model/model.layers.1.mlp.up_proj.weight"), "%s", out);
    cr_assert(strstr(out, "optim/exp_avg/model.norm.weight"), "%s", out);
    cr_assert(strstr(out, "FAILED"), "%s", out);
    free(out);
    /* the damaged data is unreadable for show --stats and diff: exit 2 */
    cr_assert_eq(run(NULL, "%s ckpt show --stats %s", tu_bin(), bad_root), 2);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s", tu_bin(), ck, bad_root), 2);

    /* a tensor set that does not match the config: one missing, one extra, one of the wrong shape */
    copy_opts co = {.drop = "optim/exp_avg_sq/model.layers.0.self_attn.k_proj.weight",
                    .extra = "model/model.layers.2.input_layernorm.weight",
                    .reshape = "model/model.norm.weight"};
    char *set_root = fmt("%s/set", dir);
    char *set = copy_ckpt(ck, set_root, &co);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), set);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "tensor optim/exp_avg_sq/model.layers.0.self_attn.k_proj.weight is missing"), "%s", out);
    cr_assert(strstr(out, "tensor model/model.layers.2.input_layernorm.weight is not part of the model"), "%s", out);
    cr_assert(strstr(out, "tensor model/model.norm.weight has shape [33], the model config needs [32]"), "%s", out);
    cr_assert(strstr(out, "FAILED") && strstr(out, "3 problems"), "%s", out);
    free(out);
    /* its format is fine */
    cr_assert_eq(run(NULL, "%s ckpt verify --format-only %s", tu_bin(), set), 0);

    /* metadata: data_cursor dropped, step not a number */
    copy_opts cm = {.drop_meta = "data_cursor", .bad_step = "two"};
    char *meta_root = fmt("%s/meta", dir);
    char *meta = copy_ckpt(ck, meta_root, &cm);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), meta);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "metadata \"data_cursor\" is missing"), "%s", out);
    cr_assert(strstr(out, "metadata \"step\" is not a non-negative integer"), "%s", out);
    free(out);
    /* an unchanged copy verifies (the copying itself is not what the checks above catch) */
    copy_opts none = {0};
    char *same_root = fmt("%s/same", dir);
    char *same = copy_ckpt(ck, same_root, &none);
    rc = run(&out, "%s ckpt verify %s", tu_bin(), same);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);

    cr_assert_eq(run(NULL, "%s ckpt verify", tu_bin()), 2);
    cr_assert_eq(run(NULL, "%s ckpt verify %s/none", tu_bin(), dir), 2);
    cr_assert_eq(run(NULL, "%s ckpt verify %s %s", tu_bin(), ck, ck), 2);
    run(NULL, "rm -rf %s", dir);
}

/* --------------------------------------------------------------------------------------------- diff */

Test(ckpt_cli, diff_same_run_steps_and_edits, .timeout = 120) {
    char *dir = tu_mkdtemp("ckdiff");
    char *data = make_data(dir);
    char *r1 = fmt("%s/r1", dir), *r2 = fmt("%s/r2", dir);
    train(data, r1, 1, "--steps 4 --ckpt-every 2");
    train(data, r2, 1, "--steps 4 --ckpt-every 2");
    char *a = fmt("%s/checkpoints/step_00000004", r1), *b = fmt("%s/checkpoints/step_00000004", r2);
    char *a2 = fmt("%s/checkpoints/step_00000002", r1);
    char *out = NULL;
    /* the same run twice: bitwise equal */
    int rc = run(&out, "%s ckpt diff %s %s", tu_bin(), a, b);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "63 bitwise equal") && strstr(out, "result: equal"), "%s", out);
    free(out);
    /* different steps */
    rc = run(&out, "%s ckpt diff %s %s", tu_bin(), a2, a);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "metadata differs: step: 2 vs 4"), "%s", out);
    cr_assert(strstr(out, "data_cursor.pos: 128 vs 256"), "%s", out);
    cr_assert(strstr(out, "tensor model/model.embed_tokens.weight: max abs diff"), "%s", out);
    cr_assert(strstr(out, "checkpoints differ"), "%s", out);
    free(out);
    /* one element moved by one ulp: named, counted, and within a tolerance */
    copy_opts cn = {.nudge = "model/model.layers.0.mlp.gate_proj.weight"};
    char *nroot = fmt("%s/nudge", dir);
    char *n = copy_ckpt(a, nroot, &cn);
    rc = run(&out, "%s ckpt diff %s %s", tu_bin(), a, n);
    cr_assert_eq(rc, 1, "%s", out);
    char *l = line_with(out, "tensor model/model.layers.0.mlp.gate_proj.weight:");
    cr_assert(l && strstr(l, "1 of 2048 elements differ") && strstr(l, "DIFFERS"), "%s", out);
    char *delta = fmt("max abs diff %.3e,", nudge_delta);
    cr_assert(strstr(l, delta), "want \"%s\" in %s", delta, l);
    cr_assert(strstr(out, "62 bitwise equal"), "%s", out);
    free(out);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --atol 1e-6", tu_bin(), a, n), 0);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --rtol 1e-5", tu_bin(), a, n), 0);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --atol 1e-12", tu_bin(), a, n), 1);
    /* missing, extra and reshaped tensors */
    copy_opts cs = {.drop = "optim/exp_avg/lm_head.weight", .extra = "model/extra.weight",
                    .reshape = "model/model.layers.1.self_attn.q_proj.weight"};
    char *sroot = fmt("%s/set", dir);
    char *s = copy_ckpt(a, sroot, &cs);
    rc = run(&out, "%s ckpt diff %s %s --rtol 1", tu_bin(), a, s);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "only in A: optim/exp_avg/lm_head.weight"), "%s", out);
    cr_assert(strstr(out, "only in B: model/extra.weight"), "%s", out);
    cr_assert(strstr(out, "tensor model/model.layers.1.self_attn.q_proj.weight: shape [32, 32] vs [33, 32]"), "%s", out);
    free(out);
    /* bad usage and unreadable input */
    cr_assert_eq(run(NULL, "%s ckpt diff %s", tu_bin(), a), 2);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --rtol -1", tu_bin(), a, b), 2);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --rtol x", tu_bin(), a, b), 2);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --frob", tu_bin(), a, b), 2);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s/none", tu_bin(), a, dir), 2);
    cr_assert_eq(run(NULL, "%s ckpt", tu_bin()), 2);
    cr_assert_eq(run(NULL, "%s ckpt frob", tu_bin()), 2);
    cr_assert_eq(run(NULL, "%s ckpt --help", tu_bin()), 0);
    run(NULL, "rm -rf %s", dir);
}

/* The same run on 1 process and on tp 2 x dp 2: the same tensors, different boxes, equal up to float
 * reordering. */
Test(ckpt_cli, diff_and_show_across_meshes, .timeout = 300) {
    char *dir = tu_mkdtemp("ckmesh");
    char *data = make_data(dir);
    char *r1 = fmt("%s/one", dir), *r4 = fmt("%s/mesh", dir);
    train(data, r1, 1, "--steps 2 --ckpt-every 2");
    train(data, r4, 4, "--steps 2 --ckpt-every 2 --tp 2 --dp 2");
    char *a = fmt("%s/checkpoints/step_00000002", r1), *b = fmt("%s/checkpoints/step_00000002", r4);
    char *out = NULL;
    int rc = run(&out, "%s ckpt verify %s", tu_bin(), b);
    cr_assert_eq(rc, 0, "%s", out);
    free(out);
    rc = run(&out, "%s ckpt ls %s", tu_bin(), r4);
    cr_assert_eq(rc, 0, "%s", out);
    char *l = line_with(out, "step_00000002");
    cr_assert(l && strstr(l, "tp 2 x dp 2") && strstr(l, "<- latest"), "%s", out);
    free(out);

    /* bitwise: they differ (float reordering); with rtol 1e-4 they are the same */
    rc = run(&out, "%s ckpt diff %s %s", tu_bin(), a, b);
    cr_assert_eq(rc, 1, "%s", out);
    cr_assert(strstr(out, "DIFFERS"), "%s", out);
    cr_assert(strstr(out, "0 only in A, 0 only in B"), "%s", out);
    cr_assert(strstr(out, "0 metadata differences"), "%s", out);   /* the mesh is a note, not a difference */
    cr_assert(strstr(out, "note: mesh.tp: 1 vs 2"), "%s", out);
    /* the worst difference, computed by numpy from the two checkpoints' views */
    char *dpy = write_py(dir, "maxdiff.py",
                         "import sys, h5py, numpy as np\n"
                         "a = h5py.File(sys.argv[1] + '/index.h5', 'r'); b = h5py.File(sys.argv[2] + '/index.h5', 'r')\n"
                         "w = 0.0\n"
                         "for r in a['layout/tensors'][...]:\n"
                         "    n = 'view/' + r['name'].decode()\n"
                         "    w = max(w, float(np.abs(a[n][...].astype(np.float64) - b[n][...].astype(np.float64)).max()))\n"
                         "print('worst max abs diff %.3e' % w)\n"
                         "n = 'view/optim/exp_avg_sq/model.layers.0.self_attn.k_proj.weight'\n"
                         "print('tensor %s: max abs diff %.3e, ' % (n[5:], np.abs(a[n][...] - b[n][...]).max()))\n"
                         "print('%d of 512 elements differ' % (a[n][...] != b[n][...]).sum())\n");
    char *worst = NULL;
    rc = run(&worst, PY " %s %s %s", dpy, a, b);
    cr_assert_eq(rc, 0, "%s", worst);
    char *w1 = strtok(worst, "\n"), *w2 = strtok(NULL, "\n"), *w3 = strtok(NULL, "\n");
    cr_assert(w1 && w2 && w3, "%s", worst);
    cr_assert(strstr(out, w1), "want \"%s\" in %s", w1, out);
    char *lk = line_with(out, w2);   /* a tensor whose differences are ~1e-15 */
    cr_assert(lk && strstr(lk, w3), "want \"%s\" and \"%s\" in %s", w2, w3, out);
    free(out);
    char *def = NULL, *tiny = NULL;
    rc = run(&def, "%s ckpt diff %s %s --rtol 1e-4", tu_bin(), a, b);
    cr_assert_eq(rc, 0, "%s", def);
    cr_assert(strstr(def, "result: equal"), "%s", def);
    cr_assert(strstr(def, "0 differ"), "%s", def);
    /* the same numbers when both are cut into 100-byte chunks (rows split, then columns) */
    rc = run(&tiny, "MP_FAULT=ckpt_chunk_bytes:100 %s ckpt diff %s %s --rtol 1e-4", tu_bin(), a, b);
    cr_assert_eq(rc, 0, "%s", tiny);
    cr_assert_str_eq(def, tiny);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --rtol 1e-4", tu_bin(), b, a), 0);
    cr_assert_eq(run(NULL, "%s ckpt diff %s %s --rtol 1e-12", tu_bin(), a, b), 1);

    /* the shard map of the mesh checkpoint is the index's box table */
    /* format v3: the boxes from the runs and the rank files' tables, by the h5py oracle of
     * tests/python/test_ckpt_h5py.py (layout_boxes: the spec alone, no code of ours) */
    char *pysrc = fmt("import sys, json, h5py, numpy as np\n"
                      "sys.path.insert(0, '%s/tests/python')\n"
                      "from test_ckpt_h5py import layout_boxes\n"
                      "f = h5py.File(sys.argv[1] + '/index.h5', 'r')\n"
                      "fails = []\n"
                      "t = f['layout/tensors'][...]\n"
                      "b = layout_boxes(h5py, np, lambda c, m: c or fails.append(m), 'show', sys.argv[1], f)\n"
                      "assert not fails, fails\n"
                      "out = []\n"
                      "for r in b:\n"
                      "    nd = int(t[r['tensor_index']]['ndim'])\n"
                      "    out.append([r['tensor'].decode(), int(r['rank']), r['file'].decode(),\n"
                      "                [int(v) for v in r['offset'][:nd]], [int(v) for v in r['shape'][:nd]]])\n"
                      "print(json.dumps(out))\n", tu_src());
    char *py = write_py(dir, "boxes.py", pysrc);
    free(pysrc);
    char *pyout = NULL;
    rc = run(&pyout, PY " %s %s", py, b);
    cr_assert_eq(rc, 0, "%s", pyout);
    cJSON *want = parse(pyout);
    char *js = NULL, *args = fmt("show --boxes --json %s", b);
    cr_assert_eq(ckpt_json(&js, args), 0, "%s", js);
    cJSON *got = parse(js);
    cr_assert_eq(jnum(got, "world_size"), 4);
    cr_assert_eq(jnum(got, "rank_files"), 4);
    cJSON *flat = cJSON_CreateArray();
    for (const cJSON *t = cJSON_GetObjectItemCaseSensitive(got, "tensors")->child; t; t = t->next)
        for (const cJSON *x = cJSON_GetObjectItemCaseSensitive(t, "boxes")->child; x; x = x->next) {
            cJSON *row = cJSON_CreateArray();
            cJSON_AddItemToArray(row, cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(t, "name")->valuestring));
            cJSON_AddItemToArray(row, cJSON_CreateNumber(jnum(x, "rank")));
            cJSON_AddItemToArray(row, cJSON_CreateString(cJSON_GetObjectItemCaseSensitive(x, "file")->valuestring));
            cJSON_AddItemToArray(row, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(x, "offset"), 1));
            cJSON_AddItemToArray(row, cJSON_Duplicate(cJSON_GetObjectItemCaseSensitive(x, "shape"), 1));
            cJSON_AddItemToArray(flat, row);
        }
    cr_assert_gt(cJSON_GetArraySize(flat), 63);   /* sharded: more boxes than tensors */
    char *fa = cJSON_PrintUnformatted(flat), *fb = cJSON_PrintUnformatted(want);
    cr_assert_str_eq(fa, fb);
    /* the text shard map shows o_proj's column blocks */
    rc = run(&out, "%s ckpt show --boxes %s", tu_bin(), b);
    cr_assert_eq(rc, 0, "%s", out);
    cr_assert(strstr(out, "offset [0, 16]"), "%s", out);
    free(out);
    /* statistics of the mesh checkpoint (4 rank files, sharded boxes) against numpy */
    check_stats(dir, b, "MP_FAULT=ckpt_chunk_bytes:100");
    run(NULL, "rm -rf %s", dir);
}
