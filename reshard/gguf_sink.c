/*
 * reshard/gguf_sink.c — the engine's sink for one GGUF file that llama.cpp loads (`meshpoint export
 * --format gguf`; docs/GGUF.md has the maps).
 *
 * What llama.cpp's own converter (convert_hf_to_gguf.py) writes for the family, from the model config and
 * whole tensors:
 *   - the architecture: llama (Llama and Mistral), qwen2, qwen3, phi3; its hyperparameter keys
 *     ({arch}.context_length, .embedding_length, .block_count, ...), written at creation, so the caller
 *     can add the tokenizer's keys (rs_sink_gguf_writer) before the commit;
 *   - the tensors under llama.cpp's names (token_embd, blk.N.attn_q, ...); Phi-3's q/k/v and gate/up fused
 *     as its attn_qkv and ffn_up (the rows of HF's qkv_proj and gate_up_proj: reshard/hf_items.c fuses
 *     them); no output tensor with tied embeddings (llama.cpp reuses token_embd);
 *   - the llama architecture's rotary convention: llama.cpp rotates adjacent pairs (2i, 2i+1) where HF
 *     rotates (i, i + hd/2), so the converter permutes the rows of each head of q and k (LlamaModel.permute):
 *     GGUF row 2i + j of a head is HF row j * hd/2 + i. qwen2, qwen3 and phi3 rotate as HF does (NEOX):
 *     no permutation;
 *   - Llama 3 RoPE scaling as the rope_freqs tensor (hd/2 fp32 factors: each frequency's unscaled over its
 *     scaled value, from meshpoint's own mp_rope_inv_freq, so llama.cpp rotates as meshpoint does);
 *     linear scaling as {arch}.rope.scaling.type/factor;
 *   - types: 1-D tensors and norms F32; 2-D as --dtype says (F32, F16, BF16, Q8_0; a Q8_0 tensor whose
 *     rows are not whole blocks of 32 falls back to F16, as the converter does).
 * add() only records the tensors; commit() declares them all (the offsets follow from shapes and types),
 * then streams each in row bands of at most band_bytes of fp32 — whole heads for a permuted q/k — through
 * rs_hf_items_stream (the HF sink's pipeline): band k is permuted, converted, hashed and written on a
 * helper thread while this one fills band k+1. The permutation is done by converting row by row into the
 * row's GGUF place (no permuted fp32 copy), so memory is two fp32 bands and one converted band — the
 * three band buffers of the serial design (band, permuted copy, converted copy) this replaced.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/tensor.h"
#include "layers/llama.h"
#include "reshard/gguf.h"
#include "reshard/hf_items.h"
#include "reshard/reshard.h"
#include "reshard/safetensors.h"

typedef struct gguf_sink {
    char *path;
    rs_hf_items x;
    const char *arch;
    int out_type;        /* ggml type of the 2-D weights */
    size_t band;
    int permute;         /* arch llama: q/k rows per head */
    gguf_writer *w;
    int64_t n_decl;      /* tensors declared (the verify compares against them) */
    int *types;          /* commit: each item's ggml type */
    int64_t band_elems;  /* commit: fp32 elements of a band buffer */
    uint8_t *out;        /* commit: the converted band (the worker's while a band is in flight) */
} gguf_sink;

