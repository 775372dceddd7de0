/*
 * tests/test_step_contract.c — what the device contract (core/backend.h) promises a training step, shown
 * from counters rather than from reading the code:
 *   - attention memory is O(B*H*T) per layer (flash-style: no T x T buffer): the allocator's activation
 *     bytes of one layer, built at T and at 2T, grow by 2x (not ~4x), and stay below what a [B,H,T,T]
 *     probability buffer alone would take;
 *   - a training step copies device to host once, whatever the number of layers, parameters or
 *     micro-batches: a CPU table whose to_host counts its calls is handed to the model;
 *   - the device-side sums give bitwise the loss and gradient norm that summing on the host (one copy per
 *     micro-batch, one per parameter) gives.
 * One model on a 1x1 mesh (no MPI); the mesh variants of the count are in tests/mpi_llama.c.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/backend.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_train.h"

/* A small GQA model whose activations are dominated by attention were it O(T^2): head_dim 8, 4 heads. */
static llama_config small_config(int layers, int tied) {
    llama_config c;
    llama_config_default(&c);
    c.hidden_size = 32;
    c.intermediate_size = 64;
    c.num_hidden_layers = layers;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
    c.vocab_size = 97;
    c.tie_word_embeddings = tied;
    c.max_position_embeddings = 1024;
    return c;
}

/* Bytes llama_create charges to MP_MEM_ACTS for (layers, B, T), checked against the memory plan. */
static int64_t act_bytes(int layers, int B, int T) {
    llama_config c = small_config(layers, 0);
    llama_options o = {B, T, 0, 1};
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_err err;
    int64_t before = mp_mem_current(MP_MEM_ACTS);
    llama_model *m = NULL;
    cr_assert_eq(llama_create(&m, &c, &o, &mesh, mp_backend_cpu(), &err), MP_OK, "%s", err.msg);
    int64_t held = mp_mem_current(MP_MEM_ACTS) - before;
    llama_memory_plan plan;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &plan, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(plan.bytes[MP_MEM_ACTS], held, "plan %lld B, allocator %lld B", (long long)plan.bytes[MP_MEM_ACTS],
                 (long long)held);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
    return held;
}

Test(step_contract, attention_memory_per_layer_is_linear_in_the_sequence_length) {
    const int B = 2, T = 256, H = 4;
    /* one layer's bytes: the difference between 2 layers and 1 (embedding, head and scratch cancel) */
    int64_t layer_t = act_bytes(2, B, T) - act_bytes(1, B, T);
    int64_t layer_2t = act_bytes(2, B, 2 * T) - act_bytes(1, B, 2 * T);
    int64_t all_t = act_bytes(2, B, T), all_2t = act_bytes(2, B, 2 * T);
    double ratio = (double)layer_2t / (double)layer_t, ratio_all = (double)all_2t / (double)all_t;
    int64_t probs_t = (int64_t)B * H * T * T * (int64_t)sizeof(float);   /* a [B,H,T,T] buffer at T */
    cr_log_info("activations per layer: %lld B at T=%d, %lld B at T=%d (ratio %.4f); whole model %.4f; "
                "a [B,H,T,T] buffer alone: %lld B", (long long)layer_t, T, (long long)layer_2t, 2 * T, ratio, ratio_all,
                (long long)probs_t);
    cr_assert(ratio > 1.99 && ratio < 2.01, "per-layer activations grow %.4fx from T=%d to %d (linear: 2)", ratio, T,
              2 * T);
    cr_assert(ratio_all > 1.99 && ratio_all < 2.01, "all activations grow %.4fx (linear: 2)", ratio_all);
    cr_assert(layer_t < probs_t, "a layer's %lld B is below one [B,H,T,T] buffer (%lld B)", (long long)layer_t,
              (long long)probs_t);
}

/* ---- to_host calls per step ---- */

static int64_t g_to_host;
static void counting_to_host(mp_backend *be, void *host_dst, const void *dev_src, size_t bytes) {
    g_to_host++;
    mp_backend_cpu()->to_host(be, host_dst, dev_src, bytes);
}

/* The CPU table with a counting to_host. */
static mp_backend counting_cpu(void) {
    mp_backend be = *mp_backend_cpu();
    be.to_host = counting_to_host;
    return be;
}

enum { SB = 2, ST = 24 };

typedef struct fill_ctx { int step, vocab; } fill_ctx;

