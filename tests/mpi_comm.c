/*
 * tests/mpi_comm.c — multi-rank test of the MPI communicator (core/comm_mpi.h) and the tp x dp mesh
 * (core/mesh.h). Run under mpiexec at several world sizes (tests/mpi_tests.cmake: -np 1, 2, 3, 4).
 *
 * Every rank runs the same sequence of collectives and checks. Expected values are computed locally
 * from the formula each rank used to fill its input (integer-valued floats, so sums are exact whatever
 * the order); the byte counters are compared with the exact per-rank formulas of core/comm.h, written
 * out here independently, and their sum over ranks with the ring totals. Each check is agreed over the
 * world with a raw MPI_Allreduce (never through the code under test); rank 0 prints one line per check,
 * a failing rank prints the detail on stderr. Every rank exits 1 if any check failed anywhere, else 0.
 * The staged communicator (core/comm_staged.h) is checked against the MPI one it stages to: every op on
 * the same non-integer inputs, bitwise the same results and the same counters (test_staged).
 */
#include <mpi.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/comm.h"
#include "core/backend.h"
#include "core/comm_mpi.h"
#include "core/comm_staged.h"
#include "core/mesh.h"

static int g_rank, g_np, g_failed;

/* Collective: every rank calls it with its local verdict; rank 0 prints the agreed result. */
static void check(const char *name, int ok, const char *fmt, ...) {
    if (!ok) {
        char detail[512] = "";
        if (fmt) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(detail, sizeof detail, fmt, ap);
            va_end(ap);
        }
        fprintf(stderr, "  rank %d/%d: %s: %s\n", g_rank, g_np, name, detail);
    }
    int bad = !ok, nbad = 0;
    MPI_Allreduce(&bad, &nbad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0) {
        if (nbad) printf("FAIL np=%d %s (on %d rank%s)\n", g_np, name, nbad, nbad == 1 ? "" : "s");
        else printf("ok   np=%d %s\n", g_np, name);
        fflush(stdout);
    }
    if (nbad) g_failed++;
}

static int64_t sum_over_world(int64_t v) {
    int64_t s = 0;
    MPI_Allreduce(&v, &s, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return s;
}

/* Part r's size in a balanced split of n over p (first n % p parts one larger), written out here
 * rather than taken from mp_split. */
static int64_t part(int64_t n, int p, int r) { return n / p + (r < n % p ? 1 : 0); }

/* Only counters of op may be non-zero, with exactly (bytes, calls). */
static void check_counters(const char *name, const mp_comm *c, int op, int64_t bytes, int64_t calls) {
    int ok = 1;
    char d[256] = "";
    for (int k = 0; k < MP_COMM_NOPS; k++) {
        int64_t eb = k == op ? bytes : 0, ec = k == op ? calls : 0;
        if (c->bytes_sent[k] != eb || c->calls[k] != ec) {
            ok = 0;
            snprintf(d, sizeof d, "op %d: bytes %lld calls %lld, expected bytes %lld calls %lld", k,
                     (long long)c->bytes_sent[k], (long long)c->calls[k], (long long)eb, (long long)ec);
        }
    }
    if (mp_comm_total_bytes(c) != bytes) ok = 0;
    check(name, ok, "%s", d);
}

/* Uneven counts with a zero: r -> 2r+3, except rank 1 which contributes nothing. */
static int64_t ucount(int r) { return r == 1 ? 0 : 2 * r + 3; }

static void test_all_reduce(mp_comm *c) {
    const int p = g_np, me = g_rank;
    const int64_t n = 1003;   /* not a multiple of 2, 3 or 4: uneven mp_split blocks */
    float *x = malloc(n * sizeof *x);
    for (int64_t i = 0; i < n; i++) x[i] = (float)((me + 1) * (i % 17) - (i % 5) * me);
    mp_comm_reset_counters(c);
    c->ops->all_reduce(c, x, n, MP_F32, 0);
    int ok = 1;
    int64_t bad_i = -1;
    for (int64_t i = 0; i < n; i++) {
        double e = 0;
        for (int r = 0; r < p; r++) e += (double)((r + 1) * (i % 17) - (i % 5) * r);
        if (x[i] != (float)e) { ok = 0; bad_i = i; }
    }
    check("all_reduce sum values", ok, "x[%lld] = %g", (long long)bad_i, bad_i >= 0 ? x[bad_i] : 0.0);
    int64_t b = part(n, p, me);
    int64_t want = p == 1 ? 0 : 4 * ((n - b) + (int64_t)(p - 1) * b);
    check_counters("all_reduce sum bytes = 4*((n-b_r)+(p-1)*b_r)", c, MP_COMM_ALLREDUCE, want, p == 1 ? 0 : 1);
    int64_t tot = sum_over_world(c->bytes_sent[MP_COMM_ALLREDUCE]);
    check("all_reduce group bytes = 2*(p-1)*4n", tot == 2 * (int64_t)(p - 1) * 4 * n, "total %lld", (long long)tot);

    /* max: the winner of element i is rank (i % p), with a negative baseline elsewhere */
    for (int64_t i = 0; i < n; i++) x[i] = (i % p == me) ? (float)(i + 0.5) : (float)(-1000 - me - i);
    mp_comm_reset_counters(c);
    c->ops->all_reduce(c, x, n, MP_F32, 1);
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
        float e = -3.0e38f;
        for (int r = 0; r < p; r++) {
            float v = (i % p == r) ? (float)(i + 0.5) : (float)(-1000 - r - i);
            if (v > e) e = v;
        }
        if (x[i] != e) { ok = 0; bad_i = i; }
    }
    check("all_reduce max values", ok, "x[%lld] = %g", (long long)bad_i, bad_i >= 0 ? x[bad_i] : 0.0);
    check_counters("all_reduce max bytes", c, MP_COMM_ALLREDUCE, want, p == 1 ? 0 : 1);

    /* random values: every rank must hold bitwise the same result, and the same call again the same bits */
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    float *y = malloc(n * sizeof *y), *y2 = malloc(n * sizeof *y2), *y0 = malloc(n * sizeof *y0);
    double maxerr = 0;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        y[i] = (float)((double)(s >> 11) / 9007199254740992.0 - 0.5);
    }
    memcpy(y2, y, n * sizeof *y);
    double *exact = malloc(n * sizeof *exact);
    for (int64_t i = 0; i < n; i++) exact[i] = y[i];
    MPI_Allreduce(MPI_IN_PLACE, exact, (int)n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    c->ops->all_reduce(c, y, n, MP_F32, 0);
    c->ops->all_reduce(c, y2, n, MP_F32, 0);
    memcpy(y0, y, n * sizeof *y);
    MPI_Bcast(y0, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(y[i] - exact[i]);
        if (e > maxerr) maxerr = e;
    }
    check("all_reduce random sum close to the f64 sum", maxerr < 1e-5, "max abs err %g", maxerr);
    check("all_reduce bitwise identical on every rank", memcmp(y, y0, n * sizeof *y) == 0, "differs from rank 0");
    check("all_reduce bitwise repeatable", memcmp(y, y2, n * sizeof *y) == 0, "second call differs");

    /* f64: integer values near 1e12, exact in double but not in float */
    double *d = malloc(n * sizeof *d);
    for (int64_t i = 0; i < n; i++) d[i] = (double)(me + 1) * 1e12 + (double)i * (me + 3);
    mp_comm_reset_counters(c);
    c->ops->all_reduce_f64(c, d, n);
    ok = 1;
    for (int64_t i = 0; i < n; i++) {
        double e = 0;
        for (int r = 0; r < p; r++) e += (double)(r + 1) * 1e12 + (double)i * (r + 3);
        if (d[i] != e) { ok = 0; bad_i = i; }
    }
    check("all_reduce_f64 values", ok, "d[%lld] = %.17g", (long long)bad_i, bad_i >= 0 ? d[bad_i] : 0.0);
    check_counters("all_reduce_f64 bytes = 8*((n-b_r)+(p-1)*b_r)", c, MP_COMM_ALLREDUCE,
                   p == 1 ? 0 : 8 * ((n - b) + (int64_t)(p - 1) * b), p == 1 ? 0 : 1);
    free(x); free(y); free(y2); free(y0); free(exact); free(d);
}

