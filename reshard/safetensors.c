/*
 * reshard/safetensors.c — see safetensors.h. Design:
 *   - The header is the only thing read whole (at most ST_MAX_HEADER bytes); it is checked for UTF-8
 *     before cJSON sees it, parsed with an explicit length (a header need not be NUL-terminated), and
 *     its trailing bytes may only be whitespace (the format pads with spaces).
 *   - Duplicate keys: cJSON keeps every member of an object in its child list, so a repeated key is
 *     found by sorting the member names, not by lookup (cJSON_GetObjectItem returns the first only).
 *   - Offsets are checked by sorting the tensors by (begin, end) and walking them: each must begin
 *     where the previous ended (0 for the first), and the last must end at the end of the data.
 *   - Data is read by pread into the caller's fp32 buffer: 2-byte dtypes are read into the upper half
 *     of the destination and widened front to back in place (element i's 4 bytes never overtake
 *     element i+1's 2 source bytes), so reading needs no scratch buffer; the one exception is a narrow
 *     column range, read as whole rows through a 1 MiB buffer (read_row_chunks says why).
 * Little-endian hosts only (the format's byte order is copied as is).
 */
#define _GNU_SOURCE
#include "reshard/safetensors.h"
#include <assert.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "core/alloc.h"
#include "core/config.h"
#include "core/fsutil.h"
#include "core/tensor.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "reshard/safetensors.c assumes a little-endian host"
#endif

static const char *const dtype_names[ST_NDTYPES] = {"BOOL", "U8", "I8", "F8_E5M2", "F8_E4M3", "I16", "U16", "F16",
                                                     "BF16", "I32", "U32", "F32", "F64", "I64", "U64"};
static const int dtype_sizes[ST_NDTYPES] = {1, 1, 1, 1, 1, 2, 2, 2, 2, 4, 4, 4, 8, 8, 8};

const char *st_dtype_name(st_dtype d) { return d >= 0 && d < ST_NDTYPES ? dtype_names[d] : "?"; }
int st_dtype_size(st_dtype d) { return d >= 0 && d < ST_NDTYPES ? dtype_sizes[d] : 0; }

/* ----------------------------------------------------------------------------- conversions */

uint16_t st_f32_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);   /* NaN stays a (quiet) NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

float st_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float x;
    memcpy(&x, &u, 4);
    return x;
}

float st_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, ex = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (ex == 0x1f) u = sign | 0x7f800000u | (man << 13);            /* inf, NaN */
    else if (ex) u = sign | ((ex + 112) << 23) | (man << 13);         /* normal */
    else if (!man) u = sign;                                          /* zero */
    else {                                                            /* subnormal: normalise */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float x;
    memcpy(&x, &u, 4);
    return x;
}

uint16_t st_f32_to_f16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return sign | 0x7e00u;                       /* NaN */
    if (a >= 0x477ff000u) return sign | 0x7c00u;                      /* rounds to >= 65520: inf */
    if (a < 0x38800000u) {                                            /* below 2^-14: subnormal or 0 */
        float f;
        memcpy(&f, &a, 4);
        return sign | (uint16_t)nearbyintf(f * 16777216.0f);         /* units of 2^-24, ties to even */
    }
    uint32_t r = a + 0xfffu + ((a >> 13) & 1u);                       /* round mantissa to 10 bits */
    return sign | (uint16_t)(((r >> 13) - (112u << 10)) & 0x7fffu);
}

/* st_f32_to_f16 over a band, written so that gcc vectorises it (-O3, SSE4.2 and up): every lane computes
 * all three results — the normal one (the scalar's integer rounding), the subnormal one and the NaN/inf
 * constants — and masks pick one, with no branch per element. The subnormal case (|x| < 2^-14) is the
 * scalar's nearbyintf(|x| * 2^24) done as one float add: |x| + 0.5f has an ulp of 2^-24, so the add
 * rounds |x| to a multiple of 2^-24, to nearest even, and the low mantissa bits of the sum are that
 * multiple (0..1024; 1024 is the smallest normal f16, as the scalar gives). The add runs for every lane
 * (an FP operation under a condition would stop the vectoriser). Bitwise st_f32_to_f16 for all 2^32
 * inputs (tests/test_safetensors.c sweeps them). */
