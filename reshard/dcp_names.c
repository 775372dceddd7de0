/*
 * reshard/dcp_names.c — see dcp_names.h. Names are mapped meshpoint -> DCP on each call (a few string
 * operations and one small table, tt_layer: nothing to keep in step with the model's tensor list); the
 * source and the sink differ only in the spelling they pass.
 */
#include "reshard/dcp_names.h"
#include <stdio.h>
#include <string.h>
#include "layers/family.h"
#include "layers/family_hf.h"
#include "layers/llama.h"

/* torchtitan's names of an HF decoder layer's tensors (Llama3StateDictAdapter.from_hf_map); qkv: under the
 * spelling's attention q/k/v prefix; permute: wq and wk, whose rows torchtitan interleaves. */
static const struct { const char *hf, *tt; int qkv, permute; } tt_layer[] = {
    {"self_attn.q_proj.weight", "wq.weight", 1, 1},
    {"self_attn.k_proj.weight", "wk.weight", 1, 1},
    {"self_attn.v_proj.weight", "wv.weight", 1, 0},
    {"self_attn.o_proj.weight", "attention.wo.weight", 0, 0},
    {"mlp.gate_proj.weight", "feed_forward.w1.weight", 0, 0},
    {"mlp.up_proj.weight", "feed_forward.w3.weight", 0, 0},
    {"mlp.down_proj.weight", "feed_forward.w2.weight", 0, 0},
    {"input_layernorm.weight", "attention_norm.weight", 0, 0},
    {"post_attention_layernorm.weight", "ffn_norm.weight", 0, 0},
};

int rs_dcp_names_parse(const char *s) {
    if (!strcmp(s, "hf")) return RS_DCP_NAMES_HF;
    if (!strcmp(s, "torchtitan")) return RS_DCP_NAMES_TORCHTITAN;
    return -1;
}

rs_dcp_spelling rs_dcp_spelling_of(rs_dcp_names names) {
    rs_dcp_spelling sp = {.names = names, .prefix = "", .qkv = "attention.qkv_linear.", .out = "lm_head.weight"};
    return sp;
}

mp_code rs_dcp_check_names(const llama_config *cfg, rs_dcp_names names, mp_err *e) {
    if (names != RS_DCP_NAMES_TORCHTITAN) return MP_OK;
    if (cfg->family != LLAMA_FAMILY_LLAMA)
        return mp_err_set(e, MP_EINPUT, "--names torchtitan: the model is of family %s; torchtitan's names are those "
                          "of its llama3 model only (use --names hf)", llama_family_get(cfg->family)->model_type);
    if (llama_head_dim(cfg) * cfg->num_attention_heads != cfg->hidden_size)
        return mp_err_set(e, MP_EINPUT, "--names torchtitan: head_dim %d is not hidden_size / num_attention_heads "
                          "(%d / %d), which torchtitan's llama3 model requires", llama_head_dim(cfg), cfg->hidden_size,
                          cfg->num_attention_heads);
    return MP_OK;
}

int rs_dcp_optim_name(char *out, size_t n, const char *param, const char *what) {
    return snprintf(out, n, RS_DCP_OPTIM_STATE "%s.%s", param, what) >= (int)n ? -1 : 0;
}

int64_t rs_dcp_titan_row(int64_t r, int64_t hd) {
    int64_t h = r / hd, p = r % hd, half = hd / 2;   /* p = j*hd/2 + i */
    return h * hd + 2 * (p % half) + p / half;
}

int64_t rs_dcp_hf_row(int64_t r, int64_t hd) {
    int64_t h = r / hd, p = r % hd;   /* p = 2*i + j */
    return h * hd + (p % 2) * (hd / 2) + p / 2;
}

/* torchtitan's name of HF parameter hf under sp, without the prefix, into p->param (and p->permute);
 * -1 when it has none. */
static int titan_param(const rs_dcp_spelling *sp, const char *hf, rs_dcp_place *p) {
    const char *tt = NULL;
    if (!strcmp(hf, "model.embed_tokens.weight")) tt = "tok_embeddings.weight";
    else if (!strcmp(hf, "model.norm.weight")) tt = "norm.weight";
    else if (!strcmp(hf, "lm_head.weight")) tt = sp->out;
    if (tt) return snprintf(p->param, sizeof p->param, "%s", tt), 0;
    int layer, at = 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &at) != 1 || at == 0) return -1;
    for (size_t i = 0; i < sizeof tt_layer / sizeof *tt_layer; i++) {
        if (strcmp(hf + at, tt_layer[i].hf)) continue;
        snprintf(p->param, sizeof p->param, "layers.%d.%s%s", layer, tt_layer[i].qkv ? sp->qkv : "", tt_layer[i].tt);
        p->permute = tt_layer[i].permute;
        return 0;
    }
    return -1;
}

mp_code rs_dcp_name(const llama_config *cfg, const rs_dcp_spelling *sp, const char *name, rs_dcp_place *p,
                    mp_err *e) {
    memset(p, 0, sizeof *p);
    const char *kind = NULL, *base = name;
    if (!strncmp(name, "optim/exp_avg/", 14)) kind = "exp_avg", base += 14;
    else if (!strncmp(name, "optim/exp_avg_sq/", 17)) kind = "exp_avg_sq", base += 17;
    else if (!strncmp(name, "model/", 6)) base += 6;
    else return mp_err_set(e, MP_EINTERNAL, "DCP: tensor %s is neither model/ nor optim/", name);
    if (sp->names == RS_DCP_NAMES_TORCHTITAN) {
        if (titan_param(sp, base, p))
            return mp_err_set(e, MP_EINPUT, "--names torchtitan: tensor %s has no name in torchtitan's llama3 model",
                              base);
        if (p->permute) p->head_dim = llama_head_dim(cfg);
    } else {
        llama_hf_place pl;
        if (llama_hf_place_of(cfg, base, &pl)) return mp_err_set(e, MP_EINTERNAL, "DCP: no HF name for %s", base);
        snprintf(p->param, sizeof p->param, "%s", pl.name);
        p->row0 = pl.row0;
        p->rows = pl.hf_rows;
    }
    p->optim = kind != NULL;
    int bad = kind ? rs_dcp_optim_name(p->fqn, sizeof p->fqn, p->param, kind)
                   : snprintf(p->fqn, sizeof p->fqn, "%s%s", sp->names == RS_DCP_NAMES_TORCHTITAN ? sp->prefix : "",
                              p->param) >= (int)sizeof p->fqn;
    if (bad) return mp_err_set(e, MP_EINPUT, "DCP: the name of %s is longer than %zu bytes", name, sizeof p->fqn - 1);
    return MP_OK;
}
