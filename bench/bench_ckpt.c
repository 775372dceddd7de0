/*
 * bench/bench_ckpt.c — the checkpoint library's half of bench/bench_ckpt.sh (checkpoint I/O speed).
 *
 * The state is what one process of a Llama-style training run checkpoints: parameters and the two
 * AdamW moments (model/..., optim/exp_avg/..., optim/exp_avg_sq/...) of a model with hidden 512,
 * intermediate 1408, 8 heads / 4 kv heads (kv dim 256), vocab 32000, untied head, all f32, with as
 * many layers as it takes to reach the requested size (1 GiB: 20 layers, 549 tensors, 1.03 GiB).
 * Tensors are split into boxes the way tensor parallelism of degree 2 would cut them and one process
 * holding every shard would save them: q/k/v/gate/up in 2 row boxes, o/down in 2 column boxes,
 * embeddings and head in 4 row boxes (vocab parallel), norms whole: 987 boxes at 1 GiB. Every box
 * lives in one 64-byte aligned slot of a single arena (the way a training run keeps its state), filled
 * with deterministic pseudo-random floats (values depend on the seed and the byte offset only).
 *
 *   bench_ckpt shapes GIB            the whole tensors, one "name dim0 [dim1]" line each, for
 *                                    bench/torch_save.py (the same shapes and bytes)
 *   bench_ckpt save ROOT GIB STEP    synchronous: ckpt_save_begin, add every box, ckpt_save_commit
 *                                    (timed from begin to the commit's return)
 *   bench_ckpt async ROOT GIB ROUNDS per round: (a) the peer, a memcpy of the whole state into a
 *                                    pre-faulted staging arena; (b) the stall: the same memcpy, then
 *                                    begin, add, ckpt_save_start; then (c) ckpt_save_wait, timed from
 *                                    start's return (the background write + commit). The checkpoint
 *                                    of each round is removed before the next (untimed).
 *   bench_ckpt load DIR GIB [--boxes]
 *                                    ckpt_open DIR, then ckpt_read every tensor whole (or, with
 *                                    --boxes, every saved box as its own request: a same-mesh load)
 *                                    into a pre-faulted arena (checksums verified by the reader);
 *                                    timed from open to the last read; then (untimed) compared with
 *                                    the regenerated state byte for byte.
 *   bench_ckpt raw FILE GIB          the I/O floor in this process: the same arena, one pwrite per
 *                                    box into FILE, fsync (no HDF5, no hashing)
 *   bench_ckpt h5 FILE GIB           the HDF5 container alone: the same boxes as datasets of one file
 *                                    with the writer's file properties, fsync (no hashing, no
 *                                    attributes, no index, no commit)
 *   bench_ckpt prime GIB             touches GIB of fresh memory (one write per page) and frees it,
 *                                    so that the next measurement allocates host-backed pages
 *   bench_ckpt hash GIB              the writer's hashing cost: XXH3-64 over every box in one pass, and
 *                                    the writer's scheme (format v2: per-tile hashes, one streaming
 *                                    state per column block, + a streaming box hash, + the tile array)
 *
 * save, async, load, raw and h5 prime 1.25x the state right before each timed part (see prime()), and
 * print the CPU time (user, sys) of the timed part where it tells the work from the noise.
 * Every mode prints one line "MODE key=value ..." on stdout (bytes, seconds, library stats) that the
 * script parses; errors go to stderr. Exit status: 0 ok, 1 a failed operation or check, 2 bad usage.
 */
#define _GNU_SOURCE
#include <assert.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>
#include <hdf5.h>
#include <xxhash.h>
#include "ckpt/ckpt.h"
#include "core/comm.h"
#include "core/error.h"
#include "core/fsutil.h"

enum { HID = 512, INTER = 1408, KVD = 256, VOCAB = 32000, NCOPY = 3 };

typedef struct {
    char name[160];
    int nd;
    int64_t shape[2];
    int split_dim, nsplit;   /* boxes: nsplit even parts along split_dim */
} tspec;

typedef struct {
    int tensor;
    int64_t off[2], shp[2];
    size_t at, bytes;        /* slot in the arena */
} bspec;

