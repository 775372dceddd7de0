/*
 * reshard/gguf_source.c — the engine's source over one GGUF file (`meshpoint import model.gguf`; docs/GGUF.md,
 * "Import"): the inverse of reshard/gguf_sink.c, through the same name map (rs_gguf_name) and the same row
 * convention, so nothing about llama.cpp's layout is written twice.
 *
 * The model: an HF config.json text built from the architecture's metadata ({arch}.embedding_length, ...:
 * the keys the sink writes) and the tensors (vocab_size from token_embd's rows, tied embeddings when there
 * is no output tensor), parsed by the one config parser (layers/llama_config.c), so its refusals and
 * defaults are those of an HF import. Floats stored as f32 in GGUF (rms_norm_eps, rope.freq_base) are
 * written as the shortest decimal that rounds to the same f32, which is what the converter started from
 * (1e-05, not 9.99999974738e-06). A rope_freqs tensor (Llama 3 RoPE scaling: the converter keeps only the
 * factors) is accepted when Llama 3's published parameters (low 1, high 4, original context 8192, factor
 * the largest factor) give the same factors; otherwise it is refused by name.
 *
 * Reading a box: engine tensor "model/<name>" is the HF tensor of the family map (layers/family_hf.h: Phi-3's
 * fused rows), which is GGUF tensor rs_gguf_name(<hf name>); a row of the box is a row of that tensor —
 * for the llama architecture's q/k, HF row j * hd/2 + i of a head is GGUF row 2i + j (the sink's permutation,
 * inverted). Each row is read by the blocks that cover the box's columns only (1 element per block for
 * F32/F16/BF16, 32 for Q8_0/Q4_0/Q4_1) and dequantized as ggml does (gguf_dequantize); runs of whole,
 * unpermuted rows are read in one piece of at most GS_SCRATCH bytes. Memory: the scratch and one block run.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "layers/family.h"
#include "layers/family_hf.h"
#include "layers/llama.h"
#include "layers/rope.h"
#include "reshard/gguf.h"
#include "reshard/reshard.h"

#define GS_SCRATCH (4 << 20)   /* bytes of file data read in one piece (a row may need more: then one row) */

typedef struct gguf_src {
    gguf_file *g;
    llama_config cfg;
    int permute;                /* arch llama: q/k rows per head */
    int64_t needed, read;       /* bytes asked for / read, in the file's types */
    uint8_t *raw;               /* scratch of file bytes */
    float *deq;                 /* scratch of dequantized elements */
    size_t raw_cap, deq_cap;
} gguf_src;

/* Elements per block of a type gguf_dequantize reads. */
static int64_t block_elems(int type) { return type == GGML_Q8_0 || type == GGML_Q4_0 || type == GGML_Q4_1 ? GGUF_QK : 1; }

static int readable(int type) {
    return type == GGML_F32 || type == GGML_F16 || type == GGML_BF16 || type == GGML_Q8_0 || type == GGML_Q4_0 || type == GGML_Q4_1;
}

/* ------------------------------------------------------------------------------ the metadata */

/* The metadata value of key as a number (any integer, float or bool scalar); 0 when absent or not a scalar. */
static int kv_num(const gguf_file *g, const char *key, double *v) {
    int64_t i = gguf_find_kv(g, key);
    if (i < 0) return 0;
    const gguf_kv *k = &g->kv[i];
    switch (k->type) {
    case GGUF_F32: case GGUF_F64: *v = k->v.f; return 1;
    case GGUF_I8: case GGUF_I16: case GGUF_I32: case GGUF_I64: *v = (double)k->v.i; return 1;
    case GGUF_U8: case GGUF_U16: case GGUF_U32: case GGUF_U64: case GGUF_BOOL: *v = (double)k->v.u; return 1;
    default: return 0;
    }
}

