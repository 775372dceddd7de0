/*
 * tests/fuzz/fuzz_gguf.c — libFuzzer target for the GGUF reader (reshard/gguf.c, gguf_parse): the header
 * region of an untrusted GGUF file, every count, length and offset bounded by the input's size.
 *
 * Promises checked when the reader accepts: each tensor has 1..4 dims, a known ggml type, and its bytes
 * inside the input at an offset aligned to general.alignment; a string array holds n strings of the stated
 * lengths; a tensor of a type meshpoint dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1), when small, reads
 * and dequantizes. A crash, a sanitizer report, a timeout or a broken promise is a finding. Corpus:
 * tests/fuzz/corpus/gguf (files meshpoint's writer made: every metadata type, Q8_0/F16/F32 tensors, a
 * 64-byte alignment, a tiny model's export; and crafted refusals).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "reshard/gguf.h"

typedef struct mem { const uint8_t *p; size_t n; } mem;

static int mem_read(void *ctx, int64_t off, size_t n, void *buf) {
    const mem *m = ctx;
    if (off < 0 || (size_t)off > m->n || n > m->n - (size_t)off) return 5;   /* EIO */
    memcpy(buf, m->p + off, n);
    return 0;
}

/* The promises of one accepted tensor; a small one of a readable type is read and dequantized. */
static void check_tensor(const gguf_file *g, const gguf_tensor *t, size_t size) {
    if (t->ndim < 1 || t->ndim > GGUF_MAX_DIMS || !gguf_type_name(t->type)) abort();
    if (t->nbytes < 0 || t->offset > size || (uint64_t)t->nbytes > size - t->offset) abort();
    if ((t->offset - g->data_offset) % g->alignment) abort();
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    if (t->nbytes > 4096 || n > 8192) return;
    uint8_t *b = malloc((size_t)t->nbytes + 1);
    float *y = malloc(sizeof(float) * (size_t)n + 1);
    mp_err e;
    if (gguf_read_data(g, t, 0, (size_t)t->nbytes, b, &e)) abort();   /* inside the input: must read */
    gguf_dequantize(t->type, b, n, y, &e);
    free(b), free(y);
}

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mem m = {data, size};
    gguf_file *g = NULL;
    mp_err e;
    if (gguf_parse(&g, "fuzz.gguf", size, mem_read, &m, &e) != MP_OK) return 0;
    for (int64_t i = 0; i < g->nkv; i++) {
        const gguf_kv *kv = &g->kv[i];
        if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING)
            for (uint64_t j = 0; j < kv->n; j++)
                if (strlen(((char **)kv->arr)[j]) > kv->arr_len[j]) abort();
    }
    for (int64_t i = 0; i < g->nt; i++) check_tensor(g, &g->t[i], size);
    gguf_close(g);
    return 0;
}
