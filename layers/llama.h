/*
 * layers/llama.h — the Llama model (HF LlamaForCausalLM) on a dp x tp mesh: parameters, forward,
 * backward. Knows nothing of files; talks to devices only through mp_backend and to other ranks only
 * through the mesh's mp_comm tables, so one code path serves 1x1 and every larger mesh.
 *
 * Parameters are named and shaped as in Hugging Face (model.layers.3.self_attn.q_proj.weight, ...).
 * Each rank holds, per parameter, its tensor-parallel slice (whole heads of q/k/v, rows of gate/up,
 * columns of o/down, vocab rows of embed_tokens/lm_head padded to a multiple of tp) and, of that slice,
 * its FSDP shard: a balanced range of dim-0 rows over the dp group (mp_split). The shard is what the
 * optimizer updates and what a checkpoint stores; the full TP slice is gathered per FSDP unit (the
 * embedding, each block, the head) just before use.
 *
 * Loss convention: llama_forward computes per-token cross-entropy over the local micro-batch and
 * returns its sum; llama_backward(scale) accumulates the gradient of scale * that sum into the shard
 * gradients (after the dp reduce-scatter). With scale = 1 / (global tokens per step), summing over
 * micro-batches and dp ranks gives the gradient of the global mean loss.
 */
#ifndef MP_LLAMA_H
#define MP_LLAMA_H

#include <stdint.h>
#include "core/backend.h"
#include "core/error.h"
#include "core/mesh.h"
#include "core/optim.h"
#include "layers/llama_config.h"

typedef enum {
    LLAMA_REPLICATED = 0,  /* same on every tp rank (norm weights) */
    LLAMA_SPLIT_ROWS,      /* dim 0 split over tp: q/k/v/gate/up (column-parallel), embed/lm_head (vocab) */
    LLAMA_SPLIT_COLS       /* dim 1 split over tp: o/down (row-parallel) */
} llama_tp_split;

/* How llama_init_box fills a tensor: normal(0, initializer_range) (matrices), ones (norm weights), zeros
 * (biases), as transformers' _init_weights does. */
typedef enum { LLAMA_INIT_NORMAL = 0, LLAMA_INIT_ONES, LLAMA_INIT_ZEROS } llama_init_kind;

/* A tensor of the model as a config defines it, before any mesh: HF name, logical shape, how tensor
 * parallelism splits it, its FSDP unit, its initial values, and whether its gradient is partial on each
 * tp rank (tp_grad_sum: q_norm / k_norm, replicated but applied to each rank's own heads only, so the
 * rank's gradient covers its heads and llama_sync_grads sums it over tp on every mesh). */
typedef struct llama_tensor_spec {
    char name[96];
    int ndim;                  /* 1 or 2 */
    int64_t shape[2];          /* [rows, cols]; cols = 1 for vectors */
    llama_tp_split split;
    int vocab;                 /* rows are the vocabulary (embed_tokens, lm_head): split in equal blocks
                                  of ceil(V / tp), padding rows in memory only. Decided by role, never
                                  by size (intermediate_size may equal vocab_size). */
    int unit;
    llama_init_kind init;
    int tp_grad_sum;
} llama_tensor_spec;

/* The model's tensors for config c, in table order (embedding; per layer input_layernorm, q, k, v,
 * [q, k, v biases when qkv_bias], [q_norm, k_norm when qk_norm], o, post_attention_layernorm, gate, up,
 * down; final norm; lm_head unless tied — tied: the final norm comes right after the embedding, in its
 * unit). The biases follow v_proj so that each rank's [bq | bk | bv] slices are one vector, as its [Wq;
 * Wk; Wv] slices are one matrix (layers/llama.c). Writes at most cap specs to out (may be NULL) and
 * returns the count, which is (9 + 3 qkv_bias + 2 qk_norm) * layers + 2 (+1 untied). The one list both
 * the model and checkpoint tools use; a Llama config's list is exactly what it always was. */
int llama_tensor_specs(const llama_config *c, llama_tensor_spec *out, int cap);

/* Where a tensor lives on one rank of a tp x dp mesh: its TP slice and, of that slice, its FSDP
 * shard. A pure function of (config, spec, mesh coordinates): the model builds its parameter table
 * from it and the offline tools (reshard/) lay out checkpoints for any mesh with it, so an offline
 * result is exactly what a job on that mesh saves. */
