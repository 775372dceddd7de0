/*
 * reshard/gguf.c — the GGUF v3 container: quantization, the streaming writer, the bounded reader
 * (reshard/gguf.h has the format and the contract).
 *
 * Writer: metadata and tensor infos are serialized into one growable buffer as they are given (the
 * sizes of all tensors are known from their shapes and types, so every offset is fixed before the first
 * data byte); gguf_w_begin_data writes that buffer and the alignment padding, and the data then flows
 * straight to the file. Reader: a cursor over the header region that refuses every length before it
 * allocates, so a 20-byte file claiming 2^60 tensors costs nothing.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "reshard/gguf.h"
#include "reshard/safetensors.h"

/* ggml's types: name, elements per block, bytes per block (gguf-py constants.py GGML_QUANT_SIZES). */
static const struct { int type; const char *name; int blk, size; } types[] = {
    {0, "F32", 1, 4},        {1, "F16", 1, 2},          {2, "Q4_0", 32, 18},       {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},     {7, "Q5_1", 32, 24},       {8, "Q8_0", 32, 34},       {9, "Q8_1", 32, 40},
    {10, "Q2_K", 256, 84},   {11, "Q3_K", 256, 110},    {12, "Q4_K", 256, 144},    {13, "Q5_K", 256, 176},
    {14, "Q6_K", 256, 210},  {15, "Q8_K", 256, 292},    {16, "IQ2_XXS", 256, 66},  {17, "IQ2_XS", 256, 74},
    {18, "IQ3_XXS", 256, 98}, {19, "IQ1_S", 256, 50},   {20, "IQ4_NL", 32, 18},    {21, "IQ3_S", 256, 110},
    {22, "IQ2_S", 256, 82},  {23, "IQ4_XS", 256, 136},  {24, "I8", 1, 1},          {25, "I16", 1, 2},
    {26, "I32", 1, 4},       {27, "I64", 1, 8},         {28, "F64", 1, 8},         {29, "IQ1_M", 256, 56},
    {30, "BF16", 1, 2},      {34, "TQ1_0", 256, 54},    {35, "TQ2_0", 256, 66},    {39, "MXFP4", 32, 17},
};
#define NTYPES ((int)(sizeof types / sizeof types[0]))

static int type_index(int type) {
    for (int i = 0; i < NTYPES; i++)
        if (types[i].type == type) return i;
    return -1;
}

const char *gguf_type_name(int type) {
    int i = type_index(type);
    return i < 0 ? NULL : types[i].name;
}

int64_t gguf_type_bytes(int type, int64_t n) {
    int i = type_index(type);
    if (i < 0 || n < 0 || n % types[i].blk) return -1;
    return n / types[i].blk * types[i].size;
}

/* ------------------------------------------------------------------------------------ quants */

