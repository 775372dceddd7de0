/*
 * layers/family_hf.h — where a meshpoint tensor lives in a family's Hugging Face checkpoint.
 *
 * meshpoint names its parameters as HF does (model.layers.3.self_attn.q_proj.weight, ...), one tensor
 * per projection, for every family: the model, its checkpoints and reshard never see a fused tensor.
 * Some families' HF checkpoints fuse projections along dim 0 (the family row's fused_qkv and
 * fused_gate_up, layers/family.h): Phi-3 stores self_attn.qkv_proj = rows [q (H*hd); k (KV*hd);
 * v (KV*hd)] and mlp.gate_up_proj = rows [gate (I); up (I)]. The HF boundary (reshard/hf_source.c,
 * reshard/hf_sink.c) asks this map for (HF name, first row) and reads or writes the meshpoint tensor as
 * that row range of the fused one: the same boxes, shifted, so conversions stay in bounded memory.
 * Every other tensor (biases, q/k norms, the unfused families' projections) has its own name in HF.
 */
#ifndef MP_FAMILY_HF_H
#define MP_FAMILY_HF_H

#include <stdint.h>
#include "layers/llama_config.h"

/* A meshpoint tensor's place in the HF checkpoint of its family. */
typedef struct llama_hf_place {
    char name[128];      /* the HF tensor */
    int64_t row0;        /* the meshpoint tensor's first row in it */
    int64_t rows;        /* its rows there; 0: the whole HF tensor (not fused) */
    int64_t hf_rows;     /* rows of the fused HF tensor; 0 when not fused */
    const char *fused;   /* NULL, or what the HF tensor fuses, for messages ("q_proj, k_proj and v_proj") */
} llama_hf_place;

/* The place of meshpoint tensor name (a parameter name of config c, no "model/" prefix) in c's
 * family's HF checkpoint. A name outside the fused projections maps to itself. Returns 0; -1 if the
 * HF name would not fit (a name over 100 characters: never one of the spec table's). */
int llama_hf_place_of(const llama_config *c, const char *name, llama_hf_place *out);

#endif
