/*
 * bench/bench_ckpt_mesh.c — meshpoint's side of the multi-process comparison with PyTorch Distributed
 * Checkpoint in bench/bench_ckpt.sh (the DCP side is bench/dcp_ckpt.py; both follow the same rules).
 *
 * Run under mpirun, N processes. The state is the one bench_ckpt builds (parameters + both AdamW
 * moments of its Llama-shaped model): the tensors of SHAPES, the output of `bench_ckpt shapes GIB`
 * ("name dim0 [dim1]" per line, f32). Each process holds its shard of every tensor in one of two
 * layouts over the N processes:
 *   tp    Megatron tensor parallel of degree N: o_proj and down_proj split along dim 1 (row-parallel),
 *         every other 2-D tensor (q/k/v/gate/up, embedding and head, vocab-parallel) along dim 0,
 *         1-D norms replicated (written once, by rank 0; every rank loads them whole);
 *   fsdp  FSDP over N (tp 1 x dp N): every tensor, norms too, split along dim 0.
 * Splits follow torch.chunk (DTensor's Shard): chunk = ceil(len / N), rank r gets
 * [r*chunk, min(len, (r+1)*chunk)). Value of element g (row-major global index) of tensor t (its line
 * in SHAPES): ((g * 2654435761 + t * 40503) & 0xffffff) / 2^24, as in dcp_ckpt.py, so a load in any
 * layout can be checked.
 *
 *   bench_ckpt_mesh save SHAPES ROOT STEP LAYOUT   fill (untimed), then timed from a barrier to the last
 *                                                  rank's return of ckpt_save_commit (begin, add every
 *                                                  local box, commit: rank files + fsync, index.h5,
 *                                                  rename, `latest`)
 *   bench_ckpt_mesh load SHAPES DIR LAYOUT         a touched destination for this rank's boxes
 *                                                  (untimed), then timed from a barrier to the last
 *                                                  rank's end of ckpt_open + one ckpt_read per local box
 *                                                  (checksums verified); then (untimed) the values are
 *                                                  checked
 *
 * Before the timed part each rank primes 1.25x its share of the state (see bench_ckpt.c, prime()).
 * Memory: right before the timed part the peak RSS is reset (`5` into /proc/self/clear_refs) and
 * VmRSS read; after it VmHWM: extra = VmHWM - VmRSS before (what the operation added on top of the
 * state the process already holds). I/O: /proc/self/io rchar (bytes through read syscalls, page cache
 * hits included) and read_bytes (bytes the block layer fetched for this process) around the timed part,
 * and the reader's own counters (ckpt_reader_io). Rank 0 prints one line of sums over the ranks:
 *   mesh_save procs= layout= bytes= seconds= extra_rss= hwm= state=
 *   mesh_load procs= layout= needed= seconds= rchar= read_bytes= lib_read= lib_needed= extra_rss= hwm= state=
 * (bytes/needed/state: the bytes of the local boxes; extra_rss, hwm: bytes, summed over the ranks).
 * Exit status: 0 ok, 1 a failed operation or check, 2 bad usage.
 */
#define _GNU_SOURCE
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ckpt/ckpt.h"
#include "core/comm_mpi.h"
#include "core/error.h"

typedef struct {
    char name[200];
    int nd;
    int64_t shape[2];
} tens;

typedef struct {
    int t;                    /* tensor index */
    int64_t off[2], shp[2];
    size_t at, bytes;         /* slot in the arena */
} box;

static int g_rank, g_size;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "bench_ckpt_mesh [rank %d]: ", g_rank);
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n");
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

static tens *read_shapes(const char *path, int *nt) {
    FILE *f = fopen(path, "r");
    if (!f) die("cannot open %s%s", path, "");
    int cap = 0, n = 0;
    tens *T = NULL;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        tens x;
        long long d0 = 0, d1 = 0;
        int k = sscanf(line, "%199s %lld %lld", x.name, &d0, &d1);
        if (k < 2) continue;
        x.nd = k == 3 ? 2 : 1;
        x.shape[0] = d0;
        x.shape[1] = k == 3 ? d1 : 1;
        if (n == cap) {
            cap = cap * 2 + 64;
            T = realloc(T, sizeof *T * (size_t)cap);
            if (!T) abort();
        }
        T[n++] = x;
    }
    fclose(f);
    if (!n) die("%s: no tensors%s", path, "");
    *nt = n;
    return T;
}

