/*
 * tests/cuda/check_kernels_device.cu — the first device test of the CUDA kernels: every
 * launcher on small odd shapes against host references, and every reduction-bearing launcher run twice
 * and compared bit for bit. Needs a GPU (sm_80+); without one it says so and exits 77 (ctest's "skip").
 *
 * It reuses check_kernels_host.cu's references (naive double attention, tolerances, RNG) by including it
 * with MP_HOSTCHECK_NO_MAIN, which also brings in the kernel files, so the launchers are compiled into
 * this program directly. Build and run from the repository root:
 *   gcc -O2 -fopenmp -I. -c core/kernels_cpu_attn_fwd.c -o /tmp/af.o
 *   gcc -O2 -fopenmp -I. -c core/kernels_cpu_attn_bwd.c -o /tmp/ab.o
 *   gcc -O2 -I. -c core/error.c -o /tmp/err.o
 *   nvcc -std=c++17 -O2 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -I. \
 *        tests/cuda/check_kernels_device.cu core/cuda/gemm_cuda.cu \
 *        /tmp/af.o /tmp/ab.o /tmp/err.o -lcublasLt -lopenblas -lgomp \
 *        -o /tmp/check_kernels_device && compute-sanitizer /tmp/check_kernels_device
 * (also worth running under compute-sanitizer --tool racecheck and --tool synccheck).
 */
#define MP_HOSTCHECK_NO_MAIN 1
#include "tests/cuda/check_kernels_host.cu"
#include "core/cuda/k_attn_kv.cu"
extern "C" {
#include "core/error.h"
}
#include "core/cuda/gemm_cuda.h"

#define SYNC()                               \
    do {                                     \
        CK(cudaGetLastError());              \
        CK(cudaStreamSynchronize(g_s));      \
    } while (0)

static cudaStream_t g_s;

