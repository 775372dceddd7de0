/*
 * tests/fuzz/fuzz_dcp.c — libFuzzer target for the DCP reader's parsers of untrusted bytes: the data-only
 * pickle reader (reshard/pickle.c) through dcp_parse_metadata (a `.metadata` file), and the torch.save
 * record reader (dcp_record_parse: zip directory, local headers, data.pkl) over the same bytes as a record.
 *
 * Promises checked when a parser accepts: every tensor has 0..DCP_MAX_DIMS dims and each chunk names a
 * file of the directory; an accepted record's storage entry lies inside the record and holds
 * storage_numel elements of its dtype. A crash, a sanitizer report (an out-of-bounds read, a leak),
 * a timeout or a broken promise is a finding. Corpus: tests/fuzz/corpus/dcp (the .metadata of DCP
 * directories torch 2.15 wrote with 1, 2 and 4 processes, one tensor record, a .metadata and a record
 * that `meshpoint export --format dcp` wrote, and crafted refusals:
 * os.system, builtins.eval, nesting bombs, a huge length).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "reshard/dcp.h"

typedef struct mem { const uint8_t *p; size_t n; } mem;

static int mem_read(void *ctx, int64_t off, size_t n, void *buf) {
    const mem *m = ctx;
    if (off < 0 || (size_t)off > m->n || n > m->n - (size_t)off) return 5;   /* EIO */
    memcpy(buf, m->p + off, n);
    return 0;
}

static void check_metadata(const uint8_t *data, size_t size) {
    dcp_dir d = {0};
    mp_err e;
    if (dcp_parse_metadata("fuzz/.metadata", data, size, &d, &e) == MP_OK)
        for (int i = 0; i < d.nt; i++) {
            if (d.t[i].ndim < 0 || d.t[i].ndim > DCP_MAX_DIMS) abort();
            for (int c = 0; c < d.t[i].nchunks; c++)
                if (d.t[i].chunks[c].file < 0 || d.t[i].chunks[c].file >= d.nfiles) abort();
        }
    for (int i = 0; i < d.nt; i++) free(d.t[i].name), free(d.t[i].chunks);
    for (int i = 0; i < d.nb; i++) free(d.b[i].name);
    for (int i = 0; i < d.nfiles; i++) free(d.files[i]);
    free(d.t), free(d.b), free(d.files), free(d.version);
}

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    check_metadata(data, size);
    mem m = {data, size};
    dcp_record r;
    mp_err e;
    if (dcp_record_parse("fuzz.distcp", mem_read, &m, (int64_t)size, &r, &e) == MP_OK && r.is_tensor) {
        if (r.data_offset < 0 || r.data_offset > (int64_t)size || r.data_length > (int64_t)size - r.data_offset) abort();
        if (r.data_length != r.storage_numel * st_dtype_size(r.dtype)) abort();
    }
    return 0;
}
