/*
 * tests/test_recompute.c — activation recomputation (llama_options.recompute, `train --recompute full`)
 * on a 1x1 mesh, on the fp32 CPU backend and on cpu-bf16 (the GPU's bf16 storage and rounding emulated):
 * a model that keeps each block's input only and runs the block's forward again before its backward is
 * bitwise the plain model, for
 *   - the loss and logits of a forward, every parameter's gradient after two accumulated backwards, the
 *     losses of three AdamW steps with gradient accumulation, and the final weights;
 *   - a plain Llama (untied, MHA), a GQA model with tied embeddings, a Qwen-style one (q/k/v biases,
 *     q/k norms, head_dim 12 != hidden/heads) and a Qwen2 one with a sliding window smaller than the
 *     sequence from layer 1 on (layer 0 full causal): 3 layers each, so two blocks are recomputed.
 * And the memory: the recomputing model allocates exactly its plan, the plain model's activations less
 * (L - 1) blocks' worth but the inputs; a forward-only model ignores the option; a value other than none
 * (0) or full (1) is refused. The mesh variants (tp, dp, SP) are in tests/mpi_llama.c. Last, from the plan
 * alone, what recomputation lets one H200 train (the 1B and 3B shapes; docs/DESIGN_NOTES.md).
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
#include "tests/testutil.h"

enum { B = 2, T = 24, ACCUM = 2, STEPS = 3 };
typedef enum { CFG_LLAMA, CFG_GQA_TIED, CFG_FAMILY, CFG_WINDOW } cfg_kind;

static llama_config make_config(cfg_kind k) {
    llama_config c;
    llama_config_default(&c);
    c.hidden_size = 32; c.intermediate_size = 72; c.num_hidden_layers = 3;
    c.num_attention_heads = 4; c.num_key_value_heads = 4; c.vocab_size = 97; c.tie_word_embeddings = 0;
    c.max_position_embeddings = 64;
    if (k == CFG_GQA_TIED) c.num_key_value_heads = 2, c.tie_word_embeddings = 1;
    if (k == CFG_FAMILY) c.num_key_value_heads = 2, c.head_dim = 12, c.qkv_bias = 1, c.qk_norm = 1;
    if (k == CFG_WINDOW)   /* Qwen2's layout: full layers, then sliding ones */
        c.family = LLAMA_FAMILY_QWEN2, c.qkv_bias = 1, c.sliding_window = 7, c.first_sliding_layer = 1;
    return c;
}

/* Seeded weights; vectors (norm weights, biases) moved away from 1 and 0 so that they matter. */
static void init_model(llama_model *m) {
    llama_init_weights(m, 77);
    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        if (p->ndim != 1) continue;
        for (int64_t r = 0; r < p->shard_rows; r++) p->shard[r] += 0.25f * (float)sin(0.37 * (double)(r + 5 * i));
    }
    llama_shards_changed(m);
}

/* Micro-batch k of step s: a hashed token stream. */
typedef struct fill_ctx { int step, vocab; } fill_ctx;
static void fill(void *vctx, int k, int32_t *in, int32_t *tgt) {
    const fill_ctx *c = vctx;
    for (int i = 0; i < B * T + 1; i++) {
        uint32_t x = (uint32_t)(c->step * 1000003 + k * 7919 + i) * 2654435761u;
        x ^= x >> 15;
        int32_t t = (int32_t)(x % (uint32_t)c->vocab);
        if (i < B * T) in[i] = t;
        if (i > 0) tgt[i - 1] = t;
    }
}

/* What a model does: forward loss and logits, gradients of two accumulated backwards, step losses, and
 * the final weights, all copied out for a bitwise comparison. */
typedef struct run_out {
    double loss, steps[STEPS];
    float *logits, *grads, *weights;
    int64_t nlogits, nparams, acts;
} run_out;