template <typename T>
static T *dev(size_t n) {
    T *p = NULL;
    CK(cudaMalloc(&p, (n ? n : 1) * sizeof(T)));
    CK(cudaMemset(p, 0, (n ? n : 1) * sizeof(T)));
    return p;
}
template <typename T>
static T *up(const std::vector<T> &h) {
    T *p = dev<T>(h.size());
    CK(cudaMemcpy(p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
}
template <typename T>
static std::vector<T> down(const T *p, size_t n) {
    std::vector<T> h(n);
    CK(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost));
    return h;
}
static mp_bf16 *up_bf16(const std::vector<float> &h) {
    std::vector<mp_bf16> b(h.size());
    for (size_t i = 0; i < h.size(); i++) b[i] = __float2bfloat16_rn(h[i]);
    return up(b);
}
static std::vector<float> down_bf16(const mp_bf16 *p, size_t n) {
    std::vector<mp_bf16> b = down(p, n);
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(b[i]);
    return f;
}
static std::vector<float> rnd_vec(size_t n, float amp) {
    std::vector<float> v(n);
    for (auto &e : v) e = bf16_round(amp * rnd_unit());
    return v;
}
/* v after off zeros: uploaded, its data starts off elements past an aligned allocation (the unaligned paths). */
static std::vector<float> padded(const std::vector<float> &v, int off) {
    std::vector<float> p(v.size() + off, 0.0f);
    std::copy(v.begin(), v.end(), p.begin() + off);
    return p;
}
template <typename T>
static bool same_bits(const std::vector<T> &a, const std::vector<T> &b) {
    return a.size() == b.size() && memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

static void dev_reduce(void) {
    const int64_t n = 1234567;
    std::vector<float> x(n);
    for (auto &e : x) e = rnd_unit();
    /* Bounds: the device sums in double (squares of floats exact in double) along chains of at most ~32
     * terms per thread + 8 (block tree) + 10 (final tree) additions: within gamma_64(64) (7.1e-15) of the
     * magnitudes' sum, against a compensated float64 reference (sum_ref: adds nothing). */
    const double ref2 = sum_ref<true>(x), ref1 = sum_ref(x), tol = gamma_f64(64);
    double mag1 = 0;
    for (float e : x) mag1 += fabs(e);
    float *dx = up(x);
    double *acc = dev<double>(2), *part = dev<double>(MP_CUDA_REDUCE_MAX_BLOCKS);
    mp_cuda_sumsq_acc_f32(acc, part, dx, n, g_s);
    mp_cuda_sum_acc_f32(acc + 1, part, dx, n, g_s);
    SYNC();
    std::vector<double> a = down(acc, 2);
    CHECK(fabs(a[0] - ref2) <= tol * ref2 && fabs(a[1] - ref1) <= tol * mag1, "sumsq %.17g/%.17g sum %.17g/%.17g", a[0],
          ref2, a[1], ref1);
    mp_cuda_sumsq_acc_f32(acc, part, dx, n, g_s);   /* accumulates: now 2x */
    SYNC();
    std::vector<double> b = down(acc, 2);
    CHECK(b[0] == a[0] + a[0], "sumsq accumulates bitwise (a + a)");
    float *scale = dev<float>(1);
    mp_cuda_clip_scale(scale, acc, 1.0, g_s);
    SYNC();
    CHECK(down(scale, 1)[0] == clip_factor(b[0], 1.0), "clip scale on the device");
    /* the same data one element off 16-byte alignment (one load per element): the same bits, fp32 and
     * bf16; the bf16 result equals the host replay of its order to double rounding */
    std::vector<float> x1(n + 1, 0.0f);
    std::copy(x.begin(), x.end(), x1.begin() + 1);
    std::vector<mp_bf16> xb(n), xb1(n + 1, __float2bfloat16_rn(0.0f));
    for (int64_t i = 0; i < n; i++) xb[i] = xb1[i + 1] = __float2bfloat16_rn(x[i]);
    float *du = up(x1);
    mp_bf16 *db = up(xb), *db1 = up(xb1);
    double *acc2 = dev<double>(4);
    mp_cuda_sumsq_acc_f32(acc2, part, du + 1, n, g_s);
    mp_cuda_sum_acc_f32(acc2 + 1, part, du + 1, n, g_s);
    mp_cuda_sumsq_acc_bf16(acc2 + 2, part, db, n, g_s);
    mp_cuda_sumsq_acc_bf16(acc2 + 3, part, db1 + 1, n, g_s);
    SYNC();
    std::vector<double> c = down(acc2, 4);
    CHECK(c[0] == a[0] && c[1] == a[1], "sumsq/sum f32 unaligned %.17g/%.17g differ from aligned %.17g/%.17g", c[0], c[1],
          a[0], a[1]);
    const double rb = reduce_replay<true, true>(xb.data(), n, 0.0);
    CHECK(c[2] == c[3] && fabs(c[2] - rb) <= 2 * tol * rb, "sumsq bf16 aligned %.17g unaligned %.17g host replay %.17g",
          c[2], c[3], rb);
    cudaFree(du), cudaFree(db), cudaFree(db1), cudaFree(acc2);
    cudaFree(dx), cudaFree(acc), cudaFree(part), cudaFree(scale);
}

/* The embedding forward and backward (N 777: the sort in one shared-memory tile; N 5000: P 8192, four
 * tiles and global steps between them), the backward bitwise the CPU's in-order scatter. */
static void dev_embed(int N, int D) {
    const int v_start = 10, v_local = 40;
    std::vector<int32_t> tok(N);
    for (auto &t : tok) t = (int32_t)(rnd_u64() % 60);
    std::vector<float> wte = rnd_vec((size_t)v_local * D, 1.0f), dout = rnd_vec((size_t)N * D, 1.0f);
    std::vector<float> ref((size_t)v_local * D, 0.0f);
    for (int n = 0; n < N; n++) {
        const int64_t r = (int64_t)tok[n] - v_start;
        if (r >= 0 && r < v_local)
            for (int i = 0; i < D; i++) ref[r * D + i] += dout[(size_t)n * D + i];
    }
    int32_t *dtok = up(tok);
    float *dw = up(wte), *dg = dev<float>((size_t)v_local * D);
    mp_bf16 *dout_d = up_bf16(dout), *out = dev<mp_bf16>((size_t)N * D);
    void *keys = dev<char>(mp_cuda_embed_bwd_scratch_bytes(N));
    mp_cuda_embed_fwd_f32(out, dtok, dw, N, D, v_start, v_local, g_s);
    SYNC();
    std::vector<float> o = down_bf16(out, (size_t)N * D);
    int bad = 0;
    for (int n = 0; n < N; n++) {
        const int64_t r = (int64_t)tok[n] - v_start;
        for (int i = 0; i < D; i++) bad += o[(size_t)n * D + i] != ((r >= 0 && r < v_local) ? wte[r * D + i] : 0.0f);
    }
    CHECK(bad == 0, "embed fwd: %d wrong elements", bad);
    mp_cuda_embed_bwd(dg, dout_d, dtok, keys, N, D, v_start, v_local, g_s);
    SYNC();
    std::vector<float> g1 = down(dg, ref.size());
    CHECK(same_bits(g1, ref), "embed bwd from zero is not bitwise the CPU's in-order scatter");
    CK(cudaMemset(dg, 0, ref.size() * sizeof(float)));
    mp_cuda_embed_bwd(dg, dout_d, dtok, keys, N, D, v_start, v_local, g_s);
    SYNC();
    CHECK(same_bits(down(dg, ref.size()), g1), "embed bwd not repeatable");
    cudaFree(dtok), cudaFree(dw), cudaFree(dg), cudaFree(dout_d), cudaFree(out), cudaFree(keys);
}

/* RMSNorm forward and backward on one shape against float64; off: the element offset of every tensor
 * (off 1: no pointer 16-byte aligned, 2-byte accesses even when D % 8 == 0). dx accumulates into a
 * random start; dw into 0.25. Backward run twice from the same start: dx and dw bitwise repeatable.
 * Returns y, rstd, dx, dw (the caller compares offsets: alignment must not change a bit). */
static std::vector<std::vector<float>> dev_rmsnorm(int N, int D, int off) {
    char shape[64];
    snprintf(shape, sizeof shape, "N=%d D=%d off=%d", N, D, off);
    const float eps = 1e-5f;
    const size_t nd = (size_t)N * D;
    std::vector<float> x = rnd_vec(nd, 2.0f), w = rnd_vec(D, 1.0f), dy = rnd_vec(nd, 1.0f), dx0 = rnd_vec(nd, 1.0f);
    auto pad = [off](const std::vector<float> &v) { return padded(v, off); };
    mp_bf16 *xb = up_bf16(pad(x)), *wb = up_bf16(pad(w)), *dyb = up_bf16(pad(dy)), *dxb = up_bf16(pad(dx0)),
            *yb = dev<mp_bf16>(nd + off);
    mp_bf16 *xd = xb + off, *wd = wb + off, *dyd = dyb + off, *dx = dxb + off, *y = yb + off;
    float *rstd = dev<float>(N), *dw = up(std::vector<float>(D, 0.25f)),
          *part = dev<float>(mp_cuda_rmsnorm_bwd_scratch_floats(N, D));
    mp_cuda_rmsnorm_fwd(y, rstd, xd, wd, N, D, eps, g_s);
    mp_cuda_rmsnorm_bwd(dx, dw, part, dyd, xd, wd, rstd, N, D, g_s);
    SYNC();
    std::vector<float> yh = down_bf16(y, nd), rh = down(rstd, N), dxh = down_bf16(dx, nd), dwh = down(dw, D);
    /* Bounds (fp32 inside, bf16 stores): rstd = 1 / sqrtf(ss / D + eps), ss an fp32 sum of D squares (chains
     * of <= D additions): ss within gamma_D, so rstd within er = gamma_D / 2 + 4 2^-24 (the division by D,
     * + eps, sqrtf and 1/x each half an ulp, CUDA's sqrtf and division being IEEE without fast math);
     * y = bf16(x rstd w): er + 2 2^-24 before its store, then 2^-8. dx = bf16(dx0 + r (w dy - x r^2 dot / D)):
     * dot an fp32 sum of D products (gamma_D of sum |w dy x|), each term's roundings (<= 8, contracted or
     * not) and r's error per use, then the store (2^-8 |dx|): the non-store part per element is ex[i],
     * the bound's atol its max. dw = 0.25 + an fp32 sum over N rows of dy x r (chunks, then chunk sums:
     * chains <= N + 2) and r's error: ew[i] over sum_n |dy x r|. */
    const double er = gamma_f32(D) / 2 + 4 * MP_U24;
    std::vector<double> ry(nd), rdx(nd), rdw(D, 0.0), rr(N), aw(D, 0.0);
    double ex = 0;
    for (int n = 0; n < N; n++) {
        double ss = 0, dot = 0, adot = 0;
        for (int i = 0; i < D; i++) ss += (double)x[n * D + i] * x[n * D + i];
        const double r = 1.0 / sqrt(ss / D + eps);
        rr[n] = r;
        for (int i = 0; i < D; i++) {
            ry[n * D + i] = x[n * D + i] * r * w[i], dot += (double)w[i] * dy[n * D + i] * x[n * D + i];
            adot += fabs((double)w[i] * dy[n * D + i] * x[n * D + i]);
        }
        for (int i = 0; i < D; i++) {
            const double t1 = r * fabs(w[i] * dy[n * D + i]), t2 = r * r * r * fabs(x[n * D + i] * dot) / D;
            rdx[n * D + i] = dx0[n * D + i] + r * (w[i] * dy[n * D + i] - x[n * D + i] * r * r * dot / D);
            ex = std::max(ex, 8 * MP_U24 * (fabs(dx0[n * D + i]) + t1 + t2) + 3 * er * (t1 + t2) +
                                  r * r * r * fabs(x[n * D + i]) / D * gamma_f32(D) * adot);
            rdw[i] += dy[n * D + i] * x[n * D + i] * r;
            aw[i] += fabs(dy[n * D + i] * x[n * D + i] * r);
        }
    }
    double ew = 0;
    for (int i = 0; i < D; i++) ew = std::max(ew, (gamma_f32(N + 4) + er) * (aw[i] + 0.25));
    for (auto &e : rdw) e += 0.25;
    const double slack = 1.0 + 1.0 / 1024;   /* second-order terms */
    close("rmsnorm y", yh, ry, MP_BF16_U + slack * (1 + MP_BF16_U) * (er + 2 * MP_U24), 0, shape);
    close("rmsnorm rstd", rh, rr, slack * er, 0, shape);
    close("rmsnorm dx", dxh, rdx, MP_BF16_U, slack * (1 + MP_BF16_U) * ex, shape);
    close("rmsnorm dw", dwh, rdw, 0, slack * ew, shape);
    const std::vector<float> dw0(D, 0.25f);
    std::vector<mp_bf16> dx0b(nd);
    for (size_t k = 0; k < nd; k++) dx0b[k] = __float2bfloat16_rn(dx0[k]);
    CK(cudaMemcpy(dx, dx0b.data(), nd * sizeof(mp_bf16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, dw0.data(), D * sizeof(float), cudaMemcpyHostToDevice));
    mp_cuda_rmsnorm_bwd(dx, dw, part, dyd, xd, wd, rstd, N, D, g_s);
    SYNC();
    CHECK(same_bits(down(dw, D), dwh) && same_bits(down_bf16(dx, nd), dxh), "rmsnorm bwd not repeatable (%s)", shape);
    cudaFree(xb), cudaFree(wb), cudaFree(dyb), cudaFree(yb), cudaFree(dxb), cudaFree(rstd), cudaFree(dw), cudaFree(part);
    return {yh, rh, dxh, dwh};
}

/* bf16 host data uploaded off elements past an aligned allocation (off 1: no 16-byte access); returns the
 * allocation (the data at + off). */
static mp_bf16 *up_at(const std::vector<mp_bf16> &h, int off) {
    mp_bf16 *p = dev<mp_bf16>(h.size() + off);
    CK(cudaMemcpy(p + off, h.data(), h.size() * sizeof(mp_bf16), cudaMemcpyHostToDevice));
    return p;
}

/* The biases on the device: the block of cols columns at column col0 of N rows ldx wide, every tensor off
 * elements past an aligned allocation (off 1: the 2-byte paths). bias_add bitwise its contract
 * (bias_add_want: one fp32 addition per element, which the compiler cannot contract or reorder), the other
 * columns untouched; bias_bwd's db (from 0.25) bitwise the contract's order (bias_db_order: fp32 additions
 * only), and again from 0.25 the same bits. */
static void dev_bias(int N, int cols, int ldx, int col0, int off) {
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d cols=%d ldx=%d col0=%d off=%d", N, cols, ldx, col0, off);
    const std::vector<mp_bf16> x0 = block_rows(N, ldx, col0, cols), b = bias_random(cols);
    const size_t nx = (size_t)N * ldx;
    mp_bf16 *xb = up_at(x0, off), *dxb = up_at(x0, off), *bb = up_at(b, off);
    float *db = up(std::vector<float>(cols, 0.25f)), *part = dev<float>(mp_cuda_chunk_partial_floats(N, cols));
    mp_cuda_bias_add(xb + off + col0, ldx, bb + off, N, cols, g_s);
    mp_cuda_bias_bwd(db, part, dxb + off + col0, ldx, N, cols, g_s);
    SYNC();
    CHECK(same_bits(down(xb + off, nx), bias_add_want(x0, b, N, ldx, col0)),
          "bias_add %s: not bf16(x + b) bit for bit, or a column outside the block written", shape);
    const std::vector<float> want = bias_db_order(x0, N, ldx, col0, cols, 0.25f), got = down(db, cols);
    CHECK(same_bits(got, want), "bias_bwd %s: db is not the contract's fixed-order sum bit for bit", shape);
    CK(cudaMemcpy(db, std::vector<float>(cols, 0.25f).data(), cols * sizeof(float), cudaMemcpyHostToDevice));
    mp_cuda_bias_bwd(db, part, dxb + off + col0, ldx, N, cols, g_s);
    SYNC();
    CHECK(same_bits(down(db, cols), got), "bias_bwd %s: not repeatable", shape);
    cudaFree(xb), cudaFree(dxb), cudaFree(bb), cudaFree(db), cudaFree(part);
}

/* The per-head RMSNorm on the device (HeadCase N, H, hd at column col0 of rows ldx wide), every tensor off
 * elements past an aligned allocation (off 1: 2-byte accesses). Forward with x_save: head_fwd_bad (x_save
 * bitwise the input, y and rstd within their float64 bounds, the other columns untouched), and without
 * x_save the same bits; backward in place from dy0: head_bwd_bad from the device's x_save and rstd, then
 * again from dy0 and dw 0.25: the same bits. Returns y, rstd, dx, dw as floats (the caller compares
 * offsets: alignment must not change a bit). */
static std::vector<std::vector<float>> dev_head_rmsnorm(int N, int H, int hd, int ldx, int col0, int off) {
    char shape[96];
    snprintf(shape, sizeof shape, "N=%d H=%d hd=%d ldx=%d col0=%d off=%d", N, H, hd, ldx, col0, off);
    const float eps = 1e-3f;   /* large enough that an eps dropped moves rstd past its tolerance */
    const HeadCase c = head_case(N, H, hd, ldx, col0);
    const size_t nx = (size_t)N * ldx, ns = (size_t)c.M * hd;
    mp_bf16 *xb = up_at(c.x0, off), *x2 = up_at(c.x0, off), *dxb = up_at(c.dy0, off), *wb = up_at(c.w, off);
    mp_bf16 *xs = dev<mp_bf16>(ns + off);
    float *rstd = dev<float>(c.M), *r2 = dev<float>(c.M), *dw = up(std::vector<float>(hd, 0.25f)),
          *part = dev<float>(mp_cuda_chunk_partial_floats(c.M, hd));
    mp_cuda_head_rmsnorm_fwd(xb + off + col0, ldx, xs + off, rstd, wb + off, N, H, hd, eps, g_s);
    mp_cuda_head_rmsnorm_fwd(x2 + off + col0, ldx, NULL, r2, wb + off, N, H, hd, eps, g_s);
    mp_cuda_head_rmsnorm_bwd(dxb + off + col0, ldx, dw, part, xs + off, rstd, wb + off, N, H, hd, g_s);
    SYNC();
    const std::vector<mp_bf16> y = down(xb + off, nx), xsh = down(xs + off, ns), dx = down(dxb + off, nx);
    const std::vector<float> rh = down(rstd, c.M), dwh = down(dw, hd);
    int bad = head_fwd_bad(c, y, xsh, rh, eps);
    CHECK(bad == 0, "head_rmsnorm fwd %s: %d elements off float64 or x_save (-1: a column outside written)", shape, bad);
    CHECK(same_bits(down(x2 + off, nx), y) && same_bits(down(r2, c.M), rh), "head_rmsnorm fwd %s: x_save NULL differs",
          shape);
    bad = head_bwd_bad(c, dx, dwh, 0.25f, xsh, rh);
    CHECK(bad == 0, "head_rmsnorm bwd %s: %d dx/dw elements off float64 (-1: a column outside written)", shape, bad);
    CK(cudaMemcpy(dxb + off, c.dy0.data(), nx * sizeof(mp_bf16), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(dw, std::vector<float>(hd, 0.25f).data(), hd * sizeof(float), cudaMemcpyHostToDevice));
    mp_cuda_head_rmsnorm_bwd(dxb + off + col0, ldx, dw, part, xs + off, rstd, wb + off, N, H, hd, g_s);
    SYNC();
    CHECK(same_bits(down(dxb + off, nx), dx) && same_bits(down(dw, hd), dwh), "head_rmsnorm bwd %s: not repeatable",
          shape);
    cudaFree(xb), cudaFree(x2), cudaFree(dxb), cudaFree(wb), cudaFree(xs), cudaFree(rstd), cudaFree(r2), cudaFree(dw),
        cudaFree(part);
    auto fl = [](const std::vector<mp_bf16> &v) {
        std::vector<float> o(v.size());
        for (size_t k = 0; k < v.size(); k++) o[k] = __bfloat162float(v[k]);
        return o;
    };
    return {fl(y), rh, fl(dx), dwh};
}

static void dev_rope_swiglu(void) {
  /* hd 12: the 2-byte path; hd 64: the 16-byte path (k_rope.cu's VEC 8); then the heads as a column block
   * [off, off + H hd) of wider rows (ld), as layers/llama.c's fused [q | k | v]: 16-byte (ld % 8 == 0) and
   * 2-byte; the other columns must keep their bits */
  const int cases[][3] = {{12, 0, 0}, {64, 0, 0}, {64, 64, 64}, {12, 6, 3}};
  for (auto &cs : cases) {
    const int hd = cs[0], off = cs[1], B = 2, T = 5, H = 3, half = hd / 2, max_pos = 16, pos0 = 4;
    const int ld = off + H * hd + cs[2];
    char what[64];
    snprintf(what, sizeof what, "hd %d off %d ld %d", hd, off, ld);
    std::vector<float> ct((size_t)max_pos * half), st((size_t)max_pos * half);
    for (int p = 0; p < max_pos; p++)
        for (int i = 0; i < half; i++) ct[p * half + i] = (float)cos(p * pow(1e4, -2.0 * i / hd)), st[p * half + i] = (float)sin(p * pow(1e4, -2.0 * i / hd));
    std::vector<float> x = rnd_vec((size_t)B * T * ld, 1.0f);
    for (auto &e : x) e = __bfloat162float(__float2bfloat16_rn(e));   /* as stored: the untouched columns compare exactly */
    mp_bf16 *xd = up_bf16(x);
    float *cd = up(ct), *sd = up(st);
    mp_cuda_rope_fwd(xd + off, cd, sd, B, T, H, hd, pos0, max_pos, ld, g_s);
    SYNC();
    std::vector<float> y = down_bf16(xd, x.size());
    std::vector<double> ry(x.begin(), x.end());
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++)
                for (int i = 0; i < half; i++) {
                    const size_t lo = ((size_t)b * T + t) * ld + off + (size_t)h * hd + i, hi = lo + half;
                    const size_t tab = (size_t)(pos0 + t) * half + i;
                    ry[lo] = (double)x[lo] * ct[tab] - (double)x[hi] * st[tab];
                    ry[hi] = (double)x[hi] * ct[tab] + (double)x[lo] * st[tab];
                }
    /* y = bf16(x c -+ x' s) in fp32 (contracted or not: <= 2 roundings of |x c| + |x' s| <= 2 max|x|), then
     * the store: 2^-8 |y|; untouched columns exact */
    double mx = 0;
    for (float e : x) mx = std::max(mx, (double)fabsf(e));
    close("rope fwd", y, ry, MP_BF16_U, (1 + MP_BF16_U) * gamma_f32(2) * 2 * mx, what);
    for (size_t i = 0; i < x.size(); i++) {
        const int col = (int)(i % (size_t)ld);
        if (col < off || col >= off + H * hd) CHECK(y[i] == x[i], "rope (%s) wrote column %d", what, col);
    }
    mp_cuda_rope_bwd(xd + off, cd, sd, B, T, H, hd, pos0, max_pos, ld, g_s);
    SYNC();
    /* the inverse rotation of y: y's error e (store: |e_lo| + |e_hi| <= 2^-8 (|y_lo| + |y_hi|) <= 2^-8 2 max|x|;
     * fp32: 4 2^-24 max|x| each) through the rotation (|.| of a component <= |e_lo| + |e_hi|), its own fp32
     * part (<= 6 2^-24 max|x|), and the second store (2^-8 |x| + 2^-8 of the rest) */
    close("rope bwd(fwd(x))", down_bf16(xd, x.size()), x, MP_BF16_U,
          (1 + MP_BF16_U) * (2 * MP_BF16_U + 16 * MP_U24) * mx * (1 + 1.0 / 1024), what);
    cudaFree(xd), cudaFree(cd), cudaFree(sd);
  }

    const int64_t n = 1003;   /* 16-byte chunks and a tail of 3 (k_swiglu.cu) */
    std::vector<float> g = rnd_vec(n, 6.0f), u = rnd_vec(n, 2.0f), d = rnd_vec(n, 1.0f);
    mp_bf16 *gd = up_bf16(g), *ud = up_bf16(u), *dd = up_bf16(d), *o = dev<mp_bf16>(n), *dg = dev<mp_bf16>(n),
            *du = dev<mp_bf16>(n);
    mp_cuda_swiglu_fwd(o, gd, ud, n, g_s);
    mp_cuda_swiglu_bwd(dg, du, dd, gd, ud, n, g_s);
    SYNC();
    /* float64 references. s = 1 / (1 + expf(-g)): expf 2 ulp, the sum and the division: s within 6 2^-24;
     * out = g s u: 8 2^-24, then the store (2^-8); dup = d g s: 8 2^-24, the store. dgate = d u s (1 + g (1 - s)):
     * 1 - s turns s's relative error into an absolute 6 2^-24 (+ its own rounding), times g and rounded, + 1
     * rounded: the bracket br off by (8 |g| + |br|) 2^-24 absolute (br has a zero near g = -1.28: no relative
     * bound); |d u s| times that, + |d u s br| (9 2^-24: s and 3 products), then the store: atol ea */
    std::vector<double> ro(n), rdg(n), rdu(n);
    double ea = 0;
    for (int64_t i = 0; i < n; i++) {
        const double sg = 1.0 / (1.0 + exp(-(double)g[i])), br = 1.0 + g[i] * (1.0 - sg);
        ro[i] = g[i] * sg * u[i], rdu[i] = (double)d[i] * g[i] * sg, rdg[i] = (double)d[i] * u[i] * sg * br;
        ea = std::max(ea, fabs((double)d[i] * u[i] * sg) * (8 * fabs(g[i]) * MP_U24 + 10 * MP_U24 * fabs(br)));
    }
    close("swiglu", down_bf16(o, n), ro, MP_BF16_U + 9 * MP_U24, 0, "");
    close("swiglu dgate", down_bf16(dg, n), rdg, MP_BF16_U, (1 + MP_BF16_U) * ea, "");
    close("swiglu dup", down_bf16(du, n), rdu, MP_BF16_U + 9 * MP_U24, 0, "");
    cudaFree(gd), cudaFree(ud), cudaFree(dd), cudaFree(o), cudaFree(dg),
        cudaFree(du);
}

/* pad < 0: q, k, v (and dq, dk, dv) dense; else the fused rows of layers/llama.c plus pad columns
 * (qkv_layout, check_kernels_host.cu): NaN in the input's pad columns (a read of them poisons), and the
 * gradient buffer's pad columns must keep their bits. hd 64/128 with pad % 8 == 0 takes the tensor-core
 * kernels, other pads and head dims the CUDA-core ones (mp_cuda_attn_mma_ok). W: the sliding window (the
 * naive reference masks by it too; 0 = full causal). */
static void dev_attention(int B, int T, int H, int KV, int hd, int pad = -1, int W = 0) {
    char shape[112];
    snprintf(shape, sizeof shape, "device B=%d T=%d H=%d KV=%d hd=%d pad=%d W=%d", B, T, H, KV, hd, pad, W);
    Attn A;
    A.B = B, A.T = T, A.H = H, A.KV = KV, A.hd = hd, A.W = W;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nr = (size_t)B * H * T;
    A.q = rnd_vec(nq, 2.0f), A.k = rnd_vec(nk, 2.0f), A.v = rnd_vec(nk, 1.0f), A.dout = rnd_vec(nq, 1.0f);
    std::vector<double> rout(nq), rlse(nr), rdq(nq, 0.0), rdk(nk, 0.0), rdv(nk, 0.0);
    naive(A, rout, rlse, rdq, rdk, rdv);
    const QKVLayout L = qkv_layout(A, pad);
    const std::vector<float> nanq(nq, NAN), nank(nk, NAN);
    mp_bf16 *x = up_bf16(qkv_pack(A, L, A.q, A.k, A.v, NAN)), *gx = up_bf16(qkv_pack(A, L, nanq, nank, nank, 7.0f));
    mp_bf16 *q = x + L.q, *k = x + L.k, *v = x + L.v, *dq = gx + L.q, *dk = gx + L.k, *dv = gx + L.v;
    mp_bf16 *dout = up_bf16(A.dout), *out = dev<mp_bf16>(nq);
    float *lse = dev<float>(nr), *scratch = dev<float>(nr);
    mp_cuda_attn_fwd(out, lse, q, k, v, B, T, H, KV, hd, L.ldq, L.ldkv, W, g_s);
    mp_cuda_attn_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, B, T, H, KV, hd, L.ldq, L.ldkv, W, g_s);
    SYNC();
    std::vector<float> o = down_bf16(out, nq), l = down(lse, nr), g = down_bf16(gx, L.n), gq(nq), gk(nk), gv(nk);
    CHECK(qkv_unpack(A, L, g, gq, gk, gv, 7.0f) == 0, "attention wrote outside dq, dk, dv (%s)", shape);
    attn_close(A, shape, rout, rlse, rdq, rdk, rdv, o, l, gq, gk, gv);
    mp_cuda_attn_fwd(out, lse, q, k, v, B, T, H, KV, hd, L.ldq, L.ldkv, W, g_s);
    mp_cuda_attn_bwd(dq, dk, dv, scratch, dout, out, lse, q, k, v, B, T, H, KV, hd, L.ldq, L.ldkv, W, g_s);
    SYNC();
    CHECK(same_bits(down_bf16(out, nq), o) && same_bits(down(lse, nr), l) && same_bits(down_bf16(gx, L.n), g),
          "attention not repeatable (%s)", shape);
    cudaFree(x), cudaFree(gx), cudaFree(dout), cudaFree(out), cudaFree(lse), cudaFree(scratch);
}

/* attn_fwd_kv (k_attn_kv.cu): query chunks at positions p0 .. p0+n-1 against a cache of capacity Tc > T
 * give the naive attention's rows (single decode rows, unaligned chunks), and run twice bit for bit; W:
 * the sliding window (0 = full causal). */
static void dev_attention_kv(int B, int T, int H, int KV, int hd, int W = 0) {
    char shape[96];
    snprintf(shape, sizeof shape, "device kv B=%d T=%d H=%d KV=%d hd=%d W=%d", B, T, H, KV, hd, W);
    Attn A;
    A.B = B, A.T = T, A.H = H, A.KV = KV, A.hd = hd, A.W = W;
    const int Tc = T + 5;
    const size_t nq = (size_t)B * T * H * hd, nk = (size_t)B * T * KV * hd, nr = (size_t)B * H * T;
    A.q = rnd_vec(nq, 2.0f), A.k = rnd_vec(nk, 2.0f), A.v = rnd_vec(nk, 1.0f), A.dout = rnd_vec(nq, 1.0f);
    std::vector<double> rout(nq), rlse(nr), rdq(nq, 0.0), rdk(nk, 0.0), rdv(nk, 0.0);
    naive(A, rout, rlse, rdq, rdk, rdv);
    std::vector<float> kc((size_t)B * Tc * KV * hd, 0.0f), vc(kc.size(), 0.0f);
    for (int b = 0; b < B; b++)
        for (size_t i = 0; i < (size_t)T * KV * hd; i++)
            kc[(size_t)b * Tc * KV * hd + i] = A.k[(size_t)b * T * KV * hd + i],
            vc[(size_t)b * Tc * KV * hd + i] = A.v[(size_t)b * T * KV * hd + i];
    mp_bf16 *k = up_bf16(kc), *v = up_bf16(vc);
    const std::vector<double> ekv = attn_bounds(A, rout);
    const int chunks[][2] = {{0, T / 3}, {T / 3, T / 2}, {T - 2, 1}, {T - 1, 1}};
    for (auto &c : chunks) {
        const int p0 = c[0], n = c[1];
        const size_t row = (size_t)H * hd;
        std::vector<float> qc((size_t)B * n * row);
        std::vector<double> ro(qc.size()), rl((size_t)B * H * n);
        for (int b = 0; b < B; b++)
            for (size_t i = 0; i < n * row; i++) {
                qc[(size_t)b * n * row + i] = A.q[((size_t)b * T + p0) * row + i];
                ro[(size_t)b * n * row + i] = rout[((size_t)b * T + p0) * row + i];
            }
        for (int b = 0; b < B; b++)
            for (int h = 0; h < H; h++)
                for (int t = 0; t < n; t++) rl[((size_t)b * H + h) * n + t] = rlse[A.ri(b, h, p0 + t)];
        mp_bf16 *q = up_bf16(qc), *out = dev<mp_bf16>(qc.size());
        float *lse = dev<float>(rl.size());
        mp_cuda_attn_fwd_kv(out, lse, q, k, v, B, n, p0, Tc, H, KV, hd, W, g_s);
        SYNC();
        std::vector<float> o = down_bf16(out, qc.size()), l = down(lse, rl.size());
        close("attn_kv out", o, ro, MP_BF16_U, ekv[0], shape);   /* attn_bounds: the same online softmax */
        close("attn_kv lse", l, rl, MP_U24, ekv[1], shape);
        mp_cuda_attn_fwd_kv(out, lse, q, k, v, B, n, p0, Tc, H, KV, hd, W, g_s);
        SYNC();
        CHECK(same_bits(down_bf16(out, qc.size()), o) && same_bits(down(lse, rl.size()), l),
              "attn_kv not repeatable (%s)", shape);
        cudaFree(q), cudaFree(out), cudaFree(lse);
    }
    cudaFree(k), cudaFree(v);
}

/* bf16 cross-entropy on N = 37 rows against float64; off: the logits' element offset (off 1 with
 * v_local % 8 == 0: 2-byte accesses where off 0 takes 16-byte ones). Returns the dlogits, then the losses. */
static std::vector<float> dev_xent(int v_local, int v_valid, int off) {
    const int N = 37, v_start = 2000;
    const float dloss = 0.125f;
    std::vector<float> lg = rnd_vec((size_t)N * v_local, 8.0f);
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = v_start - 5 + (int32_t)(rnd_u64() % (v_valid + 10));
    mp_bf16 *lbase = up_bf16(padded(lg, off)), *ld = lbase + off;
    int32_t *td = up(tgt);
    float *mx = dev<float>(N), *se = dev<float>(N), *tl = dev<float>(N), *loss = dev<float>(N);
    mp_cuda_xent_rowmax_bf16(mx, ld, N, v_local, v_valid, g_s);
    mp_cuda_xent_sumexp_bf16(se, ld, mx, N, v_local, v_valid, g_s);
    mp_cuda_xent_target_bf16(tl, ld, td, N, v_local, v_valid, v_start, g_s);
    mp_cuda_xent_loss(loss, mx, se, tl, N, g_s);
    mp_cuda_xent_bwd_bf16(ld, mx, se, td, dloss, N, v_local, v_valid, v_start, g_s);
    SYNC();
    std::vector<float> lh = down(loss, N), gh = down_bf16(ld, (size_t)N * v_local);
    std::vector<double> rl(N), rg((size_t)N * v_local, 0.0);
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, s = 0;
        for (int j = 0; j < v_valid; j++) m = std::max(m, (double)lg[(size_t)n * v_local + j]);
        for (int j = 0; j < v_valid; j++) s += exp(lg[(size_t)n * v_local + j] - m);
        const int64_t c = (int64_t)tgt[n] - v_start;
        const double t = (c >= 0 && c < v_valid) ? lg[(size_t)n * v_local + c] : 0.0;
        rl[n] = log(s) + m - t;
        for (int j = 0; j < v_valid; j++) rg[(size_t)n * v_local + j] = dloss * (exp(lg[(size_t)n * v_local + j] - m) / s - (j == c));
    }
    char shape[64];
    snprintf(shape, sizeof shape, "v_local %d v_valid %d off %d", v_local, v_valid, off);
    /* logits in [-8, 8]: range <= 16. The loss (float64 from the fp32 sumexp, then stored fp32): off by
     * log(1 + xent_sum_rtol) <= xent_sum_rtol, + 2^-24 of itself. dlogits = bf16((dloss / s) expf(x - m) -
     * dloss [target]): dloss p (the sum's error + (range + 4) 2^-24 for the term + 3 roundings) + 2^-24 dloss
     * (the target's subtraction), then the store (2^-8 of the value) */
    const double rs = xent_sum_rtol(v_valid, 16.0, false);
    close("xent loss", lh, rl, MP_U24, rs, shape);
    close("xent dlogits", gh, rg, MP_BF16_U, (1 + MP_BF16_U) * dloss * (rs + 24 * MP_U24), shape);
    cudaFree(lbase), cudaFree(td), cudaFree(mx), cudaFree(se), cudaFree(tl), cudaFree(loss);
    gh.insert(gh.end(), lh.begin(), lh.end());   /* the losses too: rowmax and sumexp must not depend on alignment */
    return gh;
}

/* The one-pass forward (mp_cuda_xent_fwd_bf16) on N = 37 rows (row 0 all -inf, row 1 rising, the rest
 * random; targets also outside the slice and in the padding), off as in dev_xent: rowmax and tlogit exact
 * against float64, sumexp within 1e-5; rowmax bitwise and sumexp within 2e-6 of the three-kernel path's;
 * a second run bitwise equal. Returns rowmax, sumexp, tlogit (for the aligned/unaligned comparison). */
static std::vector<float> dev_xent_fwd(int v_local, int v_valid, int off) {
    const int N = 37, v_start = 2000;
    std::vector<float> lg = rnd_vec((size_t)N * v_local, 8.0f);
    for (int j = 0; j < v_local; j++) lg[j] = -INFINITY, lg[v_local + j] = bf16_round(-20.0f + 40.0f * j / v_local);
    std::vector<int32_t> tgt(N);
    for (int n = 0; n < N; n++) tgt[n] = v_start - 5 + (int32_t)(rnd_u64() % (v_local + 10));
    mp_bf16 *lbase = up_bf16(padded(lg, off)), *ld = lbase + off;
    int32_t *td = up(tgt);
    float *st = dev<float>(5 * N);   /* rowmax, sumexp, tlogit; the three-kernel rowmax, sumexp */
    mp_cuda_xent_fwd_bf16(st, st + N, st + 2 * N, ld, td, N, v_local, v_valid, v_start, g_s);
    mp_cuda_xent_rowmax_bf16(st + 3 * N, ld, N, v_local, v_valid, g_s);
    mp_cuda_xent_sumexp_bf16(st + 4 * N, ld, st + 3 * N, N, v_local, v_valid, g_s);
    SYNC();
    std::vector<float> h = down(st, 5 * N);
    mp_cuda_xent_fwd_bf16(st, st + N, st + 2 * N, ld, td, N, v_local, v_valid, v_start, g_s);
    SYNC();
    std::vector<float> h2 = down(st, 3 * N);
    h.resize(3 * N);
    CHECK(same_bits(h, h2), "xent fwd v_local %d: two runs differ", v_local);
    const std::vector<float> h3 = down(st + 3 * N, 2 * N);
    /* row 1 spans [-20, 20] (range 40), the others [-8, 8]: sumexp within xent_sum_rtol of float64 (one pass:
     * its rescales); against the three-kernel path's (no rescales): within the two bounds' sum */
    const double r1 = xent_sum_rtol(v_valid, 40.0, true), r3 = xent_sum_rtol(v_valid, 40.0, false);
    int bad = 0, bad3 = 0;
    for (int n = 0; n < N; n++) {
        double m = -INFINITY, sd = 0;
        for (int j = 0; j < v_valid; j++) m = std::max(m, (double)lg[(size_t)n * v_local + j]);
        if (m != -INFINITY)
            for (int j = 0; j < v_valid; j++) sd += exp(lg[(size_t)n * v_local + j] - m);
        const int64_t c = (int64_t)tgt[n] - v_start;
        const double t = (c >= 0 && c < v_local) ? lg[(size_t)n * v_local + c] : 0.0;
        bad += !((double)h[n] == m && fabs(h[N + n] - sd) <= r1 * sd && (double)h[2 * N + n] == t);
        bad3 += !(!memcmp(&h[n], &h3[n], sizeof(float)) && fabs((double)h[N + n] - h3[N + n]) <= (r1 + r3) * sd);
    }
    CHECK(bad == 0, "xent fwd v_local %d v_valid %d off %d: %d rows off float64", v_local, v_valid, off, bad);
    CHECK(bad3 == 0, "xent fwd v_local %d v_valid %d off %d: %d rows off the three-kernel path", v_local, v_valid, off, bad3);
    cudaFree(lbase), cudaFree(td), cudaFree(st);
    return h;
}

/* mp_cuda_xent_rescale (tp > 1: a shard's sum taken to the global max) on rescale_case's 1000 rows (local
 * max at or below the global one, some -inf: a shard with no valid column, exactly 0; some equal: factor 1):
 * within xent_rescale_rtol of float64 (check_kernels_host.cu: the subtraction's rounding, expf's 2 ulp and
 * the product's; check_xent_rescale replays it with the device's rounding over 200 seeds). */
static void dev_xent_rescale(void) {
    const int N = 1000;
    const RescaleCase c = rescale_case(N);
    float *sd = up(c.se), *ld = up(c.lm), *gd = up(c.gm);
    mp_cuda_xent_rescale(sd, ld, gd, N, g_s);
    SYNC();
    const int bad = rescale_bad(c, down(sd, N));
    CHECK(bad == 0, "xent rescale: %d of %d rows off float64 past the rounding bound", bad, N);
    cudaFree(sd), cudaFree(ld), cudaFree(gd);
}

static void dev_adamw(void) {
    const int64_t n = 100003;
    std::vector<float> p = rnd_vec(n, 1.0f), g = rnd_vec(n, 1.0f), m(n, 0.01f), v(n, 0.001f);
    /* the scale is the host value times the device factor: 2 * 0.25 = 0.5 exactly */
    float *pd = up(p), *gd = up(g), *md = up(m), *vd = up(v), *sc = up(std::vector<float>{0.25f});
    mp_bf16 *pb = dev<mp_bf16>(n);
    mp_cuda_adamw(pd, pb, gd, md, vd, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 2.0f, sc, g_s);
    SYNC();
    std::vector<float> ph = down(pd, n), pbh = down_bf16(pb, n);
    const float bc1 = (float)(1.0 / (1.0 - pow(0.9, 3))), bc2 = (float)(1.0 / (1.0 - pow(0.95, 3)));
    std::vector<float> rp(n), rpb(n);
    for (int64_t i = 0; i < n; i++) {
        float mi = m[i], vi = v[i];
        rp[i] = adamw_elem(p[i], g[i], &mi, &vi, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, bc1, bc2, 0.5f);
        rpb[i] = bf16_round(ph[i]);
    }
    /* adamw_elem spells out every rounding (fmaf, mp_mul_rn / mp_add_rn, IEEE division and sqrtf: no fast
     * math), and the host's fmaf is correctly rounded too: the host's float result bit for bit */
    CHECK(same_bits(ph, rp), "adamw p: not adamw_elem's float result bit for bit");
    CHECK(same_bits(pbh, rpb), "adamw bf16 copy is not the rounded fp32 weight");
    /* the same update one element into fresh buffers (no pointer 16-byte aligned: one element per access)
     * must give the same bits as the 16-byte path above */
    std::vector<float> p1(n + 1, 0.0f), g1(n + 1, 0.0f), m1(n + 1, 0.0f), v1(n + 1, 0.0f);
    std::copy(p.begin(), p.end(), p1.begin() + 1), std::copy(g.begin(), g.end(), g1.begin() + 1);
    std::copy(m.begin(), m.end(), m1.begin() + 1), std::copy(v.begin(), v.end(), v1.begin() + 1);
    float *pu = up(p1), *gu = up(g1), *mu = up(m1), *vu = up(v1);
    mp_bf16 *pbu = dev<mp_bf16>(n + 1);
    mp_cuda_adamw(pu + 1, pbu + 1, gu + 1, mu + 1, vu + 1, n, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 3, 2.0f, sc, g_s);
    SYNC();
    CHECK(same_bits(down(pu + 1, n), ph) && same_bits(down(mu + 1, n), down(md, n)) && same_bits(down(vu + 1, n), down(vd, n)) &&
              same_bits(down_bf16(pbu + 1, n), pbh),
          "adamw: unaligned (one element per access) differs from the 16-byte path");
    cudaFree(pu), cudaFree(gu), cudaFree(mu), cudaFree(vu), cudaFree(pbu);
    cudaFree(pd), cudaFree(gd), cudaFree(md), cudaFree(vd), cudaFree(sc), cudaFree(pb);
}

/* conversion, elementwise ops, the bf16 sum of squares, the bf16-table embedding, fp32 cross-entropy */
static void dev_misc(void) {
    const int64_t n = 70001;
    std::vector<float> a = rnd_vec(n, 3.0f), b = rnd_vec(n, 3.0f);
    float *af = up(a), *bf = up(b), *cf = dev<float>(n);
    mp_bf16 *ab = dev<mp_bf16>(n), *bb = up_bf16(b);
    mp_cuda_f32_to_bf16(ab, af, n, g_s);
    mp_cuda_bf16_to_f32(cf, ab, n, g_s);
    SYNC();
    CHECK(same_bits(down(cf, n), a), "bf16 round trip of bf16-valued floats");
    mp_cuda_add_f32(cf, af, bf, n, g_s);
    mp_cuda_accumulate_f32(cf, af, n, g_s);
    mp_cuda_scale_f32(cf, 0.5f, n, g_s);
    mp_cuda_add_bf16(ab, ab, bb, n, g_s);   /* aliasing out and a */
    mp_cuda_accumulate_bf16(ab, bb, n, g_s);
    mp_cuda_scale_bf16(ab, 2.0f, n, g_s);
    SYNC();
    /* Bounds: f32 0.5 ((a + b) + a): two roundings (the 0.5 exact), <= 0.5 2^-24 (|a + b| + |2a + b|)
     * (1 + 2^-24) <= 2^-24 (1.5 |a| + |b|) (1 + 2^-23); bf16 2 ((a + b) + b): two bf16 stores, each 2^-8 of its value (a
     * float sum of two bf16 first: 2^-24 more), so <= 2 2^-8 (|a + b| + |a + 2b|) (1 + 2^-7) */
    std::vector<double> r1(n), r2(n);
    double e1 = 0, e2 = 0;
    for (int64_t i = 0; i < n; i++) {
        r1[i] = 0.5 * (2.0 * a[i] + b[i]), r2[i] = 2.0 * (a[i] + 2.0 * b[i]);
        e1 = std::max(e1, MP_U24 * (1 + 2 * MP_U24) * (1.5 * fabs(a[i]) + fabs(b[i])));
        e2 = std::max(e2, 2 * MP_BF16_U * (1 + 1.0 / 128) * (fabs((double)a[i] + b[i]) + fabs(a[i] + 2.0 * b[i])));
    }
    close("add/accumulate/scale f32", down(cf, n), r1, 0, e1, "");
    close("add/accumulate/scale bf16", down_bf16(ab, n), r2, 0, e2, "");
    double *acc = dev<double>(1), *part = dev<double>(MP_CUDA_REDUCE_MAX_BLOCKS);
    const double ref = sum_ref<true>(b);
    mp_cuda_sumsq_acc_bf16(acc, part, bb, n, g_s);
    SYNC();
    CHECK(fabs(down(acc, 1)[0] - ref) <= gamma_f64(64) * ref, "sumsq bf16");   /* as dev_reduce */

    const int N = 50, D = 33, v_local = 20;
    std::vector<int32_t> tok(N);
    for (auto &t : tok) t = (int32_t)(rnd_u64() % 30) - 5;
    int32_t *td = up(tok);
    std::vector<float> wte = rnd_vec((size_t)v_local * D, 1.0f);
    mp_bf16 *wd = up_bf16(wte), *out = dev<mp_bf16>((size_t)N * D);
    mp_cuda_embed_fwd_bf16(out, td, wd, N, D, 0, v_local, g_s);
    SYNC();
    std::vector<float> o = down_bf16(out, (size_t)N * D);
    int bad = 0;
    for (int t = 0; t < N; t++)
        for (int i = 0; i < D; i++) bad += o[(size_t)t * D + i] != ((tok[t] >= 0 && tok[t] < v_local) ? wte[(size_t)tok[t] * D + i] : 0.0f);
    CHECK(bad == 0, "embed fwd bf16 table: %d wrong", bad);

    /* fp32 cross-entropy, tp = 1, one row with every logit -inf (no gradient, sumexp 0) */
    const int V = 77;
    std::vector<float> lg = rnd_vec((size_t)N * V, 5.0f);
    for (int j = 0; j < V; j++) lg[j] = -INFINITY;
    std::vector<int32_t> tgt(N);
    for (auto &t : tgt) t = (int32_t)(rnd_u64() % V);
    float *ld = up(lg), *mx = dev<float>(N), *se = dev<float>(N), *tl = dev<float>(N), *loss = dev<float>(N);
    int32_t *tgd = up(tgt);
    mp_cuda_xent_rowmax_f32(mx, ld, N, V, V, g_s);
    mp_cuda_xent_sumexp_f32(se, ld, mx, N, V, V, g_s);
    mp_cuda_xent_target_f32(tl, ld, tgd, N, V, V, 0, g_s);
    mp_cuda_xent_loss(loss, mx, se, tl, N, g_s);
    mp_cuda_xent_bwd_f32(ld, mx, se, tgd, 1.0f, N, V, V, 0, g_s);
    SYNC();
    std::vector<float> lh = down(loss, N), gh = down(ld, (size_t)N * V), seh = down(se, N);
    CHECK(seh[0] == 0.0f, "all -inf row: sumexp %g", seh[0]);
    bad = 0;
    for (int j = 0; j < V; j++) bad += gh[j] != (j == tgt[0] ? -1.0f : 0.0f);
    CHECK(bad == 0, "all -inf row: gradient must be -onehot only (as the CPU backend)");
    std::vector<double> rl(N - 1), rll(N - 1);
    for (int t = 1; t < N; t++) {
        double m = -INFINITY, s2 = 0;
        for (int j = 0; j < V; j++) m = std::max(m, (double)lg[(size_t)t * V + j]);
        for (int j = 0; j < V; j++) s2 += exp(lg[(size_t)t * V + j] - m);
        rl[t - 1] = log(s2) + m - lg[(size_t)t * V + tgt[t]];
        rll[t - 1] = lh[t];
    }
    /* the loss log(s) + m - t in double from an fp32 sumexp: off by log(1 + xent_sum_rtol) <= xent_sum_rtol
     * (logits in [-5, 5]: range <= 10), + the fp32 loss's own rounding (2^-24 relative) */
    close("xent f32 loss", rll, rl, MP_U24, xent_sum_rtol(V, 10.0, false), "");
    cudaFree(af), cudaFree(bf), cudaFree(cf), cudaFree(ab), cudaFree(bb), cudaFree(acc), cudaFree(part), cudaFree(td),
        cudaFree(wd), cudaFree(out), cudaFree(ld), cudaFree(mx), cudaFree(se), cudaFree(tl), cudaFree(loss),
        cudaFree(tgd);
}

/* core/backend.h's gemm on all four transpose combinations, odd sizes and padded row strides. */
static void dev_gemm(mp_cuda_blas *bl) {
    const int M = 37, N = 53, K = 29, pad = 8;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++)
            for (int f32 = 0; f32 < 2; f32++) {
                const int ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
                const int lda = ac + pad, ldb = bc + pad, ldc = N + pad;
                std::vector<float> A = rnd_vec((size_t)ar * lda, 1.0f), B = rnd_vec((size_t)br * ldb, 1.0f),
                                   C = rnd_vec((size_t)M * ldc, 1.0f);
                const float alpha = 0.75f, beta = f32 ? 1.0f : 0.5f;
                std::vector<double> ref((size_t)M * ldc), eb((size_t)M * ldc, 0.0);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < ldc; j++) {
                        if (j >= N) {
                            ref[(size_t)i * ldc + j] = C[(size_t)i * ldc + j];   /* untouched */
                            continue;
                        }
                        double s = 0, sa = 0;
                        for (int kk = 0; kk < K; kk++) {
                            const double t = (double)(ta ? A[(size_t)kk * lda + i] : A[(size_t)i * lda + kk]) *
                                             (tb ? B[(size_t)j * ldb + kk] : B[(size_t)kk * ldb + j]);
                            s += t, sa += fabs(t);
                        }
                        ref[(size_t)i * ldc + j] = alpha * s + beta * C[(size_t)i * ldc + j];
                        /* bf16 products exact in fp32, summed in any order (split-K too): gamma_{K+2} of the
                         * magnitudes with alpha's product and beta C's */
                        eb[(size_t)i * ldc + j] = gamma_f32(K + 2) * (fabs(alpha) * sa + fabs(beta * C[(size_t)i * ldc + j]));
                    }
                mp_bf16 *Ad = up_bf16(A), *Bd = up_bf16(B);
                void *Cd = f32 ? (void *)up(C) : (void *)up_bf16(C);
                const int st = mp_cuda_gemm(bl, ta, tb, M, N, K, alpha, Ad, lda, Bd, ldb, beta, Cd,
                                            f32 ? MP_CUDA_OUT_F32 : MP_CUDA_OUT_BF16, ldc, g_s);
                SYNC();
                char what[64];
                snprintf(what, sizeof what, "gemm ta=%d tb=%d %s", ta, tb, f32 ? "f32" : "bf16");
                CHECK(st == 0, "%s: %s", what, mp_cuda_blas_status_name(st));
                std::vector<float> got = f32 ? down((float *)Cd, ref.size()) : down_bf16((mp_bf16 *)Cd, ref.size());
                const double e = *std::max_element(eb.begin(), eb.end()) * (1 + 1.0 / 1024);
                close(what, got, ref, f32 ? 0 : MP_BF16_U, f32 ? e : (1 + MP_BF16_U) * e, "");   /* bf16: the store */
                cudaFree(Ad), cudaFree(Bd), cudaFree(Cd);
            }
}

