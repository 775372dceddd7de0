/*
 * ckpt/group.c — rank files of several ranks: one file per node (or per group of G ranks of a node),
 * written by the group's leader (ckpt_save_opts.ranks_per_file; docs/FORMAT.md "Files of several
 * ranks", docs/DESIGN_NOTES.md).
 *
 * On a parallel file system every file of a save costs metadata operations on one directory; a file
 * per node instead of a file per rank divides them by the ranks per node (docs/BENCH_SCALE.md, "Files
 * on a parallel file system"). The format needs no change: a rank file may hold any number of boxes,
 * of any tensors, from any rank (offline tools already write many from one process), and the index
 * points every box at its file.
 *
 * Groups (rank 0 forms them, one gather and one broadcast over the world): ranks with the same node
 * key (an XXH3 of the host name; the test hook MP_FAULT=ckpt_ranks_per_node:N makes ranks r and r' one node
 * when r / N == r' / N) are one node; a node's ranks in world order are cut into groups of G (all of
 * them for CKPT_FILES_NODE); a group's lowest rank is its leader. Each rank receives the leader of
 * every rank (4 bytes a rank) and finds its own and, as a leader, its members.
 *
 * Transfer (the caller's thread: MPI is initialised FUNNELED and every MPI call of a save happens
 * there; hence synchronous saves only), over the world communicator's send / recv:
 *   1. each member sends its leader a list header {code, bytes} and then its box list (place CK_BR_GROUP
 *      of the box record, ckpt/boxrec.c: names, dtypes, shapes, offsets), or, when it already failed
 *      (a remembered error, or boxes group mode does not take), its message;
 *   2. the leader adds each member's boxes as fill boxes of its own file (ckpt_save_add_fill, members
 *      in rank order after its own boxes) and sends every member {go, fill_bytes}: go = 0 when the
 *      leader or any member has failed (then no data moves and the commit's agreement fails the save
 *      with the failing rank's own message);
 *   3. with go, each member sends, box by box in its order, every band the leader's writer will ask for
 *      (ck_fill_band_rows under the leader's fill_bytes): a band header {code, box, first row, rows,
 *      message}, then the band's bytes. A member that fails mid-way sends a header with its error and
 *      stops. The leader's writer asks for the bands in exactly that order (a file's boxes are written
 *      in the order added); the fill callback receives the header, checks that it is the band asked
 *      for, and receives the bytes straight into the writer's band buffer, so the leader's memory stays
 *      two band buffers whatever the node's state;
 *   4. however the leader's writing ends (a member's error, its own HDF5 or disk error), it then
 *      receives (and drops) every band its members still send, up to each one's last band or its error
 *      header: no member is left blocked in a send, so the save reaches the commit's agreement, which
 *      fails it on every rank with the leader's message (naming the member that failed, if one did).
 * Members then drop their boxes: they write no file and report no boxes in the commit's exchange; the
 * leader reports them all under its file, so rank 0's checks (one writer per file, exact coverage) are
 * the same as for a file per rank.
 */
#include "ckpt/ckpt_internal.h"
#include "core/fault.h"
#include "core/alloc.h"
#include "core/log.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

enum { TAG_LIST = 0x6d80, TAG_GO, TAG_BAND, TAG_DATA };

typedef struct { int64_t code, bytes; } list_hdr;
typedef struct { int64_t go, fill_bytes; } go_msg;
typedef struct {
    int64_t code, box, r0, rows;
    char msg[MP_ERR_MSG_MAX];
} band_hdr;

/* A member as its leader sees it: its boxes (shapes only: the data comes by message) and where its
 * stream of bands stands. */
typedef struct gbox {
    struct gmember *m;
    int idx;                      /* in the member's list */
    mp_dtype dt;
    int ndim;
    int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
} gbox;

typedef struct gmember {
    struct group *g;
    int rank;
    int nb;
    gbox *b;
    int next_box;                 /* the next band expected: box and first row */
    int64_t next_r0;
    int failed;                   /* it sent an error header: it sends nothing more */
} gmember;

typedef struct group {
    mp_comm *w;
    int leader;                   /* this rank's leader (itself for a leader) */
    int nm;                       /* members (leader: the others of its group) */
    gmember *m;
    void *scratch;                /* draining */
    size_t scap;
} group;