void st_f32_to_f16_n(uint16_t *restrict dst, const float *restrict src, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        float x = src[i], ax = fabsf(x), sub = ax + 0.5f;
        uint32_t u, a, s;
        memcpy(&u, &x, 4);
        memcpy(&s, &sub, 4);
        a = u & 0x7fffffffu;
        uint32_t norm = (((a + 0xfffu + ((a >> 13) & 1u)) >> 13) - (112u << 10)) & 0x7fffu;
        uint32_t m_sub = 0u - (uint32_t)(a < 0x38800000u), m_inf = 0u - (uint32_t)(a >= 0x477ff000u),
                 m_nan = 0u - (uint32_t)(a > 0x7f800000u);
        uint32_t h = ((s - 0x3f000000u) & m_sub) | (norm & ~m_sub);
        h = (0x7c00u & m_inf) | (h & ~m_inf);
        h = (0x7e00u & m_nan) | (h & ~m_nan);
        dst[i] = (uint16_t)(((u >> 16) & 0x8000u) | h);
    }
}

/* ------------------------------------------------------------------------------- header */

/* Offset of the first byte that is not valid UTF-8 (overlongs, surrogates, > U+10FFFF refused), or -1. */
static int64_t utf8_bad_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) { i++; continue; }
        int k;
        unsigned min, cp;
        if ((c & 0xe0) == 0xc0) k = 1, min = 0x80, cp = c & 0x1f;
        else if ((c & 0xf0) == 0xe0) k = 2, min = 0x800, cp = c & 0x0f;
        else if ((c & 0xf8) == 0xf0) k = 3, min = 0x10000, cp = c & 0x07;
        else return (int64_t)i;
        if (i + (size_t)k >= n) return (int64_t)i;   /* truncated sequence */
        for (int j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return (int64_t)i;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return (int64_t)i;
        i += (size_t)k + 1;
    }
    return -1;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

/* The first member name of obj that appears twice, or NULL. */
static const char *first_duplicate(const cJSON *obj, int n) {
    const char **names = mp_xmalloc(sizeof *names * (size_t)(n + 1));
    int k = 0;
    for (const cJSON *c = obj->child; c; c = c->next) names[k++] = c->string;
    qsort(names, (size_t)k, sizeof *names, cmp_str);
    const char *dup = NULL;
    for (int i = 1; i < k && !dup; i++)
        if (!strcmp(names[i - 1], names[i])) dup = names[i];
    free(names);
    return dup;
}

/* A non-negative integer JSON number (exact in a double) into *v; 0 if it is not one. */
static int json_count(const cJSON *j, int64_t *v) {
    return cJSON_IsNumber(j) && mp_double_to_i64(j->valuedouble, 0, (int64_t)1 << 53, v);
}

/* Fills *t from the header entry j (key name); checks dtype, shape, offsets and their byte size. */
static mp_code parse_tensor(const char *file, const cJSON *j, st_tensor *t, mp_err *e) {
    const char *nm = j->string;
    if (!cJSON_IsObject(j)) return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": expected an object", file, nm);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(j, "dtype"), *sh = cJSON_GetObjectItemCaseSensitive(j, "shape"),
                *of = cJSON_GetObjectItemCaseSensitive(j, "data_offsets");
    if (!cJSON_IsString(dt) || !cJSON_IsArray(sh) || !cJSON_IsArray(of))
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": needs \"dtype\" (string), \"shape\" and \"data_offsets\" (arrays)",
                          file, nm);
    t->dtype = ST_NDTYPES;
    for (int d = 0; d < ST_NDTYPES; d++)
        if (!strcmp(dt->valuestring, dtype_names[d])) t->dtype = (st_dtype)d;
    if (t->dtype == ST_NDTYPES)
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": unknown dtype \"%s\"", file, nm, dt->valuestring);
    t->ndim = cJSON_GetArraySize(sh);
    if (t->ndim > ST_MAX_DIMS)
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": %d dimensions (at most %d)", file, nm, t->ndim, ST_MAX_DIMS);
    int64_t bytes = st_dtype_size(t->dtype), k = 0;
    int over = 0;
    for (const cJSON *c = sh->child; c; c = c->next, k++) {
        if (!json_count(c, &t->shape[k]))
            return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": shape entries must be integers >= 0", file, nm);
        over |= __builtin_mul_overflow(bytes, t->shape[k], &bytes);
    }
    if (cJSON_GetArraySize(of) != 2 || !json_count(of->child, &t->begin) || !json_count(of->child->next, &t->end) ||
        t->end < t->begin)
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": data_offsets must be [begin, end] with 0 <= begin <= end",
                          file, nm);
    if (over || bytes != t->end - t->begin)
        return mp_err_set(e, MP_EINPUT,
                          "%s: tensor \"%s\": its shape of %s is %s%lld bytes, but data_offsets [%lld, %lld] hold %lld",
                          file, nm, dtype_names[t->dtype], over ? "over " : "", over ? (long long)INT64_MAX : (long long)bytes,
                          (long long)t->begin, (long long)t->end, (long long)(t->end - t->begin));
    t->name = mp_strdup(nm);
    return MP_OK;
}

