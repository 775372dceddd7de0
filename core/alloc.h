/*
 * core/alloc.h — checked host allocation with per-category accounting.
 *
 * As in llm.c, allocation failure is not recoverable mid-training: the checked wrappers print the size,
 * what it was for (the category), the file and line and the process's memory limit when one is set, then
 * end the process with exit status 1 through the handler the program installed (the CLI's also ends
 * the other ranks of an MPI job) — never an abort, so a run that meets `ulimit -v` or a cgroup limit ends
 * with a message a user can act on, not a core dump. Every allocation is charged to a category so tests and logs can report, from
 * the allocator's own numbers, what a rank holds (parameters, gradients, optimizer moments, ...).
 * Accounting is by explicit size (mp_free_acct takes the size back), kept in a small global table:
 * allocation happens at start-up, never inside a training step.
 */
#ifndef MP_ALLOC_H
#define MP_ALLOC_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    MP_MEM_OTHER = 0,
    MP_MEM_PARAMS,      /* fp32 master parameters (local shard) */
    MP_MEM_GRADS,       /* gradients of the local shard */
    MP_MEM_OPTIM,       /* Adam moments of the local shard */
    MP_MEM_GATHER,      /* gathered (unsharded) parameter / gradient buffers for FSDP */
    MP_MEM_ACTS,        /* activations and scratch for one step */
    MP_MEM_COMM,        /* communication staging */
    MP_MEM_CKPT,        /* checkpoint host buffers */
    MP_MEM_NCAT
} mp_mem_cat;

void *mp_malloc_(size_t n, mp_mem_cat cat, const char *file, int line);
void *mp_calloc_(size_t n, mp_mem_cat cat, const char *file, int line);
/* Aligned (64 B) allocation for kernel buffers. */
void *mp_aligned_(size_t n, mp_mem_cat cat, const char *file, int line);
void *mp_realloc_(void *p, size_t old_n, size_t n, mp_mem_cat cat, const char *file, int line);
/* Zero-filled, 64 B aligned, and not touched here: large sizes (MP_ZEROED_MMAP_MIN and up) are fresh
 * anonymous pages that the kernel zeroes on first touch, so a buffer that is then overwritten (a
 * checkpoint load, the first step's activations) is written once, not zeroed first (the
 * memset of every model buffer at start-up cost ~8% of a short run, more of a resume). Free with
 * mp_free_zeroed and the same n. */
void *mp_zeroed_(size_t n, mp_mem_cat cat, const char *file, int line);
void mp_free_zeroed(void *p, size_t n, mp_mem_cat cat);
#define MP_ZEROED_MMAP_MIN ((size_t)1 << 20)
char *mp_strdup_(const char *s, const char *file, int line);
/* Reports that n bytes for category cat (what: a few words, or NULL) could not be had at file:line, and
 * ends the process (the failure handler below; exit status 1). For allocations made outside these
 * wrappers (a library's constructor, open_memstream): `if (!p) mp_oom(n, MP_MEM_OTHER, "hash state")`. */
__attribute__((noreturn)) void mp_oom_(size_t n, mp_mem_cat cat, const char *what, const char *file, int line);
#define mp_oom(n, cat, what) mp_oom_((n), (cat), (what), __FILE__, __LINE__)
/* What ends the process after the message: fn (it must not return; the CLI's calls MPI_Abort(1) in a
 * multi-rank job, so no rank is left waiting in a collective), or exit(1) when fn is NULL (the default). */
void mp_alloc_on_failure(void (*fn)(void));

/* The bytes this process may still allocate under its own limits: RLIMIT_AS (ulimit -v) less the
 * address space it maps now, and RLIMIT_DATA (ulimit -d) less its data now; -1 when neither is set.
 * *which (may be NULL) names the binding limit ("the address-space limit (ulimit -v, RLIMIT_AS) of
 * 3.8 GiB"). The fault rlimit_room (bytes) replaces the measurement, for tests. */
int64_t mp_mem_rlimit_room(char *which, size_t cap);

/* The number of a "Key:   123 kB" line of a /proc file (/proc/meminfo, /proc/self/status), in bytes;
 * -1 when the file or the key is missing. */
int64_t mp_proc_kb_bytes(const char *path, const char *key);

/* Frees p (NULL ok) and takes n bytes off category cat. */
void mp_free_acct(void *p, size_t n, mp_mem_cat cat);

#define mp_malloc(n, cat) mp_malloc_((n), (cat), __FILE__, __LINE__)
#define mp_calloc(n, cat) mp_calloc_((n), (cat), __FILE__, __LINE__)
#define mp_aligned(n, cat) mp_aligned_((n), (cat), __FILE__, __LINE__)
#define mp_zeroed(n, cat) mp_zeroed_((n), (cat), __FILE__, __LINE__)
#define mp_realloc(p, o, n, cat) mp_realloc_((p), (o), (n), (cat), __FILE__, __LINE__)
#define mp_strdup(s) mp_strdup_((s), __FILE__, __LINE__)
/* Plain scratch allocations not worth accounting (category OTHER, size not tracked on free). */
#define mp_xmalloc(n) mp_malloc_((n), MP_MEM_OTHER, __FILE__, __LINE__)
#define mp_xcalloc(n) mp_calloc_((n), MP_MEM_OTHER, __FILE__, __LINE__)

/* Bytes currently charged to a category, and the high-water mark of all categories together. */
int64_t mp_mem_current(mp_mem_cat cat);
int64_t mp_mem_peak_total(void);
/* Number of allocations made so far (every wrapper above counts one): tests use it to show that a
 * training step allocates nothing. */
int64_t mp_mem_alloc_calls(void);
const char *mp_mem_cat_name(mp_mem_cat cat);

#endif
