/*
 * tests/test_upload.c — the asynchronous token upload (to_device_async, llama_token_bufs) checked without
 * a GPU, against a CPU backend that lags the way a GPU does.
 *
 * The plain CPU backend finishes every op before it returns, so it cannot show a host buffer refilled
 * while an upload from it is still queued: that bug only changes results when the device runs late. The
 * "lagging" backend below is the CPU table behind a queue: every op that touches device memory (every
 * kernel, memset0, copy, and to_device_async's copy, which reads its host source only when it runs) is
 * recorded and run later, in order, at the latest moment a GPU could run it: when the host waits
 * (event_sync runs the queue up to the event's record, synchronize and to_host run all of it, and so do
 * to_device, free and host_free, which wait on CUDA too). Streams are one queue (cross-stream waits hold
 * trivially), events are positions in it.
 *
 * Through it, training must give bitwise the plain backend's losses, gradient norms and weights: a step
 * that refilled a host token slot before the upload reading it had run would train on the wrong tokens.
 * (Checked: with both slots of llama_token_bufs pointing at one buffer pair, the losses differ.)
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/backend.h"
#include "core/mesh.h"
#include "layers/llama.h"
#include "layers/llama_train.h"

/* ---- the lagging backend: a queue of deferred calls in front of the CPU table ---- */

/* One deferred call: run(inner, call) with the arguments saved at enqueue (pointers, integers, reals). */
typedef struct lag_call lag_call;
struct lag_call {
    void (*run)(mp_backend *inner, const lag_call *c);
    void *p[10];
    int64_t i[9];
    double f[6];
};

/* The queue, by absolute position: calls [done, pushed) wait; q[k - base] is call k. */
static struct {
    lag_call *q;
    int64_t base, done, pushed, cap;
    int64_t deferred_uploads;   /* uploads that were still queued when the host went on */
} g_lag;

typedef struct lag_event { int64_t pos; } lag_event;   /* complete once calls [0, pos) have run */

static mp_backend *inner(void) { return mp_backend_cpu(); }
#define P(x) ((void *)(uintptr_t)(x))   /* saved pointers lose their const; run() restores the type */

/* Appends a call (the caller fills its arguments) and returns it. */
static lag_call *lag_push(void (*run)(mp_backend *, const lag_call *)) {
    if (g_lag.pushed - g_lag.base == g_lag.cap) {
        g_lag.cap = g_lag.cap ? 2 * g_lag.cap : 4096;
        g_lag.q = realloc(g_lag.q, (size_t)g_lag.cap * sizeof *g_lag.q);
        cr_assert_not_null(g_lag.q);
    }
    lag_call *c = &g_lag.q[g_lag.pushed++ - g_lag.base];
    memset(c, 0, sizeof *c);
    c->run = run;
    return c;
}

/* Runs the queued calls up to absolute position pos (the device catches up that far). */
static void lag_run_to(int64_t pos) {
    while (g_lag.done < pos) {
        const lag_call *c = &g_lag.q[g_lag.done - g_lag.base];
        g_lag.done++;
        c->run(inner(), c);
    }
    if (g_lag.done == g_lag.pushed) g_lag.base = g_lag.done;   /* drained: reuse the array from its start */
}
static void lag_drain(void) { lag_run_to(g_lag.pushed); }

/* ---- memory and copies ---- */

