/*
 * bench/bench_scale.c — one simulated rank of a checkpoint save or load at cluster scale, without
 * tensor data; bench/bench_scale.sh runs it per (model, world, rank) and makes the tables of
 * docs/BENCH_SCALE.md.
 *
 * The layout of any (config, tp, dp) is a pure function (llama_tensor_specs, llama_place,
 * llama_disk_box, llama_disk_writer: what cli/train_ckpt.c saves and loads), so one process can stand
 * for rank r of a world of tp x dp ranks and run the library's real code on that rank's boxes:
 *
 *   bench_scale save MODEL TP DP RANK DIR
 *       begins a save of DIR over a simulated communicator of tp x dp ranks in which this process is
 *       RANK, adds RANK's boxes (model, exp_avg, exp_avg_sq of every parameter, as a training save
 *       does; the data pointer is never read), then runs the real commit without rank files
 *       (ckpt_save_commit_plan): agreement, layout exchange and, on rank 0, the layout build, coverage
 *       checks and the index writer (DIR/index.h5).
 *   bench_scale load MODEL TP DP RANK DIR
 *       ckpt_open DIR (the real index reader) and the load-side planning of RANK's boxes: per box the
 *       tensor lookup and ckpt_query, the reader's interval index (what ckpt_read plans with). Before
 *       the collective open (ckpt_open_planned), every rank of a loading job did this.
 *   bench_scale planned MODEL TP DP RANK DIR
 *       the collective open (ckpt_open_planned) as RANK, then the same planning on the reader it gets.
 *       Rank 0 gathers every rank's regions (made here, as for the save's lists), reads the index and
 *       plans all ranks; any other rank gets its part from a child process running rank 0's side
 *       (through a pipe; the time it waits is wait_s, apart from its own open_s).
 *
 * The simulated communicator (sim_*) is this process's view of a world whose other ranks all run the
 * same save: where a collective brings another rank's contribution, that rank's box list is made by
 * the real writer (a one-rank save recording RANK q's boxes with ckpt_save_add_fill, serialized by
 * ckpt_save_list, exactly what q would send); agreements see every other rank succeed. Every byte a
 * collective delivers to this rank is counted (recv_bytes), and the time spent making other ranks'
 * lists is subtracted from the measured times. Memory: the peak resident set of this process above
 * its resident set at start (VmHWM - VmRSS of /proc/self/status), lists of other ranks included
 * (they are made one at a time and freed). Index bytes read at load: rchar of /proc/self/io around
 * ckpt_open.
 *
 * Prints one line "MODE key=value ..." on stdout; errors on stderr. Exit status: 0 ok, 1 a failed
 * operation, 2 bad usage.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "ckpt/ckpt.h"
#include "core/alloc.h"
#include "core/comm.h"
#include "core/error.h"
#include "layers/llama.h"

static const char *const kinds[3] = {"model", "optim/exp_avg", "optim/exp_avg_sq"};

/* A new printf-formatted string (checked allocation). */
static char *bs_fmt(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *bs_fmt(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    char *s = mp_xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The CPU time of this process (all its threads): on a shared machine it does not count the time
 * other processes hold the cores, as now_s does. */
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A value (kB) of /proc/self/status ("VmRSS", "VmHWM"); -1 if absent. */
static int64_t status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') v = strtoll(line + n + 1, NULL, 10);
    fclose(f);
    return v;
}

/* rchar of /proc/self/io: bytes this process has read through read/pread so far (-1 if absent). */
static int64_t io_rchar(void) {
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "rchar:", 6) == 0) v = strtoll(line + 6, NULL, 10);
    fclose(f);
    return v;
}

/* The published shapes (HF config.json of each): Llama-2-7B, Llama-2-70B, Llama-3.1-405B. */
static int model_config(const char *name, llama_config *c) {
    llama_config_default(c);
    c->tie_word_embeddings = 0;
    if (strcmp(name, "7b") == 0) {
        c->hidden_size = 4096, c->intermediate_size = 11008, c->num_hidden_layers = 32;
        c->num_attention_heads = 32, c->num_key_value_heads = 32, c->vocab_size = 32000;
    } else if (strcmp(name, "70b") == 0) {
        c->hidden_size = 8192, c->intermediate_size = 28672, c->num_hidden_layers = 80;
        c->num_attention_heads = 64, c->num_key_value_heads = 8, c->vocab_size = 32000;
    } else if (strcmp(name, "405b") == 0) {
        c->hidden_size = 16384, c->intermediate_size = 53248, c->num_hidden_layers = 126;
        c->num_attention_heads = 128, c->num_key_value_heads = 8, c->vocab_size = 128256;
    } else {
        return 0;
    }
    return 1;
}

