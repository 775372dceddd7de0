/*
 * bench/bench_attn.c — the CPU attention backward against the T x T version it replaced.
 *
 * Until commit 5f43e20 the forward stored the softmax probabilities P ([B,H,T,T]) and the backward
 * read them: four products per query block (dP, dQ, dK, dV) over the causal prefix, plus a T x T
 * scratch for dS. The flash-style backward that replaced it keeps no T x T matrix (activation memory
 * O(B*H*T)) and recomputes P block by block from q, k and the forward's log-sum-exp: five products
 * per block pair and the exps. This program times both on the same inputs, alternating, on the
 * default build's dispatched kernel (mp_backend_cpu(): the ISA level users get, printed) against the
 * old code reproduced below verbatim (the peer), and prints CPU seconds per backward and the ratio.
 * It also checks the two agree (max |difference| over dq, dk, dv, relative to max |value|), so a
 * faster but wrong kernel cannot pass for a fast one.
 *
 *   bench_attn B T H KV HD [ROUNDS] [REPS]     e.g. bench_attn 4 256 4 2 64 (bench_tiny's shape)
 *   bench_attn --fwd B T H KV HD [ROUNDS] [REPS]   the forward alone (time_forward), for A/B of builds
 *
 * Output: one line per round ("round i: flash X ms  TxT Y ms  ratio R"), then the median ratio.
 * Exit status: 0 done, 1 the kernels disagree, 2 bad usage. Threads: whatever OMP_NUM_THREADS says
 * (bench/bench_attn.sh runs one); both kernels run their (b, kv head) items on the same team.
 */
#define _GNU_SOURCE
#include "core/backend.h"
#include "core/kernels_cpu.h"
#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Process CPU seconds (all threads). */
static double cpu_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the peer: the T x T backward of core/kernels_cpu_attn.c at 5f43e20^ (P read, D a T x T scratch) ---- */
enum { TXT_BLOCK = 64 };

static void txt_bwd_head(float *dQ, float *dK, float *dV, int ldq, int ldkv, float *D, const float *dO,
                         const float *P, const float *Q, const float *K, const float *V, int T, int hd, float scale) {
    for (int r0 = 0; r0 < T; r0 += TXT_BLOCK) {
        int r1 = r0 + TXT_BLOCK < T ? r0 + TXT_BLOCK : T;
        int m = r1 - r0;
        const float *Pb = P + (size_t)r0 * T;
        float *Db = D + (size_t)r0 * T;
        const float *dOb = dO + (size_t)r0 * ldq;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, r1, hd, 1.0f, dOb, ldq, V, ldkv, 0.0f, Db, T);
        for (int t = r0; t < r1; t++) {
            const float *restrict p = P + (size_t)t * T;
            float *restrict d = D + (size_t)t * T;
            float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
            for (int j = 0; j <= t; j++) dot += p[j] * d[j];
            for (int j = 0; j <= t; j++) d[j] = scale * p[j] * (d[j] - dot);
            for (int j = t + 1; j < r1; j++) d[j] = 0.0f;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, hd, r1, 1.0f, Db, T, K, ldkv, 0.0f,
                    dQ + (size_t)r0 * ldq, ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, m, 1.0f, Db, T, Q + (size_t)r0 * ldq, ldq,
                    1.0f, dK, ldkv);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, r1, hd, m, 1.0f, Pb, T, dOb, ldq, 1.0f, dV, ldkv);
    }
}

static void txt_bwd(float *dq, float *dk, float *dv, float *scratch, const float *dout, const float *att,
                    const float *q, const float *k, const float *v, int B, int T, int H, int KV, int hd) {
    const int rep = H / KV;
    const float scale = 1.0f / sqrtf((float)hd);
    const int items = B * KV;
#pragma omp parallel for schedule(static) num_threads(mp_cpu_team(items))
    for (int it = 0; it < items; it++) {
        int b = it / KV, g = it % KV;
        const size_t kvoff = ((size_t)b * T * KV + g) * hd;
        float *dK = dk + kvoff, *dV = dv + kvoff;
        for (int t = 0; t < T; t++) {
            memset(dK + (size_t)t * KV * hd, 0, (size_t)hd * sizeof(float));
            memset(dV + (size_t)t * KV * hd, 0, (size_t)hd * sizeof(float));
        }
        for (int h = g * rep; h < (g + 1) * rep; h++) {
            const size_t qoff = ((size_t)b * T * H + h) * hd, poff = ((size_t)b * H + h) * T * T;
            txt_bwd_head(dq + qoff, dK, dV, H * hd, KV * hd, scratch + poff, dout + qoff, att + poff, q + qoff,
                         k + kvoff, v + kvoff, T, hd, scale);
        }
    }
}

