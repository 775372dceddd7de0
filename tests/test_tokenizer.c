/*
 * tests/test_tokenizer.c — tokenizer/ units that need no Python: the U+FFFD replacement of invalid
 * UTF-8 (expected strings are Python's bytes.decode("utf-8", "replace")), BPE merge order on tiny
 * hand-written tokenizer.json files (leftmost among equal ranks, both merge spellings, byte fallback,
 * fused unk, ignore_merges), the Unicode normalizers on hand-picked cases (expected strings from tokenizers)
 * and NFC inside a Sequence, the decoder chain, and load errors that name the file and the cause.
 * The comparison with Hugging Face's tokenizers itself is tests/python/tokenizer_compare.py.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tests/testutil.h"
#include "tokenizer/tok_internal.h"
#include "tokenizer/tokenizer.h"

/* The sanitized form of n bytes of s, NUL-terminated (caller frees). */
static char *sanitize(const char *s, size_t n) {
    mp_tok_buf b = {0};
    mp_tok_utf8_sanitize(s, n, &b);
    mp_tok_buf_put(&b, "", 0);
    return b.p;
}

#define FFFD "\xEF\xBF\xBD"

Test(utf8, replacement_as_python) {
    struct { const char *in, *want; } c[] = {
        {"a\xff" "b", "a" FFFD "b"},               {"\xe4\xb8" "a", FFFD "a"},
        {"\xf0\x9f\x98", FFFD},                    {"\xc0\xaf", FFFD FFFD},
        {"\xed\xa0\x80", FFFD FFFD FFFD},          {"\xf4\x90\x80\x80", FFFD FFFD FFFD FFFD},
        {"\xe0\x80\xaf", FFFD FFFD FFFD},          {"\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80"},
        {"plain \xc3\xa9", "plain \xc3\xa9"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char *got = sanitize(c[i].in, strlen(c[i].in));
        cr_assert_str_eq(got, c[i].want, "case %zu", i);
        free(got);
    }
}

Test(unorm, forms_as_tokenizers) {   /* expected strings: tokenizers 0.23.3's normalizers' normalize_str */
    struct { mp_unorm_form form; const char *in, *want; } c[] = {
        {MP_UNORM_NFC, "e\xcc\x81", "\xc3\xa9"},                                    /* e + U+0301 -> é */
        {MP_UNORM_NFC, "\xe2\x84\xab", "\xc3\x85"},                                /* U+212B ANGSTROM SIGN -> Å */
        {MP_UNORM_NFC, "\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab", "\xed\x95\x9c"},       /* jamo L V T -> 한 */
        {MP_UNORM_NFC, "\xea\xb0\x80\xe1\x86\xa8", "\xea\xb0\x81"},                    /* LV + T -> LVT */
        {MP_UNORM_NFC, "\xe0\xa5\x98", "\xe0\xa4\x95\xe0\xa4\xbc"},                    /* U+0958: an exclusion */
        {MP_UNORM_NFC, "a\xcd\x86\xcc\x81", "a\xcd\x86\xcc\x81"},                      /* blocked by a class-230 mark */
        {MP_UNORM_NFC, "o\xcc\x82\xcc\xa3", "\xe1\xbb\x99"},                          /* reordered, then composed */
        {MP_UNORM_NFC, "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0", "\xf0\x91\xa4\xb5\xf0\x91\xa4\xb0"}, /* 13.0's U+11938 */
        {MP_UNORM_NFC, "hello", "hello"},
        {MP_UNORM_NFD, "\xc3\xa9\xed\x95\x9c", "e\xcc\x81\xe1\x84\x92\xe1\x85\xa1\xe1\x86\xab"},
        {MP_UNORM_NFKC, "\xef\xac\x81\xc2\xb2", "fi2"},
        {MP_UNORM_NFKD, "\xe2\x91\xa0\xe1\xba\x9b\xcc\xa3", "1s\xcc\xa3\xcc\x87"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        mp_tok_buf b = {0};
        mp_tok_unorm(c[i].form, c[i].in, strlen(c[i].in), &b);
        mp_tok_buf_put(&b, "", 0);
        cr_assert_str_eq(b.p, c[i].want, "case %zu", i);
        mp_tok_buf_free(&b);
    }
}

/* Writes json to a fresh dir's tokenizer.json and loads it; *t NULL and err filled on failure. */
static mp_code load_json(const char *json, mp_tok **t, mp_err *err) {
    char *dir = tu_mkdtemp("tok");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    tu_write_file(path, json);
    mp_code rc = mp_tok_load(path, t, err);
    free(dir);
    return rc;
}

/* The ids of text as a string "1 2 3". */
static void ids_of(mp_tok *t, const char *text, char *out, size_t cap) {
    mp_tok_state *s = mp_tok_state_new(t);
    mp_tok_ids ids = {0};
    mp_tok_encode(s, text, strlen(text), 0, &ids);
    out[0] = 0;
    for (int64_t i = 0; i < ids.n; i++)
        snprintf(out + strlen(out), cap - strlen(out), "%s%d", i ? " " : "", ids.v[i]);
    mp_tok_ids_free(&ids);
    mp_tok_state_free(s);
}

#define VOCAB "\"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"aa\": 3, \"ab\": 4, \"<0xC3>\": 5, \"<0xA9>\": 6, \"aaab\": 7}"

Test(bpe, leftmost_first_and_both_merge_spellings) {
    const char *spell[] = {"[\"a a\", \"a b\"]", "[[\"a\", \"a\"], [\"a\", \"b\"]]"};
    for (int k = 0; k < 2; k++) {
        char json[1024], ids[256];
        snprintf(json, sizeof json, "{\"model\": {\"type\": \"BPE\", " VOCAB ", \"merges\": %s}}", spell[k]);
        mp_tok *t;
        mp_err err;
        cr_assert_eq(load_json(json, &t, &err), MP_OK, "%s", err.msg);
        ids_of(t, "aaa", ids, sizeof ids);
        cr_assert_str_eq(ids, "3 1", "aaa: the leftmost pair of equal rank merges first");
        ids_of(t, "aab", ids, sizeof ids);
        cr_assert_str_eq(ids, "3 2", "aab: a a (rank 0) before a b (rank 1)");
        ids_of(t, "aaab", ids, sizeof ids);
        cr_assert_str_eq(ids, "3 4", "aaab reaches no single token without ignore_merges");
        mp_tok_free(t);
    }
}

Test(bpe, byte_fallback_unk_fuse_ignore_merges) {
    char ids[256];
    mp_tok *t;
    mp_err err;
    cr_assert_eq(load_json("{\"model\": {\"type\": \"BPE\", " VOCAB ", \"merges\": [\"a a\"], \"unk_token\": \"<unk>\", "
                           "\"fuse_unk\": true, \"byte_fallback\": true, \"ignore_merges\": true}}", &t, &err), MP_OK, "%s", err.msg);
    ids_of(t, "a\xc3\xa9xyb", ids, sizeof ids);   /* é -> its bytes; x, y have no bytes -> one fused unk */
    cr_assert_str_eq(ids, "1 5 6 0 2");
    ids_of(t, "aaab", ids, sizeof ids);
    cr_assert_str_eq(ids, "7", "ignore_merges: a word in the vocab is that token");
    mp_tok_free(t);
}

Test(bpe, nfc_normalizer_in_a_sequence) {
    char ids[256];
    mp_tok *t;
    mp_err err;
    cr_assert_eq(load_json("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xc3\xa9\": 0, \"e\": 1, \"\xcc\x81\": 2}, "
                           "\"merges\": []}, \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}]}}",
                           &t, &err), MP_OK, "%s", err.msg);
    ids_of(t, "e\xcc\x81" "e", ids, sizeof ids);
    cr_assert_str_eq(ids, "0 1", "e + U+0301 is é after NFC");
    mp_tok_free(t);
}

Test(decode, sentencepiece_chain) {
    mp_tok *t;
    mp_err err;
    const char *json = "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"\xe2\x96\x81hi\": 0, \"<0xC3>\": 1, \"<0xA9>\": 2, "
        "\"<0xFF>\": 3, \"\xe2\x96\x81\": 4}, \"merges\": []}, \"decoder\": {\"type\": \"Sequence\", \"decoders\": ["
        "{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xe2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, "
        "{\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]}}";
    cr_assert_eq(load_json(json, &t, &err), MP_OK, "%s", err.msg);
    int32_t ids[] = {0, 1, 2, 4, 3};
    size_t len;
    char *text = mp_tok_decode(t, ids, 5, 0, &len);
    cr_assert_str_eq(text, "hi\xc3\xa9 " FFFD, "a lone invalid byte decodes to U+FFFD");
    free(text);
    mp_tok_free(t);
}

Test(load, errors_name_file_and_cause) {
    struct { const char *json, *want; } c[] = {
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "model WordPiece is not supported"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "merges[0]"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a\"]}}", "merges[0]"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"normalizer\": {\"type\": \"Sequence\", "
         "\"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Lowercase\"}]}}", "normalizer Lowercase is not supported"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": {\"type\": \"Split\", "
         "\"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}}", "pre-tokenizer pattern"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}", "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        mp_tok *t = NULL;
        mp_err err;
        cr_assert_eq(load_json(c[i].json, &t, &err), MP_EINPUT, "case %zu", i);
        cr_assert_null(t);
        cr_assert(strstr(err.msg, c[i].want) && strstr(err.msg, "tokenizer.json"), "case %zu: %s", i, err.msg);
    }
    mp_tok *t;
    mp_err err;
    cr_assert_eq(mp_tok_load("/nonexistent/dir/tokenizer.json", &t, &err), MP_EINPUT);
    cr_assert(strstr(err.msg, "/nonexistent/dir/tokenizer.json"), "%s", err.msg);
}
