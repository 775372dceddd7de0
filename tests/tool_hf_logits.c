/*
 * tests/tool_hf_logits.c — the logits meshpoint computes with a checkpoint's weights, for an outside
 * reference (tests/python/test_hf_logits.py checks an exported HF directory against them).
 *
 *   tool_hf_logits CKPT OUTDIR SEED B T
 *
 * Opens checkpoint CKPT (any mesh; full or model-only), builds its model (model_config metadata) on a
 * 1x1 mesh with the CPU backend, reads every model/ tensor whole into the parameter (on 1x1 the shard is
 * the global tensor), makes tokens [B, T] in [0, vocab) from a splitmix64 stream keyed by SEED, runs
 * llama_forward and writes into OUTDIR (created if missing): logits.f32 [B*T, vocab] and inputs.i32
 * [B, T], row-major little-endian. Exit status: 0 ok, 1 a failure, 2 bad usage or input.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "ckpt/ckpt.h"
#include "core/alloc.h"
#include "core/backend.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_config.h"

/* Writes n bytes to dir/file. */
static mp_code write_file(const char *dir, const char *file, const void *data, size_t n, mp_err *e) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    FILE *f = fopen(path, "wb");
    if (!f) return mp_err_set(e, MP_EIO, "%s: %s", path, strerror(errno));
    int bad = (fwrite(data, 1, n, f) != n) | (fclose(f) != 0);
    return bad ? mp_err_set(e, MP_EIO, "writing %s", path) : MP_OK;
}

/* Reads every parameter of m whole from r (1x1 mesh: shard = global tensor). */
static mp_code load_params(llama_model *m, ckpt_reader *r, mp_backend *be, mp_err *e) {
    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        char name[160];
        snprintf(name, sizeof name, "model/%s", p->name);
        int64_t off[2] = {0, 0}, shp[2] = {p->gshape[0], p->ndim == 2 ? p->gshape[1] : 1};
        size_t bytes = (size_t)(shp[0] * shp[1]) * sizeof(float);
        float *h = mp_xmalloc(bytes);
        mp_code rc = ckpt_read(r, name, off, shp, h, e);
        if (!rc) be->to_device(be, p->shard, h, bytes);
        free(h);
        MP_TRY(rc);
    }
    llama_shards_changed(m);
    return MP_OK;
}

/* splitmix64 step. */
static uint64_t splitmix64(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static mp_code run(const char *ckdir, const char *outdir, uint64_t seed, int B, int T, mp_err *e) {
    ckpt_reader *r = NULL;
    MP_TRY(ckpt_open(&r, ckdir, e));
    llama_config cfg;
    const char *mt = ckpt_meta_get(r, "model_config");
    mp_code rc = mt ? llama_config_parse(mt, ckdir, &cfg, NULL, e) : mp_err_set(e, MP_EINPUT, "%s: no model_config", ckdir);
    if (rc) { ckpt_close(r); return rc; }
    mp_mesh mesh;
    mp_mesh_init_single(&mesh);
    mp_backend *be = mp_backend_cpu();
    llama_options opt = {.micro_batch = B, .seq_len = T, .sp = 0, .reshard_after_forward = 1};
    llama_model *m = NULL;
    rc = llama_create(&m, &cfg, &opt, &mesh, be, e);
    if (!rc) rc = load_params(m, r, be, e);
    ckpt_close(r);
    int64_t N = (int64_t)B * T;
    int32_t *in = mp_xmalloc((size_t)N * sizeof(int32_t));
    uint64_t s = seed ^ 0x746F6B656E73ull;
    for (int64_t i = 0; i < N; i++) in[i] = (int32_t)(splitmix64(&s) % (uint64_t)cfg.vocab_size);
    if (!rc) {
        llama_forward(m, in, NULL);
        int v0, vl, vv;
        llama_logits(m, NULL, 0, 0, &v0, &vl, &vv);
        float *host = mp_xmalloc((size_t)N * (size_t)vl * sizeof(float));
        llama_logits(m, host, 0, N, NULL, NULL, NULL);
        for (int64_t n = 0; n < N; n++) memmove(host + n * vv, host + n * vl, (size_t)vv * sizeof(float));
        mkdir(outdir, 0777);
        rc = write_file(outdir, "logits.f32", host, (size_t)N * (size_t)vv * sizeof(float), e);
        if (!rc) rc = write_file(outdir, "inputs.i32", in, (size_t)N * sizeof(int32_t), e);
        free(host);
    }
    free(in);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
    return rc;
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fputs("usage: tool_hf_logits CKPT OUTDIR SEED B T\n", stderr);
        return 2;
    }
    int B = atoi(argv[4]), T = atoi(argv[5]);
    if (B <= 0 || T <= 0) { fputs("tool_hf_logits: B and T must be > 0\n", stderr); return 2; }
    mp_err e;
    mp_err_clear(&e);
    mp_code rc = run(argv[1], argv[2], strtoull(argv[3], NULL, 10), B, T, &e);
    if (rc) fprintf(stderr, "tool_hf_logits: %s\n", e.msg);
    return mp_exit_status(rc);
}
