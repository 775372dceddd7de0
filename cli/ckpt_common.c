/*
 * cli/ckpt_common.c — the helpers `meshpoint ckpt ls|show|verify|diff` share: paths, display, metadata,
 * locating a checkpoint, chunked tensor streaming and statistics. The design is in cli/ckpt_common.h.
 */
#include "cli/ckpt_common.h"
#include "core/fault.h"
#include "core/fsutil.h"
#include "core/log.h"
#include <assert.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include "core/alloc.h"

#define CHUNK_BYTES ((int64_t)16 << 20)

/* ------------------------------------------------------------------------------------ small helpers */

/* The chunk size: CHUNK_BYTES, or the fault ckpt_chunk_bytes:N (N >= 16) when set. */
int64_t mp_ckpt_chunk_bytes(void) {
    int64_t v = mp_fault_int("ckpt_chunk_bytes", 0);
    return v >= 16 ? v : CHUNK_BYTES;
}

/* mp_fs_step_fn of has_step_entries: one is enough, stop. */
static int found_step(void *ctx, const char *name, int64_t step, int k) {
    (void)name, (void)step, (void)k;
    *(int *)ctx = 1;
    return 1;
}

/* Does root hold a step directory (mp_fs_each_step_dir: step_<digits>, complete or .partial)? */
static int has_step_entries(const char *root) {
    static const char *const sfx[] = {"", ".partial", NULL};
    int found = 0;
    mp_fs_each_step_dir(root, sfx, found_step, &found, NULL);
    return found;
}

/* "1.5 MiB" */
const char *mp_ckpt_human(char *buf, size_t cap, int64_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (u == 0) snprintf(buf, cap, "%lld B", (long long)n);
    else snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

/* "[256, 32]" */
const char *mp_ckpt_shape_str(char *buf, size_t cap, int ndim, const int64_t *s) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)s[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

/* The element count of a shape. */
int64_t mp_ckpt_numel(int ndim, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= s[d];
    return n;
}

/* A number for display: integers exactly, other values with 10 significant digits. */
const char *mp_ckpt_num_str(char *buf, size_t cap, double v) {
    if (isfinite(v) && v == floor(v) && fabs(v) < 9.0e15) snprintf(buf, cap, "%lld", (long long)v);
    else snprintf(buf, cap, "%.10g", v);
    return buf;
}

/* Prints a JSON value compactly for display (strings without quotes, numbers via mp_ckpt_num_str). */
void mp_ckpt_print_json_value(FILE *f, const cJSON *v) {
    char nb[64];
    if (cJSON_IsString(v)) fputs(v->valuestring, f);
    else if (cJSON_IsNumber(v)) fputs(mp_ckpt_num_str(nb, sizeof nb, v->valuedouble), f);
    else if (cJSON_IsTrue(v)) fputs("true", f);
    else if (cJSON_IsFalse(v)) fputs("false", f);
    else if (cJSON_IsNull(v)) fputs("null", f);
    else {
        char *s = cJSON_PrintUnformatted(v);
        fputs(s ? s : "?", f);
        free(s);
    }
}

/* Metadata entry key parsed as JSON (caller deletes), or NULL if absent or not JSON. */
cJSON *mp_ckpt_meta_json(const ckpt_reader *r, const char *key) {
    const char *t = ckpt_meta_get(r, key);
    return t ? cJSON_Parse(t) : NULL;
}

/* Integer field of a JSON object: 1 if present and an integer. */
int mp_ckpt_json_int(const cJSON *o, const char *field, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e15) return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}

/* "tp 2 x dp 2" from the mesh metadata, else "world N (no mesh metadata)". */
const char *mp_ckpt_mesh_str(char *buf, size_t cap, const ckpt_reader *r) {
    cJSON *m = mp_ckpt_meta_json(r, "mesh");
    int64_t tp, dp;
    if (m && mp_ckpt_json_int(m, "tp", &tp) && mp_ckpt_json_int(m, "dp", &dp)) snprintf(buf, cap, "tp %lld x dp %lld", (long long)tp, (long long)dp);
    else snprintf(buf, cap, "world %d (no mesh metadata)", ckpt_reader_world(r));
    cJSON_Delete(m);
    return buf;
}

/* ----------------------------------------------------------------------------- locating checkpoints */

/* The checkpoint root a path means: the path itself, or PATH/checkpoints when PATH is a run directory
 * (no step directories of its own, a checkpoints/ subdirectory). Malloc'd. */
char *mp_ckpt_root_of(const char *path) {
    char *sub = mp_fs_join(path, "checkpoints");
    if (!has_step_entries(path) && mp_fs_is_dir(sub)) return sub;
    free(sub);
    return mp_strdup(path);
}

/* The checkpoint directory a path names: a directory with index.h5, or (a root or run directory) its
 * newest complete checkpoint. MP_EINPUT when there is none. *dir is malloc'd. */
