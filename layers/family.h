/*
 * layers/family.h — the model families meshpoint runs, as one table: what each differs from Llama in.
 *
 * Every family here is "Llama-style" (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP); a row says
 * what its Hugging Face checkpoints and config class do differently, and the rest of meshpoint reads
 * the row instead of branching on the family:
 *   - names: config.json's model_type and architectures, as transformers writes them;
 *   - tensors: q/k/v biases (Qwen2), per-head RMSNorm of q and k before RoPE (Qwen3), and how the HF
 *     checkpoint stores the projections (Phi-3 fuses q/k/v into one qkv_proj and gate/up into one
 *     gate_up_proj; meshpoint keeps them apart and fuses only at the HF boundary, reshard/hf_*.c);
 *   - config defaults, as the family's transformers config class has them, for keys a file omits.
 * Adding a family is a row here plus whatever new math it brings (layers/llama.c).
 */
#ifndef MP_FAMILY_H
#define MP_FAMILY_H

typedef enum {
    LLAMA_FAMILY_LLAMA = 0,   /* LlamaForCausalLM: the default, and every checkpoint of format <= 3 */
    LLAMA_FAMILY_MISTRAL,     /* MistralForCausalLM: Llama's math, a sliding window when set */
    LLAMA_FAMILY_QWEN2,       /* Qwen2ForCausalLM (Qwen2, Qwen2.5): biases on q, k, v */
    LLAMA_FAMILY_QWEN3,       /* Qwen3ForCausalLM: RMSNorm of each q and k head, explicit head_dim */
    LLAMA_FAMILY_PHI3,        /* Phi3ForCausalLM: fused qkv_proj and gate_up_proj in HF checkpoints */
    LLAMA_FAMILY_COUNT
} llama_family;

/* How a family's config says which layers attend through a sliding window (llama_config.sliding_window,
 * first_sliding_layer), as its transformers classes read it. */
typedef enum {
    LLAMA_WINDOW_NONE = 0,   /* no window keys: LlamaConfig ignores sliding_window (warned about as unknown) */
    LLAMA_WINDOW_ALL,        /* sliding_window (null: none) applies to every layer: Mistral, Phi-3 */
    LLAMA_WINDOW_QWEN,       /* use_sliding_window gates sliding_window; layers >= max_window_layers slide,
                                or as layer_types lists them (full..., then sliding...): Qwen2, Qwen3 */
} llama_window_rule;

/* Keys an export writes for a family whose config class reads them (llama_family_info.writes). */
#define LLAMA_WRITES_ATTENTION_BIAS 1u   /* "attention_bias": false */
#define LLAMA_WRITES_MLP_BIAS 2u         /* "mlp_bias": false */
#define LLAMA_WRITES_PRETRAINING_TP 4u   /* "pretraining_tp": 1 (transformers 4.x's LlamaConfig) */

/* One family's row. */
typedef struct llama_family_info {
    llama_family family;
    const char *model_type;       /* config.json "model_type": "llama", "qwen2", ... */
    const char *architecture;     /* config.json "architectures"[0]: "LlamaForCausalLM", ... */
    int qkv_bias;                 /* q_proj, k_proj, v_proj have biases (always, whatever the config says) */
    int qk_norm;                  /* q_norm, k_norm: RMSNorm over each head of q and of k, before RoPE */
    int fused_qkv;                /* the HF checkpoint stores self_attn.qkv_proj = [q; k; v] rows */
    int fused_gate_up;            /* the HF checkpoint stores mlp.gate_up_proj = [gate; up] rows */
    /* config.json, as the family's transformers config class (config_class) reads it */
    const char *config_class;     /* "LlamaConfig", ...: named in messages about keys */
    int default_kv_heads;         /* num_key_value_heads when the key is missing; 0: num_attention_heads
                                     (null always means num_attention_heads) */
    int default_max_pos;          /* max_position_embeddings when missing */
    double default_rms_norm_eps;  /* rms_norm_eps when missing */
    int default_head_dim;         /* head_dim when missing; 0: hidden_size / num_attention_heads */
    llama_window_rule window;     /* which keys say the sliding window */
    int default_window;           /* sliding_window when missing (0: none) */
    int default_max_window_layers;   /* LLAMA_WINDOW_QWEN: max_window_layers when missing */
    /* attention_bias true: NULL when the key has no effect in this family (Qwen2's q/k/v biases are
     * always there), else why it is refused */
    const char *attention_bias_refusal;
    const char *const *keys;      /* the family's own config keys beyond Llama's (NULL-terminated): each is
                                     read and checked; in another family's config they are unknown keys */
    /* What an exported config.json writes besides the fields, so that the family's class reads it as
     * meshpoint means it (llama_config_to_json, reshard/hf_sink.c): */
    unsigned writes;              /* LLAMA_WRITES_* bits: keys of the class that are written explicitly */
    int default_pad_token_id;     /* the class's pad_token_id default, an embedding padding_idx that
                                     transformers refuses outside the vocabulary (Phi3Config: 32000); 0: none.
                                     Written as null for a vocabulary that does not hold it */
} llama_family_info;

/* The row of family f (a valid llama_family). */
const llama_family_info *llama_family_get(llama_family f);
/* The row whose model_type is s; NULL when none is. */
const llama_family_info *llama_family_by_model_type(const char *s);
/* 1 if key is one of f's own config keys (f->keys). */
int llama_family_has_key(const llama_family_info *f, const char *key);
/* The supported model_types as a message lists them: "\"llama\", \"mistral\", ..." (static storage). */
const char *llama_family_list(void);

#endif