int rs_gguf_name(const char *hf, char *out, size_t cap) {
    static const char *const top[][2] = {{"model.embed_tokens.weight", "token_embd.weight"},
                                         {"model.norm.weight", "output_norm.weight"}, {"lm_head.weight", "output.weight"}};
    static const char *const blk[][2] = {
        {"input_layernorm.", "attn_norm."}, {"post_attention_layernorm.", "ffn_norm."}, {"self_attn.q_proj.", "attn_q."},
        {"self_attn.k_proj.", "attn_k."},   {"self_attn.v_proj.", "attn_v."},         {"self_attn.o_proj.", "attn_output."},
        {"self_attn.qkv_proj.", "attn_qkv."}, {"self_attn.q_norm.", "attn_q_norm."},  {"self_attn.k_norm.", "attn_k_norm."},
        {"mlp.gate_proj.", "ffn_gate."},    {"mlp.up_proj.", "ffn_up."},              {"mlp.down_proj.", "ffn_down."},
        {"mlp.gate_up_proj.", "ffn_up."}};
    for (size_t i = 0; i < sizeof top / sizeof top[0]; i++)
        if (!strcmp(hf, top[i][0])) return snprintf(out, cap, "%s", top[i][1]) < (int)cap ? 0 : -1;
    int layer, used = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &used) != 1 || !used) return -1;
    for (size_t i = 0; i < sizeof blk / sizeof blk[0]; i++) {
        size_t k = strlen(blk[i][0]);
        const char *rest = hf + used + k;
        if (!strncmp(hf + used, blk[i][0], k) && (!strcmp(rest, "weight") || !strcmp(rest, "bias")))
            return snprintf(out, cap, "blk.%d.%s%s", layer, blk[i][1], rest) < (int)cap ? 0 : -1;
    }
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && !strcmp(s + n - k, suffix);
}

/* The ggml type item t is written as (see the top of the file). */
static int item_type(const gguf_sink *g, const hf_item *t) {
    if (t->ndim == 1) return GGML_F32;   /* norms, biases (no family here has a 2-D norm) */
    if (g->out_type == GGML_Q8_0 && t->shape[1] % GGUF_QK) return GGML_F16;
    return g->out_type;
}

/* Heads of q (H) or k (KV) whose rows are permuted, or 0 when t is not permuted. */
static int permute_heads(const gguf_sink *g, const hf_item *t) {
    if (!g->permute || t->ndim != 2) return 0;
    if (ends_with(t->name, ".self_attn.q_proj.weight")) return g->x.cfg.num_attention_heads;
    if (ends_with(t->name, ".self_attn.k_proj.weight")) return g->x.cfg.num_key_value_heads;
    return 0;
}

/* Converts n fp32 values to ggml type `type` into out (n a whole number of blocks for Q8_0); returns bytes. */
static size_t convert(const float *x, int64_t n, int type, uint8_t *out) {
    switch (type) {
    case GGML_F16: st_f32_to_f16_n((uint16_t *)out, x, n); return 2 * (size_t)n;
    case GGML_BF16: mp_f32_to_bf16_n((uint16_t *)out, x, n); return 2 * (size_t)n;
    case GGML_Q8_0: gguf_quantize_q8_0(x, n, out); return (size_t)(n / GGUF_QK * 34);
    default: memcpy(out, x, 4 * (size_t)n); return 4 * (size_t)n;
    }
}

/* rs_hf_rows_fn: rows per band of item t, whole heads for a permuted q/k (band_elems allows one head). */
static int64_t band_rows(void *ctx, const hf_item *t) {
    gguf_sink *g = ctx;
    int heads = permute_heads(g, t);
    int64_t step = g->band_elems / t->shape[1];
    return heads ? step / (t->shape[0] / heads) * (t->shape[0] / heads) : step;
}

/* rs_hf_put_fn, on the worker thread: converts band x of item t into g->out — a permuted q/k row by row
 * from HF's half-split head order to llama.cpp's interleaved one (GGUF row 2i + j of a head is band row
 * j * hd/2 + i; a Q8_0 row is whole blocks) — and hands it to the GGUF writer, which hashes and writes it. */
static mp_code put_band(void *ctx, const hf_item *t, int64_t r0, int64_t rows, const float *x, mp_err *e) {
    gguf_sink *g = ctx;
    int type = g->types[t - g->x.it], heads = permute_heads(g, t);
    int64_t cols = t->shape[1];
    size_t nb = 0;
    if (!heads) {
        nb = convert(x, rows * cols, type, g->out);
    } else {
        int64_t hd = t->shape[0] / heads;
        size_t rb = convert(x, cols, type, g->out);   /* the bytes of one row (row 0 is redone below) */
        for (int64_t h = 0; h < rows / hd; h++)
            for (int64_t i = 0; i < hd / 2; i++)
                for (int j = 0; j < 2; j++)
                    convert(x + (h * hd + j * hd / 2 + i) * cols, cols, type, g->out + (size_t)(h * hd + 2 * i + j) * rb);
        nb = rb * (size_t)rows;
    }
    return gguf_w_data(g->w, g->out, nb, e);
}