mp_code mp_ckpt_resolve(const char *path, char **dir, mp_err *err) {
    *dir = NULL;
    if (!mp_fs_exists(path)) return mp_err_set(err, MP_EINPUT, "%s: no such file or directory", path);
    if (!mp_fs_is_dir(path)) return mp_err_set(err, MP_EINPUT, "%s is not a directory (a checkpoint is a directory)", path);
    char *ip = mp_fs_join(path, "index.h5");
    int has_index = mp_fs_exists(ip);
    free(ip);
    if (has_index) {
        *dir = mp_strdup(path);
        return MP_OK;
    }
    char *root = mp_ckpt_root_of(path);
    char buf[4096];
    mp_code rc = ckpt_find_latest(root, buf, sizeof buf, NULL, err);
    if (rc) mp_err_wrap(err, "%s has no index.h5 and is no checkpoint root with a complete checkpoint", path);
    else *dir = mp_strdup(buf);
    free(root);
    return rc;
}

/* ------------------------------------------------------------------------------------------ chunks */

/* Starts it at the first chunk: picks the split dimension and the indices per chunk. */
void mp_ckpt_chunk_init(mp_ckpt_chunk_iter *it, int ndim, const int64_t *shape, size_t esize, int64_t budget) {
    assert(ndim >= 1 && ndim <= CKPT_MAX_DIMS && budget >= (int64_t)esize);
    memset(it, 0, sizeof *it);
    it->ndim = ndim;
    for (int d = 0; d < CKPT_MAX_DIMS; d++) it->shape[d] = d < ndim ? shape[d] : 1;
    /* inner: bytes of one index of dim s (the product of the dims after s) */
    int64_t inner = (int64_t)esize;
    int s = ndim - 1;
    while (s > 0 && inner * it->shape[s] <= budget) inner *= it->shape[s--];
    it->split = s;
    it->step = budget / inner;
    if (it->step < 1) it->step = 1;
    if (it->step > it->shape[s]) it->step = it->shape[s];
}

/* The current chunk's element count, or 0 when the iteration is over. Fills it->off / it->cshape. */
int64_t mp_ckpt_chunk_current(mp_ckpt_chunk_iter *it) {
    if (it->done) return 0;
    int s = it->split;
    for (int d = 0; d < it->ndim; d++) it->cshape[d] = d < s ? 1 : it->shape[d];
    int64_t left = it->shape[s] - it->off[s];
    it->cshape[s] = left < it->step ? left : it->step;
    return mp_ckpt_numel(it->ndim, it->cshape);
}

/* Advances to the next chunk; sets it->done after the last. */
void mp_ckpt_chunk_next(mp_ckpt_chunk_iter *it) {
    int s = it->split;
    it->off[s] += it->step;
    if (it->off[s] < it->shape[s]) return;
    it->off[s] = 0;
    for (int d = s - 1; d >= 0; d--) {
        if (++it->off[d] < it->shape[d]) return;
        it->off[d] = 0;
    }
    it->done = 1;
}

/* ------------------------------------------------------------------------------------- statistics */

/* Folds n elements of buf into s: the chunk's own mean and M2 (two passes), merged with Chan et al. */
static void stats_add(mp_ckpt_tstats *s, const void *buf, mp_dtype dt, int64_t n) {
    int64_t k = 0;
    double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double x = mp_ckpt_elem(buf, dt, i);
        if (!isfinite(x)) { s->nonfinite++; continue; }
        k++;
        sum += x;
        sq += x * x;
        if (x < mn) mn = x;
        if (x > mx) mx = x;
    }
    if (!k) return;
    double mean = sum / (double)k, m2 = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = mp_ckpt_elem(buf, dt, i);
        if (isfinite(x)) m2 += (x - mean) * (x - mean);
    }
    if (s->n == 0) {
        s->min = mn; s->max = mx; s->mean = mean; s->m2 = m2;
    } else {
        double tot = (double)(s->n + k), delta = mean - s->mean;
        s->mean += delta * (double)k / tot;
        s->m2 += m2 + delta * delta * (double)s->n * (double)k / tot;
        if (mn < s->min) s->min = mn;
        if (mx > s->max) s->max = mx;
    }
    s->n += k;
    s->sumsq += sq;
}

/* Population std of the finite elements, NaN when there are none. */
double mp_ckpt_stats_std(const mp_ckpt_tstats *s) { return s->n ? sqrt(s->m2 / (double)s->n) : NAN; }

