/*
 * ckpt/writer_commit.c — a save's layout exchange and rank 0's commit (steps 2 and 3 of the commit in
 * ckpt/writer.c).
 *
 * Exchange: each process's box list (names, shapes, file ranks, checksums, tile geometry, and the
 * XXH3 of each of its files' /boxes table) goes to rank 0 only: one gather of the lengths, one gatherv
 * per 256 ranks' lists (core/comm.h). No other rank receives any list, so a save's traffic is linear
 * in the world (docs/BENCH_SCALE.md). Rank 0 checks every list (malformed, another world size).
 *
 * Rank 0: builds the layout from every box (ck_layout: tensor, box and file tables, its metadata),
 * checks names, file ownership and exact coverage, writes and fsyncs index.h5 (and view.h5 unless it
 * goes to the background) and then the directory holding it, then publishes: the rename, `latest`,
 * retention in step mode, the rename or swap in dir mode (ck_wr_commit_rank0 lists the steps; every
 * one is durable before the next starts, docs/FORMAT.md "Commit protocol").
 */
#include "ckpt/writer_internal.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include <assert.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------- exchange */

static void put_i64(ck_buf *b, int64_t v) { ck_buf_put(b, &v, sizeof v); }

/* This process's box list: the recorded world size, then per box its wire fields of the box record
 * (ckpt/boxrec.c: name, file rank, k, dtype, shapes, checksums and tile geometry; not the tile array,
 * which stays in the rank file), then its files' /boxes checksums. */
static void serialize(const ckpt_save *s, ck_buf *b) {
    put_i64(b, s->wsize);
    put_i64(b, s->nb);
    for (int i = 0; i < s->nb; i++) {
        ck_boxrec r;
        ck_wr_box_rec(&s->b[i], &r);
        ck_boxrec_send(CK_BR_WIRE, b, &r);
    }
    put_i64(b, s->nfsums);
    for (int i = 0; i < s->nfsums; i++) {
        put_i64(b, s->fsums[i][0]);
        put_i64(b, s->fsums[i][1]);
    }
}

typedef struct { const char *p; size_t n, at; int bad; } rd_t;

static void get(rd_t *r, void *v, size_t n) {
    if (r->bad || r->at + n > r->n) { r->bad = 1; memset(v, 0, n); return; }
    memcpy(v, r->p + r->at, n);
    r->at += n;
}

static int64_t get_i64(rd_t *r) { int64_t v; get(r, &v, sizeof v); return v; }

/* Reads the (file rank, /boxes checksum) pairs at the end of a list into fsum[rank] (ranks below
 * wsize); 0 when malformed. */
static int get_fsums(rd_t *r, int64_t wsize, uint64_t *fsum) {
    int64_t nf = get_i64(r);
    if (nf < 0) return 0;
    for (int64_t i = 0; i < nf && !r->bad; i++) {
        int64_t fr = get_i64(r), h = get_i64(r);
        if (fr < 0 || fr >= wsize) return 0;
        fsum[fr] = (uint64_t)h;
    }
    return !r->bad;
}

/* Appends the boxes that process `sender` serialized to *all (file ranks kept, sender recorded), its
 * files' /boxes checksums to fsum (by file rank, for ranks below rank 0's world size rank0_wsize) and
 * sets *wsize to the world size it records. Returns 0 on a malformed list (lengths, dims or a tile
 * geometry that ckpt_tile_geometry does not give). */