/* Llama 3 RoPE as llama.cpp's rope_freqs factors: hd/2 values, unscaled over scaled frequency. */
static void rope_factors(const llama_config *c, float *f) {
    int hd = llama_head_dim(c);
    for (int i = 0; i < hd / 2; i++)
        f[i] = (float)(mp_rope_inv_freq(i, hd, c->rope_theta, NULL) / mp_rope_inv_freq(i, hd, c->rope_theta, &c->rope_scaling));
}

/* A band buffer's most elements whatever band_bytes allows: 1 Mi fp32 (4 MiB). A band is filled, then
 * converted, hashed and written, each pass reading what the one before wrote: a band this size is still
 * in the cache for the next pass, a 64 MiB one (the default --max-memory's) is re-read from DRAM by each.
 * Measured on the 2-layer Llama-3.2-1B-shaped bench model (docs/BENCH_GGUF.md), f16: 0.62-0.66 s user CPU
 * with 4 MiB bands against 1.20 s with 32 MiB ones, and 32 MiB peak RSS against 104 MiB. */
#define GS_BAND_MAX_ELEMS ((int64_t)1 << 20)

/* The band buffers' elements: half of band_bytes of fp32 each (two are filled in turn, so the pipeline
 * keeps the serial design's peak: 2 x band/2 fp32 + the converted band) and at most GS_BAND_MAX_ELEMS,
 * but no more than the largest item, and at least one row (whole heads for a permuted q/k). */
static int64_t band_elems(const gguf_sink *g) {
    int64_t most = (int64_t)(g->band / 8), need = 1, largest = 1;
    if (most > GS_BAND_MAX_ELEMS) most = GS_BAND_MAX_ELEMS;
    for (int i = 0; i < g->x.n; i++) {
        const hf_item *t = &g->x.it[i];
        int heads = permute_heads(g, t);
        int64_t rows = heads ? t->shape[0] / heads : 1, e = rows * t->shape[1];
        if (e > need) need = e;
        if (t->shape[0] * t->shape[1] > largest) largest = t->shape[0] * t->shape[1];
    }
    if (most > largest) most = largest;
    return most > need ? most : need;
}

static mp_code declare(gguf_sink *g, int *types, mp_err *e) {
    char name[160];
    for (int i = 0; i < g->x.n; i++) {
        const hf_item *t = &g->x.it[i];
        if (rs_gguf_name(t->name, name, sizeof name))
            return mp_err_set(e, MP_EINTERNAL, "GGUF export: no llama.cpp name for tensor %s", t->name);
        types[i] = item_type(g, t);
        MP_TRY(gguf_w_tensor(g->w, name, t->ndim, t->shape, types[i], e));
    }
    if (g->x.cfg.rope_scaling.type == MP_ROPE_LLAMA3) {
        int64_t n = llama_head_dim(&g->x.cfg) / 2;
        MP_TRY(gguf_w_tensor(g->w, "rope_freqs.weight", 1, &n, GGML_F32, e));
    }
    g->n_decl = g->x.n + (g->x.cfg.rope_scaling.type == MP_ROPE_LLAMA3);
    return MP_OK;
}

