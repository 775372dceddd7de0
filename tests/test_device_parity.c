/*
 * tests/test_device_parity.c — a device against the fp32 CPU backend, on the same tiny Llama.
 *
 *   test_device_parity [--seq-len T] [--family HD] [--window W] [DEVICE [CONFIG.json...]]
 *
 * DEVICE is cpu-bf16, cuda, or cpu (the default: the reference against itself, which must agree bit for
 * bit: the comparison machinery and the reference's run-to-run determinism). CONFIG defaults to
 * tests/configs/cli_tiny.json (untied head) and tests/configs/torch_gqa_tied.json (tied embeddings),
 * found through $MP_SRC or the source directory compiled in. ctest runs it as device_parity_cpu_bf16 and
 * device_parity_cuda (tests/device_parity.cmake); it is a plain program with its own main (the
 * tests/test_*.c glob also builds it as a Criterion binary: the Criterion flags of that ctest entry,
 * e.g. --jobs 2, are ignored and it runs the cpu self-check).
 *
 * --family HD gives each config what the Qwen families add: q/k/v biases, q/k norms and head_dim HD, the
 * biases and q/k norm weights set away from 0 and 1 after initialisation (from the seed, the same on
 * both devices): the new ops (bias_add, bias_bwd, head_rmsnorm_fwd/_bwd) under the device's precision.
 * T (tokens per sequence) is 16 unless --seq-len: scripts/gpu-check.sh and device_parity_*_hd64 run
 * tests/configs/parity_hd64.json (head dim 64) at T = 112, several 32-key tiles of the attention kernels
 * and a partial last one. --window W gives every layer a sliding attention window of W keys (the config's
 * sliding_window, from layer 0; core/backend.h attn_fwd), set here after the config is read:
 * device_parity_*_window and gpu-check.sh's device_parity_window run parity_hd64.json at T = 112 with
 * W = 40, a window smaller than T that starts inside the attention kernels' key tiles. The head sizes of
 * real models: device_parity_*_family128 (Qwen3's 128: on CUDA the tensor-core attention kernels, which take
 * 64 and 128) and _family96 (Phi-3's 96: the SIMT kernels) on the two default configs, and
 * _family128_window (gpu-check.sh's device_parity_family128_window) parity_hd64.json at T = 112 with
 * --family 128 --window 40: biases and q/k norms under a window, two 64-key tiles (the last partial).
 * For each config, on a 1x1 mesh (mp_mesh_init_single), the model is built on "cpu" and on DEVICE from
 * the same seed and fed the same two micro-batches of tokens (splitmix64 streams). Compared, in order:
 *   1. the logits of llama_forward with targets on micro-batch 1 (llama_logits: fp32 on the host);
 *   2. the losses of the two forwards;
 *   3. every parameter's gradient (shard_grad, fp32 on every device) after llama_backward(1/(2 tokens))
 *      of both micro-batches, so the weight gradients accumulate (fp32 GEMMs with beta = 1, embed_bwd);
 *   4. the losses of 3 AdamW steps (llama_train_step, grad_accum 2 on the same two micro-batches, lr 3e-3,
 *      clip 1) and the loss after the third update, and the training progress (first loss minus each
 *      later one), which an update that misses the bf16 compute copies leaves at 0; on the host
 *      backends, steps 2 and 3 must make no allocation (mp_mem_alloc_calls: warm after step 1).
 * A table gives, per tensor, the max abs error, the reference's max abs, their ratio and the norm-wise
 * relative error |a - r|_2 / |r|_2. Exit 0 when everything is within tolerance, 1 naming the first tensor
 * that is not (or is not finite), 2 bad usage or config, 77 when DEVICE is cuda and cannot be had (no
 * usable GPU, built without CUDA, or a CUDA build whose table is not wired yet: ctest's SKIP_RETURN_CODE).
 *
 * Tolerances (bf16 storage, fp32 math on both sides; bf16 unit roundoff u = 2^-9 ~ 1.95e-3). Each is ~3x
 * (elementwise and norm-wise tensor errors) to ~10x (losses, which average) what cpu-bf16 shows on these
 * configs; a CUDA backend's summation order and FMAs move bf16 roundings around but do not add a term of
 * their own size, so the same tolerances apply to it:
 *   logits     norm-wise <= 1.5e-2, max abs <= 2e-2 max|ref| (measured 4.8e-3 and 5.5e-3: every op's output
 *              is rounded, ~20 ops deep, weights rounded too: a few u);
 *   losses     relative <= 1e-3 (measured <= 8e-5: a mean over tokens, the roundings average out);
 *   gradients  norm-wise <= 3e-2, max abs <= 5e-2 max|ref| (measured <= 1.0e-2 and 1.4e-2: the backward
 *              reads bf16 activations and rounds every activation gradient, dlogits included, before the
 *              fp32 weight-gradient sums, and small gradients cancel);
 *   AdamW      step losses relative <= 3e-3 (measured <= 3.1e-4), progress relative <= 3e-2 (<= 3.8e-3).
 * What they catch (tried against a cpu-bf16 with one op broken at a time, tests/ untouched): rmsnorm_bwd's
 * dx written instead of accumulated, rope_bwd rotating the wrong way, a fp32 GEMM ignoring beta (the
 * second micro-batch), a bf16-C GEMM ignoring beta, AdamW not writing the compute copy, and truncation
 * instead of round-to-nearest-even in every store. What they cannot: a 1-2% scale error in one op's
 * output (dup or dk scaled by 1.01 / 1.02 passed), which stays inside bf16's own noise.
 * With DEVICE cpu the tolerances are 0: the same table and the same arithmetic must agree bit for bit.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_config.h"
#include "layers/llama_train.h"

#ifndef MP_SRC_DIR
#define MP_SRC_DIR "."
#endif

#define SEED 1337u
#define BATCH 2
#define SEQ 16   /* tokens per sequence unless --seq-len */
#define NSTEPS 3

