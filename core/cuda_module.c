/*
 * core/cuda_module.c — finding and opening the CUDA module (core/cuda_module.h): the one loader.
 *
 * The first mp_cuda_module_load resolves the module's path ($MP_CUDA_MODULE, else beside
 * /proc/self/exe), dlopens it with RTLD_NOW (a CUDA library it needs, or a core symbol the executable
 * does not export, fails here, named by dlerror, not at the first call) and RTLD_LOCAL (only the entry is
 * looked up), checks the table it returns against this build, and keeps the outcome, success or error,
 * for the life of the process under a mutex. The module is never closed.
 *
 * mp_cuda_devices answers `--version` without loading CUDA on a host that cannot run it: it looks for the
 * module file, then for the CUDA driver (libcuda.so.1, which the runtime needs on any GPU host), and only
 * then loads the module and asks it. A CPU node has no driver, so `--version` there maps no CUDA library.
 *
 * Builds without CUDA (MP_HAVE_CUDA undefined) compile the same functions, which say so.
 */
#include "core/cuda_module.h"
#include <assert.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/log.h"
#include "core/tensor.h"

#ifdef MP_HAVE_CUDA
/* The core functions the module calls (its undefined mp_* symbols: `nm -D -u libmeshpoint-cuda.so`).
 * Referenced here so that every program that can load the module (this file comes with mp_backend_get)
 * links them, and so exports them (core/cuda/host_symbols.list); a program could otherwise lack one its
 * own code never calls, and the load would fail on it. tests/cuda_module.sh checks this list against the
 * module and every program of the build. */
typedef void (*mp_any_fn)(void);
__attribute__((used)) static const mp_any_fn g_module_needs[] = {
    (mp_any_fn)mp_malloc_, (mp_any_fn)mp_calloc_, (mp_any_fn)mp_free_acct, (mp_any_fn)mp_mem_cat_name,
    (mp_any_fn)mp_err_set, (mp_any_fn)mp_err_wrap, (mp_any_fn)mp_log_prog, (mp_any_fn)mp_time_s,
    (mp_any_fn)mp_dtype_size, (mp_any_fn)mp_dtype_name, (mp_any_fn)mp_comm_count_all_reduce,
    (mp_any_fn)mp_comm_count_all_gatherv, (mp_any_fn)mp_comm_count_reduce_scatterv,
    (mp_any_fn)mp_comm_count_broadcast, (mp_any_fn)mp_comm_count_gather, (mp_any_fn)mp_comm_count_scatter,
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_tried;                      /* a load was attempted (its outcome below) */
static const mp_cuda_module *g_module;   /* the table, when it loaded */
static mp_err g_err;                     /* the reason, when it did not */

/* The module's path into path[cap]: $MP_CUDA_MODULE, else MP_CUDA_MODULE_FILE in the executable's
 * directory. MP_EINPUT when /proc/self/exe cannot be read or the path does not fit. */
static mp_code module_path(char *path, size_t cap, mp_err *err) {
    const char *env = getenv("MP_CUDA_MODULE");
    if (env && *env) {
        if (strlen(env) >= cap)
            return mp_err_set(err, MP_EINPUT, "device cuda: MP_CUDA_MODULE is longer than %zu characters", cap - 1);
        strcpy(path, env);
        return MP_OK;
    }
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return mp_err_set(err, MP_EINPUT, "device cuda: cannot find the CUDA module beside the program: readlink "
                          "/proc/self/exe: %s (set MP_CUDA_MODULE to the path of %s)", strerror(errno),
                          MP_CUDA_MODULE_FILE);
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    assert(slash);   /* the kernel gives an absolute path */
    *slash = '\0';
    if ((size_t)snprintf(path, cap, "%s/%s", exe, MP_CUDA_MODULE_FILE) >= cap)
        return mp_err_set(err, MP_EINPUT, "device cuda: the CUDA module's path under %s is too long", exe);
    return MP_OK;
}

/* Opens the module at path and checks its table; the table, or NULL with err set (MP_EINPUT). */
static const mp_cuda_module *module_open(const char *path, mp_err *err) {
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        mp_err_set(err, MP_EINPUT, "device cuda: cannot load the CUDA module %s: %s (it is built beside the "
                   "meshpoint binary; MP_CUDA_MODULE names another file)", path, dlerror());
        return NULL;
    }
    const mp_cuda_module *(*entry)(void) = NULL;
    *(void **)&entry = dlsym(h, MP_CUDA_MODULE_ENTRY);
    const mp_cuda_module *m = entry ? entry() : NULL;
    if (!m) {
        mp_err_set(err, MP_EINPUT, "device cuda: %s is not a meshpoint CUDA module (no %s)", path, MP_CUDA_MODULE_ENTRY);
    } else if (m->abi != MP_CUDA_MODULE_ABI || m->backend_size != sizeof(mp_backend) ||
               m->comm_size != sizeof(mp_comm) || m->err_size != sizeof(mp_err)) {
        mp_err_set(err, MP_EINPUT, "device cuda: the CUDA module %s is of another meshpoint build (ABI %d, struct "
                   "sizes %zu/%zu/%zu; this binary: ABI %d, %zu/%zu/%zu): use the module built with this binary",
                   path, m->abi, m->backend_size, m->comm_size, m->err_size, MP_CUDA_MODULE_ABI,
                   sizeof(mp_backend), sizeof(mp_comm), sizeof(mp_err));
        m = NULL;
    }
    if (!m) dlclose(h);   /* nothing of it was called beyond the entry: safe to unmap */
    return m;
}
#endif

