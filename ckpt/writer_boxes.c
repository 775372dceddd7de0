/*
 * ckpt/writer_boxes.c — planning a save: the boxes and metadata a process adds, before anything is
 * written.
 *
 * Every box has a file rank: the process's own for ckpt_save_add, any rank of the recorded world
 * (opts.world_size, else the communicator's size) for ckpt_save_add_fill. A box is validated when it
 * is added (name, dtype, dims, inside its tensor, the same dtype and global shape as the tensor's
 * earlier boxes) and gets its tile geometry (ckpt_tile_geometry) and a provisional k (its count among
 * the tensor's boxes in its file; ckpt/writer_files.c renumbers them by offset before writing). A
 * refused add is remembered in the save's local stage, so that the commit fails on every rank.
 *
 * The accessors at the end are what ckpt/files.c and ckpt/group.c see of a save (ckpt_internal.h).
 */
#include "ckpt/writer_internal.h"
#include "core/alloc.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

/* ---------------------------------------------------------------------- box map (planning) */
/* Adding a box looks up the earlier boxes of its tensor (dtype and shape must agree) and counts those
 * in its file (the dataset's box_<k>) through two hash sets of box indices, by name and by (name, file
 * rank): O(1) per box, so a rank's planning is linear in its own boxes (docs/BENCH_SCALE.md). Both
 * sets are rebuilt at twice the size when half full. */

static uint64_t map_hash(const char *name, int rank) {
    return XXH3_64bits_withSeed(name, strlen(name), (uint64_t)(int64_t)rank + 2);
}

/* The slot of set (s->by_name when rank < 0, else s->by_file) holding a box of name (and file rank),
 * or the empty slot where one would go. */
static int map_find(const ckpt_save *s, const int *set, const char *name, int rank) {
    if (s->capm == 0) return 0;
    size_t mask = (size_t)s->capm - 1, i = (size_t)map_hash(name, rank) & mask;
    for (;; i = (i + 1) & mask) {
        int j = set[i];
        if (j < 0 || (strcmp(s->b[j].name, name) == 0 && (rank < 0 || s->b[j].rank == rank))) return (int)i;
    }
}

/* Sets of capacity cap (a power of two) over boxes [0, nb), counts recomputed. */
static void map_build(ckpt_save *s, int cap, int nb) {
    size_t old = sizeof(int) * (size_t)s->capm;
    mp_free_acct(s->by_name, old, MP_MEM_OTHER);
    mp_free_acct(s->by_file, old, MP_MEM_OTHER);
    mp_free_acct(s->in_file, old, MP_MEM_OTHER);
    s->capm = cap;
    s->by_name = mp_malloc(sizeof(int) * (size_t)cap, MP_MEM_OTHER);
    s->by_file = mp_malloc(sizeof(int) * (size_t)cap, MP_MEM_OTHER);
    s->in_file = mp_calloc(sizeof(int) * (size_t)cap, MP_MEM_OTHER);
    for (int i = 0; i < cap; i++) s->by_name[i] = s->by_file[i] = -1;
    for (int j = 0; j < nb; j++) {
        int a = map_find(s, s->by_name, s->b[j].name, -1), f = map_find(s, s->by_file, s->b[j].name, s->b[j].rank);
        if (s->by_name[a] < 0) s->by_name[a] = j;
        if (s->by_file[f] < 0) s->by_file[f] = j;
        s->in_file[f]++;
    }
}

/* Records box j (just appended; name_slot / file_slot its slots from map_find before it was added, k its
 * count in its file including itself). */
static void map_add(ckpt_save *s, int j, int name_slot, int file_slot, int k) {
    if (2 * (s->nb + 1) > s->capm) {   /* also the first box: capm 0 */
        map_build(s, s->capm ? 2 * s->capm : 64, s->nb);
        return;
    }
    if (s->by_name[name_slot] < 0) s->by_name[name_slot] = j;
    if (s->by_file[file_slot] < 0) s->by_file[file_slot] = j;
    s->in_file[file_slot] = k;
}

void ck_wr_map_free(ckpt_save *s) {
    size_t n = sizeof(int) * (size_t)s->capm;
    mp_free_acct(s->by_name, n, MP_MEM_OTHER);
    mp_free_acct(s->by_file, n, MP_MEM_OTHER);
    mp_free_acct(s->in_file, n, MP_MEM_OTHER);
}

/* Validates a box about to be added to file rank file_rank and appends it to s->b (dataset names,
 * tile geometry set; data / fill left to the caller). Returns the new box, or NULL with *le set. */