void gguf_quantize_q8_0(const float *x, int64_t n, uint8_t *out) {
    for (int64_t b = 0; b < n / GGUF_QK; b++, x += GGUF_QK, out += 34) {
        float amax = 0.0f;
        for (int j = 0; j < GGUF_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float d = amax / 127.0f;                  /* ((1 << 7) - 1) */
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t h = st_f32_to_f16(d);
        memcpy(out, &h, 2);
        for (int j = 0; j < GGUF_QK; j++) {
            volatile float v = x[j] * id;   /* one rounded product, as ggml's x0 (no fused multiply) */
            out[2 + j] = (uint8_t)(int8_t)roundf(v);
        }
    }
}

/* Dequantizes one block of q8_0 / q4_0 / q4_1 into 32 floats. The products and the q4_1 sum are
 * rounded separately (volatile), as numpy evaluates (d * q) + m. */
static void dequant_block(int type, const uint8_t *p, float *y) {
    uint16_t h;
    memcpy(&h, p, 2);
    const float d = st_f16_to_f32(h);
    if (type == GGML_Q8_0) {
        for (int j = 0; j < GGUF_QK; j++) y[j] = (float)(int8_t)p[2 + j] * d;
        return;
    }
    float m = 0.0f;
    const uint8_t *qs = p + 2;
    if (type == GGML_Q4_1) {
        memcpy(&h, p + 2, 2);
        m = st_f16_to_f32(h);
        qs = p + 4;
    }
    for (int j = 0; j < GGUF_QK / 2; j++) {
        int lo = qs[j] & 0x0f, hi = qs[j] >> 4;
        if (type == GGML_Q4_0) {
            y[j] = d * (float)(lo - 8);
            y[j + GGUF_QK / 2] = d * (float)(hi - 8);
        } else {
            volatile float a = d * (float)lo, b = d * (float)hi;
            y[j] = a + m;
            y[j + GGUF_QK / 2] = b + m;
        }
    }
}

mp_code gguf_dequantize(int type, const uint8_t *src, int64_t n, float *out, mp_err *e) {
    int64_t bytes = gguf_type_bytes(type, n);
    if (bytes < 0) return mp_err_set(e, MP_EINPUT, "%lld elements are not whole blocks of %s", (long long)n,
                                     gguf_type_name(type) ? gguf_type_name(type) : "an unknown type");
    uint16_t h;
    switch (type) {
    case GGML_F32: memcpy(out, src, (size_t)bytes); return MP_OK;
    case GGML_F16: for (int64_t i = 0; i < n; i++) memcpy(&h, src + 2 * i, 2), out[i] = st_f16_to_f32(h); return MP_OK;
    case GGML_BF16: for (int64_t i = 0; i < n; i++) memcpy(&h, src + 2 * i, 2), out[i] = st_bf16_to_f32(h); return MP_OK;
    case GGML_Q8_0: case GGML_Q4_0: case GGML_Q4_1: {
        int size = types[type_index(type)].size;
        for (int64_t b = 0; b < n / GGUF_QK; b++) dequant_block(type, src + b * size, out + b * GGUF_QK);
        return MP_OK;
    }
    default: return mp_err_set(e, MP_EINPUT, "ggml type %s is not one meshpoint reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1)",
                               gguf_type_name(type) ? gguf_type_name(type) : "(unknown)");
    }
}

/* ------------------------------------------------------------------------------------ writer */

typedef struct w_tensor { char *name; int64_t nbytes; uint64_t hash; } w_tensor;

struct gguf_writer {
    char *path, *partial;
    FILE *f;
    uint32_t alignment;
    uint8_t *kv;          /* serialized metadata */
    size_t kv_n, kv_cap;
    int64_t nkv;
    uint8_t *ti;          /* serialized tensor infos */
    size_t ti_n, ti_cap;
    w_tensor *t;
    int64_t nt, cap_t;
    int64_t data_bytes;   /* padded offsets so far */
    int64_t cur, cur_done;   /* tensor being written, its bytes so far */
    XXH3_state_t *hs;        /* the current tensor's hash so far */
    int created;          /* path.partial is ours (made by begin_data): removed by free unless published */
};

static void buf_put(uint8_t **b, size_t *n, size_t *cap, const void *p, size_t k) {
    if (*n + k > *cap) {
        size_t c = (*n + k) * 2 + 256;
        *b = mp_realloc(*b, *cap, c, MP_MEM_OTHER);
        *cap = c;
    }
    memcpy(*b + *n, p, k);
    *n += k;
}
#define KV_PUT(w, p, k) buf_put(&(w)->kv, &(w)->kv_n, &(w)->kv_cap, (p), (k))

static void kv_str(gguf_writer *w, const char *s, size_t n) {
    uint64_t len = n;
    KV_PUT(w, &len, 8);
    KV_PUT(w, s, n);
}

static void kv_key(gguf_writer *w, const char *key, uint32_t type) {
    kv_str(w, key, strlen(key));
    KV_PUT(w, &type, 4);
    w->nkv++;
}

mp_code gguf_w_open(gguf_writer **out, const char *path, uint32_t alignment, mp_err *e) {
    *out = NULL;
    if (alignment && (alignment & (alignment - 1)))
        return mp_err_set(e, MP_EINTERNAL, "GGUF alignment %u is not a power of two", alignment);
    gguf_writer *w = mp_xcalloc(sizeof *w);
    w->path = mp_strdup(path);
    w->partial = mp_xmalloc(strlen(path) + 9);
    sprintf(w->partial, "%s.partial", path);
    w->alignment = alignment ? alignment : GGUF_DEFAULT_ALIGNMENT;
    w->cur = -1;
    if (alignment && alignment != GGUF_DEFAULT_ALIGNMENT) gguf_w_u32(w, "general.alignment", alignment);
    *out = w;
    return MP_OK;
}

void gguf_w_str(gguf_writer *w, const char *key, const char *v) { kv_key(w, key, GGUF_STRING), kv_str(w, v, strlen(v)); }
void gguf_w_u32(gguf_writer *w, const char *key, uint32_t v) { kv_key(w, key, GGUF_U32), KV_PUT(w, &v, 4); }
void gguf_w_i32(gguf_writer *w, const char *key, int32_t v) { kv_key(w, key, GGUF_I32), KV_PUT(w, &v, 4); }
void gguf_w_f32(gguf_writer *w, const char *key, float v) { kv_key(w, key, GGUF_F32), KV_PUT(w, &v, 4); }
void gguf_w_bool(gguf_writer *w, const char *key, int v) {
    uint8_t b = v != 0;
    kv_key(w, key, GGUF_BOOL), KV_PUT(w, &b, 1);
}

/* The array header: element type and count. */
static void kv_arr(gguf_writer *w, const char *key, uint32_t elem, int64_t n) {
    uint64_t cnt = (uint64_t)n;
    kv_key(w, key, GGUF_ARRAY);
    KV_PUT(w, &elem, 4);
    KV_PUT(w, &cnt, 8);
}

void gguf_w_arr_str(gguf_writer *w, const char *key, const char *const *v, const size_t *len, int64_t n) {
    kv_arr(w, key, GGUF_STRING, n);
    for (int64_t i = 0; i < n; i++) kv_str(w, v[i], len ? len[i] : strlen(v[i]));
}
void gguf_w_arr_i32(gguf_writer *w, const char *key, const int32_t *v, int64_t n) {
    kv_arr(w, key, GGUF_I32, n);
    KV_PUT(w, v, 4 * (size_t)n);
}
void gguf_w_arr_f32(gguf_writer *w, const char *key, const float *v, int64_t n) {
    kv_arr(w, key, GGUF_F32, n);
    KV_PUT(w, v, 4 * (size_t)n);
}

static int64_t pad_to(int64_t x, int64_t a) { return (x + a - 1) / a * a; }

mp_code gguf_w_tensor(gguf_writer *w, const char *name, int ndim, const int64_t *shape, int type, mp_err *e) {
    if (ndim < 1 || ndim > GGUF_MAX_DIMS || w->f) return mp_err_set(e, MP_EINTERNAL, "GGUF tensor %s: %d dims or after the data began", name, ndim);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    int ti = type_index(type);
    int64_t bytes = gguf_type_bytes(type, n);
    if (bytes < 0 || shape[ndim - 1] % types[ti].blk)
        return mp_err_set(e, MP_EINTERNAL, "GGUF tensor %s: rows of %lld elements cannot be %s", name,
                          (long long)shape[ndim - 1], gguf_type_name(type) ? gguf_type_name(type) : "that type");
    uint64_t len = strlen(name), off = (uint64_t)w->data_bytes;
    uint32_t nd = (uint32_t)ndim, ty = (uint32_t)type;
    buf_put(&w->ti, &w->ti_n, &w->ti_cap, &len, 8);
    buf_put(&w->ti, &w->ti_n, &w->ti_cap, name, len);
    buf_put(&w->ti, &w->ti_n, &w->ti_cap, &nd, 4);
    for (int i = ndim - 1; i >= 0; i--) buf_put(&w->ti, &w->ti_n, &w->ti_cap, &shape[i], 8);   /* ne[0] innermost */
    buf_put(&w->ti, &w->ti_n, &w->ti_cap, &ty, 4);
    buf_put(&w->ti, &w->ti_n, &w->ti_cap, &off, 8);
    if (w->nt == w->cap_t) {
        int64_t c = w->cap_t * 2 + 16;
        w->t = mp_realloc(w->t, sizeof *w->t * (size_t)w->cap_t, sizeof *w->t * (size_t)c, MP_MEM_OTHER);
        w->cap_t = c;
    }
    w->t[w->nt++] = (w_tensor){mp_strdup(name), bytes, XXH3_64bits(NULL, 0)};
    w->data_bytes += pad_to(bytes, w->alignment);
    return MP_OK;
}

/* Writes n bytes to the partial file, naming it in the error. */
static mp_code w_write(gguf_writer *w, const void *p, size_t n, mp_err *e) {
    if (n && fwrite(p, 1, n, w->f) != n)
        return mp_err_set(e, MP_EIO, "%s: write failed: %s", w->partial, strerror(errno));
    return MP_OK;
}

/* Moves the data cursor past tensors of no bytes (nothing to wait for). */
static void skip_empty(gguf_writer *w) {
    while (w->cur >= 0 && w->cur < w->nt && w->t[w->cur].nbytes == 0) w->cur++;
}

static mp_code w_zeros(gguf_writer *w, size_t n, mp_err *e) {
    static const uint8_t z[256];
    for (size_t k; n; n -= k) {
        k = n < sizeof z ? n : sizeof z;
        MP_TRY(w_write(w, z, k, e));
    }
    return MP_OK;
}

mp_code gguf_w_begin_data(gguf_writer *w, mp_err *e) {
    if (w->f) return mp_err_set(e, MP_EINTERNAL, "GGUF writer: begin_data twice");
    /* "x": never truncate a file this writer did not make (a stale .partial is the user's to remove) */
    if (!(w->f = fopen(w->partial, "wbx")))
        return mp_err_set(e, errno == EEXIST ? MP_EINPUT : MP_EIO, "%s: cannot create: %s%s", w->partial, strerror(errno),
                          errno == EEXIST ? " (left by an interrupted export? remove it)" : "");
    w->created = 1;
    uint32_t head[2] = {0x46554747u, 3};   /* "GGUF", version 3 */
    uint64_t counts[2] = {(uint64_t)w->nt, (uint64_t)w->nkv};
    MP_TRY(w_write(w, head, 8, e));
    MP_TRY(w_write(w, counts, 16, e));
    MP_TRY(w_write(w, w->kv, w->kv_n, e));
    MP_TRY(w_write(w, w->ti, w->ti_n, e));
    int64_t at = 24 + (int64_t)w->kv_n + (int64_t)w->ti_n;
    MP_TRY(w_zeros(w, (size_t)(pad_to(at, w->alignment) - at), e));
    w->cur = 0;
    w->cur_done = 0;
    skip_empty(w);
    return MP_OK;
}

mp_code gguf_w_data(gguf_writer *w, const void *p, size_t n, mp_err *e) {
    const uint8_t *b = p;
    while (n) {
        if (!w->f || w->cur < 0 || w->cur >= w->nt)
            return mp_err_set(e, MP_EINTERNAL, "GGUF writer: %zu bytes beyond the declared tensors", n);
        const w_tensor *t = &w->t[w->cur];
        size_t k = (size_t)(t->nbytes - w->cur_done) < n ? (size_t)(t->nbytes - w->cur_done) : n;
        MP_TRY(w_write(w, b, k, e));
        if (!w->hs) w->hs = XXH3_createState();
        if (!w->cur_done) XXH3_64bits_reset(w->hs);
        XXH3_64bits_update(w->hs, b, k);
        b += k, n -= k, w->cur_done += (int64_t)k;
        if (w->cur_done == t->nbytes) {
            w->t[w->cur].hash = XXH3_64bits_digest(w->hs);
            MP_TRY(w_zeros(w, (size_t)(pad_to(t->nbytes, w->alignment) - t->nbytes), e));
            w->cur++;
            w->cur_done = 0;
            skip_empty(w);
        }
    }
    return MP_OK;
}

mp_code gguf_w_close(gguf_writer *w, mp_err *e) {
    if (!w->f) MP_TRY(gguf_w_begin_data(w, e));
    if (w->cur != w->nt)
        return mp_err_set(e, MP_EINTERNAL, "GGUF writer: tensor %s got %lld of its %lld bytes", w->t[w->cur].name,
                          (long long)w->cur_done, (long long)w->t[w->cur].nbytes);
    FILE *f = w->f;
    w->f = NULL;
    MP_TRY(mp_fs_close_durable(f, w->partial, e));
    MP_TRY(mp_fs_rename_durable(w->partial, w->path, NULL, e));
    free(w->partial);
    w->partial = NULL;   /* published: nothing for gguf_w_free to remove */
    return MP_OK;
}

void gguf_w_free(gguf_writer *w) {
    if (!w) return;
    if (w->f) fclose(w->f);
    if (w->partial && w->created) unlink(w->partial);
    for (int64_t i = 0; i < w->nt; i++) free(w->t[i].name);
    XXH3_freeState(w->hs);
    free(w->t), free(w->kv), free(w->ti), free(w->path), free(w->partial), free(w);
}

/* ------------------------------------------------------------------------------------ reader */

/* A cursor over the header region: every read is bounded by the file size. */
typedef struct cur {
    gguf_file *g;
    uint64_t at;
    mp_err *e;
} cur;

static mp_code rd(cur *c, void *buf, uint64_t n, const char *what) {
    if (n > c->g->size || c->at > c->g->size - n)
        return mp_err_set(c->e, MP_EINPUT, "%s: %s at byte %llu runs past the end of the file (%llu bytes)", c->g->name,
                          what, (unsigned long long)c->at, (unsigned long long)c->g->size);
    int rc = n ? c->g->read(c->g->ctx, (int64_t)c->at, (size_t)n, buf) : 0;
    if (rc) return mp_err_set(c->e, MP_EIO, "%s: read of %llu bytes at %llu failed: %s", c->g->name,
                              (unsigned long long)n, (unsigned long long)c->at, strerror(rc));
    c->at += n;
    return MP_OK;
}

static mp_code rd_u32(cur *c, uint32_t *v, const char *what) { return rd(c, v, 4, what); }
static mp_code rd_u64(cur *c, uint64_t *v, const char *what) { return rd(c, v, 8, what); }

/* A length-prefixed string into a new NUL-terminated buffer (the length bounded by the bytes left). */
static mp_code rd_str(cur *c, char **s, size_t *len, const char *what) {
    uint64_t n;
    MP_TRY(rd_u64(c, &n, what));
    if (n > c->g->size - c->at)
        return mp_err_set(c->e, MP_EINPUT, "%s: %s of %llu bytes at byte %llu runs past the end of the file", c->g->name,
                          what, (unsigned long long)n, (unsigned long long)c->at);
    char *p = mp_xmalloc((size_t)n + 1);
    mp_code rc = rd(c, p, n, what);
    if (rc) { free(p); return rc; }
    p[n] = '\0';
    *s = p;
    if (len) *len = (size_t)n;
    return MP_OK;
}

static const int vsize[GGUF_NTYPES] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};   /* 0: string, array */
static const char *const vname[GGUF_NTYPES] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool", "string",
                                               "array", "u64", "i64", "f64"};

