/*
 * tokenizer/utf8.c — UTF-8 checks for the tokenizer. Text that is not valid UTF-8 is made valid the way
 * Python's bytes.decode("utf-8", "replace") and Rust's String::from_utf8_lossy do (the Unicode
 * "maximal subpart" practice): each maximal prefix of a valid sequence that is cut short, and each byte
 * that starts none, becomes one U+FFFD. So meshpoint's ids for such bytes equal the `tokenizers`
 * library's ids for the lossily decoded string (docs/TOKENIZER.md; tests/tokenizer_compare.py).
 */
#include <assert.h>
#include "tokenizer/tok_internal.h"

/* The valid range of the second byte after lead byte c (the rest are always 0x80..0xBF). */
static void second_range(unsigned c, unsigned *lo, unsigned *hi) {
    *lo = 0x80;
    *hi = 0xBF;
    if (c == 0xE0) *lo = 0xA0;
    else if (c == 0xED) *hi = 0x9F;
    else if (c == 0xF0) *lo = 0x90;
    else if (c == 0xF4) *hi = 0x8F;
}

/* The sequence length lead byte c announces, 0 if c cannot start one. */
static int lead_len(unsigned c) {
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return 2;
    if (c >= 0xE0 && c <= 0xEF) return 3;
    if (c >= 0xF0 && c <= 0xF4) return 4;
    return 0;
}

/* How many bytes of s[0..n) form the longest valid prefix of the sequence s[0] starts (>= 1 when s[0]
 * is a lead byte); *full = 1 when that prefix is the whole sequence. */
static int valid_prefix(const unsigned char *s, size_t n, int *full) {
    int len = lead_len(s[0]);
    *full = 0;
    if (len == 0) return 0;
    int k = 1;
    while (k < len && (size_t)k < n) {
        unsigned lo = 0x80, hi = 0xBF;
        if (k == 1) second_range(s[0], &lo, &hi);
        if (s[k] < lo || s[k] > hi) break;
        k++;
    }
    *full = k == len;
    return k;
}

int mp_tok_utf8_len(const unsigned char *s, size_t n) {
    int full;
    if (n == 0) return 0;
    int k = valid_prefix(s, n, &full);
    return full ? k : 0;
}

void mp_tok_utf8_sanitize(const char *text, size_t n, mp_tok_buf *out) {
    const unsigned char *s = (const unsigned char *)text;
    size_t i = 0, run = 0;   /* s[run..i) is valid and not yet copied */
    while (i < n) {
        int full;
        int k = valid_prefix(s + i, n - i, &full);
        if (full) {
            i += (size_t)k;
            continue;
        }
        mp_tok_buf_put(out, s + run, i - run);
        mp_tok_buf_put(out, "\xEF\xBF\xBD", 3);
        i += k > 0 ? (size_t)k : 1;
        run = i;
    }
    mp_tok_buf_put(out, s + run, n - run);
}

void mp_tok_utf8_put(mp_tok_buf *out, uint32_t c) {
    unsigned char b[4];
    int n;
    assert(c <= 0x10FFFF);
    if (c < 0x80) { b[0] = (unsigned char)c; n = 1; }
    else if (c < 0x800) { b[0] = (unsigned char)(0xC0 | c >> 6); b[1] = (unsigned char)(0x80 | (c & 0x3F)); n = 2; }
    else if (c < 0x10000) {
        b[0] = (unsigned char)(0xE0 | c >> 12); b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
        b[2] = (unsigned char)(0x80 | (c & 0x3F)); n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | c >> 18); b[1] = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
        b[2] = (unsigned char)(0x80 | ((c >> 6) & 0x3F)); b[3] = (unsigned char)(0x80 | (c & 0x3F)); n = 4;
    }
    mp_tok_buf_put(out, b, (size_t)n);
}
