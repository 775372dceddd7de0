/*
 * tokenizer/pretok.c — pre-tokenizers: split a normalized segment into the words BPE sees.
 *   Split      a PCRE2 pattern (the tokenizer.json {"Regex": ...}; {"String": ...} is literal), behavior
 *              Isolated (matches and the gaps between them are words) or Removed (gaps only). Llama 3's
 *              pattern is a Split.
 *   ByteLevel  GPT-2's: optional prefix space, optional split by GPT-2's pattern, then each byte written
 *              as its printable stand-in character (bytes_to_unicode), so BPE never sees a raw byte.
 *   Metaspace  sentencepiece's: " " -> "▁", "▁" prepended (prepend_scheme always / first / never),
 *              optionally split before each "▁".
 *   Sequence   each in turn, each splitting the words of the one before.
 * Patterns compile with PCRE2_UTF | PCRE2_UCP (so \s, \p{L}, \p{N} are Unicode's) and are JIT-compiled.
 * The input is valid UTF-8 (utf8.c made it so), hence PCRE2_NO_UTF_CHECK. Others (Whitespace,
 * BertPreTokenizer, Digits, Punctuation, ...) are refused by name.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <assert.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "tokenizer/tok_internal.h"

/* GPT-2's pattern, as tokenizers' ByteLevel uses it. */
static const char GPT2_PATTERN[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* 1 if boolean member name of j is true, else dflt when absent. */
static int bool_member(const cJSON *j, const char *name, int dflt) {
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(j, name);
    return cJSON_IsBool(m) ? cJSON_IsTrue(m) : dflt;
}

/* Compiles pattern (literal if literal != 0) with JIT; NULL and a message naming it on failure. */
static pcre2_code *compile(const char *pattern, int literal, mp_err *err) {
    int ec;
    PCRE2_SIZE off;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &ec, &off, NULL);
    if (!re) {
        char msg[256];
        pcre2_get_error_message(ec, (PCRE2_UCHAR *)msg, sizeof msg);
        mp_err_set(err, MP_EINPUT, "pre-tokenizer pattern /%s/: %s at offset %zu", pattern, msg, (size_t)off);
        return NULL;
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);   /* falls back to the interpreter if JIT is unavailable */
    return re;
}

/* Parses one Split pre-tokenizer into p. */
static mp_code parse_split(const cJSON *j, mp_pre *p, mp_err *err) {
    const cJSON *pat = cJSON_GetObjectItemCaseSensitive(j, "pattern");
    const char *rx = mp_tok_json_str(pat, "Regex"), *lit = mp_tok_json_str(pat, "String");
    const char *beh = mp_tok_json_str(j, "behavior");
    if (!rx && !lit) return mp_err_set(err, MP_EINPUT, "pre-tokenizer Split: no {\"Regex\"|\"String\": ...} pattern");
    if (bool_member(j, "invert", 0)) return mp_err_set(err, MP_EINPUT, "pre-tokenizer Split: invert=true is not supported");
    if (!beh || (strcmp(beh, "Isolated") && strcmp(beh, "Removed")))
        return mp_err_set(err, MP_EINPUT, "pre-tokenizer Split: behavior %s is not supported (supported: Isolated, Removed)",
                          beh ? beh : "(none)");
    p->kind = MP_PRE_SPLIT;
    p->removed = !strcmp(beh, "Removed");
    p->re = compile(rx ? rx : lit, !rx, err);
    return p->re ? MP_OK : MP_EINPUT;
}

/* Parses one Metaspace pre-tokenizer into p. */
static mp_code parse_metaspace(const cJSON *j, mp_pre *p, mp_err *err) {
    const char *repl = mp_tok_json_str(j, "replacement"), *scheme = mp_tok_json_str(j, "prepend_scheme");
    p->kind = MP_PRE_METASPACE;
    p->repl = mp_strdup(repl ? repl : "\xE2\x96\x81");
    p->split = bool_member(j, "split", 1);
    if (scheme) p->prepend = !strcmp(scheme, "always") ? 2 : !strcmp(scheme, "first") ? 1 : 0;
    else p->prepend = bool_member(j, "add_prefix_space", 1) ? 2 : 0;
    if (scheme && strcmp(scheme, "always") && strcmp(scheme, "first") && strcmp(scheme, "never"))
        return mp_err_set(err, MP_EINPUT, "pre-tokenizer Metaspace: prepend_scheme %s is not supported", scheme);
    return MP_OK;
}

