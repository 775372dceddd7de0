/*
 * tests/test_tok_gguf.c — tokenizer/tok_gguf.h on hand-written tokenizer.json files: what from_json writes
 * for a byte-level (Llama 3 layout) and a sentencepiece (Llama 2 layout) tokenizer (model, pre, token
 * types, "[PADi]" padding to config.json's vocab_size, merges with U+0120 for a space, scores from merge
 * ranks, special ids from tokenizer_config.json then config.json, add_bos from the template), the
 * refusals by name, and to_json's file encoding as the original does (through mp_tok). The comparison with
 * llama.cpp's converter and tokenizer is tests/python/gguf_vocab.py.
 */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include "tokenizer/tok_gguf.h"
#include "tokenizer/tokenizer.h"

#define L3_PATTERN "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| ?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+"

/* A Llama 3 layout: byte-level vocab a b ab Ġ Ġa, merges (one with a space inside), <|begin|> at 6. */
static const char *BL_JSON =
    "{\"model\":{\"type\":\"BPE\",\"ignore_merges\":true,\"byte_fallback\":false,"
    "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"\\u0120\":3,\"\\u0120a\":4},"
    "\"merges\":[[\"a\",\"b\"],[\"\\u0120\",\"a\"]]},"
    "\"normalizer\":null,"
    "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"" L3_PATTERN "\"},"
    "\"behavior\":\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
    "\"use_regex\":false}]},"
    "\"decoder\":{\"type\":\"ByteLevel\"},"
    "\"added_tokens\":[{\"id\":6,\"content\":\"<|begin|>\",\"special\":true,\"normalized\":false},"
    "{\"id\":7,\"content\":\"<|end|>\",\"special\":true,\"normalized\":false}],"
    "\"post_processor\":{\"type\":\"Sequence\",\"processors\":[{\"type\":\"ByteLevel\"},{\"type\":\"TemplateProcessing\","
    "\"single\":[{\"SpecialToken\":{\"id\":\"<|begin|>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],"
    "\"pair\":[],\"special_tokens\":{\"<|begin|>\":{\"id\":\"<|begin|>\",\"ids\":[6],\"tokens\":[\"<|begin|>\"]}}}]}}";

/* A Llama 2 layout: <unk> <s> </s>, bytes <0x61> <0x62>, then ▁ a b ▁a ab ▁ab ba (merges ▁ a, a b, ▁a b, b a:
 * "aba" is ▁ab a by merge order, ▁a ba by the reverse). */
static const char *SP_JSON =
    "{\"model\":{\"type\":\"BPE\",\"byte_fallback\":true,\"fuse_unk\":true,\"unk_token\":\"<unk>\","
    "\"vocab\":{\"<unk>\":0,\"<s>\":1,\"</s>\":2,\"<0x61>\":3,\"<0x62>\":4,\"\\u2581\":5,\"a\":6,\"b\":7,"
    "\"\\u2581a\":8,\"ab\":9,\"\\u2581ab\":10,\"ba\":11},"
    "\"merges\":[\"\\u2581 a\",\"a b\",\"\\u2581a b\",\"b a\"]},"
    "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Prepend\",\"prepend\":\"\\u2581\"},"
    "{\"type\":\"Replace\",\"pattern\":{\"String\":\" \"},\"content\":\"\\u2581\"}]},"
    "\"pre_tokenizer\":null,"
    "\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Replace\",\"pattern\":{\"String\":\"\\u2581\"},\"content\":\" \"},"
    "{\"type\":\"ByteFallback\"},{\"type\":\"Fuse\"},{\"type\":\"Strip\",\"content\":\" \",\"start\":1,\"stop\":0}]},"
    "\"added_tokens\":[{\"id\":0,\"content\":\"<unk>\",\"special\":true},{\"id\":1,\"content\":\"<s>\",\"special\":true},"
    "{\"id\":2,\"content\":\"</s>\",\"special\":true}],"
    "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"pair\":[{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":0}},"
    "{\"Sequence\":{\"id\":\"A\",\"type_id\":0}},{\"SpecialToken\":{\"id\":\"<s>\",\"type_id\":1}},"
    "{\"Sequence\":{\"id\":\"B\",\"type_id\":1}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[1],\"tokens\":[\"<s>\"]}}}}";

