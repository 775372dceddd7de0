/*
 * ckpt/index_internal.h — what index.h5's three files share: the record structs of the tensor and
 * file tables, the box record of a layout box, and the tables' HDF5 types and table I/O (all in
 * ckpt/index.c; writing is ckpt/index_write.c, reading and validation ckpt/index_read.c). Included by
 * ckpt/index*.c only. The format: ckpt/index.c's top comment and docs/FORMAT.md.
 */
#ifndef MP_CKPT_INDEX_INTERNAL_H
#define MP_CKPT_INDEX_INTERNAL_H
#include "ckpt/ckpt_internal.h"

typedef struct {
    char name[CKPT_NAME_MAX + 1];
    char dtype[8];
    int32_t ndim;
    int64_t shape[CKPT_MAX_DIMS];
    int64_t box_first, nboxes;
} rec_tensor;

typedef struct {
    int32_t rank;
    char name[CK_FILE_MAX];
    int64_t nboxes, bytes;
} rec_file;           /* v1, v2 */

typedef struct {
    int32_t rank;
    char name[CK_FILE_MAX];
    int64_t nboxes, bytes;
    uint64_t boxes_checksum;
} rec_file3;          /* v3 */

/* ckpt/index.c: box B's record (names from L's tables, dataset paths into ds and ts); the box table's
 * row place of version v; the v3/v4 index checksum over runs; the memory compound types of the tensor, file (v: 1-2 or 3) and run tables
 * (caller closes); a 1-D table written (file type: mt packed) and read (refusing a crafted row count).
 * Contracts at their definitions. */
void ck_ix_box_rec(const ck_layout *L, const ck_box *B, char *ds, char *ts, ck_boxrec *r);
unsigned ck_ix_box_place(int v);
uint64_t ck_ix_hash_v3(const ck_layout *L, const ck_run *runs, int64_t nruns);
hid_t ck_ix_tensor_mtype(void);
hid_t ck_ix_file_mtype(int v);
hid_t ck_ix_run_mtype(void);
herr_t ck_ix_write_table(hid_t loc, const char *path, hid_t mt, const void *data, hsize_t n);
herr_t ck_ix_read_table(hid_t loc, const char *path, hid_t mt, size_t rec, void **out, int64_t *n);

#endif
