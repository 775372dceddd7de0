/*
 * cli/sampler.h — the next-token rule of `meshpoint sample`: temperature, then top-k, then top-p (the
 * order of transformers' logits warpers in generate), then a draw by the counter-based RNG.
 *
 * Candidates are the ids in order of logit, larger first, ties by lower id (a total order, so every rank
 * ranks alike). Temperature 0 is greedy: the first candidate. Otherwise, in double:
 *   - top-k (k > 0): the k first candidates and every later one whose logit equals the k-th's (as
 *     transformers' TopKLogitsWarper keeps ties);
 *   - weights w_i = exp((logit_i - logit_max) / temperature), p_i = w_i / sum w over the kept ones;
 *   - top-p (0 < top_p < 1): candidate i stays when the mass of i and every candidate after it (summed
 *     from the least likely up, as transformers' cumsum over the ascending sort) is > 1 - top_p; the
 *     first candidate always stays; then p is renormalised over those that stay.
 * The draw of position pos takes u = uniform(key(seed, "meshpoint.sample"), pos) and returns the first
 * candidate whose cumulative p exceeds u (the last one if rounding leaves u beyond them all): the same id
 * on every rank of every mesh, with no broadcast.
 */
#ifndef MP_CLI_SAMPLER_H
#define MP_CLI_SAMPLER_H

#include <stdint.h>

typedef struct mp_sampler {
    int V;                 /* vocabulary size: logits rows are V long */
    double temperature;    /* 0: greedy */
    int top_k;             /* 0: all */
    double top_p;          /* 1: all */
    uint64_t seed;
    int *order;            /* [V] candidates, most likely first */
    double *p;             /* [V] their probabilities (the first mp_sampler_dist of them) */
} mp_sampler;

/* A sampler over V ids (scratch allocated here, checked). temperature >= 0, top_k >= 0, 0 < top_p <= 1. */
void mp_sampler_init(mp_sampler *s, int V, double temperature, int top_k, double top_p, uint64_t seed);
/* The bytes mp_sampler_init allocates for a vocabulary of V (for the memory plan). */
int64_t mp_sampler_bytes(int V);
void mp_sampler_free(mp_sampler *s);
/* The distribution the next token is drawn from, for logits[V]: returns n >= 1 and leaves the candidates
 * in s->order[0..n) with their probabilities (summing to 1) in s->p[0..n). Greedy: n = 1, p = 1. */
int mp_sampler_dist(mp_sampler *s, const float *logits);
/* The token for position pos (the index of the RNG draw) from logits[V]. */
int32_t mp_sampler_draw(mp_sampler *s, const float *logits, int64_t pos);

#endif
