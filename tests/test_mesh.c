/*
 * tests/test_mesh.c — single-process tests of core/mesh.h and core/comm.h: mp_split on balanced,
 * uneven and degenerate cases (checked against the contract, and exhaustively for small n and p), the
 * self communicator's identity semantics and its zero counters, the counter helpers, and the 1x1 mesh.
 * Multi-rank behaviour (MPI communicators, the tp x dp mesh) is tested by tests/mpi_comm.c.
 */
#include <criterion/criterion.h>
#include <string.h>
#include "core/backend.h"
#include "core/comm.h"
#include "core/mesh.h"

static void split_all(int64_t n, int p, int64_t *starts, int64_t *counts) {
    for (int i = 0; i < p; i++) mp_split(n, p, i, &starts[i], &counts[i]);
}

Test(mesh, split_balanced) {
    int64_t s[4], c[4];
    split_all(12, 4, s, c);
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(c[i], 3, "part %d count %lld", i, (long long)c[i]);
        cr_expect_eq(s[i], 3 * i, "part %d start %lld", i, (long long)s[i]);
    }
}

Test(mesh, split_uneven_first_parts_get_more) {
    int64_t s[4], c[4];
    split_all(10, 4, s, c);
    const int64_t es[4] = {0, 3, 6, 8}, ec[4] = {3, 3, 2, 2};
    for (int i = 0; i < 4; i++) {
        cr_expect_eq(s[i], es[i], "part %d start %lld != %lld", i, (long long)s[i], (long long)es[i]);
        cr_expect_eq(c[i], ec[i], "part %d count %lld != %lld", i, (long long)c[i], (long long)ec[i]);
    }
}

Test(mesh, split_fewer_items_than_parts) {
    int64_t s[5], c[5];
    split_all(2, 5, s, c);
    const int64_t es[5] = {0, 1, 2, 2, 2}, ec[5] = {1, 1, 0, 0, 0};
    for (int i = 0; i < 5; i++) {
        cr_expect_eq(s[i], es[i], "part %d start", i);
        cr_expect_eq(c[i], ec[i], "part %d count", i);
    }
    split_all(0, 3, s, c);
    for (int i = 0; i < 3; i++) cr_expect(s[i] == 0 && c[i] == 0, "n=0 part %d", i);
    mp_split(7, 1, 0, &s[0], &c[0]);
    cr_expect(s[0] == 0 && c[0] == 7, "p=1 must be the whole range");
}

Test(mesh, split_large_n_no_overflow) {
    int64_t n = (int64_t)1 << 40, s, c;
    mp_split(n + 3, 8, 7, &s, &c);
    cr_expect_eq(c, n / 8, "last part count");
    cr_expect_eq(s + c, n + 3, "last part must end at n");
}

/* Every (n, p) up to 40 x 12: contiguous, covering, sizes differ by <= 1, the first n % p are larger. */
Test(mesh, split_exhaustive_contract) {
    for (int p = 1; p <= 12; p++)
        for (int64_t n = 0; n <= 40; n++) {
            int64_t next = 0;
            for (int i = 0; i < p; i++) {
                int64_t s, c;
                mp_split(n, p, i, &s, &c);
                cr_assert_eq(s, next, "n=%lld p=%d part %d starts at %lld, expected %lld", (long long)n, p, i,
                             (long long)s, (long long)next);
                cr_assert_eq(c, n / p + (i < n % p ? 1 : 0), "n=%lld p=%d part %d count", (long long)n, p, i);
                next = s + c;
            }
            cr_assert_eq(next, n, "n=%lld p=%d: parts do not cover [0, n)", (long long)n, p);
        }
}

static void expect_zero_counters(const mp_comm *c) {
    for (int op = 0; op < MP_COMM_NOPS; op++) {
        cr_expect_eq(c->bytes_sent[op], 0, "self comm counted bytes for op %d", op);
        cr_expect_eq(c->calls[op], 0, "self comm counted calls for op %d", op);
    }
    cr_expect_eq(mp_comm_total_bytes(c), 0);
}

Test(comm, self_identity_and_zero_counters) {
    mp_comm *c = mp_comm_self();
    cr_assert(c);
    cr_expect_str_eq(c->ops->name, "self");
    cr_expect_eq(c->rank, 0);
    cr_expect_eq(c->size, 1);

    float x[5] = {1.5f, -2.0f, 3.25f, 0.0f, -7.0f}, orig[5];
    memcpy(orig, x, sizeof x);
    c->ops->all_reduce(c, x, 5, MP_F32, 0);
    cr_expect(memcmp(x, orig, sizeof x) == 0, "all_reduce sum over one rank must be the identity");
    c->ops->all_reduce(c, x, 5, MP_F32, 1);
    cr_expect(memcmp(x, orig, sizeof x) == 0, "all_reduce max over one rank must be the identity");

    double d[3] = {1e300, -1e-300, 3.0}, dorig[3];
    memcpy(dorig, d, sizeof d);
    c->ops->all_reduce_f64(c, d, 3);
    cr_expect(memcmp(d, dorig, sizeof d) == 0, "all_reduce_f64 over one rank must be the identity");

    float out[5] = {0};
    int64_t counts[1] = {5};
    c->ops->all_gatherv(c, out, x, counts, MP_F32);
    cr_expect(memcmp(out, orig, sizeof out) == 0, "all_gatherv must copy in to out");
    float out2[5] = {9, 9, 9, 9, 9};
    int64_t three[1] = {3};
    c->ops->reduce_scatterv(c, out2, x, three, MP_F32);
    cr_expect(memcmp(out2, orig, 3 * sizeof(float)) == 0, "reduce_scatterv must copy counts[0] elements");
    cr_expect(out2[3] == 9 && out2[4] == 9, "reduce_scatterv wrote past counts[0]");
    c->ops->all_gatherv(c, x, x, counts, MP_F32);   /* in place */
    cr_expect(memcmp(x, orig, sizeof x) == 0, "in-place all_gatherv must leave the buffer");

    char buf[6] = "hello";
    c->ops->broadcast(c, buf, sizeof buf, 0);
    cr_expect_str_eq(buf, "hello");
    c->ops->barrier(c);
    expect_zero_counters(c);
    c->ops->destroy(c);
}