/* ---- inputs ---- */

/* n floats uniform in [-1, 1) from a fixed LCG (the same inputs every run). */
static float *random_floats(size_t n, unsigned seed) {
    float *x = malloc(n * sizeof *x);
    if (!x) { fprintf(stderr, "bench_attn: out of memory (%zu floats)\n", n); exit(1); }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)(seed >> 8) / (float)(1u << 23) - 1.0f;
    }
    return x;
}

/* P = exp(scale q k^T - lse), causal, [B,H,T,T]: what the old forward stored (from the new forward's lse). */
static float *probabilities(const float *q, const float *k, const float *lse, int B, int T, int H, int KV, int hd) {
    float *P = calloc((size_t)B * H * T * T, sizeof *P);
    if (!P) { fprintf(stderr, "bench_attn: out of memory (P)\n"); exit(1); }
    const float scale = 1.0f / sqrtf((float)hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                float *p = P + (((size_t)b * H + h) * T + t) * T;
                const float *qt = q + ((size_t)(b * T + t) * H + h) * hd;
                for (int j = 0; j <= t; j++) {
                    const float *kj = k + ((size_t)(b * T + j) * KV + h / (H / KV)) * hd;
                    double s = 0.0;
                    for (int d = 0; d < hd; d++) s += (double)qt[d] * kj[d];
                    p[j] = (float)exp(scale * s - lse[((size_t)b * H + h) * T + t]);
                }
            }
    return P;
}

