/*
 * core/cpu_isa.c — which copy of the CPU kernels runs: runtime ISA dispatch, and the CPU
 * kernels' thread team.
 *
 * One portable binary, as fast as a native one: core/backend_cpu.c and the attention kernels are
 * compiled once per x86-64 level (v2: SSE4.2; v3: AVX2, FMA, BMI2; v4: AVX-512 F/BW/CD/DQ/VL), each copy
 * with its own table (mp_backend_cpu_v2/_v3/_v4), and mp_backend_cpu() hands out the table of the best
 * level the CPU (and the OS: __builtin_cpu_supports checks that AVX/AVX-512 state is enabled) runs,
 * chosen once, the way OpenBLAS, ggml and simdjson pick their kernels. MP_ISA=v2|v3|v4 forces a level
 * (a level above the CPU's is refused by mp_cpu_isa_check). Results are bitwise reproducible within one
 * level (across meshes, resumes and thread counts); between levels the last bits differ (FMA contraction
 * and vector widths change the rounding: docs/DESIGN_NOTES.md), which is why the level is logged and
 * recorded in checkpoints. A build with one level only (MP_NATIVE, a custom MP_ARCH, a non-x86 CPU)
 * compiles the kernels once, unsuffixed (MP_ISA_SINGLE names it).
 *
 * OpenBLAS picks its own kernels at load time from the CPU model (or OPENBLAS_CORETYPE); they change GEMM
 * rounding as the ISA level does, so mp_cpu_blas_core() reports them beside the level (--version, the
 * train log). meshpoint does not override OpenBLAS's choice: some machines force an older core on purpose
 * (OpenBLAS releases older than the CPU can compute wrong results with their newest kernels there).
 */
#include "core/backend.h"
#include "core/fault.h"
#include "core/kernels_cpu.h"
#include <cblas.h>
#include <omp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the CPU kernels' thread team ---- */

static int g_thread_cap = 1 << 30;
static pthread_once_t g_thread_once = PTHREAD_ONCE_INIT;

static void threads_init(void) {
    const char *e = getenv("OPENBLAS_NUM_THREADS");
    int cap = e ? atoi(e) : 0;
    if (cap >= 1) g_thread_cap = cap;
    openblas_set_num_threads(1);
}

int mp_cpu_threads(void) {
    pthread_once(&g_thread_once, threads_init);
    int n = omp_get_max_threads();
    return n < g_thread_cap ? n : g_thread_cap;
}

/* ---- the ISA level ---- */

#ifdef MP_ISA_SINGLE
mp_backend *mp_backend_cpu_one(void);   /* core/backend_cpu.c compiled once, MP_ISA_SUFFIX _one */
void mp_cpu_expf_array_one(float *y, const float *x, int64_t n);
static const struct {
    const char *name, *label;
    mp_backend *(*table)(void);
    void (*expf_array)(float *, const float *, int64_t);
} g_levels[] = {{MP_ISA_SINGLE, MP_ISA_SINGLE, mp_backend_cpu_one, mp_cpu_expf_array_one}};
/* A one-level build runs what it was compiled for. */
static int cpu_runs(int i) { return i == 0; }
#else
mp_backend *mp_backend_cpu_v2(void);
mp_backend *mp_backend_cpu_v3(void);
mp_backend *mp_backend_cpu_v4(void);
void mp_cpu_expf_array_v2(float *y, const float *x, int64_t n);
void mp_cpu_expf_array_v3(float *y, const float *x, int64_t n);
void mp_cpu_expf_array_v4(float *y, const float *x, int64_t n);
static const struct {
    const char *name, *label;
    mp_backend *(*table)(void);
    void (*expf_array)(float *, const float *, int64_t);
} g_levels[] = {{"v2", "x86-64-v2", mp_backend_cpu_v2, mp_cpu_expf_array_v2},
                {"v3", "x86-64-v3 (AVX2, FMA)", mp_backend_cpu_v3, mp_cpu_expf_array_v3},
                {"v4", "x86-64-v4 (AVX-512)", mp_backend_cpu_v4, mp_cpu_expf_array_v4}};

/* Does this CPU run level i? The feature lists of the x86-64 psABI levels, as both gcc and clang spell
 * them (clang 14 has no "x86-64-v3" name). The fault cpu_isa_max:vN pretends the CPU stops at level N. */
static int cpu_runs(int i) {
    char buf[8];
    const char *t = mp_fault_arg("cpu_isa_max", buf, sizeof buf);
    if (t && t[0] == 'v' && t[1] >= '2' && t[1] <= '4' && !t[2] && i > t[1] - '2') return 0;
    __builtin_cpu_init();
    int v2 = __builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("popcnt");
    int v3 = v2 && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
             __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2");
    int v4 = v3 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512vl");
    return i == 0 ? v2 : i == 1 ? v3 : v4;
}
#endif
#define NLEVELS ((int)(sizeof g_levels / sizeof g_levels[0]))

static int g_level = -1;
static pthread_once_t g_level_once = PTHREAD_ONCE_INIT;

/* ---- OpenBLAS's kernels (see the top of the file) ---- */

static char g_blas_core[96] = "";   /* mp_cpu_blas_core()'s answer, set once with the level */

static void blas_core_init(void) {
    const char *core = openblas_get_corename(), *user = getenv("OPENBLAS_CORETYPE");
    snprintf(g_blas_core, sizeof g_blas_core, "%s%s", core ? core : "unknown",
             user && *user ? " (OPENBLAS_CORETYPE)" : "");
}

/* The best level the CPU runs (0 when it runs none of them: the baseline is what the binary assumes). */
static int best_level(void) {
    int best = 0;
    for (int i = 1; i < NLEVELS; i++)
        if (cpu_runs(i)) best = i;
    return best;
}

/* The level MP_ISA names: its index, -1 when unset or empty, -2 when it names no level of this build. */
static int forced_level(void) {
    const char *f = getenv("MP_ISA");
    if (!f || !*f) return -1;
    for (int i = 0; i < NLEVELS; i++)
        if (!strcmp(f, g_levels[i].name)) return i;
    return -2;
}

static void level_init(void) {
    int f = forced_level();
    g_level = f >= 0 && cpu_runs(f) ? f : best_level();   /* an invalid MP_ISA: mp_cpu_isa_check says so */
    blas_core_init();
}

mp_code mp_cpu_isa_check(mp_err *err) {
    int f = forced_level();
    if (f == -2) {
        char list[64] = "";
        for (int i = 0; i < NLEVELS; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", g_levels[i].name);
        return mp_err_set(err, MP_EINPUT, "MP_ISA=%s: not an ISA level of this build (%s)", getenv("MP_ISA"), list);
    }
    if (f >= 0 && !cpu_runs(f))
        return mp_err_set(err, MP_EINPUT, "MP_ISA=%s: this CPU does not run %s (the best it runs is %s)",
                          g_levels[f].name, g_levels[f].label, g_levels[best_level()].name);
    return MP_OK;
}

const char *mp_cpu_isa(void) {
    pthread_once(&g_level_once, level_init);
    return g_levels[g_level].name;
}

const char *mp_cpu_blas_core(void) {
    pthread_once(&g_level_once, level_init);
    return g_blas_core;
}

mp_backend *mp_backend_cpu(void) {
    pthread_once(&g_level_once, level_init);
    return g_levels[g_level].table();
}

void mp_cpu_expf_n(float *y, const float *x, int64_t n) {
    pthread_once(&g_level_once, level_init);
    g_levels[g_level].expf_array(y, x, n);
}
