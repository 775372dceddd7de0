/*
 * layers/llama_impl.h — the model's private struct, shared by the files of layers/ (llama.c: forward,
 * backward; llama_create.c: creation and the memory plan; llama_params.c: the parameter table and its
 * storage; llama_fsdp.c: gathering and reduce-scattering FSDP units). Not for use outside layers/.
 */
#ifndef MP_LLAMA_IMPL_H
#define MP_LLAMA_IMPL_H

#include <math.h>
#include "core/alloc.h"
#include "core/rng.h"
#include "layers/llama.h"

#define LLAMA_MAX_LAYERS 256
#define LLAMA_MAX_PARAMS (3 + 14 * LLAMA_MAX_LAYERS)   /* 9 per layer, + 3 biases + 2 q/k norms */
#define LLAMA_MAX_TP 64

/* Indices into the parameter table for one block; bq, bk, bv (q/k/v biases) and qn, kn (q_norm, k_norm)
 * are -1 when the config has none. */
typedef struct llama_layer_params {
    int ln1, wq, wk, wv, wo, ln2, wg, wu, wd;
    int bq, bk, bv, qn, kn;
} llama_layer_params;

/* One FSDP unit: parameters [first, first + count) of the table, gathered and reduce-scattered together. */
typedef struct llama_unit {
    int first, count;
    int64_t shard_off;       /* offset of the unit's shards in the shard storage */
    int64_t shard_numel;     /* this rank's shard elements */
    int64_t full_numel;      /* elements of the gathered TP slices */
    int64_t *dp_counts;      /* shard elements of every dp rank (for the uneven collectives) */
    void *full;              /* gathered TP slices, act_dtype (dp > 1), NULL when it shares the pool */
    int resident;            /* full holds the current weights */
} llama_unit;

/* Saved activations of one block (pointers into one allocation). n_res = tokens of this rank's residual
 * stream (N, or N/tp under SP); N = all tokens of the micro-batch. */
typedef struct llama_layer_acts {
    void *x_in;         /* [n_res, D] block input */
    void *ln1;          /* [n_res, D] */
    float *rstd1;       /* [n_res] */
    void *ln1_full;     /* [N, D]: ln1 gathered over tp under SP, else = ln1 */
    /* after RoPE. Training and eval: q is the fused qkv [N, Hl*hd + 2 KVl*hd] and k, v point at its
     * column blocks (row stride Hl*hd + 2 KVl*hd, layers/llama.c); kv cache: q [N, Hl*hd] dense, k, v the
     * layer's cache [P, KVl*hd] */
    void *q, *k, *v;
    /* qk_norm: q's then k's heads as they were before q_norm / k_norm, [N, Hl*hd] then [N, KVl*hd] dense
     * (training only), and their rstd, [N, Hl] then [N, KVl] */
    void *qk_pre;
    float *qk_rstd;
    float *lse;         /* [B, Hl, T] attention log-sum-exp (flash-style: no [T, T] matrix is kept) */
    void *o_in;         /* [N, Hl*hd] attention output */
    void *x_mid;        /* [n_res, D] after the attention residual */
    void *ln2;
    float *rstd2;
    void *ln2_full;
    /* the MLP runs feature-major (layers/llama.c, "The MLP"): gate holds [gate^T; up^T], [2 Il, N] for the
     * call's N tokens (up^T starts Il * N elements in), h is h^T [Il, N] */
    void *gate, *h;
} llama_layer_acts;

struct llama_model {
    llama_config cfg;
    llama_options opt;
    mp_mesh *mesh;
    mp_backend *be;
    int tp, tp_rank, dp, dp_rank, sp;
    int L, D, hd, H_local, KV_local, I_local;
    int v_local, v_start, v_valid;   /* vocab slice of this tp rank (v_local includes padding) */
    int B, T, N, n_res;              /* rows of one forward: B sequences of T tokens (kv: 1 x kv_chunk) */
    int P;                           /* positions: RoPE table rows, and the KV cache's (= seq_len) */
    int kv;                          /* opt.kv_cache: acts[l].k, .v are layer l's cache, [P, KV_local*hd] */
    int64_t sp_counts[LLAMA_MAX_TP];  /* elements of each tp rank's residual chunk (SP collectives) */

    int nparams;
    llama_param params[LLAMA_MAX_PARAMS];
    llama_layer_params lp[LLAMA_MAX_LAYERS];
    int p_embed, p_norm, p_head;
    int nunits;
    llama_unit units[LLAMA_MAX_LAYERS + 2];
    int64_t max_unit_full;

