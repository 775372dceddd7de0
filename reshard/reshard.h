/*
 * reshard/reshard.h — the one conversion engine: every conversion of a checkpoint is box intersection.
 *
 * A **source** reads any box of a named global fp32 tensor (a meshpoint checkpoint through ckpt_read,
 * the seeded initialisation, which the counter-based RNG can generate box by box, or a Hugging Face
 * safetensors directory: hf_source.c). A **sink** takes boxes of named global tensors for the rank
 * files of a target layout (a meshpoint checkpoint laid out for a target mesh) or for a safetensors
 * directory (hf_sink.c). Both are small tables of function pointers (ggml-style), so `reshard`, `init`,
 * `export` and `import` are the same engine with other ends.
 *
 * The **target layout** of a mesh is a list of boxes (file rank, tensor, offset, shape), computed by
 * the model's own placement function (layers/: llama_place + llama_disk_box), so an offline result is
 * exactly what a job on that mesh would save. The **planner** hands each box to the sink with a fill
 * callback; the sink pulls the box in row bands of at most max_memory / 4 bytes, each band read from
 * the source (which reads only the saved tiles the band meets) and written before the next: memory
 * is bounded by the band and the reader's scratch, whatever the model size.
 *
 * Several processes (mpirun -np K): target rank r's file is written by worker r % K; the sink's
 * commit is collective over the K workers. The tensor data does not depend on K.
 */
#ifndef MP_RESHARD_H
#define MP_RESHARD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "ckpt/ckpt.h"
#include "core/comm.h"
#include "core/error.h"
#include "layers/llama_config.h"
#include "reshard/dcp_names.h"

/* ------------------------------------------------------------------------------------ source */

typedef struct rs_source rs_source;
struct rs_source {
    const char *kind;   /* "checkpoint", "init", "hf" */
    /* Reads the box (off, shape) of global tensor `name` (ndim dims) as fp32 row-major into buf.
     * read and prefetch may be called on the checkpoint sink's helper thread (ckpt_save_opts
     * .fill_any_thread): one call at a time, never while another thread calls this source. */
    mp_code (*read)(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape, float *buf,
                    mp_err *e);
    /* For --plan: the bytes reading the box would fetch, and the source files it touches (a callback per
     * (file, bytes), may be NULL). MP_OK with *bytes 0 for sources without files. */
    mp_code (*plan)(rs_source *s, const char *name, int ndim, const int64_t *off, const int64_t *shape,
                    void (*cb)(void *ctx, const char *file, int64_t bytes), void *ctx, int64_t *bytes, mp_err *e);
    /* Optional (may be NULL): the box (off, shape) of name will be read next; start fetching it. */
    void (*prefetch)(rs_source *s, const char *name, const int64_t *off, const int64_t *shape);
    /* I/O so far: bytes fetched from files and bytes asked for (0, 0 for generated sources). */
    void (*io)(rs_source *s, int64_t *bytes_read, int64_t *bytes_needed);
    void (*close)(rs_source *s);
    void *impl;
};

/* A source over the checkpoint in directory dir; scratch bounds the reader's partial-read buffer. */
mp_code rs_source_ckpt(rs_source **out, const char *dir, size_t scratch, mp_err *e);
/* The checkpoint reader behind a checkpoint source (metadata, tensor list). */
ckpt_reader *rs_source_ckpt_reader(rs_source *s);
/* A source of the seeded initialisation of the Llama model of cfg: model/<name> are the initial
 * weights (llama_init_box), optim/... moments zero. */
mp_code rs_source_init(rs_source **out, const llama_config *cfg, uint64_t seed, mp_err *e);

/* A source over a Hugging Face directory (reshard/hf_source.c): model.safetensors, or
 * model.safetensors.index.json and the shards its weight_map names (every header validated, a tensor
 * in two shards or missing from the shard the index names refused). Tensor model/<name> is the HF
 * tensor <name>, converted to fp32 from F32, BF16 or F16 as boxes are read (by ranges, never whole
 * files). Names go through the family map of cfg, the model's config
 * (layers/family_hf.h): a tensor the family fuses in HF (Phi-3's q_proj, k_proj, v_proj in qkv_proj;
 * gate_proj, up_proj in gate_up_proj) is read as its row range of the fused tensor. */
mp_code rs_source_hf(rs_source **out, const char *dir, const llama_config *cfg, mp_err *e);
/* Checks an HF source against the model of the config it was opened with: every tensor
 * of the model present (through the family map) with its shape — a fused tensor with all of its parts'
 * rows — and a readable dtype; no tensor the model would not use (rotary_emb.inv_freq buffers and, with
 * tied embeddings, lm_head.weight are ignored, as transformers does). MP_EINPUT naming the tensor, the
 * file and, for a fused tensor, the family and its parts. */
