/*
 * layers/family_hf.c — the HF name map of the families (see family_hf.h). The fused tensors are a
 * small table: which layer tensor goes into which fused one, as which part; the parts' row counts
 * come from the config, in the order the HF tensor stacks them.
 */
#include "layers/family_hf.h"
#include <stdio.h>
#include <string.h>

/* A layer tensor that a family may fuse: its field (after "model.layers.N."), the fused field, and
 * its part (0, 1, 2) in the fused tensor's rows. */
typedef struct fused_part {
    const char *field, *hf;
    int qkv;    /* 1: under fused_qkv (parts q, k, v); 0: under fused_gate_up (parts gate, up) */
    int part;
} fused_part;

static const fused_part parts[] = {
    {"self_attn.q_proj.weight", "self_attn.qkv_proj.weight", 1, 0},
    {"self_attn.k_proj.weight", "self_attn.qkv_proj.weight", 1, 1},
    {"self_attn.v_proj.weight", "self_attn.qkv_proj.weight", 1, 2},
    {"mlp.gate_proj.weight", "mlp.gate_up_proj.weight", 0, 0},
    {"mlp.up_proj.weight", "mlp.gate_up_proj.weight", 0, 1},
};

int llama_hf_place_of(const llama_config *c, const char *name, llama_hf_place *out) {
    memset(out, 0, sizeof *out);
    if ((size_t)snprintf(out->name, sizeof out->name, "%s", name) >= sizeof out->name) return -1;
    const llama_family_info *fi = llama_family_get(c->family);
    int l = -1, at = 0;
    if (sscanf(name, "model.layers.%d.%n", &l, &at) != 1 || at == 0) return 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        const fused_part *p = &parts[i];
        if (strcmp(name + at, p->field) || !(p->qkv ? fi->fused_qkv : fi->fused_gate_up)) continue;
        int64_t hd = llama_head_dim(c), q = (int64_t)c->num_attention_heads * hd;
        int64_t kv = (int64_t)c->num_key_value_heads * hd, I = c->intermediate_size;
        int64_t rows[3] = {p->qkv ? q : I, p->qkv ? kv : I, p->qkv ? kv : 0};
        snprintf(out->name, sizeof out->name, "model.layers.%d.%s", l, p->hf);
        for (int k = 0; k < p->part; k++) out->row0 += rows[k];
        out->rows = rows[p->part];
        out->hf_rows = rows[0] + rows[1] + rows[2];
        out->fused = p->qkv ? "q_proj, k_proj and v_proj" : "gate_proj and up_proj";
        return 0;
    }
    return 0;
}
