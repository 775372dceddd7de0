/*
 * cli/data_tok.c — `meshpoint data --tokenizer DIR|tokenizer.json`: each input file (or each record of a
 * JSONL file, --jsonl-field) is a document, encoded as the tokenizer encodes it (add_special_tokens=False),
 * with the template's BOS ids before it and the EOS after it (docs/TOKENIZER.md).
 *
 * Streaming with bounded memory: documents are read as pieces of at most PIECE_BYTES (a larger text file
 * is cut just after a newline that a non-space character follows, where the byte-level pre-tokenizers
 * split anyway; the next piece is encoded as a continuation: no start-of-text "▁"). Pieces gather into a
 * batch of at most BATCH_BYTES / BATCH_PIECES, the batch is encoded in parallel (OpenMP, one
 * mp_tok_state per thread), then written in order to the train file (cli/token_stream.c). At the end the
 * last --val-fraction of the tokens moves to the validation file (with 0 there is none: cli/cmd_data.c's
 * top comment says why not an empty one). Progress: input bytes.
 */
#include "cli/data_tok.h"
#include <errno.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cjson/cJSON.h>
#include "ckpt/ckpt.h"
#include "cli/cli.h"
#include "cli/progress.h"
#include "cli/token_stream.h"
#include "core/alloc.h"
#include "core/fsutil.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"

#define PIECE_BYTES ((size_t)1 << 20)
#define BATCH_BYTES ((size_t)32 << 20)
#define BATCH_PIECES 4096

typedef struct piece {
    char *text;
    size_t n;
    int doc_start, doc_end;   /* the piece begins / ends its document */
    mp_tok_ids ids;
} piece;

/* The input side: the files in turn, as documents cut into pieces. */
typedef struct reader {
    char **files;
    int nfiles, cur;            /* cur: index of the open file */
    FILE *f;
    const char *field;          /* JSONL field, or NULL */
    int64_t line;               /* JSONL line number */
    char *carry;                /* text file: bytes read but not yet in a piece */
    size_t ncarry;
    int file_started;           /* a piece of the current file was produced */
    int64_t bytes_in, ndocs;
} reader;

/* The cut for a piece of text file bytes s[0..n) (n > PIECE_BYTES): after the last '\n' followed by a
 * non-space byte in the second half, else at the last UTF-8 character boundary. */
static size_t piece_cut(const char *s, size_t n) {
    size_t lim = n < PIECE_BYTES ? n : PIECE_BYTES;
    for (size_t p = lim - 1; p > lim / 2; p--)
        if (s[p - 1] == '\n' && s[p] != ' ' && s[p] != '\t' && s[p] != '\n' && s[p] != '\r') return p;
    size_t p = lim;
    while (p > 1 && ((unsigned char)s[p] & 0xC0) == 0x80) p--;
    return p;
}

/* Opens the next file (r->cur + 1); 0 at the end, -1 on error. */
static int open_next(reader *r, mp_err *err) {
    if (r->f) fclose(r->f);
    r->f = NULL;
    if (++r->cur >= r->nfiles) return 0;
    r->f = fopen(r->files[r->cur], "rb");
    if (!r->f) {
        mp_err_set(err, MP_EINPUT, "cannot read input %s: %s", r->files[r->cur], strerror(errno));
        return -1;
    }
    r->line = 0;
    r->ncarry = 0;
    r->file_started = 0;
    return 1;
}

/* The next piece of a text file into p; 1 made, 0 the file is done. */
static int text_piece(reader *r, piece *p, mp_err *err) {
    if (r->file_started && r->ncarry == 0 && feof(r->f)) return 0;
    size_t got;
    while (r->ncarry < PIECE_BYTES + 1 && (got = fread(r->carry + r->ncarry, 1, PIECE_BYTES + 1 - r->ncarry, r->f)) > 0)
        r->ncarry += got;
    if (ferror(r->f)) {
        mp_err_set(err, MP_EINPUT, "cannot read input %s: %s", r->files[r->cur], strerror(errno));
        return -1;
    }
    size_t cut = r->ncarry <= PIECE_BYTES ? r->ncarry : piece_cut(r->carry, r->ncarry);
    p->text = mp_xmalloc(cut + 1);
    memcpy(p->text, r->carry, cut);
    p->n = cut;
    p->doc_start = !r->file_started;
    p->doc_end = cut == r->ncarry;
    memmove(r->carry, r->carry + cut, r->ncarry - cut);
    r->ncarry -= cut;
    r->file_started = 1;
    r->bytes_in += (int64_t)cut;
    r->ndocs += p->doc_start;
    return 1;
}