typedef struct tolerances {
    double logits_rel, logits_max;
    double loss_rel;
    double grad_rel, grad_max;
    double step_rel, progress_rel;
} tolerances;

static const tolerances TOL_BF16 = {1.5e-2, 2e-2, 1e-3, 3e-2, 5e-2, 3e-3, 3e-2};
static const tolerances TOL_EXACT = {0, 0, 0, 0, 0, 0, 0};
/* --family: gradients norm-wise <= 8e-2, max abs <= 1e-1 max|ref| (measured 2.9e-2 and 3.0e-2, on the q_norm
 * weight: the q/k norms' backward removes the radial part of the bf16 dq / dk (cancellation), and their
 * weight gradient is a signed sum over N x heads into only head_dim elements; with biases of 0.5 instead of
 * 0.1 the q/k projections' gradients reach 4%, the bias then dominating the scores). The rest as TOL_BF16.
 * The same values hold at the real head sizes (cpu-bf16, measured): --family 128 4.5e-2 norm-wise and
 * 4.5e-2 max/refmax, on layer 1's k_proj.bias (k's bias adds the same q.b to every score of a query, which
 * softmax cancels but for the k norm: its gradient is a small difference of rounded terms, so it is the
 * least accurate, not a sign of a wrong op); --family 96 2.7e-2 and 1.8e-2; --family 128 --window 40 at
 * T = 112 1.7e-2 and 1.7e-2 (the logits, losses and AdamW rows as TOL_BF16's measurements). Not widened: the
 * largest is 1.8x under its bound, and a wrong window, bias or norm moves these by far more (a backward
 * with window + 8 at hd 128 fails _family128_window). */
static const tolerances TOL_BF16_FAMILY = {1.5e-2, 2e-2, 1e-3, 8e-2, 1e-1, 3e-3, 3e-2};

/* splitmix64: the token streams depend only on the seed. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static void make_tokens(uint64_t key, int vocab, int32_t *in, int32_t *tgt, int n) {
    uint64_t s = key;
    for (int i = 0; i < n; i++) in[i] = (int32_t)(splitmix64(&s) % (uint64_t)vocab);
    for (int i = 0; i < n; i++) tgt[i] = (int32_t)(splitmix64(&s) % (uint64_t)vocab);
}

/* What one device produced. */
typedef struct run_out {
    int n_tok, v_valid;
    float *logits;             /* [n_tok, v_valid] */
    double loss, loss2;        /* mean per-token loss of the forwards of micro-batch 1 and 2 */
    int nparams;
    char (*names)[96];
    int64_t *numel;
    float **grads;             /* per parameter, its shard_grad (1x1: the whole tensor) */
    double step_loss[NSTEPS + 1];   /* the steps' losses (before each update), then after the last update */
    int64_t step_allocs;       /* host allocations made by steps 2..NSTEPS (once warm: none) */
} run_out;

