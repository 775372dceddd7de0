/*
 * tests/fuzz/fuzz_data.c — libFuzzer target for token files (core/data.c mp_token_file_open: the
 * llm.c header, the size checks, the token-id check) and the loader over what opened.
 *
 * Input: byte 0 picks the format (llmc, u16, u32) and byte 1 the vocab_size (0: no id check, else
 * 1 << (byte % 17)); the rest is the file. It is written to a memfd and opened through
 * /proc/self/fd/N, so the real open path (fstat, pread of the header, mmap) runs with no disk I/O.
 * When the file opens, a loader of 1 x T (T from byte 1) reads its first batch, advances through it and
 * restores a cursor taken from the input (the last 16 bytes as int64 pos and epoch: any value a
 * crafted checkpoint could hold): every token it hands out must be < vocab_size.
 * Corpus: tests/fuzz/corpus/data (small llm.c files made by the writer, raw u16/u32 files, regressions).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "core/data.h"

/* The memfd holding the current input (one per process, rewritten per input). */
static int g_fd = -1;

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (g_fd < 0) {
        g_fd = memfd_create("fuzz_data", MFD_CLOEXEC);
        if (g_fd < 0) { perror("memfd_create"); abort(); }
    }
    mp_data_format fmt = (mp_data_format)(data[0] % 3);
    int vocab = data[1] == 0 ? 0 : 1 << (data[1] % 17);
    if (ftruncate(g_fd, 0) != 0 || pwrite(g_fd, data + 2, size - 2, 0) != (ssize_t)(size - 2)) abort();
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", g_fd);
    mp_token_file f;
    mp_err err;
    if (mp_token_file_open(&f, path, fmt, vocab, &err) != MP_OK) return 0;
    if (f.ntokens <= 0) abort();   /* an opened file has tokens */
    int T = 1 + data[1] % 8;
    mp_loader l;
    if (mp_loader_init(&l, &f, 1, T, &err) == MP_OK) {
        int32_t in[8], tg[8];
        for (int step = 0; step < 3; step++) {
            mp_loader_get(&l, 0, 1, in, tg);
            /* checked ids are in [0, vocab); unchecked u32 ids >= 2^31 read as negative, by contract */
            for (int t = 0; t < T && vocab > 0; t++)
                if (in[t] < 0 || tg[t] < 0 || in[t] >= vocab || tg[t] >= vocab) abort();
            mp_loader_advance(&l);
        }
        /* a crafted cursor (a checkpoint's data_cursor) is refused or lands inside the file */
        mp_loader_cursor cur = {.pos = (int64_t)(size * 7919u) - 1000, .epoch = (int64_t)data[0] - 1};
        if (size >= 18) {   /* the last 16 bytes as a full-range cursor, as a crafted data_cursor holds it */
            memcpy(&cur.pos, data + size - 16, 8);
            memcpy(&cur.epoch, data + size - 8, 8);
        }
        if (mp_loader_set_cursor(&l, cur, &err) == MP_OK) mp_loader_get(&l, 0, 1, in, tg);
    }
    mp_token_file_close(&f);
    return 0;
}