static void fill(void *vctx, int k, int32_t *in, int32_t *tgt) {
    const fill_ctx *c = vctx;
    for (int i = 0; i < SB * ST; i++) {
        uint32_t x = (uint32_t)(c->step * 7919 + k * 104729 + i * 31 + 5);
        x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
        in[i] = (int32_t)(x % (uint32_t)c->vocab);
        tgt[i] = (int32_t)((x >> 7) % (uint32_t)c->vocab);
    }
}

static llama_model *make_model(mp_backend *be, mp_mesh *mesh, int layers, int tied) {
    llama_config c = small_config(layers, tied);
    llama_options o = {SB, ST, 0, 1};
    mp_err err;
    llama_model *m = NULL;
    cr_assert_eq(llama_create(&m, &c, &o, mesh, be, &err), MP_OK, "%s", err.msg);
    llama_init_weights(m, 77);
    return m;
}

Test(step_contract, a_training_step_copies_to_the_host_once_whatever_the_model_and_accumulation) {
    mp_backend be = counting_cpu();
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    const int layers[] = {1, 4}, accums[] = {1, 3}, steps = 3;
    llama_token_bufs tb;
    llama_token_bufs_init(&tb, &be, SB, ST);
    for (int li = 0; li < 2; li++)
        for (int ai = 0; ai < 2; ai++)
            for (int tied = 0; tied < 2; tied++) {
                llama_model *m = make_model(&be, &mesh, layers[li], tied);
                for (int s = 0; s < steps; s++) {
                    fill_ctx fc = {s, 97};
                    llama_step_args a = {{0.9, 0.95, 1e-8, 0.1}, 1e-3, s + 1, 1.0, accums[ai],
                                         (double)SB * ST * accums[ai]};
                    llama_step_result r;
                    int64_t before = g_to_host;
                    llama_train_step(m, &a, fill, &fc, &tb, &r);
                    cr_assert_eq(g_to_host - before, 1,
                                 "step %d of %d layers (%d parameters), grad_accum %d, tied %d: %lld to_host calls",
                                 s + 1, layers[li], llama_num_params(m), accums[ai], tied,
                                 (long long)(g_to_host - before));
                    cr_assert(isfinite(r.loss) && isfinite(r.grad_norm) && r.grad_norm > 0);
                }
                llama_destroy(m);
            }
    llama_token_bufs_free(&tb);
    mp_mesh_destroy(&mesh);
}

Test(step_contract, device_sums_are_bitwise_the_host_sums) {
    mp_backend be = counting_cpu();
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    const int accum = 3;
    int32_t in[SB * ST], tgt[SB * ST];
    llama_model *a = make_model(&be, &mesh, 3, 0), *b = make_model(&be, &mesh, 3, 0);
    fill_ctx fc = {0, 97};
    float scale = (float)(1.0 / ((double)SB * ST * accum));
    /* the host way: one copy per micro-batch's loss (llama_forward), one norm (llama_grad_norm) */
    llama_zero_grad(b);
    double loss_host = 0;
    for (int k = 0; k < accum; k++) {
        fill(&fc, k, in, tgt);
        loss_host += llama_forward(b, in, tgt);
        llama_backward(b, scale);
    }
    llama_sync_grads(b);
    double norm_host = llama_grad_norm(b);
    /* the step: the same sums on the device, one copy */
    llama_step_args args = {{0.9, 0.95, 1e-8, 0.1}, 1e-3, 1, 0.0, accum, (double)SB * ST * accum};
    llama_step_result r;
    llama_token_bufs tb;
    llama_token_bufs_init(&tb, &be, SB, ST);
    llama_train_step(a, &args, fill, &fc, &tb, &r);
    llama_token_bufs_free(&tb);
    cr_assert_eq(r.loss, loss_host / args.tokens_per_step, "loss %.17g vs host %.17g", r.loss,
                 loss_host / args.tokens_per_step);
    cr_assert_eq(r.grad_norm, norm_host, "norm %.17g vs host %.17g", r.grad_norm, norm_host);
    llama_destroy(a);
    llama_destroy(b);
    mp_mesh_destroy(&mesh);
}

/* The CPU's side of the streams/events/pinned-memory contract: every handle is usable in every call
 * (nothing is ever in flight, so every wait returns), and pinned host memory is zero-filled and charged
 * to its category, large (fresh pages) and small alike, and given back in full. */
