/*
 * tokenizer/tok_gguf.h — a model's tokenizer as GGUF's tokenizer.ggml.* keys hold it, and back: what
 * `export --format gguf` writes and what `import model.gguf` carries as a tokenizer.json. Public names are
 * mp_tok_gguf_*. docs/GGUF_TOKENIZER.md is the authority on what is written and why.
 *
 * mp_tok_gguf_from_json computes what llama.cpp's convert_hf_to_gguf.py writes for the same HF files (its
 * _set_vocab_gpt2 / _set_vocab_llama_hf and gguf-py's SpecialVocab), with two documented differences, both
 * so that llama.cpp's tokenizer gives `tokenizers`' ids: the "llama" (sentencepiece) model's scores, which
 * the converter sets to -1000 for every token of a tokenizer.json-only model, are the merge ranks, and its
 * unk token is UNKNOWN (the converter: NORMAL).
 * mp_tok_gguf_to_json is the inverse: a tokenizer.json (+ tokenizer_config.json) that `tokenizers` (and so
 * mp_tok) encodes to the ids llama.cpp gives on the GGUF's vocabulary.
 */
#ifndef MP_TOK_GGUF_H
#define MP_TOK_GGUF_H

#include <stdint.h>
#include "core/error.h"

/* llama.cpp's token types (gguf.TokenType). */
enum {
    MP_GGUF_TOK_NORMAL = 1, MP_GGUF_TOK_UNKNOWN = 2, MP_GGUF_TOK_CONTROL = 3, MP_GGUF_TOK_USER_DEFINED = 4,
    MP_GGUF_TOK_UNUSED = 5, MP_GGUF_TOK_BYTE = 6
};

/* What the tokenizer.ggml.* keys hold; a member that is not written is -1 (ids, flags) or NULL. */
typedef struct mp_tok_gguf_meta {
    char model[8];              /* tokenizer.ggml.model: "llama" (sentencepiece) or "gpt2" (byte-level BPE) */
    char *pre;                  /* tokenizer.ggml.pre: llama.cpp's pre-tokenizer name ("default", "llama-bpe", ...) */
    int64_t n_tokens;
    char **tokens;              /* tokenizer.ggml.tokens, n_tokens UTF-8 strings */
    int32_t *token_type;        /* tokenizer.ggml.token_type, n_tokens */
    float *scores;              /* tokenizer.ggml.scores, n_tokens ("llama" only; NULL for "gpt2") */
    int64_t n_merges;
    char **merges;              /* tokenizer.ggml.merges, "left right" ("gpt2" only; NULL for "llama") */
    int32_t bos, eos, unk, sep, pad, cls, mask;  /* tokenizer.ggml.{bos,eos,unknown,seperator,padding,cls,mask}_token_id
                                                 * (llama.cpp's spelling "seperator"), -1: not written */
    int add_bos, add_eos, add_sep;  /* tokenizer.ggml.add_{bos,eos,sep}_token, -1: not written, else 0/1 */
    int add_space_prefix;       /* tokenizer.ggml.add_space_prefix, -1: not written, else 0/1 */
    char *chat_template;        /* tokenizer.chat_template, NULL: not written */
} mp_tok_gguf_meta;

/* Fills *out from the text of tokenizer.json (tokenizer_json), tokenizer_config.json (NULL: none) and the
 * model's config.json (NULL: none; its vocab_size pads the "gpt2" token list with "[PADi]" UNUSED tokens,
 * its {bos,eos,unk,pad}_token_id fill what the tokenizer files leave unset). MP_EINPUT naming what is
 * not representable (a model other than BPE, a pre-tokenizer llama.cpp has no name for, a sentencepiece
 * layout without byte fallback, ...). On error *out holds nothing to free. */
mp_code mp_tok_gguf_from_json(const char *tokenizer_json, const char *tokenizer_config_json,
                              const char *model_config_json, mp_tok_gguf_meta *out, mp_err *err);

/* A tokenizer.json (*json_out) and tokenizer_config.json (*config_out), mp_xmalloc'd NUL-terminated text,
 * that encode as llama.cpp does with m's vocabulary. MP_EINPUT naming what has no tokenizer.json form (a
 * pre name this module does not know, a token type out of range, a merge naming no token). */
mp_code mp_tok_gguf_to_json(const mp_tok_gguf_meta *m, char **json_out, char **config_out, mp_err *err);

/* Frees what *m holds and zeroes it (the ids and flags become -1): also the way to start an empty one. */
void mp_tok_gguf_meta_free(mp_tok_gguf_meta *m);

#endif
