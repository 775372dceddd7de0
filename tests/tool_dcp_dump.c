/*
 * tests/tool_dcp_dump.c — writes every chunk of every tensor of a DCP directory, as reshard/dcp.c's
 * reader returns it (dcp_read_chunk: row-major bytes of the box), to OUTDIR/<tensor>.<chunk>.bin, and
 * prints the train_state step when there is one; for tests/python/dcp_read.py to compare bitwise with
 * the state dict torch saved.
 *
 * Usage: tool_dcp_dump DCP_DIR OUTDIR. Exit 2 with the reader's message when the directory is refused,
 * 1 when a chunk cannot be read.
 */
#include <stdio.h>
#include <stdlib.h>
#include "core/alloc.h"
#include "reshard/dcp.h"

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s DCP_DIR OUTDIR\n", argv[0]);
        return 2;
    }
    dcp_dir *d;
    mp_err e;
    if (dcp_open(&d, argv[1], &e)) {
        fprintf(stderr, "%s\n", e.msg);
        return 2;
    }
    int st = 0;
    for (int i = 0; i < d->nt && !st; i++)
        for (int c = 0; c < d->t[i].nchunks && !st; c++) {
            dcp_tensor *t = &d->t[i];
            size_t n = (size_t)(dcp_numel(t->ndim, t->chunks[c].sizes) * st_dtype_size(t->dtype));
            void *buf = mp_malloc(n + 1, MP_MEM_OTHER);
            char path[4096];
            snprintf(path, sizeof path, "%s/%s.%d.bin", argv[2], t->name, c);
            FILE *f = NULL;
            if (dcp_read_chunk(d, t, &t->chunks[c], buf, &e)) fprintf(stderr, "%s\n", e.msg), st = 1;
            else if (!(f = fopen(path, "wb")) || fwrite(buf, 1, n, f) != n) fprintf(stderr, "%s: write failed\n", path), st = 1;
            if (f) fclose(f);
            free(buf);
        }
    int64_t step;
    int hs = dcp_train_step(d, &step, &e);
    if (hs > 0) printf("step %lld\n", (long long)step);
    else if (hs < 0) fprintf(stderr, "%s\n", e.msg), st = 1;
    dcp_close(d);
    return st;
}
