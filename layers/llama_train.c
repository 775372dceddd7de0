/*
 * layers/llama_train.c — one optimizer step of the model: the part of the training loop that ties the
 * model to the optimizer (data comes in through a callback, checkpoints stay in cli/). Shared by
 * `meshpoint train` and the tests, so both run exactly the same arithmetic.
 *
 * The step's scalars stay on the device until the end: the loss sum (added by every micro-batch's
 * forward) and the gradient sum of squares come to the host together in one copy, then are all-reduced
 * as host doubles (loss over dp, squares over the world). The sums are formed in the same order as
 * summing each micro-batch's losses and each parameter's squares on the host would, so the results are
 * bitwise those of that simpler loop.
 *
 * Tokens: micro-batch k is filled into host slot k % 2 and goes up without a host wait (to_device_async);
 * the host waits only for the upload that last read the slot it is about to refill (llama_token_bufs,
 * llama_train.h). On a GPU the host thus queues micro-batch k+1 while the device runs k; the device's one
 * token buffer is safe by stream order (layers/llama.c, upload_tokens).
 *
 * A gradient norm that is not finite (NaN, inf) skips the optimizer update: the weights and moments stay
 * as they were, and the caller decides (stop or skip). The norm is all-reduced, so every rank decides alike.
 *
 * Test hook: MP_FAULT=nonfinite_at_step:N makes the gradient norm of the 1-based step N NaN (every rank
 * reads the same environment), to test that handling without a real divergence. It is read only here.
 */
#include "layers/llama_train.h"
#include "core/fault.h"
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The test hook above: whether step's norm is to be made NaN. */
static int test_nonfinite_at(int64_t step) {
    return mp_fault_int("nonfinite_at_step", -1) == step;
}

void llama_token_bufs_init(llama_token_bufs *tb, mp_backend *be, int micro_batch, int seq_len) {
    assert(micro_batch > 0 && seq_len > 0);
    memset(tb, 0, sizeof *tb);
    tb->be = be;
    tb->bytes = (size_t)micro_batch * (size_t)seq_len * sizeof(int32_t);
    for (int i = 0; i < 2; i++) {
        tb->in[i] = be->host_alloc(be, tb->bytes, MP_MEM_OTHER);
        tb->tgt[i] = be->host_alloc(be, tb->bytes, MP_MEM_OTHER);
        tb->uploaded[i] = be->event_create(be);   /* never recorded: a wait on it returns at once */
    }
}

void llama_token_bufs_free(llama_token_bufs *tb) {
    if (!tb->be) return;
    mp_backend *be = tb->be;
    for (int i = 0; i < 2; i++) {
        be->event_sync(be, tb->uploaded[i]);   /* no copy may still read a buffer freed below */
        be->event_destroy(be, tb->uploaded[i]);
        be->host_free(be, tb->in[i], tb->bytes, MP_MEM_OTHER);
        be->host_free(be, tb->tgt[i], tb->bytes, MP_MEM_OTHER);
    }
    memset(tb, 0, sizeof *tb);
}

void llama_train_step(llama_model *m, const llama_step_args *a, llama_fill_fn fill, void *ctx,
                      llama_token_bufs *tb, llama_step_result *res) {
    mp_mesh *mesh = llama_mesh(m);
    mp_backend *be = llama_backend(m);
    assert(tb->be == be);
    llama_zero_grad(m);
    llama_sums_reset(m);
    for (int k = 0; k < a->grad_accum; k++) {
        int s = k % 2;   /* the other slot may still be read by micro-batch k-1's upload */
        be->event_sync(be, tb->uploaded[s]);   /* micro-batch k-2's upload, the last to read slot s */
        fill(ctx, k, tb->in[s], tb->tgt[s]);
        llama_forward_accum(m, tb->in[s], tb->tgt[s], tb->uploaded[s]);
        llama_backward(m, (float)(1.0 / a->tokens_per_step));
    }
    llama_sync_grads(m);
    llama_grad_sumsq_accum(m);
    llama_step_sums sums;
    llama_sums_read(m, &sums);   /* the step's one device-to-host copy */
    for (int s = 0; s < 2; s++) be->event_sync(be, tb->uploaded[s]);   /* done by now: tb is free on return */
    double loss_sum = sums.loss_sum, ss = sums.grad_sumsq;
    mesh->ctl_dp->ops->all_reduce_f64(mesh->ctl_dp, &loss_sum, 1);   /* host scalars: MPI */
    mesh->world_comm->ops->all_reduce_f64(mesh->world_comm, &ss, 1);
    double norm = sqrt(ss);
    if (test_nonfinite_at(a->step)) norm = NAN;
    double clip = a->grad_clip > 0 && norm > a->grad_clip ? a->grad_clip / (norm + 1e-6) : 1.0;
    if (!isfinite(norm)) clip = 0;
    else llama_step(m, &a->hp, a->lr, a->step, (float)clip);
    res->loss = loss_sum / a->tokens_per_step;
    res->grad_norm = norm;
    res->clip = clip;
}
