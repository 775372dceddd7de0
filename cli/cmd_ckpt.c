/*
 * cli/cmd_ckpt.c — `meshpoint ckpt ls|show|verify|diff`: inspecting checkpoints (single process, read
 * only, built on the public API of ckpt/ckpt.h only).
 *
 *   ls ROOT          the complete checkpoints under ROOT (step, mesh, size, which one `latest` names)
 *                    and the incomplete directories (leftover *.partial, step dirs without a valid index)
 *   show DIR         format, step, mesh, configs, data cursor, LR schedule, optimizer; optionally the
 *                    tensor table, the shard map and per-tensor statistics; text or --json
 *   verify DIR       ckpt_verify + the metadata and the tensor set a training checkpoint needs
 *   diff A B         tensor by tensor, whatever meshes wrote them; metadata differences
 *
 * Design:
 * - Every tensor is read through ckpt_read in the same "chunks": boxes that cut the tensor along one
 *   dimension s (all dims after s whole, dims before s one index at a time), sized so that one chunk is
 *   at most CHUNK_BYTES. The reader finds the saved boxes each chunk meets, so two checkpoints with
 *   different box layouts (different meshes) are compared chunk against identical chunk, and memory stays
 *   bounded whatever the model size: show --stats holds one chunk, diff two (2 x 16 MiB), plus the
 *   reader's own scratch for a partial-slab read (about one chunk plus two slabs). Env
 *   MP_CKPT_CHUNK_BYTES overrides the chunk size (tests use tiny chunks to exercise the cutting).
 * - Statistics are over the finite elements (min, max, mean, population std, L2 norm), merged chunk by
 *   chunk with Chan's parallel variance formula in double; NaN/Inf elements are counted separately.
 * - diff's relative difference is tensor-scaled: max|a-b| / max|b| (as tests/testutil.c's tu_max_rel).
 *   Element-wise |a-b|/|b| is useless across meshes: an element whose gradient is ~0 can flip sign under
 *   a different reduction order, so its Adam update flips too. A tensor matches when it is bitwise
 *   equal, or (only when a tolerance was given) max|a-b| <= atol + rtol * max|b| with NaNs in the same
 *   places. Metadata that describes the layout (mesh; train_config's tp, dp, sp, reshard_after_forward)
 *   or bookkeeping (log_every, eval_every, eval_batches, val_data) is reported as a note and does not
 *   make checkpoints differ.
 * - verify derives the expected tensor set from the model config through llama_tensor_specs, the
 *   same list the model's parameter table is built from (no model is created).
 * Exit status: 0 ok, 1 a check failed or the checkpoints differ, 2 bad usage or unreadable/missing input.
 */
#include <assert.h>
#include <stdarg.h>
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ckpt/ckpt.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "core/alloc.h"
#include "core/config.h"
#include "core/sched.h"
#include "core/tensor.h"
#include "layers/llama.h"

#define CHUNK_BYTES ((int64_t)16 << 20)

enum { ST_OK = 0, ST_FAIL = 1, ST_USAGE = 2 };

/* ------------------------------------------------------------------------------------ small helpers */

/* The chunk size: CHUNK_BYTES, or MP_CKPT_CHUNK_BYTES (>= 16) when set. */
static int64_t chunk_bytes(void) {
    const char *s = getenv("MP_CKPT_CHUNK_BYTES");
    if (s && *s) {
        char *end;
        long long v = strtoll(s, &end, 10);
        if (*end == '\0' && v >= 16) return v;
    }
    return CHUNK_BYTES;
}

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *p) {
    struct stat st;
    return stat(p, &st) == 0;
}

/* "a/b" in a malloc'd string. */
static char *join(const char *a, const char *b) {
    size_t n = strlen(a) + strlen(b) + 2;
    char *p = mp_xmalloc(n);
    snprintf(p, n, "%s/%s", a, b);
    return p;
}

/* Is name "step_<digits>" followed by exactly suffix? Sets *step. */
static int parse_step_name(const char *name, const char *suffix, int64_t *step) {
    if (strncmp(name, "step_", 5)) return 0;
    const char *p = name + 5;
    if (*p < '0' || *p > '9') return 0;
    int64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        if (v > (INT64_MAX - 9) / 10) return 0;
        v = v * 10 + (*p - '0');
    }
    if (strcmp(p, suffix)) return 0;
    *step = v;
    return 1;
}

/* Does root hold any step_* entry (complete or not)? */
static int has_step_entries(const char *root) {
    DIR *d = opendir(root);
    if (!d) return 0;
    struct dirent *de;
    int found = 0;
    while (!found && (de = readdir(d))) found = !strncmp(de->d_name, "step_", 5);
    closedir(d);
    return found;
}

/* Total size of the regular files directly in dir, bytes. */
static int64_t dir_bytes(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    int64_t total = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.') continue;
        char *p = join(dir, de->d_name);
        struct stat st;
        if (stat(p, &st) == 0 && S_ISREG(st.st_mode)) total += (int64_t)st.st_size;
        free(p);
    }
    closedir(d);
    return total;
}

/* "1.5 MiB" */
static const char *human(char *buf, size_t cap, int64_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; u++; }
    if (u == 0) snprintf(buf, cap, "%lld B", (long long)n);
    else snprintf(buf, cap, "%.1f %s", v, units[u]);
    return buf;
}

