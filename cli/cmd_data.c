/*
 * cli/cmd_data.c — `meshpoint data`: UTF-8 text files -> byte-level llm.c token files.
 *
 * The inputs are read whole and concatenated byte for byte in the order given (no separator is added).
 * Tokenisation is byte-level with vocab 256: token = byte value, so any text round-trips exactly and no
 * tokenizer file is needed. The last --val-fraction of the tokens becomes the validation split; the cut
 * is moved to just after the newline nearest the nominal split point if one lies within SPLIT_WINDOW
 * bytes (ties go to the earlier one), so neither split starts mid-line. Both splits are non-empty.
 * Outputs: DIR/NAME_train.bin and DIR/NAME_val.bin (DIR created if missing), written atomically by
 * mp_token_file_write_llmc. --val-fraction 0 (a separate validation corpus) writes the train file alone:
 * no validation file rather than an empty one, since `train --val-data` and `eval` refuse a file that
 * holds no batch, and an absent file cannot be mistaken for a split of this corpus; a NAME_val.bin left
 * by an earlier run is warned about, not deleted. Invalid UTF-8 is only warned about: byte-level tokens do not need it.
 * With --tokenizer the model's own tokenizer encodes each document instead: cli/data_tok.c.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "ckpt/ckpt.h"
#include "cli/args.h"
#include "cli/cli.h"
#include "cli/data_tok.h"
#include "core/data.h"
#include "core/fsutil.h"
#include "core/log.h"

#define SPLIT_WINDOW 256

static const char *data_about =
    "Reads UTF-8 text files (concatenated in the order given), tokenises them byte-level (vocab 256,\n"
    "token = byte value) and writes DIR/NAME_train.bin and DIR/NAME_val.bin in llm.c token format.\n"
    "The validation split is the last F of the tokens, cut after a newline near the split point;\n"
    "with --val-fraction 0 only the training file is written (train without --val-data).\n"
    "With --tokenizer, each file (or each JSONL record, --jsonl-field) is a document, encoded by the model's\n"
    "own tokenizer with its BOS before and EOS after; uint16 tokens if the vocabulary fits, else uint32\n"
    "(llm.c's Llama 3 format); the validation split is the last F of the tokens (docs/TOKENIZER.md).";

/* The offset of the first byte of the first complete UTF-8 error in buf, or -1 if buf is valid UTF-8. */
static int64_t utf8_first_error(const unsigned char *s, int64_t n) {
    int64_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        int len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (len == 0 || (len == 2 && c < 0xC2) || (c == 0xF4 && i + 1 < n && s[i + 1] > 0x8F) || c > 0xF4) return i;
        if (i + len > n) return i;
        for (int k = 1; k < len; k++)
            if ((s[i + k] & 0xC0) != 0x80) return i;
        if (len == 3 && c == 0xE0 && s[i + 1] < 0xA0) return i;   /* overlong */
        if (len == 3 && c == 0xED && s[i + 1] > 0x9F) return i;   /* surrogate */
        if (len == 4 && c == 0xF0 && s[i + 1] < 0x90) return i;   /* overlong */
        i += len;
    }
    return -1;
}

/* Appends the whole of path to *buf (length *n, capacity *cap); 0 ok, else -1 with a message in err. */
static int read_append(const char *path, unsigned char **buf, int64_t *n, int64_t *cap, mp_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        mp_err_set(err, MP_EINPUT, "cannot read input %s: %s", path, strerror(errno));
        return -1;
    }
    int64_t start = *n;
    for (;;) {
        if (*cap - *n < 65536) {
            int64_t nc = *cap ? *cap * 2 : 1 << 20;
            unsigned char *nb = realloc(*buf, (size_t)nc);
            if (!nb) {
                fclose(f);
                mp_err_set(err, MP_ENOMEM, "reading %s: out of memory for %lld bytes", path, (long long)nc);
                return -1;
            }
            *buf = nb;
            *cap = nc;
        }
        size_t got = fread(*buf + *n, 1, (size_t)(*cap - *n), f);
        *n += (int64_t)got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    int e = errno;
    fclose(f);
    if (bad) {
        mp_err_set(err, MP_EINPUT, "cannot read input %s: %s", path, strerror(e));
        return -1;
    }
    int64_t off = utf8_first_error(*buf + start, *n - start);
    if (off >= 0)
        mp_warn("%s is not valid UTF-8 (first bad byte at offset %lld); tokenising its bytes as they are", path,
                (long long)off);
    return 0;
}

/* The first token of the validation split for n tokens and fraction frac (see the top comment). */
static int64_t split_point(const unsigned char *s, int64_t n, double frac) {
    int64_t nval = (int64_t)llround(frac * (double)n);
    if (nval < 1) nval = 1;
    if (nval > n - 1) nval = n - 1;
    int64_t cut = n - nval, best = -1;
    for (int64_t d = 0; d <= SPLIT_WINDOW && best < 0; d++) {
        /* candidate cuts c = cut - d then cut + d; c is valid if s[c-1] is a newline and 1 <= c <= n-1 */
        int64_t c1 = cut - d, c2 = cut + d;
        if (c1 >= 1 && c1 <= n - 1 && s[c1 - 1] == '\n') best = c1;
        else if (c2 >= 1 && c2 <= n - 1 && s[c2 - 1] == '\n') best = c2;
    }
    return best >= 0 ? best : cut;
}