static mp_code gs_commit(rs_sink *s, mp_err *e) {
    gguf_sink *g = s->impl;
    if (g->x.failed) {
        if (e) *e = g->x.err;
        return g->x.failed;
    }
    MP_TRY(rs_hf_items_check(&g->x, e));
    g->types = mp_xcalloc(sizeof *g->types * (size_t)(g->x.n + 1));
    mp_code rc = declare(g, g->types, e);
    if (!rc) rc = gguf_w_begin_data(g->w, e);
    g->band_elems = band_elems(g);
    size_t ob = sizeof(float) * (size_t)g->band_elems;   /* the converted band: at most its fp32 bytes */
    g->out = rc ? NULL : mp_malloc(ob, MP_MEM_CKPT);
    if (!rc) rc = rs_hf_items_stream(&g->x, 0, g->x.n, g->band_elems, band_rows, put_band, g, e);
    if (!rc && g->x.cfg.rope_scaling.type == MP_ROPE_LLAMA3) {
        int hd = llama_head_dim(&g->x.cfg);
        float *f = (float *)g->out;   /* hd/2 floats: fewer than one row of the embedding */
        rope_factors(&g->x.cfg, f);
        rc = gguf_w_data(g->w, f, sizeof(float) * (size_t)(hd / 2), e);
    }
    if (!rc) rc = gguf_w_close(g->w, e);
    if (g->out) mp_free_acct(g->out, ob, MP_MEM_CKPT);
    g->out = NULL;
    free(g->types);
    g->types = NULL;
    return rc;
}

static mp_code gs_add(rs_sink *s, int file_rank, const char *name, int ndim, const int64_t *gshape, const int64_t *off,
                      const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e) {
    return rs_hf_items_add(&((gguf_sink *)s->impl)->x, file_rank, name, ndim, gshape, off, shape, fill, ctx, e);
}

static mp_code gs_meta(rs_sink *s, const char *key, const char *value, mp_err *e) { return MP_OK; }

static mp_code gs_file(rs_sink *s, const char *name, const void *data, size_t n, mp_err *e) {
    return MP_OK;   /* a GGUF file carries the tokenizer as metadata (rs_sink_gguf_writer), not as files */
}

static void gs_free(rs_sink *s) {
    if (!s) return;
    gguf_sink *g = s->impl;
    gguf_w_free(g->w);
    rs_hf_items_free(&g->x);
    free(g->path);
    free(g);
    free(s);
}

/* general.file_type of a --dtype (llama.cpp's LLAMA_FTYPE_*: ALL_F32 0, MOSTLY_F16 1, MOSTLY_Q8_0 7, MOSTLY_BF16 32). */
static uint32_t file_type(int t) { return t == GGML_F16 ? 1 : t == GGML_Q8_0 ? 7 : t == GGML_BF16 ? 32 : 0; }

/* The architecture's keys, as convert_hf_to_gguf.py (llama-cpp-python 0.3.36's llama.cpp) writes them for
 * the family: TextModel's base keys, LlamaModel's vocab_size and rope.dimension_count, Phi3MiniModel's
 * rope.dimension_count and sliding_window (docs/GGUF.md). Linear RoPE scaling is written for every
 * architecture (llama.cpp reads it generically; the converter's Phi-3 path skips it). */
