/*
 * core/error.h — the error value every library function returns through.
 *
 * Library code never exits: a function that can fail takes an `mp_err *` (may be NULL) and returns an
 * mp_code. The message carries the context a user needs — what failed, on which file/tensor/flag, and
 * why — built up by wrapping as the error travels outwards ("loading config x.json: hidden_size: ...").
 * Only cli/ turns an error into an exit status, with mp_exit_status():
 *   0 ok, 1 the operation found a problem (a failed check, I/O failure), 2 bad usage or bad input.
 */
#ifndef MP_ERROR_H
#define MP_ERROR_H

#include <stddef.h>

typedef enum {
    MP_OK = 0,
    MP_ECHECK = 1,    /* an integrity or verification check failed */
    MP_EINPUT = 2,    /* bad usage, bad config, bad or missing input file */
    MP_EIO = 3,       /* an I/O operation failed (write, fsync, rename, disk full) */
    MP_ENOMEM = 4,    /* allocation failed */
    MP_EDEVICE = 5,   /* no device / device error */
    MP_EINTERNAL = 6  /* a bug: an invariant that should hold did not */
} mp_code;

#define MP_ERR_MSG_MAX 2048

typedef struct mp_err {
    mp_code code;
    char msg[MP_ERR_MSG_MAX];
} mp_err;

/* Sets *e (if e != NULL) to code with a printf-formatted message; returns code. */
mp_code mp_err_set(mp_err *e, mp_code code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Prefixes the message of *e with a printf-formatted context and ": "; returns e->code (MP_OK if e NULL). */
mp_code mp_err_wrap(mp_err *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Clears *e to MP_OK with an empty message. */
void mp_err_clear(mp_err *e);
/* The process exit status for a code: 0 ok, 2 input/usage, 1 everything else. */
int mp_exit_status(mp_code code);
/* A code in words, for a message that has no other text: "ok", "check failed", "bad input", "i/o error",
 * "out of memory", "device error", "internal error"; "unknown error" for a value outside the enum. */
const char *mp_code_name(mp_code code);

/* Evaluate an expression returning mp_code; on failure return that code from the calling function. */
#define MP_TRY(expr) do { mp_code mp_try_rc_ = (expr); if (mp_try_rc_ != MP_OK) return mp_try_rc_; } while (0)

#endif
