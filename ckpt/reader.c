/*
 * ckpt/reader.c — reading any box of a saved tensor, with checksums and coverage checked.
 *
 * ckpt_read(name, Q) for a requested box Q:
 *   1. the interval index (ck_index_range) gives the saved boxes whose dim-0 extent meets Q's; those
 *      that meet Q in every dim are kept, with their intersections I;
 *   2. coverage: the intersections' volumes must sum to Q's (saved boxes never overlap: checked when
 *      the index is opened); otherwise a missing region is found by subtraction and named;
 *   3. each intersection is read from its rank file:
 *      - I is the whole saved box and its rows are contiguous in the caller's buffer (same-mesh
 *        loads): one H5Dread straight into the buffer, then the whole-box checksum;
 *      - otherwise the slabs (slab_rows rows of dim 0, all other dims) that I touches are read, in
 *        batches of at most 64 MiB, each slab checked against its slab checksum; batches whose rows
 *        all belong to I and are contiguous in the caller's buffer are read into it directly, others
 *        go through a scratch buffer and the sub-box is copied out.
 *   Every byte copied to the caller has been checked against a checksum. Reads never go through the
 *   virtual views (a view's missing source would read as fill values).
 * Rank files are opened on first use and kept open until ckpt_close.
 */
#include "ckpt/ckpt_internal.h"
#include "core/alloc.h"
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

struct ckpt_reader {
    char *dir;
    ck_layout L;
    ckpt_tensor_info *ti;
    ckpt_box_info *bi;
    hid_t *files;         /* [nfiles], -1 until opened */
};

mp_code ckpt_open(ckpt_reader **out, const char *dir, mp_err *e) {
    assert(out);
    *out = NULL;
    ck_h5_init();
    if (!dir || !ck_is_dir(dir)) return mp_err_set(e, MP_EINPUT, "checkpoint directory %s does not exist", dir ? dir : "(null)");
    ckpt_reader *r = mp_xcalloc(sizeof *r);
    r->dir = ck_fmt("%s", dir);
    char *ip = ck_fmt("%s/index.h5", dir);
    mp_code rc = ck_index_read(ip, &r->L, e);
    free(ip);
    if (rc != MP_OK) {
        free(r->dir);
        free(r);
        return rc;
    }
    ck_layout *L = &r->L;
    r->ti = mp_xcalloc(sizeof *r->ti * (size_t)(L->ntensors + 1));
    r->bi = mp_xcalloc(sizeof *r->bi * (size_t)(L->nboxes + 1));
    r->files = mp_xmalloc(sizeof(hid_t) * (size_t)(L->nfiles + 1));
    for (int i = 0; i < L->nfiles; i++) r->files[i] = -1;
    for (int i = 0; i < L->ntensors; i++) {
        ckpt_tensor_info *T = &r->ti[i];
        T->name = L->t[i].name;
        T->dtype = L->t[i].dtype;
        T->ndim = L->t[i].ndim;
        memcpy(T->shape, L->t[i].shape, sizeof T->shape);
        T->box_first = (int)L->t[i].box_first;
        T->nboxes = (int)L->t[i].nboxes;
    }
    for (int j = 0; j < L->nboxes; j++) {
        ckpt_box_info *B = &r->bi[j];
        const ck_box *S = &L->b[j];
        B->tensor = S->tensor;
        B->rank = L->f[S->file].rank;
        B->file = L->f[S->file].name;
        B->dataset = S->dataset;
        memcpy(B->offset, S->off, sizeof B->offset);
        memcpy(B->shape, S->shp, sizeof B->shape);
        B->checksum = S->checksum;
        B->slab_rows = S->slab_rows;
        B->nslabs = S->nslabs;
    }
    *out = r;
    return MP_OK;
}

mp_code ckpt_open_latest(ckpt_reader **out, const char *root, mp_err *e) {
    char dir[4096];
    MP_TRY(ckpt_find_latest(root, dir, sizeof dir, NULL, e));
    return ckpt_open(out, dir, e);
}

void ckpt_close(ckpt_reader *r) {
    if (!r) return;
    for (int i = 0; i < r->L.nfiles; i++)
        if (r->files[i] >= 0) H5Fclose(r->files[i]);
    H5Eclear2(H5E_DEFAULT);
    free(r->files);
    free(r->ti);
    free(r->bi);
    ck_layout_free(&r->L);
    free(r->dir);
    free(r);
}

