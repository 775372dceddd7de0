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
 * A gradient norm that is not finite (NaN, inf) skips the optimizer update: the weights and moments stay
 * as they were, and the caller decides (stop or skip). The norm is all-reduced, so every rank decides alike.
 *
 * Test hook: MP_TEST_NONFINITE_AT_STEP=N makes the gradient norm of the 1-based step N NaN (every rank
 * reads the same environment), to test that handling without a real divergence. It is read only here.
 */
#include "layers/llama_train.h"
#include <math.h>
#include <stdlib.h>

/* The test hook above: whether step's norm is to be made NaN. */
static int test_nonfinite_at(int64_t step) {
    const char *s = getenv("MP_TEST_NONFINITE_AT_STEP");
    return s && *s && atoll(s) == step;
}

void llama_train_step(llama_model *m, const llama_step_args *a, llama_fill_fn fill, void *ctx, int32_t *in,
                      int32_t *tgt, llama_step_result *res) {
    mp_mesh *mesh = llama_mesh(m);
    llama_zero_grad(m);
    llama_sums_reset(m);
    for (int k = 0; k < a->grad_accum; k++) {
        fill(ctx, k, in, tgt);
        llama_forward_accum(m, in, tgt);
        llama_backward(m, (float)(1.0 / a->tokens_per_step));
    }
    llama_sync_grads(m);
    llama_grad_sumsq_accum(m);
    llama_step_sums sums;
    llama_sums_read(m, &sums);   /* the step's one device-to-host copy */
    double loss_sum = sums.loss_sum, ss = sums.grad_sumsq;
    mesh->ctl_dp->all_reduce_f64(mesh->ctl_dp, &loss_sum, 1);   /* host scalars: MPI */
    mesh->world_comm->all_reduce_f64(mesh->world_comm, &ss, 1);
    double norm = sqrt(ss);
    if (test_nonfinite_at(a->step)) norm = NAN;
    double clip = a->grad_clip > 0 && norm > a->grad_clip ? a->grad_clip / (norm + 1e-6) : 1.0;
    if (!isfinite(norm)) clip = 0;
    else llama_step(m, &a->hp, a->lr, a->step, (float)clip);
    res->loss = loss_sum / a->tokens_per_step;
    res->grad_norm = norm;
    res->clip = clip;
}