/* The host checks first (cheap; also keeps their functions used in this build): the replays of
 * check_kernels_host.cu's shared code, without a device. */
static void host_checks(void) {
    check_reduce_plan();
    check_rmsnorm_plan();
    check_embed_bwd(1000, 5, 100, 37, 200);
    check_rmsnorm(33, 5);
    check_rmsnorm(7, 200);
    check_bias(777, 13, 29, 3);
    check_head_rmsnorm(7, 2, 64, 512, 256);
    check_elementwise();
    check_xent_rescale(20);   /* dev_xent_rescale's bound under the device's rounding */
    check_attention(2, 70, 4, 2, 40);
    check_mma_table();
    check_attention_mma(2, 112, 4, 1, 64);
    check_window_rule();
    check_attention(1, 70, 4, 2, 40, 9);             /* a sliding window, CUDA-core replay */
    check_attention_mma(1, 150, 4, 2, 64, -1, 70);   /* and tensor-core */
}

/* RMSNorm: the 16-byte path (D % 8 == 0, aligned), the 2-byte path (unaligned; D % 8 != 0), N below one
 * chunk, many chunks, one warp per block (D 12288) and the wide kernel (D 12296, 12301). */
static void dev_rmsnorm_shapes(void) {
    const int rms[][2] = {{300, 200}, {5, 203}, {2, 8}, {1, 3}, {20011, 64}, {600, 2048}, {40, 4000}, {33, 12288},
                          {33, 12296}, {9, 12301}};
    for (auto &r : rms) {   /* each shape aligned and at an offset of one element, from the same inputs */
        const uint64_t seed = g_rng;
        const auto a = dev_rmsnorm(r[0], r[1], 0);
        g_rng = seed;
        const auto u = dev_rmsnorm(r[0], r[1], 1);
        for (int k = 0; k < 4; k++)
            CHECK(same_bits(a[k], u[k]), "rmsnorm N=%d D=%d: output %d differs between aligned and unaligned", r[0], r[1], k);
    }
}