/* "[256, 32]" */
static const char *shape_str(char *buf, size_t cap, int ndim, const int64_t *s) {
    size_t k = 0;
    k += (size_t)snprintf(buf + k, cap - k, "[");
    for (int d = 0; d < ndim && k < cap; d++) k += (size_t)snprintf(buf + k, cap - k, "%s%lld", d ? ", " : "", (long long)s[d]);
    if (k < cap) snprintf(buf + k, cap - k, "]");
    return buf;
}

static int64_t numel(int ndim, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= s[d];
    return n;
}

static int64_t tensor_bytes(const ckpt_tensor_info *t) {
    return numel(t->ndim, t->shape) * (int64_t)mp_dtype_size(t->dtype);
}

/* Element i of a buffer of dtype dt, as a double. */
static inline double elem(const void *buf, mp_dtype dt, int64_t i) {
    switch (dt) {
    case MP_F32: return ((const float *)buf)[i];
    case MP_BF16: return mp_bf16_to_f32(((const uint16_t *)buf)[i]);
    case MP_I32: return ((const int32_t *)buf)[i];
    }
    return NAN;
}

/* A number for display: integers exactly, other values with 10 significant digits. */
static const char *num_str(char *buf, size_t cap, double v) {
    if (isfinite(v) && v == floor(v) && fabs(v) < 9.0e15) snprintf(buf, cap, "%lld", (long long)v);
    else snprintf(buf, cap, "%.10g", v);
    return buf;
}

/* Prints a JSON value compactly for display (strings without quotes, numbers via num_str). */
static void print_json_value(FILE *f, const cJSON *v) {
    char nb[64];
    if (cJSON_IsString(v)) fputs(v->valuestring, f);
    else if (cJSON_IsNumber(v)) fputs(num_str(nb, sizeof nb, v->valuedouble), f);
    else if (cJSON_IsTrue(v)) fputs("true", f);
    else if (cJSON_IsFalse(v)) fputs("false", f);
    else if (cJSON_IsNull(v)) fputs("null", f);
    else {
        char *s = cJSON_PrintUnformatted(v);
        fputs(s ? s : "?", f);
        free(s);
    }
}

/* Prints "k1 v1, k2 v2, ..." for the fields of object o (all of them when fields is NULL, else those
 * listed that are present). */
static void print_json_fields(FILE *f, const cJSON *o, const char *const *fields) {
    int first = 1;
    if (!fields) {
        for (const cJSON *it = o->child; it; it = it->next) {
            fprintf(f, "%s%s ", first ? "" : ", ", it->string);
            print_json_value(f, it);
            first = 0;
        }
        return;
    }
    for (int i = 0; fields[i]; i++) {
        const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, fields[i]);
        if (!it) continue;
        fprintf(f, "%s%s ", first ? "" : ", ", fields[i]);
        print_json_value(f, it);
        first = 0;
    }
}

/* Metadata entry key parsed as JSON (caller deletes), or NULL if absent or not JSON. */
static cJSON *meta_json(const ckpt_reader *r, const char *key) {
    const char *t = ckpt_meta_get(r, key);
    return t ? cJSON_Parse(t) : NULL;
}

/* Integer field of a JSON object: 1 if present and an integer. */
static int json_int(const cJSON *o, const char *field, int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, field);
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 9.0e15) return 0;
    *out = (int64_t)v->valuedouble;
    return 1;
}

/* "tp 2 x dp 2" from the mesh metadata, else "world N (no mesh metadata)". */
static const char *mesh_str(char *buf, size_t cap, const ckpt_reader *r) {
    cJSON *m = meta_json(r, "mesh");
    int64_t tp, dp;
    if (m && json_int(m, "tp", &tp) && json_int(m, "dp", &dp)) snprintf(buf, cap, "tp %lld x dp %lld", (long long)tp, (long long)dp);
    else snprintf(buf, cap, "world %d (no mesh metadata)", ckpt_reader_world(r));
    cJSON_Delete(m);
    return buf;
}

/* ----------------------------------------------------------------------------- locating checkpoints */

/* The checkpoint root a path means: the path itself, or PATH/checkpoints when PATH is a run directory
 * (no step_* entries of its own, a checkpoints/ subdirectory). Malloc'd. */
static char *root_of(const char *path) {
    char *sub = join(path, "checkpoints");
    if (!has_step_entries(path) && is_dir(sub)) return sub;
    free(sub);
    return mp_strdup(path);
}

/* The checkpoint directory a path names: a directory with index.h5, or (a root or run directory) its
 * newest complete checkpoint. MP_EINPUT when there is none. *dir is malloc'd. */
static mp_code resolve_ckpt(const char *path, char **dir, mp_err *err) {
    *dir = NULL;
    if (!exists(path)) return mp_err_set(err, MP_EINPUT, "%s: no such file or directory", path);
    if (!is_dir(path)) return mp_err_set(err, MP_EINPUT, "%s is not a directory (a checkpoint is a directory)", path);
    char *ip = join(path, "index.h5");
    int has_index = exists(ip);
    free(ip);
    if (has_index) {
        *dir = mp_strdup(path);
        return MP_OK;
    }
    char *root = root_of(path);
    char buf[4096];
    mp_code rc = ckpt_find_latest(root, buf, sizeof buf, NULL, err);
    if (rc) mp_err_wrap(err, "%s has no index.h5 and is no checkpoint root with a complete checkpoint", path);
    else *dir = mp_strdup(buf);
    free(root);
    return rc;
}

/* ------------------------------------------------------------------------------------------ chunks */