static void test_all_gatherv(mp_comm *c) {
    const int p = g_np, me = g_rank;
    int64_t *counts = malloc(p * sizeof *counts), total = 0, mydispl = 0;
    for (int r = 0; r < p; r++) {
        counts[r] = ucount(r);
        if (r < me) mydispl += counts[r];
        total += counts[r];
    }
    float *in = malloc((counts[me] + 1) * sizeof *in), *out = malloc(total * sizeof *out);
    for (int64_t j = 0; j < counts[me]; j++) in[j] = (float)(1000 * me + j);
    for (int64_t i = 0; i < total; i++) out[i] = -1;
    mp_comm_reset_counters(c);
    c->ops->all_gatherv(c, out, in, counts, MP_F32);
    int ok = 1;
    int64_t at = 0, bad = -1;
    for (int r = 0; r < p; r++)
        for (int64_t j = 0; j < counts[r]; j++, at++)
            if (out[at] != (float)(1000 * r + j)) { ok = 0; bad = at; }
    check("all_gatherv uneven values", ok, "out[%lld] = %g", (long long)bad, bad >= 0 ? out[bad] : 0.0);
    check_counters("all_gatherv bytes = 4*(p-1)*c_r", c, MP_COMM_ALLGATHER, 4 * (int64_t)(p - 1) * counts[me],
                   p == 1 ? 0 : 1);
    int64_t tot = sum_over_world(c->bytes_sent[MP_COMM_ALLGATHER]);
    check("all_gatherv group bytes = 4*(p-1)*T", tot == 4 * (int64_t)(p - 1) * total, "total %lld", (long long)tot);

    /* in place: this rank's block already sits at its displacement in out */
    for (int64_t i = 0; i < total; i++) out[i] = -1;
    for (int64_t j = 0; j < counts[me]; j++) out[mydispl + j] = (float)(1000 * me + j);
    c->ops->all_gatherv(c, out, out + mydispl, counts, MP_F32);
    ok = 1, at = 0;
    for (int r = 0; r < p; r++)
        for (int64_t j = 0; j < counts[r]; j++, at++)
            if (out[at] != (float)(1000 * r + j)) { ok = 0; bad = at; }
    check("all_gatherv in place", ok, "out[%lld] = %g", (long long)bad, bad >= 0 ? out[bad] : 0.0);
    free(counts); free(in); free(out);
}

static void test_reduce_scatterv(mp_comm *c) {
    const int p = g_np, me = g_rank;
    int64_t *counts = calloc((size_t)p + 1, sizeof *counts), total = 0, mydispl = 0;
    for (int r = 0; r < p; r++) {
        counts[r] = ucount(p - 1 - r);   /* a different uneven pattern than all_gatherv's */
        if (r < me) mydispl += counts[r];
        total += counts[r];
    }
    float *in = malloc(total * sizeof *in), *out = malloc((counts[me] + 1) * sizeof *out);
    for (int64_t i = 0; i < total; i++) in[i] = (float)((me + 1) * i + me);
    for (int64_t j = 0; j <= counts[me]; j++) out[j] = -7;
    mp_comm_reset_counters(c);
    c->ops->reduce_scatterv(c, out, in, counts, MP_F32);
    int ok = 1;
    int64_t bad = -1;
    for (int64_t j = 0; j < counts[me]; j++) {
        double e = 0;
        for (int r = 0; r < p; r++) e += (double)((r + 1) * (mydispl + j) + r);
        if (out[j] != (float)e) { ok = 0; bad = j; }
    }
    if (out[counts[me]] != -7) ok = 0;   /* nothing written past this rank's block */
    check("reduce_scatterv uneven values", ok, "out[%lld] = %g", (long long)bad, bad >= 0 ? out[bad] : 0.0);
    check_counters("reduce_scatterv bytes = 4*(T-c_r)", c, MP_COMM_REDUCE_SCATTER, 4 * (total - counts[me]),
                   p == 1 ? 0 : 1);
    int64_t tot = sum_over_world(c->bytes_sent[MP_COMM_REDUCE_SCATTER]);
    check("reduce_scatterv group bytes = 4*(p-1)*T", tot == 4 * (int64_t)(p - 1) * total, "total %lld",
          (long long)tot);
    free(counts); free(in); free(out);
}

static void bcast_case(mp_comm *c, const char *name, size_t bytes, int root) {
    unsigned char *buf = malloc(bytes);
    for (size_t i = 0; i < bytes; i++) buf[i] = g_rank == root ? (unsigned char)((i * 31 + 7) & 255) : 0;
    mp_comm_reset_counters(c);
    c->ops->broadcast(c, buf, bytes, root);
    int ok = 1;
    size_t bad = 0;
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != (unsigned char)((i * 31 + 7) & 255)) { ok = 0; bad = i; }
    check(name, ok, "byte %zu = %u", bad, buf[bad]);
    char n2[128];
    snprintf(n2, sizeof n2, "%s: bytes = B on root %d, 0 elsewhere", name, root);
    check_counters(n2, c, MP_COMM_BCAST, (g_rank == root && g_np > 1) ? (int64_t)bytes : 0, g_np > 1 ? 1 : 0);
    free(buf);
}