const char *ckpt_reader_dir(const ckpt_reader *r) { return r->dir; }
int64_t ckpt_reader_step(const ckpt_reader *r) { return r->L.step; }
int ckpt_reader_version(const ckpt_reader *r) { (void)r; return CKPT_FORMAT_VERSION; }
int ckpt_reader_world(const ckpt_reader *r) { return r->L.world; }
int ckpt_num_tensors(const ckpt_reader *r) { return r->L.ntensors; }
const ckpt_tensor_info *ckpt_tensor_at(const ckpt_reader *r, int i) {
    assert(i >= 0 && i < r->L.ntensors);
    return &r->ti[i];
}
int ckpt_num_boxes(const ckpt_reader *r) { return r->L.nboxes; }
const ckpt_box_info *ckpt_box_at(const ckpt_reader *r, int j) {
    assert(j >= 0 && j < r->L.nboxes);
    return &r->bi[j];
}
int ckpt_num_meta(const ckpt_reader *r) { return r->L.nmeta; }
const char *ckpt_meta_key(const ckpt_reader *r, int i) { assert(i >= 0 && i < r->L.nmeta); return r->L.keys[i]; }
const char *ckpt_meta_value(const ckpt_reader *r, int i) { assert(i >= 0 && i < r->L.nmeta); return r->L.vals[i]; }

const char *ckpt_meta_get(const ckpt_reader *r, const char *key) {
    for (int i = 0; i < r->L.nmeta; i++)
        if (!strcmp(r->L.keys[i], key)) return r->L.vals[i];
    return NULL;
}

int ckpt_tensor_find(const ckpt_reader *r, const char *name) {
    int lo = 0, hi = r->L.ntensors;
    while (lo < hi) {
        int m = lo + (hi - lo) / 2;
        int c = strcmp(r->L.t[m].name, name);
        if (c == 0) return m;
        if (c < 0) lo = m + 1; else hi = m;
    }
    return -1;
}

int ckpt_query(const ckpt_reader *r, int t, const int64_t *offset, const int64_t *shape, int *out, int cap) {
    assert(t >= 0 && t < r->L.ntensors);
    const ck_tensor *T = &r->L.t[t];
    int64_t lo, hi;
    ck_index_range(&r->L, t, offset[0], offset[0] + shape[0], &lo, &hi);
    int n = 0;
    for (int64_t j = lo; j < hi; j++)
        if (ck_intersect(T->ndim, offset, shape, r->L.b[j].off, r->L.b[j].shp, NULL, NULL)) {
            if (n < cap && out) out[n] = (int)j;
            n++;
        }
    return n;
}

/* ------------------------------------------------------------------------------------- data */

/* The open rank file of box j's file. */
static mp_code rank_file(ckpt_reader *r, int fi, hid_t *out, mp_err *e) {
    if (r->files[fi] < 0) {
        char *p = ck_fmt("%s/%s", r->dir, r->L.f[fi].name);
        if (!ck_exists(p)) {
            mp_code rc = mp_err_set(e, MP_ECHECK, "rank file %s is missing (it holds %lld boxes)", p,
                                    (long long)r->L.f[fi].nboxes);
            free(p);
            return rc;
        }
        hid_t fapl = ck_h5_fapl(0);
        hid_t f = fapl < 0 ? -1 : H5Fopen(p, H5F_ACC_RDONLY, fapl);
        if (fapl >= 0) H5Pclose(fapl);
        if (f < 0) {
            mp_code rc = ck_h5_err(e, MP_ECHECK, "rank file %s cannot be opened (truncated or corrupt)", p);
            free(p);
            return rc;
        }
        free(p);
        r->files[fi] = f;
    }
    *out = r->files[fi];
    return MP_OK;
}

/* Opens box j's dataset and checks its shape and type against the index. *ft gets the type. */
static mp_code open_box(ckpt_reader *r, int64_t j, hid_t *d_out, hid_t *ft_out, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    const char *fname = r->L.f[B->file].name;
    hid_t f = -1;
    MP_TRY(rank_file(r, B->file, &f, e));
    hid_t d = H5Dopen2(f, B->dataset, H5P_DEFAULT);
    if (d < 0) return ck_h5_err(e, MP_ECHECK, "%s/%s: dataset %s of tensor %s is missing", r->dir, fname, B->dataset, T->name);
    hid_t want = ck_h5_type(T->dtype);
    hid_t ft = H5Dget_type(d), sp = H5Dget_space(d);
    int ok = want >= 0 && ft >= 0 && sp >= 0 && H5Tequal(ft, want) > 0 && H5Sget_simple_extent_ndims(sp) == T->ndim;
    if (ok) {
        hsize_t dims[CKPT_MAX_DIMS];
        H5Sget_simple_extent_dims(sp, dims, NULL);
        for (int d2 = 0; d2 < T->ndim; d2++) ok = ok && dims[d2] == (hsize_t)B->shp[d2];
    }
    if (sp >= 0) H5Sclose(sp);
    if (want >= 0) H5Tclose(want);
    if (!ok) {
        if (ft >= 0) H5Tclose(ft);
        H5Dclose(d);
        H5Eclear2(H5E_DEFAULT);
        return mp_err_set(e, MP_ECHECK, "%s/%s: dataset %s (tensor %s) has a type or shape other than the index says",
                          r->dir, fname, B->dataset, T->name);
    }
    *d_out = d;
    *ft_out = ft;
    return MP_OK;
}