/* This rank's boxes of layout tp or fsdp (see the top of the file); *arena gets the arena size. */
static box *local_boxes(const tens *T, int nt, int fsdp, int save, int *nb, size_t *arena) {
    box *B = calloc((size_t)nt, sizeof *B);
    int n = 0;
    size_t at = 0;
    for (int i = 0; i < nt; i++) {
        box b = {.t = i};
        b.off[0] = b.off[1] = 0;
        b.shp[0] = T[i].shape[0];
        b.shp[1] = T[i].shape[1];
        int dim = 0, repl = 0;
        if (!fsdp) {
            if (T[i].nd == 1) repl = 1;
            else if (strstr(T[i].name, "o_proj") || strstr(T[i].name, "down_proj")) dim = 1;
        }
        if (repl) {
            if (save && g_rank != 0) continue;   /* written once */
        } else {
            int64_t len = T[i].shape[dim], c = (len + g_size - 1) / g_size, s = (int64_t)g_rank * c;
            int64_t cnt = len - s < c ? len - s : c;
            if (cnt <= 0) continue;
            b.off[dim] = s;
            b.shp[dim] = cnt;
        }
        b.bytes = (size_t)(b.shp[0] * b.shp[1]) * 4;
        b.at = at;
        at += (b.bytes + 63) & ~(size_t)63;
        B[n++] = b;
    }
    *nb = n;
    *arena = at;
    return B;
}

static float value(int64_t g, int t) {
    uint64_t x = (uint64_t)g * 2654435761ull + (uint64_t)t * 40503ull;
    return (float)(x & 0xffffff) / 16777216.0f;
}

static void fill_box(float *p, const box *b, const tens *T) {
    int64_t d1 = T[b->t].shape[1];
    for (int64_t i = 0; i < b->shp[0]; i++)
        for (int64_t j = 0; j < b->shp[1]; j++)
            p[i * b->shp[1] + j] = value((b->off[0] + i) * d1 + b->off[1] + j, b->t);
}

static int check_box(const float *p, const box *b, const tens *T) {
    int64_t d1 = T[b->t].shape[1];
    for (int64_t i = 0; i < b->shp[0]; i++)
        for (int64_t j = 0; j < b->shp[1]; j++)
            if (p[i * b->shp[1] + j] != value((b->off[0] + i) * d1 + b->off[1] + j, b->t)) return 0;
    return 1;
}

static void *xalloc(size_t n) {
    void *p = NULL;
    if (posix_memalign(&p, 4096, n ? n : 1) != 0) die("out of memory%s%s", "", "");
    return p;
}

static void prime(size_t n) {
    volatile char *p = xalloc(n);
    for (size_t i = 0; i < n; i += 4096) p[i] = 1;
    free((void *)p);
}

/* kB value of field (e.g. "VmHWM:") of /proc/self/status, in bytes. */
static double status_bytes(const char *field) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double v = -1;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, field, n)) { v = 1024.0 * atof(line + n); break; }
    if (f) fclose(f);
    return v;
}

static void reset_hwm(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f || fputs("5", f) < 0 || fclose(f) != 0) die("cannot reset the peak RSS (/proc/self/clear_refs)%s%s", "", "");
}

static void proc_io(double *rchar, double *read_bytes) {
    FILE *f = fopen("/proc/self/io", "r");
    char line[256];
    *rchar = *read_bytes = -1;
    while (f && fgets(line, sizeof line, f)) {
        if (!strncmp(line, "rchar:", 6)) *rchar = atof(line + 6);
        else if (!strncmp(line, "read_bytes:", 11)) *read_bytes = atof(line + 11);
    }
    if (f) fclose(f);
}

