/*
 * tokenizer/tokenizer.h — a Hugging Face `tokenizer.json` tokenizer in C (the BPE model, as Llama-family
 * models use it). Public names are mp_tok_*.
 *
 * Supported (docs/TOKENIZER.md is the authority): model BPE (byte-level with a regex pre-tokenizer, GPT-2
 * and Llama 3; sentencepiece-style with "▁" and byte_fallback, Llama 2 / TinyLlama / Code Llama),
 * normalizers Prepend, Replace, NFC/NFD/NFKC/NFKD, Sequence; pre-tokenizers ByteLevel, Split, Metaspace,
 * Sequence; decoders ByteLevel, Metaspace, Replace, ByteFallback, Fuse, Strip, Sequence; post-processors
 * TemplateProcessing, ByteLevel, Sequence; added tokens (special or not, normalized or not).
 * Anything else is refused at load time with MP_EINPUT naming the type and the file.
 *
 * Input that is not valid UTF-8 is read as Python's bytes.decode("utf-8", "replace") reads it: each
 * maximal invalid subpart becomes U+FFFD, then encoded as usual.
 *
 * A loaded mp_tok is read-only and may be shared by threads; each thread encodes with its own
 * mp_tok_state (scratch buffers and a cache of pre-token results).
 */
#ifndef MP_TOKENIZER_H
#define MP_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>
#include "core/error.h"

typedef struct mp_tok mp_tok;
typedef struct mp_tok_state mp_tok_state;

/* A growable list of token ids. */
typedef struct mp_tok_ids {
    int32_t *v;
    int64_t n, cap;
} mp_tok_ids;

/* Loads path: a tokenizer.json file, or a directory holding one (an HF model directory; its
 * tokenizer_config.json, if present, names the EOS token). MP_EINPUT naming the file and the reason
 * (missing, not JSON, an unsupported model/normalizer/pre-tokenizer/decoder/post-processor type). */
mp_code mp_tok_load(const char *path, mp_tok **out, mp_err *err);
/* mp_tok_load of tokenizer.json's text json, with tokenizer_config.json's text config (NULL: none) naming
 * the EOS; name names the source in messages. For bytes already read and checked (a checkpoint's carried
 * files). */
mp_code mp_tok_load_text(const char *json, const char *config, const char *name, mp_tok **out, mp_err *err);
void mp_tok_free(mp_tok *t);
/* What kind of tokenizer t is, for people: "byte-level BPE" (a ByteLevel pre-tokenizer or decoder),
 * "sentencepiece-style BPE (byte fallback)", or "BPE". */
const char *mp_tok_kind(const mp_tok *t);

/* One past the largest id of the vocabulary and the added tokens. */
int64_t mp_tok_vocab_size(const mp_tok *t);
/* The id of token text s (vocabulary or added token), or -1. */
int32_t mp_tok_token_id(const mp_tok *t, const char *s);
/* The text of id (vocabulary or added token), or NULL. */
const char *mp_tok_id_token(const mp_tok *t, int32_t id);
/* 1 if id decodes as one byte of a ByteFallback run ("<0xNN>" under a ByteFallback decoder): a run's text
 * is known only once it ends, since an invalid run becomes one U+FFFD per byte (what streaming output must
 * wait for). */
int mp_tok_is_fallback_byte(const mp_tok *t, int32_t id);
/* The ids the post-processor's single-sequence template puts before and after the sequence
 * (add_special_tokens=True); the counts may be 0. Pointers stay valid while t lives. */
void mp_tok_template(const mp_tok *t, const int32_t **bos, int *nbos, const int32_t **eos, int *neos);
/* The EOS id: tokenizer_config.json's eos_token when the directory had one, else the template's last
 * trailing special token; -1 when neither names one. */
int32_t mp_tok_eos(const mp_tok *t);

mp_tok_state *mp_tok_state_new(const mp_tok *t);
void mp_tok_state_free(mp_tok_state *s);

/* Appends the ids of text[0..n) to out, as tokenizers' encode(text, add_special_tokens=False) does.
 * continuation != 0: the text continues a document cut at a line start (no start-of-text "▁" prepend). */
void mp_tok_encode(mp_tok_state *s, const char *text, size_t n, int continuation, mp_tok_ids *out);
/* The text of ids[0..n) as tokenizers' decode(ids, skip_special_tokens=skip_special) returns it; a
 * NUL-terminated string from mp_xmalloc (caller frees), *len its length. Unknown ids are skipped. */
char *mp_tok_decode(const mp_tok *t, const int32_t *ids, int64_t n, int skip_special, size_t *len);

void mp_tok_ids_push(mp_tok_ids *ids, int32_t id);
void mp_tok_ids_free(mp_tok_ids *ids);

#endif