/* Reads rows [a, b) (all other dims) of the dataset of box B into dst. */
static mp_code read_rows(ckpt_reader *r, int64_t j, hid_t d, hid_t ft, int64_t a, int64_t b, void *dst, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    hsize_t st[CKPT_MAX_DIMS] = {0}, cnt[CKPT_MAX_DIMS];
    for (int k = 0; k < T->ndim; k++) cnt[k] = (hsize_t)B->shp[k];
    st[0] = (hsize_t)a;
    cnt[0] = (hsize_t)(b - a);
    hid_t fs = H5Dget_space(d);
    hid_t ms = H5Screate_simple(T->ndim, cnt, NULL);
    herr_t hr = (fs < 0 || ms < 0) ? -1 : H5Sselect_hyperslab(fs, H5S_SELECT_SET, st, NULL, cnt, NULL);
    if (hr >= 0) hr = H5Dread(d, ft, ms, fs, H5P_DEFAULT, dst);
    if (ms >= 0) H5Sclose(ms);
    if (fs >= 0) H5Sclose(fs);
    if (hr < 0)
        return ck_h5_err(e, MP_ECHECK, "%s/%s: reading rows %lld:%lld of dataset %s (tensor %s)", r->dir,
                         r->L.f[B->file].name, (long long)a, (long long)b, B->dataset, T->name);
    return MP_OK;
}

static mp_code checksum_error(ckpt_reader *r, int64_t j, int64_t a, int64_t b, uint64_t want, uint64_t got, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int64_t off[CKPT_MAX_DIMS], shp[CKPT_MAX_DIMS];
    memcpy(off, B->off, sizeof off);
    memcpy(shp, B->shp, sizeof shp);
    off[0] += a;
    shp[0] = b - a;
    char reg[256];
    ck_box_str(reg, sizeof reg, T->ndim, off, shp);
    return mp_err_set(e, MP_ECHECK,
                      "%s/%s: checksum mismatch in dataset %s (tensor %s, region %s): stored %016llx, data %016llx: "
                      "the rank file is corrupt",
                      r->dir, r->L.f[B->file].name, B->dataset, T->name, reg, (unsigned long long)want,
                      (unsigned long long)got);
}

/* Checks the slabs [s0, s1) of box j held in p (starting at row s0 * slab_rows). */
static mp_code check_slabs(ckpt_reader *r, int64_t j, int64_t s0, int64_t s1, const char *p, int64_t row, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    for (int64_t k = s0; k < s1; k++) {
        int64_t a = k * B->slab_rows, b = a + B->slab_rows < B->shp[0] ? a + B->slab_rows : B->shp[0];
        uint64_t h = XXH3_64bits(p + (size_t)((a - s0 * B->slab_rows) * row), (size_t)((b - a) * row));
        uint64_t want = r->L.slabs[B->slab_first + k];
        if (h != want) return checksum_error(r, j, a, b, want, h, e);
    }
    return MP_OK;
}