typedef struct {
    llama_config cfg;
    llama_tensor_spec *specs;
    int nspecs, tp, dp;
} world_t;

/* Calls fn(ctx, name, ndim, gshape, off, shape) for every box rank q saves (its writer boxes; which
 * rank loads = the same boxes with writer ignored: load = 1). Returns the count. */
typedef int (*box_fn)(void *ctx, const char *name, int ndim, const int64_t *g, const int64_t *off, const int64_t *shp);
static int64_t rank_boxes(const world_t *w, int q, int load, box_fn fn, void *ctx) {
    int tpr = q % w->tp, dpr = q / w->tp;
    int64_t n = 0;
    for (int i = 0; i < w->nspecs; i++) {
        const llama_tensor_spec *sp = &w->specs[i];
        llama_placement pl;
        llama_place(&w->cfg, sp, w->tp, tpr, w->dp, dpr, &pl);
        int64_t off[2], shp[2];
        if (llama_disk_box(&pl, off, shp) <= 0) continue;
        if (!load && !llama_disk_writer(sp->split, tpr)) continue;
        for (int k = 0; k < 3; k++) {
            char name[256];
            snprintf(name, sizeof name, "%s/%s", kinds[k], sp->name);
            if (fn && fn(ctx, name, sp->ndim, sp->shape, off, shp)) return -1;
            n++;
        }
    }
    return n;
}

/* ------------------------------------------------------------------- the simulated communicator */

typedef struct {
    const world_t *w;
    const char *scratch;     /* directory for the one-rank saves that make other ranks' lists */
    int64_t recv;            /* bytes delivered to this rank by collectives */
    double gen_s;            /* time spent making other ranks' lists (subtracted) */
    int64_t *len;            /* [world] list lengths, -1 unknown */
    int planned;             /* the collective load open: gathers bring region lists (peer_regions) */
    int pipe_fd;             /* planned: as root, the part of rank `target` goes here; else read from it */
    int target;
    double wait_s;           /* planned, not root: time blocked until rank 0 sent the part */
    double gen_cpu_s;        /* gen_s in CPU time (subtracted from the open's) */
} sim_t;

/* never called: the simulated saves write no rank files */
static mp_code fill_cb(void *ctx, const int64_t *off, const int64_t *shp, void *buf, mp_err *e) {
    (void)ctx; (void)off; (void)shp; (void)buf;
    return mp_err_set(e, MP_EINTERNAL, "bench_scale: a simulated box was asked for data");
}

typedef struct { ckpt_save *s; int q; } add_ctx;
static int add_fill(void *ctx, const char *name, int ndim, const int64_t *g, const int64_t *off, const int64_t *shp) {
    add_ctx *a = ctx;
    mp_err e;
    if (ckpt_save_add_fill(a->s, a->q, name, MP_F32, ndim, g, off, shp, fill_cb, NULL, &e) == MP_OK) return 0;
    fprintf(stderr, "bench_scale: %s\n", e.msg);
    return 1;
}

/* Rank q's box list as q's writer would send it (a new buffer of *n bytes). */
static char *peer_list(sim_t *S, int q, size_t *n) {
    double t0 = now_s();
    mp_comm *self = mp_comm_self();
    ckpt_save_opts o = {0};
    o.world_size = S->w->tp * S->w->dp;
    ckpt_save *s = NULL;
    mp_err e;
    char *dir = bs_fmt("%s/peer", S->scratch);
    if (ckpt_save_begin_dir(&s, self, dir, 0, &o, 0, &e) != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); exit(1); }
    add_ctx a = {s, q};
    if (rank_boxes(S->w, q, 0, add_fill, &a) < 0) exit(1);
    char *p = ckpt_save_list(s, n);
    ckpt_save_free(s);
    char *part = bs_fmt("%s.partial", dir);
    rmdir(part);
    free(part);
    free(dir);
    self->ops->destroy(self);
    S->len[q] = (int64_t)*n;
    S->gen_s += now_s() - t0;
    return p;
}

/* Rank q's load regions (its disk boxes of every parameter and both moments, as cli/train_ckpt.c asks
 * for them): a new array of *n, names in *names (both freed by the caller). */
