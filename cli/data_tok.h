/*
 * cli/data_tok.h — `meshpoint data --tokenizer`: documents -> the model's own token ids -> llm.c files.
 */
#ifndef MP_CLI_DATA_TOK_H
#define MP_CLI_DATA_TOK_H

typedef struct mp_data_tok_opts {
    const char *tokenizer;    /* an HF model directory or a tokenizer.json */
    const char *jsonl_field;  /* NULL: each file is a document; else each JSONL record's string field */
    const char *eos;          /* NULL: the tokenizer's own EOS; else this token's text */
    const char *out, *name;   /* DIR/NAME_train.bin, DIR/NAME_val.bin */
    double val_fraction;
} mp_data_tok_opts;

/* Tokenises files[0..nfiles) as docs/TOKENIZER.md describes; returns the exit status (0, 1, 2) after
 * printing any failure. */
int mp_data_tokenize(const mp_data_tok_opts *o, char **files, int nfiles);

#endif