Test(step_contract, cpu_streams_events_and_host_memory_honour_the_contract) {
    mp_backend *be = mp_backend_cpu();
    mp_stream s = be->stream_create(be);
    mp_event e = be->event_create(be);
    cr_assert_not_null(s);
    cr_assert_not_null(e);
    be->event_record(be, e, NULL);          /* on the compute stream */
    be->stream_wait_event(be, s, e);        /* the communication stream waits for it */
    be->event_record(be, e, s);
    be->stream_wait_event(be, NULL, e);
    be->event_sync(be, e);
    be->synchronize(be);
    be->event_destroy(be, e);
    be->stream_destroy(be, s);
    size_t sizes[] = {64, 3 * MP_ZEROED_MMAP_MIN + 8};
    for (int i = 0; i < 2; i++) {
        int64_t before = mp_mem_current(MP_MEM_CKPT);
        unsigned char *p = be->host_alloc(be, sizes[i], MP_MEM_CKPT);
        cr_assert_eq(mp_mem_current(MP_MEM_CKPT) - before, (int64_t)sizes[i]);
        cr_assert_eq((uintptr_t)p % 64, 0, "not 64-byte aligned");
        for (size_t j = 0; j < sizes[i]; j += 4093) cr_assert_eq(p[j], 0, "byte %zu of %zu not zero", j, sizes[i]);
        cr_assert_eq(p[sizes[i] - 1], 0);
        memset(p, 0xab, sizes[i]);
        be->host_free(be, p, sizes[i], MP_MEM_CKPT);
        cr_assert_eq(mp_mem_current(MP_MEM_CKPT), before);
    }
}

/* A forward-only model (eval, sample: llama_options.inference) holds no gradients and no moments; the
 * plan says so category by category, and its forward is bitwise the training model's. */