/* max |a - b| / max |b| over n floats. */
static double rel_diff(const float *a, const float *b, size_t n) {
    double d = 0.0, m = 0.0;
    for (size_t i = 0; i < n; i++) {
        d = fmax(d, fabs((double)a[i] - b[i]));
        m = fmax(m, fabs((double)b[i]));
    }
    return m > 0.0 ? d / m : d;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --fwd: the forward alone, CPU ms per call and useful causal GFLOP/s (the two products over the
 * T (T + 1) / 2 query-key pairs of each head), the median of the rounds: for A/B runs of two builds
 * (the forward has no old peer kept in this file). */
static int time_forward(mp_backend *be, int B, int T, int H, int KV, int hd, int rounds, int reps) {
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd;
    float *q = random_floats(nq, 1), *k = random_floats(nkv, 2), *v = random_floats(nkv, 3);
    float *out = random_floats(nq, 5), *lse = random_floats((size_t)B * H * T, 6);
    double ms[99];
    be->attn_fwd(be, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);   /* warm */
    for (int r = 0; r < rounds; r++) {
        double t0 = cpu_seconds();
        for (int i = 0; i < reps; i++) be->attn_fwd(be, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
        ms[r] = 1e3 * (cpu_seconds() - t0) / reps;
    }
    qsort(ms, (size_t)rounds, sizeof ms[0], cmp_double);
    const double flops = 4.0 * B * H * ((double)T * (T + 1) / 2) * hd;
    printf("bench_attn --fwd: B=%d T=%d H=%d KV=%d hd=%d, isa %s, %d threads: median %.3f ms per forward, "
           "%.1f useful GFLOP/s per CPU-s (%d rounds of %d)\n", B, T, H, KV, hd, mp_cpu_isa(), mp_cpu_threads(),
           ms[rounds / 2], flops / ms[rounds / 2] * 1e-6, rounds, reps);
    free(q), free(k), free(v), free(out), free(lse);
    return 0;
}

int main(int argc, char **argv) {
    const int fwd = argc > 1 && !strcmp(argv[1], "--fwd");
    argv += fwd, argc -= fwd;
    if (argc < 6) {
        fprintf(stderr, "usage: bench_attn [--fwd] B T H KV HD [ROUNDS] [REPS]\n");
        return 2;
    }
    const int B = atoi(argv[1]), T = atoi(argv[2]), H = atoi(argv[3]), KV = atoi(argv[4]), hd = atoi(argv[5]);
    const int rounds = argc > 6 ? atoi(argv[6]) : 5, reps = argc > 7 ? atoi(argv[7]) : 5;
    if (B < 1 || T < 1 || H < 1 || KV < 1 || H % KV || hd < 1 || rounds < 1 || rounds > 99 || reps < 1) {
        fprintf(stderr, "bench_attn: bad shape or counts (H must be a multiple of KV; rounds 1..99)\n");
        return 2;
    }
    mp_backend *be = mp_backend_cpu();
    if (fwd) return time_forward(be, B, T, H, KV, hd, rounds, reps);
    const size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KV * hd, nrow = (size_t)B * H * T;
    float *q = random_floats(nq, 1), *k = random_floats(nkv, 2), *v = random_floats(nkv, 3);
    float *dout = random_floats(nq, 4), *out = random_floats(nq, 5), *lse = random_floats(nrow, 6);
    float *dq = random_floats(nq, 7), *dk = random_floats(nkv, 8), *dv = random_floats(nkv, 9);
    float *dq2 = random_floats(nq, 7), *dk2 = random_floats(nkv, 8), *dv2 = random_floats(nkv, 9);
    float *scratch = random_floats(nrow, 10);
    float *D = calloc((size_t)B * H * T * T, sizeof *D);
    if (!D) { fprintf(stderr, "bench_attn: out of memory (D)\n"); return 1; }
    be->attn_fwd(be, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    float *P = probabilities(q, k, lse, B, T, H, KV, hd);

    be->attn_bwd(be, dq, dk, dv, scratch, dout, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
    txt_bwd(dq2, dk2, dv2, D, dout, P, q, k, v, B, T, H, KV, hd);
    double diff = fmax(rel_diff(dq, dq2, nq), fmax(rel_diff(dk, dk2, nkv), rel_diff(dv, dv2, nkv)));
    printf("bench_attn: B=%d T=%d H=%d KV=%d hd=%d, isa %s, %d threads, %d backwards per timing; "
           "max relative difference flash vs T x T %.2e\n", B, T, H, KV, hd, mp_cpu_isa(), mp_cpu_threads(), reps,
           diff);
    float *owned[] = {q, k, v, dout, out, lse, dq, dk, dv, dq2, dk2, dv2, scratch, D, P};
    int status = 0;
    if (!(diff < 1e-4)) {
        fprintf(stderr, "bench_attn: the flash and T x T backwards disagree (%.3e)\n", diff);
        status = 1;
    }
    double ratios[99];
    for (int r = 0; r < rounds && !status; r++) {
        double t0 = cpu_seconds();
        for (int i = 0; i < reps; i++)
            be->attn_bwd(be, dq, dk, dv, scratch, dout, out, lse, q, k, v, B, T, H, KV, hd, H * hd, KV * hd, 0);
        double t1 = cpu_seconds();
        for (int i = 0; i < reps; i++) txt_bwd(dq2, dk2, dv2, D, dout, P, q, k, v, B, T, H, KV, hd);
        double t2 = cpu_seconds();
        ratios[r] = (t1 - t0) / (t2 - t1);
        printf("round %d: flash %.3f ms  TxT %.3f ms  flash/TxT %.3f\n", r + 1, 1e3 * (t1 - t0) / reps,
               1e3 * (t2 - t1) / reps, ratios[r]);
    }
    if (!status) {
        qsort(ratios, (size_t)rounds, sizeof ratios[0], cmp_double);
        printf("median flash/TxT CPU time: %.3f (%d rounds; <= 1.00 means the flash backward is at least as fast)\n",
               ratios[rounds / 2], rounds);
    }
    for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++) free(owned[i]);   /* clean under LeakSanitizer */
    return status;
}
