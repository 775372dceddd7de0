/*
 * tests/test_attn_window.c — sliding-window attention (core/backend.h attn_fwd's `window`) on the CPU
 * backends against a float64 masked attention written here alone.
 *
 * The rule, as transformers computes it (Mistral, Qwen2's sliding layers, Phi-3): query t sees keys j
 * with t - W < j <= t, W keys with itself; W = 0 is full causal. The reference (ref_window) is a plain
 * double loop over exactly those keys: softmax, lse, and the analytic backward (dq, dk, dv), sharing no
 * code with the kernels. The kernels walk key blocks of MP_ATTN_BK = 192 keys and query blocks of 64 rows
 * (core/kernels_cpu.h), so the windows below put a row's first key on either side of block boundaries
 * (W 63/64/65, 191/192/193), inside one block (1, 2, 100), and across two (250, 449); T = 450 spans three
 * key blocks, GQA has H/KV = 2. Checked:
 *   - fwd (out, lse), bwd (dq, dk, dv) at 1e-5 of the largest reference value (max abs error), on dense
 *     and on fused [q | k | v] rows (row strides ldq, ldkv);
 *   - W >= T and W = 0 give the same bits (the full causal path);
 *   - the KV-cache forward (attn_fwd_kv) by chunks at and across block boundaries against the reference
 *     rows, with the cache rows left of the first key block a chunk needs set to NaN (never read: the
 *     walk starts at the window) and those past its end NaN too;
 *   - the cpu-bf16 emulation on the same case, inputs rounded to bf16, within bf16 tolerance.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <omp.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/backend.h"
#include "core/kernels_cpu.h"
#include "core/tensor.h"
#include "tests/testutil.h"

#define TOL 1e-5

typedef struct {
    int B, T, H, KV, hd, W;
} win_shape;

static uint64_t g_rng = 0x2545F4914F6CDD1Dull;
/* the shared generators (tests/testutil.h) on this file's stream */
static float *frand(int64_t n, double amp) { return tu_frand(&g_rng, n, amp); }
static float *ffill(int64_t n, float val) { return tu_ffill(n, val); }
static double *todouble(const float *x, int64_t n) {
    double *d = malloc((size_t)n * sizeof(double));
    for (int64_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
/* max_i |a_i - b_i| / max(max_i |b_i|, 0.1) (b the reference; NaN in a is infinite error). The floor:
 * with W = 1 dq and dk are exactly 0 (a row's one probability is 1, so dS = P (dP - D) = 0), and the
 * kernels' are fp32 rounding, ~1e-8. */
static double rel_err(const float *a, const double *b, int64_t n) {
    double md = 0, mb = 0.1;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (d > md || d != d) md = d != d ? INFINITY : d;
        if (fabs(b[i]) > mb) mb = fabs(b[i]);
    }
    return md / mb;
}

/* The float64 masked attention of shape s: q [B,T,H,hd], k, v [B,T,KV,hd] dense; out, lse [B,H,T]; with
 * dout not NULL also dq (=), dk, dv (=, summed over a group's query heads). Query t of head h sees keys
 * j of kv head h / (H/KV) with j <= t and, when W > 0, j > t - W. */
static void ref_window(const win_shape *s, const double *q, const double *k, const double *v, const double *dout,
                       double *out, double *lse, double *dq, double *dk, double *dv) {
    const int B = s->B, T = s->T, H = s->H, KV = s->KV, hd = s->hd, rep = H / KV;
    const double sc = 1.0 / sqrt((double)hd);
    double *p = malloc((size_t)T * sizeof(double)), *dp = malloc((size_t)T * sizeof(double));
    if (dout) memset(dk, 0, sizeof(double) * B * T * KV * hd), memset(dv, 0, sizeof(double) * B * T * KV * hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int t = 0; t < T; t++) {
                const int lo = s->W > 0 && t - s->W + 1 > 0 ? t - s->W + 1 : 0;
                const size_t qi = (((size_t)b * T + t) * H + h) * hd;
                double mx = -INFINITY, sum = 0, D = 0;
                for (int j = lo; j <= t; j++) {
                    const double *kj = k + (((size_t)b * T + j) * KV + h / rep) * hd;
                    double x = 0;
                    for (int d = 0; d < hd; d++) x += q[qi + d] * kj[d];
                    p[j] = x * sc;
                    mx = p[j] > mx ? p[j] : mx;
                }
                for (int j = lo; j <= t; j++) sum += (p[j] = exp(p[j] - mx));
                lse[((size_t)b * H + h) * T + t] = mx + log(sum);
                for (int d = 0; d < hd; d++) {
                    double o = 0;
                    for (int j = lo; j <= t; j++) o += p[j] / sum * v[(((size_t)b * T + j) * KV + h / rep) * hd + d];
                    out[qi + d] = o;
                }
                if (!dout) continue;
                for (int j = lo; j <= t; j++) {
                    const double *vj = v + (((size_t)b * T + j) * KV + h / rep) * hd;
                    double x = 0;
                    for (int d = 0; d < hd; d++) x += dout[qi + d] * vj[d];
                    p[j] /= sum;
                    dp[j] = x;
                    D += p[j] * x;
                }
                for (int d = 0; d < hd; d++) dq[qi + d] = 0;
                for (int j = lo; j <= t; j++) {
                    const size_t kj = (((size_t)b * T + j) * KV + h / rep) * hd;
                    const double ds = p[j] * (dp[j] - D) * sc;
                    for (int d = 0; d < hd; d++) {
                        dq[qi + d] += ds * k[kj + d];
                        dk[kj + d] += ds * q[qi + d];
                        dv[kj + d] += p[j] * dout[qi + d];
                    }
                }
            }
    free(p), free(dp);
}

/* One case's inputs and the reference's results (double). */
typedef struct {
    win_shape s;
    int64_t nq, nk, nl;
    float *q, *k, *v, *r;   /* r: dout */
    double *out, *lse, *dq, *dk, *dv;
} win_case;

/* Random inputs of shape s (rounded to bf16 first when bf16, so the reference sees what the emulation
 * sees) and the reference on them. */
static win_case case_new(win_shape s, int bf16) {
    win_case c = {s, (int64_t)s.B * s.T * s.H * s.hd, (int64_t)s.B * s.T * s.KV * s.hd, (int64_t)s.B * s.H * s.T};
    c.q = frand(c.nq, 1.5), c.k = frand(c.nk, 1.5), c.v = frand(c.nk, 1.0), c.r = frand(c.nq, 1.0);
    if (bf16) {
        float *x[4] = {c.q, c.k, c.v, c.r};
        int64_t n[4] = {c.nq, c.nk, c.nk, c.nq};
        for (int i = 0; i < 4; i++) {
            uint16_t *t = malloc((size_t)n[i] * 2);
            mp_f32_to_bf16_n(t, x[i], n[i]);
            mp_bf16_to_f32_n(x[i], t, n[i]);
            free(t);
        }
    }
    double *q = todouble(c.q, c.nq), *k = todouble(c.k, c.nk), *v = todouble(c.v, c.nk), *r = todouble(c.r, c.nq);
    c.out = malloc(sizeof(double) * c.nq), c.lse = malloc(sizeof(double) * c.nl);
    c.dq = malloc(sizeof(double) * c.nq), c.dk = malloc(sizeof(double) * c.nk), c.dv = malloc(sizeof(double) * c.nk);
    ref_window(&c.s, q, k, v, r, c.out, c.lse, c.dq, c.dk, c.dv);
    free(q), free(k), free(v), free(r);
    return c;
}
static void case_free(win_case *c) {
    free(c->q), free(c->k), free(c->v), free(c->r), free(c->out), free(c->lse), free(c->dq), free(c->dk), free(c->dv);
}

/* The fp32 backend's forward and backward of case c with window W (dense rows): res = out, lse, dq, dk, dv. */
static void run_f32(mp_backend *be, const win_case *c, int W, float *res[5]) {
    const win_shape *s = &c->s;
    res[0] = ffill(c->nq, NAN), res[1] = ffill(c->nl, NAN), res[2] = ffill(c->nq, NAN);
    res[3] = ffill(c->nk, NAN), res[4] = ffill(c->nk, NAN);
    float *scratch = ffill(c->nl, NAN);
    be->attn_fwd(be, res[0], res[1], c->q, c->k, c->v, s->B, s->T, s->H, s->KV, s->hd, s->H * s->hd, s->KV * s->hd, W);
    be->attn_bwd(be, res[2], res[3], res[4], scratch, c->r, res[0], res[1], c->q, c->k, c->v, s->B, s->T, s->H, s->KV,
                 s->hd, s->H * s->hd, s->KV * s->hd, W);
    free(scratch);
}

/* res against the reference, each at tol (max abs error over the largest reference value). */
static void check_res(const win_case *c, float *res[5], double tol, const char *what) {
    const double *ref[5] = {c->out, c->lse, c->dq, c->dk, c->dv};
    const int64_t n[5] = {c->nq, c->nl, c->nq, c->nk, c->nk};
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        const double e = rel_err(res[i], ref[i], n[i]);
        cr_assert(e < tol, "%s: %s rel err %g (T=%d H=%d KV=%d hd=%d W=%d)", what, names[i], e, c->s.T, c->s.H, c->s.KV,
                  c->s.hd, c->s.W);
    }
}

