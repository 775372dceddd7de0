/*
 * cli/data_tok.h — `meshpoint data --tokenizer`: documents -> the model's own token ids -> llm.c files.
 */
#ifndef MP_CLI_DATA_TOK_H
#define MP_CLI_DATA_TOK_H

#include <stddef.h>
#include <stdint.h>

typedef struct mp_data_tok_opts {
    const char *tokenizer;    /* an HF model directory or a tokenizer.json */
    const char *jsonl_field;  /* NULL: each file is a document; else each JSONL record's string field */
    const char *eos;          /* NULL: the tokenizer's own EOS; else this token's text */
    const char *out, *name;   /* DIR/NAME_train.bin, DIR/NAME_val.bin */
    double val_fraction;
} mp_data_tok_opts;

/* The validation part of `meshpoint data`'s summary line into buf: "VAL (N val tokens)", or with
 * --val-fraction 0 (frac 0) "no validation file (--val-fraction 0)", after a warning if val_path exists
 * (an earlier run's, left as it is: the command does not delete what it did not write). */
void mp_data_val_summary(char *buf, size_t cap, double frac, const char *val_path, int64_t nval);

/* Tokenises files[0..nfiles) as docs/TOKENIZER.md describes; returns the exit status (0, 1, 2) after
 * printing any failure. */
int mp_data_tokenize(const mp_data_tok_opts *o, char **files, int nfiles);

#endif