static int deserialize(const char *p, size_t n, int sender, wbox **all, int *nall, int *cap, int64_t *wsize,
                       int64_t rank0_wsize, uint64_t *fsum) {
    rd_t r = {p, n, 0, 0};
    *wsize = get_i64(&r);
    int64_t nb = get_i64(&r);
    if (nb < 0) return 0;
    char scratch[CK_BOXREC_SCRATCH];
    for (int64_t i = 0; i < nb && !r.bad; i++) {
        if (*nall == *cap) {
            int c = *cap * 2 + 64;
            *all = mp_realloc(*all, sizeof **all * (size_t)*cap, sizeof **all * (size_t)c, MP_MEM_OTHER);
            *cap = c;
        }
        wbox *B = &(*all)[*nall];
        memset(B, 0, sizeof *B);
        ck_boxrec rec;
        if (!ck_boxrec_recv(CK_BR_WIRE, r.p, r.n, &r.at, &rec, scratch) || rec.k < 0) { r.bad = 1; break; }
        ck_wr_rec_box(&rec, B);
        B->sender = sender;
        if (B->ndim < 1 || B->ndim > CKPT_MAX_DIMS || (B->dt != MP_F32 && B->dt != MP_BF16 && B->dt != MP_I32))
            { r.bad = 1; break; }
        for (int d = 0; d < CKPT_MAX_DIMS; d++)
            if (B->shp[d] <= 0) r.bad = 1;
        if (r.bad) break;
        int64_t tr, tc;
        ckpt_tile_geometry(mp_dtype_size(B->dt), B->ndim, B->shp, &tr, &tc);
        if (tr != B->tile_rows || tc != B->tile_cols || B->ntiles != ck_tile_count(B->ndim, B->shp, tr, tc))
            { r.bad = 1; break; }
        B->name = mp_strdup(rec.tensor);
        (*nall)++;
    }
    if (r.bad || !get_fsums(&r, rank0_wsize, fsum)) return 0;
    return !r.bad && r.at == r.n;
}

/* Every process's box list to rank 0, and to no other rank: the lengths by one gather of an int64 per
 * process, then the lists by one gatherv per CK_GATHER_RANKS consecutive ranks (core/comm.h; a rank
 * sends nothing in the rounds of other ranks), deserialized round by round. So a rank other than 0
 * receives nothing and rank 0 the sum of the lists. On rank 0, *all gets every box (in rank order),
 * fsum[file rank] each rank file's /boxes checksum, *bad_rank is the first process whose list is malformed and *bad_world the first that records a
 * world size other than rank 0's (both -1 if none); the other ranks return an empty list. */
void ck_wr_exchange(ckpt_save *s, wbox **all, int *nall, uint64_t *fsum, int *bad_rank, int *bad_world) {
    mp_comm *w = s->world;
    ck_buf mine = {0};
    serialize(s, &mine);
    int root = w->rank == 0;
    int64_t n = (int64_t)mine.n;
    int64_t *len = root ? mp_xmalloc(sizeof(int64_t) * (size_t)w->size) : NULL;
    w->ops->gather(w, len, &n, sizeof n, 0);
    int cap = 0;
    *nall = 0;
    *all = NULL;
    *bad_rank = *bad_world = -1;
    const int per = ck_round_ranks(CK_GATHER_RANKS);   /* rank 0 holds one round's lists (70B at tp 8: ~150 MiB) */
    for (int r0 = 0; r0 < w->size; r0 += per) {
        int r1 = w->size - r0 < per ? w->size : r0 + per;
        char *lists = ck_gather_round(w, mine.p, n, len, r0, r1);
        size_t at = 0;
        for (int r = r0; root && r < r1; r++) {
            int64_t ws = 0;
            if (!deserialize(lists + at, (size_t)len[r], r, all, nall, &cap, &ws, s->wsize, fsum)) {
                if (*bad_rank < 0) *bad_rank = r;
            } else if (ws != s->wsize && *bad_world < 0) {
                *bad_world = r;
            }
            at += (size_t)len[r];
        }
        free(lists);
    }
    free(len);
    free(mine.p);
}

/* ------------------------------------------------------------------------------- rank 0 */

static int cmp_wbox(const void *a, const void *b) {
    const wbox *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    if (c) return c;
    if ((c = ck_off_cmp(x->off, y->off))) return c;
    if (x->rank != y->rank) return x->rank - y->rank;
    return x->sender - y->sender;
}

static int cmp_cstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The file table of the layout: the file ranks that have boxes in all[0, nall), each in order, into L->f
 * (L->nfiles of them); file_of[r] gets rank r's index in it (-1: none). Checks that every file rank is in
 * the world and written by exactly one process; L->f is complete even when that check fails. */
