/*
 * tests/tool_tokenize.c — meshpoint's tokenizer as JSON, for tests/tokenizer_compare.py to hold against
 * Hugging Face's `tokenizers`:
 *   tool_tokenize TOKENIZER FILE...
 * loads TOKENIZER (a tokenizer.json or a directory holding one) and prints one JSON line
 *   {"vocab_size": V, "bos": [...], "eos": [...], "eos_id": E}
 * then, per FILE (its bytes are the text), one line {"ids": [...], "decoded": "...", "decoded_skip": "..."}:
 * the ids of encode(text, add_special_tokens=False), decode(ids, skip_special_tokens=False) and
 * decode(ids, skip_special_tokens=True).
 * A tokenizer that does not load: its message on stderr, exit status 2 (bad input) or 1.
 */
#include <stdio.h>
#include <stdlib.h>
#include <cjson/cJSON.h>
#include "core/fsutil.h"
#include "tokenizer/tokenizer.h"

/* A JSON array of n ids. */
static cJSON *id_array(const int32_t *v, int64_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int64_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

/* Prints j as one line and deletes it. */
static void print_line(cJSON *j) {
    char *s = cJSON_PrintUnformatted(j);
    puts(s);
    free(s);
    cJSON_Delete(j);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: tool_tokenize TOKENIZER [FILE...]\n");
        return 2;
    }
    mp_err err;
    mp_tok *t;
    if (mp_tok_load(argv[1], &t, &err) != MP_OK) {
        fprintf(stderr, "tool_tokenize: %s\n", err.msg);
        return mp_exit_status(err.code);
    }
    const int32_t *bos, *eos;
    int nbos, neos;
    mp_tok_template(t, &bos, &nbos, &eos, &neos);
    cJSON *head = cJSON_CreateObject();
    cJSON_AddNumberToObject(head, "vocab_size", (double)mp_tok_vocab_size(t));
    cJSON_AddItemToObject(head, "bos", id_array(bos, nbos));
    cJSON_AddItemToObject(head, "eos", id_array(eos, neos));
    cJSON_AddNumberToObject(head, "eos_id", mp_tok_eos(t));
    print_line(head);
    mp_tok_state *s = mp_tok_state_new(t);
    int rc = 0;
    for (int i = 2; i < argc && rc == 0; i++) {
        char *text;
        size_t n;
        if (mp_read_text(argv[i], (size_t)1 << 30, &text, &n, &err) != MP_OK) {
            fprintf(stderr, "tool_tokenize: %s\n", err.msg);
            rc = 2;
            break;
        }
        mp_tok_ids ids = {0};
        mp_tok_encode(s, text, n, 0, &ids);
        size_t dl;
        char *dec = mp_tok_decode(t, ids.v, ids.n, 0, &dl);
        cJSON *line = cJSON_CreateObject();
        cJSON_AddItemToObject(line, "ids", id_array(ids.v, ids.n));
        cJSON_AddStringToObject(line, "decoded", dec);
        free(dec);
        dec = mp_tok_decode(t, ids.v, ids.n, 1, &dl);
        cJSON_AddStringToObject(line, "decoded_skip", dec);
        print_line(line);
        free(dec);
        free(text);
        mp_tok_ids_free(&ids);
    }
    mp_tok_state_free(s);
    mp_tok_free(t);
    return rc;
}