static void run_out_free(run_out *o) {
    free(o->logits);
    for (int i = 0; i < o->nparams; i++) free(o->grads[i]);
    free(o->grads);
    free(o->names);
    free(o->numel);
    memset(o, 0, sizeof *o);
}

/* The AdamW phase trains on the same two micro-batches every step (its losses then fall by training
 * alone, which the progress check compares). */
typedef struct fill_ctx {
    const int32_t *in[2], *tgt[2];
    int n_tok;
} fill_ctx;

static void fill_step(void *ctx, int k, int32_t *in, int32_t *tgt) {
    fill_ctx *f = ctx;
    memcpy(in, f->in[k], (size_t)f->n_tok * sizeof(int32_t));
    memcpy(tgt, f->tgt[k], (size_t)f->n_tok * sizeof(int32_t));
}

/* The logits of the last forward as fp32 on the host, [N, v_valid] packed (llama_logits converts them
 * from act_dtype and copies them to the host). */
static void read_logits(llama_model *m, int N, float *out, int *v_valid_out) {
    int v_start = 0, v_local = 0, v_valid = 0;
    llama_logits(m, NULL, 0, 0, &v_start, &v_local, &v_valid);
    float *host = mp_xmalloc((size_t)N * (v_local ? v_local : 1) * sizeof(float));
    llama_logits(m, host, 0, N, &v_start, &v_local, &v_valid);
    for (int r = 0; r < N; r++) memcpy(out + (size_t)r * v_valid, host + (size_t)r * v_local, (size_t)v_valid * sizeof(float));
    free(host);
    *v_valid_out = v_valid;
}

/* The q/k/v biases set to 0.5 u and the q/k norm weights to 1 + 0.25 u, u uniform in [-1, 1) from the
 * seed (nothing for a config without them). */
static void perturb_family(llama_model *m, mp_backend *be) {
    uint64_t s = SEED ^ 0x62696173ull;   /* "bias" */
    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        int bias = strstr(p->name, "_proj.bias") != NULL, qk = strstr(p->name, "self_attn.") && strstr(p->name, "_norm.");
        if (!bias && !qk) continue;
        int64_t n = llama_shard_numel(p);
        float *h = mp_xmalloc((size_t)n * sizeof(float));
        for (int64_t j = 0; j < n; j++) {
            float u = (float)((double)(splitmix64(&s) >> 11) * 0x1.0p-52 - 1.0);
            h[j] = bias ? 0.1f * u : 1.0f + 0.25f * u;
        }
        be->to_device(be, p->shard, h, (size_t)n * sizeof(float));
        free(h);
    }
    llama_shards_changed(m);
}

/* Builds the model of cfg on be, runs forward + backward on the batch, reads logits, loss and gradients,
 * then NSTEPS AdamW steps. */