/* Cuts a tensor into boxes of at most `budget` bytes along one dimension `split`: dims after it whole,
 * dims before it one index at a time, `step` indices of split per chunk. Visits chunks in row-major
 * order of their offsets, so two iterators over equal shapes yield identical chunks. */
typedef struct chunk_iter {
    int ndim, split, done;
    int64_t shape[CKPT_MAX_DIMS], step;
    int64_t off[CKPT_MAX_DIMS], cshape[CKPT_MAX_DIMS];  /* the current chunk */
} chunk_iter;

static void chunk_init(chunk_iter *it, int ndim, const int64_t *shape, size_t esize, int64_t budget) {
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
static int64_t chunk_current(chunk_iter *it) {
    if (it->done) return 0;
    int s = it->split;
    for (int d = 0; d < it->ndim; d++) it->cshape[d] = d < s ? 1 : it->shape[d];
    int64_t left = it->shape[s] - it->off[s];
    it->cshape[s] = left < it->step ? left : it->step;
    return numel(it->ndim, it->cshape);
}

static void chunk_next(chunk_iter *it) {
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

typedef struct tstats {
    int64_t n;          /* finite elements */
    int64_t nonfinite;  /* NaN or +-Inf */
    double min, max, mean, m2, sumsq;
} tstats;

/* Folds n elements of buf into s: the chunk's own mean and M2 (two passes), merged with Chan et al. */
static void stats_add(tstats *s, const void *buf, mp_dtype dt, int64_t n) {
    int64_t k = 0;
    double sum = 0, sq = 0, mn = INFINITY, mx = -INFINITY;
    for (int64_t i = 0; i < n; i++) {
        double x = elem(buf, dt, i);
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
        double x = elem(buf, dt, i);
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

static double stats_std(const tstats *s) { return s->n ? sqrt(s->m2 / (double)s->n) : NAN; }

/* Streams tensor t of r through ckpt_read chunk by chunk into st. buf holds budget bytes. */
static mp_code tensor_stats(ckpt_reader *r, const ckpt_tensor_info *t, void *buf, int64_t budget, tstats *st,
                            mp_err *err) {
    memset(st, 0, sizeof *st);
    st->min = st->max = st->mean = NAN;
    chunk_iter it;
    chunk_init(&it, t->ndim, t->shape, mp_dtype_size(t->dtype), budget);
    for (int64_t n; (n = chunk_current(&it)) > 0; chunk_next(&it)) {
        MP_TRY(ckpt_read(r, t->name, it.off, it.cshape, buf, err));
        stats_add(st, buf, t->dtype, n);
    }
    if (!st->n) st->mean = NAN;
    return MP_OK;
}

/* ------------------------------------------------------------------ the tensor set of a config */

/* One parameter of the model a config describes, as a training checkpoint stores it. */
/* The parameters of a Llama config in HF names and logical shapes: layers/ keeps the one list
 * (llama_tensor_specs) that the model itself is built from. Returns the count; *out is malloc'd. */
static int training_params(const mp_model_config *c, llama_tensor_spec **out) {
    int n = llama_tensor_specs(c, NULL, 0);
    llama_tensor_spec *p = mp_xmalloc(sizeof *p * (size_t)n);
    llama_tensor_specs(c, p, n);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += p[i].shape[0] * p[i].shape[1];
    assert(total == mp_model_num_params(c));   /* the same model as core/config.c counts */
    *out = p;
    return n;
}

static const char *const kinds[3] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

/* ---------------------------------------------------------------------------------------------- ls */

typedef struct ls_entry {
    char name[256];
    int64_t step;
    int complete;
    char reason[MP_ERR_MSG_MAX];
} ls_entry;

static int cmp_entry(const void *a, const void *b) {
    const ls_entry *x = a, *y = b;
    if (x->step != y->step) return x->step < y->step ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* The directory name ROOT/latest holds (trimmed) into buf, or "" if it is missing. */
static void read_latest(const char *root, char *buf, size_t cap) {
    buf[0] = '\0';
    char *p = join(root, "latest");
    FILE *f = fopen(p, "rb");
    free(p);
    if (!f) return;
    size_t n = fread(buf, 1, cap - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ')) buf[--n] = '\0';
}

static int cmd_ls(int argc, char **argv) {
    int json = 0, npos = 0, help = 0;
    const mp_arg flags[] = {{"json", MP_ARG_SWITCH, &json, NULL, "print JSON"}, {0}};
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) {
        fprintf(stderr, "meshpoint ckpt ls: %s\n", err.msg);
        return ST_USAGE;
    }
    if (help) {
        mp_args_help(stdout, "meshpoint ckpt ls ROOT [--json]",
                     "Lists the complete checkpoints under ROOT (a run's checkpoints/ directory, or the run "
                     "directory) with step, mesh and size, marks the one `latest` names, and lists incomplete "
                     "directories (leftover *.partial of interrupted saves, step directories without a valid index).",
                     flags);
        return ST_OK;
    }
    if (npos != 1) {
        fprintf(stderr, "meshpoint ckpt ls: expected one ROOT directory (see --help)\n");
        return ST_USAGE;
    }
    if (!is_dir(argv[0])) {
        fprintf(stderr, "meshpoint ckpt ls: %s: %s\n", argv[0], exists(argv[0]) ? "not a directory" : "no such directory");
        return ST_USAGE;
    }
    char *ip = join(argv[0], "index.h5");
    int is_ckpt = exists(ip);
    free(ip);
    if (is_ckpt) {
        fprintf(stderr, "meshpoint ckpt ls: %s is a checkpoint, not a checkpoint root: give its parent, or use "
                        "`meshpoint ckpt show`\n", argv[0]);
        return ST_USAGE;
    }
    char *root = root_of(argv[0]);
    DIR *d = opendir(root);
    if (!d) {
        fprintf(stderr, "meshpoint ckpt ls: cannot list %s: %s\n", root, strerror(errno));
        free(root);
        return ST_USAGE;
    }
    int n = 0, cap = 0;
    ls_entry *e = NULL;
    struct dirent *de;
    while ((de = readdir(d))) {
        int64_t step;
        int partial = parse_step_name(de->d_name, ".partial", &step);
        if (!partial && !parse_step_name(de->d_name, "", &step)) continue;
        char *p = join(root, de->d_name);
        int isd = is_dir(p);
        if (isd) {
            if (n == cap) {
                cap = 2 * cap + 16;
                e = realloc(e, sizeof *e * (size_t)cap);
                if (!e) abort();
            }
            ls_entry *x = &e[n++];
            memset(x, 0, sizeof *x);
            snprintf(x->name, sizeof x->name, "%s", de->d_name);
            x->step = step;
            if (partial) snprintf(x->reason, sizeof x->reason, "interrupted save (never loaded)");
            else {
                mp_err ce;
                if (ckpt_check_complete(p, &ce) == MP_OK) x->complete = 1;
                else snprintf(x->reason, sizeof x->reason, "%s", ce.msg);
            }
        }
        free(p);
    }
    closedir(d);
    if (n > 1) qsort(e, (size_t)n, sizeof *e, cmp_entry);
    char latest[512];
    read_latest(root, latest, sizeof latest);
    int latest_ok = 0, newest = -1, status = ST_OK;
    for (int i = 0; i < n; i++)
        if (e[i].complete) {
            newest = i;
            if (!strcmp(e[i].name, latest)) latest_ok = 1;
        }
    cJSON *jo = json ? cJSON_CreateObject() : NULL, *jl = NULL, *ji = NULL;
    if (json) {
        cJSON_AddStringToObject(jo, "root", root);
        if (latest[0]) cJSON_AddStringToObject(jo, "latest", latest);
        else cJSON_AddNullToObject(jo, "latest");
        cJSON_AddBoolToObject(jo, "latest_complete", latest_ok);
        if (newest >= 0) cJSON_AddStringToObject(jo, "newest_complete", e[newest].name);
        else cJSON_AddNullToObject(jo, "newest_complete");
        jl = cJSON_AddArrayToObject(jo, "checkpoints");
        ji = cJSON_AddArrayToObject(jo, "incomplete");
    } else {
        printf("checkpoints in %s\n", root);
        printf("  %-12s %-16s %-14s %-24s\n", "STEP", "DIRECTORY", "MESH", "SIZE");
    }
    int ncomplete = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].complete) continue;
        ncomplete++;
        char *p = join(root, e[i].name);
        int64_t bytes = dir_bytes(p);
        ckpt_reader *r = NULL;
        mp_err oe;
        mp_err_clear(&oe);
        char mesh[128] = "?";
        int64_t tp = -1, dp = -1;
        int ntensors = -1;
        if (ckpt_open(&r, p, &oe) == MP_OK) {
            mesh_str(mesh, sizeof mesh, r);
            cJSON *m = meta_json(r, "mesh");
            if (m) { json_int(m, "tp", &tp); json_int(m, "dp", &dp); }
            cJSON_Delete(m);
            ntensors = ckpt_num_tensors(r);
        } else {
            snprintf(mesh, sizeof mesh, "unreadable");
            status = ST_FAIL;
        }
        int is_latest = !strcmp(e[i].name, latest);
        if (json) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "step", (double)e[i].step);
            cJSON_AddStringToObject(c, "dir", e[i].name);
            if (tp > 0) cJSON_AddNumberToObject(c, "tp", (double)tp);
            if (dp > 0) cJSON_AddNumberToObject(c, "dp", (double)dp);
            if (r) cJSON_AddNumberToObject(c, "world", ckpt_reader_world(r));
            if (ntensors >= 0) cJSON_AddNumberToObject(c, "tensors", ntensors);
            cJSON_AddNumberToObject(c, "bytes", (double)bytes);
            cJSON_AddBoolToObject(c, "latest", is_latest);
            if (!r) cJSON_AddStringToObject(c, "error", oe.msg);
            cJSON_AddItemToArray(jl, c);
        } else {
            char hb[32], sz[64];
            snprintf(sz, sizeof sz, "%s (%lld bytes)", human(hb, sizeof hb, bytes), (long long)bytes);
            printf("  %-12lld %-16s %-14s %-24s%s\n", (long long)e[i].step, e[i].name, mesh, sz,
                   is_latest ? "  <- latest" : "");
            if (!r) printf("    unreadable: %s\n", oe.msg);
        }
        ckpt_close(r);
        free(p);
    }
    if (!json && !ncomplete) printf("  (no complete checkpoints)\n");
    for (int i = 0; i < n; i++) {
        if (e[i].complete) continue;
        char *p = join(root, e[i].name);
        int64_t bytes = dir_bytes(p);
        free(p);
        if (json) {
            cJSON *c = cJSON_CreateObject();
            cJSON_AddNumberToObject(c, "step", (double)e[i].step);
            cJSON_AddStringToObject(c, "dir", e[i].name);
            cJSON_AddNumberToObject(c, "bytes", (double)bytes);
            cJSON_AddStringToObject(c, "reason", e[i].reason);
            cJSON_AddItemToArray(ji, c);
        } else {
            char hb[32];
            printf("incomplete: %s (%s): %s\n", e[i].name, human(hb, sizeof hb, bytes), e[i].reason);
        }
    }
    if (json) {
        char *s = cJSON_Print(jo);
        puts(s);
        free(s);
        cJSON_Delete(jo);
    } else {
        if (!latest[0]) printf("latest: (missing)\n");
        else printf("latest: %s%s\n", latest, latest_ok ? "" : " (not a complete checkpoint)");
        if (newest >= 0 && (!latest_ok || strcmp(e[newest].name, latest)))
            printf("newest complete (what --resume loads): %s\n", e[newest].name);
    }
    free(e);
    free(root);
    return status;
}