mp_code ckpt_files_parse(const char *s, int *ranks_per_file, mp_err *e) {
    if (s && !strcmp(s, "rank")) { *ranks_per_file = 1; return MP_OK; }
    if (s && !strcmp(s, "node")) { *ranks_per_file = CKPT_FILES_NODE; return MP_OK; }
    char *end = NULL;
    long v = s && *s >= '0' && *s <= '9' ? strtol(s, &end, 10) : -1;
    if (v < 1 || v > 65536 || !end || *end)
        return mp_err_set(e, MP_EINPUT, "expected rank, node or a number of ranks per file (1..65536), got \"%s\"",
                          s ? s : "");
    *ranks_per_file = (int)v;
    return MP_OK;
}

int ckpt_files_grouped(int ranks_per_file, int world_size) {
    return ranks_per_file != 0 && ranks_per_file != 1 && world_size > 1;
}

int ck_group_wanted(const ckpt_save *s) {
    return ckpt_files_grouped(ck_save_opts_of(s)->ranks_per_file, ck_save_world(s)->size);
}

/* ------------------------------------------------------------------------------------ groups */

/* This process's node key: fault ckpt_ranks_per_node:N (tests: nodes of N consecutive ranks) or an XXH3
 * of the host name. */
static uint64_t node_key(int rank) {
    int64_t per = mp_fault_int("ckpt_ranks_per_node", 0);
    if (per > 0) return (uint64_t)(rank / per);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "?");
    return XXH3_64bits(host, strlen(host));
}

typedef struct { uint64_t key; int rank; } keyed;

