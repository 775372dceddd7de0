/* core/fsutil.c — see fsutil.h. */
#include "core/fsutil.h"
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/alloc.h"

mp_code mp_read_text(const char *path, size_t max, char **text, size_t *len, mp_err *err) {
    *text = NULL;
    if (len) *len = 0;
    int fd;
    do fd = open(path, O_RDONLY | O_CLOEXEC); while (fd < 0 && errno == EINTR);
    if (fd < 0) return mp_err_set(err, MP_EINPUT, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) == 0 && S_ISDIR(sb.st_mode)) {
        close(fd);
        return mp_err_set(err, MP_EINPUT, "%s: is a directory, not a file", path);
    }
    size_t n = 0, cap = 4096;
    char *buf = mp_xmalloc(cap + 1);
    for (;;) {
        if (n == cap) {
            size_t ncap = cap * 2 > max + 1 ? max + 1 : cap * 2;   /* one byte past max tells "too large" */
            buf = mp_realloc(buf, cap + 1, ncap + 1, MP_MEM_OTHER);
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            int e = errno;
            close(fd);
            free(buf);
            return mp_err_set(err, MP_EINPUT, "%s: read error: %s", path,
                              e == EISDIR ? "is a directory" : strerror(e));
        }
        if (got == 0) break;
        n += (size_t)got;
        if (n > max) {
            close(fd);
            free(buf);
            return mp_err_set(err, MP_EINPUT, "%s: larger than %zu bytes", path, max);
        }
    }
    close(fd);
    buf[n] = '\0';
    *text = buf;
    if (len) *len = n;
    return MP_OK;
}
