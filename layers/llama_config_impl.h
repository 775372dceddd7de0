/*
 * layers/llama_config_impl.h — what layers/llama_config.c (parsing, defaults, validation, JSON) and
 * layers/llama_config_keys.c (the keys that are not model fields, and misspelt keys) share. Not for
 * use outside these two files.
 */
#ifndef MP_LLAMA_CONFIG_IMPL_H
#define MP_LLAMA_CONFIG_IMPL_H
#include "layers/llama_config.h"
#include <cjson/cJSON.h>

/* One warning per key and process, from the rank that prints info lines (every rank parses the config):
 * "config X: key \"k\": why". (llama_config.c) */
void llama_cfg_warn_once(const char *name, const char *key, const char *why);

/* A top-level key that is neither a model field, "train" nor one check_hf_constraint handles: nothing
 * if it is a bookkeeping key (hf_ignored); else an error if it looks like a typo of a key with an
 * effect that root lacks, or one warning. (llama_config_keys.c) */
mp_code llama_cfg_other_key(const cJSON *root, const llama_family_info *fam, const char *key, const char *name,
                            mp_err *err);

#endif
