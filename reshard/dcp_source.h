/*
 * reshard/dcp_source.h — the conversion engine's source over a PyTorch Distributed Checkpoint (DCP)
 * directory (reshard/dcp.h): `meshpoint import DCP_DIR` and `export DCP_DIR` (docs/DCP.md, "In").
 *
 * Engine tensor "model/<hf name>" (meshpoint stores the HF names) is found in the DCP under one of two
 * name sets (reshard/dcp_names.h, which the DCP sink shares), detected from the keys or forced:
 *   - hf: the HF name itself (a DCP of an HF-named state dict; a family's fused tensors through
 *     layers/family_hf.h, as hf_source.c);
 *   - torchtitan: torchtitan's Llama 3 names in any of its spellings (attention.wq or, since its
 *     QKVLinear, attention.qkv_linear.wq; output.weight or lm_head.weight; optionally under "model."),
 *     wq and wk rows permuted from torchtitan's interleaved RoPE layout to HF's as torchtitan's own
 *     Llama3StateDictAdapter.to_hf does (rs_dcp_titan_row).
 * "optim/exp_avg/<hf name>" and "optim/exp_avg_sq/<hf name>" are torchtitan's flattened AdamW state
 * "optimizer.state.<fqn>.exp_avg" / ".exp_avg_sq" of the parameter's DCP name (same permutation).
 *
 * A box is assembled from the chunks that overlap it; each overlap is read from the chunk's record by
 * range (row runs of the row-major chunk) and widened to fp32 by reshard/safetensors.c's reader, so
 * only the bytes a box needs are read. Every box read checks that its chunks cover it exactly once.
 */
#ifndef MP_DCP_SOURCE_H
#define MP_DCP_SOURCE_H

#include <stdint.h>
#include "core/error.h"
#include "layers/llama_config.h"
#include "reshard/dcp_names.h"
#include "reshard/reshard.h"

/* What rs_source_dcp found in the directory. */
typedef struct rs_dcp_info {
    rs_dcp_names names;     /* the name set in use (never AUTO) */
    const char *spelling;   /* for messages: "hf", "torchtitan (attention.wq)", ... (static) */
    int moments;            /* AdamW exp_avg and exp_avg_sq present for every parameter */
    int64_t step;           /* with moments: AdamW's step (optimizer.state.*.step, all equal), else
                             * train_state.step, else 0; 0 for a model-only import */
    int ntensors;           /* DCP tensors the model uses */
} rs_dcp_info;

/* Opens DCP directory dir as a source of the model of cfg under name set names, and checks it: every
 * tensor of the model present (by its DCP name) with the global shape config.json implies and a dtype of
 * float32/bfloat16/float16, whose chunks lie inside it and add up to its size; torchtitan names only for
 * Llama models; moments, when any tensor is an optimizer exp_avg, for every parameter; no tensor the model
 * would not use outside the optimizer, lr_scheduler, dataloader and train_state entries (HF's rotary
 * inv_freq buffers and a tied lm_head are ignored, as transformers does). MP_EINPUT naming the directory
 * and tensor. *info (may be NULL) gets what was found. */
mp_code rs_source_dcp(rs_source **out, const char *dir, const llama_config *cfg, rs_dcp_names names,
                      rs_dcp_info *info, mp_err *e);

#endif