/* The shortest decimal that rounds to the same f32 as x (what the converter was given), as a double. */
static double f32_decimal(double x) {
    char buf[32];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, x);
        if ((float)strtod(buf, NULL) == (float)x) return strtod(buf, NULL);
    }
    return x;
}

/* "{arch}.suffix" of g as a number into *v: 1, or 0 when absent. */
static int arch_num(const gguf_file *g, const char *arch, const char *suffix, double *v) {
    char key[96];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    return kv_num(g, key, v);
}

/* arch_num of a key the model needs: MP_EINPUT naming it when absent. */
static mp_code arch_need(const gguf_file *g, const char *arch, const char *suffix, double *v, mp_err *e) {
    if (arch_num(g, arch, suffix, v)) return MP_OK;
    return mp_err_set(e, MP_EINPUT, "%s: metadata key %s.%s is missing (a %s model needs it)", g->name, arch, suffix, arch);
}

/* The family of general.architecture, or MP_EINPUT naming it and the supported ones. */
static mp_code family_of(const gguf_file *g, const char **arch, const char **model_type, const char **class, mp_err *e) {
    static const char *const map[][3] = {{"llama", "llama", "LlamaForCausalLM"}, {"qwen2", "qwen2", "Qwen2ForCausalLM"},
                                         {"qwen3", "qwen3", "Qwen3ForCausalLM"}, {"phi3", "phi3", "Phi3ForCausalLM"}};
    int64_t i = gguf_find_kv(g, "general.architecture");
    if (i < 0 || g->kv[i].type != GGUF_STRING)
        return mp_err_set(e, MP_EINPUT, "%s: no general.architecture string: not a model GGUF", g->name);
    for (size_t k = 0; k < sizeof map / sizeof map[0]; k++)
        if (!strcmp(g->kv[i].str, map[k][0])) {
            *arch = map[k][0], *model_type = map[k][1], *class = map[k][2];
            return MP_OK;
        }
    return mp_err_set(e, MP_EINPUT, "%s: general.architecture is \"%s\": import reads llama (Llama, Mistral), qwen2, "
                      "qwen3 and phi3", g->name, g->kv[i].str);
}

/* Llama 3's RoPE scaling recovered from the rope_freqs tensor t (hd/2 f32 factors) into *sc, if the published
 * parameters with factor = the largest factor reproduce every factor to 1e-6; else MP_EINPUT naming the tensor. */
static mp_code llama3_from_factors(gguf_src *s, const gguf_tensor *t, int hd, double theta, mp_rope_scaling *sc, mp_err *e) {
    int64_t n = t->shape[t->ndim - 1];
    if (t->type != GGML_F32 || t->ndim != 1 || n != hd / 2)
        return mp_err_set(e, MP_EINPUT, "%s: tensor rope_freqs.weight is not %d f32 factors", s->g->name, hd / 2);
    float *f = mp_xmalloc(sizeof *f * (size_t)n);
    mp_code rc = gguf_read_data(s->g, t, 0, sizeof *f * (size_t)n, f, e);
    double most = 0;
    for (int64_t i = 0; !rc && i < n; i++) most = f[i] > most ? f[i] : most;
    *sc = (mp_rope_scaling){.type = MP_ROPE_LLAMA3, .factor = most, .low_freq_factor = 1, .high_freq_factor = 4,
                            .original_max_position_embeddings = 8192};
    for (int64_t i = 0; !rc && i < n; i++) {
        double want = mp_rope_inv_freq((int)i, hd, theta, NULL) / mp_rope_inv_freq((int)i, hd, theta, sc);
        if (!(fabs(want - f[i]) <= 1e-6 * want))
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor rope_freqs.weight (RoPE factors, %g at %lld) is not Llama 3's "
                            "scaling with factor %g, low 1, high 4, original context 8192: import reads no other",
                            s->g->name, (double)f[i], (long long)i, most);
    }
    free(f);
    return rc;
}

