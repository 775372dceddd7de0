/*
 * bench/sgemm_rate.c — OpenBLAS's sgemm rate at given shapes: the limit that bench/bench_train.sh
 * measures training throughput against (model FLOP/s / sgemm FLOP/s = the fraction of the BLAS's
 * speed a training step achieves). Not a test.
 *
 *   sgemm_rate [--min-time S] SPEC...        threads: OPENBLAS_NUM_THREADS (OpenBLAS's own default: all cores)
 *   SPEC = [nn|nt|tn|tt:]MxNxK[*COUNT]       C[M,N] = op(A)[M,K] op(B)[K,N], row-major, as cblas_sgemm
 *
 * Each shape runs once untimed (page faults, packing buffers), then repeatedly until it has used at
 * least --min-time seconds of CPU time (default 0.3) and at least one call. Its rate is 2*M*N*K / (time of
 * one call), per CPU-second (user+sys of the whole process, CLOCK_PROCESS_CPUTIME_ID: stable when other
 * processes share the cores) and per wall second. The last line combines the shapes as one step would:
 *   result gflops_cpu=X gflops_wall=Y threads=T shapes=S core=NAME
 * with X = sum(COUNT * flops) / sum(COUNT * CPU time of one call), i.e. the rate of a mix in which shape i
 * occurs COUNT_i times (bench_train.sh passes a model's linear-layer GEMMs, forward and backward, with
 * their counts per step). Exit status 0, 2 on bad usage.
 */
#define _POSIX_C_SOURCE 200809L
#include <cblas.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int usage(void) {
    fprintf(stderr, "usage: sgemm_rate [--min-time S] [nn|nt|tn|tt:]MxNxK[*COUNT]...\n");
    return 2;
}

int main(int argc, char **argv) {
    double min_time = 0.3;
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--min-time") == 0) {
        min_time = atof(argv[2]);
        first = 3;
    }
    if (first >= argc) return usage();
    double sum_flops = 0, sum_cpu = 0, sum_wall = 0;
    int nshapes = 0;
    for (int i = first; i < argc; i++) {
        const char *s = argv[i];
        int ta = 0, tb = 0;
        if (strlen(s) > 3 && s[2] == ':') {
            if ((s[0] != 'n' && s[0] != 't') || (s[1] != 'n' && s[1] != 't')) return usage();
            ta = s[0] == 't';
            tb = s[1] == 't';
            s += 3;
        }
        long m, n, k;
        double count = 1;
        char tail[64] = "";
        int got = sscanf(s, "%ldx%ldx%ld%63s", &m, &n, &k, tail);
        if (got < 3 || m <= 0 || n <= 0 || k <= 0) return usage();
        if (tail[0]) {
            if (tail[0] != '*' || (count = atof(tail + 1)) <= 0) return usage();
        }
        float *a = malloc(sizeof(float) * (size_t)m * (size_t)k);
        float *b = malloc(sizeof(float) * (size_t)k * (size_t)n);
        float *c = malloc(sizeof(float) * (size_t)m * (size_t)n);
        if (!a || !b || !c) {
            fprintf(stderr, "sgemm_rate: out of memory for %ldx%ldx%ld\n", m, n, k);
            return 1;
        }
        for (size_t j = 0; j < (size_t)m * (size_t)k; j++) a[j] = (float)((j * 7 % 13) - 6) * 0.01f;
        for (size_t j = 0; j < (size_t)k * (size_t)n; j++) b[j] = (float)((j * 5 % 11) - 5) * 0.01f;
        memset(c, 0, sizeof(float) * (size_t)m * (size_t)n);
        int lda = ta ? (int)m : (int)k, ldb = tb ? (int)k : (int)n;
        CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
        cblas_sgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, 1.0f, a, lda, b, ldb, 0.0f, c, (int)n);
        double c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID), w0 = clock_s(CLOCK_MONOTONIC), cpu, wall;
        long calls = 0;
        do {
            cblas_sgemm(CblasRowMajor, opa, opb, (int)m, (int)n, (int)k, 1.0f, a, lda, b, ldb, 0.0f, c, (int)n);
            calls++;
            cpu = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
            wall = clock_s(CLOCK_MONOTONIC) - w0;
        } while (cpu < min_time);
        double flops = 2.0 * (double)m * (double)n * (double)k;
        printf("%c%c %6ldx%6ldx%6ld x%-4g %5ld calls  %8.2f GFLOP/s per CPU-s  %8.2f GFLOP/s wall\n", ta ? 't' : 'n',
               tb ? 't' : 'n', m, n, k, count, calls, flops * calls / cpu * 1e-9, flops * calls / wall * 1e-9);
        sum_flops += count * flops;
        sum_cpu += count * cpu / (double)calls;
        sum_wall += count * wall / (double)calls;
        nshapes++;
        free(a);
        free(b);
        free(c);
    }
    const char *core = openblas_get_corename();
    printf("result gflops_cpu=%.2f gflops_wall=%.2f threads=%d shapes=%d core=%s\n", sum_flops / sum_cpu * 1e-9,
           sum_flops / sum_wall * 1e-9, openblas_get_num_threads(), nshapes, core ? core : "?");
    return 0;
}