/* Biases {N, cols, ldx, col0}: the whole fused q | k | v rows, a block of wider rows, cols and ldx % 8 != 0,
 * N not a multiple of a chunk, > 512 chunks' worth; each aligned and at an offset of one element. */
static void dev_bias_shapes(void) {
    const int biases[][4] = {{100, 512, 512, 0}, {33, 384, 392, 8}, {777, 13, 29, 3}, {20011, 24, 40, 8}, {5000, 1024, 1032, 8},
                             {1, 8, 8, 0}};
    for (auto &b : biases)
        for (int off : {0, 1}) dev_bias(b[0], b[1], b[2], b[3], off);
}

/* Per-head RMSNorm {N, H, hd, ldx, col0}: the q and k blocks of fused rows at hd 64 and 128, hd 96, ldx % 8
 * != 0, hd % 8 != 0, dense, many chunks and > 512 chunks' worth of pairs, hd 256. */
static void dev_head_rmsnorm_shapes(void) {
    const int heads[][5] = {{70, 4, 64, 512, 0}, {70, 2, 64, 512, 256}, {33, 16, 128, 4096, 0}, {33, 8, 128, 4096, 2048},
                            {9, 2, 96, 576, 192}, {6, 3, 40, 204, 4}, {4, 2, 17, 56, 3}, {3, 1, 64, 64, 0},
                            {3000, 2, 64, 256, 128}, {9001, 2, 16, 48, 8}, {33, 2, 256, 1024, 512}};
    for (auto &h : heads) {   /* each aligned and at an offset of one element, from the same inputs */
        const uint64_t seed = g_rng;
        const auto a = dev_head_rmsnorm(h[0], h[1], h[2], h[3], h[4], 0);
        g_rng = seed;
        const auto u = dev_head_rmsnorm(h[0], h[1], h[2], h[3], h[4], 1);
        for (int k = 0; k < 4; k++)
            CHECK(same_bits(a[k], u[k]), "head_rmsnorm N=%d H=%d hd=%d: output %d differs between aligned and unaligned",
                  h[0], h[1], h[2], k);
    }
}