static int cmp_keyed(const void *a, const void *b) {
    const keyed *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

/* Rank 0: leader[r] for every rank from the node keys (g ranks per group, <= 0: the whole node). */
static void form_groups(const uint64_t *keys, int n, int g, int *leader) {
    keyed *k = mp_xmalloc(sizeof *k * (size_t)n);
    for (int r = 0; r < n; r++) k[r] = (keyed){keys[r], r};
    qsort(k, (size_t)n, sizeof *k, cmp_keyed);
    int first = 0, lead = 0;
    for (int i = 0; i < n; i++) {
        if (i == 0 || k[i].key != k[i - 1].key) first = i;   /* a new node */
        int local = i - first;
        if (g <= 0 ? local == 0 : local % g == 0) lead = k[i].rank;
        leader[k[i].rank] = lead;
    }
    free(k);
}

/* Collective: every rank's leader (rank 0 decides; every rank gets the table). */
static int *leaders(mp_comm *w, int g) {
    uint64_t mine = node_key(w->rank);
    uint64_t *keys = w->rank == 0 ? mp_xmalloc(sizeof(uint64_t) * (size_t)w->size) : NULL;
    w->ops->gather(w, keys, &mine, sizeof mine, 0);
    int32_t *leader = mp_xmalloc(sizeof(int32_t) * (size_t)w->size);
    if (w->rank == 0) form_groups(keys, w->size, g, leader);
    w->ops->broadcast(w, leader, sizeof(int32_t) * (size_t)w->size, 0);
    free(keys);
    return leader;
}

/* ------------------------------------------------------------------------------------ member */

/* The member's list: its boxes (ckpt_save_add boxes of its own rank), or a failure. */
static mp_code member_list(ckpt_save *s, ck_buf *b, mp_err *e) {
    int me = ck_save_world(s)->rank, nb = ck_save_nboxes(s);
    int64_t n = nb;
    ck_buf_put(b, &n, sizeof n);
    for (int i = 0; i < nb; i++) {
        ck_boxrec B;
        const void *data;
        ck_save_box_at(s, i, &B, &data);
        if (!data || B.rank != me)
            return mp_err_set(e, MP_EINPUT, "tensor %s: files of several ranks (ranks_per_file) take only "
                              "ckpt_save_add boxes of the process's own rank", B.tensor);
        ck_boxrec_send(CK_BR_GROUP, b, &B);   /* its name, dtype, dims, global shape, offset, shape */
    }
    return MP_OK;
}

/* Sends every band of every box to the leader (after a go), or an error header and stops. Returns the
 * member's local result (an injected failure: MP_FAULT=ckpt_fail_at:group_send, in the middle box). */
static mp_code member_send(ckpt_save *s, int leader, size_t fill_bytes, mp_err *e) {
    mp_comm *w = ck_save_world(s);
    int nb = ck_save_nboxes(s);
    band_hdr *h = mp_xcalloc(sizeof *h);
    mp_code rc = MP_OK;
    for (int i = 0; i < nb && rc == MP_OK; i++) {
        ck_boxrec B;
        const void *data;
        ck_save_box_at(s, i, &B, &data);
        mp_dtype dt = (mp_dtype)B.dtype;
        int nd = (int)B.ndim;
        int64_t rb = ck_row_bytes(dt, nd, B.shape), br = ck_fill_band_rows(dt, nd, B.shape, fill_bytes);
        for (int64_t r0 = 0; r0 < B.shape[0]; r0 += br) {
            int64_t n = B.shape[0] - r0 < br ? B.shape[0] - r0 : br;
            *h = (band_hdr){.code = MP_OK, .box = i, .r0 = r0, .rows = n};
            if (i == nb / 2 && r0 == 0 && ck_fail_point("group_send", w->rank)) {
                rc = mp_err_set(e, MP_EIO, "fault ckpt_fail_at:group_send: rank %d fails sending tensor %s to rank %d",
                                w->rank, B.tensor, leader);
                h->code = rc;
                snprintf(h->msg, sizeof h->msg, "%s", e->msg);
                w->ops->send(w, h, sizeof *h, leader, TAG_BAND);
                break;
            }
            w->ops->send(w, h, sizeof *h, leader, TAG_BAND);
            w->ops->send(w, (const char *)data + r0 * rb, (size_t)(n * rb), leader, TAG_DATA);
        }
        if (rc == MP_OK) ck_crash_point("during_rank_files", w->rank);
    }
    free(h);
    return rc;
}

/* A member's side: list, go, bands; then its boxes are the leader's. */
static mp_code member_run(ckpt_save *s, int leader, mp_err *e) {
    mp_comm *w = ck_save_world(s);
    ck_buf b = {0};
    mp_err le;
    mp_err_clear(&le);
    mp_code rc = ck_save_failed(s) ? MP_EINPUT : member_list(s, &b, &le);   /* a remembered error: the commit has it */
    if (ck_save_failed(s)) snprintf(le.msg, sizeof le.msg, "it failed before the save's files were written");
    else if (rc == MP_OK && ck_fail_point("group_list", w->rank))
        rc = mp_err_set(&le, MP_EIO, "fault ckpt_fail_at:group_list: rank %d fails before sending its boxes", w->rank);
    /* the leader then stops the group (no go) but reports nothing itself: the commit's agreement names
     * this rank with its own message */
    list_hdr lh = {rc, rc == MP_OK ? (int64_t)b.n : (int64_t)strlen(le.msg)};
    w->ops->send(w, &lh, sizeof lh, leader, TAG_LIST);
    w->ops->send(w, rc == MP_OK ? b.p : le.msg, (size_t)lh.bytes, leader, TAG_LIST);
    free(b.p);
    go_msg go;
    w->ops->recv(w, &go, sizeof go, leader, TAG_GO);
    if (rc == MP_OK && go.go) rc = member_send(s, leader, (size_t)go.fill_bytes, &le);
    ck_save_drop_boxes(s);
    if (rc != MP_OK && !ck_save_failed(s) && e) *e = le;
    return ck_save_failed(s) ? MP_OK : rc;   /* a remembered error reaches the commit anyway */
}

/* ------------------------------------------------------------------------------------ leader */

/* Receives one band header from member m; an error header marks it failed. */
static void recv_hdr(group *g, gmember *m, band_hdr *h) {
    g->w->ops->recv(g->w, h, sizeof *h, m->rank, TAG_BAND);
    h->msg[sizeof h->msg - 1] = '\0';
    if (h->code != MP_OK) m->failed = 1;
}

/* Is h a valid band of m (its box, rows inside it)? */
static int hdr_valid(const gmember *m, const band_hdr *h) {
    return h->box >= 0 && h->box < m->nb && h->r0 >= 0 && h->rows > 0 && h->r0 < m->b[h->box].shp[0] &&
           h->rows <= m->b[h->box].shp[0] - h->r0;
}

/* The band h announced has been received: m's stream moves past it. */
static void advance(gmember *m, const band_hdr *h) {
    m->next_box = (int)h->box;
    m->next_r0 = h->r0 + h->rows;
    if (m->next_r0 == m->b[h->box].shp[0]) { m->next_box++; m->next_r0 = 0; }
}

/* Receives and drops the bytes of band h (valid) of m. */
static void drop_band(group *g, gmember *m, const band_hdr *h) {
    const gbox *B = &m->b[h->box];
    size_t n = (size_t)(h->rows * ck_row_bytes(B->dt, B->ndim, B->shp));
    if (n > g->scap) {
        free(g->scratch);
        g->scratch = mp_xmalloc(n);
        g->scap = n;
    }
    g->w->ops->recv(g->w, g->scratch, n, m->rank, TAG_DATA);
    advance(m, h);
}

/* The fill callback of a member's box (ctx: its gbox): the next band of m's stream, straight into buf. */
static mp_code member_fill(void *ctx, const int64_t *offset, const int64_t *shape, void *buf, mp_err *e) {
    gbox *B = ctx;
    gmember *m = B->m;
    group *g = m->g;
    int64_t r0 = offset[0] - B->off[0], rows = shape[0];
    if (m->failed) return mp_err_set(e, MP_EIO, "rank %d, whose boxes go to this file, failed before", m->rank);
    band_hdr *h = mp_xmalloc(sizeof *h);
    recv_hdr(g, m, h);
    mp_code rc = MP_OK;
    if (h->code != MP_OK) {
        rc = mp_err_set(e, (mp_code)h->code, "rank %d, whose boxes go to this file, failed: %s", m->rank, h->msg);
    } else if (!hdr_valid(m, h) || h->box != B->idx || h->r0 != r0 || h->rows != rows) {
        /* out of step (a bug, not an input): a band of its own boxes is received and dropped, so that the
         * drain can follow the rest of its stream; a header outside them ends the listening */
        if (hdr_valid(m, h)) drop_band(g, m, h);
        else m->failed = 1;
        rc = mp_err_set(e, MP_EINTERNAL, "rank %d sent box %lld rows %lld+%lld where box %d rows %lld+%lld was due",
                        m->rank, (long long)h->box, (long long)h->r0, (long long)h->rows, B->idx, (long long)r0,
                        (long long)rows);
    } else {
        g->w->ops->recv(g->w, buf, (size_t)(rows * ck_row_bytes(B->dt, B->ndim, B->shp)), m->rank, TAG_DATA);
        advance(m, h);
        if (ck_fail_point("group_write", g->w->rank))
            rc = mp_err_set(e, MP_EIO, "fault ckpt_fail_at:group_write: rank %d fails writing the boxes of rank %d",
                            g->w->rank, m->rank);
    }
    free(h);
    return rc;
}

/* Parses member m's list (n bytes at p) into m->b and adds its boxes to s as fill boxes of this rank's
 * file. */
static mp_code add_member(ckpt_save *s, gmember *m, const char *p, size_t n, mp_err *e) {
    group *g = m->g;
    int64_t nb = -1;
    size_t at = 0;
    if (n >= sizeof nb) { memcpy(&nb, p, sizeof nb); at = sizeof nb; }
    if (nb < 0 || nb > (int64_t)(n / 8)) return mp_err_set(e, MP_EINTERNAL, "malformed box list from rank %d", m->rank);
    m->b = mp_xcalloc(sizeof *m->b * (size_t)(nb + 1));
    m->nb = (int)nb;
    char scratch[CK_BOXREC_SCRATCH];
    for (int i = 0; i < nb; i++) {
        ck_boxrec r;
        if (!ck_boxrec_recv(CK_BR_GROUP, p, n, &at, &r, scratch) || r.ndim < 1 || r.ndim > CKPT_MAX_DIMS)
            return mp_err_set(e, MP_EINTERNAL, "malformed box list from rank %d", m->rank);
        gbox *B = &m->b[i];
        B->m = m;
        B->idx = i;
        B->dt = (mp_dtype)r.dtype;
        B->ndim = (int)r.ndim;
        memcpy(B->off, r.offset, sizeof B->off);
        memcpy(B->shp, r.shape, sizeof B->shp);
        MP_TRY(ckpt_save_add_fill(s, g->w->rank, r.tensor, B->dt, B->ndim, r.gshape, B->off, B->shp, member_fill, B, e));
    }
    return MP_OK;
}

/* The leader's side of steps 1 and 2: members' lists in, go out. Returns whether data will move. */
static int leader_collect(ckpt_save *s, group *g) {
    int member_failed = 0;
    for (int i = 0; i < ck_save_nboxes(s) && !ck_save_failed(s); i++) {
        ck_boxrec B;
        const void *data;
        ck_save_box_at(s, i, &B, &data);
        if (!data || B.rank != g->w->rank) {
            mp_err e;
            mp_err_set(&e, MP_EINPUT, "tensor %s: files of several ranks (ranks_per_file) take only ckpt_save_add "
                       "boxes of the process's own rank", B.tensor);
            ckpt_save_fail(s, e.code, &e);
        }
    }
    for (int k = 0; k < g->nm; k++) {
        gmember *m = &g->m[k];
        list_hdr lh;
        g->w->ops->recv(g->w, &lh, sizeof lh, m->rank, TAG_LIST);
        char *p = mp_xmalloc((size_t)lh.bytes + 1);
        g->w->ops->recv(g->w, p, (size_t)lh.bytes, m->rank, TAG_LIST);
        p[lh.bytes] = '\0';
        mp_err e;
        if (lh.code != MP_OK) {
            member_failed = 1;   /* its own error reaches the commit's agreement from it, with its rank */
            mp_info("ckpt: rank %d, whose boxes go to rank_%05d.h5, failed before sending: %s", m->rank, g->w->rank, p);
        } else if (!ck_save_failed(s) && !member_failed && add_member(s, m, p, (size_t)lh.bytes, &e) != MP_OK) {
            ckpt_save_fail(s, e.code, &e);
        }
        free(p);
    }
    go_msg go = {!ck_save_failed(s) && !member_failed, (int64_t)ck_save_opts_of(s)->fill_bytes};
    for (int k = 0; k < g->nm; k++) g->w->ops->send(g->w, &go, sizeof go, g->m[k].rank, TAG_GO);
    return (int)go.go;
}

/* Step 4: receives whatever each member still sends, up to its last band or an error header. */
static void leader_drain(group *g) {
    band_hdr *h = mp_xmalloc(sizeof *h);
    for (int k = 0; k < g->nm; k++) {
        gmember *m = &g->m[k];
        while (!m->failed && m->next_box < m->nb) {
            recv_hdr(g, m, h);
            if (m->failed) break;
            if (!hdr_valid(m, h)) {   /* cannot happen between two copies of this file: stop listening */
                mp_warn("ckpt: rank %d sent a malformed band header; not waiting for the rest", m->rank);
                break;
            }
            drop_band(g, m, h);
        }
    }
    free(h);
}

static void group_free(group *g) {
    for (int k = 0; k < g->nm; k++)
        free(g->m[k].b);
    free(g->m);
    free(g->scratch);
}

mp_code ck_group_write(ckpt_save *s, mp_code (*write_files)(ckpt_save *s, mp_err *e), mp_err *e) {
    mp_comm *w = ck_save_world(s);
    if (!w->ops->send || !w->ops->recv)   /* every rank has the same kind of world: all take this path */
        return mp_err_set(e, MP_EINPUT, "files of several ranks (ranks_per_file %d) need a world communicator with "
                          "point-to-point operations (MPI); \"%s\" has none", ck_save_opts_of(s)->ranks_per_file,
                          w->ops->name);
    int gsize = ck_save_opts_of(s)->ranks_per_file;
    int *leader = leaders(w, gsize == CKPT_FILES_NODE ? 0 : gsize);
    group g = {.w = w, .leader = leader[w->rank]};
    mp_code rc = MP_OK;
    if (g.leader != w->rank) {
        free(leader);
        return member_run(s, g.leader, e);
    }
    for (int r = 0; r < w->size; r++) g.nm += r != w->rank && leader[r] == w->rank;
    g.m = mp_xcalloc(sizeof *g.m * (size_t)(g.nm + 1));
    for (int r = 0, k = 0; r < w->size; r++)
        if (r != w->rank && leader[r] == w->rank) g.m[k++] = (gmember){.g = &g, .rank = r};
    free(leader);
    int go = leader_collect(s, &g);
    if (go) rc = write_files(s, e);
    if (go) leader_drain(&g);
    group_free(&g);
    return rc;
}