typedef struct { ckpt_region *r; char (*names)[256]; int n, cap; } reg_ctx;
static int add_region(void *ctx, const char *name, int ndim, const int64_t *g, const int64_t *off, const int64_t *shp) {
    (void)g;
    reg_ctx *a = ctx;
    if (a->n == a->cap) {
        a->cap = a->cap * 2 + 64;
        a->r = mp_realloc(a->r, 0, sizeof *a->r * (size_t)a->cap, MP_MEM_OTHER);
        a->names = mp_realloc(a->names, 0, sizeof *a->names * (size_t)a->cap, MP_MEM_OTHER);
    }
    ckpt_region *x = &a->r[a->n];
    snprintf(a->names[a->n], sizeof a->names[a->n], "%s", name);
    for (int d = 0; d < CKPT_MAX_DIMS; d++) { x->offset[d] = d < ndim ? off[d] : 0; x->shape[d] = d < ndim ? shp[d] : 1; }
    a->n++;
    return 0;
}
static ckpt_region *rank_regions(const world_t *w, int q, int *n, char (**names)[256]) {
    reg_ctx a = {NULL, NULL, 0, 0};
    rank_boxes(w, q, 1, add_region, &a);
    for (int i = 0; i < a.n; i++) a.r[i].name = a.names[i];   /* after the last realloc */
    *n = a.n;
    *names = a.names;
    return a.r;
}

/* Rank q's region list as ckpt_open_planned on q would send it (a new buffer of *n bytes). */
static char *peer_regions(sim_t *S, int q, size_t *n) {
    double t0 = now_s(), c0 = cpu_s();
    int k;
    char (*names)[256];
    ckpt_region *r = rank_regions(S->w, q, &k, &names);
    char *p = ckpt_region_list(r, k, n);
    if (!p) { fprintf(stderr, "bench_scale: a region list of rank %d does not pack\n", q); exit(1); }
    free(r);
    free(names);
    S->gen_s += now_s() - t0;
    S->gen_cpu_s += cpu_s() - c0;
    return p;
}

/* Frees a list peer_list / peer_regions made: the time counted with their making (gen_s, gen_cpu_s),
 * as the real root holds no such list (unmapping a list of 0.2-0.6 MiB is not free). */
static void peer_free(sim_t *S, char *p) {
    double t0 = now_s(), c0 = cpu_s();
    free(p);
    S->gen_s += now_s() - t0;
    S->gen_cpu_s += cpu_s() - c0;
}

/* The list of rank q of the collective in progress: a save's box list, or a planned load's regions. */
static char *peer_any(sim_t *S, int q, size_t *n) { return S->planned ? peer_regions(S, q, n) : peer_list(S, q, n); }

static sim_t *sim_of(mp_comm *c) { return (sim_t *)c->impl; }

/* max: every other rank agrees (OK); sum of 2 x world floats: the writer's list lengths (v1 exchange). */
static void sim_all_reduce(mp_comm *c, void *x, int64_t n, mp_dtype dt, int op_max) {
    sim_t *S = sim_of(c);
    assert(dt == MP_F32);
    S->recv += n * 4;
    if (op_max) return;
    if (n != 2 * (int64_t)c->size) { fprintf(stderr, "bench_scale: unexpected all_reduce of %lld\n", (long long)n); exit(1); }
    float *v = x;
    for (int q = 0; q < c->size; q++) {
        if (q == c->rank) continue;
        size_t len;
        peer_free(S, peer_list(S, q, &len));
        v[2 * q] += (float)(len >> 24);
        v[2 * q + 1] += (float)(len & 0xffffff);
    }
}

static void sim_broadcast(mp_comm *c, void *buf, size_t bytes, int root) {
    sim_t *S = sim_of(c);
    if (root == c->rank) return;
    size_t n;
    char *p = peer_list(S, root, &n);
    if (n != bytes) { fprintf(stderr, "bench_scale: list of rank %d: %zu bytes, %zu expected\n", root, n, bytes); exit(1); }
    memcpy(buf, p, n);
    peer_free(S, p);
    S->recv += (int64_t)bytes;
}

/* The writer's length gather: root gets every other rank's list length. */
static void sim_gather(mp_comm *c, void *out, const void *in, size_t n, int root) {
    sim_t *S = sim_of(c);
    if (c->rank != root) return;
    if (n != sizeof(int64_t)) { fprintf(stderr, "bench_scale: unexpected gather of %zu bytes\n", n); exit(1); }
    memcpy((char *)out + (size_t)root * n, in, n);
    for (int q = 0; q < c->size; q++) {
        if (q == root) continue;
        size_t len;
        peer_free(S, peer_any(S, q, &len));
        int64_t v = (int64_t)len;
        memcpy((char *)out + (size_t)q * n, &v, n);
        S->recv += (int64_t)n;
    }
}