    /* persistent state (one allocation per category) */
    int64_t shard_total;
    float *shard_params, *shard_grads, *shard_moments;
    void *shard_act;                 /* compute copy of shard_params (act_dtype), = shard_params on fp32 */
    size_t act_size;                 /* bytes of one compute element (mp_dtype_size(be->act_dtype)) */
    float *sync_buf;                 /* replicated-parameter grads packed for the SP all-reduce */

    /* FSDP buffers (dp > 1) */
    void *pool;                      /* gathered weights of the unit in use (reshard_after_forward) */
    int pool_unit;                   /* unit whose weights the pool holds, -1 none */
    float *grad_unit0, *grad_pool;   /* gathered grads: unit 0 (lives for the whole backward), others */
    float *stage;                    /* pack staging of the gradients' reduce-scatter (fp32) */
    void *gstage;                    /* the weights' all-gather lands here, rank-major (act_dtype) */
    int gather_unit;                 /* unit whose split-phase gather into gstage is in flight, -1 none */
    float *stage2;                   /* reduce-scatter output */
    int64_t stage2_numel;
    size_t fsdp_bytes;

    /* activations: void * are compute tensors (act_dtype), float * are fp32 (core/backend.h) */
    llama_layer_acts acts[LLAMA_MAX_LAYERS];
    void *x_final, *lnf, *lnf_full, *logits;
    float *rstdf;
    float *rowmax, *sumexp, *tlogit, *losses;
    float *local_max;   /* this vocab shard's row max (xent_fwd at tp > 1), after rowmax */
    void *dres_a, *dres_b;            /* [n_res, D] residual-stream gradients */
    void *dfull;                      /* [N, D] */
    void *tmp_nd;                     /* [N, D] partial outputs before the tp reduction */
    /* dq: the fused d_qkv [N, Hl*hd + 2 KVl*hd], dk and dv its column blocks (as acts' q, k, v);
     * dgate: [dgate^T; dup^T] [2 Il, N]; dh: dh^T [Il, N] */
    void *dq, *dk, *dv, *do_in, *dgate, *dh;
    float *attn_scratch;              /* [B, Hl, T] attention backward scratch (rowsum(dout * out)) */
    float *cos_t, *sin_t;
    int32_t *tok_in, *tok_tgt;        /* device copies of the micro-batch tokens */
    double *sums;                     /* LLAMA_NSUMS device scalars (see enum llama_sum), in act_block */
    void *act_block;
    size_t act_bytes;
    int have_targets;
};

/* The device scalars of a model: the step's loss sum and gradient sum of squares, read to the host
 * together (one to_host per step), and one slot for the standalone llama_forward / llama_grad_norm. */
enum llama_sum { LLAMA_SUM_LOSS = 0, LLAMA_SUM_GRADSQ, LLAMA_SUM_SCRATCH, LLAMA_NSUMS };

void llama_params_build(llama_model *m);
/* Units, shard offsets and totals over the built table (no allocation). */
void llama_params_layout(llama_model *m);
void llama_params_alloc(llama_model *m);
void llama_params_free(llama_model *m);
/* Makes the compute copies of the shards from the fp32 masters (a no-op when they are the masters). */
void llama_params_refresh_act(llama_model *m);
int64_t llama_replicated_shard_numel(const llama_model *m);

/* FSDP (llama_fsdp.c). On dp = 1 all of these are no-ops: full tensors alias the shards. */
void llama_fsdp_alloc(llama_model *m);
/* Bytes llama_fsdp_alloc allocates for m's laid-out units (0 on dp = 1). */
size_t llama_fsdp_plan_bytes(const llama_model *m);
void llama_fsdp_free(llama_model *m);
/* Marks every gathered copy stale (after the shards changed). */
void llama_fsdp_invalidate(llama_model *m);
/* Makes the gathered weights of unit u valid (one all-gather over dp, unless already resident): ends
 * the gather llama_fsdp_prefetch(m, u) started, else gathers now. */
void llama_fsdp_gather(llama_model *m, int u);
/* Starts the all-gather of unit u's weights, to be ended by llama_fsdp_gather(m, u), so that it runs
 * while the caller computes with the unit it gathered last (the dp communicator's split-phase
 * all_gatherv; nothing when u is resident, when dp = 1 or when the communicator has no split phase).
 * At most one unit in flight: the forward and backward gather u next; a gather or prefetch of another
 * unit, llama_fsdp_invalidate and llama_fsdp_free end and drop it first. */
void llama_fsdp_prefetch(llama_model *m, int u);
/* Points unit u's full_grad at a zeroed gathered-gradient buffer before its backward. */
void llama_fsdp_grad_begin(llama_model *m, int u);
/* Reduce-scatters unit u's gathered gradients over dp and adds them to its shard gradients. */
void llama_fsdp_grad_end(llama_model *m, int u);

#endif