static void *lag_alloc(mp_backend *be, size_t bytes, mp_mem_cat cat) { return inner()->alloc(inner(), bytes, cat); }
static void lag_free(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat) {
    lag_drain();
    inner()->free(inner(), p, bytes, cat);
}
static void *lag_host_alloc(mp_backend *be, size_t bytes, mp_mem_cat cat) {
    return inner()->host_alloc(inner(), bytes, cat);
}
static void lag_host_free(mp_backend *be, void *p, size_t bytes, mp_mem_cat cat) {
    lag_drain();
    inner()->host_free(inner(), p, bytes, cat);
}
static void lag_to_host(mp_backend *be, void *host_dst, const void *dev_src, size_t bytes) {
    lag_drain();
    inner()->to_host(inner(), host_dst, dev_src, bytes);
}
static void lag_to_device(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes) {
    lag_drain();
    inner()->to_device(inner(), dev_dst, host_src, bytes);
}
static void run_copy(mp_backend *b, const lag_call *c) { b->copy(b, c->p[0], c->p[1], (size_t)c->i[0]); }
/* The upload reads host_src only when the queue reaches it, as a GPU's DMA engine would. */
static void lag_to_device_async(mp_backend *be, void *dev_dst, const void *host_src, size_t bytes, mp_event done) {
    lag_call *c = lag_push(run_copy);
    c->p[0] = dev_dst, c->p[1] = P(host_src), c->i[0] = (int64_t)bytes;
    ((lag_event *)(void *)done)->pos = g_lag.pushed;
    g_lag.deferred_uploads++;
}
static void lag_copy(mp_backend *be, void *dst, const void *src, size_t bytes) {
    lag_call *c = lag_push(run_copy);
    c->p[0] = dst, c->p[1] = P(src), c->i[0] = (int64_t)bytes;
}
static void run_memset0(mp_backend *b, const lag_call *c) { b->memset0(b, c->p[0], (size_t)c->i[0]); }
static void lag_memset0(mp_backend *be, void *p, size_t bytes) {
    lag_call *c = lag_push(run_memset0);
    c->p[0] = p, c->i[0] = (int64_t)bytes;
}

/* ---- streams and events: one queue; an event is the position of its last record ---- */

static mp_stream lag_stream_create(mp_backend *be) { return (mp_stream)(void *)&g_lag; }
static void lag_stream_destroy(mp_backend *be, mp_stream s) {}
static mp_event lag_event_create(mp_backend *be) {
    lag_event *e = calloc(1, sizeof *e);   /* pos 0: never recorded, complete */
    cr_assert_not_null(e);
    return (mp_event)(void *)e;
}
static void lag_event_destroy(mp_backend *be, mp_event e) { free(e); }
static void lag_event_record(mp_backend *be, mp_event e, mp_stream s) { ((lag_event *)(void *)e)->pos = g_lag.pushed; }
static void lag_stream_wait_event(mp_backend *be, mp_stream s, mp_event e) {}
static void lag_event_sync(mp_backend *be, mp_event e) { lag_run_to(((lag_event *)(void *)e)->pos); }
static void lag_synchronize(mp_backend *be) { lag_drain(); }

/* ---- the ops: each saves its arguments; run_X calls the CPU op with them ---- */