/* Attention: the CUDA-core shapes, the tensor-core kernels at hd 64 and 128, the fused [q | k | v] rows, the
 * KV cache, and sliding windows smaller than T. */
static void dev_attention_shapes(void) {
    const int shapes[][5] = {{1, 1, 1, 1, 8}, {2, 7, 4, 2, 40}, {1, 33, 4, 1, 64}, {2, 70, 4, 4, 32},
                             {1, 65, 2, 1, 128}, {1, 40, 6, 3, 17}, {1, 300, 8, 2, 128}};
    for (auto &s : shapes) dev_attention(s[0], s[1], s[2], s[3], s[4]);
    for (int hd : {64, 128})   /* the tensor-core kernels (k_attn_mma.cu; MP_CUDA_ATTN=simt: the CUDA-core ones) */
        for (int T : {1, 15, 64, 112, 200}) dev_attention(1, T, 2, 2, hd), dev_attention(2, T, 4, 1, hd);
    /* the fused [q | k | v] rows (layers/llama.c), + 8 columns (tensor cores at hd 64/128), + 3 (CUDA cores) */
    for (int hd : {64, 128}) dev_attention(2, 112, 4, 2, hd, 8), dev_attention(1, 70, 2, 1, hd, 0);
    dev_attention(2, 40, 4, 2, 64, 3), dev_attention(1, 33, 6, 3, 40, 8);
    dev_attention_kv(2, 70, 4, 2, 40);
    dev_attention_kv(1, 150, 9, 3, 64);
    /* sliding windows smaller than T: tensor-core (hd 64/128, dense and fused rows) and CUDA-core (hd 40)
     * kernels, and the KV cache; W 1, inside a tile, across tiles */
    for (int W : {1, 9, 34, 70, 150})
        for (int hd : {64, 128}) dev_attention(2, 200, 4, 2, hd, -1, W), dev_attention(1, 200, 4, 1, hd, 8, W);
    dev_attention(2, 130, 4, 2, 40, -1, 37), dev_attention(1, 100, 6, 3, 40, 8, 1);
    dev_attention_kv(2, 150, 4, 2, 40, 33), dev_attention_kv(1, 200, 9, 3, 64, 70), dev_attention_kv(1, 90, 2, 1, 64, 1);
}

