/*
 * reshard/dcp_names.h — the names a meshpoint tensor has in a PyTorch Distributed Checkpoint (DCP), for
 * both directions: the DCP source (reshard/dcp_source.c, `import DCP_DIR`, `export DCP_DIR`) and the DCP
 * sink (reshard/dcp_sink.c, `export --format dcp`). docs/DCP.md describes them for users.
 *
 * Name sets (rs_dcp_names):
 *   - hf: the HF name itself ("model.layers.0.self_attn.q_proj.weight"), a family's fused HF tensor (a
 *     Phi-3 qkv_proj, gate_up_proj) as a row range of one DCP tensor (layers/family_hf.h).
 *   - torchtitan: the names of torchtitan's Llama 3 model (its Llama3StateDictAdapter.from_hf_map):
 *       model.embed_tokens.weight       tok_embeddings.weight
 *       model.layers.N.self_attn.q_proj layers.N.attention.wq   (k_proj wk, v_proj wv, o_proj wo)
 *       model.layers.N.mlp.gate_proj    layers.N.feed_forward.w1 (down_proj w2, up_proj w3)
 *       input_layernorm / post_attention_layernorm  attention_norm / ffn_norm
 *       model.norm.weight               norm.weight
 *       lm_head.weight                  output.weight
 *     torchtitan's spellings, all read (rs_dcp_spelling; the source detects which from the keys):
 *       current (torchtitan's main branch, after QKVLinear, whose state-dict hooks save the fused wqkv
 *         as wq/wk/wv): layers.N.attention.qkv_linear.wq.weight (wo stays attention.wo), lm_head.weight;
 *       earlier (torchtitan 0.2.x): layers.N.attention.wq.weight, output.weight;
 *       either, every model tensor under a "model." prefix (the model's state dict nested under a
 *         "model" key and flattened); the optimizer names below never carry it.
 *     The sink writes the current spelling without the prefix (rs_dcp_spelling_of): torchtitan 0.3.0's
 *     model.state_dict() keys, which its llama3 model loads (the earlier spelling does not: its load
 *     hooks merge qkv_linear.wq/wk/wv back into the fused wqkv; tests/python/dcp_titan.py).
 *
 * The q/k row permutation (torchtitan only). HF's checkpoints keep each attention head's rows of wq and wk
 * in the "half" RoPE layout (rotate_half pairs row i with row i + hd/2); torchtitan, like the original
 * Llama code, keeps them interleaved (pairs 2i, 2i + 1). Within each head h of hd = head_dim rows, for
 * j in {0, 1} and i < hd/2:
 *       HF row  h*hd + j*hd/2 + i   ==   torchtitan row  h*hd + 2*i + j
 * HF -> torchtitan is Llama3StateDictAdapter.from_hf (`_reverse_permute`, what the sink does);
 * torchtitan -> HF is to_hf (`_permute`, what the source does). wv, wo and every other tensor keep their
 * rows. rs_dcp_titan_row and rs_dcp_hf_row are the two directions of this one formula.
 *
 * Optimizer names. torchtitan's flattened optimizer state dict (the "optimizer" entry of its checkpoint
 * state) names AdamW's state of parameter <fqn> "optimizer.state.<fqn>.exp_avg", ".exp_avg_sq" and
 * ".step" (a 0-d float32), where <fqn> is the parameter's name without the "model." prefix; the step of
 * the training run is "train_state.step". meshpoint's moments "optim/exp_avg/<hf name>" and
 * "optim/exp_avg_sq/<hf name>" map to the moments of that parameter's DCP name (rs_dcp_optim_name).
 */
#ifndef MP_DCP_NAMES_H
#define MP_DCP_NAMES_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"
#include "layers/llama_config.h"

/* The name sets (AUTO: the source detects which from the keys; the sink is never given AUTO). */
typedef enum { RS_DCP_NAMES_AUTO, RS_DCP_NAMES_HF, RS_DCP_NAMES_TORCHTITAN } rs_dcp_names;

#define RS_DCP_OPTIM_STATE "optimizer.state."   /* before <fqn>.exp_avg / .exp_avg_sq / .step */
#define RS_DCP_TRAIN_STEP "train_state.step"

/* How names are spelled: the set and, for torchtitan, which of its spellings (see the top comment). */
typedef struct rs_dcp_spelling {
    rs_dcp_names names;
    char prefix[8];      /* "" or "model." before the model's names */
    char qkv[32];        /* "attention." or "attention.qkv_linear." before wq, wk, wv */
    char out[24];        /* "output.weight" or "lm_head.weight" */
} rs_dcp_spelling;

/* Where a meshpoint tensor is in a DCP. */
typedef struct rs_dcp_place {
    char fqn[224];      /* the DCP item ("layers.0.attention.wq.weight", "optimizer.state.<param>.exp_avg") */
    char param[160];    /* the parameter's name in that set, without the "model." prefix */
    int optim;          /* an Adam moment */
    int64_t row0, rows; /* rows: the fused DCP tensor's rows and row0 the tensor's first (HF, Phi-3); 0: whole */
    int permute;        /* torchtitan's wq / wk: rows permuted within each head of head_dim rows */
    int head_dim;
} rs_dcp_place;

/* "hf" / "torchtitan" -> the enum; -1 for another string. */
int rs_dcp_names_parse(const char *s);

/* The spelling the sink writes for names: for torchtitan the current one, torchtitan 0.3.0's (no prefix,
 * "attention.qkv_linear.", "lm_head.weight"). */
rs_dcp_spelling rs_dcp_spelling_of(rs_dcp_names names);

/* MP_EINPUT when names cannot express the model of cfg for writing (torchtitan: llama family only,
 * head_dim = hidden_size / num_attention_heads). */
mp_code rs_dcp_check_names(const llama_config *cfg, rs_dcp_names names, mp_err *e);

/* The DCP place of meshpoint tensor name (model/..., optim/exp_avg/..., optim/exp_avg_sq/...) under
 * spelling sp: MP_EINTERNAL for a name of none of those kinds or with no HF place, MP_EINPUT naming a
 * tensor torchtitan's model has no name for (a bias), or a name too long. */
mp_code rs_dcp_name(const llama_config *cfg, const rs_dcp_spelling *sp, const char *name, rs_dcp_place *p,
                    mp_err *e);

/* "optimizer.state.<param>.<what>" into out (n bytes); 0, or -1 when it does not fit. */
int rs_dcp_optim_name(char *out, size_t n, const char *param, const char *what);

/* The torchtitan row of HF row r of a wq / wk whose heads are hd rows (to_hf's direction, read). */
int64_t rs_dcp_titan_row(int64_t r, int64_t hd);
/* The HF row of torchtitan row r (from_hf's direction, written); rs_dcp_titan_row's inverse. */
int64_t rs_dcp_hf_row(int64_t r, int64_t hd);

#endif
