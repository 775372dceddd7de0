/*
 * tests/tool_rope.c — prints meshpoint's RoPE frequencies and writes its cos/sin tables for a config, for
 * tests/python/rope_reference.py to compare with transformers' formulas in float64.
 *
 * Usage: tool_rope CONFIG MAX_POS OUT
 * stdout: "head_dim rope_theta" on the first line, then one inverse frequency per line (%.17g, double);
 * OUT: the fp32 tables the model uses, cos [MAX_POS, head_dim/2] then sin [MAX_POS, head_dim/2], raw
 * little-endian. Exit 2 with the parser's message when the config is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include "core/alloc.h"
#include "layers/llama_config.h"
#include "layers/rope.h"

/* Parses the config, prints the frequencies and writes the tables (see the top of the file). */
int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s CONFIG MAX_POS OUT\n", argv[0]);
        return 2;
    }
    llama_config m;
    mp_err err;
    if (llama_config_load(argv[1], &m, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    int P = atoi(argv[2]), hd = llama_head_dim(&m), half = hd / 2;
    if (P <= 0) {
        fprintf(stderr, "MAX_POS must be > 0\n");
        return 2;
    }
    printf("%d %.17g\n", hd, m.rope_theta);
    for (int i = 0; i < half; i++) printf("%.17g\n", mp_rope_inv_freq(i, hd, m.rope_theta, &m.rope_scaling));
    size_t n = (size_t)P * (size_t)half;
    float *c = mp_xmalloc(n * sizeof(float)), *s = mp_xmalloc(n * sizeof(float));
    mp_rope_tables(c, s, P, hd, m.rope_theta, &m.rope_scaling);
    FILE *f = fopen(argv[3], "wb");
    int ok = f && fwrite(c, sizeof(float), n, f) == n && fwrite(s, sizeof(float), n, f) == n;
    if (f && fclose(f)) ok = 0;
    free(c);
    free(s);
    if (!ok) {
        perror(argv[3]);
        return 1;
    }
    return 0;
}