static void test_broadcast(mp_comm *c) {
    bcast_case(c, "broadcast from the last rank", 10007, g_np - 1);
    mp_comm_mpi_set_bcast_chunk(1000);   /* 11 chunks, the last one short */
    bcast_case(c, "broadcast chunked (1000 B chunks)", 10007, g_np > 1 ? 1 : 0);
    mp_comm_mpi_set_bcast_chunk(2147483647);
    c->ops->barrier(c);
    check_counters("barrier counts nothing", c, MP_COMM_BCAST, (g_rank == (g_np > 1 ? 1 : 0) && g_np > 1) ? 10007 : 0,
                   g_np > 1 ? 1 : 0);
}

/* gatherv of ucount(r) bytes per rank (a zero among them) to root; then a fixed gather of 9 bytes. Root
 * gets every block in rank order; other ranks' out is never written (NULL is passed); bytes counted are
 * the sender's n on every rank but root. */
static void gather_case(mp_comm *c, const char *name, int root) {
    const int p = g_np, me = g_rank;
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)p);
    int64_t total = 0;
    for (int r = 0; r < p; r++) { counts[r] = ucount(r); total += counts[r]; }
    unsigned char *in = malloc((size_t)ucount(me) + 1), *out = me == root ? malloc((size_t)total + 1) : NULL;
    for (int64_t i = 0; i < ucount(me); i++) in[i] = (unsigned char)(me * 41 + i * 7 + 1);
    mp_comm_reset_counters(c);
    c->ops->gatherv(c, out, in, ucount(me), me == root ? counts : NULL, root);
    int ok = 1;
    int64_t at = 0, bad = -1;
    for (int r = 0; me == root && r < p; r++)
        for (int64_t i = 0; i < counts[r]; i++, at++)
            if (out[at] != (unsigned char)(r * 41 + i * 7 + 1) && bad < 0) { ok = 0; bad = at; }
    check(name, ok, "byte %lld", (long long)bad);
    char n2[160];
    snprintf(n2, sizeof n2, "%s: bytes = n on every rank but root %d", name, root);
    check_counters(n2, c, MP_COMM_GATHER, (me != root && p > 1) ? ucount(me) : 0, p > 1 ? 1 : 0);
    unsigned char nine[9], *all = me == root ? malloc(9 * (size_t)p) : NULL;
    for (int i = 0; i < 9; i++) nine[i] = (unsigned char)(me * 9 + i);
    c->ops->gather(c, all, nine, sizeof nine, root);
    ok = 1;
    for (int i = 0; me == root && i < 9 * p; i++) ok = ok && all[i] == (unsigned char)i;
    snprintf(n2, sizeof n2, "%s: fixed gather of 9 bytes", name);
    check(n2, ok, "rank order");
    free(all); free(counts); free(in); free(out);
}

/* scatterv of ucount(r) bytes to each rank r (a zero among them) from root: every rank gets exactly its
 * block, bytes after it untouched; other ranks pass in and counts NULL; the root counts the bytes of the
 * others' blocks, the others nothing. */
static void scatter_case(mp_comm *c, const char *name, int root) {
    const int p = g_np, me = g_rank;
    int64_t *counts = malloc(sizeof(int64_t) * (size_t)p), total = 0, others = 0;
    for (int r = 0; r < p; r++) { counts[r] = ucount(r); total += counts[r]; others += r == root ? 0 : counts[r]; }
    unsigned char *in = me == root ? malloc((size_t)total + 1) : NULL, *out = malloc((size_t)ucount(me) + 1);
    for (int64_t r = 0, at = 0; in && r < p; r++)
        for (int64_t i = 0; i < counts[r]; i++, at++) in[at] = (unsigned char)(r * 29 + i * 5 + 3);
    out[ucount(me)] = 0xEE;
    mp_comm_reset_counters(c);
    c->ops->scatterv(c, out, ucount(me), in, me == root ? counts : NULL, root);
    int64_t bad = -1;
    for (int64_t i = 0; i < ucount(me); i++)
        if (out[i] != (unsigned char)(me * 29 + i * 5 + 3) && bad < 0) bad = i;
    check(name, bad < 0 && out[ucount(me)] == 0xEE, "byte %lld (or the byte after the block)", (long long)bad);
    char n2[160];
    snprintf(n2, sizeof n2, "%s: bytes = the others' blocks on root %d, 0 elsewhere", name, root);
    check_counters(n2, c, MP_COMM_SCATTER, (me == root && p > 1) ? others : 0, p > 1 ? 1 : 0);
    free(counts); free(in); free(out);
}

static void test_gather(mp_comm *c) {
    gather_case(c, "gatherv to rank 0", 0);
    gather_case(c, "gatherv to the last rank", g_np - 1);
    scatter_case(c, "scatterv from rank 0", 0);
    scatter_case(c, "scatterv from the last rank", g_np - 1);
    mp_comm_mpi_set_max_count(4);   /* pieces of 4 bytes: the path of lists over INT_MAX bytes */
    gather_case(c, "gatherv/gather in 4-byte pieces", g_np > 1 ? 1 : 0);
    scatter_case(c, "scatterv in 4-byte pieces", g_np > 1 ? 1 : 0);
    mp_comm_mpi_set_max_count(2147483647);
}

/* send / recv: every rank r > 0 sends rank 0 a message of ucount(r) + 1 bytes (tag 5), then rank 0 sends
 * each back its bytes reversed (tag 6) and a zero-byte message (tag 7): exact bytes, the byte after the
 * buffer untouched, and the counters (the sender its bytes, the receiver none; a call each). A group of one
 * has none (NULL). */