static int cmp_range(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    return (x->end > y->end) - (x->end < y->end);
}

/* The tensors must tile [0, data_size) exactly: no overlap, no gap, no trailing bytes. */
static mp_code check_offsets(const char *file, st_tensor *t, int n, int64_t data_size, mp_err *e) {
    for (int i = 0; i < n; i++)
        if (t[i].end > data_size)
            return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": data_offsets [%lld, %lld] run past the end of the data (%lld bytes)",
                              file, t[i].name, (long long)t[i].begin, (long long)t[i].end, (long long)data_size);
    st_tensor **s = mp_xmalloc(sizeof *s * (size_t)(n + 1));
    for (int i = 0; i < n; i++) s[i] = &t[i];
    qsort(s, (size_t)n, sizeof *s, cmp_range);
    mp_code rc = MP_OK;
    int64_t at = 0;
    for (int i = 0; i < n && !rc; i++) {
        if (s[i]->begin < at)
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": data_offsets [%lld, %lld] overlap tensor \"%s\" (ends at %lld)",
                            file, s[i]->name, (long long)s[i]->begin, (long long)s[i]->end, s[i - 1]->name, (long long)at);
        else if (s[i]->begin > at)
            rc = mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": data_offsets [%lld, %lld] leave a gap: bytes [%lld, %lld) belong to no tensor",
                            file, s[i]->name, (long long)s[i]->begin, (long long)s[i]->end, (long long)at, (long long)s[i]->begin);
        at = s[i]->end;
    }
    if (!rc && at != data_size)
        rc = mp_err_set(e, MP_EINPUT, "%s: %lld trailing bytes after the last tensor%s%s%s (data ends at %lld, the file's at %lld)",
                        file, (long long)(data_size - at), n ? " (\"" : "", n ? s[n - 1]->name : "", n ? "\")" : "",
                        (long long)at, (long long)data_size);
    free(s);
    return rc;
}

/* __metadata__: an object of strings. */
static mp_code check_metadata(const char *file, const cJSON *m, mp_err *e) {
    if (!cJSON_IsObject(m)) return mp_err_set(e, MP_EINPUT, "%s: \"__metadata__\" must be an object of strings", file);
    for (const cJSON *c = m->child; c; c = c->next)
        if (!cJSON_IsString(c))
            return mp_err_set(e, MP_EINPUT, "%s: \"__metadata__\": value of \"%s\" is not a string", file, c->string);
    return MP_OK;
}

void st_tensors_free(st_tensor *t, int n) {
    for (int i = 0; t && i < n; i++) free(t[i].name);
    free(t);
}