static void use_two_threads(void) {
    setenv("OPENBLAS_NUM_THREADS", "2", 1);
    omp_set_num_threads(2);
}

static const int g_windows[] = {1, 2, 63, 64, 65, 100, 191, 192, 193, 250, 449};

Test(window, cpu_fwd_and_bwd_match_float64_masked_attention) {
    use_two_threads();
    for (size_t i = 0; i < sizeof g_windows / sizeof g_windows[0]; i++) {
        win_case c = case_new((win_shape){2, 450, 4, 2, 16, g_windows[i]}, 0);
        float *res[5];
        run_f32(mp_backend_cpu(), &c, c.s.W, res);
        check_res(&c, res, TOL, "cpu");
        for (int j = 0; j < 5; j++) free(res[j]);
        case_free(&c);
    }
}

/* MHA (H = KV) and a query block that ends mid-way (T 130), W across the 64-row query block boundary. */
Test(window, cpu_other_shapes) {
    const win_shape shapes[] = {{1, 130, 3, 3, 8, 70}, {2, 130, 4, 1, 32, 5}, {1, 200, 2, 1, 16, 129}};
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        win_case c = case_new(shapes[i], 0);
        float *res[5];
        run_f32(mp_backend_cpu(), &c, c.s.W, res);
        check_res(&c, res, TOL, "cpu");
        for (int j = 0; j < 5; j++) free(res[j]);
        case_free(&c);
    }
}

