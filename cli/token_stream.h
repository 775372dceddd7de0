/*
 * cli/token_stream.h — an llm.c token file written as a stream (tokens appended as they come, the count
 * known only at the end), and the train/validation split of it, for `meshpoint data --tokenizer`.
 * core/data.c's writers take the tokens whole; this one keeps memory bounded whatever the corpus size.
 */
#ifndef MP_CLI_TOKEN_STREAM_H
#define MP_CLI_TOKEN_STREAM_H

#include <stdint.h>
#include <stdio.h>
#include "core/error.h"

typedef struct mp_token_stream {
    char path[1100], tmp[1200];
    FILE *f;
    int width;          /* 2: uint16 (magic 20240520, version 1); 4: uint32 (magic 20240801, version 7) */
    int64_t n;          /* tokens written */
} mp_token_stream;

/* Starts path (written to path.tmp.PID until committed) with tokens of width bytes (2 or 4). MP_EIO. */
mp_code mp_token_stream_open(mp_token_stream *s, const char *path, int width, mp_err *err);
/* Appends ids[0..n) (each must fit the width). MP_EIO naming the file. */
mp_code mp_token_stream_put(mp_token_stream *s, const int32_t *ids, int64_t n, mp_err *err);
/* Moves the last nval tokens of s into a new file val_path (same width), then writes both headers,
 * fsyncs and renames both into place. 0 <= nval < s->n; nval 0 commits s alone and val_path is not
 * touched (--val-fraction 0). MP_EIO / MP_EINPUT (more than INT32_MAX tokens). */
mp_code mp_token_stream_split_commit(mp_token_stream *s, const char *val_path, int64_t nval, mp_err *err);
/* Closes and removes what an uncommitted s wrote. */
void mp_token_stream_abort(mp_token_stream *s);

#endif