static void test_p2p(mp_comm *c) {
    const int p = g_np, me = g_rank;
    if (p == 1) { check("p2p: NULL on a group of one", !c->ops->send && !c->ops->recv, NULL); return; }
    mp_comm_reset_counters(c);
    int64_t sent = 0, calls = 0;
    int back_ok = 1, got_ok = 1;   /* checked once after the loop: check() is collective */
    for (int r = 1; r < p; r++) {
        size_t n = (size_t)ucount(r) + 1;
        unsigned char *buf = malloc(n + 1);
        if (me == r) {
            for (size_t i = 0; i < n; i++) buf[i] = (unsigned char)(r * 7 + i);
            c->ops->send(c, buf, n, 0, 5);
            c->ops->recv(c, buf, n, 0, 6);
            for (size_t i = 0; i < n; i++) back_ok &= buf[i] == (unsigned char)(r * 7 + (n - 1 - i));
            c->ops->recv(c, NULL, 0, 0, 7);
            sent += (int64_t)n;
            calls += 3;
        } else if (me == 0) {
            buf[n] = 0xEE;
            c->ops->recv(c, buf, n, r, 5);
            got_ok &= buf[n] == 0xEE;
            for (size_t i = 0; i < n; i++) got_ok &= buf[i] == (unsigned char)(r * 7 + i);
            for (size_t i = 0; i < n / 2; i++) { unsigned char t = buf[i]; buf[i] = buf[n - 1 - i]; buf[n - 1 - i] = t; }
            c->ops->send(c, buf, n, r, 6);
            c->ops->send(c, NULL, 0, r, 7);
            sent += (int64_t)n;
            calls += 3;
        }
        free(buf);
    }
    check("p2p: rank 0 got every rank's bytes, the byte after untouched", got_ok, "on rank %d", me);
    check("p2p: the reversed bytes came back", back_ok, "on rank %d", me);
    check_counters("p2p: the sender counts its bytes, a call per message", c, MP_COMM_P2P, sent, calls);
}

/* An MPI communicator of one rank behaves as the self comm: identity, nothing counted. */
static void test_size_one(void) {
    MPI_Comm alone;
    MPI_Comm_split(MPI_COMM_WORLD, g_rank, 0, &alone);
    mp_comm *c = mp_comm_mpi_create(alone);
    MPI_Comm_free(&alone);
    float x[3] = {1, 2, 3}, out[3] = {0};
    int64_t cnt[1] = {3};
    c->ops->all_reduce(c, x, 3, MP_F32, 0);
    c->ops->all_gatherv(c, out, x, cnt, MP_F32);
    int ok = c->size == 1 && c->rank == 0 && x[0] == 1 && x[1] == 2 && x[2] == 3 && memcmp(out, x, sizeof x) == 0;
    c->ops->reduce_scatterv(c, out, x, cnt, MP_F32);
    ok = ok && memcmp(out, x, sizeof x) == 0;
    memset(out, 0, sizeof out);
    c->ops->gather(c, out, x, sizeof x, 0);
    ok = ok && memcmp(out, x, sizeof x) == 0;
    memset(out, 0, sizeof out);
    c->ops->gatherv(c, out, x, (int64_t)sizeof x, NULL, 0);
    ok = ok && memcmp(out, x, sizeof x) == 0;
    memset(out, 0, sizeof out);
    c->ops->scatterv(c, out, (int64_t)sizeof x, x, NULL, 0);
    ok = ok && memcmp(out, x, sizeof x) == 0;
    check("mpi comm of size 1 is the identity", ok, "size %d rank %d", c->size, c->rank);
    check_counters("mpi comm of size 1 counts nothing", c, MP_COMM_ALLREDUCE, 0, 0);
    c->ops->destroy(c);
}

static void test_mesh_ok(int tp) {
    const int p = g_np, me = g_rank, dp = p / tp;
    char name[160];
    mp_mesh m;
    mp_err err;
    mp_err_clear(&err);
    mp_code rc = mp_mesh_init_mpi(&m, tp, 0, &err);
    snprintf(name, sizeof name, "mesh tp=%d dp=0->%d: init", tp, dp);
    check(name, rc == MP_OK, "rc %d: %s", rc, err.msg);
    if (rc != MP_OK) return;   /* same on every rank: the size check does not depend on the rank */
    int ok = m.world == p && m.rank == me && m.tp == tp && m.dp == dp && m.tp_rank == me % tp &&
             m.dp_rank == me / tp && m.dp_rank * tp + m.tp_rank == me && m.uses_mpi == 1 &&
             m.world_comm->size == p && m.world_comm->rank == me && m.tp_comm->size == tp &&
             m.tp_comm->rank == me % tp && m.dp_comm->size == dp && m.dp_comm->rank == me / tp;
    snprintf(name, sizeof name, "mesh tp=%d dp=%d: ranks and group sizes", tp, dp);
    check(name, ok, "tp_rank %d dp_rank %d tp_comm %d/%d dp_comm %d/%d", m.tp_rank, m.dp_rank, m.tp_comm->rank,
          m.tp_comm->size, m.dp_comm->rank, m.dp_comm->size);

    /* group membership: sum of world ranks over each group */
    float v = (float)me;
    m.tp_comm->ops->all_reduce(m.tp_comm, &v, 1, MP_F32, 0);
    double etp = 0, edp = 0;
    for (int t = 0; t < tp; t++) etp += (me / tp) * tp + t;
    for (int d = 0; d < dp; d++) edp += d * tp + me % tp;
    float w = (float)me;
    m.dp_comm->ops->all_reduce(m.dp_comm, &w, 1, MP_F32, 0);
    snprintf(name, sizeof name, "mesh tp=%d dp=%d: sum of world ranks over tp and dp groups", tp, dp);
    check(name, v == (float)etp && w == (float)edp, "tp sum %g (want %g), dp sum %g (want %g)", v, etp, w, edp);

    /* group order: gathering world ranks lists the group in tp_rank / dp_rank order */
    float *g = malloc((size_t)p * sizeof *g), mine = (float)me;
    int64_t *ones = malloc((size_t)p * sizeof *ones);
    for (int r = 0; r < p; r++) ones[r] = 1;
    m.tp_comm->ops->all_gatherv(m.tp_comm, g, &mine, ones, MP_F32);
    ok = 1;
    for (int t = 0; t < tp; t++) ok &= g[t] == (float)((me / tp) * tp + t);
    m.dp_comm->ops->all_gatherv(m.dp_comm, g, &mine, ones, MP_F32);
    for (int d = 0; d < dp; d++) ok &= g[d] == (float)(d * tp + me % tp);
    snprintf(name, sizeof name, "mesh tp=%d dp=%d: group order by tp_rank / dp_rank", tp, dp);
    check(name, ok, "%s", "gathered world ranks out of order");

    /* each communicator counts its own traffic: one 1-element all_reduce and one 1-per-rank gather */
    int64_t tpb = tp == 1 ? 0 : 4 * ((1 - part(1, tp, me % tp)) + (int64_t)(tp - 1) * part(1, tp, me % tp));
    int64_t dpb = dp == 1 ? 0 : 4 * ((1 - part(1, dp, me / tp)) + (int64_t)(dp - 1) * part(1, dp, me / tp));
    ok = m.tp_comm->bytes_sent[MP_COMM_ALLREDUCE] == tpb && m.dp_comm->bytes_sent[MP_COMM_ALLREDUCE] == dpb &&
         m.tp_comm->bytes_sent[MP_COMM_ALLGATHER] == 4 * (tp - 1) &&
         m.dp_comm->bytes_sent[MP_COMM_ALLGATHER] == 4 * (dp - 1) && mp_comm_total_bytes(m.world_comm) == 0 &&
         m.tp_comm->calls[MP_COMM_ALLREDUCE] == (tp > 1) && m.dp_comm->calls[MP_COMM_ALLGATHER] == (dp > 1);
    snprintf(name, sizeof name, "mesh tp=%d dp=%d: per-communicator counters", tp, dp);
    check(name, ok, "tp allreduce %lld (want %lld), dp allreduce %lld (want %lld)",
          (long long)m.tp_comm->bytes_sent[MP_COMM_ALLREDUCE], (long long)tpb,
          (long long)m.dp_comm->bytes_sent[MP_COMM_ALLREDUCE], (long long)dpb);
    free(g); free(ones);
    mp_mesh_destroy(&m);
    mp_mesh_destroy(&m);   /* twice is safe */
    snprintf(name, sizeof name, "mesh tp=%d dp=%d: destroy clears", tp, dp);
    check(name, !m.world_comm && !m.tp_comm && !m.dp_comm, "%s", "pointers left set");
}