/* Fills *p from one (non-Sequence) pre-tokenizer j of the given type. */
static mp_code pre_one(const cJSON *j, const char *type, void *elem, mp_err *err) {
    mp_pre *p = elem;
    if (!strcmp(type, "Split")) return parse_split(j, p, err);
    if (!strcmp(type, "Metaspace")) return parse_metaspace(j, p, err);
    if (!strcmp(type, "ByteLevel")) {
        p->kind = MP_PRE_BYTELEVEL;
        p->add_prefix_space = bool_member(j, "add_prefix_space", 1);
        if (bool_member(j, "use_regex", 1)) p->re = compile(GPT2_PATTERN, 0, err);
        return !bool_member(j, "use_regex", 1) || p->re ? MP_OK : MP_EINPUT;
    }
    return mp_err_set(err, MP_EINPUT, "pre-tokenizer %s is not supported (supported: ByteLevel, Split, Metaspace, Sequence)",
                      type);
}

mp_code mp_tok_pre_parse(const cJSON *j, mp_pre **out, int *n, mp_err *err) {
    return mp_tok_stages_parse(j, "pre_tokenizer", "pretokenizers", sizeof(mp_pre), pre_one, mp_tok_pre_free, (void **)out, n, err);
}

void mp_tok_pre_free(void *v, int n) {
    mp_pre *pv = v;
    for (int i = 0; i < n; i++) {
        if (pv[i].re) pcre2_code_free(pv[i].re);
        free(pv[i].repl);
    }
    free(pv);
}

/* ---- words ---- */

/* Empties w (keeps its storage): no words. */
static void words_reset(mp_pre_words *w) {
    w->text.n = 0;
    mp_tok_buf_put(&w->text, "", 0);
    if (w->cap == 0) {
        w->cap = 64;
        w->cuts = mp_xmalloc(w->cap * sizeof *w->cuts);
    }
    w->cuts[0] = 0;
    w->ncuts = 0;
}

/* Ends the word written to w->text since the last cut (an empty word is dropped, as tokenizers drops it). */
static void words_close(mp_pre_words *w) {
    if (w->text.n == w->cuts[w->ncuts]) return;
    if (w->ncuts + 2 > w->cap) {
        w->cuts = mp_realloc(w->cuts, w->cap * sizeof *w->cuts, 2 * w->cap * sizeof *w->cuts, MP_MEM_OTHER);
        w->cap *= 2;
    }
    w->cuts[++w->ncuts] = w->text.n;
}

/* Appends a word s[0..n) (s must not point into w). */
static void words_add(mp_pre_words *w, const char *s, size_t n) {
    mp_tok_buf_put(&w->text, s, n);
    words_close(w);
}

void mp_tok_pre_words_free(mp_pre_words *w) {
    mp_tok_buf_free(&w->text);
    free(w->cuts);
    memset(w, 0, sizeof *w);
}

/* ---- ByteLevel alphabet ---- */

static char bl_char[256][3];
static int bl_ready;

/* Fills bl_char once: printable Latin-1 bytes stand for themselves, the others for 256 + k in order. */
static void bl_init(void) {
    if (__atomic_load_n(&bl_ready, __ATOMIC_ACQUIRE)) return;
    int k = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        unsigned c = keep ? (unsigned)b : 256u + (unsigned)k++;
        if (c < 0x80) { bl_char[b][0] = (char)c; bl_char[b][1] = 0; }
        else { bl_char[b][0] = (char)(0xC0 | c >> 6); bl_char[b][1] = (char)(0x80 | (c & 0x3F)); bl_char[b][2] = 0; }
    }
    __atomic_store_n(&bl_ready, 1, __ATOMIC_RELEASE);
}

int mp_tok_bytelevel_byte(uint32_t c) {
    if ((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF)) return (int)c;
    if (c < 256 || c >= 256 + 68) return -1;
    int k = 0;   /* the byte whose stand-in is 256 + (c - 256) */
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        if (!keep && 256 + k++ == (int)c) return b;
    }
    return -1;
}

/* ---- applying ---- */

