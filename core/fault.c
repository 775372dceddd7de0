/* core/fault.c — see fault.h. The table of fault names is here, once; a query and the start-up check
 * both go through it. */
#include "core/fault.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* Every fault the library knows, with where it acts (docs/RELIABILITY.md "Fault injection" says more). */
static const char *const fault_names[] = {
    "ckpt_crash_at",           /* POINT: raise(SIGKILL) at that point of a save (ckpt/util.c ck_crash_point) */
    "ckpt_crash_rank",         /* R: ckpt_crash_at only on rank R */
    "ckpt_fail_at",            /* POINT: an error (no kill) at group_list, group_send, group_write, view_write */
    "ckpt_fail_rank",          /* R: ckpt_fail_at only on rank R */
    "ckpt_views_crash_at",     /* index.h5 | TENSOR: a simulated libhdf5 crash while checking views */
    "ckpt_serial_fill",        /* the band fill without its helper process (ckpt/read_pipe.c) */
    "ckpt_gather_ranks",       /* N: rank 0 plans and gathers in rounds of N ranks (ckpt/util.c) */
    "ckpt_ranks_per_node",     /* N: nodes of N consecutive ranks instead of host names (ckpt/group.c) */
    "ckpt_chunk_bytes",        /* N >= 16: the CLI's tensor streaming chunk (cli/ckpt_common.c) */
    "no_rename_exchange",      /* the directory swap's fallback without renameat2 (core/fsutil.c) */
    "free_bytes",              /* N: the free space reshard/import/export see at --out (cli/ckpt_common.c) */
    "mem_available",           /* N: the host's available memory for the memory plan (cli/memplan.c) */
    "rlimit_room",             /* N: the room under the process's memory rlimits (core/alloc.c) */
    "fail_rank",               /* R: rank R fails a step that can fail on some ranks only (cli/runtime.c) */
    "fail_device_rank",        /* R: rank R cannot use its device (cli/runtime.c) */
    "cpu_isa_max",             /* vN: the CPU is taken to stop at x86-64 level N (core/cpu_isa.c) */
    "nonfinite_at_step",       /* S: step S's gradient norm is made NaN (layers/llama_train.c) */
};
#define NFAULTS (sizeof fault_names / sizeof fault_names[0])

/* Whether name[0..n) is in the table. */
static int known(const char *name, size_t n) {
    for (size_t i = 0; i < NFAULTS; i++)
        if (strlen(fault_names[i]) == n && !memcmp(fault_names[i], name, n)) return 1;
    return 0;
}

/* Finds fault name in list; on success *arg and *alen are its argument (after the colon, maybe empty). */
static int find(const char *list, const char *name, const char **arg, size_t *alen) {
    size_t nl = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ','), *stop = end ? end : p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(stop - p));
        const char *nend = colon ? colon : stop;
        if ((size_t)(nend - p) == nl && !memcmp(p, name, nl)) {
            *arg = colon ? colon + 1 : stop;
            *alen = (size_t)(stop - *arg);
            return 1;
        }
        p = end ? end + 1 : stop;
    }
    return 0;
}

const char *mp_fault_arg(const char *name, char *buf, size_t cap) {
    assert(known(name, strlen(name)) && cap > 0);
    const char *arg;
    size_t n;
    if (!find(getenv("MP_FAULT"), name, &arg, &n)) return NULL;
    if (n >= cap) n = cap - 1;
    memcpy(buf, arg, n);
    buf[n] = 0;
    return buf;
}

int mp_fault_on(const char *name) {
    char buf[64];
    const char *a = mp_fault_arg(name, buf, sizeof buf);
    return a && strcmp(a, "0") != 0;
}

int64_t mp_fault_int(const char *name, int64_t dflt) {
    char buf[64], *end;
    const char *a = mp_fault_arg(name, buf, sizeof buf);
    if (!a || !*a) return dflt;
    long long v = strtoll(a, &end, 10);
    return *end ? dflt : (int64_t)v;
}

int mp_fault_rank_matches(const char *rank_name, int rank) {
    int64_t r = mp_fault_int(rank_name, -1);
    return r < 0 || r == rank;
}

mp_code mp_fault_check(mp_err *err) {
    const char *list = getenv("MP_FAULT");
    for (const char *p = list; p && *p;) {
        const char *end = strchr(p, ','), *stop = end ? end : p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(stop - p));
        size_t n = (size_t)((colon ? colon : stop) - p);
        if (n && !known(p, n))
            return mp_err_set(err, MP_EINPUT, "MP_FAULT: unknown fault \"%.*s\" (known: ckpt_crash_at, ckpt_fail_at, "
                              "... the list in docs/RELIABILITY.md, \"Fault injection\")", (int)n, p);
        p = end ? end + 1 : stop;
    }
    return MP_OK;
}
