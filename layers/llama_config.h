/*
 * layers/llama_config.h — the model's config: Hugging Face config.json's fields and rules for every family
 * of the table (layers/family.h), RoPE scaling, the parameter count, and the one comparison of two
 * configs (llama_config_diff).
 *
 * A config file is an HF config.json (the model's fields at the top level) with an optional "train"
 * object (the training config, core/config.h). Its model_type (missing: "llama") picks the family, whose
 * transformers config class (LlamaConfig, MistralConfig, Qwen2Config, Qwen3Config, Phi3Config) says what
 * each key means; another model_type is refused naming it and the supported ones, and architectures (if
 * given) may only list the family's *ForCausalLM. docs/FAMILIES.md has the table:
 *   - required (no default: the classes' are a 7B shape, never what a config that omits it meant):
 *     hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, vocab_size;
 *   - defaulted as the family's class does when missing: num_key_value_heads (null: =
 *     num_attention_heads; missing: the same, but 8 in Mistral and 32 in Qwen2/Qwen3),
 *     max_position_embeddings (2048; Mistral 131072, Qwen 32768, Phi-3 4096), rms_norm_eps (1e-6;
 *     Phi-3 1e-5), rope_theta 10000, tie_word_embeddings false, initializer_range 0.02, head_dim
 *     (hidden_size / num_attention_heads; Qwen3 128; any even value may be given), hidden_act "silu",
 *     attention_bias / mlp_bias false (null: false), attention_dropout 0, rope_scaling null;
 *   - the family's own keys: Mistral and Phi-3 sliding_window (Mistral 4096 when missing, null: none)
 *     for every layer; Qwen use_sliding_window (false), sliding_window (4096), max_window_layers (28)
 *     and layer_types (full layers, then sliding ones; another order is refused); Qwen2.5's use_mrope
 *     (true refused); Phi-3's original_max_position_embeddings (accepted), partial_rotary_factor (only
 *     1), resid_pdrop and embd_pdrop (only 0). Qwen2 always has q/k/v biases (its attention_bias key has
 *     no effect); attention_bias true is refused elsewhere (Qwen3's adds an o_proj bias).
 * RoPE: rope_scaling and transformers 5's rope_parameters may be null or an object whose rope_type (or
 * the older "type") is "default", "linear" (with "factor") or "llama3" (with "factor", "low_freq_factor", "high_freq_factor",
 * "original_max_position_embeddings"); other types (yarn, dynamic, longrope, ...) are refused naming the
 * type, each parameter is checked naming it, and when both keys are given they must agree.
 * rope_parameters may also carry rope_theta, which is then the model's (a different top-level rope_theta
 * is refused). The scaling is written back as "rope_scaling" (llama_config_to_json). Keys transformers
 * ignores when it builds the model (torch_dtype/dtype, token ids, use_cache, pretraining_tp,
 * is_llama_config, rope_interleaved, the generation keys max_length/temperature/top_p/..., ...) are
 * accepted; keys that would change the math are checked (hidden_act must be "silu", biases false,
 * attention_dropout 0, ...). Any other key is warned about and ignored, as transformers does, unless it
 * looks like a typo of a key with an effect that the file lacks: then it is an error naming it, so a
 * typo never silently falls back to a default. The fields are read by core's field-table reader
 * (core/config.h).
 */
#ifndef MP_LLAMA_CONFIG_H
#define MP_LLAMA_CONFIG_H

#include <stddef.h>
#include <stdint.h>
#include "core/config.h"
#include "core/error.h"
#include "layers/family.h"
#include "layers/rope.h"

#define LLAMA_MAX_EOS 16   /* end-of-sequence ids kept from a config (Llama 3.x lists 3) */

typedef struct llama_config {
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;
    double initializer_range;
    mp_rope_scaling rope_scaling;           /* rope_scaling / rope_parameters (default: none) */
    /* The family (layers/family.h) and what it adds. llama_config_default and every config of format
     * <= 3 are LLAMA_FAMILY_LLAMA with none of these. */
    llama_family family;
    int head_dim;            /* 0: hidden_size / num_attention_heads; else explicit (Qwen3); llama_head_dim */
    int qkv_bias;            /* q_proj, k_proj, v_proj have biases (Qwen2) */
    int qk_norm;             /* q_norm, k_norm before RoPE (Qwen3) */
    /* Sliding-window attention (Mistral, Phi-3, Qwen2 use_sliding_window): query t sees keys
     * t - sliding_window + 1 .. t (transformers' rule) in layers l >= first_sliding_layer; 0: none. */
    int sliding_window;
    int first_sliding_layer;
    /* eos_token_id (an int, a list, or null/absent: n_eos 0): not the model's math, kept so that
     * generation can stop and export writes it back; ids outside [0, vocab_size) are dropped with a
     * warning. Not compared by llama_config_diff. */
    int n_eos, eos_is_list;
    int32_t eos_token_id[LLAMA_MAX_EOS];
} llama_config;

/* Upper bounds of the model's shape, beyond the ints of the fields themselves, so that every size
 * derived from a config (tensor counts, element counts, the parameter count) is computed without
 * overflow, and a crafted config (or a checkpoint's stored one) is refused instead of allocated:
 * LLAMA_CONFIG_MAX_LAYERS is over 100x the deepest released Llama (126 layers; it bounds the per-layer
 * tables, e.g. the tensor list `ckpt verify` builds without a memory plan); LLAMA_CONFIG_MAX_PARAMS only
 * requires the parameter count to be computable in int64 — whether a model fits in memory is the memory
 * plan's question (llama_plan_memory), which refuses with the figures. (LLAMA_MAX_LAYERS in
 * layers/llama_impl.h is the smaller bound of what llama_create builds.) */