/* Adds rope_scaling to config object c: linear from the metadata, Llama 3 from rope_freqs. */
static mp_code put_rope_scaling(gguf_src *s, const char *arch, cJSON *c, int hd, double theta, mp_err *e) {
    char key[96];
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    int64_t k = gguf_find_kv(s->g, key), rf = gguf_find_tensor(s->g, "rope_freqs.weight");
    double factor = 1;
    if (k >= 0 && s->g->kv[k].type == GGUF_STRING && strcmp(s->g->kv[k].str, "none")) {
        if (strcmp(s->g->kv[k].str, "linear"))
            return mp_err_set(e, MP_EINPUT, "%s: %s is \"%s\": import reads linear RoPE scaling (and Llama 3's "
                              "rope_freqs)", s->g->name, key, s->g->kv[k].str);
        MP_TRY(arch_need(s->g, arch, "rope.scaling.factor", &factor, e));
        cJSON *o = cJSON_AddObjectToObject(c, "rope_scaling");
        cJSON_AddStringToObject(o, "rope_type", "linear");
        cJSON_AddNumberToObject(o, "factor", f32_decimal(factor));
    }
    if (rf < 0) return MP_OK;
    if (strcmp(arch, "llama")) return mp_err_set(e, MP_EINPUT, "%s: a %s model with a rope_freqs tensor", s->g->name, arch);
    mp_rope_scaling sc;
    MP_TRY(llama3_from_factors(s, &s->g->t[rf], hd, theta, &sc, e));
    cJSON *o = cJSON_AddObjectToObject(c, "rope_scaling");
    cJSON_AddStringToObject(o, "rope_type", "llama3");
    cJSON_AddNumberToObject(o, "factor", sc.factor);
    cJSON_AddNumberToObject(o, "low_freq_factor", sc.low_freq_factor);
    cJSON_AddNumberToObject(o, "high_freq_factor", sc.high_freq_factor);
    cJSON_AddNumberToObject(o, "original_max_position_embeddings", sc.original_max_position_embeddings);
    return MP_OK;
}

/* The architecture's required integer keys, into config c under their HF names. */
static mp_code put_shape(const gguf_file *g, const char *arch, cJSON *c, double *heads, mp_err *e) {
    static const char *const keys[][2] = {
        {"embedding_length", "hidden_size"}, {"feed_forward_length", "intermediate_size"}, {"block_count", "num_hidden_layers"},
        {"attention.head_count", "num_attention_heads"}, {"context_length", "max_position_embeddings"}};
    double v;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        MP_TRY(arch_need(g, arch, keys[i][0], &v, e));
        cJSON_AddNumberToObject(c, keys[i][1], v);
        if (i == 3) *heads = v;
    }
    if (!arch_num(g, arch, "attention.head_count_kv", &v)) v = *heads;   /* absent: no GQA, as llama.cpp reads it */
    cJSON_AddNumberToObject(c, "num_key_value_heads", v);
    double hidden = cJSON_GetObjectItem(c, "hidden_size")->valuedouble;
    if (arch_num(g, arch, "attention.key_length", &v) && v * *heads != hidden)   /* as the converter's input had it */
        cJSON_AddNumberToObject(c, "head_dim", v);
    return MP_OK;
}