/* cJSON's parse of the header, NULL (with the message set) if it is not JSON with only whitespace after. */
static cJSON *parse_json(const char *name, const char *hdr, size_t len, mp_err *e) {
    int64_t bad = utf8_bad_at((const unsigned char *)hdr, len);
    if (bad >= 0) {
        mp_err_set(e, MP_EINPUT, "%s: the header is not valid UTF-8 (byte %lld of it)", name, (long long)bad);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = len ? cJSON_ParseWithLengthOpts(hdr, len, &end, 0) : NULL;
    if (!root) {
        mp_err_set(e, MP_EINPUT, "%s: the header is not JSON", name);
        return NULL;
    }
    for (const char *p = end; p < hdr + len; p++)
        if (!strchr(" \t\r\n", *p)) {
            mp_err_set(e, MP_EINPUT, "%s: the header has bytes after its JSON value (at byte %lld)", name,
                       (long long)(p - hdr));
            cJSON_Delete(root);
            return NULL;
        }
    return root;
}

mp_code st_parse_header(const char *name, const char *hdr, size_t len, int64_t data_size, st_tensor **out, int *nout,
                        mp_err *e) {
    *out = NULL;
    *nout = 0;
    cJSON *root = parse_json(name, hdr, len, e);
    if (!root) return MP_EINPUT;
    mp_code rc = MP_OK;
    int members = cJSON_GetArraySize(root), n = 0;
    st_tensor *t = mp_xcalloc(sizeof *t * (size_t)(members + 1));
    const char *dup;
    if (!cJSON_IsObject(root)) {
        rc = mp_err_set(e, MP_EINPUT, "%s: the header is not a JSON object", name);
    } else if ((dup = first_duplicate(root, members))) {
        rc = mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\": key appears twice in the header", name, dup);
    } else {
        for (const cJSON *c = root->child; c && !rc; c = c->next) {
            if (!strcmp(c->string, "__metadata__")) rc = check_metadata(name, c, e);
            else if (!(rc = parse_tensor(name, c, &t[n], e))) n++;
        }
    }
    if (!rc) rc = check_offsets(name, t, n, data_size, e);
    cJSON_Delete(root);
    if (rc) { st_tensors_free(t, n); return rc; }
    *out = t;
    *nout = n;
    return MP_OK;
}

/* ---------------------------------------------------------------------------------- reader */

/* pread of exactly n bytes at off; MP_EIO naming path for an error or a short file. */
static mp_code pread_full(int fd, const char *path, void *buf, size_t n, int64_t off, mp_err *e) {
    char *p = buf;
    while (n) {
        ssize_t r = pread(fd, p, n, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return mp_err_set(e, MP_EIO, "%s: reading %zu bytes at offset %lld: %s", path, n, (long long)off, strerror(errno));
        if (r == 0) return mp_err_set(e, MP_EIO, "%s: file ends before offset %lld (truncated while open?)", path, (long long)off);
        p += r;
        n -= (size_t)r;
        off += r;
    }
    return MP_OK;
}

mp_code st_open(st_file **out, const char *path, mp_err *e) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mp_err_set(e, errno == ENOENT ? MP_EINPUT : MP_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    mp_code rc = MP_OK;
    uint64_t hl = 0;
    if (fstat(fd, &sb) != 0) rc = mp_err_set(e, MP_EIO, "%s: stat: %s", path, strerror(errno));
    else if (sb.st_size < 8)
        rc = mp_err_set(e, MP_EINPUT, "%s: %lld bytes, too short for the 8-byte header length", path, (long long)sb.st_size);
    else rc = pread_full(fd, path, &hl, 8, 0, e);
    if (!rc && hl > ST_MAX_HEADER)
        rc = mp_err_set(e, MP_EINPUT, "%s: header length %llu is over the limit of %d bytes", path, (unsigned long long)hl,
                        ST_MAX_HEADER);
    else if (!rc && (int64_t)hl > sb.st_size - 8)
        rc = mp_err_set(e, MP_EINPUT, "%s: header length %llu runs past the end of the file (%lld bytes)", path,
                        (unsigned long long)hl, (long long)sb.st_size);
    if (rc) { close(fd); return rc; }
    char *hdr = mp_xmalloc(hl + 1);
    st_tensor *t = NULL;
    int n = 0;
    rc = pread_full(fd, path, hdr, hl, 8, e);
    if (!rc) rc = st_parse_header(path, hdr, hl, sb.st_size - 8 - (int64_t)hl, &t, &n, e);
    free(hdr);
    if (rc) { close(fd); return rc; }
    st_file *f = mp_xcalloc(sizeof *f);
    *f = (st_file){.path = mp_strdup(path), .fd = fd, .file_size = sb.st_size, .data_start = 8 + (int64_t)hl, .n = n, .t = t};
    *out = f;
    return MP_OK;
}

void st_close(st_file *f) {
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    st_tensors_free(f->t, f->n);
    free(f->path);
    free(f);
}

int st_find(const st_file *f, const char *name) {
    for (int i = 0; i < f->n; i++)
        if (!strcmp(f->t[i].name, name)) return i;
    return -1;
}

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

/* Widens n 2-byte values of dtype dt (BF16 or F16) at src to fp32 at out, front to back: src may be
 * the upper half of out (element i's 4 bytes never overtake element i+1's 2 source bytes). */
static void widen(st_dtype dt, const uint16_t *src, int64_t n, float *out) {
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = src[i];
        out[i] = dt == ST_BF16 ? st_bf16_to_f32(h) : st_f16_to_f32(h);
    }
}