static wbox *add_box(ckpt_save *s, int file_rank, const char *name, mp_dtype dt, int ndim, const int64_t *gshape,
                     const int64_t *offset, const int64_t *shape, int have_data, mp_err *le) {
    if (s->state != ST_OPEN) {
        mp_err_set(le, MP_EINTERNAL, "adding a box of tensor %s after the save was started or committed",
                   name ? name : "?");
        return NULL;
    }
    if (ck_check_name(name, le) != MP_OK) return NULL;
    if (!strncmp(name, "boxes", 5) && (name[5] == '\0' || name[5] == '/')) {
        mp_err_set(le, MP_EINPUT, "tensor %s: the name 'boxes' is reserved (a rank file's /boxes table, format v3)",
                   name);
        return NULL;
    }
    if (dt != MP_F32 && dt != MP_BF16 && dt != MP_I32) {
        mp_err_set(le, MP_EINPUT, "tensor %s: unsupported dtype %d", name, (int)dt);
        return NULL;
    }
    if (ndim < 1 || ndim > CKPT_MAX_DIMS) {
        mp_err_set(le, MP_EINPUT, "tensor %s: ndim %d not in 1..%d", name, ndim, CKPT_MAX_DIMS);
        return NULL;
    }
    if (!gshape || !offset || !shape || !have_data) {
        mp_err_set(le, MP_EINPUT, "tensor %s: NULL shape, offset, data or fill callback", name);
        return NULL;
    }
    if (file_rank < 0 || file_rank >= s->wsize) {
        mp_err_set(le, MP_EINPUT, "tensor %s: file rank %d outside the world of %d ranks", name, file_rank,
                   s->wsize);
        return NULL;
    }
    for (int d = 0; d < ndim; d++) {
        if (gshape[d] <= 0 || shape[d] <= 0 || offset[d] < 0 || offset[d] > gshape[d] - shape[d]) {   /* no overflow */
            char bs[256], gs[256];
            int64_t z[CKPT_MAX_DIMS] = {0};
            ck_box_str(bs, sizeof bs, ndim, offset, shape);
            ck_box_str(gs, sizeof gs, ndim, z, gshape);
            mp_err_set(le, MP_EINPUT, "tensor %s: box %s is empty or outside the tensor %s", name, bs, gs);
            return NULL;
        }
    }
    int k = 0;   /* boxes of this tensor already in this file */
    int same_name = map_find(s, s->by_name, name, -1), same_file = map_find(s, s->by_file, name, file_rank);
    int first = s->capm ? s->by_name[same_name] : -1;
    if (first >= 0) {
        const wbox *P = &s->b[first];
        int same = P->dt == dt && P->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = P->gshape[d] == gshape[d];
        if (!same) {
            mp_err_set(le, MP_EINPUT, "tensor %s: added again with a different dtype or global shape", name);
            return NULL;
        }
    }
    if (s->capm && s->by_file[same_file] >= 0) k = s->in_file[same_file];
    if (s->nb == s->capb) {
        int cap = s->capb * 2 + 16;
        s->b = mp_realloc(s->b, sizeof *s->b * (size_t)s->capb, sizeof *s->b * (size_t)cap, MP_MEM_OTHER);
        s->capb = cap;
    }
    wbox *B = &s->b[s->nb++];
    memset(B, 0, sizeof *B);
    B->name = mp_strdup(name);
    B->dt = dt;
    B->ndim = ndim;
    B->rank = file_rank;
    B->sender = s->rank;
    for (int d = 0; d < CKPT_MAX_DIMS; d++) {
        B->gshape[d] = d < ndim ? gshape[d] : 1;
        B->off[d] = d < ndim ? offset[d] : 0;
        B->shp[d] = d < ndim ? shape[d] : 1;
    }
    B->k = k;
    ckpt_tile_geometry(mp_dtype_size(dt), ndim, B->shp, &B->tile_rows, &B->tile_cols);
    B->ntiles = ck_tile_count(ndim, B->shp, B->tile_rows, B->tile_cols);
    map_add(s, s->nb - 1, same_name, same_file, k + 1);
    return B;
}

mp_code ckpt_save_add(ckpt_save *s, const char *name, mp_dtype dt, int ndim, const int64_t *gshape,
                      const int64_t *offset, const int64_t *shape, const void *data, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    mp_err le;
    mp_code rc = MP_OK;
    wbox *B = add_box(s, s->rank, name, dt, ndim, gshape, offset, shape, data != NULL, &le);
    if (B) B->data = data;
    else rc = le.code;
    s->st.stall_s += ck_now() - t0;
    if (rc != MP_OK) {
        ck_stage_set(&s->local, rc, &le);
        if (e) *e = le;
    }
    return rc;
}