/* A scalar of numeric type t widened into kv->v. */
static mp_code rd_scalar(cur *c, gguf_kv *kv, int t) {
    uint8_t b[8] = {0};
    MP_TRY(rd(c, b, (uint64_t)vsize[t], kv->key));
    switch (t) {
    case GGUF_I8: kv->v.i = (int8_t)b[0]; break;
    case GGUF_I16: { int16_t x; memcpy(&x, b, 2); kv->v.i = x; break; }
    case GGUF_I32: { int32_t x; memcpy(&x, b, 4); kv->v.i = x; break; }
    case GGUF_F32: { float x; memcpy(&x, b, 4); kv->v.f = x; break; }
    case GGUF_F64: memcpy(&kv->v.f, b, 8); break;
    default: memcpy(&kv->v.u, b, 8); break;   /* unsigned, bool, i64: little-endian widening */
    }
    return MP_OK;
}

/* One array value: numeric elements read as stored, strings one by one (count bounded first). */
static mp_code rd_array(cur *c, gguf_kv *kv) {
    uint32_t t;
    MP_TRY(rd_u32(c, &t, kv->key));
    MP_TRY(rd_u64(c, &kv->n, kv->key));
    if (t >= GGUF_NTYPES || t == GGUF_ARRAY)
        return mp_err_set(c->e, MP_EINPUT, "%s: key %s: array of %s%u (arrays of arrays and unknown types are refused)",
                          c->g->name, kv->key, t == GGUF_ARRAY ? "arrays, type " : "type ", t);
    kv->arr_type = (int)t;
    uint64_t left = c->g->size - c->at, each = t == GGUF_STRING ? 8 : (uint64_t)vsize[t];
    if (kv->n > left / each)
        return mp_err_set(c->e, MP_EINPUT, "%s: key %s: array of %llu %s elements runs past the end of the file",
                          c->g->name, kv->key, (unsigned long long)kv->n, vname[t]);
    if (t != GGUF_STRING) {
        kv->arr = mp_xmalloc((size_t)(kv->n * each) + 1);
        return rd(c, kv->arr, kv->n * each, kv->key);
    }
    char **s = mp_xcalloc(sizeof *s * (size_t)kv->n + 1);
    kv->arr = s;
    kv->arr_len = mp_xcalloc(sizeof *kv->arr_len * (size_t)kv->n + 1);
    for (uint64_t i = 0; i < kv->n; i++) MP_TRY(rd_str(c, &s[i], &kv->arr_len[i], kv->key));
    return MP_OK;
}