static void run(const llama_config *c, mp_backend *be, int recompute, run_out *out) {
    llama_options o = {B, T, 0, 1, .recompute = recompute};
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_err err;
    llama_model *m = NULL;
    int64_t before = mp_mem_current(MP_MEM_ACTS);
    cr_assert_eq(llama_create(&m, c, &o, &mesh, be, &err), MP_OK, "%s", err.msg);
    out->acts = mp_mem_current(MP_MEM_ACTS) - before;
    llama_memory_plan plan;
    o.act_dtype = be->act_dtype;
    cr_assert_eq(llama_plan_memory(c, &o, NULL, 1, 0, 1, 0, &plan, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(plan.bytes[MP_MEM_ACTS], out->acts, "recompute %d: plan %lld B, allocated %lld B", recompute,
                 (long long)plan.bytes[MP_MEM_ACTS], (long long)out->acts);
    init_model(m);
    int32_t in[B * T], tgt[B * T];
    fill_ctx fc = {0, c->vocab_size};
    int v_local;
    llama_logits(m, NULL, 0, 0, NULL, &v_local, NULL);
    out->nlogits = (int64_t)B * T * v_local;
    out->logits = malloc(sizeof(float) * (size_t)out->nlogits);
    llama_zero_grad(m);
    for (int k = 0; k < ACCUM; k++) {   /* two micro-batches: the weight gradients accumulate */
        fill(&fc, k, in, tgt);
        double l = llama_forward(m, in, tgt);
        if (k == 0) out->loss = l, llama_logits(m, out->logits, 0, B * T, NULL, NULL, NULL);
        llama_backward(m, 1.0f / (ACCUM * B * T));
    }
    out->nparams = 0;
    for (int i = 0; i < llama_num_params(m); i++) out->nparams += llama_shard_numel(llama_param_at(m, i));
    out->grads = malloc(sizeof(float) * (size_t)out->nparams);
    out->weights = malloc(sizeof(float) * (size_t)out->nparams);
    for (int i = 0, off = 0; i < llama_num_params(m); off += (int)llama_shard_numel(llama_param_at(m, i)), i++)
        memcpy(out->grads + off, llama_param_at(m, i)->shard_grad, sizeof(float) * (size_t)llama_shard_numel(llama_param_at(m, i)));
    llama_token_bufs tb;
    llama_token_bufs_init(&tb, be, B, T);
    fc.step = 1;   /* the same batch every step: the loss must fall */
    for (int s = 0; s < STEPS; s++) {
        llama_step_args a = {{0.9, 0.95, 1e-8, 0.1}, 3e-3, s + 1, 1.0, ACCUM, (double)ACCUM * B * T};
        llama_step_result r;
        llama_train_step(m, &a, fill, &fc, &tb, &r);
        out->steps[s] = r.loss;
    }
    for (int i = 0, off = 0; i < llama_num_params(m); off += (int)llama_shard_numel(llama_param_at(m, i)), i++)
        memcpy(out->weights + off, llama_param_at(m, i)->shard, sizeof(float) * (size_t)llama_shard_numel(llama_param_at(m, i)));
    llama_token_bufs_free(&tb);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
}

static void run_free(run_out *r) {
    free(r->logits);
    free(r->grads);
    free(r->weights);
}

/* The plain and the recomputing model of config k on backend be: bitwise the same, and less memory. */
static void check_bitwise(cfg_kind k, mp_backend *be) {
    llama_config c = make_config(k);
    run_out a, b;
    run(&c, be, LLAMA_RECOMPUTE_NONE, &a);
    run(&c, be, LLAMA_RECOMPUTE_FULL, &b);
    cr_assert(isfinite(a.loss) && a.steps[STEPS - 1] < a.steps[0], "the plain model trains (%g -> %g)", a.steps[0],
              a.steps[STEPS - 1]);
    cr_assert(!memcmp(&a.loss, &b.loss, sizeof a.loss), "forward loss %.17g vs %.17g", a.loss, b.loss);
    cr_assert(!memcmp(a.logits, b.logits, sizeof(float) * (size_t)a.nlogits), "logits differ");
    cr_assert(!memcmp(a.grads, b.grads, sizeof(float) * (size_t)a.nparams), "gradients differ (config %d, %s)", k,
              be->name);
    for (int s = 0; s < STEPS; s++)
        cr_assert(!memcmp(&a.steps[s], &b.steps[s], sizeof(double)), "step %d loss %.17g vs %.17g", s + 1, a.steps[s],
                  b.steps[s]);
    cr_assert(!memcmp(a.weights, b.weights, sizeof(float) * (size_t)a.nparams), "final weights differ");
    cr_assert_lt(b.acts, a.acts, "recompute full allocates %lld B of activations, none %lld B", (long long)b.acts,
                 (long long)a.acts);
    run_free(&a);
    run_free(&b);
}

Test(recompute, cpu_llama) { check_bitwise(CFG_LLAMA, mp_backend_cpu()); }
Test(recompute, cpu_gqa_tied) { check_bitwise(CFG_GQA_TIED, mp_backend_cpu()); }
Test(recompute, cpu_family_biases_qk_norm) { check_bitwise(CFG_FAMILY, mp_backend_cpu()); }
Test(recompute, cpu_sliding_window) { check_bitwise(CFG_WINDOW, mp_backend_cpu()); }
Test(recompute, cpu_bf16_llama) { check_bitwise(CFG_LLAMA, mp_backend_cpu_bf16()); }
Test(recompute, cpu_bf16_gqa_tied) { check_bitwise(CFG_GQA_TIED, mp_backend_cpu_bf16()); }
Test(recompute, cpu_bf16_family_biases_qk_norm) { check_bitwise(CFG_FAMILY, mp_backend_cpu_bf16()); }
Test(recompute, cpu_bf16_sliding_window) { check_bitwise(CFG_WINDOW, mp_backend_cpu_bf16()); }

/* The activations saved: every block's input stays, the rest of L - 1 blocks goes. */
Test(recompute, plan_keeps_the_inputs_and_one_block) {
    llama_config c = make_config(CFG_LLAMA);
    llama_memory_plan none, full, one_none, one_full;
    llama_options o = {B, T, 0, 1};
    mp_err err;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &none, &err), MP_OK, "%s", err.msg);
    o.recompute = LLAMA_RECOMPUTE_FULL;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &full, &err), MP_OK, "%s", err.msg);
    /* a layer's activations: (the 3-layer plan - the 1-layer plan) / 2 (the rest is the same) */
    llama_config c1 = c;
    c1.num_hidden_layers = 1;
    cr_assert_eq(llama_plan_memory(&c1, &o, NULL, 1, 0, 1, 0, &one_full, &err), MP_OK, "%s", err.msg);
    o.recompute = LLAMA_RECOMPUTE_NONE;
    cr_assert_eq(llama_plan_memory(&c1, &o, NULL, 1, 0, 1, 0, &one_none, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(one_full.bytes[MP_MEM_ACTS], one_none.bytes[MP_MEM_ACTS], "one layer: nothing to share");
    int64_t layer = none.bytes[MP_MEM_ACTS] - one_none.bytes[MP_MEM_ACTS];   /* 2 layers' worth */
    int64_t input = (int64_t)B * T * c.hidden_size * 4;                      /* x_in, fp32, 64-byte multiple */
    int64_t sync = 2 * c.hidden_size * 4;   /* a layer's two norm weights in sync_buf: kept in both modes */
    cr_assert_eq(layer % 2, 0);
    cr_assert_eq(none.bytes[MP_MEM_ACTS] - full.bytes[MP_MEM_ACTS], 2 * (layer / 2 - sync - input),
                 "none %lld B, full %lld B, a layer %lld B, an input %lld B", (long long)none.bytes[MP_MEM_ACTS],
                 (long long)full.bytes[MP_MEM_ACTS], (long long)(layer / 2), (long long)input);
    cr_assert_eq(none.total - full.total, none.bytes[MP_MEM_ACTS] - full.bytes[MP_MEM_ACTS]);
}

Test(recompute, forward_only_ignores_it_and_bad_values_are_refused) {
    llama_config c = make_config(CFG_LLAMA);
    llama_options o = {B, T, 0, 1, .inference = 1};
    llama_memory_plan a, b;
    mp_err err;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &a, &err), MP_OK, "%s", err.msg);
    o.recompute = LLAMA_RECOMPUTE_FULL;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &b, &err), MP_OK, "%s", err.msg);
    cr_assert_eq(a.total, b.total);
    o.recompute = 2;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &b, &err), MP_EINPUT);
    cr_assert(strstr(err.msg, "recompute 2: expected none (0) or full (1)"), "%s", err.msg);
}