/* Reads count elements of t starting at element index first into out as fp32 (see the top of file). */
static mp_code read_run(st_file *f, const st_tensor *t, int64_t first, int64_t count, float *out, mp_err *e) {
    int es = st_dtype_size(t->dtype);
    int64_t at = f->data_start + t->begin + first * es;
    if (t->dtype == ST_F32) {
        MP_TRY(pread_full(f->fd, f->path, out, (size_t)count * 4, at, e));
    } else {
        uint16_t *src = (uint16_t *)(out + count) - count;   /* the upper half of out */
        MP_TRY(pread_full(f->fd, f->path, src, (size_t)count * 2, at, e));
        widen(t->dtype, src, count, out);
    }
    f->bytes_read += count * es;
    return MP_OK;
}

/* A column range narrower than ST_SEG_MIN bytes per row is read as whole rows, ST_ROWS_CHUNK bytes
 * of them per pread, and its segments copied out: one pread per 2 KiB segment (o_proj at tp8) cost
 * more than the copies of the other columns from the page cache, which st_prefetch has asked the disk
 * for anyway (docs/BENCH_RESHARD.md: import at tp8 1.36x -> 1.10-1.16x the copy floor). */
#define ST_SEG_MIN (64 << 10)
#define ST_ROWS_CHUNK (1 << 20)

/* Reads rows [r0, r0 + nr) of t (cols elements each, es bytes per element) whole, ST_ROWS_CHUNK
 * bytes at a time, and copies columns [c0, c0 + nc) of each into out (nr x nc fp32). */
static mp_code read_row_chunks(st_file *f, const st_tensor *t, int64_t cols, int64_t r0, int64_t nr, int64_t c0,
                               int64_t nc, float *out, mp_err *e) {
    int es = st_dtype_size(t->dtype);
    int64_t per = ST_ROWS_CHUNK / (cols * es);
    assert(per >= 1);
    if (per > nr) per = nr;
    size_t cap = (size_t)(per * cols * es);
    char *buf = mp_malloc(cap, MP_MEM_OTHER);
    mp_code rc = MP_OK;
    for (int64_t r = 0; r < nr && rc == MP_OK; r += per) {
        int64_t k = nr - r < per ? nr - r : per;
        rc = pread_full(f->fd, f->path, buf, (size_t)(k * cols * es), f->data_start + t->begin + (r0 + r) * cols * es, e);
        for (int64_t i = 0; i < k && rc == MP_OK; i++) {
            const char *seg = buf + (i * cols + c0) * es;
            if (t->dtype == ST_F32) memcpy(out + (r + i) * nc, seg, (size_t)nc * 4);
            else widen(t->dtype, (const uint16_t *)seg, nc, out + (r + i) * nc);
        }
        if (rc == MP_OK) f->bytes_read += k * cols * es;
    }
    mp_free_acct(buf, cap, MP_MEM_OTHER);
    return rc;
}

/* Rows and columns of t as a matrix (a 1-D tensor is one row) and the box (off, shape) in them; 0 if
 * the box is not inside t. */
static int box_geom(const st_tensor *t, const int64_t *off, const int64_t *shape, int64_t *cols, int64_t *r0,
                    int64_t *nr, int64_t *c0, int64_t *nc) {
    int64_t rows = t->ndim ? t->shape[0] : 1;
    *cols = st_numel(t) / (rows ? rows : 1);
    *r0 = off[0], *nr = shape[0], *c0 = t->ndim >= 2 ? off[1] : 0, *nc = t->ndim >= 2 ? shape[1] : *cols;
    return !(t->ndim > 2 || *r0 < 0 || *nr < 0 || *r0 + *nr > rows || *c0 < 0 || *nc < 0 || *c0 + *nc > *cols);
}