Test(comm, self_objects_are_independent) {
    mp_comm *a = mp_comm_self(), *b = mp_comm_self();
    cr_assert(a && b && a != b, "mp_comm_self must return a fresh object per call");
    a->ops->destroy(a);
    float x[2] = {1, 2};
    b->ops->all_reduce(b, x, 2, MP_F32, 0);   /* b still usable after a is destroyed */
    cr_expect(x[0] == 1 && x[1] == 2);
    b->ops->destroy(b);
}

Test(comm, total_bytes_and_reset) {
    mp_comm *c = mp_comm_self();
    c->bytes_sent[MP_COMM_ALLREDUCE] = 10;
    c->bytes_sent[MP_COMM_ALLGATHER] = 200;
    c->bytes_sent[MP_COMM_REDUCE_SCATTER] = 3000;
    c->bytes_sent[MP_COMM_BCAST] = 40000;
    c->calls[MP_COMM_BCAST] = 7;
    cr_expect_eq(mp_comm_total_bytes(c), 43210);
    mp_comm_reset_counters(c);
    expect_zero_counters(c);
    c->ops->destroy(c);
}

Test(mesh, single) {
    mp_mesh m;
    memset(&m, 0xab, sizeof m);
    mp_mesh_init_single(&m);
    cr_expect(m.world == 1 && m.rank == 0 && m.tp == 1 && m.dp == 1 && m.tp_rank == 0 && m.dp_rank == 0);
    cr_expect_eq(m.uses_mpi, 0);
    mp_comm *cs[3] = {m.world_comm, m.tp_comm, m.dp_comm};
    for (int i = 0; i < 3; i++) {
        cr_assert(cs[i], "comm %d missing", i);
        cr_expect(cs[i]->size == 1 && cs[i]->rank == 0, "comm %d must be a group of one", i);
        float x = 4.0f;
        cs[i]->ops->all_reduce(cs[i], &x, 1, MP_F32, 0);
        cr_expect(x == 4.0f);
        expect_zero_counters(cs[i]);
    }
    mp_mesh_destroy(&m);
    cr_expect(!m.world_comm && !m.tp_comm && !m.dp_comm, "destroy must clear the communicators");
    mp_mesh_destroy(&m);   /* twice is safe */
}

/* A mesh whose three communicators are one shared object: destroy must free it once only. */
Test(mesh, destroy_shared_comm_once) {
    mp_mesh m;
    memset(&m, 0, sizeof m);
    m.world = m.tp = m.dp = 1;
    m.world_comm = m.tp_comm = m.dp_comm = mp_comm_self();
    mp_mesh_destroy(&m);   /* a double free would abort under glibc / ASan */
    cr_expect(!m.world_comm && !m.tp_comm && !m.dp_comm);
}

/* --comm on the CPU: nccl refused (exit 2, naming the flag and the device), staged and auto leave a
 * 1x1 mesh's host communicators as they are (a group of one has nothing to stage). */
Test(mesh, attach_device_comm_kinds_on_cpu) {
    const char *devs[2] = {"cpu", "cpu-bf16"};
    for (int d = 0; d < 2; d++) {
        mp_backend *be = NULL;
        mp_err e;
        cr_assert_eq(mp_backend_get(devs[d], &be, &e), MP_OK, "%s", e.msg);
        mp_mesh m;
        mp_mesh_init_single(&m);
        mp_comm *tp = m.tp_comm, *dp = m.dp_comm;
        cr_expect_eq(mp_mesh_attach_device(&m, be, MP_MESH_COMM_NCCL, &e), MP_EINPUT);
        cr_expect(strstr(e.msg, "--comm nccl needs --device cuda") && strstr(e.msg, devs[d]), "%s", e.msg);
        for (int k = MP_MESH_COMM_AUTO; k <= MP_MESH_COMM_STAGED; k += 2) {
            cr_expect_eq(mp_mesh_attach_device(&m, be, (mp_mesh_comm)k, &e), MP_OK, "%s", e.msg);
            cr_expect(m.tp_comm == tp && m.dp_comm == dp && m.ctl_tp == tp && m.ctl_dp == dp);
        }
        cr_expect_str_eq(mp_mesh_comm_names[MP_MESH_COMM_STAGED], "staged");
        mp_mesh_destroy(&m);
    }
}