static mp_code rd_kv(cur *c, gguf_kv *kv) {
    MP_TRY(rd_str(c, &kv->key, NULL, "a metadata key"));
    uint32_t t;
    MP_TRY(rd_u32(c, &t, kv->key));
    if (t >= GGUF_NTYPES) return mp_err_set(c->e, MP_EINPUT, "%s: key %s has value type %u (not a GGUF type)", c->g->name, kv->key, t);
    kv->type = (int)t;
    if (t == GGUF_STRING) return rd_str(c, &kv->str, &kv->str_len, kv->key);
    if (t == GGUF_ARRAY) return rd_array(c, kv);
    return rd_scalar(c, kv, (int)t);
}

/* One tensor info: name, dims (reversed into numpy order), type, offset (relative until checked). */
static mp_code rd_tensor(cur *c, gguf_tensor *t) {
    MP_TRY(rd_str(c, &t->name, NULL, "a tensor name"));
    uint32_t nd, ty;
    MP_TRY(rd_u32(c, &nd, t->name));
    if (nd < 1 || nd > GGUF_MAX_DIMS) return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s has %u dims (1..4)", c->g->name, t->name, nd);
    t->ndim = (int)nd;
    int64_t n = 1;
    for (int i = (int)nd - 1; i >= 0; i--) {
        uint64_t d;
        MP_TRY(rd_u64(c, &d, t->name));
        if (d > (uint64_t)c->g->size * 8 || (d && (uint64_t)n > (uint64_t)c->g->size * 8 / d))   /* >= 8 elements a byte in no type */
            return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s: dimension %llu is larger than the file could hold",
                              c->g->name, t->name, (unsigned long long)d);
        t->shape[i] = (int64_t)d;
        n *= (int64_t)d;
    }
    MP_TRY(rd_u32(c, &ty, t->name));
    MP_TRY(rd_u64(c, &t->offset, t->name));
    t->type = (int)ty;
    if (!gguf_type_name((int)ty))
        return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s has ggml type %u (not a known type)", c->g->name, t->name, ty);
    int ti = type_index((int)ty);
    if (t->shape[nd - 1] % types[ti].blk)
        return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s: rows of %lld elements are not whole %s blocks of %d", c->g->name,
                          t->name, (long long)t->shape[nd - 1], types[ti].name, types[ti].blk);
    t->nbytes = gguf_type_bytes((int)ty, n);
    return MP_OK;
}