/* -------------------------------------------------------------------------------------------- show */

/* Model config of r parsed (MP_OK) or the parse error. */
static mp_code parse_model_config(const ckpt_reader *r, mp_model_config *mc, mp_err *err) {
    const char *text = ckpt_meta_get(r, "model_config");
    if (!text) return mp_err_set(err, MP_ECHECK, "metadata \"model_config\" is missing");
    mp_model_config_default(mc);
    return mp_config_parse(text, "metadata \"model_config\"", mc, NULL, err);
}

static const char *const train_fields[] = {"steps", "batch_size", "grad_accum", "seq_len", "lr", "min_lr",
                                           "warmup_steps", "decay_steps", "weight_decay", "beta1", "beta2",
                                           "grad_clip", "seed", "train_data", NULL};
static const char *const known_meta[] = {"model_config", "train_config", "mesh", "step", "data_cursor",
                                         "lr_schedule", "optimizer", "rng", NULL};

static int is_known_meta(const char *k) {
    for (int i = 0; known_meta[i]; i++)
        if (!strcmp(known_meta[i], k)) return 1;
    return 0;
}

/* Prints one "label  fields" line for a JSON metadata entry (or its raw text / "(absent)"). */
static void show_meta_line(const ckpt_reader *r, const char *label, const char *key, const char *const *fields) {
    const char *text = ckpt_meta_get(r, key);
    printf("%-15s", label);
    if (!text) { printf("(absent)\n"); return; }
    cJSON *j = cJSON_Parse(text);
    if (cJSON_IsObject(j)) print_json_fields(stdout, j, fields);
    else if (j) print_json_value(stdout, j);
    else printf("%s (not JSON)", text);
    cJSON_Delete(j);
    printf("\n");
}