/* The writer's list gatherv(s): root gets the lists of the ranks with a count (made again, one at a time,
 * as the real root receives them into one buffer per call). */
static void sim_gatherv(mp_comm *c, void *out, const void *in, int64_t n, const int64_t *counts, int root) {
    sim_t *S = sim_of(c);
    if (c->rank != root) return;
    size_t at = 0;
    for (int q = 0; q < c->size; q++) {
        if (counts[q] == 0) continue;
        if (q == root) {
            memcpy((char *)out + at, in, (size_t)n);
        } else {
            size_t len;
            char *p = peer_any(S, q, &len);
            if ((int64_t)len != counts[q]) { fprintf(stderr, "bench_scale: gatherv of rank %d\n", q); exit(1); }
            memcpy((char *)out + at, p, len);
            peer_free(S, p);
            S->recv += counts[q];
        }
        at += (size_t)counts[q];
    }
}

static void sim_unexpected(void) { fprintf(stderr, "bench_scale: unexpected collective\n"); exit(1); }
static void sim_all_reduce_f64(mp_comm *c, double *x, int64_t n) { (void)c; (void)x; (void)n; sim_unexpected(); }
static void sim_gv(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    (void)c; (void)out; (void)in; (void)counts; (void)dt;
    sim_unexpected();
}
/* The planned open's scatters: the root (a child process standing for rank 0) writes rank target's
 * block to the pipe; rank target reads its n bytes from it (the time blocked is rank 0's work). */
static void sim_scatterv(mp_comm *c, void *out, int64_t n, const void *in, const int64_t *counts, int root) {
    sim_t *S = sim_of(c);
    if (!S->planned) sim_unexpected();
    if (c->rank == root) {
        if (n > 0) memcpy(out, in, (size_t)n);
        if (S->pipe_fd < 0) return;
        int64_t at = 0;
        for (int q = 0; q < S->target; q++) at += counts[q];
        for (int64_t done = 0; done < counts[S->target];) {
            ssize_t k = write(S->pipe_fd, (const char *)in + at + done, (size_t)(counts[S->target] - done));
            if (k <= 0) { perror("bench_scale: pipe"); exit(1); }
            done += k;
        }
        return;
    }
    double t0 = now_s();
    for (int64_t done = 0; done < n;) {
        ssize_t k = read(S->pipe_fd, (char *)out + done, (size_t)(n - done));
        if (k <= 0) { fprintf(stderr, "bench_scale: rank 0's part ended early\n"); exit(1); }
        done += k;
    }
    S->wait_s += now_s() - t0;
    S->recv += n;
}
static void sim_barrier(mp_comm *c) { (void)c; }
static void sim_destroy(mp_comm *c) { mp_comm_free(c); }

static const mp_comm_ops sim_ops = {
    .name = "sim",
    .all_reduce = sim_all_reduce,
    .all_reduce_f64 = sim_all_reduce_f64,
    .all_gatherv = sim_gv,
    .reduce_scatterv = sim_gv,
    .broadcast = sim_broadcast,
    .gather = sim_gather,
    .gatherv = sim_gatherv,
    .scatterv = sim_scatterv,
    .barrier = sim_barrier,
    .destroy = sim_destroy,
};

static mp_comm *sim_comm(sim_t *S, int rank, int size) { return mp_comm_new(&sim_ops, rank, size, S); }

/* ------------------------------------------------------------------------------------ modes */

typedef struct { ckpt_save *s; const float *dummy; } own_ctx;
static int add_own(void *ctx, const char *name, int ndim, const int64_t *g, const int64_t *off, const int64_t *shp) {
    own_ctx *a = ctx;
    mp_err e;
    if (ckpt_save_add(a->s, name, MP_F32, ndim, g, off, shp, a->dummy, &e) == MP_OK) return 0;
    fprintf(stderr, "bench_scale: %s\n", e.msg);
    return 1;
}