static int cmp_name(const void *a, const void *b) { return strcmp(**(char *const *const *)a, **(char *const *const *)b); }

/* The first name given twice among n names (each at stride bytes from base's first), or NULL. */
static const char *first_dup(void *base, size_t stride, int64_t n) {
    char ***p = mp_xmalloc(sizeof *p * (size_t)n + 1);
    for (int64_t i = 0; i < n; i++) p[i] = (char **)((char *)base + stride * (size_t)i);
    qsort(p, (size_t)n, sizeof *p, cmp_name);
    const char *d = NULL;
    for (int64_t i = 1; i < n && !d; i++)
        if (!strcmp(*p[i], *p[i - 1])) d = *p[i];
    free(p);
    return d;
}

/* After the infos: general.alignment, duplicates, and each tensor's offset where llama.cpp's loader
 * expects it (consecutive, aligned) and its bytes inside the file; offsets made absolute. */
static mp_code check_layout(cur *c) {
    gguf_file *g = c->g;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t k = gguf_find_kv(g, "general.alignment");
    if (k >= 0) {
        if (g->kv[k].type != GGUF_U32 || !g->kv[k].v.u || (g->kv[k].v.u & (g->kv[k].v.u - 1)))
            return mp_err_set(c->e, MP_EINPUT, "%s: general.alignment is not a u32 power of two", g->name);
        g->alignment = g->kv[k].v.u;
    }
    const char *d = first_dup(g->kv, sizeof *g->kv, g->nkv);
    if (d) return mp_err_set(c->e, MP_EINPUT, "%s: metadata key %s is given twice", g->name, d);
    if ((d = first_dup(g->t, sizeof *g->t, g->nt))) return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s is given twice", g->name, d);
    g->data_offset = (uint64_t)pad_to((int64_t)c->at, (int64_t)g->alignment);
    uint64_t want = 0;
    for (int64_t i = 0; i < g->nt; i++) {
        gguf_tensor *t = &g->t[i];
        if (t->offset != want)
            return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s is at data offset %llu, expected %llu (aligned, after the "
                              "previous tensor)", g->name, t->name, (unsigned long long)t->offset, (unsigned long long)want);
        if (g->data_offset > g->size || want > g->size - g->data_offset || (uint64_t)t->nbytes > g->size - g->data_offset - want)
            return mp_err_set(c->e, MP_EINPUT, "%s: tensor %s (%lld bytes at data offset %llu) runs past the end of the file",
                              g->name, t->name, (long long)t->nbytes, (unsigned long long)want);
        t->offset += g->data_offset;
        want += (uint64_t)pad_to(t->nbytes, (int64_t)g->alignment);
    }
    return MP_OK;
}

