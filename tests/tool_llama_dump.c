/*
 * tests/tool_llama_dump.c — dumps one forward + backward of the Llama model for an outside reference
 * (tests/python/compare_torch.py checks it against a float64 PyTorch model).
 *
 *   tool_llama_dump CONFIG.json OUTDIR SEED B T [--perturb-norms] [--qkv-bias] [--qk-norm] [--head-dim N]
 *
 * Builds the model on a 1x1 mesh with the CPU backend, initialises the weights from SEED
 * (llama_init_weights), makes deterministic tokens (inputs and targets, each [B, T] in [0, vocab),
 * from a splitmix64 stream keyed by SEED), runs llama_forward, copies the logits (before the backward,
 * which turns them into logit gradients in place), runs llama_backward(1/(B*T)) — the gradient of the
 * mean loss — and writes into OUTDIR (created if missing):
 *   param/<hf name>.f32      every parameter, the whole tensor (on 1x1 the FSDP shard is the TP slice
 *                            is the global tensor), row-major little-endian f32, vocab unpadded
 *   grad/<hf name>.f32       its gradient (shard_grad), same layout
 *   logits.f32               [B*T, vocab]
 *   inputs.i32, targets.i32  [B, T] int32
 *   manifest.json            {"config", "seed", "batch", "seq_len", "loss_sum", "loss_mean",
 *                             "tensors": [{"name", "kind": param|grad|logits|inputs|targets,
 *                                          "dtype": f32|i32, "shape", "file"}]}
 * --perturb-norms sets every norm weight (1 after init) to 1 + 0.25*u and every bias (0 after init) to
 * 0.5*u, u uniform in [-1, 1) from the seed, so that a kernel that drops or misuses them is caught too.
 * --qkv-bias, --qk-norm and --head-dim N set those fields of the loaded config (llama_config: q/k/v biases,
 * Qwen3's q/k norms, an explicit head dimension), so the families' math is checked whatever the config
 * file can say; the manifest records the values the model was built with ("head_dim", "qkv_bias",
 * "qk_norm").
 * Exit status: 0 ok, 1 a write failed, 2 bad usage or a bad config.
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "core/alloc.h"
#include "core/backend.h"
#include "core/error.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_config.h"

static const char *usage =
    "usage: tool_llama_dump CONFIG.json OUTDIR SEED B T [--perturb-norms] [--qkv-bias] [--qk-norm] [--head-dim N]\n";

/* What the options after T change. */
typedef struct dump_opts {
    int perturb, qkv_bias, qk_norm, head_dim;
} dump_opts;

/* splitmix64: the token stream depends only on the seed. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* mkdir that accepts an existing directory; MP_EIO naming the path otherwise. */
static mp_code make_dir(const char *path, mp_err *err) {
    if (mkdir(path, 0777) == 0 || errno == EEXIST) return MP_OK;
    return mp_err_set(err, MP_EIO, "creating directory %s: %s", path, strerror(errno));
}

/* Writes n bytes to dir/file; MP_EIO naming the path on failure. */
static mp_code write_file(const char *dir, const char *file, const void *data, size_t n, mp_err *err) {
    char path[2 * MP_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) return mp_err_set(err, MP_EIO, "opening %s for writing: %s", path, strerror(errno));
    size_t w = n ? fwrite(data, 1, n, f) : 0;
    int bad = (w != n) | (fclose(f) != 0);
    if (bad) return mp_err_set(err, MP_EIO, "writing %zu bytes to %s: %s", n, path, strerror(errno));
    return MP_OK;
}

/* Appends a manifest entry. */
static void manifest_add(cJSON *tensors, const char *name, const char *kind, const char *dtype, int ndim,
                         const int64_t *shape, const char *file) {
    cJSON *t = cJSON_CreateObject();
    cJSON_AddStringToObject(t, "name", name);
    cJSON_AddStringToObject(t, "kind", kind);
    cJSON_AddStringToObject(t, "dtype", dtype);
    cJSON *s = cJSON_AddArrayToObject(t, "shape");
    for (int d = 0; d < ndim; d++) cJSON_AddItemToArray(s, cJSON_CreateNumber((double)shape[d]));
    cJSON_AddStringToObject(t, "file", file);
    cJSON_AddItemToArray(tensors, t);
}

/* Parses a positive integer argument; 0 on error. */
static long parse_pos(const char *s) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || v <= 0) return 0;
    return v;
}