static int run_save(const world_t *w, int rank, const char *dir, int64_t rss0) {
    int W = w->tp * w->dp;
    sim_t S = {w, dir, 0, 0, NULL};
    S.len = mp_xmalloc(sizeof(int64_t) * (size_t)W);
    for (int q = 0; q < W; q++) S.len[q] = -1;
    mp_comm *c = sim_comm(&S, rank, W);
    char *target = bs_fmt("%s/ckpt", dir);
    ckpt_save *s = NULL;
    mp_err e;
    ckpt_save_opts so = {.view_background = 1};   /* as `meshpoint train` saves: view.h5 after the commit */
    if (ckpt_save_begin_dir(&s, c, target, 0, &so, 1, &e) != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); return 1; }
    float dummy = 0;
    own_ctx a = {s, &dummy};
    double t0 = now_s();
    int64_t nb = rank_boxes(w, rank, 0, add_own, &a);
    if (nb < 0) return 1;
    double plan_s = now_s() - t0;
    size_t list_bytes;
    free(ckpt_save_list(s, &list_bytes));
    double g0 = S.gen_s;
    t0 = now_s();
    mp_code rc = ckpt_save_commit_plan(s, &e);
    double commit_s = now_s() - t0 - (S.gen_s - g0);
    if (rc != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); return 1; }
    double view_s = 0;   /* rank 0's background view.h5 write, joined here (training overlaps it with steps) */
    if (ckpt_views_wait(&view_s, &e) != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); return 1; }
    int64_t index_bytes = 0;
    if (rank == 0) {
        char *ip = bs_fmt("%s/index.h5", target);
        struct stat st;
        if (stat(ip, &st) == 0) index_bytes = (int64_t)st.st_size;
        free(ip);
    }
    printf("save world=%d rank=%d boxes=%lld list_bytes=%zu recv_bytes=%lld plan_s=%.6f commit_s=%.6f view_bg_s=%.6f "
           "index_bytes=%lld peak_kib=%lld\n", W, rank, (long long)nb, list_bytes, (long long)S.recv, plan_s, commit_s, view_s,
           (long long)index_bytes, (long long)(status_kb("VmHWM") - rss0));
    ckpt_save_free(s);
    c->ops->destroy(c);
    free(S.len);
    free(target);
    return 0;
}

typedef struct { ckpt_reader *r; int64_t hits; int bad; } load_ctx;
static int plan_one(void *ctx, const char *name, int ndim, const int64_t *g, const int64_t *off, const int64_t *shp) {
    (void)g;
    load_ctx *L = ctx;
    int t = ckpt_tensor_find(L->r, name);
    if (t < 0) { fprintf(stderr, "bench_scale: no tensor %s\n", name); L->bad = 1; return 1; }
    int64_t o[CKPT_MAX_DIMS] = {0}, s[CKPT_MAX_DIMS] = {1, 1};
    for (int d = 0; d < ndim; d++) { o[d] = off[d]; s[d] = shp[d]; }
    int out[64];
    int n = ckpt_query(L->r, t, o, s, out, 64);
    if (n <= 0) { fprintf(stderr, "bench_scale: tensor %s: no saved box covers the request\n", name); L->bad = 1; return 1; }
    L->hits += n;
    return 0;
}

static int run_load(const world_t *w, int rank, const char *dir, int64_t rss0) {
    char *target = bs_fmt("%s/ckpt", dir);
    int64_t io0 = io_rchar();
    double t0 = now_s();
    ckpt_reader *r = NULL;
    mp_err e;
    if (ckpt_open(&r, target, &e) != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); return 1; }
    double open_s = now_s() - t0;
    int64_t read = io_rchar() - io0;
    load_ctx L = {r, 0, 0};
    t0 = now_s();
    int64_t nb = rank_boxes(w, rank, 1, plan_one, &L);
    double plan_s = now_s() - t0;
    if (nb < 0 || L.bad) return 1;
    printf("load world=%d rank=%d boxes=%lld sources=%lld index_read_bytes=%lld open_s=%.6f plan_s=%.6f peak_kib=%lld\n",
           w->tp * w->dp, rank, (long long)nb, (long long)L.hits, (long long)read, open_s, plan_s,
           (long long)(status_kb("VmHWM") - rss0));
    ckpt_close(r);
    free(target);
    return 0;
}

/* The collective open as rank `rank` (ckpt_open_planned over the simulated world), then the planning
 * of its boxes on the reader it got (every box must be found). Rank 0 gathers every rank's regions and
 * reads the index; another rank gets its part from a child process that runs the same open as rank 0
 * (through a pipe: its time is reported apart as wait_s, its memory and reads are the child's). */
