/*
 * bench/membound_probe.cu — the memory-bound kernels of the training step alone on the GPU at the 1B
 * shape (N = 16384 rows of D = 2048), against a device-to-device cudaMemcpy moving the same bytes (the
 * peer measured in the same run: what this GPU's memory system gives a plain copy) and against the
 * design each replaced.
 *
 * Why: the step's profile (docs/CUDA.md's roofline) had rmsnorm_bwd at 6.9x its roofline. The
 * profile times an op with whatever it waits for; this program times each kernel alone on fresh aligned
 * buffers, so its ratio to the copy is the kernel's own distance from the memory roofline.
 *
 *   membound_probe [--rows 16384] [--dim 2048] [--rounds 5] [--reps 20]
 *
 * It #includes the kernel file (core/cuda/k_rmsnorm.cu), so it needs only the CUDA runtime (no library of
 * the project, nothing to load), and calls the launchers and, for the peers, the kernels directly:
 *   rmsnorm_bwd       mp_cuda_rmsnorm_bwd (warp per row, 16-byte accesses, shared dw accumulators)
 *   rmsnorm_bwd_wide  the block-per-chunk kernel (the previous design; now only for D > 12288) + column pass
 *   rmsnorm_fwd       mp_cuda_rmsnorm_fwd (16-byte accesses); rmsnorm_fwd_2b: the same lanes with 2-byte
 *                     accesses; rmsnorm_fwd_prev: one column per lane, 2-byte (the previous design)
 *   copy(bytes)       cudaMemcpyAsync device to device of half the op's bytes (read + write = its traffic)
 * Per row: ms per call (median over --rounds of the mean of --reps calls), GB/s of the op's bytes, and the
 * ratio to the copy of the same bytes. Exit: 0 done, 1 a CUDA error, 2 bad usage, 77 no usable GPU.
 * This reports; it does not judge (tests check correctness: tests/cuda/).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "core/cuda/k_rmsnorm.cu"

#define PCK(call)                                                                                       \
    do {                                                                                                \
        cudaError_t e_ = (call);                                                                        \
        if (e_ != cudaSuccess) {                                                                        \
            fprintf(stderr, "membound_probe: %s: %s\n", #call, cudaGetErrorString(e_));                \
            exit(1);                                                                                    \
        }                                                                                               \
    } while (0)

/* Median over `rounds` of the mean ms of `reps` calls of f (after one warm-up call). */
template <typename F>
static double time_ms(int rounds, int reps, const F &f) {
    cudaEvent_t a, b;
    PCK(cudaEventCreate(&a));
    PCK(cudaEventCreate(&b));
    f();
    PCK(cudaGetLastError());
    std::vector<double> t;
    for (int r = 0; r < rounds; r++) {
        PCK(cudaEventRecord(a));
        for (int i = 0; i < reps; i++) f();
        PCK(cudaEventRecord(b));
        PCK(cudaEventSynchronize(b));
        PCK(cudaGetLastError());
        float ms = 0;
        PCK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms / reps);
    }
    std::sort(t.begin(), t.end());
    PCK(cudaEventDestroy(a));
    PCK(cudaEventDestroy(b));
    return t[t.size() / 2];
}

/* A scratch copy moving `bytes` of traffic (read + write), timed like the kernels: the peer. */
static double copy_ms(size_t bytes, int rounds, int reps) {
    void *s = NULL, *d = NULL;
    PCK(cudaMalloc(&s, bytes / 2));
    PCK(cudaMalloc(&d, bytes / 2));
    PCK(cudaMemset(s, 0, bytes / 2));
    const double ms = time_ms(rounds, reps, [&] { PCK(cudaMemcpyAsync(d, s, bytes / 2, cudaMemcpyDeviceToDevice, 0)); });
    PCK(cudaFree(s));
    PCK(cudaFree(d));
    return ms;
}

static void row(const char *name, double ms, double bytes, double copy) {
    printf("%-18s %9.4f ms %8.0f GB/s   x%.2f of the copy (%.4f ms)\n", name, ms, bytes / ms * 1e-6, ms / copy, copy);
}

/* Fills n bf16 with values in [-1, 1) (a fixed LCG; the figures do not depend on the values). */
static mp_bf16 *dev_bf16(size_t n) {
    std::vector<mp_bf16> h(n);
    uint32_t s = 12345;
    for (auto &e : h) s = s * 1664525u + 1013904223u, e = __float2bfloat16_rn((float)(s >> 8) / 8388608.0f - 1.0f);
    mp_bf16 *p = NULL;
    PCK(cudaMalloc(&p, n * sizeof(mp_bf16)));
    PCK(cudaMemcpy(p, h.data(), n * sizeof(mp_bf16), cudaMemcpyHostToDevice));
    return p;
}