/* Reads the intersection (io, is) of saved box j into the caller's box (qo, qs) at buf. */
static mp_code read_part(ckpt_reader *r, int64_t j, const int64_t *io, const int64_t *is, const int64_t *qo,
                         const int64_t *qs, char *buf, mp_err *e) {
    const ck_box *B = &r->L.b[j];
    const ck_tensor *T = &r->L.t[B->tensor];
    int nd = T->ndim;
    size_t es = mp_dtype_size(T->dtype);
    int64_t row = (int64_t)es * ck_volume(nd - 1, B->shp + 1);   /* bytes of one row of the saved box */
    int contig = 1;                                                /* I's rows contiguous in buf */
    for (int d = 1; d < nd; d++) contig = contig && is[d] == B->shp[d] && is[d] == qs[d];
    int64_t r0 = io[0] - B->off[0], r1 = r0 + is[0];               /* rows of B that I covers */
    hid_t d, ft;
    MP_TRY(open_box(r, j, &d, &ft, e));
    mp_code rc = MP_OK;
    if (contig && r0 == 0 && r1 == B->shp[0]) {
        char *dst = buf + (size_t)((io[0] - qo[0]) * row);
        rc = read_rows(r, j, d, ft, 0, B->shp[0], dst, e);
        if (rc == MP_OK) {
            uint64_t h = XXH3_64bits(dst, (size_t)(B->shp[0] * row));
            if (h != B->checksum) rc = checksum_error(r, j, 0, B->shp[0], B->checksum, h, e);
        }
        goto done;
    }
    int64_t K = B->slab_rows;
    int64_t s0 = r0 / K, s1 = (r1 + K - 1) / K;
    int64_t per = (int64_t)(CK_BATCH_BYTES / (size_t)(K * row));
    if (per < 1) per = 1;
    char *tmp = NULL;
    size_t tmp_n = 0;
    for (int64_t sa = s0; sa < s1 && rc == MP_OK; sa += per) {
        int64_t sb = sa + per < s1 ? sa + per : s1;
        int64_t a = sa * K, b = sb * K < B->shp[0] ? sb * K : B->shp[0];
        if (contig && a >= r0 && b <= r1) {
            char *dst = buf + (size_t)((B->off[0] + a - qo[0]) * row);
            rc = read_rows(r, j, d, ft, a, b, dst, e);
            if (rc == MP_OK) rc = check_slabs(r, j, sa, sb, dst, row, e);
            continue;
        }
        size_t need = (size_t)((b - a) * row);
        if (need > tmp_n) {
            mp_free_acct(tmp, tmp_n, MP_MEM_CKPT);
            tmp = mp_malloc(need, MP_MEM_CKPT);
            tmp_n = need;
        }
        rc = read_rows(r, j, d, ft, a, b, tmp, e);
        if (rc == MP_OK) rc = check_slabs(r, j, sa, sb, tmp, row, e);
        if (rc == MP_OK) {
            /* the part of I within rows [a, b) of B */
            int64_t so[CKPT_MAX_DIMS], ss[CKPT_MAX_DIMS], co[CKPT_MAX_DIMS], cs[CKPT_MAX_DIMS];
            memcpy(so, B->off, sizeof so);
            memcpy(ss, B->shp, sizeof ss);
            so[0] = B->off[0] + a;
            ss[0] = b - a;
            if (ck_intersect(nd, so, ss, io, is, co, cs)) ck_copy_sub(nd, es, co, cs, tmp, so, ss, buf, qo, qs);
        }
    }
    mp_free_acct(tmp, tmp_n, MP_MEM_CKPT);
done:
    H5Tclose(ft);
    H5Dclose(d);
    return rc;
}

mp_code ckpt_read(ckpt_reader *r, const char *name, const int64_t *offset, const int64_t *shape, void *buf,
                  mp_err *e) {
    assert(r && name && offset && shape && buf);
    ck_h5_init();
    int t = ckpt_tensor_find(r, name);
    if (t < 0) return mp_err_set(e, MP_EINPUT, "tensor %s is not in checkpoint %s", name, r->dir);
    const ck_tensor *T = &r->L.t[t];
    int nd = T->ndim;
    int64_t zero[CKPT_MAX_DIMS] = {0};
    char qstr[256], tstr[256];
    ck_box_str(qstr, sizeof qstr, nd, offset, shape);
    for (int d = 0; d < nd; d++)
        if (offset[d] < 0 || shape[d] <= 0 || offset[d] + shape[d] > T->shape[d]) {
            ck_box_str(tstr, sizeof tstr, nd, zero, T->shape);
            return mp_err_set(e, MP_EINPUT, "tensor %s: requested box %s is empty or outside the tensor %s", name, qstr,
                              tstr);
        }
    int64_t lo, hi;
    ck_index_range(&r->L, t, offset[0], offset[0] + shape[0], &lo, &hi);
    int n = 0;
    int64_t *hit = mp_xmalloc(sizeof(int64_t) * (size_t)(hi - lo + 1));
    int64_t (*io)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *io * (size_t)(hi - lo + 1));
    int64_t (*is)[CKPT_MAX_DIMS] = mp_xmalloc(sizeof *is * (size_t)(hi - lo + 1));
    int64_t covered = 0;
    for (int64_t j = lo; j < hi; j++)
        if (ck_intersect(nd, offset, shape, r->L.b[j].off, r->L.b[j].shp, io[n], is[n])) {
            covered += ck_volume(nd, is[n]);
            hit[n++] = j;
        }
    mp_code rc = MP_OK;
    int64_t want = ck_volume(nd, shape);
    if (covered != want) {
        int64_t mo[CKPT_MAX_DIMS], ms[CKPT_MAX_DIMS];
        char reg[256] = "?";
        if (ck_find_gap(nd, offset, shape, n, (const int64_t(*)[CKPT_MAX_DIMS])io, (const int64_t(*)[CKPT_MAX_DIMS])is,
                        mo, ms))
            ck_box_str(reg, sizeof reg, nd, mo, ms);
        rc = mp_err_set(e, MP_ECHECK,
                        "tensor %s: region %s of the requested box %s is in no saved box of checkpoint %s (%lld of %lld "
                        "elements found)",
                        name, reg, qstr, r->dir, (long long)covered, (long long)want);
    }
    for (int k = 0; k < n && rc == MP_OK; k++) rc = read_part(r, hit[k], io[k], is[k], offset, shape, buf, e);
    free(hit);
    free(io);
    free(is);
    return rc;
}

