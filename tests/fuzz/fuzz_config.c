/*
 * tests/fuzz/fuzz_config.c — libFuzzer target for the config parser (layers/llama_config.c llama_config_parse).
 *
 * The input is JSON text (NUL-terminated copy). It is parsed into both a model and a training config,
 * then (as `meshpoint train` does after flags) the training config and the pair are validated, and a
 * model that parsed is written back as HF config.json text and parsed again: that round trip must
 * succeed and give the same model; a training config that validates must survive the same trip. Crashes, sanitizer reports (ASan, UBSan with float-cast-overflow:
 * crafted numbers such as 1e999 or 1e30 in int fields) and a failed round trip are findings.
 * Corpus: tests/fuzz/corpus/config (the configs of configs/ and tests/configs, plus regressions).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "layers/llama_config.h"

/* 1 if a and b hold the same training config (every field a checkpoint's train_config carries). */
static int same_train(const mp_train_config *a, const mp_train_config *b) {
    const mp_field *fs = mp_train_config_fields();
    for (int i = 0; i < MP_TRAIN_NFIELDS; i++)
        if (!mp_field_equal(&fs[i], a, b)) return 0;
    return 1;
}

/* libFuzzer entry: one input, any bytes. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    llama_config m;
    mp_train_config t;
    mp_train_config_default(&t);
    mp_err err;
    if (llama_config_parse(text, "fuzz.json", &m, &t, &err) == MP_OK) {
        if (mp_train_config_validate(&t, &err) == MP_OK) (void)llama_config_validate_pair(&m, &t, &err);
        (void)llama_config_num_params(&m);
        /* a parsed model must survive its own serialisation: what a checkpoint stores is read back */
        char *json = llama_config_to_json(&m);
        llama_config m2;
        if (llama_config_parse(json, "roundtrip.json", &m2, NULL, &err) != MP_OK) {
            fprintf(stderr, "round trip refused: %s\n%s\n", err.msg, json);
            abort();
        }
        if (llama_config_diff(&m, &m2, LLAMA_CF_NONE)) {   /* every field must come back */
            fprintf(stderr, "round trip changed the model:\n%s\n", json);
            abort();
        }
        /* a valid training config must survive the same trip (a checkpoint's train_config), read next
         * to the model it came with */
        if (mp_train_config_validate(&t, &err) == MP_OK) {
            char *tj = mp_train_config_to_json(&t);
            /* the model object with "train" spliced in as text (re-printing through cJSON would round) */
            char *close = strrchr(json, '}');
            if (!close) abort();
            size_t n = (size_t)(close - json) + strlen(tj) + 16;
            char *text2 = malloc(n);
            snprintf(text2, n, "%.*s, \"train\": %s}", (int)(close - json), json, tj);
            mp_train_config t2;
            mp_train_config_default(&t2);
            if (llama_config_parse(text2, "roundtrip.json", NULL, &t2, &err) != MP_OK || !same_train(&t, &t2)) {
                fprintf(stderr, "training config round trip failed (%s):\n%s\n", err.msg, tj);
                abort();
            }
            free(text2);
            free(tj);
        }
        free(json);
    }
    free(text);
    return 0;
}