/* from_json that must succeed. */
static mp_tok_gguf_meta from(const char *tj, const char *tc, const char *mc) {
    mp_tok_gguf_meta m = {0};
    mp_err err;
    mp_code rc = mp_tok_gguf_from_json(tj, tc, mc, &m, &err);
    cr_assert_eq(rc, MP_OK, "%s", err.msg);
    return m;
}

Test(tok_gguf, byte_level_llama3) {
    mp_tok_gguf_meta m = from(BL_JSON, "{\"bos_token\":\"<|begin|>\",\"chat_template\":\"{{ x }}\"}",
                              "{\"vocab_size\":10,\"eos_token_id\":7}");
    cr_assert_str_eq(m.model, "gpt2");
    cr_assert_str_eq(m.pre, "llama-bpe");
    cr_assert_eq(m.n_tokens, 10);   /* config.json's vocab_size pads */
    cr_assert_str_eq(m.tokens[5], "[PAD5]");
    cr_assert_eq(m.token_type[5], MP_GGUF_TOK_UNUSED);
    cr_assert_str_eq(m.tokens[9], "[PAD9]");
    cr_assert_eq(m.token_type[2], MP_GGUF_TOK_NORMAL);
    cr_assert_eq(m.token_type[6], MP_GGUF_TOK_CONTROL);
    cr_assert_null(m.scores);
    cr_assert_eq(m.n_merges, 2);
    cr_assert_str_eq(m.merges[0], "a b");
    cr_assert_str_eq(m.merges[1], "\xC4\xA0 a");
    cr_assert_eq(m.bos, 6);
    cr_assert_eq(m.eos, 7, "config.json's eos_token_id fills what tokenizer_config.json leaves unset");
    cr_assert_eq(m.add_bos, 1);
    cr_assert_eq(m.add_eos, 0, "a ByteLevel post-processor says: add no EOS");
    cr_assert_eq(m.unk, -1);
    cr_assert_str_eq(m.chat_template, "{{ x }}");
    mp_tok_gguf_meta_free(&m);
}

Test(tok_gguf, sentencepiece_llama2) {
    mp_tok_gguf_meta m = from(SP_JSON, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"unk_token\":\"<unk>\"}", NULL);
    cr_assert_str_eq(m.model, "llama");
    cr_assert_str_eq(m.pre, "default");
    cr_assert_eq(m.n_tokens, 12);
    cr_assert_eq(m.token_type[0], MP_GGUF_TOK_UNKNOWN, "the model's unk_token");
    cr_assert_eq(m.token_type[1], MP_GGUF_TOK_CONTROL, "named by tokenizer_config.json");
    cr_assert_eq(m.token_type[3], MP_GGUF_TOK_BYTE);
    cr_assert_eq(m.token_type[8], MP_GGUF_TOK_NORMAL);
    cr_assert_null(m.merges);
    cr_assert_eq(m.scores[8], -0.0f);    /* ▁a: merge 0 */
    cr_assert_eq(m.scores[9], -1.0f);    /* ab: merge 1 */
    cr_assert_eq(m.scores[10], -2.0f);   /* ▁ab: merge 2 */
    cr_assert_lt(m.scores[6], -1e8f, "a token no merge makes is never preferred");
    cr_assert(m.bos == 1 && m.eos == 2 && m.unk == 0 && m.add_bos == 1);
    cr_assert_eq(m.add_sep, 0, "the pair template \"<s> A <s> B\" has no separator");
    mp_tok_gguf_meta_free(&m);
}

/* base with the first occurrence of from_s replaced by to (caller frees). */
static char *edited(const char *base, const char *from_s, const char *to) {
    const char *p = strstr(base, from_s);
    cr_assert_not_null(p, "%s not in the base file", from_s);
    size_t n = strlen(base) - strlen(from_s) + strlen(to);
    char *s = malloc(n + 1);
    memcpy(s, base, (size_t)(p - base));
    strcpy(s + (p - base), to);
    strcat(s, p + strlen(from_s));
    return s;
}