static mp_code layout_files(const ckpt_save *s, const wbox *all, int nall, const uint64_t *fsum, ck_layout *L,
                            int *file_of, mp_err *e) {
    mp_code rc = MP_OK;
    int *owner = mp_xmalloc(sizeof(int) * (size_t)s->wsize);
    for (int r = 0; r < s->wsize; r++) owner[r] = file_of[r] = -1;
    for (int i = 0; i < nall && rc == MP_OK; i++) {
        int fr = all[i].rank;
        if (fr < 0 || fr >= s->wsize) {
            rc = mp_err_set(e, MP_EINTERNAL, "tensor %s: process %d sent file rank %d outside the world of %d",
                            all[i].name, all[i].sender, fr, s->wsize);
        } else if (owner[fr] < 0) {
            owner[fr] = all[i].sender;
        } else if (owner[fr] != all[i].sender) {
            int a = owner[fr] < all[i].sender ? owner[fr] : all[i].sender;
            int b = owner[fr] < all[i].sender ? all[i].sender : owner[fr];
            rc = mp_err_set(e, MP_EINPUT, "rank file rank_%05d.h5 is written by two processes (%d and %d; tensor %s)",
                            fr, a, b, all[i].name);
        }
    }
    L->f = mp_xcalloc(sizeof *L->f * (size_t)(s->wsize + 1));
    for (int r = 0; r < s->wsize; r++)
        if (owner[r] >= 0) {
            file_of[r] = L->nfiles;
            ck_file *F = &L->f[L->nfiles++];
            F->rank = r;
            snprintf(F->name, sizeof F->name, "rank_%05d.h5", r);
            F->boxes_checksum = fsum[r];
        }
    free(owner);
    return rc;
}

/* Refuses (MP_EINPUT) box W of a tensor whose previous box P has another dtype or global shape, naming
 * both rank files; MP_OK when they agree. */
static mp_code same_tensor(const wbox *P, const wbox *W, mp_err *e) {
    int same = P->dt == W->dt && P->ndim == W->ndim;
    for (int d = 0; same && d < CKPT_MAX_DIMS; d++) same = P->gshape[d] == W->gshape[d];
    if (same) return MP_OK;
    char a[256], b[256];
    int64_t z[CKPT_MAX_DIMS] = {0};
    ck_box_str(a, sizeof a, P->ndim, z, P->gshape);
    ck_box_str(b, sizeof b, W->ndim, z, W->gshape);
    return mp_err_set(e, MP_EINPUT, "tensor %s: rank_%05d.h5 has it as %s %s, rank_%05d.h5 as %s %s", W->name,
                      P->rank, mp_dtype_name(P->dt), a, W->rank, mp_dtype_name(W->dt), b);
}

/* The tensor and box tables of the layout from all[0, nall) (sorted by name, then offset): one tensor
 * per name, its boxes in order, each counted in its file's entry (file_of: layout_files). The boxes of
 * one tensor must agree on its dtype and global shape. */
static mp_code layout_boxes(const wbox *all, int nall, const int *file_of, ck_layout *L, mp_err *e) {
    L->t = mp_xcalloc(sizeof *L->t * (size_t)(nall + 1));
    L->b = mp_xcalloc(sizeof *L->b * (size_t)(nall + 1));
    L->nboxes = nall;
    for (int i = 0; i < nall; i++) {
        const wbox *W = &all[i];
        if (i == 0 || strcmp(W->name, all[i - 1].name) != 0) {
            ck_tensor *T = &L->t[L->ntensors++];
            snprintf(T->name, sizeof T->name, "%s", W->name);
            T->dtype = W->dt;
            T->ndim = W->ndim;
            memcpy(T->shape, W->gshape, sizeof T->shape);
            T->box_first = i;
        } else {
            MP_TRY(same_tensor(&all[i - 1], W, e));
        }
        ck_tensor *T = &L->t[L->ntensors - 1];
        T->nboxes++;
        ck_box *B = &L->b[i];
        B->tensor = L->ntensors - 1;
        B->file = file_of[W->rank];
        assert(B->file >= 0);
        B->k = W->k;   /* the layout has no path pool: its paths are wbox_path's, derived from k */
        memcpy(B->off, W->off, sizeof B->off);
        memcpy(B->shp, W->shp, sizeof B->shp);
        B->checksum = W->checksum;
        B->slab_rows = B->slab_first = B->nslabs = 0;
        B->tile_rows = W->tile_rows;
        B->tile_cols = W->tile_cols;
        B->ntiles = W->ntiles;
        B->tiles_checksum = W->tiles_checksum;
        L->f[B->file].nboxes++;
        L->f[B->file].bytes += (int64_t)mp_dtype_size(W->dt) * ck_volume(W->ndim, W->shp);
    }
    return MP_OK;
}