mp_code mp_cuda_module_load(const mp_cuda_module **out, mp_err *err) {
    assert(out);
    *out = NULL;
#ifndef MP_HAVE_CUDA
    return mp_err_set(err, MP_EINPUT, "device cuda: meshpoint was built without CUDA (rebuild on a machine with "
                      "the CUDA toolkit and NCCL: scripts/build.sh BUILD -DMP_CUDA=ON)");
#else
    pthread_mutex_lock(&g_lock);
    if (!g_tried) {
        g_tried = 1;
        char path[PATH_MAX];
        mp_err_clear(&g_err);
        if (module_path(path, sizeof path, &g_err) == MP_OK) g_module = module_open(path, &g_err);
    }
    const mp_cuda_module *m = g_module;
    pthread_mutex_unlock(&g_lock);
    if (!m) {
        if (err) *err = g_err;
        return g_err.code;
    }
    *out = m;
    return MP_OK;
#endif
}

int mp_cuda_devices(char *why, size_t cap) {
    assert(why && cap > 0);
#ifndef MP_HAVE_CUDA
    snprintf(why, cap, "cuda not built in");
    return -1;
#else
    pthread_mutex_lock(&g_lock);
    int tried = g_tried;
    pthread_mutex_unlock(&g_lock);
    if (!tried) {   /* cheap checks first: no CUDA library is opened unless a driver is here */
        char path[PATH_MAX];
        mp_err e;
        if (module_path(path, sizeof path, &e)) {
            snprintf(why, cap, "%s", e.msg);
            return -1;
        }
        if (strchr(path, '/') && access(path, R_OK) != 0) {
            snprintf(why, cap, "the CUDA module %s: %s (it is built beside the meshpoint binary; MP_CUDA_MODULE "
                     "names another file)", path, strerror(errno));
            return -1;
        }
        if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL)) {   /* kept open: the runtime would load it */
            snprintf(why, cap, "no CUDA driver on this host (%s)", dlerror());
            return -1;
        }
    }
    const mp_cuda_module *m;
    mp_err e;
    if (mp_cuda_module_load(&m, &e)) {
        snprintf(why, cap, "%s", e.msg);
        return -1;
    }
    return m->device_count(why, cap);
#endif
}