/* The LR the schedule of r gives for the next step, if lr_schedule parses. */
static int next_lr(const ckpt_reader *r, double *lr) {
    cJSON *j = meta_json(r, "lr_schedule");
    int64_t w, d, st;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, "lr"), *b = cJSON_GetObjectItemCaseSensitive(j, "min_lr");
    int ok = cJSON_IsNumber(a) && cJSON_IsNumber(b) && json_int(j, "warmup_steps", &w) && json_int(j, "decay_steps", &d) &&
             json_int(j, "step", &st);
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

static cJSON *json_stats(const tstats *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "min", json_exact(s->n ? s->min : NAN));
    cJSON_AddItemToObject(o, "max", json_exact(s->n ? s->max : NAN));
    cJSON_AddItemToObject(o, "mean", json_exact(s->mean));
    cJSON_AddItemToObject(o, "std", json_exact(stats_std(s)));
    cJSON_AddItemToObject(o, "l2", json_exact(sqrt(s->sumsq)));
    cJSON_AddNumberToObject(o, "finite", (double)s->n);
    cJSON_AddNumberToObject(o, "nonfinite", (double)s->nonfinite);
    return o;
}

static int cmd_show(int argc, char **argv) {
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
        return ST_USAGE;
    }
    if (help) {
        mp_args_help(stdout, "meshpoint ckpt show DIR [--tensors] [--boxes] [--stats] [--json]",
                     "Prints what a checkpoint holds: format, step, mesh, model config, training config, data "
                     "cursor, LR schedule, optimizer state. DIR is a checkpoint directory, or a checkpoint root "
                     "or run directory (then its newest complete checkpoint). Statistics are over the finite "
                     "elements (std is the population std); NaN/Inf are counted.",
                     flags);
        return ST_OK;
    }
    if (npos != 1) {
        fprintf(stderr, "meshpoint ckpt show: expected one checkpoint DIR (see --help)\n");
        return ST_USAGE;
    }
    char *dir = NULL;
    ckpt_reader *r = NULL;
    if (resolve_ckpt(argv[0], &dir, &err) || ckpt_open(&r, dir, &err)) {
        fprintf(stderr, "meshpoint ckpt show: %s\n", err.msg);
        free(dir);
        return ST_USAGE;
    }
    int nt = ckpt_num_tensors(r), status = ST_OK;
    int64_t total = 0, elems = 0;
    for (int i = 0; i < nt; i++) {
        total += tensor_bytes(ckpt_tensor_at(r, i));
        elems += numel(ckpt_tensor_at(r, i)->ndim, ckpt_tensor_at(r, i)->shape);
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
    tstats *st = NULL;
    if (stats) {
        int64_t budget = chunk_bytes();
        void *buf = mp_xmalloc((size_t)budget);
        st = mp_xcalloc(sizeof *st * (size_t)(nt ? nt : 1));
        for (int i = 0; i < nt && !status; i++)
            if (tensor_stats(r, ckpt_tensor_at(r, i), buf, budget, &st[i], &err)) {
                fprintf(stderr, "meshpoint ckpt show: reading %s for --stats: %s\n", ckpt_tensor_at(r, i)->name, err.msg);
                status = ST_USAGE;
            }
        free(buf);
    }
    mp_model_config mc;
    mp_err cerr;
    int mc_ok = parse_model_config(r, &mc, &cerr) == MP_OK;
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
        for (int i = 1; known_meta[i]; i++)
            if (strcmp(known_meta[i], "mesh") && strcmp(known_meta[i], "step")) json_add_meta(o, r, known_meta[i]);
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
    printf("%-15s%s", "mesh", mesh_str(mb, sizeof mb, r));
    {
        cJSON *m = meta_json(r, "mesh");
        const cJSON *sp = cJSON_GetObjectItemCaseSensitive(m, "sp");
        printf(" (world %d%s)\n", ckpt_reader_world(r), cJSON_IsBool(sp) ? (cJSON_IsTrue(sp) ? ", sp on" : ", sp off") : "");
        cJSON_Delete(m);
    }
    printf("%-15s%d rank file%s, %d box%s\n", "saved as", nfiles, nfiles == 1 ? "" : "s", ckpt_num_boxes(r),
           ckpt_num_boxes(r) == 1 ? "" : "es");
    printf("%-15s%d (%lld elements, %s)\n", "tensors", nt, (long long)elems, human(hb, sizeof hb, total));
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
    if (have_lr) printf("%-15snext step's lr %s\n", "", num_str(nb, sizeof nb, lr_next));
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
                printf("  %-5s %-20s %5d %12lld", mp_dtype_name(t->dtype), shape_str(sb, sizeof sb, t->ndim, t->shape),
                       t->nboxes, (long long)tensor_bytes(t));
            if (stats) {
                const tstats *s = &st[i];
                printf("  %13.6g %13.6g %13.6g %13.6g %13.6g", s->n ? s->min : NAN, s->n ? s->max : NAN, s->mean,
                       stats_std(s), sqrt(s->sumsq));
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
            printf("  %s %s\n", t->name, shape_str(sb, sizeof sb, t->ndim, t->shape));
            for (int j = t->box_first; j < t->box_first + t->nboxes; j++) {
                const ckpt_box_info *b = ckpt_box_at(r, j);
                char ob[128];
                printf("    rank %-4d %-14s offset %-14s shape %s\n", b->rank, b->file,
                       shape_str(ob, sizeof ob, t->ndim, b->offset), shape_str(sb, sizeof sb, t->ndim, b->shape));
            }
        }
    }