#define LLAMA_CONFIG_MAX_LAYERS 16384
#define LLAMA_CONFIG_MAX_PARAMS (INT64_MAX - 1)

/* llama_config_default: a small programmatic model (hidden 256, 4 layers, vocab 256, rms_norm_eps 1e-5;
 * every other field as a config file that leaves it out) for code and tests that build a config by
 * hand. It is NOT what a missing key of a config file means: the parser ignores *m's previous contents
 * and applies the rules above. */
void llama_config_default(llama_config *m);

/* Parses JSON text (name is used in messages). Either output may be NULL to ignore that part, but
 * its keys are still checked. The model part is built from the JSON alone (see above) and validated
 * (llama_config_validate); the "train" object is applied over *t's previous contents and each field
 * is range-checked (mp_train_config_check_fields), but the relations between training fields
 * (batch_size % grad_accum, min_lr <= lr, eval_batches with val_data) are left to
 * mp_train_config_validate, so command-line flags applied after loading can still fix them. */
mp_code llama_config_parse(const char *text, const char *name, llama_config *m, mp_train_config *t, mp_err *err);
/* llama_config_parse of the file at path, read as a stream (a pipe, /dev/stdin work). */
mp_code llama_config_load(const char *path, llama_config *m, mp_train_config *t, mp_err *err);

/* Checks divisibility and ranges; the message names the field. */
mp_code llama_config_validate(const llama_config *m, mp_err *err);
/* The training config against the model: seq_len <= max_position_embeddings. Call it (after
 * mp_train_config_validate) wherever both are known and final: train, eval. */
mp_code llama_config_validate_pair(const llama_config *m, const mp_train_config *t, mp_err *err);

/* HF config.json text for the model: its family's model_type, architectures and keys, so that transformers
 * builds the same *ForCausalLM with the same attributes from it, and llama_config_parse reads the same
 * config back. A Llama config's text is what it was before the families (checkpoints stay
 * byte-identical). Caller frees. */
char *llama_config_to_json(const llama_config *m);

/* The fields of llama_config, in config.json's (and llama_config_to_json's) order, then the family's, as
 * bits of a mask: LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS). */
typedef enum {
    LLAMA_CF_HIDDEN_SIZE, LLAMA_CF_INTERMEDIATE_SIZE, LLAMA_CF_NUM_HIDDEN_LAYERS, LLAMA_CF_NUM_ATTENTION_HEADS,
    LLAMA_CF_NUM_KEY_VALUE_HEADS, LLAMA_CF_VOCAB_SIZE, LLAMA_CF_MAX_POSITION_EMBEDDINGS, LLAMA_CF_RMS_NORM_EPS,
    LLAMA_CF_ROPE_THETA, LLAMA_CF_TIE_WORD_EMBEDDINGS, LLAMA_CF_INITIALIZER_RANGE, LLAMA_CF_ROPE_SCALING,
    /* the family and what it adds: named "model_type", "head_dim" (the effective one), "qkv_bias",
     * "qk_norm", "sliding_window" (0: none), "first_sliding_layer" */
    LLAMA_CF_FAMILY, LLAMA_CF_HEAD_DIM, LLAMA_CF_QKV_BIAS, LLAMA_CF_QK_NORM, LLAMA_CF_SLIDING_WINDOW,
    LLAMA_CF_FIRST_SLIDING_LAYER,
    LLAMA_CF_COUNT
} llama_config_field;
#define LLAMA_CF_BIT(f) (1u << (f))
#define LLAMA_CF_NONE 0u   /* a may_differ mask: every field counts */

/* The one comparison of two model configs: the mask of the fields in which a and b differ (numbers
 * compared exactly, rope_scaling with llama_rope_scaling_equal), less those in may_differ, which the
 * caller states it tolerates (resume: LLAMA_CF_BIT(LLAMA_CF_MAX_POSITION_EMBEDDINGS) | ...). 0: the same. */
unsigned llama_config_diff(const llama_config *a, const llama_config *b, unsigned may_differ);
/* The field's config.json key: "hidden_size", ..., "rope_scaling", "model_type", ...: see llama_config_field. */
const char *llama_config_field_name(llama_config_field f);
/* Field f of c as messages print it, into buf (cap bytes): integers and booleans as decimal, reals with
 * %g, rope_scaling as llama_rope_scaling_describe says it, the family as its model_type, a sliding_window
 * of 0 as "none". */
void llama_config_field_format(const llama_config *c, llama_config_field f, char *buf, size_t cap);

/* The head dimension: head_dim when given, else hidden_size / num_attention_heads. */
static inline int llama_head_dim(const llama_config *m) {
    return m->head_dim ? m->head_dim : m->hidden_size / m->num_attention_heads;
}
/* The attention window of layer l: sliding_window, or 0 (the whole causal prefix). */
static inline int llama_layer_window(const llama_config *m, int l) {
    return m->sliding_window && l >= m->first_sliding_layer ? m->sliding_window : 0;
}
/* Number of parameters of the (unpadded) model; never overflows: saturates at INT64_MAX, and is -1 when
 * a dimension is not positive. At most LLAMA_CONFIG_MAX_PARAMS for a validated config. */
int64_t llama_config_num_params(const llama_config *m);

#endif