/* A window of T keys or more reaches every row's whole causal prefix: the bits of W = 0 (fp32 and bf16). */
Test(window, at_least_T_gives_the_full_causal_bits) {
    use_two_threads();
    win_case c = case_new((win_shape){2, 450, 4, 2, 16, 0}, 0);
    float *base[5], *res[5];
    run_f32(mp_backend_cpu(), &c, 0, base);
    check_res(&c, base, TOL, "cpu W=0");
    const int64_t n[5] = {c.nq, c.nl, c.nq, c.nk, c.nk};
    const int ws[] = {450, 451, 100000};
    for (size_t w = 0; w < sizeof ws / sizeof ws[0]; w++) {
        run_f32(mp_backend_cpu(), &c, ws[w], res);
        for (int j = 0; j < 5; j++) {
            cr_assert(memcmp(res[j], base[j], (size_t)n[j] * sizeof(float)) == 0, "W=%d: result %d differs", ws[w], j);
            free(res[j]);
        }
    }
    for (int j = 0; j < 5; j++) free(base[j]);
    case_free(&c);
}

/* attn_fwd_kv of chunk [p0, p0 + n) of case c's sequences with window W, the cache (capacity Tc) holding
 * rows 0 .. p0+n-1, the rows before the key block holding the chunk's first key and those past its end
 * NaN, against the reference rows at tol. bf16: the cpu-bf16 backend (bf16 buffers). */