/* The next record of a JSONL file into p; 1 made, 0 the file is done, -1 a bad record. */
static int jsonl_piece(reader *r, piece *p, mp_err *err) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    while ((len = getline(&line, &cap, r->f)) >= 0) {
        r->line++;
        r->bytes_in += len;
        if (strspn(line, " \t\r\n") == (size_t)len) continue;   /* blank line */
        cJSON *j = cJSON_Parse(line);
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, r->field);
        if (!cJSON_IsString(v)) {
            mp_err_set(err, MP_EINPUT, "%s:%lld: %s", r->files[r->cur], (long long)r->line,
                       !cJSON_IsObject(j) ? "not a JSON object" : "no string field");
            mp_err_wrap(err, "--jsonl-field %s", r->field);
            cJSON_Delete(j);
            free(line);
            return -1;
        }
        p->text = mp_strdup(v->valuestring);
        p->n = strlen(p->text);
        p->doc_start = p->doc_end = 1;
        r->ndocs++;
        cJSON_Delete(j);
        free(line);
        return 1;
    }
    free(line);
    if (ferror(r->f)) {
        mp_err_set(err, MP_EINPUT, "cannot read input %s: %s", r->files[r->cur], strerror(errno));
        return -1;
    }
    return 0;
}

/* The next piece of the inputs into p; 1 made, 0 all inputs done, -1 error. */
static int next_piece(reader *r, piece *p, mp_err *err) {
    for (;;) {
        if (!r->f) {
            int rc = open_next(r, err);
            if (rc <= 0) return rc;
        }
        int rc = r->field ? jsonl_piece(r, p, err) : text_piece(r, p, err);
        if (rc != 0) return rc;
        fclose(r->f);
        r->f = NULL;
    }
}

/* What every document gets around it, and where the tokens go. */
typedef struct sink {
    const int32_t *bos;
    int nbos;
    int32_t eos;
    mp_token_stream out;
    int64_t ndocs_done;
} sink;

/* Encodes pieces ps[0..n) in parallel (one state per thread), then appends them in order to k->out. */
static mp_code encode_batch(mp_tok_state **states, piece *ps, int n, sink *k, mp_err *err) {
#pragma omp parallel for schedule(dynamic, 1)
    for (int i = 0; i < n; i++) {
        ps[i].ids.n = 0;
        mp_tok_encode(states[omp_get_thread_num()], ps[i].text, ps[i].n, !ps[i].doc_start, &ps[i].ids);
    }
    for (int i = 0; i < n; i++) {
        if (ps[i].doc_start) MP_TRY(mp_token_stream_put(&k->out, k->bos, k->nbos, err));
        MP_TRY(mp_token_stream_put(&k->out, ps[i].ids.v, ps[i].ids.n, err));
        if (ps[i].doc_end) MP_TRY(mp_token_stream_put(&k->out, &k->eos, 1, err));
        k->ndocs_done += ps[i].doc_end;
        free(ps[i].text);
        ps[i].text = NULL;
    }
    return MP_OK;
}

/* Reads, encodes and writes every input; MP_OK or the first error. */
static mp_code run_all(const mp_tok *t, reader *r, sink *k, int64_t total_bytes, mp_err *err) {
    int nthreads = omp_get_max_threads();
    mp_tok_state **states = mp_xmalloc((size_t)nthreads * sizeof *states);
    for (int i = 0; i < nthreads; i++) states[i] = mp_tok_state_new(t);
    piece *ps = mp_xcalloc(BATCH_PIECES * sizeof *ps);
    mp_progress *bar = mp_progress_start("tokenising", total_bytes, MP_PROGRESS_BYTES);
    mp_code rc = MP_OK;
    for (int more = 1; more && rc == MP_OK;) {
        int n = 0;
        size_t bytes = 0;
        while (n < BATCH_PIECES && bytes < BATCH_BYTES) {
            int got = next_piece(r, &ps[n], err);
            if (got < 0) rc = err->code;
            if (got <= 0) {
                more = 0;
                break;
            }
            bytes += ps[n++].n;
        }
        if (rc == MP_OK) rc = encode_batch(states, ps, n, k, err);
        for (int i = 0; i < n; i++) free(ps[i].text);   /* (freed already unless an error came first) */
        mp_progress_update(bar, r->bytes_in);
    }
    mp_progress_finish(bar);
    for (int i = 0; i < BATCH_PIECES; i++) mp_tok_ids_free(&ps[i].ids);
    free(ps);
    for (int i = 0; i < nthreads; i++) mp_tok_state_free(states[i]);
    free(states);
    return rc;
}