/* The HF config.json text of the model g holds (see the top of the file) into *out (malloc'd). */
static mp_code build_config(gguf_src *s, char **out, mp_err *e) {
    const gguf_file *g = s->g;
    const char *arch = NULL, *mt = NULL, *cls = NULL;
    MP_TRY(family_of(g, &arch, &mt, &cls, e));
    int64_t emb = gguf_find_tensor(g, "token_embd.weight");
    if (emb < 0 || g->t[emb].ndim != 2) return mp_err_set(e, MP_EINPUT, "%s: no 2-D tensor token_embd.weight", g->name);
    cJSON *c = cJSON_CreateObject();
    cJSON_AddStringToObject(c, "model_type", mt);
    cJSON_AddItemToObject(c, "architectures", cJSON_CreateStringArray(&cls, 1));
    cJSON_AddStringToObject(c, "hidden_act", "silu");
    cJSON_AddNumberToObject(c, "vocab_size", (double)g->t[emb].shape[0]);
    cJSON_AddBoolToObject(c, "tie_word_embeddings", gguf_find_tensor(g, "output.weight") < 0);
    double heads = 0, eps = 0, theta = 10000, v, hidden = 0, hd;
    mp_code rc = put_shape(g, arch, c, &heads, e);
    if (!rc) rc = arch_need(g, arch, "attention.layer_norm_rms_epsilon", &eps, e);
    if (!rc) cJSON_AddNumberToObject(c, "rms_norm_eps", f32_decimal(eps));
    if (!rc && arch_num(g, arch, "rope.freq_base", &theta)) theta = f32_decimal(theta);
    if (!rc) cJSON_AddNumberToObject(c, "rope_theta", theta);
    if (!rc && !strcmp(arch, "phi3") && arch_num(g, arch, "attention.sliding_window", &v) && v > 0)
        cJSON_AddNumberToObject(c, "sliding_window", v);
    static const char *const ids[][2] = {{"tokenizer.ggml.bos_token_id", "bos_token_id"}, {"tokenizer.ggml.eos_token_id", "eos_token_id"}};
    for (int i = 0; i < 2 && !rc; i++)
        if (kv_num(g, ids[i][0], &v)) cJSON_AddNumberToObject(c, ids[i][1], v);
    hidden = rc ? 0 : cJSON_GetObjectItem(c, "hidden_size")->valuedouble;
    hd = cJSON_HasObjectItem(c, "head_dim") ? cJSON_GetObjectItem(c, "head_dim")->valuedouble : heads > 0 ? hidden / heads : 0;
    if (!rc) rc = put_rope_scaling(s, arch, c, (int)hd, theta, e);
    *out = rc ? NULL : cJSON_Print(c);
    cJSON_Delete(c);
    return rc;
}

/* ------------------------------------------------------------------------------ the tensors */

/* The GGUF tensor behind engine name "model/<name>" (NULL when there is none), the first row of name in it
 * (Phi-3's fused rows) and the heads whose rows the llama architecture permutes (0: none). */
static const gguf_tensor *place(const gguf_src *s, const char *name, llama_hf_place *pl, int *heads) {
    char gname[160];
    *heads = 0;
    if (strncmp(name, "model/", 6) || llama_hf_place_of(&s->cfg, name + 6, pl) || rs_gguf_name(pl->name, gname, sizeof gname))
        return NULL;
    int64_t i = gguf_find_tensor(s->g, gname);
    if (i < 0) return NULL;
    size_t n = strlen(pl->name), k = strlen(".self_attn.q_proj.weight");
    if (s->permute && n > k && !strcmp(pl->name + n - k, ".self_attn.q_proj.weight")) *heads = s->cfg.num_attention_heads;
    if (s->permute && n > k && !strcmp(pl->name + n - k, ".self_attn.k_proj.weight")) *heads = s->cfg.num_key_value_heads;
    return &s->g->t[i];
}

/* The GGUF row of HF row r of a tensor whose heads of hd rows are permuted (gguf_sink.c's permute_rows). */
static int64_t gguf_row(int64_t r, int hd) {
    int64_t h = r / hd, k = r % hd;
    return h * hd + 2 * (k % (hd / 2)) + k / (hd / 2);
}

/* Grows scratch p (of *cap bytes) to at least n bytes. */
static void *grow(void *p, size_t *cap, size_t n) {
    if (n <= *cap) return p;
    free(p);
    *cap = n;
    return mp_xmalloc(n);
}