static void run_gemm(mp_backend *b, const lag_call *c) {
    b->gemm(b, (int)c->i[0], (int)c->i[1], (int)c->i[2], (int)c->i[3], (int)c->i[4], (float)c->f[0], c->p[0],
            (int)c->i[5], c->p[1], (int)c->i[6], (float)c->f[1], c->p[2], (int)c->i[7], (mp_dtype)c->i[8]);
}
static void lag_gemm(mp_backend *be, int ta, int tb, int M, int N, int K, float alpha, const void *A, int lda,
                     const void *B, int ldb, float beta, void *C, int ldc, mp_dtype c_dtype) {
    lag_call *c = lag_push(run_gemm);
    int64_t iv[9] = {ta, tb, M, N, K, lda, ldb, ldc, c_dtype};
    memcpy(c->i, iv, sizeof iv);
    c->f[0] = alpha, c->f[1] = beta, c->p[0] = P(A), c->p[1] = P(B), c->p[2] = C;
}
static void run_add(mp_backend *b, const lag_call *c) { b->add(b, c->p[0], c->p[1], c->p[2], c->i[0]); }
static void lag_add(mp_backend *be, void *out, const void *a, const void *x, int64_t n) {
    lag_call *c = lag_push(run_add);
    c->p[0] = out, c->p[1] = P(a), c->p[2] = P(x), c->i[0] = n;
}
static void run_accumulate(mp_backend *b, const lag_call *c) { b->accumulate(b, c->p[0], c->p[1], c->i[0]); }
static void lag_accumulate(mp_backend *be, float *dst, const float *src, int64_t n) {
    lag_call *c = lag_push(run_accumulate);
    c->p[0] = dst, c->p[1] = P(src), c->i[0] = n;
}
static void run_scale(mp_backend *b, const lag_call *c) { b->scale(b, c->p[0], (float)c->f[0], c->i[0]); }
static void lag_scale(mp_backend *be, float *x, float s, int64_t n) {
    lag_call *c = lag_push(run_scale);
    c->p[0] = x, c->f[0] = s, c->i[0] = n;
}
static void run_to_act(mp_backend *b, const lag_call *c) { b->to_act(b, c->p[0], c->p[1], c->i[0]); }
static void lag_to_act(mp_backend *be, void *dst, const float *src, int64_t n) {
    lag_call *c = lag_push(run_to_act);
    c->p[0] = dst, c->p[1] = P(src), c->i[0] = n;
}
static void run_from_act(mp_backend *b, const lag_call *c) { b->from_act(b, c->p[0], c->p[1], c->i[0]); }
static void lag_from_act(mp_backend *be, float *dst, const void *src, int64_t n) {
    lag_call *c = lag_push(run_from_act);
    c->p[0] = dst, c->p[1] = P(src), c->i[0] = n;
}
static void run_sumsq_acc(mp_backend *b, const lag_call *c) { b->sumsq_acc(b, c->p[0], c->p[1], c->i[0]); }
static void lag_sumsq_acc(mp_backend *be, double *acc, const float *x, int64_t n) {
    lag_call *c = lag_push(run_sumsq_acc);
    c->p[0] = acc, c->p[1] = P(x), c->i[0] = n;
}
static void run_sum_acc(mp_backend *b, const lag_call *c) { b->sum_acc(b, c->p[0], c->p[1], c->i[0]); }
static void lag_sum_acc(mp_backend *be, double *acc, const float *x, int64_t n) {
    lag_call *c = lag_push(run_sum_acc);
    c->p[0] = acc, c->p[1] = P(x), c->i[0] = n;
}
static void run_embed_fwd(mp_backend *b, const lag_call *c) {
    b->embed_fwd(b, c->p[0], c->p[1], c->p[2], (int)c->i[0], (int)c->i[1], (int)c->i[2], (int)c->i[3]);
}
static void lag_embed_fwd(mp_backend *be, void *out, const int32_t *tok, const void *wte, int N, int D, int v_start,
                          int v_local) {
    lag_call *c = lag_push(run_embed_fwd);
    c->p[0] = out, c->p[1] = P(tok), c->p[2] = P(wte), c->i[0] = N, c->i[1] = D, c->i[2] = v_start, c->i[3] = v_local;
}
static void run_embed_bwd(mp_backend *b, const lag_call *c) {
    b->embed_bwd(b, c->p[0], c->p[1], c->p[2], (int)c->i[0], (int)c->i[1], (int)c->i[2], (int)c->i[3]);
}
static void lag_embed_bwd(mp_backend *be, float *dwte, const void *dout, const int32_t *tok, int N, int D,
                          int v_start, int v_local) {
    lag_call *c = lag_push(run_embed_bwd);
    c->p[0] = dwte, c->p[1] = P(dout), c->p[2] = P(tok), c->i[0] = N, c->i[1] = D, c->i[2] = v_start,
    c->i[3] = v_local;
}
static void run_rmsnorm_fwd(mp_backend *b, const lag_call *c) {
    b->rmsnorm_fwd(b, c->p[0], c->p[1], c->p[2], c->p[3], (int)c->i[0], (int)c->i[1], (float)c->f[0]);
}
static void lag_rmsnorm_fwd(mp_backend *be, void *y, float *rstd, const void *x, const void *w, int N, int D,
                            float eps) {
    lag_call *c = lag_push(run_rmsnorm_fwd);
    c->p[0] = y, c->p[1] = rstd, c->p[2] = P(x), c->p[3] = P(w), c->i[0] = N, c->i[1] = D, c->f[0] = eps;
}
static void run_rmsnorm_bwd(mp_backend *b, const lag_call *c) {
    b->rmsnorm_bwd(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], c->p[5], (int)c->i[0], (int)c->i[1]);
}
static void lag_rmsnorm_bwd(mp_backend *be, void *dx, float *dw, const void *dy, const void *x, const void *w,
                            const float *rstd, int N, int D) {
    lag_call *c = lag_push(run_rmsnorm_bwd);
    c->p[0] = dx, c->p[1] = dw, c->p[2] = P(dy), c->p[3] = P(x), c->p[4] = P(w), c->p[5] = P(rstd);
    c->i[0] = N, c->i[1] = D;
}
/* rope_fwd and rope_bwd share their arguments: i[6] says which */
static void run_rope(mp_backend *b, const lag_call *c) {
    (c->i[6] ? b->rope_bwd : b->rope_fwd)(b, c->p[0], c->p[1], c->p[2], (int)c->i[0], (int)c->i[1], (int)c->i[2],
                                          (int)c->i[3], (int)c->i[4], (int)c->i[5]);
}
static void push_rope(int bwd, void *x, const float *cos_t, const float *sin_t, int B, int T, int H, int hd,
                      int pos0, int ld) {
    lag_call *c = lag_push(run_rope);
    int64_t iv[7] = {B, T, H, hd, pos0, ld, bwd};
    memcpy(c->i, iv, sizeof iv);
    c->p[0] = x, c->p[1] = P(cos_t), c->p[2] = P(sin_t);
}
static void lag_rope_fwd(mp_backend *be, void *x, const float *cs, const float *sn, int B, int T, int H, int hd,
                         int pos0, int ld) {
    push_rope(0, x, cs, sn, B, T, H, hd, pos0, ld);
}
static void lag_rope_bwd(mp_backend *be, void *x, const float *cs, const float *sn, int B, int T, int H, int hd,
                         int pos0, int ld) {
    push_rope(1, x, cs, sn, B, T, H, hd, pos0, ld);
}
static void run_attn_fwd(mp_backend *b, const lag_call *c) {
    b->attn_fwd(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], (int)c->i[0], (int)c->i[1], (int)c->i[2],
                (int)c->i[3], (int)c->i[4], (int)c->i[5], (int)c->i[6], (int)c->i[7]);
}
static void lag_attn_fwd(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v, int B,
                         int T, int H, int KV, int hd, int ldq, int ldkv, int window) {
    lag_call *c = lag_push(run_attn_fwd);
    int64_t iv[8] = {B, T, H, KV, hd, ldq, ldkv, window};
    memcpy(c->i, iv, sizeof iv);
    c->p[0] = out, c->p[1] = lse, c->p[2] = P(q), c->p[3] = P(k), c->p[4] = P(v);
}
static void run_attn_fwd_kv(mp_backend *b, const lag_call *c) {
    b->attn_fwd_kv(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], (int)c->i[0], (int)c->i[1], (int)c->i[2],
                   (int)c->i[3], (int)c->i[4], (int)c->i[5], (int)c->i[6], (int)c->i[7]);
}
static void lag_attn_fwd_kv(mp_backend *be, void *out, float *lse, const void *q, const void *k, const void *v,
                            int B, int Tq, int pos0, int Tc, int H, int KV, int hd, int window) {
    lag_call *c = lag_push(run_attn_fwd_kv);
    int64_t iv[8] = {B, Tq, pos0, Tc, H, KV, hd, window};
    memcpy(c->i, iv, sizeof iv);
    c->p[0] = out, c->p[1] = lse, c->p[2] = P(q), c->p[3] = P(k), c->p[4] = P(v);
}
static void run_attn_bwd(mp_backend *b, const lag_call *c) {
    b->attn_bwd(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], c->p[5], c->p[6], c->p[7], c->p[8], c->p[9],
                (int)c->i[0], (int)c->i[1], (int)c->i[2], (int)c->i[3], (int)c->i[4], (int)c->i[5], (int)c->i[6],
                (int)c->i[7]);
}
static void lag_attn_bwd(mp_backend *be, void *dq, void *dk, void *dv, float *scratch, const void *dout,
                         const void *out, const float *lse, const void *q, const void *k, const void *v, int B, int T,
                         int H, int KV, int hd, int ldq, int ldkv, int window) {
    lag_call *c = lag_push(run_attn_bwd);
    void *pv[10] = {dq, dk, dv, scratch, P(dout), P(out), P(lse), P(q), P(k), P(v)};
    memcpy(c->p, pv, sizeof pv);
    int64_t iv[8] = {B, T, H, KV, hd, ldq, ldkv, window};
    memcpy(c->i, iv, sizeof iv);
}
static void run_swiglu_fwd(mp_backend *b, const lag_call *c) { b->swiglu_fwd(b, c->p[0], c->p[1], c->p[2], c->i[0]); }
static void lag_swiglu_fwd(mp_backend *be, void *out, const void *gate, const void *up, int64_t n) {
    lag_call *c = lag_push(run_swiglu_fwd);
    c->p[0] = out, c->p[1] = P(gate), c->p[2] = P(up), c->i[0] = n;
}
static void run_swiglu_bwd(mp_backend *b, const lag_call *c) {
    b->swiglu_bwd(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], c->i[0]);
}
static void lag_swiglu_bwd(mp_backend *be, void *dgate, void *dup, const void *dout, const void *gate, const void *up,
                           int64_t n) {
    lag_call *c = lag_push(run_swiglu_bwd);
    c->p[0] = dgate, c->p[1] = dup, c->p[2] = P(dout), c->p[3] = P(gate), c->p[4] = P(up), c->i[0] = n;
}
static void run_xent_rowmax(mp_backend *b, const lag_call *c) {
    b->xent_rowmax(b, c->p[0], c->p[1], (int)c->i[0], (int)c->i[1], (int)c->i[2]);
}
static void lag_xent_rowmax(mp_backend *be, float *rowmax, const void *logits, int N, int v_local, int v_valid) {
    lag_call *c = lag_push(run_xent_rowmax);
    c->p[0] = rowmax, c->p[1] = P(logits), c->i[0] = N, c->i[1] = v_local, c->i[2] = v_valid;
}
static void run_xent_sumexp(mp_backend *b, const lag_call *c) {
    b->xent_sumexp(b, c->p[0], c->p[1], c->p[2], (int)c->i[0], (int)c->i[1], (int)c->i[2]);
}
static void lag_xent_sumexp(mp_backend *be, float *sumexp, const void *logits, const float *rowmax, int N,
                            int v_local, int v_valid) {
    lag_call *c = lag_push(run_xent_sumexp);
    c->p[0] = sumexp, c->p[1] = P(logits), c->p[2] = P(rowmax), c->i[0] = N, c->i[1] = v_local, c->i[2] = v_valid;
}
static void run_xent_target(mp_backend *b, const lag_call *c) {
    b->xent_target(b, c->p[0], c->p[1], c->p[2], (int)c->i[0], (int)c->i[1], (int)c->i[2]);
}
static void lag_xent_target(mp_backend *be, float *tlogit, const void *logits, const int32_t *tgt, int N,
                            int v_local, int v_start) {
    lag_call *c = lag_push(run_xent_target);
    c->p[0] = tlogit, c->p[1] = P(logits), c->p[2] = P(tgt), c->i[0] = N, c->i[1] = v_local, c->i[2] = v_start;
}
static void run_xent_loss(mp_backend *b, const lag_call *c) {
    b->xent_loss(b, c->p[0], c->p[1], c->p[2], c->p[3], (int)c->i[0]);
}
static void lag_xent_loss(mp_backend *be, float *losses, const float *rowmax, const float *sumexp,
                          const float *tlogit, int N) {
    lag_call *c = lag_push(run_xent_loss);
    c->p[0] = losses, c->p[1] = P(rowmax), c->p[2] = P(sumexp), c->p[3] = P(tlogit), c->i[0] = N;
}
static void run_xent_fwd(mp_backend *b, const lag_call *c) {
    b->xent_fwd(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], (int)c->i[0], (int)c->i[1], (int)c->i[2],
                (int)c->i[3]);
}
static void lag_xent_fwd(mp_backend *be, float *rowmax, float *sumexp, float *tlogit, const void *logits,
                         const int32_t *tgt, int N, int v_local, int v_valid, int v_start) {
    lag_call *c = lag_push(run_xent_fwd);
    c->p[0] = rowmax, c->p[1] = sumexp, c->p[2] = tlogit, c->p[3] = P(logits), c->p[4] = P(tgt);
    c->i[0] = N, c->i[1] = v_local, c->i[2] = v_valid, c->i[3] = v_start;
}
static void run_xent_rescale(mp_backend *b, const lag_call *c) {
    b->xent_rescale(b, c->p[0], c->p[1], c->p[2], (int)c->i[0]);
}
static void lag_xent_rescale(mp_backend *be, float *sumexp, const float *local_max, const float *rowmax, int N) {
    lag_call *c = lag_push(run_xent_rescale);
    c->p[0] = sumexp, c->p[1] = P(local_max), c->p[2] = P(rowmax), c->i[0] = N;
}
static void run_xent_bwd(mp_backend *b, const lag_call *c) {
    b->xent_bwd(b, c->p[0], c->p[1], c->p[2], c->p[3], (float)c->f[0], (int)c->i[0], (int)c->i[1], (int)c->i[2],
                (int)c->i[3]);
}
static void lag_xent_bwd(mp_backend *be, void *logits, const float *rowmax, const float *sumexp, const int32_t *tgt,
                         float dloss, int N, int v_local, int v_valid, int v_start) {
    lag_call *c = lag_push(run_xent_bwd);
    c->p[0] = logits, c->p[1] = P(rowmax), c->p[2] = P(sumexp), c->p[3] = P(tgt), c->f[0] = dloss;
    c->i[0] = N, c->i[1] = v_local, c->i[2] = v_valid, c->i[3] = v_start;
}
static void run_adamw(mp_backend *b, const lag_call *c) {
    b->adamw(b, c->p[0], c->p[1], c->p[2], c->p[3], c->p[4], c->i[0], NULL, 0, (float)c->f[0], (float)c->f[1],
             (float)c->f[2], (float)c->f[3], (float)c->f[4], (int)c->i[1], (float)c->f[5]);
}
/* The mask's pieces queue as one call each (the segments live on the caller's stack, gone by the time the
 * queue runs): the same elementwise update. */