/* Copies rows [0, rows) of a [*, cols] device tensor to a host buffer and writes it. */
static mp_code dump_rows(mp_backend *be, const float *dev, int64_t rows, int64_t cols, const char *dir,
                         const char *file, mp_err *err) {
    size_t bytes = (size_t)(rows * cols) * sizeof(float);
    float *host = mp_xmalloc(bytes ? bytes : 1);
    be->to_host(be, host, dev, bytes);
    mp_code rc = write_file(dir, file, host, bytes, err);
    free(host);
    return rc;
}

/* The whole run; the caller maps the code to an exit status. */
static mp_code run(const char *cfg_path, const char *outdir, uint64_t seed, int B, int T, const dump_opts *o,
                   mp_err *err) {
    llama_config cfg;
    MP_TRY(llama_config_load(cfg_path, &cfg, NULL, err));
    cfg.qkv_bias |= o->qkv_bias;
    cfg.qk_norm |= o->qk_norm;
    if (o->head_dim) cfg.head_dim = o->head_dim;
    int perturb = o->perturb;

    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_backend *be = mp_backend_cpu();
    llama_options opt = {.micro_batch = B, .seq_len = T, .sp = 0, .reshard_after_forward = 1};
    llama_model *m = NULL;
    mp_code rc = llama_create(&m, &cfg, &opt, &mesh, be, err);
    if (rc != MP_OK) {
        mp_mesh_destroy(&mesh);
        return mp_err_wrap(err, "creating the model of %s", cfg_path);
    }
    llama_init_weights(m, seed);
    if (perturb) {
        uint64_t ps = seed ^ 0x6E6F726D73ull;   /* "norms" */
        for (int i = 0; i < llama_num_params(m); i++) {
            llama_param *p = llama_param_at(m, i);
            if (p->ndim != 1) continue;
            int64_t n = p->shard_rows;
            float *h = mp_xmalloc((size_t)n * sizeof(float));
            int bias = strstr(p->name, ".bias") != NULL;
            for (int64_t j = 0; j < n; j++) {
                float u = (float)((double)(splitmix64(&ps) >> 11) * 0x1.0p-52 - 1.0);
                h[j] = bias ? 0.5f * u : 1.0f + 0.25f * u;
            }
            be->to_device(be, p->shard, h, (size_t)n * sizeof(float));
            free(h);
        }
        llama_shards_changed(m);
    }

    const int64_t N = (int64_t)B * T;
    int32_t *inputs = mp_xmalloc((size_t)N * sizeof(int32_t));
    int32_t *targets = mp_xmalloc((size_t)N * sizeof(int32_t));
    uint64_t s = seed ^ 0x746F6B656E73ull;   /* "tokens" */
    for (int64_t i = 0; i < N; i++) inputs[i] = (int32_t)(splitmix64(&s) % (uint64_t)cfg.vocab_size);
    for (int64_t i = 0; i < N; i++) targets[i] = (int32_t)(splitmix64(&s) % (uint64_t)cfg.vocab_size);

    cJSON *man = cJSON_CreateObject();
    cJSON_AddStringToObject(man, "config", cfg_path);
    cJSON_AddNumberToObject(man, "seed", (double)seed);
    cJSON_AddNumberToObject(man, "batch", B);
    cJSON_AddNumberToObject(man, "seq_len", T);
    cJSON_AddBoolToObject(man, "perturb_norms", perturb);
    cJSON_AddNumberToObject(man, "head_dim", llama_head_dim(&cfg));
    cJSON_AddBoolToObject(man, "qkv_bias", cfg.qkv_bias);
    cJSON_AddBoolToObject(man, "qk_norm", cfg.qk_norm);
    cJSON *tensors = cJSON_AddArrayToObject(man, "tensors");
    char sub[2 * MP_PATH_MAX], file[256];

    if ((rc = make_dir(outdir, err)) != MP_OK) goto done;
    snprintf(sub, sizeof sub, "%s/param", outdir);
    if ((rc = make_dir(sub, err)) != MP_OK) goto done;
    snprintf(sub, sizeof sub, "%s/grad", outdir);
    if ((rc = make_dir(sub, err)) != MP_OK) goto done;

    double loss_sum = llama_forward(m, inputs, targets);

    /* Logits now: the backward overwrites them with their gradient. */
    int v_start = 0, v_local = 0, v_valid = 0;
    llama_logits(m, NULL, 0, 0, &v_start, &v_local, &v_valid);
    assert(v_start == 0 && v_valid == cfg.vocab_size && v_local >= v_valid);
    {
        float *host = mp_xmalloc((size_t)N * v_local * sizeof(float));
        float *packed = mp_xmalloc((size_t)N * v_valid * sizeof(float));
        llama_logits(m, host, 0, N, NULL, NULL, NULL);
        for (int64_t n = 0; n < N; n++)
            memcpy(packed + n * v_valid, host + n * v_local, (size_t)v_valid * sizeof(float));
        rc = write_file(outdir, "logits.f32", packed, (size_t)N * v_valid * sizeof(float), err);
        free(host);
        free(packed);
        if (rc != MP_OK) goto done;
        int64_t shape[2] = {N, v_valid};
        manifest_add(tensors, "logits", "logits", "f32", 2, shape, "logits.f32");
    }

    llama_backward(m, 1.0f / (float)N);
    llama_sync_grads(m);
    be->synchronize(be);

    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        /* 1x1 mesh: the shard is the whole TP slice, which is the whole (unpadded) global tensor. */
        assert(p->tp_off[0] == 0 && p->shard_row0 == 0 && p->shard_rows == p->tp_shape[0]);
        assert(p->valid_rows == p->gshape[0]);
        int64_t cols = p->ndim == 2 ? p->gshape[1] : 1;
        assert(p->ndim == 1 || p->tp_shape[1] == cols);
        snprintf(file, sizeof file, "param/%s.f32", p->name);
        if ((rc = dump_rows(be, p->shard, p->valid_rows, cols, outdir, file, err)) != MP_OK) goto done;
        manifest_add(tensors, p->name, "param", "f32", p->ndim, p->gshape, file);
        snprintf(file, sizeof file, "grad/%s.f32", p->name);
        if ((rc = dump_rows(be, p->shard_grad, p->valid_rows, cols, outdir, file, err)) != MP_OK) goto done;
        manifest_add(tensors, p->name, "grad", "f32", p->ndim, p->gshape, file);
    }

    int64_t tshape[2] = {B, T};
    if ((rc = write_file(outdir, "inputs.i32", inputs, (size_t)N * sizeof(int32_t), err)) != MP_OK) goto done;
    manifest_add(tensors, "inputs", "inputs", "i32", 2, tshape, "inputs.i32");
    if ((rc = write_file(outdir, "targets.i32", targets, (size_t)N * sizeof(int32_t), err)) != MP_OK) goto done;
    manifest_add(tensors, "targets", "targets", "i32", 2, tshape, "targets.i32");

    cJSON_AddNumberToObject(man, "loss_sum", loss_sum);
    cJSON_AddNumberToObject(man, "loss_mean", loss_sum / (double)N);
    {
        char *text = cJSON_Print(man);
        rc = write_file(outdir, "manifest.json", text, strlen(text), err);
        free(text);
    }
    if (rc == MP_OK)
        printf("tool_llama_dump: %d parameters, loss %.9g, written to %s\n", llama_num_params(m),
               loss_sum / (double)N, outdir);