static mp_code run_device(const llama_config *cfg, int seq, mp_backend *be, run_out *o, mp_err *err) {
    memset(o, 0, sizeof *o);
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_code rc = mp_mesh_attach_device(&mesh, be, MP_MESH_COMM_AUTO, err);
    if (rc) {
        mp_mesh_destroy(&mesh);
        return rc;
    }
    llama_options opt = {.micro_batch = BATCH, .seq_len = seq, .sp = 0, .reshard_after_forward = 1,
                         .act_dtype = be->act_dtype};
    llama_model *m = NULL;
    if ((rc = llama_create(&m, cfg, &opt, &mesh, be, err))) {
        mp_mesh_destroy(&mesh);
        return rc;
    }
    llama_init_weights(m, SEED);
    perturb_family(m, be);
    const int N = BATCH * seq;
    int32_t *in[2], *tgt[2];
    for (int k = 0; k < 2; k++) {
        in[k] = mp_xmalloc((size_t)N * sizeof(int32_t));
        tgt[k] = mp_xmalloc((size_t)N * sizeof(int32_t));
    }
    for (int k = 0; k < 2; k++) make_tokens(SEED ^ (0x746F6B656E73ull + (uint64_t)k), cfg->vocab_size, in[k], tgt[k], N);

    /* two micro-batches, so weight gradients accumulate (fp32 GEMMs with beta = 1, embed_bwd's +=) */
    o->n_tok = N;
    o->logits = mp_xmalloc((size_t)N * cfg->vocab_size * sizeof(float));
    llama_zero_grad(m);
    o->loss = llama_forward(m, in[0], tgt[0]) / N;
    read_logits(m, N, o->logits, &o->v_valid);
    llama_backward(m, 0.5f / (float)N);
    o->loss2 = llama_forward(m, in[1], tgt[1]) / N;
    llama_backward(m, 0.5f / (float)N);
    llama_sync_grads(m);
    be->synchronize(be);
    o->nparams = llama_num_params(m);
    o->names = mp_xcalloc(sizeof *o->names * (size_t)o->nparams);
    o->numel = mp_xcalloc(sizeof *o->numel * (size_t)o->nparams);
    o->grads = mp_xcalloc(sizeof *o->grads * (size_t)o->nparams);
    for (int i = 0; i < o->nparams; i++) {
        llama_param *p = llama_param_at(m, i);
        int64_t n = llama_shard_numel(p);
        snprintf(o->names[i], sizeof o->names[i], "%s", p->name);
        o->numel[i] = n;
        o->grads[i] = mp_xmalloc((size_t)(n ? n : 1) * sizeof(float));
        be->to_host(be, o->grads[i], p->shard_grad, (size_t)n * sizeof(float));
    }

    /* AdamW phase (llama_train_step zeroes the gradients itself): NSTEPS steps of grad_accum 2 on the two
     * micro-batches, then their loss after the last update */
    llama_token_bufs tb;
    llama_token_bufs_init(&tb, be, BATCH, seq);
    fill_ctx fc = {.in = {in[0], in[1]}, .tgt = {tgt[0], tgt[1]}, .n_tok = N};
    int64_t calls0 = 0;
    for (int s = 1; s <= NSTEPS; s++) {
        if (s == 2) calls0 = mp_mem_alloc_calls();   /* step 1 warmed every buffer (cpu-bf16: its arena) */
        llama_step_args a = {.hp = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1},
                             .lr = 3e-3, .step = s, .grad_clip = 1.0, .grad_accum = 2, .tokens_per_step = 2.0 * N};
        llama_step_result res;
        llama_train_step(m, &a, fill_step, &fc, &tb, &res);
        o->step_loss[s - 1] = res.loss;
    }
    o->step_allocs = mp_mem_alloc_calls() - calls0;
    o->step_loss[NSTEPS] = (llama_forward(m, in[0], tgt[0]) + llama_forward(m, in[1], tgt[1])) / (2.0 * N);
    for (int k = 0; k < 2; k++) {
        free(in[k]);
        free(tgt[k]);
    }
    llama_token_bufs_free(&tb);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
    return MP_OK;
}

/* Error statistics of a against the reference r. */
typedef struct errs {
    double max_abs, ref_max, rel;   /* rel: |a - r|_2 / |r|_2 */
    int finite;
} errs;

static errs compare(const float *a, const float *r, int64_t n) {
    errs e = {0, 0, 0, 1};
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(a[i]) || !isfinite(r[i])) e.finite = 0;
        double d = fabs((double)a[i] - r[i]);
        if (d > e.max_abs) e.max_abs = d;
        if (fabs(r[i]) > e.ref_max) e.ref_max = fabs(r[i]);
        num += d * d;
        den += (double)r[i] * r[i];
    }
    e.rel = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
    return e;
}

/* Prints one row and says whether it is within (rel_tol norm-wise, max_tol * max|ref| elementwise). */
static int row(const char *name, int64_t n, errs e, double rel_tol, double max_tol) {
    int ok = e.finite && e.rel <= rel_tol && e.max_abs <= max_tol * e.ref_max;
    printf("  %-52s %8lld  %10.3e  %10.3e  %10.3e  %10.3e  %s\n", name, (long long)n, e.max_abs, e.ref_max,
           e.ref_max > 0 ? e.max_abs / e.ref_max : (e.max_abs > 0 ? INFINITY : 0.0), e.rel, ok ? "ok" : "FAIL");
    return ok;
}