/* Cross-entropy's backward and one-pass forward, aligned and at an offset of one element: the same bits. */
static void dev_xent_shapes(void) {
    for (int vl : {1003, 1024}) {   /* 1024: 16-byte accesses aligned, 2-byte ones at offset 1: the same bits */
        const uint64_t seed = g_rng;
        const std::vector<float> a = dev_xent(vl, vl - 13, 0);
        g_rng = seed;
        CHECK(same_bits(a, dev_xent(vl, vl - 13, 1)), "xent bwd v_local %d: aligned and unaligned differ", vl);
    }
    for (int vl : {1003, 1024, 32000}) {   /* the one-pass forward: aligned and at offset 1, the same bits */
        const uint64_t seed = g_rng;
        const std::vector<float> a = dev_xent_fwd(vl, vl - 13, 0);
        g_rng = seed;
        CHECK(same_bits(a, dev_xent_fwd(vl, vl - 13, 1)), "xent fwd v_local %d: aligned and unaligned differ", vl);
    }
}

/* The GEMMs twice: the second time every call finds its cached cuBLASLt plan (gemm_cuda.cu). */
static void dev_gemm_cached(mp_cuda_blas *bl) {
    dev_gemm(bl);
    dev_gemm(bl);
    int plans = 0;
    long long hits = 0, misses = 0;
    mp_cuda_blas_plan_stats(bl, &plans, &hits, &misses);
    CHECK(plans >= 1 && hits >= misses, "gemm plan cache: %d plans, %lld hits, %lld misses", plans, hits, misses);
    printf("gemm plan cache: %d plans, %lld hits, %lld misses\n", plans, hits, misses);
}