mp_code ckpt_verify(ckpt_reader *r, int64_t *bytes_read, mp_err *e) {
    ck_h5_init();
    int64_t total = 0;
    mp_code rc = MP_OK;
    for (int t = 0; t < r->L.ntensors && rc == MP_OK; t++) rc = ck_layout_check_tensor(&r->L, t, 1, e);
    if (rc != MP_OK) return mp_err_wrap(e, "checkpoint %s", r->dir);
    char *tmp = NULL;
    size_t tmp_n = 0;
    XXH3_state_t *hs = XXH3_createState();
    if (!hs) abort();
    for (int64_t j = 0; j < r->L.nboxes && rc == MP_OK; j++) {
        const ck_box *B = &r->L.b[j];
        const ck_tensor *T = &r->L.t[B->tensor];
        const char *fname = r->L.f[B->file].name;
        hid_t d, ft;
        rc = open_box(r, j, &d, &ft, e);
        if (rc != MP_OK) break;
        /* the dataset's own attributes must agree with the index */
        char tn[CKPT_NAME_MAX + 2] = "";
        int64_t go[CKPT_MAX_DIMS], gs[CKPT_MAX_DIMS];
        uint64_t ck = 0;
        int ok = ck_attr_read_str(d, "tensor", tn, sizeof tn) >= 0 && !strcmp(tn, T->name) &&
                 ck_attr_read_i64(d, "global_offset", go, T->ndim) >= 0 &&
                 ck_attr_read_i64(d, "global_shape", gs, T->ndim) >= 0 && ck_attr_read_u64(d, "checksum", &ck, 1) >= 0 &&
                 ck == B->checksum;
        for (int k = 0; ok && k < T->ndim; k++) ok = go[k] == B->off[k] && gs[k] == T->shape[k];
        if (!ok) {
            H5Eclear2(H5E_DEFAULT);
            rc = mp_err_set(e, MP_ECHECK, "%s/%s: attributes of dataset %s disagree with the index (tensor %s)",
                            r->dir, fname, B->dataset, T->name);
        }
        size_t es = mp_dtype_size(T->dtype);
        int64_t row = (int64_t)es * ck_volume(T->ndim - 1, B->shp + 1);
        int64_t K = B->slab_rows, per = (int64_t)(CK_BATCH_BYTES / (size_t)(K * row));
        if (per < 1) per = 1;
        XXH3_64bits_reset(hs);
        for (int64_t sa = 0; sa < B->nslabs && rc == MP_OK; sa += per) {
            int64_t sb = sa + per < B->nslabs ? sa + per : B->nslabs;
            int64_t a = sa * K, b = sb * K < B->shp[0] ? sb * K : B->shp[0];
            size_t need = (size_t)((b - a) * row);
            if (need > tmp_n) {
                mp_free_acct(tmp, tmp_n, MP_MEM_CKPT);
                tmp = mp_malloc(need, MP_MEM_CKPT);
                tmp_n = need;
            }
            rc = read_rows(r, j, d, ft, a, b, tmp, e);
            if (rc == MP_OK) rc = check_slabs(r, j, sa, sb, tmp, row, e);
            XXH3_64bits_update(hs, tmp, need);
            total += (int64_t)need;
        }
        if (rc == MP_OK) {
            uint64_t h = XXH3_64bits_digest(hs);
            if (h != B->checksum) rc = checksum_error(r, j, 0, B->shp[0], B->checksum, h, e);
        }
        H5Tclose(ft);
        H5Dclose(d);
    }
    XXH3_freeState(hs);
    mp_free_acct(tmp, tmp_n, MP_MEM_CKPT);
    if (bytes_read) *bytes_read = total;
    return rc;
}