int main(int argc, char **argv) {
    int N = 16384, D = 2048, rounds = 5, reps = 20;
    for (int i = 1; i < argc; i++) {
        int *dst = !strcmp(argv[i], "--rows") ? &N : !strcmp(argv[i], "--dim") ? &D : !strcmp(argv[i], "--rounds") ? &rounds
                 : !strcmp(argv[i], "--reps") ? &reps : NULL;
        if (!dst || i + 1 == argc || (*dst = atoi(argv[++i])) <= 0) {
            fprintf(stderr, "usage: membound_probe [--rows N] [--dim D] [--rounds R] [--reps K] (all > 0)\n");
            return 2;
        }
    }
    int ndev = 0;
    const cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("membound_probe: no GPU: %s\n", e != cudaSuccess ? cudaGetErrorString(e) : "no device");
        return 77;
    }
    const size_t nd = (size_t)N * D;
    mp_bf16 *x = dev_bf16(nd), *dy = dev_bf16(nd), *dx = dev_bf16(nd), *y = dev_bf16(nd), *w = dev_bf16(D);
    float *rstd = NULL, *dw = NULL, *part = NULL;
    PCK(cudaMalloc(&rstd, N * sizeof(float)));
    PCK(cudaMalloc(&dw, D * sizeof(float)));
    PCK(cudaMemset(dw, 0, D * sizeof(float)));
    PCK(cudaMalloc(&part, mp_cuda_rmsnorm_bwd_scratch_floats(N, D) * sizeof(float)));
    mp_cuda_rmsnorm_fwd(y, rstd, x, w, N, D, 1e-5f, 0);   /* a real rstd for the backward */
    int rows, nchunks;
    mp_row_chunks(N, &rows, &nchunks);
    printf("membound_probe: N %d D %d, %d rounds x %d calls, median; dw chunks %d x %d rows, %d warps per block\n", N,
           D, rounds, reps, nchunks, rows, rms_bwd_warps(D));
    /* bytes: backward reads x, dy, dx and writes dx; forward reads x and writes y (w, rstd, dw: noise) */
    const double bwd_bytes = 8.0 * nd, fwd_bytes = 4.0 * nd;
    const double cb = copy_ms((size_t)bwd_bytes, rounds, reps), cf = copy_ms((size_t)fwd_bytes, rounds, reps);
    row("rmsnorm_bwd", time_ms(rounds, reps, [&] { mp_cuda_rmsnorm_bwd(dx, dw, part, dy, x, w, rstd, N, D, 0); }),
        bwd_bytes, cb);
    row("rmsnorm_bwd_wide", time_ms(rounds, reps, [&] {
            rmsnorm_bwd_wide_kernel<<<nchunks, BWD_THREADS>>>(dx, part, dy, x, w, rstd, N, D, rows);
            mp_chunk_sum_kernel<<<(D + 255) / 256, 256>>>(dw, part, nchunks, D);
        }), bwd_bytes, cb);
    row("rmsnorm_fwd", time_ms(rounds, reps, [&] { mp_cuda_rmsnorm_fwd(y, rstd, x, w, N, D, 1e-5f, 0); }), fwd_bytes, cf);
    const int fblocks = (N + FWD_ROWS_PER_BLOCK - 1) / FWD_ROWS_PER_BLOCK, fthreads = FWD_ROWS_PER_BLOCK * MP_WARP;
    if (D % 8 == 0)
        row("rmsnorm_fwd_2b", time_ms(rounds, reps, [&] {
                rmsnorm_fwd_kernel<8, false><<<fblocks, fthreads>>>(y, rstd, x, w, N, D, 1e-5f);
            }), fwd_bytes, cf);
    row("rmsnorm_fwd_prev", time_ms(rounds, reps, [&] {
            rmsnorm_fwd_kernel<1, false><<<fblocks, fthreads>>>(y, rstd, x, w, N, D, 1e-5f);
        }), fwd_bytes, cf);
    PCK(cudaDeviceSynchronize());
    cudaFree(x), cudaFree(dy), cudaFree(dx), cudaFree(y), cudaFree(w), cudaFree(rstd), cudaFree(dw), cudaFree(part);
    return 0;
}