/* Reads `rows` consecutive GGUF rows from row, columns [c0, c0 + nc) of each, as fp32 into out (rows x nc). */
static mp_code read_rows(gguf_src *s, const gguf_tensor *t, int64_t row, int64_t rows, int64_t c0, int64_t nc, float *out,
                         mp_err *e) {
    int64_t cols = t->ndim == 2 ? t->shape[1] : t->shape[0], be = block_elems(t->type);
    int64_t b0 = c0 / be * be, b1 = (c0 + nc + be - 1) / be * be, span = b1 - b0;
    int64_t row_bytes = gguf_type_bytes(t->type, cols), span_bytes = gguf_type_bytes(t->type, span);
    int whole = span == cols;   /* then the rows are one contiguous piece */
    int64_t bytes = whole ? rows * row_bytes : span_bytes;
    s->raw = grow(s->raw, &s->raw_cap, (size_t)bytes);
    s->deq = grow(s->deq, &s->deq_cap, sizeof(float) * (size_t)(whole ? rows * cols : span));
    for (int64_t r = 0; r < (whole ? 1 : rows); r++) {
        int64_t off = (row + r) * row_bytes + gguf_type_bytes(t->type, b0);
        MP_TRY(gguf_read_data(s->g, t, off, (size_t)bytes, s->raw, e));
        s->read += bytes;
        MP_TRY(gguf_dequantize(t->type, s->raw, whole ? rows * cols : span, s->deq, e));
        for (int64_t k = 0; k < (whole ? rows : 1); k++)
            memcpy(out + (r + k) * nc, s->deq + k * span + (c0 - b0), sizeof(float) * (size_t)nc);
    }
    return MP_OK;
}

static mp_code gs_read(rs_source *src, const char *name, int ndim, const int64_t *off, const int64_t *shape, float *buf,
                       mp_err *e) {
    gguf_src *s = src->impl;
    llama_hf_place pl;
    int heads;
    const gguf_tensor *t = place(s, name, &pl, &heads);
    if (!t) return mp_err_set(e, MP_EINPUT, "%s has no tensor for %s", s->g->name, name);
    int64_t nr = ndim == 2 ? shape[0] : 1, nc = ndim == 2 ? shape[1] : shape[0];
    int64_t c0 = ndim == 2 ? off[1] : off[0], r0 = ndim == 2 ? off[0] + pl.row0 : 0;
    int64_t cols = ndim == 2 ? t->shape[1] : t->shape[0];
    int64_t per = gguf_type_bytes(t->type, cols), run = nc == cols && !heads ? GS_SCRATCH / (per > 0 ? per : 1) : 1;
    int hd = heads ? (int)(t->shape[0] / heads) : 0;
    s->needed += nr * gguf_type_bytes(t->type, block_elems(t->type)) * nc / block_elems(t->type);
    for (int64_t r = 0; r < nr;) {
        int64_t k = run < 1 ? 1 : run < nr - r ? run : nr - r;
        MP_TRY(read_rows(s, t, heads ? gguf_row(r0 + r, hd) : r0 + r, k, c0, nc, buf + r * nc, e));
        r += k;
    }
    return MP_OK;
}

static mp_code gs_plan(rs_source *src, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                       void (*cb)(void *, const char *, int64_t), void *ctx, int64_t *bytes, mp_err *e) {
    gguf_src *s = src->impl;
    llama_hf_place pl;
    int heads;
    const gguf_tensor *t = place(s, name, &pl, &heads);
    *bytes = 0;
    if (!t) return mp_err_set(e, MP_EINPUT, "%s has no tensor for %s", s->g->name, name);
    int64_t n = shape[0] * (ndim == 2 ? shape[1] : 1);
    *bytes = gguf_type_bytes(t->type, block_elems(t->type)) * n / block_elems(t->type);
    const char *base = strrchr(s->g->name, '/');
    if (cb) cb(ctx, base ? base + 1 : s->g->name, *bytes);
    return MP_OK;
}

static void gs_io(rs_source *src, int64_t *rd, int64_t *need) {
    gguf_src *s = src->impl;
    if (rd) *rd = s->read;
    if (need) *need = s->needed;
}