typedef struct {
    tspec *t;
    int nt;
    bspec *b;
    int nb;
    size_t arena;            /* arena size (slots, 64-byte aligned) */
    int64_t bytes;           /* tensor bytes */
    int layers;
    int64_t vocab;
} state;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* CPU seconds (user, system) of this process so far. */
static void cpu_s(double *user, double *sys) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    *user = (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec;
    *sys = (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static void *xalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) {
        fprintf(stderr, "bench_ckpt: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* Appends tensor (name, shape) split into nsplit parts along split_dim. */
static void add_tensor(state *S, int *cap, const char *name, int nd, int64_t d0, int64_t d1, int split_dim,
                       int nsplit) {
    if (S->nt == *cap) {
        *cap = *cap * 2 + 64;
        S->t = realloc(S->t, sizeof *S->t * (size_t)*cap);
        if (!S->t) abort();
    }
    tspec *T = &S->t[S->nt++];
    snprintf(T->name, sizeof T->name, "%s", name);
    T->nd = nd;
    T->shape[0] = d0;
    T->shape[1] = nd > 1 ? d1 : 1;
    T->split_dim = split_dim;
    T->nsplit = nsplit;
}

/* Builds the tensor and box list for about gib GiB (see the top of the file) and the arena slots. */
static void build_state(state *S, double gib) {
    memset(S, 0, sizeof *S);
    double target = gib * 1073741824.0 / NCOPY;   /* bytes per copy */
    double layer = 4.0 * (2.0 * HID * HID + 2.0 * KVD * HID + 3.0 * INTER * HID + 2.0 * HID);
    double emb = 4.0 * 2.0 * VOCAB * HID + 4.0 * HID;
    int64_t vocab = VOCAB;
    int layers;
    if (target < emb + layer) {   /* small states (tests): one layer, a smaller vocabulary */
        layers = 1;
        double v = (target - layer - 4.0 * HID) / (8.0 * HID);
        vocab = v < 64 ? 64 : (int64_t)v + 1;
    } else {
        layers = (int)((target - emb + layer - 1) / layer);
        if (emb + layers * layer < target) layers++;
    }
    S->layers = layers;
    S->vocab = vocab;
    static const char *pre[NCOPY] = {"model/", "optim/exp_avg/", "optim/exp_avg_sq/"};
    int cap = 0;
    char n[160];
    for (int c = 0; c < NCOPY; c++) {
        snprintf(n, sizeof n, "%smodel.embed_tokens.weight", pre[c]);
        add_tensor(S, &cap, n, 2, vocab, HID, 0, 4);
        for (int l = 0; l < layers; l++) {
            struct { const char *s; int64_t d0, d1; int nd, sd, ns; } L[] = {
                {"input_layernorm.weight", HID, 1, 1, 0, 1},
                {"self_attn.q_proj.weight", HID, HID, 2, 0, 2},
                {"self_attn.k_proj.weight", KVD, HID, 2, 0, 2},
                {"self_attn.v_proj.weight", KVD, HID, 2, 0, 2},
                {"self_attn.o_proj.weight", HID, HID, 2, 1, 2},
                {"post_attention_layernorm.weight", HID, 1, 1, 0, 1},
                {"mlp.gate_proj.weight", INTER, HID, 2, 0, 2},
                {"mlp.up_proj.weight", INTER, HID, 2, 0, 2},
                {"mlp.down_proj.weight", HID, INTER, 2, 1, 2},
            };
            for (size_t k = 0; k < sizeof L / sizeof L[0]; k++) {
                snprintf(n, sizeof n, "%smodel.layers.%d.%s", pre[c], l, L[k].s);
                add_tensor(S, &cap, n, L[k].nd, L[k].d0, L[k].d1, L[k].sd, L[k].ns);
            }
        }
        snprintf(n, sizeof n, "%smodel.norm.weight", pre[c]);
        add_tensor(S, &cap, n, 1, HID, 1, 0, 1);
        snprintf(n, sizeof n, "%slm_head.weight", pre[c]);
        add_tensor(S, &cap, n, 2, vocab, HID, 0, 4);
    }
    int bcap = 0;
    for (int i = 0; i < S->nt; i++) {
        const tspec *T = &S->t[i];
        for (int p = 0; p < T->nsplit; p++) {
            if (S->nb == bcap) {
                bcap = bcap * 2 + 64;
                S->b = realloc(S->b, sizeof *S->b * (size_t)bcap);
                if (!S->b) abort();
            }
            bspec *B = &S->b[S->nb++];
            B->tensor = i;
            int64_t len = T->shape[T->split_dim], q = len / T->nsplit, r = len % T->nsplit;
            int64_t start = p * q + (p < r ? p : r), cnt = q + (p < r ? 1 : 0);
            assert(cnt > 0);
            for (int d = 0; d < 2; d++) { B->off[d] = 0; B->shp[d] = T->shape[d]; }
            B->off[T->split_dim] = start;
            B->shp[T->split_dim] = cnt;
            B->bytes = (size_t)(B->shp[0] * B->shp[1]) * 4;
            B->at = S->arena;
            S->arena += (B->bytes + 63) & ~(size_t)63;
            S->bytes += (int64_t)B->bytes;
        }
    }
}

/* Deterministic pseudo-random f32 values in [-1, 1) depending only on (seed, byte offset / 8). */
static void fill(void *p, size_t n, uint64_t seed) {
    uint32_t *w = p;
    size_t nw = n / 4;
    for (size_t i = 0; i + 1 < nw; i += 2) {
        uint64_t z = seed + 0x9e3779b97f4a7c15ull * (uint64_t)(i / 2 + 1);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        /* exponent 127 -> [1, 2), then sign: |x| in [1, 2) halves are fine for I/O */
        w[i] = 0x3f800000u | (uint32_t)(z & 0x807fffffu);
        w[i + 1] = 0x3f800000u | (uint32_t)((z >> 32) & 0x807fffffu);
    }
    if (nw & 1) w[nw - 1] = 0x3f800000u;
}

static void die_err(const char *what, const mp_err *e) {
    fprintf(stderr, "bench_ckpt: %s: %s\n", what, e->msg);
    exit(1);
}

/* Adds every box of the state (data in arena) to save s. */
static void add_all(ckpt_save *s, const state *S, const char *arena) {
    mp_err e;
    for (int j = 0; j < S->nb; j++) {
        const bspec *B = &S->b[j];
        const tspec *T = &S->t[B->tensor];
        if (ckpt_save_add(s, T->name, MP_F32, T->nd, T->shape, B->off, B->shp, arena + B->at, &e) != MP_OK)
            die_err("ckpt_save_add", &e);
    }
    char cfg[256];
    snprintf(cfg, sizeof cfg,
             "{\"hidden_size\": %d, \"intermediate_size\": %d, \"num_hidden_layers\": %d, "
             "\"num_key_value_heads\": 4, \"num_attention_heads\": 8, \"vocab_size\": %lld}",
             HID, INTER, S->layers, (long long)S->vocab);
    if (ckpt_save_meta(s, "model_config", cfg, &e) != MP_OK) die_err("ckpt_save_meta", &e);
}

/* Removes ROOT/step_N (its files, then the directory) and ROOT/latest: untimed cleanup between
 * rounds. The bench script removes ROOT itself at the end. */
static void remove_step(const char *root, const char *dir) {
    mp_err e;
    if (mp_fs_remove_tree(dir, &e) != MP_OK) die_err("removing a step", &e);
    char *p = mp_fs_join(root, "latest");
    unlink(p);
    free(p);
}

static double parse_gib(const char *s) {
    char *end;
    double g = strtod(s, &end);
    if (*end || !(g > 0) || g > 64) {
        fprintf(stderr, "bench_ckpt: size %s: not a number of GiB in (0, 64]\n", s);
        exit(2);
    }
    return g;
}

static int usage(void) {
    fprintf(stderr,
            "usage: bench_ckpt shapes GIB | save ROOT GIB STEP | async ROOT GIB ROUNDS | load DIR GIB [--boxes]"
            " | raw FILE GIB | h5 FILE GIB | hash GIB | prime GIB\n");
    return 2;
}

/* Touches n bytes of fresh anonymous memory, one write per page, and frees it (back to the kernel:
 * an allocation this large is an mmap). Called right before each timed section, so that the pages it
 * allocates (page cache, buffers) are backed by the host: this VM returns memory the guest has left
 * free for a few seconds to the host, and touching it again costs 1-2 s/GiB of host faults that land
 * on whichever process allocates first (docs/BENCH_CKPT.md, "Machine"). */
static double prime(size_t n) {
    volatile char *p = xalloc(n);
    double t0 = now();
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    free((void *)p);
    return now() - t0;
}

/* Room for the page cache of one state's bytes, primed before a timed write or read. */
static size_t prime_bytes(const state *S) { return (size_t)S->bytes + (size_t)S->bytes / 4; }

static int cmd_prime(double gib) {
    size_t n = (size_t)(gib * 1073741824.0);
    double t = prime(n);
    printf("prime bytes=%zu seconds=%.4f\n", n, t);
    return 0;
}

static int cmd_shapes(const state *S) {
    for (int i = 0; i < S->nt; i++) {
        const tspec *T = &S->t[i];
        if (T->nd == 1) printf("%s %lld\n", T->name, (long long)T->shape[0]);
        else printf("%s %lld %lld\n", T->name, (long long)T->shape[0], (long long)T->shape[1]);
    }
    return 0;
}

static int cmd_save(const state *S, const char *root, int64_t step) {
    char *arena = xalloc(S->arena);
    fill(arena, S->arena, 1);
    mp_comm *w = mp_comm_self();
    mp_err e;
    ckpt_save *s = NULL;
    ckpt_stats st;
    prime(prime_bytes(S));
    double u0, s0, u1, s1;
    cpu_s(&u0, &s0);
    double t0 = now();
    if (ckpt_save_begin(&s, w, root, step, NULL, &e) != MP_OK) die_err("ckpt_save_begin", &e);
    add_all(s, S, arena);
    if (ckpt_save_commit(s, &st, &e) != MP_OK) die_err("ckpt_save_commit", &e);
    double t = now() - t0;
    cpu_s(&u1, &s1);
    printf("save bytes=%lld seconds=%.4f write_s=%.4f commit_s=%.4f user_s=%.4f sys_s=%.4f file_bytes=%lld "
           "tensors=%d boxes=%d dir=%s\n", (long long)S->bytes, t, st.write_s, st.commit_s, u1 - u0, s1 - s0,
           (long long)st.file_bytes, S->nt, S->nb, ckpt_save_dir(s));
    ckpt_save_free(s);
    w->ops->destroy(w);
    free(arena);
    return 0;
}

static int cmp_dbl(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int cmd_async(const state *S, const char *root, int rounds) {
    char *src = xalloc(S->arena), *stage = xalloc(S->arena);
    fill(src, S->arena, 1);
    memset(stage, 0, S->arena);   /* pre-faulted, as a training run's reused staging buffer is */
    mp_comm *w = mp_comm_self();
    mp_err e;
    double *cp = calloc((size_t)rounds, sizeof(double)), *stl = calloc((size_t)rounds, sizeof(double));
    double *bg = calloc((size_t)rounds, sizeof(double)), *wr = calloc((size_t)rounds, sizeof(double));
    double *lib = calloc((size_t)rounds, sizeof(double));
    for (int r = 0; r < rounds; r++) {
        prime(prime_bytes(S));
        double t0 = now();
        memcpy(stage, src, S->arena);
        cp[r] = now() - t0;
        ckpt_save *s = NULL;
        ckpt_stats st;
        t0 = now();
        memcpy(stage, src, S->arena);
        double t1 = now();
        if (ckpt_save_begin(&s, w, root, 1000 + r, NULL, &e) != MP_OK) die_err("ckpt_save_begin", &e);
        add_all(s, S, stage);
        if (ckpt_save_start(s, &e) != MP_OK) die_err("ckpt_save_start", &e);
        double t2 = now();
        stl[r] = t2 - t0;
        lib[r] = t2 - t1;
        if (ckpt_save_wait(s, &st, &e) != MP_OK) die_err("ckpt_save_wait", &e);
        bg[r] = now() - t2;
        wr[r] = st.write_s;
        printf("async_round round=%d memcpy_s=%.4f stall_s=%.4f lib_s=%.4f background_s=%.4f write_s=%.4f "
               "commit_s=%.4f\n", r + 1, cp[r], stl[r], lib[r], bg[r], st.write_s, st.commit_s);
        fflush(stdout);
        remove_step(root, ckpt_save_dir(s));
        ckpt_save_free(s);
    }
    /* medians: the script prints these */
    qsort(cp, (size_t)rounds, sizeof(double), cmp_dbl);
    qsort(stl, (size_t)rounds, sizeof(double), cmp_dbl);
    qsort(bg, (size_t)rounds, sizeof(double), cmp_dbl);
    qsort(wr, (size_t)rounds, sizeof(double), cmp_dbl);
    qsort(lib, (size_t)rounds, sizeof(double), cmp_dbl);
    int m = rounds / 2;
    printf("async bytes=%lld rounds=%d memcpy_med=%.4f memcpy_best=%.4f stall_med=%.4f stall_best=%.4f "
           "lib_med=%.4f background_med=%.4f background_best=%.4f write_med=%.4f\n",
           (long long)S->bytes, rounds, cp[m], cp[0], stl[m], stl[0], lib[m], bg[m], bg[0], wr[m]);
    free(cp); free(stl); free(bg); free(wr); free(lib);
    w->ops->destroy(w);
    free(src);
    free(stage);
    return 0;
}

static int cmd_load(const state *S, const char *dir, int boxes) {
    /* destination: every whole tensor in its own slot (whole mode) or the boxes' slots (boxes mode) */
    size_t *tat = calloc((size_t)S->nt + 1, sizeof(size_t));
    size_t total = 0;
    for (int i = 0; i < S->nt; i++) {
        tat[i] = total;
        total += ((size_t)(S->t[i].shape[0] * S->t[i].shape[1]) * 4 + 63) & ~(size_t)63;
    }
    size_t dsz = boxes ? S->arena : total;
    char *dst = xalloc(dsz);
    memset(dst, 0xff, dsz);   /* pre-faulted */
    mp_err e;
    ckpt_reader *r = NULL;
    prime(prime_bytes(S));
    double u0, s0, u1, s1;
    cpu_s(&u0, &s0);
    double t0 = now();
    if (ckpt_open(&r, dir, &e) != MP_OK) die_err("ckpt_open", &e);
    double topen = now() - t0;
    if (ckpt_num_tensors(r) != S->nt) {
        fprintf(stderr, "bench_ckpt: %s holds %d tensors, the state of this size has %d\n", dir,
                ckpt_num_tensors(r), S->nt);
        return 1;
    }
    int64_t bytes = 0;
    if (boxes) {
        for (int j = 0; j < S->nb; j++) {
            const bspec *B = &S->b[j];
            if (j + 1 < S->nb) ckpt_prefetch(r, S->t[S->b[j + 1].tensor].name, S->b[j + 1].off, S->b[j + 1].shp);
            if (ckpt_read(r, S->t[B->tensor].name, B->off, B->shp, dst + B->at, &e) != MP_OK) die_err("ckpt_read", &e);
            bytes += (int64_t)B->bytes;
        }
    } else {
        for (int i = 0; i < S->nt; i++) {
            const tspec *T = &S->t[i];
            int64_t z[2] = {0, 0};
            /* as the trainer's loader does (cli/train_ckpt.c): the next tensor's reads start now */
            if (i + 1 < S->nt) ckpt_prefetch(r, S->t[i + 1].name, z, S->t[i + 1].shape);
            if (ckpt_read(r, T->name, z, T->shape, dst + tat[i], &e) != MP_OK) die_err("ckpt_read", &e);
            bytes += T->shape[0] * T->shape[1] * 4;
        }
    }
    double t = now() - t0;
    cpu_s(&u1, &s1);
    ckpt_close(r);
    /* untimed: the data must be the saved state */
    char *ref = xalloc(S->arena);
    fill(ref, S->arena, 1);
    int bad = 0;
    for (int j = 0; j < S->nb && !bad; j++) {
        const bspec *B = &S->b[j];
        const tspec *T = &S->t[B->tensor];
        if (boxes) {
            bad = memcmp(dst + B->at, ref + B->at, B->bytes) != 0;
            continue;
        }
        /* box rows inside the whole tensor (row-major [d0][d1]) */
        for (int64_t i = 0; i < B->shp[0] && !bad; i++) {
            const char *got = dst + tat[B->tensor] + (size_t)(((B->off[0] + i) * T->shape[1] + B->off[1]) * 4);
            bad = memcmp(got, ref + B->at + (size_t)(i * B->shp[1] * 4), (size_t)B->shp[1] * 4) != 0;
        }
        if (bad) fprintf(stderr, "bench_ckpt: tensor %s: loaded data differs from the saved state\n", T->name);
    }
    free(ref);
    free(dst);
    free(tat);
    if (bad) return 1;
    printf("load mode=%s bytes=%lld seconds=%.4f open_s=%.4f user_s=%.4f sys_s=%.4f\n", boxes ? "boxes" : "whole",
           (long long)bytes, t, topen, u1 - u0, s1 - s0);
    return 0;
}

/* The writer's hashing cost, two ways: one XXH3-64 pass per box, and the writer's scheme (ckpt/writer_hash.c,
 * format v2): the box's rows in order, each row once into a streaming box state and segment by segment
 * into one streaming state per column block of the tile geometry (ckpt_tile_geometry), digested into
 * the tile checksums at every tile-row boundary; then XXH3-64 of the tile array. */
static int cmd_hash(const state *S) {
    char *a = xalloc(S->arena);
    fill(a, S->arena, 1);
    uint64_t h = 0;
    double one = 1e30, two = 1e30;
    XXH3_state_t *box = XXH3_createState(), *col[8];
    for (int j = 0; j < 8; j++) col[j] = XXH3_createState();
    for (int rep = 0; rep < 3; rep++) {   /* best of 3: the figure is CPU time, not I/O */
        double t0 = now();
        for (int j = 0; j < S->nb; j++) h ^= XXH3_64bits(a + S->b[j].at, S->b[j].bytes);
        double t1 = now();
        for (int j = 0; j < S->nb; j++) {
            const bspec *B = &S->b[j];
            int64_t shp[2] = {B->shp[0], B->shp[1]}, tr, tc;
            ckpt_tile_geometry(4, 2, shp, &tr, &tc);
            int64_t row = shp[1] * 4, rows = shp[0], seg = tc * 4, ncb = (shp[1] + tc - 1) / tc;
            assert(ncb <= 8);
            uint64_t *tiles = malloc(sizeof(uint64_t) * (size_t)(((rows + tr - 1) / tr) * ncb));
            XXH3_64bits_reset(box);
            for (int64_t k = 0; k < ncb; k++) XXH3_64bits_reset(col[k]);
            const char *p = a + B->at;
            for (int64_t r = 0; r < rows; r++, p += row) {
                if (ncb == 1) {
                    XXH3_64bits_update(col[0], p, (size_t)row);
                    XXH3_64bits_update(box, p, (size_t)row);
                } else {
                    XXH3_64bits_update(box, p, (size_t)row);
                    for (int64_t k = 0; k < ncb; k++)
                        XXH3_64bits_update(col[k], p + k * seg, (size_t)(k < ncb - 1 ? seg : row - k * seg));
                }
                if ((r + 1) % tr == 0 || r + 1 == rows)
                    for (int64_t k = 0; k < ncb; k++) {
                        tiles[(r / tr) * ncb + k] = XXH3_64bits_digest(col[k]);
                        XXH3_64bits_reset(col[k]);
                    }
            }
            h ^= XXH3_64bits_digest(box);
            h ^= XXH3_64bits(tiles, sizeof(uint64_t) * (size_t)(((rows + tr - 1) / tr) * ncb));
            free(tiles);
        }
        double t2 = now();
        if (t1 - t0 < one) one = t1 - t0;
        if (t2 - t1 < two) two = t2 - t1;
    }
    XXH3_freeState(box);
    for (int j = 0; j < 8; j++) XXH3_freeState(col[j]);
    printf("hash bytes=%lld one_pass_s=%.4f writer_s=%.4f xor=%016llx\n", (long long)S->bytes, one, two,
           (unsigned long long)h);
    free(a);
    return 0;
}

/* The HDF5 container alone: the same boxes as CONTIGUOUS datasets /<name>/box_<k> of one file with the
 * writer's properties (sec2, no locking, v110, 1 MiB metadata blocks, 4 KiB alignment, no fill), one
 * H5Dwrite each, close, fsync; no hashing, no attributes, no index. */
static int cmd_h5(const state *S, const char *path) {
    char *a = xalloc(S->arena);
    fill(a, S->arena, 1);
    prime(prime_bytes(S));
    double u0, s0, u1, s1;
    cpu_s(&u0, &s0);
    double t0 = now();
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
    H5Pset_fapl_sec2(fapl);
    H5Pset_file_locking(fapl, 0, 1);
    H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110);
    H5Pset_meta_block_size(fapl, 1 << 20);
    H5Pset_alignment(fapl, 1 << 20, 4096);
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    if (f < 0) { fprintf(stderr, "bench_ckpt: cannot create %s\n", path); return 1; }
    hid_t lcpl = H5Pcreate(H5P_LINK_CREATE), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_create_intermediate_group(lcpl, 1);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    int prev = -1, k = 0;
    for (int j = 0; j < S->nb; j++) {
        const bspec *B = &S->b[j];
        const tspec *T = &S->t[B->tensor];
        k = B->tensor == prev ? k + 1 : 0;
        prev = B->tensor;
        char name[200];
        snprintf(name, sizeof name, "/%s/box_%d", T->name, k);
        hsize_t dims[2] = {(hsize_t)B->shp[0], (hsize_t)B->shp[1]};
        hid_t sp = H5Screate_simple(T->nd, dims, NULL);
        hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, lcpl, dcpl, H5P_DEFAULT);
        if (d < 0 || H5Dwrite(d, H5T_IEEE_F32LE, H5S_ALL, H5S_ALL, H5P_DEFAULT, a + B->at) < 0) {
            fprintf(stderr, "bench_ckpt: writing %s in %s failed\n", name, path);
            return 1;
        }
        H5Dclose(d);
        H5Sclose(sp);
    }
    H5Pclose(lcpl);
    H5Pclose(dcpl);
    H5Pclose(fapl);
    if (H5Fclose(f) < 0) { fprintf(stderr, "bench_ckpt: closing %s failed\n", path); return 1; }
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0 || close(fd) != 0) { perror(path); return 1; }
    double t = now() - t0;
    cpu_s(&u1, &s1);
    printf("h5 bytes=%lld seconds=%.4f user_s=%.4f sys_s=%.4f\n", (long long)S->bytes, t, u1 - u0, s1 - s0);
    free(a);
    return 0;
}

/* The I/O floor of a save in this process: the same arena, one pwrite per box (as the writer's one
 * H5Dwrite per contiguous dataset), fsync, close; no HDF5, no hashing. */
static int cmd_raw(const state *S, const char *path) {
    char *a = xalloc(S->arena);
    fill(a, S->arena, 1);
    prime(prime_bytes(S));
    double u0, s0, u1, s1;
    cpu_s(&u0, &s0);
    double t0 = now();
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) { perror(path); return 1; }
    off_t at = 0;
    for (int j = 0; j < S->nb; j++) {
        const char *p = a + S->b[j].at;
        size_t n = S->b[j].bytes;
        while (n > 0) {
            ssize_t w = pwrite(fd, p, n, at);
            if (w <= 0) { perror(path); return 1; }
            p += w; n -= (size_t)w; at += w;
        }
    }
    double t1 = now();
    if (fsync(fd) != 0 || close(fd) != 0) { perror(path); return 1; }
    double t = now() - t0;
    cpu_s(&u1, &s1);
    printf("raw bytes=%lld seconds=%.4f pwrite_s=%.4f fsync_s=%.4f user_s=%.4f sys_s=%.4f\n", (long long)S->bytes, t,
           t1 - t0, t - (t1 - t0), u1 - u0, s1 - s0);
    free(a);
    return 0;
}