static void check_kv_chunk(const win_case *c, int Tc, int p0, int n, double tol, int bf16) {
    const win_shape *s = &c->s;
    const int B = s->B, H = s->H, KV = s->KV, hd = s->hd, W = s->W;
    const int lo = W > 0 && p0 - W + 1 > 0 ? p0 - W + 1 : 0, skip = lo / MP_ATTN_BK * MP_ATTN_BK;
    const int64_t row = (int64_t)H * hd, krow = (int64_t)KV * hd, nq = B * n * row, nc = B * Tc * krow;
    float *qc = ffill(nq, NAN), *kc = ffill(nc, NAN), *vc = ffill(nc, NAN), *oc = ffill(nq, NAN);
    float *lc = ffill((int64_t)B * H * n, NAN);
    for (int b = 0; b < B; b++) {
        memcpy(qc + b * n * row, c->q + ((int64_t)b * s->T + p0) * row, sizeof(float) * n * row);
        for (int t = skip; t < p0 + n; t++) {
            memcpy(kc + ((int64_t)b * Tc + t) * krow, c->k + ((int64_t)b * s->T + t) * krow, sizeof(float) * krow);
            memcpy(vc + ((int64_t)b * Tc + t) * krow, c->v + ((int64_t)b * s->T + t) * krow, sizeof(float) * krow);
        }
    }
    if (bf16) {   /* NaN stays NaN in bf16 */
        mp_backend *be = mp_backend_cpu_bf16();
        uint16_t *q16 = malloc(nq * 2), *k16 = malloc(nc * 2), *v16 = malloc(nc * 2), *o16 = malloc(nq * 2);
        mp_f32_to_bf16_n(q16, qc, nq), mp_f32_to_bf16_n(k16, kc, nc), mp_f32_to_bf16_n(v16, vc, nc);
        be->attn_fwd_kv(be, o16, lc, q16, k16, v16, B, n, p0, Tc, H, KV, hd, W);
        mp_bf16_to_f32_n(oc, o16, nq);
        free(q16), free(k16), free(v16), free(o16);
    } else {
        mp_backend_cpu()->attn_fwd_kv(mp_backend_cpu(), oc, lc, qc, kc, vc, B, n, p0, Tc, H, KV, hd, W);
    }
    double *ro = malloc(sizeof(double) * nq), *rl = malloc(sizeof(double) * B * H * n);
    for (int b = 0; b < B; b++) {
        memcpy(ro + b * n * row, c->out + ((int64_t)b * s->T + p0) * row, sizeof(double) * n * row);
        for (int h = 0; h < H; h++)
            memcpy(rl + ((int64_t)b * H + h) * n, c->lse + ((int64_t)b * H + h) * s->T + p0, sizeof(double) * n);
    }
    const double eo = rel_err(oc, ro, nq), el = rel_err(lc, rl, (int64_t)B * H * n);
    cr_assert(eo < tol && el < tol, "%s chunk (%d, %d) W=%d: out rel err %g, lse %g", bf16 ? "cpu-bf16" : "cpu", p0, n,
              W, eo, el);
    free(qc), free(kc), free(vc), free(oc), free(lc), free(ro), free(rl);
}

static const int g_chunks[][2] = {{0, 37}, {37, 150}, {187, 5}, {191, 1}, {192, 1}, {193, 70}, {263, 121},
                                  {384, 1}, {385, 65}, {0, 450}};

Test(window, kv_cache_chunks_match_float64) {
    use_two_threads();
    const int ws[] = {1, 64, 100, 192, 250};
    for (size_t w = 0; w < sizeof ws / sizeof ws[0]; w++) {
        win_case c = case_new((win_shape){2, 450, 4, 2, 16, ws[w]}, 0);
        for (size_t i = 0; i < sizeof g_chunks / sizeof g_chunks[0]; i++)
            check_kv_chunk(&c, 470, g_chunks[i][0], g_chunks[i][1], TOL, 0);
        case_free(&c);
    }
}

/* q, k, v as column blocks of fused [q | k | v | pad] rows (layers/llama.c's layout), dq, dk, dv likewise:
 * the window with row strides ldq = ldkv = the fused width. */