out:
    free(st);
    ckpt_close(r);
    free(dir);
    return status;
}

/* ------------------------------------------------------------------------------------------ verify */

typedef struct problems {
    int n;
} problems;

static void problem(problems *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void problem(problems *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    printf("problem: ");
    vprintf(fmt, ap);
    printf("\n");
    va_end(ap);
    p->n++;
}

/* Checks the metadata a training checkpoint needs; each problem is reported. */
static void verify_meta(const ckpt_reader *r, problems *pr) {
    mp_model_config mc;
    mp_err err;
    if (parse_model_config(r, &mc, &err)) problem(pr, "%s", err.msg);
    const char *step = ckpt_meta_get(r, "step");
    if (!step) problem(pr, "metadata \"step\" is missing");
    else {
        char *end;
        errno = 0;
        long long v = strtoll(step, &end, 10);
        while (*end == ' ' || *end == '\n') end++;
        if (errno || end == step || *end || v < 0) problem(pr, "metadata \"step\" is not a non-negative integer: \"%s\"", step);
        else if (v != ckpt_reader_step(r))
            problem(pr, "metadata \"step\" (%lld) disagrees with the index's step (%lld)", v, (long long)ckpt_reader_step(r));
    }
    const char *dc = ckpt_meta_get(r, "data_cursor");
    if (!dc) problem(pr, "metadata \"data_cursor\" is missing");
    else {
        cJSON *j = cJSON_Parse(dc);
        int64_t v;
        if (!cJSON_IsObject(j)) problem(pr, "metadata \"data_cursor\" is not a JSON object: %s", dc);
        else {
            static const char *const f[] = {"pos", "epoch", "batch_size", "seq_len"};
            for (int i = 0; i < 4; i++)
                if (!json_int(j, f[i], &v) || v < (i < 2 ? 0 : 1))
                    problem(pr, "metadata \"data_cursor\": field \"%s\" is missing or not a %s integer", f[i],
                            i < 2 ? "non-negative" : "positive");
        }
        cJSON_Delete(j);
    }
    /* the others must parse when present */
    for (int i = 0; known_meta[i]; i++) {
        const char *k = known_meta[i], *v = ckpt_meta_get(r, k);
        if (!strcmp(k, "model_config") || !strcmp(k, "step") || !strcmp(k, "data_cursor")) continue;
        if (!v) { printf("note: metadata \"%s\" is absent\n", k); continue; }
        cJSON *j = cJSON_Parse(v);
        if (!cJSON_IsObject(j)) problem(pr, "metadata \"%s\" is not a JSON object", k);
        cJSON_Delete(j);
    }
    cJSON *m = meta_json(r, "mesh");
    int64_t tp, dp, world;
    if (m && json_int(m, "tp", &tp) && json_int(m, "dp", &dp) && json_int(m, "world", &world)) {
        if (tp < 1 || dp < 1 || tp * dp != world || world != ckpt_reader_world(r))
            problem(pr, "metadata \"mesh\" (tp %lld x dp %lld, world %lld) disagrees with itself or with the index's "
                        "world size %d", (long long)tp, (long long)dp, (long long)world, ckpt_reader_world(r));
    } else if (m) {
        problem(pr, "metadata \"mesh\" lacks integer fields world, tp, dp");
    }
    cJSON_Delete(m);
}

/* Checks that the tensors are exactly model/, optim/exp_avg/, optim/exp_avg_sq/ of every parameter of
 * the config, f32, with the logical HF shapes. */
static void verify_tensor_set(const ckpt_reader *r, const mp_model_config *mc, problems *pr) {
    llama_tensor_spec *ps;
    int np = training_params(mc, &ps), nt = ckpt_num_tensors(r);
    char *seen = mp_xcalloc((size_t)nt + 1);
    char sa[128], sb[128];
    for (int i = 0; i < np; i++)
        for (int k = 0; k < 3; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s/%s", kinds[k], ps[i].name);
            int t = ckpt_tensor_find(r, name);
            if (t < 0) { problem(pr, "tensor %s is missing (the model config needs it)", name); continue; }
            seen[t] = 1;
            const ckpt_tensor_info *ti = ckpt_tensor_at(r, t);
            if (ti->dtype != MP_F32) problem(pr, "tensor %s has dtype %s, a training checkpoint stores f32", name, mp_dtype_name(ti->dtype));
            if (ti->ndim != ps[i].ndim || ti->shape[0] != ps[i].shape[0] || (ps[i].ndim == 2 && ti->shape[1] != ps[i].shape[1]))
                problem(pr, "tensor %s has shape %s, the model config needs %s", name, shape_str(sa, sizeof sa, ti->ndim, ti->shape),
                        shape_str(sb, sizeof sb, ps[i].ndim, ps[i].shape));
        }
    for (int t = 0; t < nt; t++)
        if (!seen[t]) problem(pr, "tensor %s is not part of the model the config describes", ckpt_tensor_at(r, t)->name);
    free(seen);
    free(ps);
}

static int cmd_verify(int argc, char **argv) {
    int format_only = 0, npos = 0, help = 0;
    const mp_arg flags[] = {
        {"format-only", MP_ARG_SWITCH, &format_only, NULL, "only the format checks (any checkpoint, not only training ones)"},
        {0}};
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err)) {
        fprintf(stderr, "meshpoint ckpt verify: %s\n", err.msg);
        return ST_USAGE;
    }
    if (help) {
        mp_args_help(stdout, "meshpoint ckpt verify DIR [--format-only]",
                     "Verifies a checkpoint: the index, every box's bytes against its checksums, coverage; then that "
                     "the metadata a training run needs (model_config, step, data_cursor) is present and valid and "
                     "that the tensors are exactly model/, optim/exp_avg/ and optim/exp_avg_sq/ of every parameter "
                     "of the model config, with its logical shape. Exit 1 naming every problem found.",
                     flags);
        return ST_OK;
    }
    if (npos != 1) {
        fprintf(stderr, "meshpoint ckpt verify: expected one checkpoint DIR (see --help)\n");
        return ST_USAGE;
    }
    char *dir = NULL;
    if (resolve_ckpt(argv[0], &dir, &err)) {
        fprintf(stderr, "meshpoint ckpt verify: %s\n", err.msg);
        return ST_USAGE;
    }
    problems pr = {0};
    ckpt_reader *r = NULL;
    if (ckpt_open(&r, dir, &err)) {
        problem(&pr, "%s", err.msg);
        printf("FAILED: %s: %d problem%s\n", dir, pr.n, pr.n == 1 ? "" : "s");
        free(dir);
        return ST_FAIL;
    }
    int64_t bytes = 0;
    if (ckpt_verify(r, &bytes, &err)) {
        char first[MP_ERR_MSG_MAX];
        snprintf(first, sizeof first, "%s", err.msg);
        problem(&pr, "%s", first);
        /* the library stops at the first bad box: read every tensor to name each damaged one */
        int64_t budget = chunk_bytes();
        void *buf = mp_xmalloc((size_t)budget);
        for (int i = 0; i < ckpt_num_tensors(r); i++) {
            tstats s;
            if (tensor_stats(r, ckpt_tensor_at(r, i), buf, budget, &s, &err) && strcmp(err.msg, first))
                problem(&pr, "%s", err.msg);
        }
        free(buf);
    }
    if (!format_only) {
        verify_meta(r, &pr);
        mp_model_config mc;
        mp_err ce;
        if (parse_model_config(r, &mc, &ce) == MP_OK) verify_tensor_set(r, &mc, &pr);
    }
    if (pr.n) printf("FAILED: %s: %d problem%s\n", dir, pr.n, pr.n == 1 ? "" : "s");
    else printf("ok: %d tensors, %lld bytes verified (%s)\n", ckpt_num_tensors(r), (long long)bytes, dir);
    ckpt_close(r);
    free(dir);
    return pr.n ? ST_FAIL : ST_OK;
}

