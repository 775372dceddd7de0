/*
 * tests/mpi_llama.c — mesh invariance of the Llama model, run under mpiexec (one ctest entry per mesh).
 *
 *   mpi_llama --tp T --config odd|gqa_tied|family [--sp 0|1] [--raf 0|1]     (world = tp x dp)
 *
 * "family" has what the Qwen families add: q/k/v biases, q/k norms (replicated, their gradients summed
 * over tp on every mesh) and head_dim 12 != hidden/heads 8 (q wider than hidden); its biases and norm
 * weights are set away from 0 and 1 after every initialisation (init_model), by global index, so that
 * they matter and stay mesh-independent.
 *
 * Every rank also builds the same model on a private 1x1 mesh (the reference) and checks:
 *   - every parameter, gathered from the shards of all ranks to its global form, is bitwise equal to
 *     the reference's at initialisation;
 *   - the step-1 loss equals the reference's within 1e-6 relative, and every step-1 gradient,
 *     gathered to global form, within 1e-5 relative L2;
 *   - the loss after 20 steps agrees within 1e-3 relative;
 *   - a second run on the same mesh is bitwise identical (losses and final shards);
 *   - the bytes the tp and dp communicators counted in one step equal the analytic count of the plan
 *     (docs/PARALLEL.md), computed here from the config alone;
 *   - that step copied device to host exactly once (its loss and gradient sums, together): the mesh
 *     model runs on the CPU table with a to_host that counts its calls;
 *   - the parameter, gradient and moment bytes the allocator charged are 1/(tp*dp) of the model's, plus
 *     the documented padding and replication, and the gathered buffers hold at most one unit at a time;
 *   - FSDP prefetch (dp > 1): a run whose dp communicator defers every split-phase gather to its wait
 *     (start fills the destination with NaN) is bitwise the plain run, and every gather but the step's
 *     first was started before some compute ran and ended after it; a run with the split phase taken
 *     away (blocking gathers, no prefetch) is bitwise the same too;
 *   - activation recomputation (llama_options.recompute full): a model that keeps each block's input only
 *     gives bitwise the losses of 20 steps, the step-1 gradients and the final shards of the plain model on
 *     this mesh, plans exactly what it allocates (less, with 2 layers), and its tp collectives move the
 *     plain step's bytes plus the recomputed blocks' (docs/PARALLEL.md).
 * Prints one line per check; exits 1 on any failure (on every rank).
 */
#include <math.h>
#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/comm_mpi.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_impl.h"   /* llama_fsdp_prefetch: a stray prefetch */
#include "layers/llama_train.h"

static int g_rank, g_fail;
static int64_t g_to_host;   /* to_host calls of the mesh model's backend */

static void counting_to_host(mp_backend *be, void *host_dst, const void *dev_src, size_t bytes) {
    g_to_host++;
    mp_backend_cpu()->to_host(be, host_dst, dev_src, bytes);
}

/* Compute calls of the mesh model's backend that may run between a prefetch and its wait (the GEMMs,
 * and the embedding, the only compute between the first unit's gather and the second's). */
static int64_t g_compute;
static void counting_gemm(mp_backend *be, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                          const void *B_, int ldb, float beta, void *C, int ldc, mp_dtype ct) {
    g_compute++;
    mp_backend_cpu()->gemm(be, ta, tb, M, N, K, alpha, A, lda, B_, ldb, beta, C, ldc, ct);
}
static void counting_embed_fwd(mp_backend *be, void *out, const int32_t *tokens, const void *table, int N, int D,
                               int v_start, int v_local) {
    g_compute++;
    mp_backend_cpu()->embed_fwd(be, out, tokens, table, N, D, v_start, v_local);
}

/* The deferring dp communicator: a copy of the mesh's, whose split-phase all_gatherv does nothing but
 * poison the destination (NaN bytes) at start and runs the blocking gather at wait. g_started counts the
 * gathers, g_overlapped those with compute between start and wait. */