/* ---- what recomputation lets one H200 train (plan only; docs/DESIGN_NOTES.md "Activation recomputation") ---- */

/* The plan of config file path (under the source tree) on one bf16 GPU rank at micro-batch B x seq_len
 * T, with the given mode: the model's bytes (parameters fp32 + bf16 copy, gradients, moments, activations). */
static int64_t plan_1gpu(const char *path, int Bm, int Tm, int recompute) {
    char full[1024];
    snprintf(full, sizeof full, "%s/%s", tu_src(), path);
    llama_config c;
    mp_err err;
    cr_assert_eq(llama_config_load(full, &c, NULL, &err), MP_OK, "%s", err.msg);
    if (c.max_position_embeddings < Tm) c.max_position_embeddings = Tm;   /* the shape, at a longer context */
    llama_options o = {Bm, Tm, 0, 1, .act_dtype = MP_BF16, .recompute = recompute};
    llama_memory_plan plan;
    cr_assert_eq(llama_plan_memory(&c, &o, NULL, 1, 0, 1, 0, &plan, &err), MP_OK, "%s", err.msg);
    fprintf(stderr, "plan %s B %d T %d recompute %d: total %.1f GB, activations %.1f GB\n", path, Bm, Tm, recompute,
            plan.total / 1e9, plan.bytes[MP_MEM_ACTS] / 1e9);
    return plan.total;
}