mp_code rs_source_hf_check(rs_source *s, mp_err *e);

/* A source over one GGUF file (reshard/gguf_source.c, docs/GGUF.md "Import"): the model from its metadata (the
 * HF config.json text it implies into *config_json, malloc'd, parsed into *cfg by the one config parser), every
 * tensor of the model checked present with its shape and a type import reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1;
 * another refused naming the tensor and the type), none extra. model/<hf name> is read as the GGUF tensor
 * rs_gguf_name gives (the llama architecture's q/k rows un-permuted, Phi-3's fused rows), by the blocks the box
 * needs, dequantized as ggml does. An architecture other than llama, qwen2, qwen3, phi3 is refused by name. */
typedef struct gguf_file gguf_file;
mp_code rs_source_gguf(rs_source **out, const char *path, llama_config *cfg, char **config_json, mp_err *e);
/* The parsed file behind a GGUF source (its tokenizer metadata). */
const gguf_file *rs_source_gguf_file(rs_source *s);

/* -------------------------------------------------------------------------------------- sink */

typedef struct rs_sink rs_sink;
struct rs_sink {
    const char *kind;   /* "checkpoint", "hf" */
    /* Takes one box of global tensor name (fp32) for the file of target rank file_rank; its data will
     * be pulled through fill(ctx, ...) in row bands before commit returns. */
    mp_code (*add)(rs_sink *s, int file_rank, const char *name, int ndim, const int64_t *gshape, const int64_t *off,
                   const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e);
    mp_code (*meta)(rs_sink *s, const char *key, const char *value, mp_err *e);
    /* Carries a whole file (a tokenizer file) of bytes data[0..n) into the output under name: a
     * checkpoint's carried file (ckpt_save_file), a file of the HF directory. Before commit. */
    mp_code (*file)(rs_sink *s, const char *name, const void *data, size_t n, mp_err *e);
    /* Collective over the workers: writes every file, then commits the whole output atomically. */
    mp_code (*commit)(rs_sink *s, mp_err *e);
    void (*free)(rs_sink *s);
    void *impl;
};

/* A sink writing a meshpoint checkpoint of format_version version (ckpt_save_opts.format_version; 0: the
 * default) to exactly dir (dir.partial first, renamed at the commit; replace: an existing dir is swapped out
 * only at that rename) for a target job of world_size ranks, over the workers' communicator. band_bytes
 * bounds the write buffer. Collective. */
mp_code rs_sink_ckpt(rs_sink **out, mp_comm *workers, const char *dir, int64_t step, int world_size, int replace,
                     size_t band_bytes, int zstd_level, int version, mp_err *e);

/* A directory sink's destination check before anything is written: MP_EINPUT when dir exists and replace
 * is not set (naming --force), or when it exists and is not a directory. */
mp_code rs_out_dir_check(const char *dir, int replace, mp_err *e);
/* Publishes a finished directory sink's output: fsyncs partial, renames it to dir, or with dir present
 * swaps it in (mp_fs_swap_dirs) and removes the old one after; what names the sink in a warning. A
 * failure leaves dir as it was. */
mp_code rs_publish_dir(const char *partial, const char *dir, const char *what, mp_err *e);

/* A sink writing a DCP directory at dir that torch.distributed.checkpoint.load reads: each box one chunk of
 * the tensor rs_dcp_name (reshard/dcp_names.h) gives under names' spelling (HF or torchtitan), in __R_0.distcp of its target rank R (a torch.save record each), dtype
 * "F32" or "BF16", pulled in row bands of at most band_bytes of fp32; .metadata last; AdamW's per-parameter
 * step and train_state.step from step (-1: none). Written into dir.partial and published with
 * rs_publish_dir (replace: an existing dir is swapped out only then). Single process. */
mp_code rs_sink_dcp(rs_sink **out, const char *dir, const llama_config *cfg, rs_dcp_names names, const char *dtype,
                    int64_t step, size_t band_bytes, int replace, mp_err *e);

/* A sink writing one GGUF file at path that llama.cpp loads (reshard/gguf_sink.c, docs/GGUF.md): whole model/
 * tensors (the rs_hf_layout boxes) under llama.cpp's names and layout for cfg's family, 2-D weights as dtype
 * ("f32", "f16", "bf16", "q8_0"), norms and biases f32, pulled in row bands of at most band_bytes of fp32;
 * the architecture's metadata (general.name: name). Written to path.partial and renamed over path at the
 * commit. Single process; meta() and file() take nothing. */
typedef struct gguf_writer gguf_writer;
mp_code rs_sink_gguf(rs_sink **out, const char *path, const llama_config *cfg, const char *dtype, const char *name,
                     size_t band_bytes, mp_err *e);