Test(window, fused_rows) {
    win_case c = case_new((win_shape){2, 300, 4, 2, 16, 70}, 0);
    const win_shape *s = &c.s;
    const int wq = s->H * s->hd, wk = s->KV * s->hd, ld = wq + 2 * wk + 8;
    const int64_t rows = (int64_t)s->B * s->T;
    float *x = ffill(rows * ld, 7.0f), *g = ffill(rows * ld, NAN), *res[5], *scratch = ffill(c.nl, NAN);
    for (int64_t r = 0; r < rows; r++) {
        memcpy(x + r * ld, c.q + r * wq, sizeof(float) * wq);
        memcpy(x + r * ld + wq, c.k + r * wk, sizeof(float) * wk);
        memcpy(x + r * ld + wq + wk, c.v + r * wk, sizeof(float) * wk);
    }
    res[0] = ffill(c.nq, NAN), res[1] = ffill(c.nl, NAN);
    mp_backend *be = mp_backend_cpu();
    be->attn_fwd(be, res[0], res[1], x, x + wq, x + wq + wk, s->B, s->T, s->H, s->KV, s->hd, ld, ld, s->W);
    be->attn_bwd(be, g, g + wq, g + wq + wk, scratch, c.r, res[0], res[1], x, x + wq, x + wq + wk, s->B, s->T, s->H,
                 s->KV, s->hd, ld, ld, s->W);
    res[2] = malloc(sizeof(float) * c.nq), res[3] = malloc(sizeof(float) * c.nk), res[4] = malloc(sizeof(float) * c.nk);
    for (int64_t r = 0; r < rows; r++) {
        memcpy(res[2] + r * wq, g + r * ld, sizeof(float) * wq);
        memcpy(res[3] + r * wk, g + r * ld + wq, sizeof(float) * wk);
        memcpy(res[4] + r * wk, g + r * ld + wq + wk, sizeof(float) * wk);
    }
    check_res(&c, res, TOL, "cpu fused");
    for (int j = 0; j < 5; j++) free(res[j]);
    free(x), free(g), free(scratch);
    case_free(&c);
}

/* The cpu-bf16 emulation passes the window through: the same case (inputs rounded to bf16) within bf16
 * tolerance of the float64 reference, and W >= T gives W = 0's bits. */
Test(window, cpu_bf16_within_bf16_tolerance) {
    use_two_threads();
    mp_backend *be = mp_backend_cpu_bf16();
    const int ws[] = {1, 65, 193, 0};
    for (size_t w = 0; w < sizeof ws / sizeof ws[0]; w++) {
        win_case c = case_new((win_shape){2, 450, 4, 2, 16, ws[w]}, 1);
        const win_shape *s = &c.s;
        float *in[4] = {c.q, c.k, c.v, c.r}, *res[5];
        const int64_t n[5] = {c.nq, c.nl, c.nq, c.nk, c.nk}, ni[4] = {c.nq, c.nk, c.nk, c.nq};
        uint16_t *b[4], *o = malloc(c.nq * 2), *g[3] = {malloc(c.nq * 2), malloc(c.nk * 2), malloc(c.nk * 2)};
        for (int i = 0; i < 4; i++) b[i] = malloc(ni[i] * 2), mp_f32_to_bf16_n(b[i], in[i], ni[i]);
        for (int i = 0; i < 5; i++) res[i] = ffill(n[i], NAN);
        float *scratch = ffill(c.nl, NAN), *lse2 = ffill(c.nl, NAN);
        be->attn_fwd(be, o, res[1], b[0], b[1], b[2], s->B, s->T, s->H, s->KV, s->hd, s->H * s->hd, s->KV * s->hd, s->W);
        be->attn_bwd(be, g[0], g[1], g[2], scratch, b[3], o, res[1], b[0], b[1], b[2], s->B, s->T, s->H, s->KV, s->hd,
                     s->H * s->hd, s->KV * s->hd, s->W);
        mp_bf16_to_f32_n(res[0], o, c.nq);
        for (int i = 0; i < 3; i++) mp_bf16_to_f32_n(res[2 + i], g[i], n[2 + i]);
        check_res(&c, res, 2e-2, "cpu-bf16");
        if (s->W == 0) {   /* W >= T: the same bits */
            uint16_t *o2 = malloc(c.nq * 2);
            be->attn_fwd(be, o2, lse2, b[0], b[1], b[2], s->B, s->T, s->H, s->KV, s->hd, s->H * s->hd, s->KV * s->hd,
                         s->T);
            cr_assert(memcmp(o, o2, c.nq * 2) == 0 && memcmp(res[1], lse2, c.nl * 4) == 0, "bf16 W=T differs");
            free(o2);
        }
        for (int i = 0; i < 3; i++) check_kv_chunk(&c, 470, g_chunks[i * 3 + 1][0], g_chunks[i * 3 + 1][1], 2e-2, 1);
        for (int i = 0; i < 4; i++) free(b[i]);
        for (int i = 0; i < 5; i++) free(res[i]);
        free(o), free(g[0]), free(g[1]), free(g[2]), free(scratch), free(lse2);
        case_free(&c);
    }
}