/* One H200 as the device tool reports it (about 139 GiB usable), less 2 GiB for what the model's plan
 * leaves out on a GPU: the CUDA context, cuBLAS's workspace, the backend's op scratch (small). */
static const int64_t H200_BOUND = (int64_t)(139 - 2) << 30;

/* The figures docs/DESIGN_NOTES.md records ("Activation recomputation"): the 1B shape (configs/llama_1b.json)
 * fits at 16 x 2048 either way, at 16 x 8192 only with full; the 3B shape (OpenLLaMA 3B) at 16 x 2048 only
 * with full. */
Test(recompute, what_fits_one_h200) {
    const char *b1 = "configs/llama_1b.json", *b3 = "tests/configs/hf_open_llama_3b.json";
    cr_assert_leq(plan_1gpu(b1, 16, 2048, LLAMA_RECOMPUTE_FULL), H200_BOUND);
    cr_assert_leq(plan_1gpu(b1, 16, 2048, LLAMA_RECOMPUTE_NONE), H200_BOUND);   /* 64.5 GB: fits without */
    cr_assert_gt(plan_1gpu(b1, 16, 8192, LLAMA_RECOMPUTE_NONE), H200_BOUND);
    cr_assert_leq(plan_1gpu(b1, 16, 8192, LLAMA_RECOMPUTE_FULL), H200_BOUND);
    cr_assert_gt(plan_1gpu(b3, 16, 2048, LLAMA_RECOMPUTE_NONE), H200_BOUND);
    cr_assert_leq(plan_1gpu(b3, 16, 2048, LLAMA_RECOMPUTE_FULL), H200_BOUND);
}