static int scalar_row(const char *name, double dev, double ref, double rel_tol) {
    double rel = dev == ref ? 0.0 : fabs(dev - ref) / fabs(ref);
    int ok = isfinite(dev) && isfinite(ref) && rel <= rel_tol;
    printf("  %-52s  ref %.9g  dev %.9g  rel %.3e  %s\n", name, ref, dev, rel, ok ? "ok" : "FAIL");
    return ok;
}

/* Compares DEVICE against cpu on one config; returns 0 ok, 1 out of tolerance (first named in *first). */
static int parity(const char *cfg_path, const llama_config *cfg, int seq, mp_backend *dev, const tolerances *t,
                  char *first, size_t first_cap, mp_err *err, mp_code *rc) {
    run_out ref, out;
    if ((*rc = run_device(cfg, seq, mp_backend_cpu(), &ref, err))) return 1;
    if ((*rc = run_device(cfg, seq, dev, &out, err))) {
        run_out_free(&ref);
        return 1;
    }
    printf("%s: cpu vs %s, batch %d x %d tokens, seed %u\n", cfg_path, dev->name, BATCH, seq, SEED);
    printf("  %-52s %8s  %10s  %10s  %10s  %10s\n", "tensor", "elements", "max abs", "ref max", "max/refmax",
           "rel (L2)");
    int bad = 0;
#define CHECK(ok, what)                                                          \
    do {                                                                         \
        if (!(ok) && !bad) {                                                     \
            bad = 1;                                                             \
            snprintf(first, first_cap, "%s (%s)", what, cfg_path);               \
        }                                                                        \
    } while (0)
    CHECK(ref.v_valid == out.v_valid && ref.nparams == out.nparams, "model layout");
    if (!bad) {
        int64_t nl = (int64_t)ref.n_tok * ref.v_valid;
        CHECK(row("logits", nl, compare(out.logits, ref.logits, nl), t->logits_rel, t->logits_max), "logits");
        CHECK(scalar_row("loss", out.loss, ref.loss, t->loss_rel), "loss");
        CHECK(scalar_row("loss (micro-batch 2)", out.loss2, ref.loss2, t->loss_rel), "loss (micro-batch 2)");
        for (int i = 0; i < ref.nparams; i++) {
            char what[128];
            snprintf(what, sizeof what, "grad %s", ref.names[i]);
            int same = !strcmp(ref.names[i], out.names[i]) && ref.numel[i] == out.numel[i];
            CHECK(same, what);
            if (!same) continue;
            CHECK(row(what, ref.numel[i], compare(out.grads[i], ref.grads[i], ref.numel[i]), t->grad_rel,
                      t->grad_max), what);
        }
        for (int s = 0; s <= NSTEPS; s++) {
            char what[64];
            if (s < NSTEPS) snprintf(what, sizeof what, "AdamW step %d loss", s + 1);
            else snprintf(what, sizeof what, "loss after %d AdamW steps", NSTEPS);
            CHECK(scalar_row(what, out.step_loss[s], ref.step_loss[s], t->step_rel), what);
            if (s == 0) continue;
            /* training progress since the first step's loss: an update that does not reach the compute
             * copies, or a wrong gradient, changes it far more than bf16 rounding does */
            snprintf(what, sizeof what, "  progress to %s", s < NSTEPS ? "this step" : "the end");
            CHECK(scalar_row(what, out.step_loss[0] - out.step_loss[s], ref.step_loss[0] - ref.step_loss[s],
                             t->progress_rel), what);
        }
        /* the host backends allocate nothing once warm (cpu-bf16: its scratch arena has grown in step 1) */
        if (dev->host_memory) {
            printf("  %-52s  %lld\n", "allocations in AdamW steps 2..3", (long long)out.step_allocs);
            CHECK(out.step_allocs == 0, "allocations in AdamW steps 2..3");
        }
    }
#undef CHECK
    run_out_free(&ref);
    run_out_free(&out);
    return bad;
}

