/*
 * cli/tokfiles.h — the tokenizer files a checkpoint carries: read from a Hugging Face
 * model directory by `import`, from a checkpoint by `reshard`, `export` and `train` (--init-from,
 * --resume), and put into whatever is written next (a checkpoint save, an engine sink). They travel as
 * opaque bytes, checksummed by ckpt/ (ckpt/files.c); only `sample` and `ckpt show` parse them, through
 * tokenizer/.
 */
#ifndef MP_TOKFILES_H
#define MP_TOKFILES_H

#include <stddef.h>
#include "ckpt/ckpt.h"
#include "core/error.h"
#include "reshard/reshard.h"

typedef struct mp_tokfiles {
    int n;
    char *name[CKPT_FILES_MAX];
    char *data[CKPT_FILES_MAX];   /* NUL-terminated copies */
    size_t len[CKPT_FILES_MAX];
} mp_tokfiles;

/* Those of ckpt_file_names (the files transformers' AutoTokenizer and GenerationConfig read; tokenizer.model
 * carried opaque) present in dir, read whole, CKPT_FILES_MAX_BYTES in all (t starts empty; free with
 * mp_tokfiles_free). */
mp_code mp_tokfiles_from_dir(mp_tokfiles *t, const char *dir, mp_err *err);
/* Every file checkpoint r carries, checked against its checksum (MP_ECHECK naming the file). */
mp_code mp_tokfiles_from_ckpt(mp_tokfiles *t, const ckpt_reader *r, mp_err *err);
/* mp_tokfiles_from_ckpt of the checkpoint in dir. */
mp_code mp_tokfiles_from_ckpt_dir(mp_tokfiles *t, const char *dir, mp_err *err);
/* Carries every file of t into the sink / the save. */
mp_code mp_tokfiles_put(const mp_tokfiles *t, rs_sink *sink, mp_err *err);
mp_code mp_tokfiles_save(const mp_tokfiles *t, ckpt_save *s, mp_err *err);
void mp_tokfiles_free(mp_tokfiles *t);
/* The bytes of every file of t together (for the free-disk checks). */
int64_t mp_tokfiles_bytes(const mp_tokfiles *t);
/* Checks that directory dir holds every file of t byte for byte (an export's read-back): MP_ECHECK naming
 * the first that is missing or differs. */
mp_code mp_tokfiles_check_dir(const mp_tokfiles *t, const char *dir, mp_err *err);

/* One line naming the tokenizer checkpoint r carries into buf: "byte-level BPE, vocab 49152, BOS
 * <|endoftext|> (0), EOS <|im_end|> (2)", "none" when it carries none, or why it does not load. */
void mp_tokfiles_describe(const ckpt_reader *r, char *buf, size_t cap);

/* 1 if checkpoint r lists carried file name (0 also when its list does not parse). */
int mp_tokfiles_carries(const ckpt_reader *r, const char *name);

/* Loads the tokenizer checkpoint r carries into *tok from its tokenizer.json and tokenizer_config.json,
 * each read once and checked against its checksum; *tok stays NULL and MP_OK when it carries no
 * tokenizer.json. MP_EINPUT (mp_tok_load_text's) when it does not load. */
struct mp_tok;
mp_code mp_tokfiles_load_tokenizer(const ckpt_reader *r, struct mp_tok **tok, mp_err *err);

#endif