/* Streams tensor t of r through ckpt_read chunk by chunk into st. buf holds budget bytes. */
mp_code mp_ckpt_tensor_stats(ckpt_reader *r, const ckpt_tensor_info *t, void *buf, int64_t budget,
                             mp_ckpt_tstats *st, mp_err *err) {
    memset(st, 0, sizeof *st);
    st->min = st->max = st->mean = NAN;
    mp_ckpt_chunk_iter it;
    mp_ckpt_chunk_init(&it, t->ndim, t->shape, mp_dtype_size(t->dtype), budget);
    for (int64_t n; (n = mp_ckpt_chunk_current(&it)) > 0; mp_ckpt_chunk_next(&it)) {
        MP_TRY(ckpt_read(r, t->name, it.off, it.cshape, buf, err));
        stats_add(st, buf, t->dtype, n);
    }
    if (!st->n) st->mean = NAN;
    return MP_OK;
}

/* ---------------------------------------------------------------------------------------- metadata */

/* Model config of r parsed (MP_OK) or the parse error. */
mp_code mp_ckpt_parse_model_config(const ckpt_reader *r, llama_config *mc, mp_err *err) {
    const char *text = ckpt_meta_get(r, "model_config");
    if (!text) return mp_err_set(err, MP_ECHECK, "metadata \"model_config\" is missing");
    llama_config_default(mc);
    return llama_config_parse(text, "metadata \"model_config\"", mc, NULL, err);
}

/* The metadata keys a training checkpoint writes (see cli/ckpt_common.h). */
const char *const mp_ckpt_known_meta[] = {"model_config", "train_config", "mesh", "step", "data_cursor",
                                          "lr_schedule", "optimizer", "rng", NULL};

int mp_ckpt_cli_start(const mp_arg *flags, int argc, char **argv, int nargs, const char *what, const char *usage,
                      const char *about) {
    int npos = 0, help = 0;
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) {
        mp_log_fail("%s", err.msg);
        return mp_exit_status(MP_EINPUT);
    }
    if (help) {
        mp_args_help(stdout, usage, about, flags);
        return mp_exit_status(MP_OK);
    }
    if (npos != nargs) {
        mp_log_fail("expected %s (see --help)", what);
        return mp_exit_status(MP_EINPUT);
    }
    return -1;
}

/* The directory dst lives in ("." for a bare name). Caller frees. */
static char *parent_of(const char *dst) {
    const char *slash = strrchr(dst, '/');
    if (!slash) return mp_strdup(".");
    if (slash == dst) return mp_strdup("/");
    char *p = mp_strdup(dst);
    p[slash - dst] = '\0';
    return p;
}

mp_code mp_ckpt_check_out(const char *dst, const char *src, const char *src_what, int force, int64_t need, mp_err *e) {
    if (!*dst) return mp_err_set(e, MP_EINPUT, "--out: empty path");
    if (mp_fs_exists(dst)) {
        if (!force) return mp_err_set(e, MP_EINPUT, "--out %s already exists (use --force to replace it)", dst);
        char a[PATH_MAX], b[PATH_MAX];
        if (src && realpath(dst, a) && realpath(src, b) && !strcmp(a, b))
            return mp_err_set(e, MP_EINPUT, "--out %s is %s itself: write elsewhere", dst, src_what);
    }
    char *par = parent_of(dst);
    struct statvfs vs;
    mp_code rc = MP_OK;
    int64_t avail = -1;
    int64_t fake = mp_fault_int("free_bytes", -1);   /* the tests' hook */
    if (fake >= 0) avail = fake;
    else if (statvfs(par, &vs) == 0) avail = (int64_t)vs.f_bavail * (int64_t)vs.f_frsize;
    else if (errno != ENOENT) rc = mp_err_set(e, MP_EINPUT, "--out %s: cannot inspect %s: %s", dst, par, strerror(errno));
    /* the data plus HDF5 overhead (object headers, tile arrays: well under 1%) and a little slack */
    int64_t want = need + need / 50 + (4 << 20);
    if (rc == MP_OK && avail >= 0 && avail < want)
        rc = mp_err_set(e, MP_EINPUT, "--out %s: %s has %.1f MiB free, the output needs about %.1f MiB", dst, par,
                        avail / 1048576.0, want / 1048576.0);
    free(par);
    return rc;
}

/* ------------------------------------------------------------------------------------ verify findings */

/* Reports one finding, "KIND: <text>" (KIND "problem" or "note"): printed, or added to arr in --json. */
static void report(const char *kind, cJSON *arr, const char *fmt, va_list ap) {
    char text[MP_ERR_MSG_MAX + 256];
    vsnprintf(text, sizeof text, fmt, ap);
    if (arr) cJSON_AddItemToArray(arr, cJSON_CreateString(text));
    else printf("%s: %s\n", kind, text);
}

void mp_ckpt_problem(mp_ckpt_problems *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("problem", p->list, fmt, ap);
    va_end(ap);
    p->n++;
}

void mp_ckpt_note(mp_ckpt_problems *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    report("note", p->notes, fmt, ap);
    va_end(ap);
}
