/*
 * cli/sampler.c — the next-token rule of `meshpoint sample` (contract and order in cli/sampler.h).
 * Everything is in double after the fp32 logits; the sort is qsort with a total order, so the result
 * depends on the logits alone, never on the rank or the thread count.
 */
#include "cli/sampler.h"
#include <assert.h>
#include <math.h>
#include <stdlib.h>
#include "core/alloc.h"
#include "core/rng.h"

void mp_sampler_init(mp_sampler *s, int V, double temperature, int top_k, double top_p, uint64_t seed) {
    assert(V > 0 && temperature >= 0 && top_k >= 0 && top_p > 0 && top_p <= 1);
    *s = (mp_sampler){.V = V, .temperature = temperature, .top_k = top_k, .top_p = top_p, .seed = seed};
    s->order = mp_xmalloc(sizeof(int) * (size_t)V);
    s->p = mp_xmalloc(sizeof(double) * (size_t)V);
}

int64_t mp_sampler_bytes(int V) { return (int64_t)(sizeof(int) + sizeof(double)) * V; }

void mp_sampler_free(mp_sampler *s) {
    free(s->order);
    free(s->p);
    s->order = NULL;
    s->p = NULL;
}

/* Compares candidate ids by logit, larger first, then by id (a total order: ties resolve alike). */
static const float *g_cmp_row;
static int by_logit(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (g_cmp_row[i] != g_cmp_row[j]) return g_cmp_row[i] > g_cmp_row[j] ? -1 : 1;
    return i - j;
}

/* The index of the largest logit, ties to the lower id (greedy without a sort). */
static int argmax(const float *row, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (row[i] > row[best]) best = i;
    return best;
}

int mp_sampler_dist(mp_sampler *s, const float *logits) {
    int V = s->V;
    if (s->temperature == 0) {
        s->order[0] = argmax(logits, V);
        s->p[0] = 1;
        return 1;
    }
    for (int i = 0; i < V; i++) s->order[i] = i;
    g_cmp_row = logits;
    qsort(s->order, (size_t)V, sizeof(int), by_logit);
    int n = s->top_k && s->top_k < V ? s->top_k : V;
    while (n < V && logits[s->order[n]] == logits[s->order[n - 1]]) n++;   /* ties of the k-th stay */
    double mx = logits[s->order[0]], sum = 0;
    for (int i = 0; i < n; i++) sum += s->p[i] = exp(((double)logits[s->order[i]] - mx) / s->temperature);
    for (int i = 0; i < n; i++) s->p[i] /= sum;
    if (s->top_p < 1) {
        double tail = 0;   /* mass of candidates i.. , summed from the least likely up */
        int keep = 1;
        for (int i = n - 1; i >= 1; i--) {
            tail += s->p[i];
            if (tail > 1 - s->top_p) { keep = i + 1; break; }
        }
        n = keep;
        sum = 0;
        for (int i = 0; i < n; i++) sum += s->p[i];
        for (int i = 0; i < n; i++) s->p[i] /= sum;
    }
    return n;
}

int32_t mp_sampler_draw(mp_sampler *s, const float *logits, int64_t pos) {
    int n = mp_sampler_dist(s, logits);
    if (n == 1) return s->order[0];
    double u = mp_rng_uniform(mp_rng_key(s->seed, "meshpoint.sample"), (uint64_t)pos), acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->p[i];
        if (u < acc) return s->order[i];
    }
    return s->order[n - 1];
}