int main(int argc, char **argv) {
    if (argc < 3) return usage();
    const char *cmd = argv[1];
    state S;
    if (!strcmp(cmd, "shapes") && argc == 3) {
        build_state(&S, parse_gib(argv[2]));
        return cmd_shapes(&S);
    }
    if (!strcmp(cmd, "hash") && argc == 3) {
        build_state(&S, parse_gib(argv[2]));
        return cmd_hash(&S);
    }
    if (!strcmp(cmd, "prime") && argc == 3) {
        char *end;
        double g = strtod(argv[2], &end);
        if (*end || !(g > 0) || g > 256) return usage();
        return cmd_prime(g);
    }
    if (!strcmp(cmd, "h5") && argc == 4) {
        build_state(&S, parse_gib(argv[3]));
        return cmd_h5(&S, argv[2]);
    }
    if (!strcmp(cmd, "raw") && argc == 4) {
        build_state(&S, parse_gib(argv[3]));
        return cmd_raw(&S, argv[2]);
    }
    if (!strcmp(cmd, "save") && argc == 5) {
        build_state(&S, parse_gib(argv[3]));
        return cmd_save(&S, argv[2], atoll(argv[4]));
    }
    if (!strcmp(cmd, "async") && argc == 5) {
        int rounds = atoi(argv[4]);
        if (rounds < 1 || rounds > 100) return usage();
        build_state(&S, parse_gib(argv[3]));
        return cmd_async(&S, argv[2], rounds);
    }
    if (!strcmp(cmd, "load") && (argc == 4 || (argc == 5 && !strcmp(argv[4], "--boxes")))) {
        build_state(&S, parse_gib(argv[3]));
        return cmd_load(&S, argv[2], argc == 5);
    }
    return usage();
}