static void write_arch(gguf_sink *g, const char *name) {
    const llama_config *c = &g->x.cfg;
    gguf_writer *w = g->w;
    char k[96];
#define KEY(suffix) (snprintf(k, sizeof k, "%s." suffix, g->arch), k)
    gguf_w_str(w, "general.architecture", g->arch);
    gguf_w_str(w, "general.type", "model");
    gguf_w_str(w, "general.name", name);
    if (!strcmp(g->arch, "llama")) gguf_w_u32(w, KEY("vocab_size"), (uint32_t)c->vocab_size);   /* LlamaModel's */
    gguf_w_u32(w, KEY("context_length"), (uint32_t)c->max_position_embeddings);
    gguf_w_u32(w, KEY("embedding_length"), (uint32_t)c->hidden_size);
    gguf_w_u32(w, KEY("block_count"), (uint32_t)c->num_hidden_layers);
    gguf_w_u32(w, KEY("feed_forward_length"), (uint32_t)c->intermediate_size);
    gguf_w_u32(w, KEY("attention.head_count"), (uint32_t)c->num_attention_heads);
    gguf_w_u32(w, KEY("attention.head_count_kv"), (uint32_t)c->num_key_value_heads);
    gguf_w_f32(w, KEY("rope.freq_base"), (float)c->rope_theta);
    gguf_w_f32(w, KEY("attention.layer_norm_rms_epsilon"), (float)c->rms_norm_eps);
    if (c->head_dim) {   /* the converter writes them when config.json has head_dim */
        gguf_w_u32(w, KEY("attention.key_length"), (uint32_t)c->head_dim);
        gguf_w_u32(w, KEY("attention.value_length"), (uint32_t)c->head_dim);
    }
    if (strcmp(g->arch, "qwen2") && strcmp(g->arch, "qwen3"))   /* LlamaModel's and Phi3MiniModel's */
        gguf_w_u32(w, KEY("rope.dimension_count"), (uint32_t)llama_head_dim(c));
    if (c->rope_scaling.type == MP_ROPE_LINEAR) {
        gguf_w_str(w, KEY("rope.scaling.type"), "linear");
        gguf_w_f32(w, KEY("rope.scaling.factor"), (float)c->rope_scaling.factor);
    }
    if (c->family == LLAMA_FAMILY_PHI3)   /* always: 0 is "none" (how llama.cpp tells Phi-4 from Phi-3) */
        gguf_w_u32(w, KEY("attention.sliding_window"), (uint32_t)c->sliding_window);
    gguf_w_u32(w, "general.file_type", file_type(g->out_type));
    gguf_w_u32(w, "general.quantization_version", 2);   /* GGML_QNT_VERSION */
#undef KEY
}

const char *rs_gguf_arch(llama_family f) {
    switch (f) {
    case LLAMA_FAMILY_QWEN2: return "qwen2";
    case LLAMA_FAMILY_QWEN3: return "qwen3";
    case LLAMA_FAMILY_PHI3: return "phi3";
    default: return "llama";   /* Llama and Mistral (the converter's MistralForCausalLM is LlamaModel) */
    }
}

mp_code rs_sink_gguf(rs_sink **out, const char *path, const llama_config *cfg, const char *dtype, const char *name,
                     size_t band_bytes, mp_err *e) {
    *out = NULL;
    int ot = !strcmp(dtype, "f32") ? GGML_F32 : !strcmp(dtype, "f16") ? GGML_F16 : !strcmp(dtype, "bf16") ? GGML_BF16
           : !strcmp(dtype, "q8_0") ? GGML_Q8_0 : -1;
    if (ot < 0) return mp_err_set(e, MP_EINPUT, "GGUF export: dtype %s (f32, f16, bf16 or q8_0)", dtype);
    const char *arch = rs_gguf_arch(cfg->family);
    if (cfg->rope_scaling.type == MP_ROPE_LLAMA3 && strcmp(arch, "llama"))
        return mp_err_set(e, MP_EINPUT, "GGUF export: llama3 rope_scaling in a %s model: llama.cpp's %s architecture "
                          "reads no rope_freqs tensor", llama_family_get(cfg->family)->model_type, arch);
    gguf_sink *g = mp_xcalloc(sizeof *g);
    g->path = mp_strdup(path);
    g->x.cfg = *cfg;
    g->x.who = "GGUF export";
    g->arch = arch;
    g->out_type = ot;
    g->permute = !strcmp(arch, "llama");
    g->band = band_bytes < 4096 ? 4096 : band_bytes;
    mp_code rc = gguf_w_open(&g->w, path, 0, e);
    if (!rc) write_arch(g, name);
    rs_sink *s = mp_xcalloc(sizeof *s);
    *s = (rs_sink){.kind = "gguf", .add = gs_add, .meta = gs_meta, .file = gs_file, .commit = gs_commit, .free = gs_free, .impl = g};
    if (rc) { gs_free(s); return rc; }
    *out = s;
    return MP_OK;
}

gguf_writer *rs_sink_gguf_writer(rs_sink *s) { return ((gguf_sink *)s->impl)->w; }

mp_code rs_sink_gguf_verify(rs_sink *s, mp_err *e) { return gguf_w_verify(((gguf_sink *)s->impl)->w, e); }
