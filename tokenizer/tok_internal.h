/*
 * tokenizer/tok_internal.h — the pieces of an mp_tok shared by the files of tokenizer/ (not public).
 *
 * Text flows: input bytes -> valid UTF-8 (utf8.c) -> split on added tokens (tokenizer.c) -> each other
 * segment normalized (normalize.c) -> pre-tokenized into words (pretok.c) -> each word through the BPE
 * model (bpe.c) -> ids. Decoding: ids -> token strings -> the decoder chain (decode.c) -> text.
 * Strings inside are (pointer, length) pairs of UTF-8 in a growable byte buffer (mp_tok_buf).
 */
#ifndef MP_TOK_INTERNAL_H
#define MP_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <cjson/cJSON.h>
#include "tokenizer/tokenizer.h"

/* ---- growable byte buffer ---- */
typedef struct mp_tok_buf {
    char *p;
    size_t n, cap;
} mp_tok_buf;
void mp_tok_buf_put(mp_tok_buf *b, const void *s, size_t n);
void mp_tok_buf_free(mp_tok_buf *b);

/* ---- string -> int32 hash map (open addressing; keys copied) ---- */
typedef struct mp_tok_map {
    char **keys;
    uint32_t *klen;
    int32_t *vals;
    size_t cap, n;   /* cap a power of two */
} mp_tok_map;
void mp_tok_map_put(mp_tok_map *m, const char *k, size_t n, int32_t v);
/* The value of key k[0..n), or -1. */
int32_t mp_tok_map_get(const mp_tok_map *m, const char *k, size_t n);
void mp_tok_map_free(mp_tok_map *m);
uint64_t mp_tok_hash(const void *p, size_t n);

/* ---- small helpers (map.c) ---- */
/* Appends s[0..n) to out with every occurrence of the non-empty pat replaced by rep. */
void mp_tok_replace(const char *s, size_t n, const char *pat, const char *rep, mp_tok_buf *out);
/* Grows the array *v of elem-byte items (*cap of them, new ones zeroed) so that index n fits. */
void mp_tok_grow(void **v, int *cap, int n, size_t elem);
/* The string member name of JSON object j, or NULL (j NULL, member missing or not a string). */
const char *mp_tok_json_str(const cJSON *j, const char *name);
/* A list of pipeline stages (normalizers, pre-tokenizers or decoders) of elem bytes each. */
typedef struct mp_tok_stages {
    void *v;
    int n, cap;
    size_t elem;
} mp_tok_stages;
/* Fills the zeroed slot elem from stage j of the given "type"; may leave it partly filled on error. */
typedef mp_code (*mp_tok_stage_fn)(const cJSON *j, const char *type, void *elem, mp_err *err);
/* Parses j (absent/null: no stage; one stage; or a "Sequence" whose array member `member` lists stages,
 * nested Sequences flattened) into *out, *n (elem bytes each) through one; what names the kind in
 * messages. On error everything parsed is freed with free_fn and *out, *n are NULL, 0. */
mp_code mp_tok_stages_parse(const cJSON *j, const char *what, const char *member, size_t elem, mp_tok_stage_fn one,
                            void (*free_fn)(void *v, int n), void **out, int *n, mp_err *err);

/* ---- UTF-8 (utf8.c) ---- */
/* Length of the UTF-8 sequence starting at s[0] if it is valid and complete within n bytes, else 0. */
int mp_tok_utf8_len(const unsigned char *s, size_t n);
/* Appends s[0..n) to out with every maximal invalid subpart replaced by U+FFFD (Python's "replace"). */
void mp_tok_utf8_sanitize(const char *s, size_t n, mp_tok_buf *out);
/* Appends code point c as UTF-8. */
void mp_tok_utf8_put(mp_tok_buf *out, uint32_t c);

/* ---- Unicode normalization (unorm.c; tables generated in unorm_data.c) ---- */
typedef enum { MP_UNORM_NFD, MP_UNORM_NFC, MP_UNORM_NFKD, MP_UNORM_NFKC } mp_unorm_form;
/* Appends the normalization form of valid UTF-8 s[0..n) to out, as `tokenizers` computes it (Unicode 9.0). */
void mp_tok_unorm(mp_unorm_form form, const char *s, size_t n, mp_tok_buf *out);

/* ---- normalizers (normalize.c) ---- */
typedef enum { MP_NORM_PREPEND, MP_NORM_REPLACE, MP_NORM_UNICODE } mp_norm_kind;
typedef struct mp_norm {
    mp_norm_kind kind;
    char *a, *b;          /* PREPEND: a = text; REPLACE: a = pattern (literal), b = content */
    mp_unorm_form form;   /* UNICODE: NFC, NFD, NFKC or NFKD */
} mp_norm;
/* Parses a "normalizer" value (NULL / JSON null: none) into *out, *n; MP_EINPUT naming an unsupported type. */
mp_code mp_tok_norm_parse(const cJSON *j, mp_norm **out, int *n, mp_err *err);
/* Normalizes seg into out (cleared first); no_prepend: skip Prepend (a continued text). */
void mp_tok_norm_apply(const mp_norm *nv, int n, const char *seg, size_t len, int no_prepend, mp_tok_buf *out);
void mp_tok_norm_free(void *nv, int n);