/* Sum of the sizes of the inputs (for the progress bar; 0 for those stat cannot size). */
static int64_t input_bytes(char **files, int n) {
    int64_t total = 0;
    struct stat st;
    for (int i = 0; i < n; i++)
        if (stat(files[i], &st) == 0 && S_ISREG(st.st_mode)) total += st.st_size;
    return total;
}

/* The EOS id for o: --eos, else the tokenizer's; -1 with a message when there is none. */
static int32_t pick_eos(const mp_tok *t, const mp_data_tok_opts *o) {
    int32_t eos = o->eos ? mp_tok_token_id(t, o->eos) : mp_tok_eos(t);
    if (o->eos && eos < 0) mp_log_fail("--eos: \"%s\" is not a token of %s", o->eos, o->tokenizer);
    else if (eos < 0)
        mp_log_fail("%s names no EOS token (no tokenizer_config.json eos_token, no EOS in the post-processor's "
                    "template); give one with --eos TOKEN", o->tokenizer);
    return eos;
}

int mp_data_tokenize(const mp_data_tok_opts *o, char **files, int nfiles) {
    mp_err err;
    mp_err_clear(&err);
    mp_tok *t;
    if (mp_tok_load(o->tokenizer, &t, &err) != MP_OK) {
        mp_log_fail("--tokenizer: %s", err.msg);
        return mp_exit_status(err.code);
    }
    sink k = {0};
    k.eos = pick_eos(t, o);
    if (k.eos < 0) {
        mp_tok_free(t);
        return 2;
    }
    int nbos_unused;
    const int32_t *eos_unused;
    mp_tok_template(t, &k.bos, &k.nbos, &eos_unused, &nbos_unused);
    int width = mp_tok_vocab_size(t) <= 65536 ? 2 : 4;
    char train_path[2048], val_path[2048];
    snprintf(train_path, sizeof train_path, "%s/%s_train.bin", o->out, o->name);
    snprintf(val_path, sizeof val_path, "%s/%s_val.bin", o->out, o->name);
    reader r = {.files = files, .nfiles = nfiles, .cur = -1, .field = o->jsonl_field};
    if (!r.field) r.carry = mp_xmalloc(PIECE_BYTES + 1);
    mp_code rc = mp_fs_mkdirs(o->out, &err);
    if (rc != MP_OK) mp_err_wrap(&err, "cannot create output directory %s", o->out);
    if (rc == MP_OK) rc = mp_token_stream_open(&k.out, train_path, width, &err);
    int opened = rc == MP_OK;
    if (rc == MP_OK) rc = run_all(t, &r, &k, input_bytes(files, nfiles), &err);
    int64_t n = k.out.n, nval = (int64_t)llround(o->val_fraction * (double)n);
    int split = o->val_fraction > 0;   /* else --val-fraction 0: no validation file */
    if (nval < split) nval = split;
    if (nval > n - 1) nval = n - 1;
    if (rc == MP_OK && n < 1 + split)
        rc = mp_err_set(&err, MP_EINPUT, "the inputs make %lld tokens; need at least %s", (long long)n,
                        split ? "2 (one per split)" : "1");
    if (rc == MP_OK) rc = mp_token_stream_split_commit(&k.out, val_path, nval, &err);
    else if (opened) mp_token_stream_abort(&k.out);
    char val[2200];
    if (rc == MP_OK) mp_data_val_summary(val, sizeof val, o->val_fraction, val_path, nval);
    if (rc == MP_OK)
        printf("meshpoint data: %lld document%s, %lld tokens (vocab %lld, %s) -> %s (%lld train tokens), %s\n",
               (long long)r.ndocs, r.ndocs == 1 ? "" : "s", (long long)n, (long long)mp_tok_vocab_size(t),
               width == 2 ? "uint16" : "uint32", train_path, (long long)(n - nval), val);
    else mp_log_fail("%s", err.msg);
    if (r.f) fclose(r.f);
    free(r.carry);
    mp_tok_free(t);
    return mp_exit_status(rc);
}