static mp_comm g_defer;
static mp_comm_ops g_defer_ops;   /* the mesh's dp operations with the split phase swapped */
static struct { void *out; const void *in; const int64_t *counts; mp_dtype dt; int64_t compute; int pending; } g_pend;
static int64_t g_started, g_overlapped;
static void defer_start(mp_comm *c, void *out, const void *in, const int64_t *counts, mp_dtype dt) {
    if (g_pend.pending) { fprintf(stderr, "[rank %d] FAIL: a second split-phase gather started\n", g_rank); MPI_Abort(MPI_COMM_WORLD, 1); }
    int64_t total = 0;
    for (int r = 0; r < c->size; r++) total += counts[r];
    memset(out, 0xff, (size_t)total * mp_dtype_size(dt));
    g_pend = (typeof(g_pend)){out, in, counts, dt, g_compute, 1};
    g_started++;
}
static void defer_wait(mp_comm *c) {
    if (!g_pend.pending) return;
    g_overlapped += g_compute != g_pend.compute;
    g_pend.pending = 0;
    c->ops->all_gatherv(c, g_pend.out, g_pend.in, g_pend.counts, g_pend.dt);
}

/* Copies (save) or compares (!save: returns 1 when equal) every parameter shard of m with buf. */
static int shards_io(llama_model *m, float *buf, int save) {
    size_t off = 0;
    int same = 1;
    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        size_t b = sizeof(float) * (size_t)(p->shard_rows * p->tp_shape[1]);
        if (save) memcpy((char *)buf + off, p->shard, b);
        else same &= !memcmp((char *)buf + off, p->shard, b);
        off += b;
    }
    return same;
}

static void check(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void check(int ok, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    int all_ok = ok;
    MPI_Allreduce(MPI_IN_PLACE, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!ok) fprintf(stderr, "[rank %d] FAIL: %s\n", g_rank, msg);
    if (g_rank == 0) printf("%s: %s\n", all_ok ? "ok  " : "FAIL", msg);
    if (!all_ok) g_fail = 1;
}

static llama_config make_config(const char *name) {
    llama_config c;
    llama_config_default(&c);
    if (!strcmp(name, "odd")) {          /* vocab not divisible by 4, dim-0 sizes not divisible by dp */
        c.hidden_size = 48; c.intermediate_size = 100; c.num_hidden_layers = 2;
        c.num_attention_heads = 4; c.num_key_value_heads = 4; c.vocab_size = 250; c.tie_word_embeddings = 0;
    } else if (!strcmp(name, "family")) {   /* biases, q/k norms, head_dim 12 (q: 96 wide, hidden 64) */
        c.hidden_size = 64; c.intermediate_size = 136; c.num_hidden_layers = 2;
        c.num_attention_heads = 8; c.num_key_value_heads = 4; c.vocab_size = 131; c.tie_word_embeddings = 0;
        c.head_dim = 12; c.qkv_bias = 1; c.qk_norm = 1;
    } else {                             /* grouped-query attention, tied embeddings */
        c.hidden_size = 64; c.intermediate_size = 136; c.num_hidden_layers = 2;
        c.num_attention_heads = 8; c.num_key_value_heads = 4; c.vocab_size = 131; c.tie_word_embeddings = 1;
    }
    c.max_position_embeddings = 64;
    return c;
}

enum { B = 4, T = 16, STEPS = 20 };
static const uint64_t SEED = 4242;

/* llama_init_weights(SEED), then (a config with biases or q/k norms) the q/k/v biases and q/k norm weights
 * set to their init value (0 or 1) + 0.3 sin(...) of the global row and the name: the same values on
 * every mesh. */
static void init_model(llama_model *m) {
    llama_init_weights(m, SEED);
    const llama_config *c = llama_model_config(m);
    if (!c->qkv_bias && !c->qk_norm) return;
    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        int bias = strstr(p->name, "_proj.bias") != NULL, qk = strstr(p->name, "_norm.weight") && strstr(p->name, "self_attn");
        if (!bias && !qk) continue;
        unsigned h = 0;
        for (const char *q = p->name; *q; q++) h = h * 31u + (unsigned char)*q;
        for (int64_t r = 0; r < p->shard_rows && p->shard_row0 + r < p->valid_rows; r++) {
            int64_t grow = p->tp_off[0] + p->shard_row0 + r;
            p->shard[r] = (bias ? 0.0f : 1.0f) + 0.3f * (float)sin(0.77 * (double)grow + (double)(h % 1000));
        }
    }
    llama_shards_changed(m);
}

/* Deterministic token stream: batch s, sequence k, position t. */
/* Deterministic, learnable token stream (each sequence counts upwards from a hashed start), so that
 * the 20-step loss shows real learning. */