/* llama.cpp's tensor name of an HF tensor (model.layers.3.self_attn.q_proj.weight -> blk.3.attn_q.weight) into
 * out: the one name map, the export's and the import's; -1 for a name the map does not know. */
int rs_gguf_name(const char *hf, char *out, size_t cap);
/* The architecture llama.cpp runs family f as (llama for Llama and Mistral, qwen2, qwen3, phi3). */
const char *rs_gguf_arch(llama_family f);
/* The GGUF sink's writer, for more metadata (the tokenizer's keys) before the commit. */
gguf_writer *rs_sink_gguf_writer(rs_sink *s);
/* After the commit: the written file read back (gguf_w_verify). */
mp_code rs_sink_gguf_verify(rs_sink *s, mp_err *e);

/* ------------------------------------------------------------------------------ target layout */

typedef struct rs_box {
    int file_rank;                 /* target rank whose file holds the box */
    char name[128];                /* tensor name in the checkpoint (model/..., optim/exp_avg/...) */
    int ndim;
    int64_t gshape[2], off[2], shape[2];
} rs_box;

/* Bytes of a box's data (fp32). */
static inline int64_t rs_box_bytes(const rs_box *b) { return 4 * b->shape[0] * (b->ndim == 2 ? b->shape[1] : 1); }

/* Every box a tp x dp job saves for the model of cfg, in (rank, table) order: parameters and, unless
 * model_only, both Adam moments. *boxes is malloc'd. MP_EINPUT if the model cannot be laid out on that
 * mesh (llama_check_layout). */
mp_code rs_target_layout(const llama_config *cfg, int tp, int dp, int model_only, rs_box **boxes, int *n,
                         mp_err *e);

/* Groups the target layout's rank files (the n boxes of rs_target_layout, in rank order): the boxes of
 * ranks r .. r + ranks_per_file - 1 (r a multiple of ranks_per_file) go into rank r's file, as a training
 * job saving with --ckpt-files N writes them (docs/FORMAT.md "Files of several ranks"). 1: unchanged. */
void rs_group_files(rs_box *boxes, int n, int ranks_per_file);
/* The number of distinct files the n boxes go into (boxes of one file adjacent, as the layout gives them). */
int rs_num_files(const rs_box *boxes, int n);

/* A sink writing a Hugging Face directory at dir (reshard/hf_sink.c): config.json (keys transformers
 * 4.x and 5.x read), generation_config.json, and model.safetensors, or model-0000i-of-0000N.safetensors
 * + model.safetensors.index.json when the data exceeds max_shard_bytes. Takes whole model/<hf name>
 * tensors (file_rank 0) and writes them as <hf name> in add order, dtype "F32" or "BF16" (round to
 * nearest even), pulling each in row bands of at most band_bytes of fp32. Written into dir.partial and
 * renamed at the commit (replace: an existing dir is swapped out only then). Single process; meta()
 * ignores checkpoint metadata (an HF directory has no place for it). */
mp_code rs_sink_hf(rs_sink **out, const char *dir, const llama_config *cfg, const char *dtype,
                   int64_t max_shard_bytes, size_t band_bytes, int replace, mp_err *e);
/* The layout an HF sink takes: one whole-tensor box of every model/ tensor of cfg, in table order. */
mp_code rs_hf_layout(const llama_config *cfg, rs_box **boxes, int *n, mp_err *e);

/* ------------------------------------------------------------------------------------ engine */

typedef struct rs_stats {
    int64_t boxes, bytes_written;      /* this worker's */
    int64_t bytes_read, bytes_needed;  /* from the source, this worker's */
    int64_t largest_band;              /* bytes of the largest band held in memory */
    double seconds;
} rs_stats;

/* Moves every box of the target layout whose file this worker writes (the k-th distinct file, counted
 * in box order, goes to worker k % nworkers)
 * from src to sink, under the band bound given to the sink, and commits the sink (collective over the
 * workers; metadata must be set before). A failed read names the tensor, region and file. */
mp_code rs_run(rs_source *src, rs_sink *sink, const rs_box *boxes, int n, int worker, int nworkers, rs_stats *st,
               mp_err *e);

/* The plan of a conversion: per target rank file (of world ranks, ranks_per_file to a file: the file
 * rank and, in JSON, "ranks_in_file"), the source files and bytes it reads and the bytes it writes;
 * totals. Printed as text or (json) one JSON object to out. *read_total / *write_total get
 * the totals (may be NULL). */
mp_code rs_plan_print(rs_source *src, const rs_box *boxes, int n, int world, int ranks_per_file, size_t max_band,
                      int json, FILE *out, int64_t *read_total, int64_t *write_total, mp_err *e);

#endif