/* The header: magic, version, counts (each bounded by the smallest bytes an entry takes). */
static mp_code rd_header(cur *c) {
    gguf_file *g = c->g;
    uint32_t magic;
    uint64_t nt, nkv;
    MP_TRY(rd_u32(c, &magic, "the magic"));
    if (magic != 0x46554747u) return mp_err_set(c->e, MP_EINPUT, "%s: not a GGUF file (no \"GGUF\" magic)", g->name);
    MP_TRY(rd_u32(c, &g->version, "the version"));
    if (g->version != 2 && g->version != 3)
        return mp_err_set(c->e, MP_EINPUT, "%s: GGUF version %u (meshpoint reads 2 and 3)", g->name, g->version);
    MP_TRY(rd_u64(c, &nt, "the tensor count"));
    MP_TRY(rd_u64(c, &nkv, "the metadata count"));
    uint64_t left = g->size - c->at;
    if (nkv > left / 13 || nt > left / 32)   /* the least bytes a metadata entry (13) and a tensor info (32) take */
        return mp_err_set(c->e, MP_EINPUT, "%s: %llu tensors and %llu metadata entries cannot fit in %llu bytes", g->name,
                          (unsigned long long)nt, (unsigned long long)nkv, (unsigned long long)g->size);
    g->kv = mp_xcalloc(sizeof *g->kv * ((size_t)nkv + 1));
    g->t = mp_xcalloc(sizeof *g->t * ((size_t)nt + 1));
    for (; (uint64_t)g->nkv < nkv; g->nkv++) MP_TRY(rd_kv(c, &g->kv[g->nkv]));
    for (; (uint64_t)g->nt < nt; g->nt++) MP_TRY(rd_tensor(c, &g->t[g->nt]));
    return check_layout(c);
}