typedef struct llama_placement {
    int64_t tp_off[2];         /* TP slice: offset in the global index space ... */
    int64_t tp_shape[2];       /* ... and shape in memory (vocab slices may include padding rows) */
    int64_t valid_rows;        /* rows of the TP slice inside the global tensor */
    int64_t shard_row0, shard_rows;   /* the FSDP shard: rows of the TP slice */
} llama_placement;

/* The placement of spec on rank (tp_rank, dp_rank) of a tp x dp mesh. */
void llama_place(const llama_config *c, const llama_tensor_spec *spec, int tp, int tp_rank, int dp,
                 int dp_rank, llama_placement *out);
/* The box of the global tensor that a rank's shard covers: the shard's rows inside the real tensor
 * (vocab padding clipped), all of the slice's columns. Returns its row count (0: an empty shard or
 * only padding rows). What a rank loads; it also saves it if llama_disk_writer says so. */
int64_t llama_disk_box(const llama_placement *pl, int64_t off[2], int64_t shape[2]);
/* Whether tp rank tp_rank writes its box of a tensor split so: replicated tensors are written by tp
 * rank 0 only, so every element of a checkpoint has exactly one writer. */
static inline int llama_disk_writer(llama_tp_split split, int tp_rank) {
    return split != LLAMA_REPLICATED || tp_rank == 0;
}
/* The seeded initial values of the box (off, shape) of spec's global tensor, row-major into out:
 * normal(0, initializer_range) from the counter-based RNG keyed by (seed, name, global element index)
 * for matrices, 1 for norm weights, 0 for biases (spec->init). Any box of any tensor can be generated on its own, and the
 * values do not depend on the mesh. */
void llama_init_box(const llama_config *c, const llama_tensor_spec *spec, uint64_t seed, const int64_t off[2],
                    const int64_t shape[2], float *out);
/* Whether the model can be laid out on a tp x dp mesh (num_key_value_heads % tp, intermediate_size
 * >= tp, tp and layer limits, dp >= 1); MP_EINPUT naming the field otherwise. Checks nothing that
 * only matters for running (sequence length, micro-batch). */
mp_code llama_check_layout(const llama_config *c, int tp, int dp, mp_err *err);

typedef struct llama_param {
    char name[96];             /* HF name */
    int ndim;                  /* 1 or 2 */
    int64_t gshape[2];         /* global logical shape (vocab unpadded) */
    llama_tp_split split;
    int64_t tp_off[2];         /* TP slice: offset in the global index space ... */
    int64_t tp_shape[2];       /* ... and shape in memory (vocab slices may include padding rows) */
    int64_t valid_rows;        /* rows of the TP slice inside the global tensor (< tp_shape[0] if padded) */
    int64_t shard_row0, shard_rows;   /* this rank's FSDP shard: rows of the TP slice */
    int unit;                  /* FSDP unit it belongs to */
    int decay;                 /* weight decay applies: matrices only (not norm weights, not biases) */
    int tp_grad_sum;           /* the gradient is summed over tp by llama_sync_grads (spec's tp_grad_sum) */
    void *full;                /* the gathered TP slice as the ops read it (act_dtype; valid while the unit is live) */
    float *full_grad;          /* its gradient, fp32 */
    float *shard, *shard_grad; /* the local shard: fp32 master weights and their gradient (persistent) */
    void *shard_act;           /* the shard's compute copy (act_dtype): = shard when act_dtype is fp32 */
    float *m, *v;              /* Adam moments of the shard */
} llama_param;

typedef struct llama_options {
    int micro_batch;           /* sequences per forward on this rank */
    int seq_len;
    int sp;                    /* sequence parallel (only meaningful for tp > 1) */
    int reshard_after_forward; /* FSDP: free gathered block weights after forward (ZeRO-3) */
    mp_dtype act_dtype;        /* compute dtype the memory plan assumes (the backend's act_dtype; MP_F32 = 0
                                * by default); llama_create takes the backend's whatever this says */
    int inference;             /* forward only (eval, sample): no gradients and no optimizer moments are
                                * allocated or planned; backward, the optimizer, gradient norms and
                                * llama_zero_grad must not be called on such a model. Its layers share one
                                * set of activation buffers (nothing is kept for a backward) */
    int kv_cache;              /* generation (requires inference, micro_batch 1, no sp): every layer keeps
                                * the keys and values of seq_len positions (the KV cache, its tp rank's kv
                                * heads), and llama_forward_kv runs chunks of at most kv_chunk tokens */
    int kv_chunk;              /* rows of one llama_forward_kv (0: seq_len): what the activations hold */
    int recompute;             /* activation recomputation (llama_recompute; ignored when inference): FULL
                                * keeps each block's input only and runs the block's forward again right before
                                * its backward, into one set of block activations shared by the layers. The
                                * numbers are bitwise those of LLAMA_RECOMPUTE_NONE (same ops on the same
                                * inputs); only memory and time change */
} llama_options;