static void gs_free(gguf_src *s) {
    gguf_close(s->g);
    free(s->raw);
    free(s->deq);
    free(s);
}

static void gs_close(rs_source *src) {
    if (!src) return;
    gs_free(src->impl);
    free(src);
}

/* Every tensor of the model present with its shape (a fused one: all its parts' rows) and a readable type;
 * no tensor the model does not use (rope_freqs.weight went into the config). MP_EINPUT naming the tensor. */
static mp_code check_tensors(gguf_src *s, mp_err *e) {
    int ns = llama_tensor_specs(&s->cfg, NULL, 0);
    llama_tensor_spec *sp = mp_xmalloc(sizeof *sp * (size_t)ns);
    llama_tensor_specs(&s->cfg, sp, ns);
    char *used = mp_xcalloc((size_t)s->g->nt + 1), name[128];
    mp_code rc = MP_OK;
    for (int i = 0; i < ns && !rc; i++) {
        llama_hf_place pl;
        int heads;
        snprintf(name, sizeof name, "model/%s", sp[i].name);
        const gguf_tensor *t = place(s, name, &pl, &heads);
        char gname[160] = "?";
        rs_gguf_name(pl.name, gname, sizeof gname);
        int64_t rows = pl.hf_rows ? pl.hf_rows : sp[i].shape[0];
        if (!t) rc = mp_err_set(e, MP_EINPUT, "%s: the %s model's tensor %s (HF %s) is missing", s->g->name,
                                llama_family_get(s->cfg.family)->model_type, gname, pl.name);
        else if (t->ndim != sp[i].ndim || t->shape[0] != rows || (t->ndim == 2 && t->shape[1] != sp[i].shape[1]))
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor %s has shape [%lld, %lld], the metadata implies [%lld, %lld]", s->g->name,
                            t->name, (long long)t->shape[0], (long long)(t->ndim == 2 ? t->shape[1] : 1), (long long)rows,
                            (long long)(sp[i].ndim == 2 ? sp[i].shape[1] : 1));
        else if (!readable(t->type))
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor %s is of type %s: import reads F32, F16, BF16, Q8_0, Q4_0 and Q4_1",
                            s->g->name, t->name, gguf_type_name(t->type) ? gguf_type_name(t->type) : "(unknown)");
        if (t) used[t - s->g->t] = 1;
    }
    for (int64_t i = 0; i < s->g->nt && !rc; i++)
        if (!used[i] && strcmp(s->g->t[i].name, "rope_freqs.weight"))
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor %s is not part of the %s model its metadata describes", s->g->name,
                            s->g->t[i].name, llama_family_get(s->cfg.family)->model_type);
    free(used);
    free(sp);
    return rc;
}

mp_code rs_source_gguf(rs_source **out, const char *path, llama_config *cfg, char **config_json, mp_err *e) {
    *out = NULL;
    *config_json = NULL;
    gguf_src *s = mp_xcalloc(sizeof *s);
    mp_code rc = gguf_open(&s->g, path, e);
    if (!rc) rc = build_config(s, config_json, e);
    if (!rc && (rc = llama_config_parse(*config_json, path, &s->cfg, NULL, e)))
        mp_err_wrap(e, "the model its metadata describes"), e->code = rc = MP_EINPUT;
    s->permute = !rc && !strcmp(rs_gguf_arch(s->cfg.family), "llama");
    if (!rc) rc = check_tensors(s, e);
    if (rc) {
        if (s->g) gs_free(s); else free(s);
        free(*config_json);
        *config_json = NULL;
        return rc;
    }
    *cfg = s->cfg;
    rs_source *src = mp_xcalloc(sizeof *src);
    *src = (rs_source){.kind = "gguf", .read = gs_read, .plan = gs_plan, .io = gs_io, .close = gs_close, .impl = s};
    *out = src;
    return MP_OK;
}

const gguf_file *rs_source_gguf_file(rs_source *s) { return ((gguf_src *)s->impl)->g; }
