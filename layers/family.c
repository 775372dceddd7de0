/*
 * layers/family.c — the family table (see family.h).
 */
#include "layers/family.h"
#include <assert.h>
#include <stdio.h>
#include <string.h>

static const llama_family_info families[LLAMA_FAMILY_COUNT] = {
    {LLAMA_FAMILY_LLAMA, "llama", "LlamaForCausalLM", 0, 0, 0, 0},
    {LLAMA_FAMILY_MISTRAL, "mistral", "MistralForCausalLM", 0, 0, 0, 0},
    {LLAMA_FAMILY_QWEN2, "qwen2", "Qwen2ForCausalLM", 1, 0, 0, 0},
    {LLAMA_FAMILY_QWEN3, "qwen3", "Qwen3ForCausalLM", 0, 1, 0, 0},
    {LLAMA_FAMILY_PHI3, "phi3", "Phi3ForCausalLM", 0, 0, 1, 1},
};

const llama_family_info *llama_family_get(llama_family f) {
    assert(f >= 0 && f < LLAMA_FAMILY_COUNT);
    assert(families[f].family == f);
    return &families[f];
}

const llama_family_info *llama_family_by_model_type(const char *s) {
    for (int i = 0; i < LLAMA_FAMILY_COUNT; i++)
        if (s && !strcmp(families[i].model_type, s)) return &families[i];
    return NULL;
}

const char *llama_family_list(void) {
    static char buf[256];
    if (!buf[0]) {
        size_t at = 0;
        for (int i = 0; i < LLAMA_FAMILY_COUNT && at < sizeof buf; i++)
            at += (size_t)snprintf(buf + at, sizeof buf - at, "%s\"%s\"", i ? ", " : "", families[i].model_type);
    }
    return buf;
}