/* What a training model keeps of each block's forward for its backward (llama_options.recompute). */
typedef enum { LLAMA_RECOMPUTE_NONE = 0, LLAMA_RECOMPUTE_FULL = 1 } llama_recompute;

typedef struct llama_model llama_model;

/* What llama_create allocates on one rank, by allocator category (core/alloc.h), in bytes. */
typedef struct llama_memory_plan {
    int64_t bytes[MP_MEM_NCAT];
    int64_t total;
    int64_t kv_cache;          /* bytes of the KV cache (opt.kv_cache), counted in bytes[MP_MEM_ACTS] */
    int64_t largest_shard;     /* bytes of the largest parameter's fp32 shard (not counted in total: the
                                * size of the commands' per-tensor host buffers, cli/memplan.c) */
    int64_t dp_sum_bytes;      /* bytes of the largest sum over the dp group (a unit's gradients) and */
    int64_t tp_sum_bytes;      /* over the tp group (N x D activations); 0 for a group of one. Not in
                                * total: they size the collectives' scratch (cli/memplan.c) */
} llama_memory_plan;

/* The bytes llama_create would allocate on rank (tp_rank, dp_rank) of a tp x dp mesh on backend be,
 * computed from the same layout code, with every size first checked to fit (MP_EINPUT naming the sizes
 * when the model is beyond any machine's memory, and the config/mesh/backend errors llama_create gives:
 * a head_dim beyond be->attn_max_head_dim). The activations include the backend's own scratch for the
 * backward (be->scratch_bytes), which llama_create reserves. be NULL: a backend without limits or scratch
 * (the CPU's). Allocates only scratch. */
mp_code llama_plan_memory(const llama_config *cfg, const llama_options *opt, const mp_backend *be, int tp,
                          int tp_rank, int dp, int dp_rank, llama_memory_plan *plan, mp_err *err);

/* Checks the config against the mesh (num_key_value_heads % tp, seq_len % tp under SP, ...) and the
 * backend (head_dim within its attention's limit) with messages naming the field, then allocates
 * everything a training step needs, the backend's op scratch included (be->scratch_reserve). */
mp_code llama_create(llama_model **out, const llama_config *cfg, const llama_options *opt, mp_mesh *mesh,
                     mp_backend *be, mp_err *err);
void llama_destroy(llama_model *m);

/* Host bytes llama_init_weights stages a device's shards through (bands of whole rows; at least one
 * row): none on a backend whose buffers are host memory. The memory plan counts it (cli/memplan.c). */
#define LLAMA_INIT_STAGING_BYTES ((int64_t)4 << 20)

/* Initialises every shard from the counter-based RNG keyed by (seed, name, global element index):
 * normal(0, initializer_range) for matrices, 1 for norm weights, 0 for biases. Bitwise identical on every mesh.
 * Zeroes gradients and moments. */
void llama_init_weights(llama_model *m, uint64_t seed);
/* llama_init_weights with a device's staging bound of `staging` bytes instead of LLAMA_INIT_STAGING_BYTES
 * (tests: bands much smaller than a shard give the same bits). */
void llama_init_weights_staged(llama_model *m, uint64_t seed, int64_t staging);

/* Forward on inputs/targets (host, [micro_batch, seq_len] each; targets may be NULL: no loss).
 * Returns the sum of per-token losses over the local micro-batch (0 without targets), summed in double
 * in token order; with targets that costs one device-to-host copy (evaluation, tools). */
double llama_forward(llama_model *m, const int32_t *inputs, const int32_t *targets);