void st_prefetch(st_file *f, const st_tensor *t, const int64_t *off, const int64_t *shape) {
    int64_t cols, r0, nr, c0, nc;
    if (!box_geom(t, off, shape, &cols, &r0, &nr, &c0, &nc) || nr <= 0 || nc <= 0) return;
    int es = st_dtype_size(t->dtype);
    int64_t first = r0 * cols + c0, last = (r0 + nr - 1) * cols + c0 + nc;   /* elements [first, last) */
    posix_fadvise(f->fd, (off_t)(f->data_start + t->begin + first * es), (off_t)((last - first) * es),
                  POSIX_FADV_WILLNEED);
}

mp_code st_read_f32(st_file *f, const st_tensor *t, const int64_t *off, const int64_t *shape, float *out, mp_err *e) {
    if (t->dtype != ST_F32 && t->dtype != ST_BF16 && t->dtype != ST_F16)
        return mp_err_set(e, MP_EINPUT, "%s: tensor \"%s\" is %s: only F32, BF16 and F16 are read", f->path, t->name,
                          dtype_names[t->dtype]);
    int64_t cols, r0, nr, c0, nc;
    if (!box_geom(t, off, shape, &cols, &r0, &nr, &c0, &nc))
        return mp_err_set(e, MP_EINTERNAL, "%s: tensor \"%s\": box outside the tensor", f->path, t->name);
    if (nc == cols) return read_run(f, t, r0 * cols, nr * cols, out, e);   /* whole rows: one range */
    /* a column range of several rows: the disk reads the whole span at once (a column slice of a wide
     * row is less than a page, so readahead would see random reads, one page per row); narrow segments
     * come out of whole rows, wide ones one pread each */
    if (nr > 1) st_prefetch(f, t, off, shape);
    int es = st_dtype_size(t->dtype);
    if (nr > 1 && nc > 0 && nc * es < ST_SEG_MIN && cols * es <= ST_ROWS_CHUNK)
        return read_row_chunks(f, t, cols, r0, nr, c0, nc, out, e);
    for (int64_t r = 0; r < nr; r++) MP_TRY(read_run(f, t, (r0 + r) * cols + c0, nc, out + r * nc, e));
    return MP_OK;
}

/* ---------------------------------------------------------------------------------- writer */

struct st_writer {
    char *path;
    mp_fs_out out;         /* the fs layer's temp-file convention: path.tmp.<pid> until st_writer_close */
    int n, cur;            /* declared tensors; the one being written */
    st_dtype *dtype;
    int64_t *numel;
    int64_t left;          /* elements of tensor cur still to come */
    uint8_t *buf;          /* conversion buffer */
};

#define ST_WBUF_ELEMS 65536

int64_t st_decl_bytes(const st_decl *d) {
    int64_t b = st_dtype_size(d->dtype);
    for (int k = 0; k < d->ndim; k++) b *= d->shape[k];
    return b;
}

/* The header JSON, padded with spaces so that 8 + its length is a multiple of 8. Caller frees. */
static char *build_header(const st_decl *d, int n, size_t *len) {
    cJSON *root = cJSON_CreateObject(), *meta = cJSON_AddObjectToObject(root, "__metadata__");
    cJSON_AddStringToObject(meta, "format", "pt");
    int64_t at = 0;
    char num[32];
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_AddObjectToObject(root, d[i].name);
        cJSON_AddStringToObject(o, "dtype", st_dtype_name(d[i].dtype));
        cJSON *sh = cJSON_AddArrayToObject(o, "shape"), *of = cJSON_AddArrayToObject(o, "data_offsets");
        for (int k = 0; k < d[i].ndim; k++) {
            snprintf(num, sizeof num, "%lld", (long long)d[i].shape[k]);
            cJSON_AddItemToArray(sh, cJSON_CreateRaw(num));
        }
        int64_t b = st_decl_bytes(&d[i]);
        snprintf(num, sizeof num, "%lld", (long long)at);
        cJSON_AddItemToArray(of, cJSON_CreateRaw(num));
        snprintf(num, sizeof num, "%lld", (long long)(at + b));
        cJSON_AddItemToArray(of, cJSON_CreateRaw(num));
        at += b;
    }
    char *txt = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    size_t l = strlen(txt), padded = (l + 7) & ~(size_t)7;
    char *out = mp_xmalloc(padded + 1);
    memcpy(out, txt, l);
    memset(out + l, ' ', padded - l);
    out[padded] = '\0';
    free(txt);
    *len = padded;
    return out;
}