/* ---- pre-tokenizers (pretok.c) ---- */
typedef enum { MP_PRE_SPLIT, MP_PRE_BYTELEVEL, MP_PRE_METASPACE } mp_pre_kind;
typedef struct mp_pre {
    mp_pre_kind kind;
    void *re;              /* pcre2_code * (SPLIT, and BYTELEVEL with use_regex) */
    int removed;           /* SPLIT: behavior "Removed" (else "Isolated") */
    int add_prefix_space;  /* BYTELEVEL */
    char *repl;            /* METASPACE: the replacement ("▁") */
    int prepend;           /* METASPACE: 0 never, 1 first, 2 always */
    int split;             /* METASPACE: split on the replacement */
} mp_pre;
mp_code mp_tok_pre_parse(const cJSON *j, mp_pre **out, int *n, mp_err *err);
void mp_tok_pre_free(void *pv, int n);
/* Splits a normalized segment into words: the word boundaries go to *cuts (offsets into out's text,
 * ncuts+1 of them, first 0, last out->n); the words' text (after ByteLevel/Metaspace mapping) in out.
 * first: the segment starts the text (Metaspace "first"). */
typedef struct mp_pre_words {
    mp_tok_buf text;
    size_t *cuts;
    size_t ncuts, cap;
} mp_pre_words;
void mp_tok_pre_apply(const mp_pre *pv, int n, const char *seg, size_t len, int first, mp_pre_words *out,
                      mp_tok_buf *scratch);
void mp_tok_pre_words_free(mp_pre_words *w);
/* The byte code point c stands for under ByteLevel, or -1. */
int mp_tok_bytelevel_byte(uint32_t c);

/* ---- BPE model (bpe.c) ---- */
typedef struct mp_bpe {
    mp_tok_map vocab;          /* token text -> id */
    char **id_text;            /* id -> token text (NULL for holes) */
    int64_t nid;               /* size of id_text */
    mp_tok_map merges;         /* "idA idB" packed as 8 bytes -> rank */
    int32_t *merge_new;        /* rank -> merged id */
    int64_t nmerges;
    int32_t unk;               /* -1 none */
    int fuse_unk, byte_fallback, ignore_merges;
    int32_t byte_id[256];      /* byte_fallback: id of "<0xNN>", -1 missing */
} mp_bpe;
/* Parses model (type BPE); MP_EINPUT naming unsupported types/options and bad merges. */
mp_code mp_tok_bpe_parse(const cJSON *model, mp_bpe *b, mp_err *err);
void mp_tok_bpe_free(mp_bpe *b);
/* Per-thread BPE scratch and cache. */
typedef struct mp_bpe_scratch mp_bpe_scratch;
mp_bpe_scratch *mp_tok_bpe_scratch_new(void);
void mp_tok_bpe_scratch_free(mp_bpe_scratch *s);
/* Appends the ids of word w[0..n) to out. */
void mp_tok_bpe_word(const mp_bpe *b, mp_bpe_scratch *s, const char *w, size_t n, mp_tok_ids *out);

/* ---- decoders (decode.c) ---- */
typedef enum { MP_DEC_BYTELEVEL, MP_DEC_METASPACE, MP_DEC_REPLACE, MP_DEC_BYTEFALLBACK, MP_DEC_FUSE,
               MP_DEC_STRIP } mp_dec_kind;
typedef struct mp_dec {
    mp_dec_kind kind;
    char *a, *b;           /* REPLACE: pattern, content; METASPACE: a = replacement; STRIP: a = content char */
    int start, stop;       /* STRIP */
    int prepend;           /* METASPACE: prepend_scheme != never */
} mp_dec;
mp_code mp_tok_dec_parse(const cJSON *j, mp_dec **out, int *n, mp_err *err);
void mp_tok_dec_free(void *dv, int n);
/* Runs the decoder chain over ntok token strings and returns the text (mp_xmalloc, NUL-terminated). */
char *mp_tok_dec_run(const mp_dec *dv, int n, const char **toks, int64_t ntok, size_t *len);
/* 1 if the chain has a ByteFallback step and token string s is one of its "<0xNN>" byte tokens. */
int mp_tok_dec_is_fallback_byte(const mp_dec *dv, int n, const char *s);

/* ---- added tokens (tokenizer.c) ---- */
typedef struct mp_added {
    char *content;
    size_t len;
    int32_t id;
    int special, lstrip, rstrip;
    int normed;                /* normalized=true in a tokenizer with a normalizer: matched in normalized text */
    char *match;               /* what is matched: content, or its normalized form when normed */
    size_t mlen;
} mp_added;

struct mp_tok {
    char path[1200];
    mp_norm *norm; int nnorm;
    mp_pre *pre; int npre;
    mp_dec *dec; int ndec;
    mp_bpe bpe;
    mp_added *added; int nadded;
    mp_tok_map added_map;      /* content -> index into added */
    int32_t *bos, *eos; int nbos, neos;
    int32_t eos_id;
    int64_t vocab_size;
    const char **id_text;      /* [vocab_size] the text of each id (added tokens over the vocab); NULL holes */
    unsigned char *id_special; /* [vocab_size] 1 for special added tokens */
    int32_t *first_byte[2][256]; /* [normed] added token indices by the match's first byte, longest first,
                                  * -1 terminated: [0] matched in the raw text, [1] in normalized text */
    int has_normed;
};

/* ---- GGUF (tok_gguf.c) ---- */
/* The Split pattern (NULL: ByteLevel's own) and normalizer type (NULL: none) of llama.cpp pre name; 0 if unknown. */
int mp_tok_gguf_pre_layout(const char *name, const char **pattern, const char **normalizer);

#endif