Test(step_contract, a_forward_only_model_holds_weights_and_activations_only) {
    const int B = 2, T = 32;
    llama_config c = small_config(2, 1);
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_err err;
    llama_model *train = NULL, *fwd = NULL;
    llama_options ot = {B, T, 0, 1}, oi = {B, T, 0, 1};
    oi.inference = 1;
    cr_assert_eq(llama_create(&train, &c, &ot, &mesh, mp_backend_cpu(), &err), MP_OK, "%s", err.msg);
    int64_t before[MP_MEM_NCAT];
    for (int k = 0; k < MP_MEM_NCAT; k++) before[k] = mp_mem_current((mp_mem_cat)k);
    cr_assert_eq(llama_create(&fwd, &c, &oi, &mesh, mp_backend_cpu(), &err), MP_OK, "%s", err.msg);
    llama_memory_plan plan;
    cr_assert_eq(llama_plan_memory(&c, &oi, NULL, 1, 0, 1, 0, &plan, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(plan.bytes[MP_MEM_GRADS], 0);
    cr_assert_eq(plan.bytes[MP_MEM_OPTIM], 0);
    for (int k = MP_MEM_PARAMS; k <= MP_MEM_ACTS; k++)
        cr_assert_eq(mp_mem_current((mp_mem_cat)k) - before[k], plan.bytes[k], "category %s: allocator %lld, plan %lld",
                     mp_mem_cat_name((mp_mem_cat)k), (long long)(mp_mem_current((mp_mem_cat)k) - before[k]),
                     (long long)plan.bytes[k]);
    llama_init_weights(train, 7);
    llama_init_weights(fwd, 7);
    int32_t in[B * T], tgt[B * T];
    for (int i = 0; i < B * T; i++) in[i] = (i * 7 + 3) % 97, tgt[i] = (i * 5 + 1) % 97;
    double a = llama_forward(train, in, tgt), b = llama_forward(fwd, in, tgt);
    cr_assert(a == b, "forward-only loss %.17g, training model's %.17g", b, a);
    llama_destroy(fwd);
    llama_destroy(train);
    mp_mesh_destroy(&mesh);
}

/* A KV-cache model (llama_options.kv_cache) computes the whole-sequence model's logits: a prefill of 70
 * tokens (past the attention's 64-row blocks), then one position at a time to 150, each position's logits
 * against the same position's row of one whole-sequence forward, on the fp32 CPU backend and its bf16
 * emulation. The plan's categories are what the allocator charged, and the KV cache is L x 2 x seq_len x
 * kv width. The difference is rounding only (one-row GEMMs and key blocks summed in other groupings):
 * |diff| <= 1e-5 relative to the logits' scale on fp32; on bf16 the activations round to 8 bits, so a
 * different summation can flip a rounding, and the bound is 2% of the scale. */
static void check_kv_cache(mp_backend *be, double tol) {
    const int T = 150, P = 70;
    llama_config c = small_config(2, 1);
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_err err;
    llama_model *full = NULL, *kv = NULL;
    llama_options of = {1, T, 0, 1}, ok = {1, T, 0, 1};
    of.inference = ok.inference = 1;
    ok.kv_cache = 1;
    ok.kv_chunk = P;
    cr_assert_eq(llama_create(&full, &c, &of, &mesh, be, &err), MP_OK, "%s", err.msg);
    int64_t before[MP_MEM_NCAT];
    for (int k = 0; k < MP_MEM_NCAT; k++) before[k] = mp_mem_current((mp_mem_cat)k);
    cr_assert_eq(llama_create(&kv, &c, &ok, &mesh, be, &err), MP_OK, "%s", err.msg);
    llama_memory_plan plan;
    ok.act_dtype = be->act_dtype;
    cr_assert_eq(llama_plan_memory(&c, &ok, NULL, 1, 0, 1, 0, &plan, &err), MP_OK, "%s", err.msg);
    for (int k = MP_MEM_PARAMS; k <= MP_MEM_ACTS; k++)
        cr_assert_eq(mp_mem_current((mp_mem_cat)k) - before[k], plan.bytes[k], "category %s",
                     mp_mem_cat_name((mp_mem_cat)k));
    int64_t kvw = (int64_t)c.num_key_value_heads * llama_head_dim(&c), es = (int64_t)mp_act_size(be);
    cr_assert_eq(plan.kv_cache, 2 * 2 * ((T * kvw * es + 63) / 64 * 64), "KV cache %lld bytes", (long long)plan.kv_cache);
    llama_init_weights(full, 5);
    llama_init_weights(kv, 5);
    int32_t in[T];
    for (int i = 0; i < T; i++) in[i] = (i * 31 + 7) % 97;
    llama_forward(full, in, NULL);
    int V = c.vocab_size, vl;
    llama_logits(full, NULL, 0, 0, NULL, &vl, NULL);
    float *want = malloc(sizeof(float) * (size_t)T * vl), *got = malloc(sizeof(float) * (size_t)vl);
    llama_logits(full, want, 0, T, NULL, NULL, NULL);
    double scale = 0, worst = 0;
    for (int64_t i = 0; i < (int64_t)T * vl; i++) scale = fmax(scale, fabs(want[i]));
    for (int pos = P - 1; pos < T; pos++) {
        if (pos == P - 1) llama_forward_kv(kv, in, P, 0);
        else llama_forward_kv(kv, in + pos, 1, pos);
        llama_logits(kv, got, 0, 1, NULL, NULL, NULL);
        for (int j = 0; j < V; j++) worst = fmax(worst, fabs(got[j] - want[(size_t)pos * vl + j]));
    }
    cr_assert(worst <= tol * scale, "%s: the KV cache's logits differ by %g (scale %g)", be->name, worst, scale);
    free(want);
    free(got);
    llama_destroy(kv);
    llama_destroy(full);
    mp_mesh_destroy(&mesh);
}

Test(step_contract, a_kv_cache_model_gives_the_whole_sequence_logits_at_every_position) {
    check_kv_cache(mp_backend_cpu(), 1e-5);
    check_kv_cache(mp_backend_cpu_bf16(), 2e-2);
}

/* ---- the backend's limits and scratch, checked at creation ---- */

/* small_config with head_dim hd (4 heads of hd, 2 kv heads). */
static llama_config hd_config(int hd) {
    llama_config c = small_config(1, 0);
    c.head_dim = hd;
    return c;
}

Test(step_contract, a_head_dim_beyond_the_backends_attention_limit_is_refused_at_creation) {
    cr_assert_eq(mp_backend_cpu()->attn_max_head_dim, 0, "the CPU kernels take any head_dim: 0 = no limit");
    cr_assert_eq(mp_backend_cpu_bf16()->attn_max_head_dim, 0);
    mp_backend limited = *mp_backend_cpu();   /* as CUDA's, with a limit of 64 */
    limited.attn_max_head_dim = 64;
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    llama_options o = {SB, ST, 0, 1};
    mp_err err;
    llama_model *m = (llama_model *)&err;
    llama_config c = hd_config(128);
    cr_assert_eq(llama_create(&m, &c, &o, &mesh, &limited, &err), MP_EINPUT);
    cr_assert_null(m);
    cr_assert_str_eq(err.msg, "head_dim 128 exceeds the cpu backend's attention limit of 64 (device cpu)");
    llama_memory_plan plan;   /* the memory plan (the commands' first look at the model) refuses it too */
    cr_assert_eq(llama_plan_memory(&c, &o, &limited, 1, 0, 1, 0, &plan, &err), MP_EINPUT);
    cr_assert_str_eq(err.msg, "head_dim 128 exceeds the cpu backend's attention limit of 64 (device cpu)");
    /* the limit itself is accepted, and the CPU table's 0 takes 128 */
    c = hd_config(64);
    cr_assert_eq(llama_create(&m, &c, &o, &mesh, &limited, &err), MP_OK, "%s", err.msg);
    llama_destroy(m);
    c = hd_config(128);
    cr_assert_eq(llama_create(&m, &c, &o, &mesh, mp_backend_cpu(), &err), MP_OK, "%s", err.msg);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
}

/* A backend with op scratch (as CUDA's): scratch_bytes a function of every argument, and what
 * scratch_reserve was asked for. */
static struct { int calls, tokens, ncs; mp_colsum cs[8]; } g_reserved;
static int64_t fake_scratch_bytes(int tokens, const mp_colsum *cs, int ncs) {
    int64_t b = 8 * (int64_t)tokens;
    for (int i = 0; i < ncs; i++) b += 3 * cs[i].rows + 5 * (int64_t)cs[i].cols + 7;
    return b;
}
static void fake_scratch_reserve(mp_backend *be, int tokens, const mp_colsum *cs, int ncs) {
    (void)be;
    cr_assert_leq(ncs, 8);
    g_reserved.calls++;
    g_reserved.tokens = tokens;
    g_reserved.ncs = ncs;
    memcpy(g_reserved.cs, cs, (size_t)ncs * sizeof *cs);
}

/* Creates a model of c (training unless inference) on the fake-scratch table: the plan's activations are
 * the allocator's plus scratch_bytes of what scratch_reserve was asked for, reserved once. */
static void check_scratch_planned(const llama_config *c, int inference) {
    mp_backend be = *mp_backend_cpu();
    be.scratch_bytes = fake_scratch_bytes;
    be.scratch_reserve = fake_scratch_reserve;
    memset(&g_reserved, 0, sizeof g_reserved);
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    llama_options o = {SB, ST, 0, 1, .inference = inference};
    mp_err err;
    llama_model *m = NULL;
    int64_t before = mp_mem_current(MP_MEM_ACTS);
    cr_assert_eq(llama_create(&m, c, &o, &mesh, &be, &err), MP_OK, "%s", err.msg);
    int64_t held = mp_mem_current(MP_MEM_ACTS) - before;
    cr_assert_eq(g_reserved.calls, 1);
    llama_memory_plan plan;
    cr_assert_eq(llama_plan_memory(c, &o, &be, 1, 0, 1, 0, &plan, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(plan.bytes[MP_MEM_ACTS], held + fake_scratch_bytes(g_reserved.tokens, g_reserved.cs, g_reserved.ncs));
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
}

Test(step_contract, the_backends_op_scratch_is_reserved_at_creation_and_planned) {
    const int N = SB * ST, D = 32, hd = 8;   /* small_config: 4 heads, 2 kv heads */
    llama_config c = small_config(2, 0);
    check_scratch_planned(&c, 0);   /* embed_bwd over N tokens, rmsnorm_bwd's N x D */
    cr_assert_eq(g_reserved.tokens, N);
    cr_assert_eq(g_reserved.ncs, 1);
    cr_assert(g_reserved.cs[0].rows == N && g_reserved.cs[0].cols == D);
    c.qkv_bias = 1;   /* Qwen2: bias_bwd over the fused q | k | v, (4 + 2 x 2) heads of hd */
    c.qk_norm = 1;    /* Qwen3: the q and k head norms, N x heads rows of hd */
    check_scratch_planned(&c, 0);
    cr_assert_eq(g_reserved.ncs, 4);
    cr_assert(g_reserved.cs[1].rows == N && g_reserved.cs[1].cols == 8 * hd);
    cr_assert(g_reserved.cs[2].rows == N * 4 && g_reserved.cs[2].cols == hd);
    cr_assert(g_reserved.cs[3].rows == N * 2 && g_reserved.cs[3].cols == hd);
    check_scratch_planned(&c, 1);   /* forward only: no backward, no scratch */
    cr_assert(g_reserved.tokens == 0 && g_reserved.ncs == 0);
}