/* Writes n bytes of s as tokens to path; MP_OK or the writer's error. */
static mp_code write_split(const char *path, const unsigned char *s, int64_t n, mp_err *err) {
    uint16_t *tok = malloc((size_t)(n > 0 ? n : 1) * sizeof *tok);
    if (!tok) return mp_err_set(err, MP_ENOMEM, "writing %s: out of memory for %lld tokens", path, (long long)n);
    for (int64_t i = 0; i < n; i++) tok[i] = s[i];
    mp_code rc = mp_token_file_write_llmc(path, tok, n, err);
    free(tok);
    return rc;
}

void mp_data_val_summary(char *buf, size_t cap, double frac, const char *val_path, int64_t nval) {
    if (frac > 0) {
        snprintf(buf, cap, "%s (%lld val tokens)", val_path, (long long)nval);
        return;
    }
    if (mp_fs_exists(val_path))
        mp_warn("%s is from an earlier run and was left as it is: it is no split of these inputs", val_path);
    snprintf(buf, cap, "no validation file (--val-fraction 0)");
}

int mp_cmd_data(int argc, char **argv) {
    const char *out = ".", *name = "data", *tokenizer = NULL, *jsonl_field = NULL, *eos = NULL;
    double frac = 0.1;
    const mp_arg flags[] = {
        {"out", MP_ARG_STRING, &out, "DIR", "output directory (created if missing)", NULL, NULL},
        {"val-fraction", MP_ARG_DOUBLE, &frac, "F", "fraction of the tokens, at the end, for validation; in [0,1) (0: no validation file)", NULL, NULL},
        {"name", MP_ARG_STRING, &name, "NAME", "output file prefix: NAME_train.bin, NAME_val.bin", NULL, NULL},
        {"tokenizer", MP_ARG_STRING, &tokenizer, "DIR|FILE", "the model's tokenizer: an HF model directory or a "
         "tokenizer.json (default: byte-level, vocab 256)", NULL, NULL},
        {"jsonl-field", MP_ARG_STRING, &jsonl_field, "FIELD", "inputs are JSONL; each record's string FIELD is a "
         "document (with --tokenizer)", NULL, NULL},
        {"eos", MP_ARG_STRING, &eos, "TOKEN", "the token after each document (default: the tokenizer's EOS)", NULL, NULL},
        {0}};
    int npos = 0, help = 0;
    mp_err err;
    mp_err_clear(&err);
    if (mp_args_parse(flags, argc, argv, &npos, &help, &err) != MP_OK) {
        mp_log_fail("%s", err.msg);
        return mp_exit_status(MP_EINPUT);
    }
    if (help) {
        mp_args_help(stdout, "meshpoint data [options] FILE...", data_about, flags);
        return mp_exit_status(MP_OK);
    }
    if (!(frac >= 0.0 && frac < 1.0)) {
        mp_log_fail("--val-fraction: %g is not in [0,1) (0: no validation file)", frac);
        return mp_exit_status(MP_EINPUT);
    }
    if (strchr(name, '/')) {   /* (empty values are refused by the parser) */
        mp_log_fail("--name: \"%s\" must be a file prefix without '/'", name);
        return mp_exit_status(MP_EINPUT);
    }
    if (npos == 0) {
        mp_log_fail("no input files (usage: meshpoint data [options] FILE...; see --help)");
        return mp_exit_status(MP_EINPUT);
    }

    if (!tokenizer && (jsonl_field || eos)) {
        mp_log_fail("--%s needs --tokenizer", jsonl_field ? "jsonl-field" : "eos");
        return mp_exit_status(MP_EINPUT);
    }
    if (tokenizer) {
        mp_data_tok_opts o = {tokenizer, jsonl_field, eos, out, name, frac};
        return mp_data_tokenize(&o, argv, npos);
    }

    unsigned char *buf = NULL;
    int64_t n = 0, cap = 0;
    for (int i = 0; i < npos; i++) {
        if (read_append(argv[i], &buf, &n, &cap, &err) != 0) {
            mp_log_fail("%s", err.msg);
            free(buf);
            return mp_exit_status(err.code);
        }
    }
    if (n < (frac > 0 ? 2 : 1)) {
        mp_log_fail("the input files hold %lld bytes; need at least %s", (long long)n,
                    frac > 0 ? "2 (one per split)" : "1");
        free(buf);
        return mp_exit_status(MP_EINPUT);
    }
    int64_t cut = frac > 0 ? split_point(buf, n, frac) : n;

    char train_path[2048], val_path[2048];
    snprintf(train_path, sizeof train_path, "%s/%s_train.bin", out, name);
    snprintf(val_path, sizeof val_path, "%s/%s_val.bin", out, name);
    int rc = mp_exit_status(MP_OK);
    if (mp_fs_mkdirs(out, &err) != MP_OK) {
        mp_log_fail("cannot create output directory %s: %s", out, err.msg);
        rc = mp_exit_status(MP_EIO);
    } else if (write_split(train_path, buf, cut, &err) != MP_OK ||
               (cut < n && write_split(val_path, buf + cut, n - cut, &err) != MP_OK)) {
        mp_log_fail("%s", err.msg);
        rc = mp_exit_status(MP_EIO);
    } else {
        char val[2200];
        mp_data_val_summary(val, sizeof val, frac, val_path, n - cut);
        printf("meshpoint data: %d file%s, %lld tokens -> %s (%lld train tokens), %s\n", npos, npos == 1 ? "" : "s",
               (long long)n, train_path, (long long)cut, val);
    }
    free(buf);
    return rc;
}
