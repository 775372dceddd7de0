/*
 * cli/tokfiles.c — the tokenizer files a checkpoint carries (cli/tokfiles.h): which files, read from an
 * HF directory or a checkpoint, put into a sink or a save.
 */
#include "cli/tokfiles.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>
#include "core/alloc.h"
#include "core/fsutil.h"
#include "tokenizer/tokenizer.h"

/* Appends a file, taking data. */
static void push(mp_tokfiles *t, const char *name, char *data, size_t len) {
    t->name[t->n] = mp_strdup(name);
    t->data[t->n] = data;
    t->len[t->n++] = len;
}

mp_code mp_tokfiles_from_dir(mp_tokfiles *t, const char *dir, mp_err *err) {
    memset(t, 0, sizeof *t);
    int64_t total = 0;
    for (int i = 0; ckpt_file_names[i]; i++) {
        char *path = mp_fs_join(dir, ckpt_file_names[i]), *data = NULL;
        size_t len = 0;
        mp_code rc = mp_fs_exists(path) ? mp_read_text(path, (size_t)CKPT_FILES_MAX_BYTES, &data, &len, err) : MP_OK;
        total += (int64_t)len;
        if (!rc && total > CKPT_FILES_MAX_BYTES)
            rc = mp_err_set(err, MP_EINPUT, "%s: the tokenizer files are more than %lld bytes together", dir,
                            (long long)CKPT_FILES_MAX_BYTES);
        free(path);
        if (rc) {
            free(data);
            mp_tokfiles_free(t);
            return rc;
        }
        if (data) push(t, ckpt_file_names[i], data, len);
    }
    return MP_OK;
}

mp_code mp_tokfiles_from_ckpt(mp_tokfiles *t, const ckpt_reader *r, mp_err *err) {
    memset(t, 0, sizeof *t);
    ckpt_file_entry *v;
    int n;
    MP_TRY(ckpt_files_list(r, &v, &n, err));
    mp_code rc = MP_OK;   /* n <= CKPT_FILES_MAX: ckpt_files_list takes each allowed name once */
    for (int i = 0; i < n && !rc; i++) {
        char *data = NULL;
        size_t len = 0;
        if (!(rc = ckpt_file_read(r, v[i].name, &data, &len, err))) push(t, v[i].name, data, len);
    }
    free(v);
    if (rc) mp_tokfiles_free(t);
    return rc;
}

mp_code mp_tokfiles_from_ckpt_dir(mp_tokfiles *t, const char *dir, mp_err *err) {
    memset(t, 0, sizeof *t);
    ckpt_reader *r = NULL;
    MP_TRY(ckpt_open(&r, dir, err));
    mp_code rc = mp_tokfiles_from_ckpt(t, r, err);
    ckpt_close(r);
    return rc;
}

mp_code mp_tokfiles_put(const mp_tokfiles *t, rs_sink *sink, mp_err *err) {
    for (int i = 0; i < t->n; i++) MP_TRY(sink->file(sink, t->name[i], t->data[i], t->len[i], err));
    return MP_OK;
}

mp_code mp_tokfiles_save(const mp_tokfiles *t, ckpt_save *s, mp_err *err) {
    for (int i = 0; i < t->n; i++) MP_TRY(ckpt_save_file(s, t->name[i], t->data[i], t->len[i], err));
    return MP_OK;
}

void mp_tokfiles_free(mp_tokfiles *t) {
    for (int i = 0; i < t->n; i++) {
        free(t->name[i]);
        free(t->data[i]);
    }
    memset(t, 0, sizeof *t);
}

int64_t mp_tokfiles_bytes(const mp_tokfiles *t) {
    int64_t n = 0;
    for (int i = 0; i < t->n; i++) n += (int64_t)t->len[i];
    return n;
}

mp_code mp_tokfiles_check_dir(const mp_tokfiles *t, const char *dir, mp_err *err) {
    mp_code rc = MP_OK;
    for (int i = 0; i < t->n && !rc; i++) {
        char *path = mp_fs_join(dir, t->name[i]), *data = NULL;
        size_t len = 0;
        mp_err re;
        if (mp_read_text(path, t->len[i] + 1, &data, &len, &re))
            rc = mp_err_set(err, MP_ECHECK, "carried file %s: %s", t->name[i], re.msg);
        else if (len != t->len[i] || XXH3_64bits(data, len) != XXH3_64bits(t->data[i], t->len[i]))
            rc = mp_err_set(err, MP_ECHECK, "%s: %zu bytes%s, the checkpoint's carried %s has %zu", path, len,
                            len == t->len[i] ? " with another checksum" : "", t->name[i], t->len[i]);
        free(data);
        free(path);
    }
    return rc;
}

int mp_tokfiles_carries(const ckpt_reader *r, const char *name) {
    ckpt_file_entry *v;
    int n, found = 0;
    mp_err e;
    if (ckpt_files_list(r, &v, &n, &e)) return 0;
    for (int i = 0; i < n; i++) found |= !strcmp(v[i].name, name);
    free(v);
    return found;
}

mp_code mp_tokfiles_load_tokenizer(const ckpt_reader *r, mp_tok **tok, mp_err *err) {
    *tok = NULL;
    char *json = NULL, *cfg = NULL;
    ckpt_file_entry *v;
    int n;
    MP_TRY(ckpt_files_list(r, &v, &n, err));   /* a refused list is an error, not "none carried" */
    free(v);
    mp_code rc = ckpt_file_read(r, "tokenizer.json", &json, NULL, err);
    if (rc == MP_EINPUT) {   /* none carried */
        mp_err_clear(err);
        return MP_OK;
    }
    MP_TRY(rc);
    rc = ckpt_file_read(r, "tokenizer_config.json", &cfg, NULL, err);   /* names the EOS */
    if (rc == MP_EINPUT) rc = MP_OK;
    char *dir = mp_fs_join(ckpt_reader_dir(r), CKPT_FILES_DIR), *name = mp_fs_join(dir, "tokenizer.json");
    if (!rc) rc = mp_tok_load_text(json, cfg, name, tok, err);
    free(name);
    free(dir);
    free(json);
    free(cfg);
    return rc;
}

/* "text (id)" of a token id into buf. */
static void token_str(const mp_tok *t, int32_t id, char *buf, size_t cap) {
    const char *s = id >= 0 ? mp_tok_id_token(t, id) : NULL;
    if (s) snprintf(buf, cap, "%s (%d)", s, id);
    else snprintf(buf, cap, "none");
}

void mp_tokfiles_describe(const ckpt_reader *r, char *buf, size_t cap) {
    mp_err err;
    mp_tok *t = NULL;
    if (mp_tokfiles_load_tokenizer(r, &t, &err)) {
        snprintf(buf, cap, "(does not load: %s)", err.msg);
        return;
    }
    if (!t) {
        snprintf(buf, cap, "%s", mp_tokfiles_carries(r, "tokenizer.model")
                                     ? "sentencepiece tokenizer.model (carried as is; no tokenizer.json)" : "none");
        return;
    }
    char bos[96], eos[96];
    const int32_t *b, *e;
    int nb, ne;
    mp_tok_template(t, &b, &nb, &e, &ne);
    token_str(t, nb ? b[0] : -1, bos, sizeof bos);
    token_str(t, mp_tok_eos(t), eos, sizeof eos);
    snprintf(buf, cap, "%s, vocab %lld, BOS %s, EOS %s", mp_tok_kind(t), (long long)mp_tok_vocab_size(t), bos, eos);
    mp_tok_free(t);
}