static void lag_adamw(mp_backend *be, float *p, void *p_act, const float *g, float *m, float *v, int64_t n,
                      const mp_adamw_seg *segs, int nsegs, float lr, float beta1, float beta2, float eps, float wd,
                      int step, float grad_scale) {
    mp_adamw_pieces it = mp_adamw_pieces_of(segs, nsegs, 0, n);
    int64_t i0, i1;
    int decay;
    while (mp_adamw_piece(&it, &i0, &i1, &decay)) {
        lag_call *c = lag_push(run_adamw);
        c->p[0] = p + i0, c->p[1] = p_act ? mp_act_at(be, p_act, i0) : NULL, c->p[2] = P(g + i0), c->p[3] = m + i0;
        c->p[4] = v + i0, c->i[0] = i1 - i0, c->i[1] = step;
        double fv[6] = {lr, beta1, beta2, eps, decay ? wd : 0.0f, grad_scale};
        memcpy(c->f, fv, sizeof fv);
    }
}

/* The CPU table behind the queue: every op of core/backend.h that touches device memory is replaced here
 * (a new op left out would run at once, ahead of the queue). host_memory is off, so nothing reads a shard directly from the host
 * (the checkpoint and test code goes through to_host, which catches the queue up). */
static mp_backend lagging_cpu(void) {
    mp_backend be = *inner();
    be.name = "cpu-lagging";
    be.host_memory = 0;
    be.alloc = lag_alloc, be.free = lag_free, be.memset0 = lag_memset0;
    be.to_host = lag_to_host, be.to_device = lag_to_device, be.to_device_async = lag_to_device_async;
    be.host_alloc = lag_host_alloc, be.host_free = lag_host_free;
    be.stream_create = lag_stream_create, be.stream_destroy = lag_stream_destroy;
    be.event_create = lag_event_create, be.event_destroy = lag_event_destroy, be.event_record = lag_event_record;
    be.stream_wait_event = lag_stream_wait_event, be.event_sync = lag_event_sync, be.copy = lag_copy;
    be.synchronize = lag_synchronize, be.gemm = lag_gemm, be.add = lag_add, be.accumulate = lag_accumulate;
    be.scale = lag_scale, be.to_act = lag_to_act, be.from_act = lag_from_act, be.sumsq_acc = lag_sumsq_acc;
    be.sum_acc = lag_sum_acc, be.embed_fwd = lag_embed_fwd, be.embed_bwd = lag_embed_bwd;
    be.rmsnorm_fwd = lag_rmsnorm_fwd, be.rmsnorm_bwd = lag_rmsnorm_bwd, be.rope_fwd = lag_rope_fwd;
    be.rope_bwd = lag_rope_bwd, be.attn_fwd = lag_attn_fwd, be.attn_fwd_kv = lag_attn_fwd_kv;
    be.attn_bwd = lag_attn_bwd, be.swiglu_fwd = lag_swiglu_fwd, be.swiglu_bwd = lag_swiglu_bwd;
    be.xent_rowmax = lag_xent_rowmax, be.xent_sumexp = lag_xent_sumexp, be.xent_target = lag_xent_target;
    be.xent_loss = lag_xent_loss, be.xent_fwd = inner()->xent_fwd ? lag_xent_fwd : NULL, be.xent_bwd = lag_xent_bwd;
    be.xent_rescale = inner()->xent_rescale ? lag_xent_rescale : NULL;
    be.adamw = lag_adamw;
    return be;
}

