/*
 * reshard/hf_items.h — the whole tensors of a family's HF checkpoint, as the sinks that write whole
 * tensors (reshard/hf_sink.c: safetensors; reshard/gguf_sink.c: GGUF) collect them from the engine.
 *
 * The engine adds meshpoint tensors (one per projection); a family that fuses projections in its HF
 * checkpoint (Phi-3's self_attn.qkv_proj and mlp.gate_up_proj: layers/family_hf.h — llama.cpp's phi3
 * tensors attn_qkv and ffn_up fuse the same rows) gets the adds that map to one HF name as one item of up
 * to three parts, each the row range of its meshpoint tensor. A band of an item is filled part by part:
 * one band of memory, whatever the fusion.
 */
#ifndef MP_HF_ITEMS_H
#define MP_HF_ITEMS_H

#include <stdint.h>
#include "ckpt/ckpt.h"
#include "core/error.h"
#include "layers/llama_config.h"

/* One meshpoint tensor in an HF tensor: rows [row0, row0 + rows) of it, pulled through fill(ctx). */
typedef struct hf_part {
    ckpt_fill_fn fill;
    void *ctx;
    int64_t row0, rows;
} hf_part;

typedef struct hf_item {
    char name[128];       /* HF name */
    int ndim;
    int64_t shape[2];     /* shape[1] is 1 for a 1-D tensor */
    int nparts;           /* 1, or the parts of a fused tensor added so far (in add order) */
    hf_part part[3];
    const char *fused;    /* NULL, or what a fused tensor holds (for messages) */
} hf_item;

typedef struct rs_hf_items {
    llama_config cfg;     /* the model: its family's map */
    const char *who;      /* "HF export", "GGUF export": messages */
    int n, cap;
    hf_item *it;          /* in add order (a fused tensor where its first part came) */
    mp_code failed;       /* an add error, reported again by the sink's commit */
    mp_err err;
} rs_hf_items;

/* rs_sink add for whole model/ tensors (file_rank 0): records name as (a part of) the HF tensor the
 * family map names. MP_EINTERNAL for a box that is not a whole model/ tensor or does not fit its fused
 * tensor; the first error is also kept in x->failed / x->err. */
mp_code rs_hf_items_add(rs_hf_items *x, int file_rank, const char *name, int ndim, const int64_t *gshape,
                        const int64_t *off, const int64_t *shape, ckpt_fill_fn fill, void *ctx, mp_err *e);
/* Checks that every item's parts tile its rows exactly (a fused tensor got all of its parts) and
 * orders them by row. */
mp_code rs_hf_items_check(rs_hf_items *x, mp_err *e);
/* Fills the band (off, shape) of item t (whole rows) into x, part by part. */
mp_code rs_hf_item_fill(const hf_item *t, const int64_t *off, const int64_t *shape, float *x, mp_err *e);
/* Rows per band of item t (ctx is rs_hf_items_stream's): at least 1, at most band_elems / t->shape[1]. */
typedef int64_t (*rs_hf_rows_fn)(void *ctx, const hf_item *t);
/* Takes rows [r0, r0 + rows) of item t, filled in x (rows x t->shape[1] fp32); x is the sink's until it
 * returns. Runs on the worker thread: it must not touch HDF5 or anything the filling thread changes. */
typedef mp_code (*rs_hf_put_fn)(void *ctx, const hf_item *t, int64_t r0, int64_t rows, const float *x, mp_err *e);

/* Streams items [a, b) of x, in order, to put in row bands of rows_fn(ctx, t) rows (NULL: band_elems /
 * t->shape[1]) through two buffers of band_elems fp32: band k goes to put on the ckpt/read_pipe.c worker
 * while this thread fills band k+1 from the source (HDF5 stays on it). MP_FAULT=ckpt_serial_fill: one
 * buffer, serial (put on this thread). put sees the same bands in the same order either way. The first
 * error (a fill's, else a put's) is returned; no put runs after it. */
mp_code rs_hf_items_stream(const rs_hf_items *x, int a, int b, int64_t band_elems, rs_hf_rows_fn rows_fn, rs_hf_put_fn put,
                           void *ctx, mp_err *e);
void rs_hf_items_free(rs_hf_items *x);

#endif