done:
    cJSON_Delete(man);
    free(inputs);
    free(targets);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
    return rc;
}

int main(int argc, char **argv) {
    dump_opts o = {0};
    int bad = argc < 6;
    for (int i = 6; i < argc && !bad; i++) {
        if (!strcmp(argv[i], "--perturb-norms")) o.perturb = 1;
        else if (!strcmp(argv[i], "--qkv-bias")) o.qkv_bias = 1;
        else if (!strcmp(argv[i], "--qk-norm")) o.qk_norm = 1;
        else if (!strcmp(argv[i], "--head-dim") && i + 1 < argc && (o.head_dim = (int)parse_pos(argv[i + 1]))) i++;
        else bad = 1;
    }
    if (bad) {
        fputs(usage, stderr);
        return 2;
    }
    char *end;
    errno = 0;
    unsigned long long seed = strtoull(argv[3], &end, 10);
    int bad_seed = errno || *end || !*argv[3];
    long B = parse_pos(argv[4]), T = parse_pos(argv[5]);
    if (bad_seed || !B || !T) {
        fprintf(stderr, "tool_llama_dump: SEED, B and T must be integers (B, T > 0)\n%s", usage);
        return 2;
    }
    mp_err err;
    mp_err_clear(&err);
    mp_code rc = run(argv[1], argv[2], (uint64_t)seed, (int)B, (int)T, &o, &err);
    if (rc != MP_OK) fprintf(stderr, "tool_llama_dump: %s\n", err.msg);
    return mp_exit_status(rc);
}