/* A wrong mesh must be reported as MP_EINPUT whose message contains want (not abort, not hang). */
static void test_mesh_bad(int tp, int dp, const char *want) {
    char name[200];
    mp_mesh m;
    mp_err err;
    mp_err_clear(&err);
    mp_code rc = mp_mesh_init_mpi(&m, tp, dp, &err);
    snprintf(name, sizeof name, "mesh tp=%d dp=%d rejected: \"%s\"", tp, dp, want);
    check(name, rc == MP_EINPUT && err.code == MP_EINPUT && strstr(err.msg, want) && !m.world_comm,
          "rc %d msg \"%s\"", rc, err.msg);
}

/* Internal test hook of core/comm_mpi.c: the largest element count one MPI call is given. */

/* Rank r's input element i of the ring cases: a float that needs rounding, so the summation order shows. */
static float ring_value(int r, int64_t i) { return (float)(sin((double)(i * 7 + r * 131 + 1)) * (1.0 + r * 0.37)); }

/* The sum of element i over the ranks in the ring's order (core/comm_mpi.h): block b's elements start at
 * rank b+1 and end at rank b, each step adding the next rank's value to the running fp32 sum. */
static float ring_sum(int p, int b, int64_t i) {
    float s = ring_value((b + 1) % p, i);
    for (int k = 2; k <= p; k++) s = ring_value((b + k) % p, i) + s;
    return s;
}

/* The sums of more than a piece run on the communicator's own ring (no Open MPI temporaries of the
 * message's size): a reduce_scatterv of uneven blocks of ~1.5 pieces each, and an all_reduce of 2.5
 * pieces, give every element the ring-order sum bitwise (so Open MPI's ring order is kept), the same
 * on every rank; and the communicator's scratch is the two pieces it plans (none for a 2-rank
 * reduce_scatterv), freed at destroy. */
static void test_ring(void) {
    const int p = g_np, me = g_rank;
    mp_comm *c = mp_comm_mpi_create(MPI_COMM_WORLD);   /* a fresh one: no scratch yet */
    int64_t comm0 = mp_mem_current(MP_MEM_COMM);
    const int64_t piece = (int64_t)(MP_COMM_MPI_PIECE_BYTES / sizeof(float));
    int64_t *counts = calloc((size_t)p, sizeof *counts), total = 0, mydispl = 0;
    for (int r = 0; r < p; r++) {
        counts[r] = piece + piece / 2 + 13 * r;
        if (r < me) mydispl += counts[r];
        total += counts[r];
    }
    float *in = malloc(total * sizeof *in), *out = malloc(counts[me] * sizeof *out);
    for (int64_t i = 0; i < total; i++) in[i] = ring_value(me, i);
    c->ops->reduce_scatterv(c, out, in, counts, MP_F32);
    int ok = 1;
    int64_t bad = -1;
    for (int64_t j = 0; j < counts[me] && p > 1; j++)
        if (out[j] != ring_sum(p, me, mydispl + j)) { ok = 0; bad = j; }
    check("ring reduce_scatterv: ring-order sums, bitwise", ok, "out[%lld] = %.9g", (long long)bad,
          bad >= 0 ? out[bad] : 0.0);
    int64_t grown = mp_mem_current(MP_MEM_COMM) - comm0;
    check("ring reduce_scatterv scratch: none on 2 ranks, else two pieces",
          grown == (p > 2 ? (int64_t)MP_COMM_MPI_SCRATCH_BYTES : 0), "%lld bytes", (long long)grown);
    const int64_t n = 2 * piece + piece / 2 + 5;
    float *x = malloc(n * sizeof *x), *x0 = malloc(n * sizeof *x0);
    for (int64_t i = 0; i < n; i++) x[i] = ring_value(me, i);
    c->ops->all_reduce(c, x, n, MP_F32, 0);
    memcpy(x0, x, n * sizeof *x);
    MPI_Bcast(x0, (int)n, MPI_FLOAT, 0, MPI_COMM_WORLD);
    ok = memcmp(x, x0, n * sizeof *x) == 0;
    for (int64_t i = 0; i < n && ok && p > 1; i++) {
        int64_t start, cnt;
        int b = 0;
        for (; b < p; b++) {   /* the block of element i: its owner sums it in ring order */
            mp_split(n, p, b, &start, &cnt);
            if (i < start + cnt) break;
        }
        if (x[i] != ring_sum(p, b, i)) { ok = 0; bad = i; }
    }
    check("ring all_reduce: ring-order sums, bitwise the same on every rank", ok, "x[%lld]", (long long)bad);
    grown = mp_mem_current(MP_MEM_COMM) - comm0;
    check("ring all_reduce scratch: two pieces", grown == (p > 1 ? (int64_t)MP_COMM_MPI_SCRATCH_BYTES : 0),
          "%lld bytes", (long long)grown);
    c->ops->destroy(c);
    free(counts); free(in); free(out); free(x); free(x0);
}

static void test_bf16(mp_comm *c);

/* Counts above the MPI call limit are split into several calls (the path real counts above INT_MAX
 * take): with the limit lowered to 7, every collective on vectors longer than that gives the same
 * result as one call (the sums of more than a piece take the ring of core/comm_mpi.c, in pieces of 7). */