/* Moves cur past finished (and empty) tensors. */
static void advance(st_writer *w) {
    /* a tensor done: start writeback of what is written so far (does not wait), so the disk works
     * while the next tensor is produced and the fsync at close only waits for the tail */
    if (w->left == 0 && w->cur < w->n) sync_file_range(w->out.fd, 0, 0, SYNC_FILE_RANGE_WRITE);
    while (w->left == 0 && w->cur < w->n) {
        w->cur++;
        if (w->cur < w->n) w->left = w->numel[w->cur];
    }
}

mp_code st_writer_open(st_writer **out, const char *path, const st_decl *d, int n, mp_err *e) {
    *out = NULL;
    for (int i = 0; i < n; i++)
        if (d[i].dtype != ST_F32 && d[i].dtype != ST_BF16 && d[i].dtype != ST_F16)
            return mp_err_set(e, MP_EINTERNAL, "%s: tensor %s: the writer takes F32, BF16 or F16", path, d[i].name);
    mp_fs_out file;
    MP_TRY(mp_fs_out_open(&file, path, e));
    st_writer *w = mp_xcalloc(sizeof *w);
    w->path = mp_strdup(path);
    w->out = file;
    w->n = n;
    w->dtype = mp_xmalloc(sizeof *w->dtype * (size_t)(n + 1));
    w->numel = mp_xmalloc(sizeof *w->numel * (size_t)(n + 1));
    for (int i = 0; i < n; i++) {
        w->dtype[i] = d[i].dtype;
        w->numel[i] = st_decl_bytes(&d[i]) / st_dtype_size(d[i].dtype);
    }
    w->buf = mp_xmalloc(ST_WBUF_ELEMS * 4);
    w->cur = -1;
    advance(w);
    size_t hl;
    char *hdr = build_header(d, n, &hl);
    uint64_t le = hl;
    mp_code rc = mp_fs_out_write(&w->out, &le, 8, e);
    if (!rc) rc = mp_fs_out_write(&w->out, hdr, hl, e);
    free(hdr);
    if (rc) { st_writer_free(w); return rc; }
    *out = w;
    return MP_OK;
}

mp_code st_writer_put(st_writer *w, const float *x, int64_t count, mp_err *e) {
    while (count > 0) {
        if (w->cur >= w->n) return mp_err_set(e, MP_EINTERNAL, "%s: more data than the declared tensors hold", w->path);
        int64_t k = count < w->left ? count : w->left;
        if (k > ST_WBUF_ELEMS) k = ST_WBUF_ELEMS;
        st_dtype dt = w->dtype[w->cur];
        if (dt == ST_F32) {
            MP_TRY(mp_fs_out_write(&w->out, x, (size_t)k * 4, e));
        } else {
            uint16_t *h = (uint16_t *)w->buf;
            if (dt == ST_BF16) mp_f32_to_bf16_n(h, x, k);
            else st_f32_to_f16_n(h, x, k);
            MP_TRY(mp_fs_out_write(&w->out, h, (size_t)k * 2, e));
        }
        x += k;
        count -= k;
        w->left -= k;
        advance(w);
    }
    return MP_OK;
}

mp_code st_writer_close(st_writer *w, mp_err *e) {
    mp_code rc = MP_OK;
    if (w->cur < w->n)
        rc = mp_err_set(e, MP_EINTERNAL, "%s: closed with tensor %d of %d unfinished", w->path, w->cur, w->n);
    else rc = mp_fs_out_commit(&w->out, e);   /* fsync, rename to path, fsync of its directory */
    st_writer_free(w);
    return rc;
}

void st_writer_free(st_writer *w) {
    if (!w) return;
    mp_fs_out_abandon(&w->out);   /* not committed: the temp file goes (a no-op after a commit) */
    free(w->path);
    free(w->dtype);
    free(w->numel);
    free(w->buf);
    free(w);
}