int main(int argc, char **argv) {
    /* ctest's Criterion entry passes Criterion flags (--jobs 2): skipped, with their values */
    const char *args[16];
    int na = 0, seq = SEQ, family_hd = 0, window = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--jobs") || !strcmp(argv[i], "-j")) { i++; continue; }
        if (!strcmp(argv[i], "--seq-len")) {
            seq = i + 1 < argc ? atoi(argv[++i]) : 0;
            if (seq < 1) {
                fprintf(stderr, "test_device_parity: --seq-len needs a whole number >= 1\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--family")) {
            family_hd = i + 1 < argc ? atoi(argv[++i]) : 0;
            if (family_hd < 2 || family_hd % 2) {
                fprintf(stderr, "test_device_parity: --family needs an even head_dim >= 2\n");
                return 2;
            }
            continue;
        }
        if (!strcmp(argv[i], "--window")) {
            char *end = NULL;
            window = i + 1 < argc ? (int)strtol(argv[++i], &end, 10) : -1;
            if (window < 1 || !end || *end) {
                fprintf(stderr, "test_device_parity: --window needs a whole number >= 1 (keys)\n");
                return 2;
            }
            continue;
        }
        if (argv[i][0] == '-' && argv[i][1] == '-') continue;
        if (na < 16) args[na++] = argv[i];
    }
    const char *device = na > 0 ? args[0] : "cpu";
    if (strcmp(device, "cpu") && strcmp(device, "cpu-bf16") && strcmp(device, "cuda")) {
        fprintf(stderr, "usage: test_device_parity [--seq-len T] [--family HD] [--window W] [cpu|cpu-bf16|cuda [CONFIG.json...]]\n");
        return 2;
    }
    const char *src = getenv("MP_SRC") ? getenv("MP_SRC") : MP_SRC_DIR;
    char def[2][4096];
    snprintf(def[0], sizeof def[0], "%s/tests/configs/cli_tiny.json", src);
    snprintf(def[1], sizeof def[1], "%s/tests/configs/torch_gqa_tied.json", src);
    const char *cfgs[16];
    int ncfg = 0;
    for (int i = 1; i < na; i++) cfgs[ncfg++] = args[i];
    if (!ncfg) {
        cfgs[0] = def[0];
        cfgs[1] = def[1];
        ncfg = 2;
    }

    mp_err err;
    mp_err_clear(&err);
    mp_backend *be = NULL;
    if (mp_backend_get(device, &be, &err)) {
        if (!strcmp(device, "cuda")) {   /* no GPU, no CUDA in this build, or its table not wired yet */
            printf("SKIP: device %s cannot be had: %s\n", device, err.msg);
            return 77;
        }
        fprintf(stderr, "test_device_parity: %s\n", err.msg);
        return 1;
    }
    const tolerances *t = strcmp(device, "cpu") ? (family_hd ? &TOL_BF16_FAMILY : &TOL_BF16) : &TOL_EXACT;
    for (int c = 0; c < ncfg; c++) {
        llama_config cfg;
        if (llama_config_load(cfgs[c], &cfg, NULL, &err)) {
            fprintf(stderr, "test_device_parity: %s\n", err.msg);
            return 2;
        }
        if (family_hd) cfg.qkv_bias = cfg.qk_norm = 1, cfg.head_dim = family_hd;
        if (window)   /* every layer slides: Mistral's rule (Llama's math with a window) */
            cfg.family = LLAMA_FAMILY_MISTRAL, cfg.sliding_window = window, cfg.first_sliding_layer = 0;
        char first[256] = "";
        mp_code rc = MP_OK;
        int bad = parity(cfgs[c], &cfg, seq, be, t, first, sizeof first, &err, &rc);
        if (rc) {
            fprintf(stderr, "test_device_parity: %s: %s\n", cfgs[c], err.msg);
            return 1;
        }
        if (bad) {
            printf("FAIL: %s out of tolerance on %s\n", first, device);
            return 1;
        }
    }
    printf("PASS: %s agrees with cpu within %s\n", device, t == &TOL_EXACT ? "0 (bitwise)" : "bf16 tolerances");
    return 0;
}
