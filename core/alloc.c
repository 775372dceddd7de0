/* core/alloc.c — see alloc.h. Counters are atomics so the async checkpoint thread may allocate too; every
 * access is an explicit atomic_* call (clang refuses the implicit load of `int64_t p = g_peak` under
 * -fopenmp, and an explicit call says what is atomic). */
#include "core/alloc.h"
#include "core/fault.h"
#include "core/log.h"
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <assert.h>

static _Atomic int64_t g_mem[MP_MEM_NCAT];
static _Atomic int64_t g_total, g_peak, g_calls;

static void charge(mp_mem_cat cat, int64_t n) {
    atomic_fetch_add(&g_mem[cat], n);
    int64_t t = atomic_fetch_add(&g_total, n) + n;
    int64_t p = atomic_load(&g_peak);
    while (t > p && !atomic_compare_exchange_weak(&g_peak, &p, t)) {}
}

static void (*g_on_failure)(void);

void mp_alloc_on_failure(void (*fn)(void)) { g_on_failure = fn; }

/* What a category's memory is for, in the failure message. */
static const char *cat_purpose(mp_mem_cat cat) {
    static const char *what[MP_MEM_NCAT] = {"", "parameters", "gradients", "optimizer moments",
                                            "FSDP gather buffers", "activations", "communication buffers",
                                            "checkpoint buffers"};
    return (unsigned)cat < MP_MEM_NCAT ? what[cat] : "";
}

/* n bytes as "4.1 GiB" into buf. */
static const char *human(char *buf, size_t cap, double n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    while (n >= 1024 && u < 5) { n /= 1024; u++; }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", n, unit[u]);
    return buf;
}

int64_t mp_proc_kb_bytes(const char *path, const char *key) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    char line[256];
    int64_t v = -1;
    size_t klen = strlen(key);
    while (fgets(line, sizeof line, f)) {
        long long kb;
        if (!strncmp(line, key, klen) && line[klen] == ':' && sscanf(line + klen + 1, "%lld", &kb) == 1 && kb >= 0) {
            v = (int64_t)kb * 1024;
            break;
        }
    }
    fclose(f);
    return v;
}

int64_t mp_mem_rlimit_room(char *which, size_t cap) {
    static const struct { int res; const char *status_key, *name; } lim[] = {
        {RLIMIT_AS, "VmSize", "the address-space limit (ulimit -v, RLIMIT_AS)"},
        {RLIMIT_DATA, "VmData", "the data-size limit (ulimit -d, RLIMIT_DATA)"}};
    int64_t test = mp_fault_int("rlimit_room", -1);
    if (test >= 0) {
        if (which) snprintf(which, cap, "the limit set by the fault rlimit_room");
        return test;
    }
    int64_t room = -1;
    for (size_t i = 0; i < sizeof lim / sizeof lim[0]; i++) {
        struct rlimit rl;
        if (getrlimit(lim[i].res, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY) continue;
        int64_t used = mp_proc_kb_bytes("/proc/self/status", lim[i].status_key), limit = (int64_t)rl.rlim_cur;
        int64_t r = used < 0 ? limit : (limit > used ? limit - used : 0);
        if (room >= 0 && r >= room) continue;
        room = r;
        char b[32];
        if (which) snprintf(which, cap, "%s of %s", lim[i].name, human(b, sizeof b, (double)limit));
    }
    return room;
}

_Noreturn void mp_oom_(size_t n, mp_mem_cat cat, const char *what, const char *file, int line) {
    char size[64] = "", hsize[32], limit[160] = "", hint[256] = "";
    if (n) snprintf(size, sizeof size, " %s (%zu bytes)", human(hsize, sizeof hsize, (double)n), n);
    if (mp_mem_rlimit_room(limit, sizeof limit) >= 0)
        snprintf(hint, sizeof hint, "; this process is under %s", limit);
    const char *purpose = what && *what ? what : cat_purpose(cat);
    fprintf(stderr, "%s: error: out of memory: could not allocate%s%s%s at %s:%d%s\n", mp_log_prog(), size,
            *purpose && n ? " for " : " ", purpose, file, line, hint);
    fflush(stderr);
    if (g_on_failure) g_on_failure();
    exit(1);
}


void *mp_malloc_(size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    void *p = malloc(n ? n : 1);
    if (!p) mp_oom_(n, cat, NULL, file, line);
    charge(cat, (int64_t)n);
    return p;
}

void *mp_calloc_(size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    void *p = calloc(1, n ? n : 1);
    if (!p) mp_oom_(n, cat, NULL, file, line);
    charge(cat, (int64_t)n);
    return p;
}

void *mp_aligned_(size_t n, mp_mem_cat cat, const char *file, int line) {
    atomic_fetch_add(&g_calls, 1);
    size_t rounded = (n + 63) / 64 * 64;
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) mp_oom_(n, cat, NULL, file, line);
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
    if (p == MAP_FAILED) mp_oom_(n, cat, NULL, file, line);
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
    if (!q) mp_oom_(n, cat, NULL, file, line);
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