mp_code ckpt_save_add_fill(ckpt_save *s, int file_rank, const char *name, mp_dtype dt, int ndim,
                           const int64_t *gshape, const int64_t *offset, const int64_t *shape, ckpt_fill_fn fill,
                           void *ctx, mp_err *e) {
    assert(s);
    double t0 = ck_now();
    mp_err le;
    mp_code rc = MP_OK;
    wbox *B = add_box(s, file_rank, name, dt, ndim, gshape, offset, shape, fill != NULL, &le);
    if (B) {
        B->fill = fill;
        B->ctx = ctx;
    } else {
        rc = le.code;
    }
    s->st.stall_s += ck_now() - t0;
    if (rc != MP_OK) {
        ck_stage_set(&s->local, rc, &le);
        if (e) *e = le;
    }
    return rc;
}

void ckpt_save_fail(ckpt_save *s, mp_code rc, const mp_err *e) {
    assert(s && rc != MP_OK && s->state == ST_OPEN);
    ck_stage_set(&s->local, rc, e);
}

mp_code ckpt_save_meta(ckpt_save *s, const char *key, const char *value, mp_err *e) {
    mp_err le;
    mp_code rc = ck_check_key(key, &le);
    if (rc == MP_OK && !value) rc = mp_err_set(&le, MP_EINPUT, "metadata %s: NULL value", key);
    if (rc != MP_OK) {
        ck_stage_set(&s->local, rc, &le);
        if (e) *e = le;
        return rc;
    }
    for (int i = 0; i < s->nmeta; i++)
        if (!strcmp(s->keys[i], key)) {
            free(s->vals[i]);
            s->vals[i] = mp_strdup(value);
            return MP_OK;
        }
    size_t old = sizeof(char *) * (size_t)s->nmeta, now = old + sizeof(char *);
    s->keys = mp_realloc(s->keys, old, now, MP_MEM_OTHER);
    s->vals = mp_realloc(s->vals, old, now, MP_MEM_OTHER);
    s->keys[s->nmeta] = mp_strdup(key);
    s->vals[s->nmeta] = mp_strdup(value);
    s->nmeta++;
    return MP_OK;
}

int ck_save_rank(const ckpt_save *s) { return s->rank; }
const char *ck_save_partial(const ckpt_save *s) { return s->partial; }
const char *ck_save_meta_get(const ckpt_save *s, const char *key) {
    for (int i = 0; i < s->nmeta; i++)
        if (!strcmp(s->keys[i], key)) return s->vals[i];
    return NULL;
}

mp_comm *ck_save_world(const ckpt_save *s) { return s->world; }
const ckpt_save_opts *ck_save_opts_of(const ckpt_save *s) { return &s->o; }
int ck_save_failed(const ckpt_save *s) { return s->local.rc != MP_OK; }
int ck_save_nboxes(const ckpt_save *s) { return s->nb; }

void ck_save_box_at(const ckpt_save *s, int i, ck_boxrec *out, const void **data) {
    assert(i >= 0 && i < s->nb);
    ck_wr_box_rec(&s->b[i], out);
    *data = s->b[i].data;
}

void ck_save_drop_boxes(ckpt_save *s) {
    ck_wr_free_boxes(s->b, s->nb);
    ck_wr_map_free(s);
    s->b = NULL;
    s->nb = s->capb = s->capm = 0;
    s->by_name = s->by_file = s->in_file = NULL;
}

/* Frees box records (names; never the data or fill contexts, which the caller owns). */
void ck_wr_box_rec(const wbox *B, ck_boxrec *r) {
    memset(r, 0, sizeof *r);
    r->tensor = B->name;
    r->rank = B->rank;
    r->k = B->k;
    r->dtype = B->dt;
    r->ndim = B->ndim;
    memcpy(r->gshape, B->gshape, sizeof r->gshape);
    memcpy(r->offset, B->off, sizeof r->offset);
    memcpy(r->shape, B->shp, sizeof r->shape);
    r->checksum = B->checksum;
    r->tile_rows = B->tile_rows;
    r->tile_cols = B->tile_cols;
    r->ntiles = B->ntiles;
    r->tiles_checksum = B->tiles_checksum;
}

void ck_wr_rec_box(const ck_boxrec *r, wbox *B) {
    B->rank = (int)r->rank;
    B->k = (int)r->k;
    B->dt = (mp_dtype)r->dtype;
    B->ndim = (int)r->ndim;
    memcpy(B->gshape, r->gshape, sizeof B->gshape);
    memcpy(B->off, r->offset, sizeof B->off);
    memcpy(B->shp, r->shape, sizeof B->shp);
    B->checksum = r->checksum;
    B->tile_rows = r->tile_rows;
    B->tile_cols = r->tile_cols;
    B->ntiles = r->ntiles;
    B->tiles_checksum = r->tiles_checksum;
}

void ck_wr_free_boxes(wbox *b, int n) {
    for (int i = 0; i < n; i++) free(b[i].name);
    free(b);
}
