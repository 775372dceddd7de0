/*
 * layers/family.c — the family table (see family.h).
 */
#include "layers/family.h"
#include <assert.h>
#include <stdio.h>
#include <string.h>

/* The keys each family's config class reads beyond LlamaConfig's (llama_config.c reads and checks them). */
static const char *const mistral_keys[] = {"sliding_window", NULL};
static const char *const qwen_keys[] = {"sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
                                        "use_mrope", NULL};
static const char *const phi3_keys[] = {"sliding_window", "original_max_position_embeddings", "partial_rotary_factor",
                                        "resid_pdrop", "embd_pdrop", NULL};

#define NO_BIAS "biases are not supported"

/* The defaults are those of transformers 5.24's configuration_<family>.py (checked there: the classes'
 * field defaults and __post_init__); vocab_size and the other shape keys have none here (llama_config.h). */
static const llama_family_info families[LLAMA_FAMILY_COUNT] = {
    {.family = LLAMA_FAMILY_LLAMA, .model_type = "llama", .architecture = "LlamaForCausalLM",
     .config_class = "LlamaConfig", .default_max_pos = 2048, .default_rms_norm_eps = 1e-6,
     .window = LLAMA_WINDOW_NONE, .attention_bias_refusal = NO_BIAS,
     .writes = LLAMA_WRITES_ATTENTION_BIAS | LLAMA_WRITES_MLP_BIAS | LLAMA_WRITES_PRETRAINING_TP},
    {.family = LLAMA_FAMILY_MISTRAL, .model_type = "mistral", .architecture = "MistralForCausalLM",
     .config_class = "MistralConfig", .default_kv_heads = 8, .default_max_pos = 131072,
     .default_rms_norm_eps = 1e-6, .window = LLAMA_WINDOW_ALL, .default_window = 4096,
     .attention_bias_refusal = NO_BIAS, .keys = mistral_keys},
    {.family = LLAMA_FAMILY_QWEN2, .model_type = "qwen2", .architecture = "Qwen2ForCausalLM", .qkv_bias = 1,
     .config_class = "Qwen2Config", .default_kv_heads = 32, .default_max_pos = 32768, .default_rms_norm_eps = 1e-6,
     .window = LLAMA_WINDOW_QWEN, .default_window = 4096, .default_max_window_layers = 28, .keys = qwen_keys},
    {.family = LLAMA_FAMILY_QWEN3, .model_type = "qwen3", .architecture = "Qwen3ForCausalLM", .qk_norm = 1,
     .config_class = "Qwen3Config", .default_kv_heads = 32, .default_max_pos = 32768, .default_rms_norm_eps = 1e-6,
     .default_head_dim = 128, .window = LLAMA_WINDOW_QWEN, .default_window = 4096, .default_max_window_layers = 28,
     .attention_bias_refusal = "Qwen3 then adds biases to q_proj, k_proj, v_proj and o_proj; an o_proj bias is not "
                               "supported",
     .keys = qwen_keys, .writes = LLAMA_WRITES_ATTENTION_BIAS},
    {.family = LLAMA_FAMILY_PHI3, .model_type = "phi3", .architecture = "Phi3ForCausalLM", .fused_qkv = 1,
     .fused_gate_up = 1, .config_class = "Phi3Config", .default_max_pos = 4096, .default_rms_norm_eps = 1e-5,
     .window = LLAMA_WINDOW_ALL, .attention_bias_refusal = NO_BIAS, .keys = phi3_keys,
     .default_pad_token_id = 32000},
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

int llama_family_has_key(const llama_family_info *f, const char *key) {
    for (const char *const *k = f->keys; k && *k; k++)
        if (!strcmp(*k, key)) return 1;
    return 0;
}
