/*
 * core/fsutil.h — file-system helpers every layer shares. Today: reading a small text input whole.
 *
 * Small text inputs (a config, a checkpoint root's `latest`, an HF directory's JSON files) are read as
 * streams, never sized with fseek/ftell or stat first: a pipe (`--config <(...)`, /dev/stdin) has no
 * size, and a directory given where a file belongs "opens" on Linux and must be named for what it is.
 * (issue 19 grows this file into the one file-system layer: durable writes, renames, removal.)
 */
#ifndef MP_FSUTIL_H
#define MP_FSUTIL_H

#include <stddef.h>
#include "core/error.h"

/* Reads all of path (a file, a pipe, a character device) into a new NUL-terminated string *text (free()
 * it) of *len bytes (len may be NULL), refusing more than max bytes. Errors, MP_EINPUT with the path:
 * "cannot open: <why>", "is a directory", "larger than <max> bytes", "read error: <why>"; on error *text
 * is NULL. The text may hold NUL bytes (len counts them); callers parsing it as a C string stop there. */
mp_code mp_read_text(const char *path, size_t max, char **text, size_t *len, mp_err *err);

#endif