static int32_t token(int s, int k, int t, int vocab) {
    uint32_t x = (uint32_t)(s * 7919 + k * 104729 + 17);
    x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
    return (int32_t)((x + (uint32_t)t) % (uint32_t)vocab);
}

typedef struct fill_ctx { int step, first, count, vocab; } fill_ctx;

static void fill(void *vctx, int k, int32_t *in, int32_t *tgt) {
    fill_ctx *c = vctx;
    (void)k;
    for (int j = 0; j < c->count; j++)
        for (int t = 0; t < T; t++) {
            in[j * T + t] = token(c->step, c->first + j, t, c->vocab);
            tgt[j * T + t] = token(c->step, c->first + j, t + 1, c->vocab);
        }
}

/* Global form of a parameter (or its gradient): every rank fills its shard's box of a zeroed global
 * buffer (replicated tensors from tp rank 0 only, vocab padding dropped) and the world sums. */
static float *gather_global(llama_model *m, int i, int grad) {
    llama_param *p = llama_param_at(m, i);
    mp_mesh *mesh = llama_mesh(m);
    int64_t rows = p->gshape[0], cols = p->gshape[1];
    float *g = calloc((size_t)(rows * cols), sizeof(float));
    const float *src = grad ? p->shard_grad : p->shard;
    if (p->split != LLAMA_REPLICATED || mesh->tp_rank == 0) {
        for (int64_t r = 0; r < p->shard_rows; r++) {
            int64_t slice_row = p->shard_row0 + r;
            if (slice_row >= p->valid_rows) continue;
            int64_t grow = p->tp_off[0] + slice_row;
            for (int64_t c = 0; c < p->tp_shape[1]; c++) g[grow * cols + p->tp_off[1] + c] = src[r * p->tp_shape[1] + c];
        }
    }
    /* a model on a private 1x1 mesh (the reference) already holds everything */
    if (mesh->uses_mpi) MPI_Allreduce(MPI_IN_PLACE, g, (int)(rows * cols), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    return g;
}

static double rel_l2(const float *a, const float *b, int64_t n) {
    double num = 0, den = 1e-300;
    for (int64_t i = 0; i < n; i++) { double d = (double)a[i] - b[i]; num += d * d; den += (double)b[i] * b[i]; }
    return sqrt(num / den);
}

/* Runs STEPS steps with tb (token buffers of m's backend: made outside, so that the steps themselves are
 * seen to allocate nothing); losses[s] gets each step's loss. After step 1 (if grads != NULL) the global
 * gradients are stored in grads[i]. */
static void train(llama_model *m, double *losses, float **grads, llama_token_bufs *tb) {
    mp_mesh *mesh = llama_mesh(m);
    int micro = B / mesh->dp;
    int32_t *in = malloc(sizeof(int32_t) * micro * T), *tgt = malloc(sizeof(int32_t) * micro * T);
    for (int s = 0; s < STEPS; s++) {
        fill_ctx fc = {s, mesh->dp_rank * micro, micro, llama_model_config(m)->vocab_size};
        llama_step_args a = {{0.9, 0.95, 1e-8, 0.1}, 2e-3, s + 1, 1.0, 1, (double)B * T};
        llama_step_result r;
        if (s == 0 && grads) {
            /* the step's gradient before the update: run the step's pieces by hand */
            llama_zero_grad(m);
            fill(&fc, 0, in, tgt);
            double l = llama_forward(m, in, tgt);
            llama_backward(m, (float)(1.0 / (B * T)));
            llama_sync_grads(m);
            for (int i = 0; i < llama_num_params(m); i++) grads[i] = gather_global(m, i, 1);
            (void)l;
        }
        llama_train_step(m, &a, fill, &fc, tb, &r);
        losses[s] = r.loss;
    }
    free(in);
    free(tgt);
}

/* Expected bytes for one step (one micro-batch, no grad accumulation) on this rank: see PARALLEL.md. */
static void expected_bytes(const llama_config *c, const mp_mesh *mesh, int sp, int raf, int recompute,
                           int64_t *tp_bytes, int64_t *dp_bytes) {
    int p = mesh->tp, q = mesh->dp, L = c->num_hidden_layers;
    int64_t D = c->hidden_size, hd = llama_head_dim(c), N = (int64_t)(B / q) * T;
    int64_t H = c->num_attention_heads, KV = c->num_key_value_heads, I = c->intermediate_size;
    /* tp group: an all-reduce of n floats costs 4*((n - b) + (p-1)*b), b = this rank's mp_split part */
#define AR(n, parts, r) ({ int64_t s_, b_; mp_split((n), (parts), (r), &s_, &b_); 4 * (((n) - b_) + ((int64_t)(parts) - 1) * b_); })
    *tp_bytes = 0;
    if (p > 1) {
        int64_t nd = N * D;
        /* recomputation: every block but the last repeats its forward's collectives but the last (SP: two
         * all-gathers and a reduce-scatter; else one all-reduce) */
        int64_t rc = recompute ? L - 1 : 0;
        if (sp) *tp_bytes = (int64_t)(4 + 8 * L + 3 * rc) * 4 * (p - 1) * (nd / p);   /* AG and RS of [N, D] */
        else *tp_bytes = (int64_t)(2 + 4 * L + rc) * AR(nd, p, mesh->tp_rank);        /* AR of [N, D] */
        *tp_bytes += AR(N, p, mesh->tp_rank) + AR(2 * N, p, mesh->tp_rank);   /* cross-entropy: max; sums */
        /* norm-weight grads: under SP every norm's, and the q/k norms' always (one all-reduce) */
        int64_t rep = 0, s0, cnt, hcnt;
        mp_split(D, q, mesh->dp_rank, &s0, &cnt);
        mp_split(hd, q, mesh->dp_rank, &s0, &hcnt);
        if (sp) rep = (2 * L + 1) * cnt;
        if (c->qk_norm) rep += 2 * L * hcnt;
        if (rep) *tp_bytes += AR(rep, p, mesh->tp_rank);
    }
    /* dp group: per unit, all-gather 4*(q-1)*shard and reduce-scatter 4*(full - shard); the loss
     * all-reduce of one double. */
    *dp_bytes = 0;
    if (q > 1) {
        int64_t V = c->vocab_size, vl = (V + p - 1) / p, il0, il;
        mp_split(I, p, mesh->tp_rank, &il0, &il);
        int64_t qd = H / p * hd, kd = KV / p * hd;
        /* rows x cols of every TP slice, per unit */
        int64_t emb[2][2] = {{vl, D}, {D, 1}};
        int64_t blk[14][2] = {{D, 1}, {qd, D}, {kd, D}, {kd, D}, {D, qd}, {D, 1}, {il, D}, {il, D}, {D, il}};
        int nblk = 9;
        if (c->qkv_bias) { blk[nblk][0] = qd; blk[nblk + 1][0] = kd; blk[nblk + 2][0] = kd; nblk += 3; }
        if (c->qk_norm) { blk[nblk][0] = hd; blk[nblk + 1][0] = hd; nblk += 2; }
        for (int i = 9; i < nblk; i++) blk[i][1] = 1;
        int64_t head[2][2] = {{D, 1}, {vl, D}};
        int nemb = c->tie_word_embeddings ? 2 : 1;
        int64_t shard_emb = 0, full_emb = 0, shard_blk = 0, full_blk = 0, shard_head = 0, full_head = 0;
        for (int i = 0; i < nemb; i++) {
            int64_t s0, cnt; mp_split(emb[i][0], q, mesh->dp_rank, &s0, &cnt);
            shard_emb += cnt * emb[i][1]; full_emb += emb[i][0] * emb[i][1];
        }
        for (int i = 0; i < nblk; i++) {
            int64_t s0, cnt; mp_split(blk[i][0], q, mesh->dp_rank, &s0, &cnt);
            shard_blk += cnt * blk[i][1]; full_blk += blk[i][0] * blk[i][1];
        }
        for (int i = 0; i < 2; i++) {
            int64_t s0, cnt; mp_split(head[i][0], q, mesh->dp_rank, &s0, &cnt);
            shard_head += cnt * head[i][1]; full_head += head[i][0] * head[i][1];
        }
        int64_t ag_emb = 4 * (q - 1) * shard_emb, ag_blk = 4 * (q - 1) * shard_blk, ag_head = 4 * (q - 1) * shard_head;
        int64_t rs_emb = 4 * (full_emb - shard_emb), rs_blk = 4 * (full_blk - shard_blk), rs_head = 4 * (full_head - shard_head);
        int tied = c->tie_word_embeddings;
        /* forward: embedding unit, L blocks, head unit (tied: the embedding unit again, when the pool
         * no longer holds it, i.e. with reshard_after_forward) */
        *dp_bytes += ag_emb + L * ag_blk + (tied ? (raf ? ag_emb : 0) : ag_head);
        /* backward: blocks gathered again with reshard_after_forward; every unit reduce-scattered */
        *dp_bytes += (raf ? L * ag_blk : 0) + L * rs_blk + rs_emb + (tied ? 0 : rs_head);
        *dp_bytes += mesh->dp_rank == 0 ? 8 * (q - 1) : 8;      /* loss sum (all_reduce_f64 of 1) */
    }
#undef AR
}

/* Activation recomputation on this mesh: a model with o's options and recompute full, built on mesh with
 * the backend be, against the plain model's losses loss_m, step-1 gradients gm and final shards shards1
 * (the file comment lists what is checked). acts_plain: the plain model's MP_MEM_ACTS. */
static void check_recompute(const llama_config *cfg, llama_options o, mp_mesh *mesh, mp_backend *be, int sp,
                            const double *loss_m, float **gm, float *shards1, int64_t acts_plain) {
    o.recompute = LLAMA_RECOMPUTE_FULL;
    mp_err err;
    int64_t before = mp_mem_current(MP_MEM_ACTS);
    llama_model *m = NULL;
    if (llama_create(&m, cfg, &o, mesh, be, &err)) { fprintf(stderr, "%s\n", err.msg); MPI_Abort(MPI_COMM_WORLD, 2); }
    int64_t held = mp_mem_current(MP_MEM_ACTS) - before;
    llama_memory_plan plan;
    if (llama_plan_memory(cfg, &o, be, mesh->tp, mesh->tp_rank, mesh->dp, mesh->dp_rank, &plan, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    check(plan.bytes[MP_MEM_ACTS] == held && held < acts_plain,
          "recompute full: activations %lld B planned, %lld B allocated, %lld B without it",
          (long long)plan.bytes[MP_MEM_ACTS], (long long)held, (long long)acts_plain);
    llama_token_bufs tb;
    llama_token_bufs_init(&tb, be, B / mesh->dp, T);
    {   /* one step's tp bytes */
        init_model(m);
        mp_comm_reset_counters(mesh->tp_comm);
        fill_ctx fc = {0, mesh->dp_rank * (B / mesh->dp), B / mesh->dp, cfg->vocab_size};
        llama_step_args a = {{0.9, 0.95, 1e-8, 0.1}, 2e-3, 1, 1.0, 1, (double)B * T};
        llama_step_result r;
        llama_train_step(m, &a, fill, &fc, &tb, &r);
        int64_t etp, edp;
        expected_bytes(cfg, mesh, sp && mesh->tp > 1, o.reshard_after_forward, 1, &etp, &edp);
        int64_t gtp = mp_comm_total_bytes(mesh->tp_comm);
        check(gtp == etp, "recompute full: tp bytes of one step: counted %lld, plan %lld", (long long)gtp,
              (long long)etp);
    }
    int np = llama_num_params(m);
    float **g = calloc((size_t)np, sizeof(float *));
    double losses[STEPS];
    init_model(m);
    train(m, losses, g, &tb);
    int same = 1;
    for (int i = 0; i < np; i++) {
        llama_param *p = llama_param_at(m, i);
        if (memcmp(g[i], gm[i], sizeof(float) * (size_t)(p->gshape[0] * p->gshape[1]))) {
            same = 0;
            if (g_rank == 0) fprintf(stderr, "recompute full: step-1 gradient of %s differs\n", p->name);
        }
        free(g[i]);
    }
    check(same, "recompute full: every step-1 gradient bitwise the plain model's (%d tensors)", np);
    check(!memcmp(losses, loss_m, sizeof losses) && shards_io(m, shards1, 0),
          "recompute full: %d losses and the final shards bitwise the plain model's", STEPS);
    free(g);
    llama_token_bufs_free(&tb);
    llama_destroy(m);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    int world;
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int tp = 1, sp = 1, raf = 1;
    const char *cfg_name = "odd";
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--tp")) tp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sp")) sp = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--raf")) raf = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--config")) cfg_name = argv[i + 1];
    }
    llama_config cfg = make_config(cfg_name);
    mp_backend *be = mp_backend_cpu();
    mp_backend counting = *be;   /* the mesh model's table: the CPU's, counting its to_host calls */
    counting.to_host = counting_to_host;
    counting.gemm = counting_gemm;
    counting.embed_fwd = counting_embed_fwd;
    mp_err err;
    mp_mesh mesh;
    if (mp_mesh_init_mpi(&mesh, tp, 0, &err)) {
        if (g_rank == 0) fprintf(stderr, "mesh: %s\n", err.msg);
        MPI_Finalize();
        return 2;
    }
    if (g_rank == 0)
        printf("mesh tp %d x dp %d, sp %d, reshard_after_forward %d, config %s\n", mesh.tp, mesh.dp, sp, raf, cfg_name);

    /* the mesh model first, so the allocator's numbers are its own */
    int64_t before[MP_MEM_NCAT];
    for (int k = 0; k < MP_MEM_NCAT; k++) before[k] = mp_mem_current((mp_mem_cat)k);
    llama_options o = {B / mesh.dp, T, sp, raf};
    llama_model *m = NULL;
    if (llama_create(&m, &cfg, &o, &mesh, &counting, &err)) { fprintf(stderr, "%s\n", err.msg); MPI_Abort(MPI_COMM_WORLD, 2); }
    int64_t held[MP_MEM_NCAT];
    for (int k = 0; k < MP_MEM_NCAT; k++) held[k] = mp_mem_current((mp_mem_cat)k) - before[k];
    /* the memory plan printed before allocation is what llama_create allocated, category by category */
    llama_memory_plan plan;
    if (llama_plan_memory(&cfg, &o, &counting, mesh.tp, mesh.tp_rank, mesh.dp, mesh.dp_rank, &plan, &err)) {
        fprintf(stderr, "plan: %s\n", err.msg);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    static const mp_mem_cat planned[] = {MP_MEM_PARAMS, MP_MEM_GRADS, MP_MEM_OPTIM, MP_MEM_GATHER, MP_MEM_ACTS};
    for (size_t i = 0; i < sizeof planned / sizeof planned[0]; i++)
        check(plan.bytes[planned[i]] == held[planned[i]], "memory plan %s: %lld B planned, %lld B allocated",
              mp_mem_cat_name(planned[i]), (long long)plan.bytes[planned[i]], (long long)held[planned[i]]);

    mp_mesh single;
    mp_mesh_init_single(&single);
    llama_options o1 = {B, T, 0, 1};
    llama_model *ref = NULL;
    if (llama_create(&ref, &cfg, &o1, &single, be, &err)) { fprintf(stderr, "%s\n", err.msg); MPI_Abort(MPI_COMM_WORLD, 2); }
    init_model(ref);
    init_model(m);
    int np = llama_num_params(m);

    /* memory: parameters, gradients, moments are 1/(tp*dp) of the model plus padding and replication */
    int64_t total = llama_config_num_params(&cfg), allowance = 0;
    for (int i = 0; i < np; i++) {
        llama_param *p = llama_param_at(m, i);
        int64_t cols = p->tp_shape[1];
        allowance += cols;                                            /* uneven dp split: <= 1 row */
        allowance += (p->tp_shape[0] - p->valid_rows) * cols;          /* vocab padding rows */
        if (p->split == LLAMA_REPLICATED) allowance += p->gshape[0] / mesh.dp + 1;   /* norms on every tp rank */
    }
    double ideal = (double)total / world;
    int64_t pbytes = held[MP_MEM_PARAMS];
    check(pbytes / 4 >= (int64_t)floor(ideal) - allowance && pbytes / 4 <= (int64_t)ceil(ideal) + allowance,
          "parameter shard: %lld floats, ideal %.1f (+/- %lld allowed)", (long long)(pbytes / 4), ideal, (long long)allowance);
    check(held[MP_MEM_GRADS] == pbytes && held[MP_MEM_OPTIM] == 2 * pbytes,
          "gradients (%lld B) = parameters, moments (%lld B) = 2 x parameters", (long long)held[MP_MEM_GRADS],
          (long long)held[MP_MEM_OPTIM]);
    if (mesh.dp > 1 && raf) {
        /* pool + grad pool + the two stages (each <= the largest unit) + unit-0 grads + reduce-scatter output */
        int64_t unit_max = held[MP_MEM_GATHER];
        int64_t biggest_unit = 0, unit_sum = 0; int cur = -1;
        for (int i = 0; i < np; i++) {
            llama_param *p = llama_param_at(m, i);
            if (p->unit != cur) { if (unit_sum > biggest_unit) biggest_unit = unit_sum; unit_sum = 0; cur = p->unit; }
            unit_sum += p->tp_shape[0] * p->tp_shape[1];
        }
        if (unit_sum > biggest_unit) biggest_unit = unit_sum;
        check(unit_max <= 4 * 6 * biggest_unit, "FSDP gather buffers %lld B <= 6 x the largest unit (%lld B)",
              (long long)unit_max, (long long)(4 * biggest_unit));
    } else if (mesh.dp == 1) {
        check(held[MP_MEM_GATHER] == 0, "no gather buffers on dp = 1 (%lld B)", (long long)held[MP_MEM_GATHER]);
    }

    /* initial parameters: bitwise */
    int same = 1;
    for (int i = 0; i < np; i++) {
        float *g = gather_global(m, i, 0);
        llama_param *p = llama_param_at(ref, i);
        if (memcmp(g, p->shard, sizeof(float) * (size_t)(p->gshape[0] * p->gshape[1]))) {
            same = 0;
            if (g_rank == 0) fprintf(stderr, "initial %s differs\n", p->name);
        }
        free(g);
    }
    check(same, "every initial parameter bitwise equal to the 1x1 model's (%d tensors)", np);

    /* communication volume of one step */
    mp_comm_reset_counters(mesh.tp_comm);
    mp_comm_reset_counters(mesh.dp_comm);
    double loss_ref[STEPS], loss_m[STEPS];
    float **gref = calloc((size_t)np, sizeof(float *)), **gm = calloc((size_t)np, sizeof(float *));
    /* reference first step gradients */
    llama_token_bufs tb_ref, tb;
    llama_token_bufs_init(&tb_ref, llama_backend(ref), B, T);
    llama_token_bufs_init(&tb, llama_backend(m), B / mesh.dp, T);
    train(ref, loss_ref, gref, &tb_ref);
    /* the mesh model: count one plain step, then restart and train for real */
    {
        int micro = B / mesh.dp;
        fill_ctx fc = {0, mesh.dp_rank * micro, micro, cfg.vocab_size};
        llama_step_args a = {{0.9, 0.95, 1e-8, 0.1}, 2e-3, 1, 1.0, 1, (double)B * T};
        llama_step_result r;
        int64_t to_host_before = g_to_host;
        llama_train_step(m, &a, fill, &fc, &tb, &r);
        check(g_to_host - to_host_before == 1, "one step copied device to host %lld time(s) (one: loss and grad sums)",
              (long long)(g_to_host - to_host_before));
        int64_t etp, edp;
        expected_bytes(&cfg, &mesh, sp && mesh.tp > 1, raf, 0, &etp, &edp);
        int64_t gtp = mp_comm_total_bytes(mesh.tp_comm), gdp = mp_comm_total_bytes(mesh.dp_comm);
        check(gtp == etp, "tp bytes of one step: counted %lld, plan %lld", (long long)gtp, (long long)etp);
        check(gdp == edp, "dp bytes of one step: counted %lld, plan %lld", (long long)gdp, (long long)edp);
        init_model(m);
    }
    int64_t calls_before = mp_mem_alloc_calls();
    train(m, loss_m, gm, &tb);
    /* (gather_global uses plain calloc, which the allocator does not count) */
    check(mp_mem_alloc_calls() == calls_before, "%d training steps made no allocation (%lld made)", STEPS,
          (long long)(mp_mem_alloc_calls() - calls_before));
    check(fabs(loss_m[0] - loss_ref[0]) <= 1e-6 * fabs(loss_ref[0]), "step-1 loss %.9f vs 1x1 %.9f", loss_m[0], loss_ref[0]);
    double worst = 0;
    const char *worst_name = "";
    for (int i = 0; i < np; i++) {
        llama_param *p = llama_param_at(ref, i);
        double e = rel_l2(gm[i], gref[i], p->gshape[0] * p->gshape[1]);
        if (e > worst) { worst = e; worst_name = p->name; }
    }
    check(worst <= 1e-5, "step-1 gradients: worst relative L2 %.2e (%s)", worst, worst_name);
    check(fabs(loss_m[STEPS - 1] - loss_ref[STEPS - 1]) <= 1e-3 * fabs(loss_ref[STEPS - 1]),
          "loss after %d steps %.6f vs 1x1 %.6f", STEPS, loss_m[STEPS - 1], loss_ref[STEPS - 1]);
    check(loss_ref[STEPS - 1] < loss_ref[0] - 0.1, "the model learns (%.4f -> %.4f)", loss_ref[0], loss_ref[STEPS - 1]);

    /* bitwise repeat on this mesh */
    size_t nbytes = 0;
    for (int i = 0; i < np; i++) { llama_param *p = llama_param_at(m, i); nbytes += sizeof(float) * (size_t)(p->shard_rows * p->tp_shape[1]); }
    float *shards1 = malloc(nbytes + 4);
    shards_io(m, shards1, 1);
    double loss_m2[STEPS];
    init_model(m);
    train(m, loss_m2, NULL, &tb);
    check(!memcmp(loss_m, loss_m2, sizeof loss_m) && shards_io(m, shards1, 0),
          "a second run on this mesh is bitwise identical (losses and final shards)");

    if (mesh.dp > 1) {
        /* FSDP prefetch: gathers per step = unit 0, the L blocks, the head (tied: unit 0 again when the
         * pool dropped it), the L blocks again in backward with reshard_after_forward */
        int L = cfg.num_hidden_layers, tied = cfg.tie_word_embeddings;
        int64_t per_step = 1 + L + (tied ? raf : 1) + (raf ? L : 0);
        mp_comm *dpc = mesh.dp_comm;
        check(dpc->ops->all_gatherv_start != NULL, "the MPI dp communicator offers a split-phase all_gatherv");
        g_defer = *dpc;
        g_defer_ops = *dpc->ops;
        g_defer_ops.all_gatherv_start = defer_start;
        g_defer_ops.all_gatherv_wait = defer_wait;
        g_defer.ops = &g_defer_ops;
        mesh.dp_comm = &g_defer;
        init_model(m);
        train(m, loss_m2, NULL, &tb);
        check(!memcmp(loss_m, loss_m2, sizeof loss_m) && shards_io(m, shards1, 0),
              "gathers deferred to their waits (NaN until then): bitwise the plain run");
        check(g_started == STEPS * per_step && g_overlapped == STEPS * (per_step - 1),
              "prefetch: %lld gathers in %d steps (%lld planned), %lld overlapped compute (all but each step's first)",
              (long long)g_started, STEPS, (long long)(STEPS * per_step), (long long)g_overlapped);
        /* a stray prefetch (no gather takes it) is ended and dropped when the shards change, not unpacked
         * later as current weights (and no second gather starts while it is in flight: defer_start) */
        llama_fsdp_prefetch(m, 1);
        init_model(m);
        train(m, loss_m2, NULL, &tb);
        check(!memcmp(loss_m, loss_m2, sizeof loss_m) && shards_io(m, shards1, 0),
              "a stray prefetch before re-initialisation: dropped, bitwise the plain run");
        g_defer_ops.all_gatherv_start = NULL;   /* no split phase: blocking gathers, nothing prefetched */
        g_defer_ops.all_gatherv_wait = NULL;
        init_model(m);
        train(m, loss_m2, NULL, &tb);
        check(!memcmp(loss_m, loss_m2, sizeof loss_m) && shards_io(m, shards1, 0),
              "blocking gathers (no prefetch): bitwise the prefetching run");
        mesh.dp_comm = dpc;
    }

    check_recompute(&cfg, o, &mesh, &counting, sp, loss_m, gm, shards1, held[MP_MEM_ACTS]);

    for (int i = 0; i < np; i++) { free(gref[i]); free(gm[i]); }
    free(gref); free(gm); free(shards1);
    llama_token_bufs_free(&tb);
    llama_token_bufs_free(&tb_ref);
    llama_destroy(m);
    llama_destroy(ref);
    mp_mesh_destroy(&single);
    mp_mesh_destroy(&mesh);
    if (g_rank == 0) printf("%s\n", g_fail ? "FAILED" : "PASSED");
    MPI_Finalize();
    return g_fail ? 1 : 0;
}