/* ---- the tests ---- */

/* The wrapper lags as a GPU may: an upload reads its source when the device reaches it, so a source
 * written before event_sync reaches the device; the CPU backend's upload is done on return. */
Test(upload, the_lagging_backend_reads_an_upload_source_late_and_the_cpu_one_at_once) {
    mp_backend lag = lagging_cpu(), *cpu = mp_backend_cpu();
    mp_backend *bes[2] = {&lag, cpu};
    for (int b = 0; b < 2; b++) {
        mp_backend *be = bes[b];
        int32_t *src = be->host_alloc(be, 4 * sizeof(int32_t), MP_MEM_OTHER);
        int32_t *dst = be->alloc(be, 4 * sizeof(int32_t), MP_MEM_ACTS), back[4];
        mp_event e = be->event_create(be);
        for (int i = 0; i < 4; i++) src[i] = i + 1;
        be->to_device_async(be, dst, src, 4 * sizeof(int32_t), e);
        src[2] = 99;   /* too early: the upload may not have read it */
        be->event_sync(be, e);
        be->to_host(be, back, dst, sizeof back);
        cr_assert_eq(back[2], b == 0 ? 99 : 3, "%s: the device got %d", be->name, back[2]);
        be->event_destroy(be, e);
        be->free(be, dst, 4 * sizeof(int32_t), MP_MEM_ACTS);
        be->host_free(be, src, 4 * sizeof(int32_t), MP_MEM_OTHER);
    }
}