/* Splits s[0..n) by re into out: matches (and, unless removed, the gaps) as words. */
static void split_regex(const pcre2_code *re, int removed, const char *s, size_t n, mp_pre_words *out) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) mp_oom(64, MP_MEM_OTHER, "PCRE2 match data");
    size_t pos = 0, gap = 0;
    while (pos <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, pos, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;   /* PCRE2_ERROR_NOMATCH (a resource limit would also end here) */
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (!removed) words_add(out, s + gap, a - gap);
        words_add(out, s + a, b - a);
        gap = b;
        if (b == a) {   /* an empty match: step over one character */
            if (a >= n) break;
            b = a + 1;
            while (b < n && ((unsigned char)s[b] & 0xC0) == 0x80) b++;
        }
        pos = b;
    }
    if (!removed) words_add(out, s + gap, n - gap);
    pcre2_match_data_free(md);
}

/* Appends the ByteLevel stand-ins of the bytes s[0..n) to out's open word and closes it. */
static void map_bytes(const char *s, size_t n, mp_pre_words *out) {
    for (size_t i = 0; i < n; i++) {
        const char *c = bl_char[(unsigned char)s[i]];
        mp_tok_buf_put(&out->text, c, c[1] ? 2 : 1);
    }
    words_close(out);
}

/* ByteLevel on one word: prefix space, regex split (when use_regex), then the byte -> character mapping.
 * Without the regex (Llama 3: after its Split) the word is mapped in place, with no allocation. */
static void bytelevel(const mp_pre *p, const char *s, size_t n, mp_pre_words *out, mp_tok_buf *scratch) {
    bl_init();
    int prefix = p->add_prefix_space && (n == 0 || s[0] != ' ');
    if (!p->re && !prefix) {
        map_bytes(s, n, out);
        return;
    }
    scratch->n = 0;
    if (prefix) mp_tok_buf_put(scratch, " ", 1);
    mp_tok_buf_put(scratch, s, n);
    if (!p->re) {
        map_bytes(scratch->p, scratch->n, out);
        return;
    }
    mp_pre_words parts = {0};
    words_reset(&parts);
    split_regex(p->re, 0, scratch->p, scratch->n, &parts);
    for (size_t w = 0; w < parts.ncuts; w++)
        map_bytes(parts.text.p + parts.cuts[w], parts.cuts[w + 1] - parts.cuts[w], out);
    mp_tok_pre_words_free(&parts);
}

/* Metaspace on one word: " " -> replacement, the prepend, then the optional split before each replacement. */
static void metaspace(const mp_pre *p, const char *s, size_t n, int first, mp_pre_words *out, mp_tok_buf *scratch) {
    size_t rl = strlen(p->repl);
    scratch->n = 0;
    mp_tok_buf_put(scratch, "", 0);
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') mp_tok_buf_put(scratch, p->repl, rl);
        else mp_tok_buf_put(scratch, s + i, 1);
    }
    int starts = scratch->n >= rl && memcmp(scratch->p, p->repl, rl) == 0;
    if (!starts && (p->prepend == 2 || (p->prepend == 1 && first))) mp_tok_buf_put(&out->text, p->repl, rl);
    for (size_t i = 0; i < scratch->n; i++) {
        if (p->split && i + rl <= scratch->n && memcmp(scratch->p + i, p->repl, rl) == 0) words_close(out);
        mp_tok_buf_put(&out->text, scratch->p + i, 1);
    }
    words_close(out);
}

void mp_tok_pre_apply(const mp_pre *pv, int n, const char *seg, size_t len, int first, mp_pre_words *out,
                      mp_tok_buf *scratch) {
    words_reset(out);
    words_add(out, seg, len);
    mp_pre_words next = {0};
    for (int k = 0; k < n; k++) {
        words_reset(&next);
        for (size_t w = 0; w < out->ncuts; w++) {
            const char *s = out->text.p + out->cuts[w];
            size_t wl = out->cuts[w + 1] - out->cuts[w];
            if (pv[k].kind == MP_PRE_SPLIT) split_regex(pv[k].re, pv[k].removed, s, wl, &next);
            else if (pv[k].kind == MP_PRE_BYTELEVEL) bytelevel(&pv[k], s, wl, &next, scratch);
            else metaspace(&pv[k], s, wl, first && w == 0, &next, scratch);
        }
        mp_pre_words t = *out;
        *out = next;
        next = t;
    }
    mp_tok_pre_words_free(&next);
}