static void test_split(mp_comm *c) {
    const int p = g_np, me = g_rank;
    mp_comm_mpi_set_max_count(7);
    const int64_t n = 103;   /* 14 pieces, the last one short */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    double *d = malloc(n * sizeof *d);
    for (int64_t i = 0; i < n; i++) {
        x[i] = (float)(me + 1) * (float)i;
        y[i] = (float)((i * 13 + me * 7) % 29);
        d[i] = 0.5 * (me + 1) + (double)i;
    }
    mp_comm_reset_counters(c);
    c->ops->all_reduce(c, x, n, MP_F32, 0);
    c->ops->all_reduce(c, y, n, MP_F32, 1);
    c->ops->all_reduce_f64(c, d, n);
    int ok = 1;
    int64_t bad = -1;
    const double ranks = (double)p * (p + 1) / 2;
    for (int64_t i = 0; i < n; i++) {
        float mx = 0;
        for (int r = 0; r < p; r++) {
            float v = (float)((i * 13 + r * 7) % 29);
            if (v > mx) mx = v;
        }
        if (x[i] != (float)(ranks * (double)i) || y[i] != mx || d[i] != 0.5 * ranks + (double)p * (double)i) {
            ok = 0;
            bad = i;
        }
    }
    check("split all_reduce (sum, max, f64) of 103 elements in pieces of 7", ok, "element %lld", (long long)bad);
    check("split all_reduce counts one call per op", c->calls[MP_COMM_ALLREDUCE] == (p == 1 ? 0 : 3), "%lld calls",
          (long long)c->calls[MP_COMM_ALLREDUCE]);
    bcast_case(c, "split broadcast (pieces of 7 bytes)", 1001, p - 1);
    test_all_gatherv(c);       /* counts up to 2p+1 and totals above 7: one broadcast per rank and piece */
    test_reduce_scatterv(c);   /* the ring of core/comm_mpi.c, in pieces of 7 */
    test_bf16(c);              /* its bf16 sums too */
    mp_comm_mpi_set_max_count(2147483647);
    free(x); free(y); free(d);
}

/* bf16 collectives (the compute dtype of a GPU backend): sums and maxima of small integers are exact in
 * bf16 (8 significant bits), so the expected values are exact whatever the order; the sum of values
 * that need rounding is checked to be the widen-add-round of the pairwise sums, i.e. within one bf16
 * ulp per addition of the exact sum; gathers move the 16-bit patterns unchanged; counters use 2-byte
 * elements. */
static void test_bf16(mp_comm *c) {
    const int p = g_np, me = g_rank;
    const int64_t n = 37;
    uint16_t *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y);
    for (int64_t i = 0; i < n; i++) {
        x[i] = mp_f32_to_bf16((float)((me + 1) * (i % 5)));      /* <= 4p(p+1)/2: exact in bf16 */
        y[i] = mp_f32_to_bf16((float)(me * 7 - (int)i));
    }
    mp_comm_reset_counters(c);
    c->ops->all_reduce(c, x, n, MP_BF16, 0);
    c->ops->all_reduce(c, y, n, MP_BF16, 1);
    int ok = 1;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        float es = (float)((i % 5) * (p * (p + 1) / 2)), em = (float)((p - 1) * 7 - (int)i);
        if (mp_bf16_to_f32(x[i]) != es || mp_bf16_to_f32(y[i]) != em) { ok = 0; bad = i; }
    }
    check("all_reduce bf16 sum and max", ok, "element %lld: sum %g max %g", (long long)bad,
          bad >= 0 ? mp_bf16_to_f32(x[bad]) : 0.0, bad >= 0 ? mp_bf16_to_f32(y[bad]) : 0.0);
    int64_t b = part(n, p, me);
    check_counters("all_reduce bf16 bytes = 2*((n-b)+(p-1)b), two calls", c, MP_COMM_ALLREDUCE,
                   p == 1 ? 0 : 2 * 2 * ((n - b) + (int64_t)(p - 1) * b), p == 1 ? 0 : 2);
    /* rounding: 1 + 2^-9 * (rank + 1) does not fit bf16's mantissa; the result is a bf16 value within
     * p - 1 roundings (half an ulp of the running sum each) of the exact sum */
    uint16_t r = mp_f32_to_bf16(1.0f + 0x1p-7f * (float)(me + 1));
    c->ops->all_reduce(c, &r, 1, MP_BF16, 0);
    double exact = 0;
    for (int k = 0; k < p; k++) exact += mp_bf16_to_f32(mp_f32_to_bf16(1.0f + 0x1p-7f * (float)(k + 1)));
    double got = mp_bf16_to_f32(r), ulp = 0x1p-7 * (exact >= 2 ? (exact >= 4 ? 4 : 2) : 1);
    check("all_reduce bf16 rounds once per step", fabs(got - exact) <= 0.5 * ulp * (p - 1) + 1e-12,
          "got %.9g exact %.9g", got, exact);

    int64_t *counts = malloc(p * sizeof *counts), total = 0, mydispl = 0;
    for (int k = 0; k < p; k++) {
        counts[k] = ucount(k);
        if (k < me) mydispl += counts[k];
        total += counts[k];
    }
    uint16_t *in = malloc((counts[me] + 1) * sizeof *in), *out = malloc((total + 1) * sizeof *out);
    for (int64_t j = 0; j < counts[me]; j++) in[j] = (uint16_t)(0x3f80 + 64 * me + j);   /* any patterns */
    mp_comm_reset_counters(c);
    c->ops->all_gatherv(c, out, in, counts, MP_BF16);
    ok = 1;
    int64_t at = 0;
    for (int k = 0; k < p; k++)
        for (int64_t j = 0; j < counts[k]; j++, at++)
            if (out[at] != (uint16_t)(0x3f80 + 64 * k + j)) ok = 0;
    check("all_gatherv bf16 moves the bits", ok, NULL);
    check_counters("all_gatherv bf16 bytes = 2*(p-1)*c_r", c, MP_COMM_ALLGATHER, 2 * (int64_t)(p - 1) * counts[me],
                   p == 1 ? 0 : 1);
    uint16_t *rin = malloc((total + 1) * sizeof *rin), *rout = malloc((counts[me] + 1) * sizeof *rout);
    for (int64_t i = 0; i < total; i++) rin[i] = mp_f32_to_bf16((float)((me + 1) * (i % 7)));
    rout[counts[me]] = 0xdead;
    mp_comm_reset_counters(c);
    c->ops->reduce_scatterv(c, rout, rin, counts, MP_BF16);
    ok = 1;
    for (int64_t j = 0; j < counts[me]; j++)
        if (mp_bf16_to_f32(rout[j]) != (float)(((mydispl + j) % 7) * (p * (p + 1) / 2))) ok = 0;
    check("reduce_scatterv bf16 values", ok && rout[counts[me]] == 0xdead, NULL);
    check_counters("reduce_scatterv bf16 bytes = 2*(T-c_r)", c, MP_COMM_REDUCE_SCATTER, 2 * (total - counts[me]),
                   p == 1 ? 0 : 1);
    free(x); free(y); free(counts); free(in); free(out); free(rin); free(rout);
}