enum { SB = 2, ST = 16, ACCUM = 3, STEPS = 3 };

/* Tokens that differ by step, micro-batch and position (a stale or early-refilled slot shows). */
typedef struct fill_ctx { int step; } fill_ctx;
static void fill(void *vctx, int k, int32_t *in, int32_t *tgt) {
    const fill_ctx *c = vctx;
    for (int i = 0; i < SB * ST; i++) {
        uint32_t x = (uint32_t)(c->step * 7919 + k * 104729 + i * 31 + 5);
        x ^= x >> 13; x *= 0x5bd1e995u; x ^= x >> 15;
        in[i] = (int32_t)(x % 97u);
        tgt[i] = (int32_t)((x >> 7) % 97u);
    }
}

/* The result of STEPS steps of grad_accum ACCUM (odd: each step reuses slot 0 while slot 1 may be queued). */
typedef struct train_out {
    double loss[STEPS], norm[STEPS];
    float *weights;   /* every shard, back to back */
    int64_t nweights;
} train_out;

/* The test model (hidden 32, 2 layers, 4 / 2 heads, vocab 97) on backend be, on a one-rank mesh *mesh
 * (destroy both after). */
static llama_model *tiny_model(mp_backend *be, mp_mesh *mesh) {
    llama_config c;
    llama_config_default(&c);
    c.hidden_size = 32, c.intermediate_size = 64, c.num_hidden_layers = 2, c.num_attention_heads = 4;
    c.num_key_value_heads = 2, c.vocab_size = 97, c.max_position_embeddings = 64;
    llama_options opt = {SB, ST, 0, 1};
    mp_mesh_init_single(mesh);
    mp_err err;
    llama_model *m = NULL;
    cr_assert_eq(llama_create(&m, &c, &opt, mesh, be, &err), MP_OK, "%s", err.msg);
    return m;
}