Test(tok_gguf, merge_with_a_space) {
    char *s = edited(BL_JSON, "[\"\\u0120\",\"a\"]", "[\"\\u0120\",\"a\"],[\"a b\",\"c\"]");
    mp_tok_gguf_meta m = from(s, NULL, NULL);
    cr_assert_eq(m.n_merges, 3);
    cr_assert_str_eq(m.merges[2], "a\xC4\xA0" "b c", "a space inside a part is written U+0120, as SpecialVocab does");
    mp_tok_gguf_meta_free(&m);
    free(s);
}

/* from_json that must fail with MP_EINPUT naming want. */
static void refused(const char *tj, const char *want) {
    mp_tok_gguf_meta m = {0};
    mp_err err;
    cr_assert_eq(mp_tok_gguf_from_json(tj, NULL, NULL, &m, &err), MP_EINPUT, "accepted; wanted a refusal naming %s", want);
    cr_assert(strstr(err.msg, want), "message \"%s\" does not name %s", err.msg, want);
    cr_assert_null(m.tokens);
}

Test(tok_gguf, refusals_name_the_cause) {
    char *s = edited(BL_JSON, "\\\\p{N}{1,3}", "\\\\p{N}{1,2}");
    refused(s, "p{N}{1,2}");
    free(s);
    s = edited(BL_JSON, "\"type\":\"BPE\"", "\"type\":\"WordPiece\"");
    refused(s, "WordPiece");
    free(s);
    s = edited(SP_JSON, "\"byte_fallback\":true", "\"byte_fallback\":false");
    refused(s, "none");   /* a sentencepiece normalizer with no pre-tokenizer: no llama.cpp name */
    free(s);
    refused("[1]", "not a JSON object");
}

/* The ids mp_tok gives text with tokenizer.json json (+ config). */
static mp_tok_ids encode(const char *json, const char *config, const char *text) {
    mp_tok *t;
    mp_err err;
    cr_assert_eq(mp_tok_load_text(json, config, "t", &t, &err), MP_OK, "%s", err.msg);
    mp_tok_state *s = mp_tok_state_new(t);
    mp_tok_ids ids = {0};
    mp_tok_encode(s, text, strlen(text), 0, &ids);
    mp_tok_state_free(s);
    mp_tok_free(t);
    return ids;
}

/* from_json -> to_json -> mp_tok encodes text as the original file does. */
static void round_trip(const char *tj, const char *tc, const char *text) {
    mp_tok_gguf_meta m = from(tj, tc, NULL);
    char *json, *config;
    mp_err err;
    cr_assert_eq(mp_tok_gguf_to_json(&m, &json, &config, &err), MP_OK, "%s", err.msg);
    mp_tok_ids a = encode(tj, tc, text), b = encode(json, config, text);
    cr_assert_eq(a.n, b.n, "%lld ids, rebuilt %lld", (long long)a.n, (long long)b.n);
    for (int64_t i = 0; i < a.n; i++) cr_assert_eq(a.v[i], b.v[i], "id %lld: %d, rebuilt %d", (long long)i, a.v[i], b.v[i]);
    cr_assert_gt(a.n, 2);
    mp_tok_ids_free(&a);
    mp_tok_ids_free(&b);
    free(json);
    free(config);
    mp_tok_gguf_meta_free(&m);
}

Test(tok_gguf, to_json_encodes_as_the_original) {
    round_trip(BL_JSON, NULL, "ab a ab<|begin|>ba");
    round_trip(SP_JSON, "{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}", "aba ab a bab<s>ab xa");
}

Test(tok_gguf, to_json_refuses_what_it_cannot_write) {
    mp_tok_gguf_meta m = from(BL_JSON, NULL, NULL);
    char *json, *config;
    mp_err err;
    free(m.pre);
    m.pre = strdup("falcon");
    cr_assert_eq(mp_tok_gguf_to_json(&m, &json, &config, &err), MP_EINPUT);
    cr_assert(strstr(err.msg, "falcon"), "%s", err.msg);
    free(m.tokens[1]);
    m.tokens[1] = strdup("a");   /* two tokens with one text */
    cr_assert_eq(mp_tok_gguf_to_json(&m, &json, &config, &err), MP_EINPUT);
    cr_assert(strstr(err.msg, "same text"), "%s", err.msg);
    mp_tok_gguf_meta_free(&m);
}