mp_code gguf_parse(gguf_file **out, const char *name, uint64_t size, int (*read)(void *, int64_t, size_t, void *),
                   void *ctx, mp_err *e) {
    *out = NULL;
    gguf_file *g = mp_xcalloc(sizeof *g);
    g->name = mp_strdup(name);
    g->size = size;
    g->read = read;
    g->ctx = ctx;
    cur c = {g, 0, e};
    mp_code rc = rd_header(&c);
    if (rc) {
        g->nkv += g->kv && g->kv[g->nkv].key;   /* also free the entry that failed half-read (a spare slot) */
        g->nt += g->t && g->t[g->nt].name;
        gguf_close(g);
        return rc;
    }
    *out = g;
    return MP_OK;
}

static int file_read(void *ctx, int64_t off, size_t n, void *buf) {
    FILE *f = ctx;
    if (fseeko(f, (off_t)off, SEEK_SET)) return errno ? errno : EIO;
    if (fread(buf, 1, n, f) != n) return EIO;
    return 0;
}

mp_code gguf_open(gguf_file **out, const char *path, mp_err *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return mp_err_set(e, MP_EINPUT, "%s: cannot open: %s", path, strerror(errno));
    if (fseeko(f, 0, SEEK_END)) { fclose(f); return mp_err_set(e, MP_EINPUT, "%s: cannot seek (not a regular file?)", path); }
    off_t size = ftello(f);
    mp_code rc = size < 0 ? mp_err_set(e, MP_EINPUT, "%s: cannot tell its size", path)
                          : gguf_parse(out, path, (uint64_t)size, file_read, f, e);
    if (rc) { fclose(f); return rc; }
    (*out)->fp = f;
    return MP_OK;
}

