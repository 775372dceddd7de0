/* core/error.c — see error.h. Messages are truncated, never overflowed. */
#include "core/error.h"
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

mp_code mp_err_set(mp_err *e, mp_code code, const char *fmt, ...) {
    if (!e) return code;
    e->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    return code;
}

mp_code mp_err_wrap(mp_err *e, const char *fmt, ...) {
    if (!e) return MP_OK;
    char prefix[MP_ERR_MSG_MAX], old[MP_ERR_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, e->msg, sizeof old);
    size_t np = strlen(prefix), cap = sizeof e->msg - 1;
    if (np > cap) np = cap;
    memcpy(e->msg, prefix, np);
    size_t at = np;
    for (const char *s = ": "; *s && at < cap; s++) e->msg[at++] = *s;
    size_t no = strlen(old);
    if (no > cap - at) no = cap - at;
    memcpy(e->msg + at, old, no);
    e->msg[at + no] = '\0';
    return e->code;
}

void mp_err_clear(mp_err *e) {
    if (!e) return;
    e->code = MP_OK;
    e->msg[0] = '\0';
}

int mp_exit_status(mp_code code) {
    if (code == MP_OK) return 0;
    if (code == MP_EINPUT) return 2;
    return 1;
}

const char *mp_code_name(mp_code code) {
    switch (code) {
    case MP_OK: return "ok";
    case MP_ECHECK: return "check failed";
    case MP_EINPUT: return "bad input";
    case MP_EIO: return "i/o error";
    case MP_ENOMEM: return "out of memory";
    case MP_EDEVICE: return "device error";
    case MP_EINTERNAL: return "internal error";
    }
    return "unknown error";
}