/* Forward of a kv_cache model on the n tokens (host) at positions pos0 .. pos0+n-1 of its one sequence
 * (1 <= n <= kv_chunk, pos0 + n <= seq_len): their keys and values are written into the cache, whose
 * positions 0 .. pos0-1 the earlier calls wrote, and the logits of position pos0+n-1 (only that row) are
 * left for llama_logits (row 0). Prefill: the prompt at pos0 = 0; then one token per call. */
void llama_forward_kv(llama_model *m, const int32_t *tokens, int n, int pos0);

/* The step's device scalars, copied to the host together: a training step reads the device once. */
typedef struct llama_step_sums {
    double loss_sum;           /* losses of the llama_forward_accum calls since llama_sums_reset */
    double grad_sumsq;         /* what llama_grad_sumsq_accum added: this rank's part of |grad|^2 */
} llama_step_sums;

/* Zeroes the model's device scalars (loss sum, gradient sum of squares). */
void llama_sums_reset(llama_model *m);
/* llama_forward with targets (required), but the micro-batch's loss sum (in double, in token order)
 * is added to the device loss scalar instead of being copied to the host, and the tokens go up without
 * a host wait (to_device_async): `uploaded` is recorded after both copies, and the caller must not write
 * inputs or targets (host_alloc memory) until event_sync(uploaded) has returned (llama_train_step
 * double-buffers them so that it seldom waits). */
void llama_forward_accum(llama_model *m, const int32_t *inputs, const int32_t *targets, mp_event uploaded);
/* Adds this rank's sum of squares of the shard gradients to the device scalar (replicated parameters
 * counted on tp rank 0 only, so the world sum counts each element once), in parameter order. */
void llama_grad_sumsq_accum(llama_model *m);
/* Copies both device scalars to the host with ONE to_host. */
void llama_sums_read(llama_model *m, llama_step_sums *out);
/* Backward of the last forward (which must have had targets); see the loss convention above. */
void llama_backward(llama_model *m, float scale);
/* Finishes the gradients of a step after its last micro-batch: all-reduces over tp the gradients of
 * replicated parameters when sequence parallelism made them partial, and of the tp_grad_sum ones (q_norm,
 * k_norm: partial over heads) always. One all-reduce; a no-op on tp = 1, or without SP and q/k norms. */
void llama_sync_grads(llama_model *m);
/* Zeroes the shard gradients. */
void llama_zero_grad(llama_model *m);
/* Global L2 norm of the shard gradients over the whole mesh, each element counted once (one to_host and
 * one world all-reduce; the training step gets it from llama_grad_sumsq_accum and llama_sums_read). */
double llama_grad_norm(llama_model *m);

/* One AdamW update of every local shard (t is the 1-based step, grad_scale the clipping factor);
 * gathered copies become stale and are gathered again on next use. */
void llama_step(llama_model *m, const mp_adamw_hparams *hp, double lr, int64_t t, float grad_scale);
/* Tells the model its shards were written from outside (checkpoint load, init): the compute copies are
 * made again from the fp32 masters, and gathered copies are stale. */
void llama_shards_changed(llama_model *m);

int llama_num_params(const llama_model *m);
llama_param *llama_param_at(llama_model *m, int i);
/* Elements of a parameter's local shard. */
static inline int64_t llama_shard_numel(const llama_param *p) { return p->shard_rows * p->tp_shape[1]; }
/* llama_disk_box of a parameter of model m on this rank. */
int64_t llama_param_disk_box(const llama_model *m, const llama_param *p, int64_t off[2], int64_t shape[2]);

/* The logits of the last forward (valid until llama_backward, which turns them into their gradient):
 * rows [row0, row0 + nrows) of the local [micro_batch*seq_len, v_local] logits (a kv_cache model: [1,
 * v_local], the last position of the last llama_forward_kv), copied to the host as fp32
 * into host_dst[nrows * v_local] (host_dst NULL: only the shape). Vocab columns [*v_start, *v_start +
 * v_local) of which the first *v_valid are real vocabulary. */
void llama_logits(const llama_model *m, float *host_dst, int64_t row0, int64_t nrows, int *v_start, int *v_local,
                  int *v_valid);

const llama_config *llama_model_config(const llama_model *m);
mp_backend *llama_backend(const llama_model *m);
mp_mesh *llama_mesh(const llama_model *m);

#endif
