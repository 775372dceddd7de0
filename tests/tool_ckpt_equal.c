/*
 * tests/tool_ckpt_equal.c — `tool_ckpt_equal DIR_A DIR_B`: exit 0 if the two checkpoints hold the same
 * tensors (names, dtypes, shapes) with bitwise-equal contents, read whole through the checkpoint
 * reader (checksums verified); 1 with the first difference named otherwise, 2 on unreadable input.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt.h"

static size_t numel(const ckpt_tensor_info *t) {
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n;
}

int main(int argc, char **argv) {
    if (argc != 3) { fprintf(stderr, "usage: %s DIR_A DIR_B\n", argv[0]); return 2; }
    mp_err e;
    ckpt_reader *a = NULL, *b = NULL;
    if (ckpt_open(&a, argv[1], &e) || ckpt_open(&b, argv[2], &e)) { fprintf(stderr, "%s\n", e.msg); return 2; }
    int n = ckpt_num_tensors(a), status = 0;
    if (n != ckpt_num_tensors(b)) {
        fprintf(stderr, "tensor count %d vs %d\n", n, ckpt_num_tensors(b));
        return 1;
    }
    for (int i = 0; i < n && !status; i++) {
        const ckpt_tensor_info *ta = ckpt_tensor_at(a, i);
        int j = ckpt_tensor_find(b, ta->name);
        if (j < 0) { fprintf(stderr, "%s missing in %s\n", ta->name, argv[2]); status = 1; break; }
        const ckpt_tensor_info *tb = ckpt_tensor_at(b, j);
        if (ta->dtype != tb->dtype || ta->ndim != tb->ndim || memcmp(ta->shape, tb->shape, sizeof ta->shape)) {
            fprintf(stderr, "%s: dtype or shape differs\n", ta->name);
            status = 1;
            break;
        }
        size_t bytes = numel(ta) * mp_dtype_size(ta->dtype);
        void *ba = malloc(bytes), *bb = malloc(bytes);
        int64_t off[CKPT_MAX_DIMS] = {0};
        if (ckpt_read(a, ta->name, off, ta->shape, ba, &e) || ckpt_read(b, ta->name, off, ta->shape, bb, &e)) {
            fprintf(stderr, "%s\n", e.msg);
            status = 2;
        } else if (memcmp(ba, bb, bytes)) {
            fprintf(stderr, "%s differs\n", ta->name);
            status = 1;
        }
        free(ba);
        free(bb);
    }
    if (!status) printf("%d tensors bitwise equal\n", n);
    ckpt_close(a);
    ckpt_close(b);
    return status;
}