void gguf_close(gguf_file *g) {
    if (!g) return;
    for (int64_t i = 0; i < g->nkv; i++) {
        gguf_kv *kv = &g->kv[i];
        if (kv->type == GGUF_ARRAY && kv->arr_type == GGUF_STRING && kv->arr)
            for (uint64_t j = 0; j < kv->n; j++) free(((char **)kv->arr)[j]);
        free(kv->key), free(kv->str), free(kv->arr), free(kv->arr_len);
    }
    for (int64_t i = 0; i < g->nt; i++) free(g->t[i].name);
    if (g->fp) fclose(g->fp);
    free(g->kv), free(g->t), free(g->name), free(g);
}

int64_t gguf_find_kv(const gguf_file *g, const char *key) {
    for (int64_t i = 0; i < g->nkv; i++)
        if (!strcmp(g->kv[i].key, key)) return i;
    return -1;
}

int64_t gguf_find_tensor(const gguf_file *g, const char *name) {
    for (int64_t i = 0; i < g->nt; i++)
        if (!strcmp(g->t[i].name, name)) return i;
    return -1;
}

mp_code gguf_read_data(const gguf_file *g, const gguf_tensor *t, int64_t off, size_t n, void *buf, mp_err *e) {
    if (off < 0 || (uint64_t)off > (uint64_t)t->nbytes || n > (uint64_t)(t->nbytes - off))
        return mp_err_set(e, MP_EINTERNAL, "%s: tensor %s: read of %zu bytes at %lld is outside it", g->name, t->name, n, (long long)off);
    int rc = g->read(g->ctx, (int64_t)t->offset + off, n, buf);
    if (rc) return mp_err_set(e, MP_EIO, "%s: tensor %s: read failed: %s", g->name, t->name, strerror(rc));
    return MP_OK;
}

mp_code gguf_w_verify(const gguf_writer *w, mp_err *e) {
    gguf_file *g = NULL;
    MP_TRY(gguf_open(&g, w->path, e));
    size_t hn = w->kv_n + w->ti_n;
    uint8_t *h = mp_xmalloc(hn + 1);
    mp_code rc = g->nt != w->nt || g->nkv != w->nkv
                     ? mp_err_set(e, MP_ECHECK, "%s: %lld tensors and %lld keys, %lld and %lld written", w->path,
                                  (long long)g->nt, (long long)g->nkv, (long long)w->nt, (long long)w->nkv)
                     : g->read(g->ctx, 24, hn, h) ? mp_err_set(e, MP_EIO, "%s: cannot read its header back", w->path)
                     : memcmp(h, w->kv, w->kv_n) || memcmp(h + w->kv_n, w->ti, w->ti_n)
                         ? mp_err_set(e, MP_ECHECK, "%s: the metadata or tensor infos read back differ", w->path) : MP_OK;
    free(h);
    size_t cap = 1 << 20;
    uint8_t *buf = rc ? NULL : mp_xmalloc(cap);
    XXH3_state_t *hs = XXH3_createState();
    for (int64_t i = 0; i < g->nt && !rc; i++) {
        const gguf_tensor *t = &g->t[i];
        XXH3_64bits_reset(hs);
        for (int64_t at = 0; at < t->nbytes && !rc; at += (int64_t)cap) {
            size_t k = t->nbytes - at < (int64_t)cap ? (size_t)(t->nbytes - at) : cap;
            rc = gguf_read_data(g, t, at, k, buf, e);
            XXH3_64bits_update(hs, buf, k);
        }
        uint64_t hash = XXH3_64bits_digest(hs);
        if (!rc && (strcmp(t->name, w->t[i].name) || hash != w->t[i].hash))
            rc = mp_err_set(e, MP_ECHECK, "%s: tensor %s reads back other bytes than were written", w->path, t->name);
    }
    free(buf);
    XXH3_freeState(hs);
    gguf_close(g);
    return rc;
}