/* Sums v[0..n) over the ranks onto rank 0. */
static void sum0(double *v, int n) {
    MPI_Reduce(g_rank ? v : MPI_IN_PLACE, v, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_size);
    int save = argc == 6 && !strcmp(argv[1], "save"), load = argc == 5 && !strcmp(argv[1], "load");
    const char *lay = argv[argc - 1];
    if ((!save && !load) || (strcmp(lay, "tp") && strcmp(lay, "fsdp"))) {
        if (!g_rank)
            fprintf(stderr, "usage: mpirun -np N bench_ckpt_mesh save SHAPES ROOT STEP tp|fsdp | load SHAPES DIR tp|fsdp\n");
        MPI_Finalize();
        return 2;
    }
    int nt, nb;
    size_t arena;
    tens *T = read_shapes(argv[2], &nt);
    box *B = local_boxes(T, nt, !strcmp(lay, "fsdp"), save, &nb, &arena);
    char *a = xalloc(arena);
    double state = 0;
    for (int j = 0; j < nb; j++) state += (double)B[j].bytes;
    mp_comm *w = mp_comm_mpi_create(MPI_COMM_WORLD);
    mp_err e;
    double io0[2], io1[2];
    int ok = 1;
    if (save) {
        for (int j = 0; j < nb; j++) fill_box((float *)(a + B[j].at), &B[j], T);
        prime(arena + arena / 4);
        reset_hwm();
        double rss0 = status_bytes("VmRSS:");
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = now();
        ckpt_save *s = NULL;
        if (ckpt_save_begin(&s, w, argv[3], atoll(argv[4]), NULL, &e) != MP_OK) die("ckpt_save_begin: %s%s", e.msg, "");
        for (int j = 0; j < nb; j++)
            if (ckpt_save_add(s, T[B[j].t].name, MP_F32, T[B[j].t].nd, T[B[j].t].shape, B[j].off, B[j].shp,
                              a + B[j].at, &e) != MP_OK)
                die("ckpt_save_add: %s%s", e.msg, "");
        if (ckpt_save_commit(s, NULL, &e) != MP_OK) die("ckpt_save_commit: %s%s", e.msg, "");
        MPI_Barrier(MPI_COMM_WORLD);
        double t = now() - t0;
        double hwm = status_bytes("VmHWM:");
        ckpt_save_free(s);
        double v[3] = {state, hwm - rss0, hwm};
        sum0(v, 3);
        if (!g_rank)
            printf("mesh_save procs=%d layout=%s bytes=%.0f seconds=%.4f extra_rss=%.0f hwm=%.0f state=%.0f\n", g_size,
                   lay, v[0], t, v[1], v[2], v[0]);
    } else {
        memset(a, 0xff, arena);   /* the destination, touched: the state this process holds */
        prime(arena + arena / 4);
        reset_hwm();
        double rss0 = status_bytes("VmRSS:");
        MPI_Barrier(MPI_COMM_WORLD);
        proc_io(&io0[0], &io0[1]);
        double t0 = now();
        ckpt_reader *r = NULL;
        if (ckpt_open(&r, argv[3], &e) != MP_OK) die("ckpt_open %s: %s", argv[3], e.msg);
        for (int j = 0; j < nb; j++)
            if (ckpt_read(r, T[B[j].t].name, B[j].off, B[j].shp, a + B[j].at, &e) != MP_OK)
                die("ckpt_read %s: %s", T[B[j].t].name, e.msg);
        proc_io(&io1[0], &io1[1]);
        MPI_Barrier(MPI_COMM_WORLD);
        double t = now() - t0;
        double hwm = status_bytes("VmHWM:");
        int64_t lr = 0, ln = 0;
        ckpt_reader_io(r, &lr, &ln);
        ckpt_close(r);
        for (int j = 0; j < nb && ok; j++) {
            ok = check_box((const float *)(a + B[j].at), &B[j], T);
            if (!ok) fprintf(stderr, "bench_ckpt_mesh [rank %d]: %s: loaded values differ\n", g_rank, T[B[j].t].name);
        }
        double v[8] = {state, io1[0] - io0[0], io1[1] - io0[1], (double)lr, (double)ln, hwm - rss0, hwm, ok ? 0 : 1};
        sum0(v, 8);
        if (!g_rank && v[7] == 0)
            printf("mesh_load procs=%d layout=%s needed=%.0f seconds=%.4f rchar=%.0f read_bytes=%.0f lib_read=%.0f "
                   "lib_needed=%.0f extra_rss=%.0f hwm=%.0f state=%.0f\n", g_size, lay, v[0], t, v[1], v[2], v[3], v[4],
                   v[5], v[6], v[0]);
        ok = v[7] == 0 || g_rank;
        MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD);
    }
    w->ops->destroy(w);
    free(a);
    free(B);
    free(T);
    MPI_Finalize();
    return ok ? 0 : 1;
}
