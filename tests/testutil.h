/*
 * tests/testutil.h — helpers shared by the Criterion tests: temporary directories, running the
 * meshpoint binary (path in $MP_BIN, set by ctest) and capturing its exit status and output, and
 * numeric comparisons.
 */
#ifndef MP_TESTUTIL_H
#define MP_TESTUTIL_H

#include <stddef.h>
#include <stdint.h>

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

#endif