int main(void) {
    host_checks();
    if (g_fail) {
        fprintf(stderr, "check_kernels_device: %d host check(s) FAILED\n", g_fail);
        return 1;
    }
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
        fprintf(stderr, "check_kernels_device: host checks passed; no CUDA device: device checks skipped\n");
        return 77;
    }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));   /* the card every figure of this run belongs to */
    printf("check_kernels_device: device 0: %s (sm_%d%d)\n", prop.name, prop.major, prop.minor);
    CK(cudaStreamCreate(&g_s));
    mp_err err;
    mp_cuda_blas *bl = NULL;
    if (mp_cuda_blas_create(&bl, MP_CUDA_BLAS_WORKSPACE_BYTES, &err) != MP_OK) {
        fprintf(stderr, "check_kernels_device: cuBLASLt handle failed\n");
        return 1;
    }
    dev_reduce();
    dev_misc();
    dev_embed(777, 67);
    dev_embed(5000, 19);
    dev_rmsnorm_shapes();
    dev_bias_shapes();
    dev_head_rmsnorm_shapes();
    dev_rope_swiglu();
    dev_attention_shapes();
    dev_xent_shapes();
    dev_xent_rescale();
    dev_adamw();
    dev_gemm_cached(bl);
    mp_cuda_blas_destroy(bl);
    CK(cudaStreamDestroy(g_s));
    if (g_fail) {
        fprintf(stderr, "check_kernels_device: %d check(s) FAILED\n", g_fail);
        return 1;
    }
    printf("check_kernels_device: all checks passed\n");
    return 0;
}