/* Copies rank 0's metadata into L, sorted by key (copies: L owns them). */
static void layout_meta(const ckpt_save *s, ck_layout *L) {
    L->keys = mp_xmalloc(sizeof(char *) * (size_t)(s->nmeta + 1));
    L->vals = mp_xmalloc(sizeof(char *) * (size_t)(s->nmeta + 1));
    char **pairs = mp_xmalloc(sizeof(char *) * 2 * (size_t)(s->nmeta + 1));
    for (int i = 0; i < s->nmeta; i++) { pairs[2 * i] = s->keys[i]; pairs[2 * i + 1] = s->vals[i]; }
    qsort(pairs, (size_t)s->nmeta, 2 * sizeof(char *), cmp_cstr);
    for (int i = 0; i < s->nmeta; i++) {
        L->keys[i] = mp_strdup(pairs[2 * i]);
        L->vals[i] = mp_strdup(pairs[2 * i + 1]);
    }
    L->nmeta = s->nmeta;
    free(pairs);
}

/* Refuses (MP_EINPUT) a tensor name that is a '/'-prefix of another in L's sorted tensor table:
 * view/<a> cannot be a dataset and a group. */
static mp_code check_name_prefixes(const ck_layout *L, mp_err *e) {
    for (int i = 0; i < L->ntensors; i++) {
        char pre[CKPT_NAME_MAX + 2];
        snprintf(pre, sizeof pre, "%s/", L->t[i].name);
        size_t n = strlen(pre);
        int lo = i + 1, hi = L->ntensors;
        while (lo < hi) {
            int m = lo + (hi - lo) / 2;
            if (strcmp(L->t[m].name, pre) < 0) lo = m + 1; else hi = m;
        }
        if (lo < L->ntensors && strncmp(L->t[lo].name, pre, n) == 0)
            return mp_err_set(e, MP_EINPUT, "tensor names %s and %s: a name may not be a '/'-prefix of another",
                              L->t[i].name, L->t[lo].name);
    }
    return MP_OK;
}

/* Builds the format-v2 layout from all boxes (sorted here) and rank 0's metadata; checks that every
 * file rank is in the recorded world and written by one process only, the names, and exact coverage. */
static mp_code build_layout(ckpt_save *s, wbox *all, int nall, const uint64_t *fsum, ck_layout *L, mp_err *e) {
    memset(L, 0, sizeof *L);
    if (nall > 1) qsort(all, (size_t)nall, sizeof *all, cmp_wbox);
    L->version = s->o.format_version;
    L->step = s->step;
    L->world = s->wsize;
    L->zstd_level = s->o.zstd_level;
    L->nslabs = 0;
    L->slabs = mp_xmalloc(sizeof(uint64_t));   /* v2 has no slab table */
    int *file_of = mp_xmalloc(sizeof(int) * (size_t)s->wsize);
    mp_code rc = layout_files(s, all, nall, fsum, L, file_of, e);
    if (rc == MP_OK) rc = layout_boxes(all, nall, file_of, L, e);
    free(file_of);
    layout_meta(s, L);
    if (rc != MP_OK) return rc;
    MP_TRY(check_name_prefixes(L, e));
    ck_layout_index(L);
    if (!s->o.unchecked_coverage)
        for (int t = 0; t < L->ntensors; t++) MP_TRY(ck_layout_check_tensor(L, t, 1, e));
    return MP_OK;
}

/* Dir mode, rank 0, index written: moves DIR.partial to DIR (swapping with an existing DIR when
 * replacing, then removing the old tree). *renamed = 1 once the .partial name no longer holds the
 * new checkpoint. */