/* mp_comm_agree: none failing; the last rank only; every odd rank with codes rising by rank (the highest
 * code wins, the lowest failing rank's message reaches every rank, "[rank N] " when p > 1). */
static void test_agree(mp_comm *c) {
    int p = c->size, from = 7;
    mp_err e;
    mp_err_clear(&e);
    check("agree: none failed", mp_comm_agree(c, MP_OK, &e, &from) == MP_OK && from == -1, "from %d", from);
    mp_code local = c->rank == p - 1 ? mp_err_set(&e, MP_EINPUT, "bad on %d", c->rank) : MP_OK;
    mp_code rc = mp_comm_agree(c, local, &e, &from);
    char want[64];
    snprintf(want, sizeof want, p > 1 ? "[rank %d] bad on %d" : "bad on %d", p - 1, p - 1);
    check("agree: the last rank failed", rc == MP_EINPUT && e.code == MP_EINPUT && !strcmp(e.msg, want) &&
          from == p - 1, "rc %d from %d msg %s", rc, from, e.msg);
    /* the one message rule: agreed again (the CLI over the library's agreement), every rank failing with
     * the agreed error, the message keeps its one prefix, and every rank holds the same text */
    rc = mp_comm_agree(c, rc, &e, &from);
    check("agree twice: one prefix, the same text on every rank", rc == MP_EINPUT && !strcmp(e.msg, want) &&
          from == (p > 1 ? 0 : p - 1), "rc %d from %d msg %s", rc, from, e.msg);
    mp_code codes[3] = {MP_EINPUT, MP_EIO, MP_ECHECK};
    local = c->rank % 2 ? mp_err_set(&e, codes[(c->rank / 2) % 3], "odd %d", c->rank) : MP_OK;
    rc = mp_comm_agree(c, local, NULL, &from);   /* no message given: every rank still learns the code */
    mp_code worst = MP_OK;
    for (int r = 1; r < p; r += 2) worst = codes[(r / 2) % 3] > worst ? codes[(r / 2) % 3] : worst;
    check("agree: the highest code of any rank", rc == worst && from == (p > 1 ? 1 : -1), "rc %d (want %d) from %d",
          rc, worst, from);
    check("agree moves no bytes on a group of one", p > 1 || mp_comm_total_bytes(c) == 0, "%lld bytes",
          (long long)mp_comm_total_bytes(c));
}

/* Fills x[n] with values of this rank that round differently in another summation order. */
static void fill_frac(float *x, int64_t n, int salt) {
    for (int64_t i = 0; i < n; i++) x[i] = (float)sin(0.37 * (double)(i + 1) * (g_rank + 2) + salt) * 1e3f;
}

/* Whether a and b (the MPI and the staged communicator) counted the same bytes and calls of every op. */
static int same_counters(const mp_comm *a, const mp_comm *b) {
    return !memcmp(a->bytes_sent, b->bytes_sent, sizeof a->bytes_sent) && !memcmp(a->calls, b->calls, sizeof a->calls);
}

/* One op of test_staged: run on MPI (a) and staged (s) from the same inputs, counters reset first. */
#define BOTH(call_a, call_s)                                                                                \
    do {                                                                                                   \
        mp_comm_reset_counters(a);                                                                         \
        mp_comm_reset_counters(s);                                                                         \
        call_a;                                                                                            \
        call_s;                                                                                            \
    } while (0)

/* The staged communicator over the CPU backend (its "device" buffers are host memory) against the MPI
 * communicator of the same group: all_reduce (fp32 sum and max, bf16 sum, f64), all_gatherv (in place,
 * uneven), its split phase with another collective in flight, reduce_scatterv (one piece and the ring of
 * several pieces), broadcast, gather, gatherv, scatterv: bitwise equal results and counters. */