static int run_planned(const world_t *w, int rank, const char *dir, int64_t rss0) {
    int W = w->tp * w->dp, fd[2] = {-1, -1};
    char *target = bs_fmt("%s/ckpt", dir);
    pid_t child = -1;
    if (rank != 0) {
        if (pipe(fd) != 0) { perror("bench_scale: pipe"); return 1; }
        child = fork();
        if (child < 0) { perror("bench_scale: fork"); return 1; }
        if (child == 0) {   /* rank 0, writing rank `rank`'s part to the pipe */
            close(fd[0]);
            sim_t R = {w, dir, 0, 0, NULL, 1, fd[1], rank, 0};
            mp_comm *c0 = sim_comm(&R, 0, W);
            int k;
            char (*names)[256];
            ckpt_region *want = rank_regions(w, 0, &k, &names);
            ckpt_reader *r0 = NULL;
            mp_err e;
            if (ckpt_open_planned(&r0, c0, target, want, k, &e) != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); _exit(1); }
            _exit(0);
        }
        close(fd[1]);
    }
    sim_t S = {w, dir, 0, 0, NULL, 1, fd[0], rank, 0};
    mp_comm *c = sim_comm(&S, rank, W);
    int k;
    char (*names)[256];
    ckpt_region *want = rank_regions(w, rank, &k, &names);
    int64_t io0 = io_rchar(), reads0 = 0;
    ckpt_index_reads(&reads0, NULL);
    double t0 = now_s(), c0 = cpu_s();
    ckpt_reader *r = NULL;
    mp_err e;
    mp_code rc = ckpt_open_planned(&r, c, target, want, k, &e);
    double open_s = now_s() - t0 - S.gen_s - S.wait_s, open_cpu_s = cpu_s() - c0 - S.gen_cpu_s;
    int64_t read = io_rchar() - io0 - (rank != 0 ? S.recv : 0), reads = 0;   /* the pipe's bytes are not the index's */
    ckpt_index_reads(&reads, NULL);
    int status = 0;
    if (child > 0 && (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)))
        rc = mp_err_set(&e, MP_EINTERNAL, "the process standing for rank 0 failed");
    if (rc != MP_OK) { fprintf(stderr, "bench_scale: %s\n", e.msg); return 1; }
    load_ctx L = {r, 0, 0};
    t0 = now_s();
    int64_t nb = rank_boxes(w, rank, 1, plan_one, &L);
    double plan_s = now_s() - t0;
    if (nb < 0 || L.bad) return 1;
    printf("planned world=%d rank=%d boxes=%lld sources=%lld index_read_bytes=%lld index_reads=%lld recv_bytes=%lld "
           "open_s=%.6f open_cpu_s=%.6f wait_s=%.6f plan_s=%.6f peak_kib=%lld\n", W, rank, (long long)nb,
           (long long)L.hits, (long long)read, (long long)(reads - reads0), (long long)S.recv, open_s, open_cpu_s,
           S.wait_s, plan_s,
           (long long)(status_kb("VmHWM") - rss0));
    ckpt_close(r);
    c->ops->destroy(c);
    if (fd[0] >= 0) close(fd[0]);
    free(want);
    free(names);
    free(target);
    return 0;
}

int main(int argc, char **argv) {
    int64_t rss0 = status_kb("VmRSS");
    world_t w;
    if (argc != 7 || (strcmp(argv[1], "save") && strcmp(argv[1], "load") && strcmp(argv[1], "planned")) ||
        !model_config(argv[2], &w.cfg)) {
        fprintf(stderr, "usage: bench_scale save|load|planned 7b|70b|405b TP DP RANK DIR\n");
        return 2;
    }
    w.tp = atoi(argv[3]);
    w.dp = atoi(argv[4]);
    int rank = atoi(argv[5]);
    if (w.tp < 1 || w.dp < 1 || (int64_t)w.tp * w.dp > (1 << 20) || rank < 0 || rank >= w.tp * w.dp) {
        fprintf(stderr, "bench_scale: tp %s, dp %s, rank %s out of range\n", argv[3], argv[4], argv[5]);
        return 2;
    }
    w.nspecs = llama_tensor_specs(&w.cfg, NULL, 0);
    w.specs = mp_xcalloc(sizeof *w.specs * (size_t)w.nspecs);
    llama_tensor_specs(&w.cfg, w.specs, w.nspecs);
    int rc = strcmp(argv[1], "save") == 0   ? run_save(&w, rank, argv[6], rss0)
             : strcmp(argv[1], "load") == 0 ? run_load(&w, rank, argv[6], rss0)
                                            : run_planned(&w, rank, argv[6], rss0);
    free(w.specs);
    return rc;
}
