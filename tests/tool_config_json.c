/*
 * tests/tool_config_json.c — prints llama_config_to_json of a parsed config file, for
 * tests/python/family_config.py to load in transformers and compare with the input read there.
 *
 * Usage: tool_config_json CONFIG. Exit 2 with the parser's message when the config is refused.
 */
#include <stdio.h>
#include <stdlib.h>
#include "layers/llama_config.h"

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s CONFIG\n", argv[0]);
        return 2;
    }
    llama_config m;
    mp_err err;
    if (llama_config_load(argv[1], &m, NULL, &err)) {
        fprintf(stderr, "%s\n", err.msg);
        return 2;
    }
    char *j = llama_config_to_json(&m);
    printf("%s\n", j);
    free(j);
    return 0;
}