static void test_staged(mp_comm *a) {
    if (g_np == 1) return;   /* a group of one has no staged communicator (the self one serves) */
    mp_comm *s = mp_comm_staged_create(mp_backend_cpu(), a);
    const int p = g_np, me = g_rank;
    check("staged: kind, rank and size", !strcmp(s->ops->name, "staged") && s->rank == me && s->size == p &&
          !s->ops->send && !s->ops->recv, NULL);
    const int64_t n = 300000 + 7;   /* > MP_COMM_MPI_PIECE_BYTES in fp32: the ring reduce-scatter */
    float *x = malloc(n * sizeof *x), *y = malloc(n * sizeof *y), *xo = malloc(n * sizeof *xo), *yo = malloc(n * sizeof *yo);
    int64_t *cnt = malloc(sizeof(int64_t) * p), total = 0, displ = 0;
    for (int r = 0; r < p; r++) { cnt[r] = ucount(r) * 1000; if (r < me) displ += cnt[r]; total += cnt[r]; }
    for (int op_max = 0; op_max < 2; op_max++) {
        fill_frac(x, n, op_max); memcpy(y, x, n * sizeof *x);
        BOTH(a->ops->all_reduce(a, x, n, MP_F32, op_max), s->ops->all_reduce(s, y, n, MP_F32, op_max));
        check(op_max ? "staged: all_reduce max fp32" : "staged: all_reduce sum fp32 (the ring)",
              !memcmp(x, y, n * sizeof *x) && same_counters(a, s), NULL);
    }
    uint16_t *hx = (uint16_t *)x, *hy = (uint16_t *)y;
    for (int64_t i = 0; i < 1001; i++) hx[i] = hy[i] = mp_f32_to_bf16((float)sin(i * 0.1 + me) * 3);
    BOTH(a->ops->all_reduce(a, hx, 1001, MP_BF16, 0), s->ops->all_reduce(s, hy, 1001, MP_BF16, 0));
    check("staged: all_reduce sum bf16", !memcmp(hx, hy, 1001 * 2) && same_counters(a, s), NULL);
    double dx[5], dy[5];
    for (int i = 0; i < 5; i++) dx[i] = dy[i] = 0.1 * (i + 1) * (me + 1) + 1e-12;
    BOTH(a->ops->all_reduce_f64(a, dx, 5), s->ops->all_reduce_f64(s, dy, 5));
    check("staged: all_reduce_f64", !memcmp(dx, dy, sizeof dx) && same_counters(a, s), NULL);
    /* all_gatherv in place (in = out + displ) and from a separate buffer */
    fill_frac(x, n, 3); memcpy(y, x, n * sizeof *x);
    BOTH(a->ops->all_gatherv(a, x, x + displ, cnt, MP_F32), s->ops->all_gatherv(s, y, y + displ, cnt, MP_F32));
    check("staged: all_gatherv in place, uneven", !memcmp(x, y, total * sizeof *x) && same_counters(a, s), NULL);
    fill_frac(xo, cnt[me], 4);
    BOTH(a->ops->all_gatherv(a, x, xo, cnt, MP_F32), s->ops->all_gatherv(s, y, xo, cnt, MP_F32));
    check("staged: all_gatherv", !memcmp(x, y, total * sizeof *x) && same_counters(a, s), NULL);
    /* split phase, an all_reduce in flight between start and wait */
    memset(y, 0, total * sizeof *y);
    float z[3] = {1, 2, (float)me};
    mp_comm_reset_counters(s);
    s->ops->all_gatherv_start(s, y, xo, cnt, MP_F32);
    s->ops->all_reduce(s, z, 3, MP_F32, 0);
    s->ops->all_gatherv_wait(s);
    check("staged: split-phase all_gatherv with an all_reduce in flight",
          !memcmp(x, y, total * sizeof *x) && z[0] == p && z[2] == p * (p - 1) / 2 && s->calls[MP_COMM_ALLGATHER] == 1,
          NULL);
    /* reduce_scatterv: one piece, then the ring's several pieces */
    for (int big = 0; big < 2; big++) {
        int64_t *rc = malloc(sizeof(int64_t) * p), rt = 0;
        for (int r = 0; r < p; r++) rt += rc[r] = big ? n / p - (r == 1) : ucount(r) * 10;
        fill_frac(x, rt, 5 + big);
        BOTH(a->ops->reduce_scatterv(a, xo, x, rc, MP_F32), s->ops->reduce_scatterv(s, yo, x, rc, MP_F32));
        check(big ? "staged: reduce_scatterv (the ring)" : "staged: reduce_scatterv",
              !memcmp(xo, yo, rc[me] * sizeof *xo) && same_counters(a, s), NULL);
        free(rc);
    }
    /* bytes from root p - 1: broadcast, gather, gatherv, scatterv */
    int root = p - 1;
    char bx[64], by[64], gx[64 * 8], gy[64 * 8];
    int64_t bc[8];
    for (int r = 0; r < p && r < 8; r++) bc[r] = 10 + r;
    for (int i = 0; i < 64; i++) bx[i] = by[i] = (char)(me == root ? i * 3 : -1);
    BOTH(a->ops->broadcast(a, bx, 64, root), s->ops->broadcast(s, by, 64, root));
    check("staged: broadcast", !memcmp(bx, by, 64) && by[5] == 15 && same_counters(a, s), NULL);
    for (int i = 0; i < 64; i++) bx[i] = (char)(me * 11 + i);
    memset(gx, 0, sizeof gx); memset(gy, 0, sizeof gy);
    BOTH(a->ops->gather(a, gx, bx, 16, root), s->ops->gather(s, gy, bx, 16, root));
    check("staged: gather", (me != root || !memcmp(gx, gy, 16 * p)) && same_counters(a, s), NULL);
    if (p <= 8) {
        memset(gx, 0, sizeof gx); memset(gy, 0, sizeof gy);
        BOTH(a->ops->gatherv(a, gx, bx, bc[me], me == root ? bc : NULL, root),
             s->ops->gatherv(s, gy, bx, bc[me], me == root ? bc : NULL, root));
        check("staged: gatherv", (me != root || !memcmp(gx, gy, sizeof gx)) && same_counters(a, s), NULL);
        for (int i = 0; i < (int)sizeof gx; i++) gx[i] = (char)(i * 7);
        BOTH(a->ops->scatterv(a, bx, bc[me], gx, me == root ? bc : NULL, root),
             s->ops->scatterv(s, by, bc[me], gx, me == root ? bc : NULL, root));
        check("staged: scatterv", !memcmp(bx, by, bc[me]) && same_counters(a, s), NULL);
    }
    s->ops->barrier(s);
    check("staged: host buffers kept", mp_comm_staged_host_bytes(s) >= n * sizeof(float), NULL);
    s->ops->destroy(s);
    free(x); free(y); free(xo); free(yo); free(cnt);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_np);

    mp_comm *c = mp_comm_mpi_create(MPI_COMM_WORLD);
    check("mpi comm basics", strcmp(c->ops->name, "mpi") == 0 && c->rank == g_rank && c->size == g_np &&
          mp_comm_total_bytes(c) == 0, "name %s rank %d size %d", c->ops->name, c->rank, c->size);
    test_all_reduce(c);
    test_all_gatherv(c);
    test_reduce_scatterv(c);
    test_bf16(c);
    test_broadcast(c);
    test_gather(c);
    test_p2p(c);
    mp_comm_mpi_set_max_count(3);   /* pieces of 3 bytes: the path of messages over INT_MAX bytes */
    test_p2p(c);
    mp_comm_mpi_set_max_count(2147483647);
    test_split(c);
    test_ring();
    test_agree(c);
    test_staged(c);
    c->ops->destroy(c);
    test_size_one();

    char want[160];
    for (int tp = 1; tp <= g_np + 1; tp++) {
        if (g_np % tp == 0) {
            test_mesh_ok(tp);
        } else {
            snprintf(want, sizeof want, "world size %d is not a multiple of tp %d", g_np, tp);
            test_mesh_bad(tp, 0, want);
        }
    }
    snprintf(want, sizeof want, "world size %d != tp 1 x dp %d", g_np, g_np + 1);
    test_mesh_bad(1, g_np + 1, want);
    if (g_np == 4) test_mesh_bad(3, 2, "world size 4 != tp 3 x dp 2");
    if (g_np == 4) test_mesh_bad(4, 2, "world size 4 != tp 4 x dp 2");
    test_mesh_bad(0, 1, "tp must be >= 1");
    test_mesh_bad(1, -1, "dp must be >= 1");

    int total = 0;
    MPI_Allreduce(&g_failed, &total, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0) printf("%s: np=%d, %d failed check%s\n", total ? "FAILED" : "PASSED", g_np, total,
                            total == 1 ? "" : "s");
    MPI_Finalize();
    return total ? 1 : 0;
}