static mp_code finish_dir(ckpt_save *s, int *renamed, mp_err *e) {
    if (!mp_fs_exists(s->final)) {
        MP_TRY(mp_fs_rename_durable(s->partial, s->final, s->root, e));
        *renamed = 1;
        ck_crash_point("after_rename", s->rank);
        return MP_OK;
    }
    if (!s->replace)
        return mp_err_set(e, MP_EINPUT, "checkpoint directory %s already exists (use --force to replace it)", s->final);
    char *old = NULL;
    MP_TRY(mp_fs_swap_dirs(s->partial, s->final, s->root, &old, e));
    *renamed = 1;
    ck_crash_point("after_rename", s->rank);
    mp_err re;
    if (mp_fs_remove_tree(old, &re) != MP_OK)
        mp_warn("ckpt: %s replaced, but removing its old content at %s failed: %s", s->final, old, re.msg);
    free(old);
    return MP_OK;
}

/* Rank 0's part of the commit after the exchange. Every step is durable before the next one starts
 * (docs/FORMAT.md, "Commit protocol"): the ROOT and step_N.partial entries were fsynced at begin (and
 * ROOT's parent when ROOT was created), the rank files and step_N.partial by their writers; then
 *   1. view.h5 (unless opts.view_background) and index.h5 written and fsynced, 2. step_N.partial
 *   fsynced (index.h5's directory entry), 3. rename to step_N, ROOT fsynced, 4. latest.tmp written and fsynced, 5. rename to latest, ROOT
 *   fsynced, 6. retention (index.h5 of an old checkpoint removed and its directory fsynced first).
 * A crash between any two leaves either the previous checkpoint or the new one as the newest complete.
 * With opts.view_background, once the directory is renamed (and after retention) the layout goes to
 * ck_view_bg_start (ckpt/view_bg.c), which writes view.h5 on a background thread. */
mp_code ck_wr_commit_rank0(ckpt_save *s, wbox *all, int nall, const uint64_t *fsum, mp_err *e) {
    ck_layout L;
    mp_code rc = build_layout(s, all, nall, fsum, &L, e);
    int renamed = 0, bg = s->o.view_background;
    if (rc == MP_OK) {
        ck_crash_point("before_index", s->rank);
        char *vp = ck_fmt("%s/%s", s->partial, CK_VIEW_FILE), *ip = ck_fmt("%s/index.h5", s->partial);
        if (!bg) rc = ck_view_write(&L, vp, e);   /* derived data, before the index that links to it */
        if (rc == MP_OK) rc = ck_index_write(&L, ip, e);
        free(vp);
        if (rc == MP_OK) rc = mp_fs_fsync_path(s->partial, 1, e);
        free(ip);
    }
    if (!bg) ck_layout_free(&L);
    if (rc == MP_OK) ck_crash_point("after_index", s->rank);
    if (rc == MP_OK && s->dir_mode) {
        rc = finish_dir(s, &renamed, e);
    } else if (rc == MP_OK) {
        rc = mp_fs_rename_durable(s->partial, s->final, s->root, e);
        renamed = rc == MP_OK;
        if (rc == MP_OK) {
            ck_crash_point("after_rename", s->rank);
            char *txt = ck_fmt("%s\n", s->dirname);
            rc = mp_fs_write_text_durable(s->root, "latest", txt, e);
            free(txt);
            if (rc != MP_OK)
                mp_err_wrap(e, "checkpoint %s is complete, but updating %s/latest failed", s->final, s->root);
        }
        if (rc == MP_OK) {
            ck_crash_point("after_latest", s->rank);
            if (s->o.keep > 0) {
                mp_err re;
                int removed = 0;
                if (ckpt_retain(s->root, s->o.keep, &removed, &re) != MP_OK)
                    mp_warn("ckpt: retention (keep %d) in %s failed: %s", s->o.keep, s->root, re.msg);
            }
        }
    }
    if (rc != MP_OK && !renamed) {
        mp_err ce;
        if (mp_fs_remove_tree(s->partial, &ce) != MP_OK) mp_warn("ckpt: %s", ce.msg);
    }
    if (bg && renamed) ck_view_bg_start(&L, s->final);   /* published: its views, off the critical path */
    else if (bg) ck_layout_free(&L);
    return rc;
}

/* ------------------------------------------------------------- scale simulation (bench_scale only) */

char *ckpt_save_list(const ckpt_save *s, size_t *n) {
    ck_buf b = {0};
    serialize(s, &b);
    *n = b.n;
    return b.p;
}
