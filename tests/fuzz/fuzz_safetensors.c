/*
 * tests/fuzz/fuzz_safetensors.c — libFuzzer target for the safetensors header parser
 * (reshard/safetensors.c st_parse_header), the part of `meshpoint import` that reads untrusted bytes.
 *
 * The input is a whole safetensors file: u64 little-endian header length, header, data. Inputs whose
 * length prefix does not fit are dropped (st_open refuses them before parsing; tested in
 * tests/test_safetensors.c). When the parser accepts a header, what it promises must hold: every
 * tensor's byte size (shape x dtype) equals its offsets, and the tensors tile the data exactly (sorted
 * by offset, each begins where the previous ended; the last ends at the data's end). A crash, a
 * sanitizer report or a broken promise is a finding. The target links the parser (reshard/, through
 * mp_cli). Corpus: tests/fuzz/corpus/safetensors (valid files written by the writer, and the malformed
 * cases of the unit tests).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "reshard/safetensors.h"

static int cmp_begin(const void *a, const void *b) {
    const st_tensor *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 8) return 0;
    uint64_t hl;
    memcpy(&hl, data, 8);
    if (hl > size - 8 || hl > ST_MAX_HEADER) return 0;
    st_tensor *t = NULL;
    int n = 0;
    mp_err e;
    int64_t data_size = (int64_t)(size - 8 - hl);
    if (st_parse_header("fuzz.safetensors", (const char *)data + 8, (size_t)hl, data_size, &t, &n, &e) != MP_OK) return 0;
    qsort(t, (size_t)n, sizeof *t, cmp_begin);
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        if (st_numel(&t[i]) * st_dtype_size(t[i].dtype) != t[i].end - t[i].begin) abort();
        if (t[i].begin != at) abort();
        at = t[i].end;
    }
    if (at != data_size) abort();
    st_tensors_free(t, n);
    return 0;
}
