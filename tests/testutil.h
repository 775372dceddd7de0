/*
 * tests/testutil.h — helpers shared by the Criterion tests: temporary directories, running the
 * meshpoint binary (path in $MP_BIN, set by ctest) and capturing its exit status and output,
 * numeric comparisons, and the checkpoint tests' synthetic tensors, box checks and HDF5 file helpers.
 */
#ifndef MP_TESTUTIL_H
#define MP_TESTUTIL_H

#include <hdf5.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "ckpt/ckpt.h"

/* Creates a fresh directory under $TMPDIR (or /tmp) and returns its path (static storage per call site
 * is not assumed: caller frees). */
char *tu_mkdtemp(const char *tag);
/* Writes text to path (aborting the test on failure). */
void tu_write_file(const char *path, const char *text);
/* Runs `sh -c cmd`, returns the exit status (or 128+signal); stdout+stderr go to *out (caller frees)
 * if out != NULL. */
int tu_run(const char *cmd, char **out);
/* Path of the meshpoint binary ($MP_BIN) and the source tree ($MP_SRC). */
const char *tu_bin(void);
const char *tu_src(void);
/* max_i |a_i - b_i| / max(max_i |b_i|, tiny) and the relative L2 error ||a-b|| / ||b||. */
double tu_max_rel(const float *a, const float *b, int64_t n);
double tu_rel_l2(const float *a, const float *b, int64_t n);

/* Random test data from a splitmix64 stream *state (advanced by each call): tu_urand is uniform in
 * [-1, 1); tu_frand gives n floats amp * tu_urand, tu_ffill n copies of val (both allocate at least one
 * element; the caller frees). */
double tu_urand(uint64_t *state);
float *tu_frand(uint64_t *state, int64_t n, double amp);
float *tu_ffill(int64_t n, float val);

/* ---------------------------------------------------------------- checkpoint tests (ckpt/)
 * Synthetic tensors whose element values depend only on (tensor id, global element index), so any
 * box of them can be computed independently of the library. The pure helpers below are static inline
 * so that programs not linked with testutil.c (tests/tool_ckpt_mpi.c) share them too. */

/* A test tensor: name, dtype, rank, global shape; parts = boxes per dim of a grid split (0 = 1). */
typedef struct {
    const char *name;
    mp_dtype dt;
    int nd;
    int64_t shape[4];
    int parts[4];
} tu_tdesc;

/* The value formulas: element g of tensor tid is tid*1000 + (g % P)*S - 7 for f32/bf16, g*3 - 5 + tid
 * for i32. TU_VALS_MAIN (P 9973, S 0.25): test_ckpt, test_ckpt_write, tool_ckpt_mpi. TU_VALS_V1FIX
 * (P 61, S 0.5): the v1 fixture's generator (tests/data/ckpt_v1/make_v1_fixture.c), test_ckpt_read. */
typedef enum { TU_VALS_MAIN, TU_VALS_V1FIX } tu_vals;

/* The number of elements of shape s[0..nd). */
static inline int64_t tu_numel(int nd, const int64_t *s) {
    int64_t n = 1;
    for (int d = 0; d < nd; d++) n *= s[d];
    return n;
}

/* Element g of tensor tid under formula vf, as raw bytes of dtype dt into out. */
static inline void tu_value(tu_vals vf, int tid, int64_t g, mp_dtype dt, void *out) {
    float f = vf == TU_VALS_V1FIX ? (float)tid * 1000.0f + (float)(g % 61) * 0.5f - 7.0f
                                  : (float)tid * 1000.0f + (float)(g % 9973) * 0.25f - 7.0f;
    if (dt == MP_F32) memcpy(out, &f, 4);
    else if (dt == MP_BF16) { uint16_t h = mp_f32_to_bf16(f); memcpy(out, &h, 2); }
    else { int32_t v = (int32_t)(g * 3 - 5 + tid); memcpy(out, &v, 4); }
}

/* Fills buf (row-major box off/shp of tensor tid described by t) with the expected values. */
static inline void tu_fill_box(tu_vals vf, int tid, const tu_tdesc *t, const int64_t *off, const int64_t *shp,
                               void *buf) {
    size_t es = mp_dtype_size(t->dt);
    int64_t n = tu_numel(t->nd, shp);
    for (int64_t k = 0; k < n; k++) {
        int64_t rem = k, g = 0, mul = 1, idx[4];
        for (int d = t->nd - 1; d >= 0; d--) { idx[d] = rem % shp[d]; rem /= shp[d]; }
        for (int d = t->nd - 1; d >= 0; d--) { g += (off[d] + idx[d]) * mul; mul *= t->shape[d]; }
        tu_value(vf, tid, g, t->dt, (char *)buf + (size_t)k * es);
    }
}

/* The helpers below assert with Criterion (defined in testutil.c; Criterion tests only). */

/* A malloc'd buffer holding box off/shp of tensor tid (tu_fill_box); *bytes (may be NULL) = its size. */
void *tu_expected_box(tu_vals vf, int tid, const tu_tdesc *t, const int64_t *off, const int64_t *shp, size_t *bytes);
/* Reads box off/shp of t with ckpt_read and asserts it is bitwise equal to tu_fill_box's values. */
void tu_expect_box(ckpt_reader *r, tu_vals vf, int tid, const tu_tdesc *t, const int64_t *off, const int64_t *shp);
/* "a/b", malloc'd (caller frees). */
char *tu_path(const char *a, const char *b);
/* rm -rf p (through the shell; its status is not checked). */
void tu_rm_rf(const char *p);
/* ckpt_open of dir / of root/step_<8 digits>, asserting success. */
ckpt_reader *tu_open_dir(const char *dir);
ckpt_reader *tu_open_step(const char *root, int64_t step);
/* H5Fopen(path, flags) with file locking off and HDF5's error printing off; returns < 0 on failure. */
hid_t tu_h5_open(const char *path, unsigned flags);
/* The file offset of contiguous dataset dset in HDF5 file path (asserting it has one). */
long long tu_h5_data_offset(const char *path, const char *dset);
/* XORs 0x10 into the byte at offset at of file path. */
void tu_flip_byte(const char *path, long long at);

#endif
