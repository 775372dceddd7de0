/* core/alloc.c — see alloc.h. Counters are atomics so the async checkpoint thread may allocate too; every
 * access is an explicit atomic_* call (clang refuses the implicit load of `int64_t p = g_peak` under
 * -fopenmp, and an explicit call says what is atomic). */
#include "core/alloc.h"
#include "core/log.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <assert.h>

static _Atomic int64_t g_mem[MP_MEM_NCAT];
static _Atomic int64_t g_total, g_peak, g_calls;

static void charge(mp_mem_cat cat, int64_t n) {
    atomic_fetch_add(&g_mem[cat], n);
    int64_t t = atomic_fetch_add(&g_total, n) + n;
    int64_t p = atomic_load(&g_peak);
    while (t > p && !atomic_compare_exchange_weak(&g_peak, &p, t)) {}
}

static void die(size_t n, const char *file, int line) {
    fprintf(stderr, "%s: error: out of memory allocating %zu bytes at %s:%d\n", mp_log_prog(), n, file, line);
    abort();
}

void *mp_malloc_(size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    void *p = malloc(n ? n : 1);
    if (!p) die(n, file, line);
    charge(cat, (int64_t)n);
    return p;
}

void *mp_calloc_(size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    void *p = calloc(1, n ? n : 1);
    if (!p) die(n, file, line);
    charge(cat, (int64_t)n);
    return p;
}

void *mp_aligned_(size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    size_t rounded = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) die(n, file, line);
    charge(cat, (int64_t)n);
    return p;
}

void *mp_zeroed_(size_t n, mp_mem_cat cat, const char *file, int line) {
    if (n < MP_ZEROED_MMAP_MIN) {
        void *p = mp_aligned_(n, cat, file, line);
        memset(p, 0, n);
        return p;
    }
    atomic_fetch_add(&g_calls, 1);
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) die(n, file, line);
    charge(cat, (int64_t)n);
    return p;
}

void mp_free_zeroed(void *p, size_t n, mp_mem_cat cat) {
    if (!p) return;
    if (n < MP_ZEROED_MMAP_MIN) {
        mp_free_acct(p, n, cat);
        return;
    }
    int rc = munmap(p, n);
    assert(rc == 0 && "mp_free_zeroed: not a mapping of n bytes");
    (void)rc;
    charge(cat, -(int64_t)n);
}

void *mp_realloc_(void *p, size_t old_n, size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    void *q = realloc(p, n ? n : 1);
    if (!q) die(n, file, line);
    charge(cat, (int64_t)n - (int64_t)old_n);
    return q;
}

char *mp_strdup_(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = mp_malloc_(n, MP_MEM_OTHER, file, line);
    memcpy(p, s, n);
    return p;
}

void mp_free_acct(void *p, size_t n, mp_mem_cat cat) {
    if (!p) return;
    free(p);
    charge(cat, -(int64_t)n);
}

int64_t mp_mem_current(mp_mem_cat cat) { return atomic_load(&g_mem[cat]); }
int64_t mp_mem_peak_total(void) { return atomic_load(&g_peak); }
int64_t mp_mem_alloc_calls(void) { return atomic_load(&g_calls); }

const char *mp_mem_cat_name(mp_mem_cat cat) {
    static const char *names[MP_MEM_NCAT] = {"other", "params", "grads", "optim", "gather",
                                             "activations", "comm", "ckpt"};
    return (unsigned)cat < MP_MEM_NCAT ? names[cat] : "?";
}
