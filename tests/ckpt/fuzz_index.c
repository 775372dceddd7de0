/*
 * tests/ckpt/fuzz_index.c — libFuzzer target for the checkpoint index reader (ckpt/index.c:
 * ck_index_read_image, the same code as ck_index_read behind ckpt_open).
 *
 * Input: byte 0 bit 0 chooses whether the index checksum is compared (1) or only computed (0: crafted
 * tables then reach the structural validation, which is the code a hand-made index with a recomputed
 * checksum meets); the rest is the index.h5 file, opened from memory with HDF5's core driver
 * (H5Pset_file_image: no disk I/O per input). A layout that reads must be usable as the reader uses
 * it: every box inside its tensor, the tensors' box ranges tiling the box table, the interval index
 * answering queries inside each tensor's boxes, tile counts and the layout hash computable. On every
 * path, accepted or refused, no HDF5 object may be left open. HDF5's own allocations are not leaks of
 * ours: run with LSAN_OPTIONS=suppressions=tests/lsan.supp (scripts/fuzz.sh does).
 * Corpus: tests/fuzz/corpus/index (docs/RELIABILITY.md says how each file was made): index.h5 of the v1
 * fixture (plain and zstd), of a v2 checkpoint written by `meshpoint train`, of a v2 one written by the
 * library (tool_ckpt_mpi save: 1..4-D tensors), of a v3 one written by the library (3 ranks: runs), each
 * with the checksum on (.sum) and off (.nosum).
 */
#include <hdf5.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt_internal.h"

/* Checks what the reader relies on in a layout ck_index_read accepted; aborts on a violation. */
static void check_layout(const ck_layout *L) {
    int64_t next = 0;
    for (int t = 0; t < L->ntensors; t++) {
        const ck_tensor *T = &L->t[t];
        if (T->ndim < 1 || T->ndim > CKPT_MAX_DIMS || T->box_first != next || T->nboxes < 0) abort();
        next += T->nboxes;
        if (next > L->nboxes) abort();
        for (int64_t j = T->box_first; j < T->box_first + T->nboxes; j++) {
            const ck_box *B = &L->b[j];
            if (B->tensor != t || B->file < 0 || B->file >= L->nfiles) abort();
            for (int d = 0; d < T->ndim; d++)
                if (B->off[d] < 0 || B->shp[d] < 1 || B->off[d] + B->shp[d] > T->shape[d]) abort();
            /* v3: the tile fields come with the rank file's /boxes table (ckpt/boxtab.c), not the index */
            if (L->version < 3 && (B->tile_rows < 1 || B->tile_cols < 1 || B->ntiles < 1)) abort();
            if (L->version < 3 && ck_tile_count(T->ndim, B->shp, B->tile_rows, B->tile_cols) != B->ntiles) abort();
            char pb[CK_DSET_MAX], tb[CK_DSET_MAX];
            if (L->version >= 3 && (L->paths || B->k < 0)) abort();   /* v3: paths derived from k */
            const char *dp = ck_box_path(L, B, 0, pb), *tp = ck_box_path(L, B, 1, tb);
            if (dp[0] != '/' || (L->version == 2 && tp[0] != '/')) abort();
            char s[256];
            ck_box_str(s, sizeof s, T->ndim, B->off, B->shp);
            (void)ck_volume(T->ndim, B->shp);
        }
        /* the interval index over dim 0: the whole tensor, then its first row */
        int64_t lo = 0, hi = 0;
        ck_index_range(L, t, 0, T->shape[0], &lo, &hi);
        if (lo < T->box_first || hi > T->box_first + T->nboxes || (T->nboxes > 0 && hi - lo != T->nboxes)) abort();
        ck_index_range(L, t, 0, 1, &lo, &hi);
        if (lo < T->box_first || hi > T->box_first + T->nboxes) abort();
    }
    if (next != L->nboxes) abort();
    for (int i = 0; i < L->nmeta; i++)
        if (!L->keys[i] || !L->vals[i] || (i > 0 && strcmp(L->keys[i - 1], L->keys[i]) > 0)) abort();
}

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int check_sum = data[0] & 1;
    ck_layout L;
    mp_err err;
    if (ck_index_read_image(data + 1, size - 1, "fuzz/index.h5", check_sum, &L, &err) == MP_OK) {
        check_layout(&L);
        (void)ck_layout_hash(&L);
        ck_layout_free(&L);
    } else if (!err.msg[0]) {
        abort();   /* a refusal says why */
    }
    /* every HDF5 object the reader opened is closed again, on every path (an open id keeps the file,
     * and its memory, alive) */
    ssize_t open_ids = H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL);
    if (open_ids != 0) {
        fprintf(stderr, "%zd HDF5 objects left open\n", open_ids);
        abort();
    }
    return 0;
}