/* Every shard of m, back to back, copied to a new host array of *n floats. */
static float *shards_to_host(mp_backend *be, llama_model *m, int64_t *n) {
    *n = 0;
    for (int i = 0; i < llama_num_params(m); i++) *n += llama_shard_numel(llama_param_at(m, i));
    float *w = malloc((size_t)*n * sizeof(float));
    int64_t off = 0;
    for (int i = 0; i < llama_num_params(m); i++) {
        llama_param *p = llama_param_at(m, i);
        be->to_host(be, w + off, p->shard, (size_t)llama_shard_numel(p) * sizeof(float));
        off += llama_shard_numel(p);
    }
    return w;
}

static void train_on(mp_backend *be, train_out *o) {
    mp_mesh mesh;
    llama_model *m = tiny_model(be, &mesh);
    llama_init_weights(m, 5);
    llama_token_bufs tb;
    llama_token_bufs_init(&tb, be, SB, ST);
    for (int s = 0; s < STEPS; s++) {
        fill_ctx fc = {s};
        llama_step_args a = {{0.9, 0.95, 1e-8, 0.1}, 3e-3, s + 1, 1.0, ACCUM, (double)SB * ST * ACCUM};
        llama_step_result r;
        llama_train_step(m, &a, fill, &fc, &tb, &r);
        o->loss[s] = r.loss, o->norm[s] = r.grad_norm;
    }
    llama_token_bufs_free(&tb);
    o->weights = shards_to_host(be, m, &o->nweights);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
}

