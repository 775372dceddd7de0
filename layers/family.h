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

/* One family's row. */
typedef struct llama_family_info {
    llama_family family;
    const char *model_type;       /* config.json "model_type": "llama", "qwen2", ... */
    const char *architecture;     /* config.json "architectures"[0]: "LlamaForCausalLM", ... */
    int qkv_bias;                 /* q_proj, k_proj, v_proj have biases (always, whatever the config says) */
    int qk_norm;                  /* q_norm, k_norm: RMSNorm over each head of q and of k, before RoPE */
    int fused_qkv;                /* the HF checkpoint stores self_attn.qkv_proj = [q; k; v] rows */
    int fused_gate_up;            /* the HF checkpoint stores mlp.gate_up_proj = [gate; up] rows */
} llama_family_info;

/* The row of family f (a valid llama_family). */
const llama_family_info *llama_family_get(llama_family f);
/* The row whose model_type is s; NULL when none is. */
const llama_family_info *llama_family_by_model_type(const char *s);
/* The supported model_types as a message lists them: "\"llama\", \"mistral\", ..." (static storage). */
const char *llama_family_list(void);

#endif