/* -------------------------------------------------------------------------------------------- diff */

typedef struct dstats {
    int64_t n, ndiff, nan_mismatch;
    double max_abs, max_b;
    int bitwise;
} dstats;

/* Folds one chunk pair into d. */
static void diff_add(dstats *d, const void *a, const void *b, mp_dtype dt, int64_t n) {
    if (memcmp(a, b, (size_t)n * mp_dtype_size(dt))) d->bitwise = 0;
    for (int64_t i = 0; i < n; i++) {
        double x = elem(a, dt, i), y = elem(b, dt, i);
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
        if (parse_model_config(a, &x, &e) == MP_OK && parse_model_config(b, &y, &e) == MP_OK) {
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
                if (va) print_json_value(stdout, va); else printf("(absent)");
                printf(" vs ");
                if (vb) print_json_value(stdout, vb); else printf("(absent)");
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

static int cmd_diff(int argc, char **argv) {
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
        return ST_USAGE;
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
        return ST_OK;
    }
    if (npos != 2) {
        fprintf(stderr, "meshpoint ckpt diff: expected two checkpoint directories A B (see --help)\n");
        return ST_USAGE;
    }
    if (atol < 0 || rtol < 0) {
        fprintf(stderr, "meshpoint ckpt diff: --atol and --rtol must be >= 0, got %g and %g\n", atol, rtol);
        return ST_USAGE;
    }
    int tolerant = atol > 0 || rtol > 0;
    (void)set_atol;
    (void)set_rtol;
    char *dir[2] = {NULL, NULL};
    ckpt_reader *r[2] = {NULL, NULL};
    int status = ST_OK;
    for (int k = 0; k < 2 && !status; k++)
        if (resolve_ckpt(argv[k], &dir[k], &err) || ckpt_open(&r[k], dir[k], &err)) {
            fprintf(stderr, "meshpoint ckpt diff: %s\n", err.msg);
            status = ST_USAGE;
        }
    if (status) goto out;
    char mb[128], sa[128], sb[128];
    for (int k = 0; k < 2; k++)
        printf("%s  %s  (step %lld, %s, %d tensors)\n", k ? "B" : "A", dir[k], (long long)ckpt_reader_step(r[k]),
               mesh_str(mb, sizeof mb, r[k]), ckpt_num_tensors(r[k]));
    int nmeta = diff_meta(r[0], r[1]);
    int64_t budget = chunk_bytes();
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
            printf("tensor %s: shape %s vs %s\n", ta->name, shape_str(sa, sizeof sa, ta->ndim, ta->shape),
                   shape_str(sb, sizeof sb, tb->ndim, tb->shape));
            mismatch++;
            continue;
        }
        dstats d = {0};
        d.bitwise = 1;
        chunk_iter it;
        chunk_init(&it, ta->ndim, ta->shape, mp_dtype_size(ta->dtype), budget);
        for (int64_t n; (n = chunk_current(&it)) > 0 && !status; chunk_next(&it)) {
            for (int k = 0; k < 2 && !status; k++)
                if (ckpt_read(r[k], ta->name, it.off, it.cshape, k ? bb : ba, &err)) {
                    fprintf(stderr, "meshpoint ckpt diff: reading %s from %s: %s\n", ta->name, k ? "B" : "A", err.msg);
                    status = ST_USAGE;
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
    status = differ ? ST_FAIL : ST_OK;
out:
    for (int k = 0; k < 2; k++) {
        ckpt_close(r[k]);
        free(dir[k]);
    }
    return status;
}

/* ------------------------------------------------------------------------------------------- entry */

static const char *ckpt_usage =
    "usage: meshpoint ckpt <ls|show|verify|diff> [options]\n"
    "\n"
    "  ls ROOT                         complete checkpoints under ROOT, which one `latest` names, leftovers\n"
    "  show DIR [--tensors] [--boxes] [--stats] [--json]\n"
    "                                  format, step, mesh, configs, data cursor, LR schedule, optimizer;\n"
    "                                  tensor table, shard map, per-tensor statistics\n"
    "  verify DIR                      integrity, metadata and the tensor set of a training checkpoint\n"
    "  diff A B [--atol X] [--rtol Y]  tensor by tensor, across meshes; metadata\n"
    "\n"
    "DIR may be a checkpoint directory, a checkpoint root or a run directory (its newest complete\n"
    "checkpoint). Exit status: 0 ok, 1 a check failed / the checkpoints differ, 2 bad usage or\n"
    "unreadable input. `meshpoint ckpt <sub> --help` describes each.\n";

int mp_cmd_ckpt(int argc, char **argv) {
    if (argc < 1) {
        fputs(ckpt_usage, stderr);
        return ST_USAGE;
    }
    const char *sub = argv[0];
    if (!strcmp(sub, "--help") || !strcmp(sub, "-h") || !strcmp(sub, "help")) {
        fputs(ckpt_usage, stdout);
        return ST_OK;
    }
    if (!strcmp(sub, "ls")) return cmd_ls(argc - 1, argv + 1);
    if (!strcmp(sub, "show")) return cmd_show(argc - 1, argv + 1);
    if (!strcmp(sub, "verify")) return cmd_verify(argc - 1, argv + 1);
    if (!strcmp(sub, "diff")) return cmd_diff(argc - 1, argv + 1);
    fprintf(stderr, "meshpoint ckpt: unknown subcommand \"%s\"\n\n%s", sub, ckpt_usage);
    return ST_USAGE;
}
