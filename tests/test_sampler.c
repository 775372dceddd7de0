/*
 * tests/test_sampler.c — the next-token rule of `meshpoint sample` (cli/sampler.h): temperature, then
 * top-k (ties of the k-th kept, as transformers' TopKLogitsWarper), then top-p (transformers' TopPLogitsWarper:
 * drop the candidates whose mass, summed from the least likely up, is <= 1 - top_p), checked against
 * distributions computed by hand from the formulas; greedy; and the draws' frequencies against the
 * distribution. (Every expected distribution below is also what transformers 5.24's Temperature, TopK and
 * TopP logits warpers give for these logits, softmaxed: checked once with the bench venv when this test
 * was written.)
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdint.h>
#include "cli/sampler.h"

/* ids 1 and 4 tie for the largest logit; the candidate order is 1, 4, 2, 0, 3, 5. */
static const float L[6] = {1.0f, 3.0f, 2.0f, 0.5f, 3.0f, -1.0f};

/* Checks the sampler's distribution: n candidates, ids[i] with probability p[i]. */
static void expect_dist(double temperature, int top_k, double top_p, int n, const int *ids, const double *p) {
    mp_sampler s;
    mp_sampler_init(&s, 6, temperature, top_k, top_p, 1);
    int got = mp_sampler_dist(&s, L);
    cr_assert_eq(got, n, "T %g top-k %d top-p %g: %d candidates, expected %d", temperature, top_k, top_p, got, n);
    for (int i = 0; i < n; i++) {
        cr_assert_eq(s.order[i], ids[i], "T %g top-k %d top-p %g: candidate %d is id %d, expected %d", temperature,
                     top_k, top_p, i, s.order[i], ids[i]);
        cr_assert(fabs(s.p[i] - p[i]) < 1e-12, "T %g top-k %d top-p %g: p[%d] %.15g, expected %.15g", temperature,
                  top_k, top_p, i, s.p[i], p[i]);
    }
    mp_sampler_free(&s);
}

Test(sampler, temperature_alone_is_the_softmax_of_the_scaled_logits) {
    double z = 2 + exp(-1) + exp(-2) + exp(-2.5) + exp(-4);   /* exp(l - 3) summed */
    expect_dist(1, 0, 1, 6, (int[]){1, 4, 2, 0, 3, 5},
                (double[]){1 / z, 1 / z, exp(-1) / z, exp(-2) / z, exp(-2.5) / z, exp(-4) / z});
}

Test(sampler, top_k_keeps_the_k_most_likely_after_the_temperature) {
    double z = 2 + exp(-2);   /* T 0.5: exp((l - 3) / 0.5) of ids 1, 4, 2 */
    expect_dist(0.5, 3, 1, 3, (int[]){1, 4, 2}, (double[]){1 / z, 1 / z, exp(-2) / z});
}

Test(sampler, top_k_keeps_every_tie_of_the_kth_logit) {
    expect_dist(1, 1, 1, 2, (int[]){1, 4}, (double[]){0.5, 0.5});
}

Test(sampler, top_p_keeps_the_most_likely_set_whose_mass_reaches_p) {
    /* T 1: p = (1, 1, e^-1, e^-2, e^-2.5, e^-4) / z; masses from the least likely up: e^-4 / z = 0.0070,
     * + e^-2.5 / z = 0.0386, + e^-2 / z = 0.0905 (<= 0.1: ids 5, 3, 0 go), + e^-1 / z = 0.2318 (> 0.1: id 2 stays) */
    double z = 2 + exp(-1);
    expect_dist(1, 0, 0.9, 3, (int[]){1, 4, 2}, (double[]){1 / z, 1 / z, exp(-1) / z});
    /* top-p 0.5: the two tied ids hold 0.768 > 0.5, the tail of id 4 (0.616) is > 0.5: both stay, id 2 goes */
    expect_dist(1, 0, 0.5, 2, (int[]){1, 4}, (double[]){0.5, 0.5});
}

Test(sampler, top_p_applies_after_temperature_and_top_k) {
    /* T 2: w = exp((l - 3) / 2) = (1, 1, e^-.5, e^-1, e^-1.25, e^-2); z = their sum; the least likely's mass
     * e^-2 / z = 0.0399 <= 0.1 goes, + e^-1.25 / z = 0.1242 > 0.1 stays */
    double w[6] = {1, 1, exp(-0.5), exp(-1), exp(-1.25), exp(-2)}, z = 0;
    for (int i = 0; i < 6; i++) z += w[i];
    double zk = z - w[5];
    expect_dist(2, 0, 0.9, 5, (int[]){1, 4, 2, 0, 3}, (double[]){1 / zk, 1 / zk, w[2] / zk, w[3] / zk, w[4] / zk});
    /* the same with top-k 3 first: within ids 1, 4, 2 (p = 1, 1, e^-.5 over their sum), the last's mass
     * e^-.5 / (2 + e^-.5) = 0.2327 > 0.1 stays */
    double z3 = 2 + exp(-0.5);
    expect_dist(2, 3, 0.9, 3, (int[]){1, 4, 2}, (double[]){1 / z3, 1 / z3, exp(-0.5) / z3});
    /* and with top-p 0.7: 1 - 0.7 = 0.3 > 0.2327: id 2 goes */
    expect_dist(2, 3, 0.7, 2, (int[]){1, 4}, (double[]){0.5, 0.5});
}

Test(sampler, temperature_zero_is_greedy_with_ties_to_the_lower_id) {
    mp_sampler s;
    mp_sampler_init(&s, 6, 0, 0, 1, 1);
    cr_assert_eq(mp_sampler_dist(&s, L), 1);
    cr_assert_eq(s.order[0], 1);
    for (int64_t pos = 0; pos < 50; pos++) cr_assert_eq(mp_sampler_draw(&s, L, pos), 1);
    mp_sampler_free(&s);
}

/* Draws over many positions follow the distribution (within 5 standard errors), a dropped id never
 * comes, and a position's draw is a function of (seed, position) alone. */
Test(sampler, draws_follow_the_distribution_and_depend_on_seed_and_position_only) {
    mp_sampler s, t;
    mp_sampler_init(&s, 6, 2, 0, 0.9, 42);
    mp_sampler_init(&t, 6, 2, 0, 0.9, 42);
    const int n = 200000;
    long count[6] = {0};
    for (int64_t pos = 0; pos < n; pos++) count[mp_sampler_draw(&s, L, pos)]++;
    int nk = mp_sampler_dist(&s, L);
    for (int i = 0; i < nk; i++) {
        double p = s.p[i], f = (double)count[s.order[i]] / n, se = sqrt(p * (1 - p) / n);
        cr_assert(fabs(f - p) < 5 * se, "id %d drawn %.5f of the time, p %.5f", s.order[i], f, p);
    }
    cr_assert_eq(count[5], 0, "id 5 is outside top-p 0.9 but was drawn %ld times", count[5]);
    for (int64_t pos = 1000; pos < 1100; pos++)
        cr_assert_eq(mp_sampler_draw(&s, L, pos), mp_sampler_draw(&t, L, pos));
    mp_sampler_free(&s);
    mp_sampler_free(&t);
}