/* Every shard of a fresh model on backend be, initialised with llama_init_weights_staged(staging), back to
 * back (n floats). */
static float *init_shards(mp_backend *be, int64_t staging, int64_t *n) {
    mp_mesh mesh;
    llama_model *m = tiny_model(be, &mesh);
    llama_init_weights_staged(m, 5, staging);
    float *w = shards_to_host(be, m, n);
    llama_destroy(m);
    mp_mesh_destroy(&mesh);
    return w;
}

/* A device's fresh weights go up through a bounded host buffer, band by band (a shard of 97 x 32 floats in
 * bands of 3 rows, or of one row when the bound is under a row): the bits the CPU backend makes in place. */
Test(upload, weights_initialised_through_small_staging_bands_are_the_cpu_ones) {
    int64_t n_cpu, n_dev;
    float *cpu = init_shards(mp_backend_cpu(), LLAMA_INIT_STAGING_BYTES, &n_cpu);
    mp_backend lag = lagging_cpu();
    cr_assert(!lag.host_memory);
    const int64_t bounds[] = {3 * 32 * sizeof(float), 1, LLAMA_INIT_STAGING_BYTES};
    for (int k = 0; k < 3; k++) {
        float *dev = init_shards(&lag, bounds[k], &n_dev);
        cr_assert_eq(n_dev, n_cpu);
        cr_assert(!memcmp(dev, cpu, (size_t)n_cpu * sizeof(float)), "staging bound %lld: the weights differ",
                  (long long)bounds[k]);
        free(dev);
    }
    free(cpu);
}

Test(upload, training_through_a_lagging_device_is_bitwise_the_cpu_backend) {
    train_out plain, lagged;
    train_on(mp_backend_cpu(), &plain);
    mp_backend lag = lagging_cpu();
    int64_t deferred0 = g_lag.deferred_uploads;
    train_on(&lag, &lagged);
    /* two uploads (inputs, targets) per micro-batch, each queued behind the host */
    cr_assert_eq(g_lag.deferred_uploads - deferred0, 2 * STEPS * ACCUM);
    for (int s = 0; s < STEPS; s++) {
        cr_assert_eq(lagged.loss[s], plain.loss[s], "step %d: loss %.17g, plain CPU %.17g", s + 1, lagged.loss[s],
                     plain.loss[s]);
        cr_assert_eq(lagged.norm[s], plain.norm[s], "step %d: norm %.17g, plain CPU %.17g", s + 1, lagged.norm[s],
                     plain.norm[s]);
    }
    cr_assert_eq(lagged.nweights, plain.nweights);
    cr_assert(!memcmp(lagged.weights, plain.weights, (size_t)plain.nweights * sizeof(float)),
              "the final weights differ from the plain CPU backend's");
    free(plain.weights);
    free(lagged.weights);
}
