/*
 * core/config.h — model and training configuration, read from JSON (cJSON).
 *
 * The model part uses Hugging Face config.json field names at the top level, so an HF Llama
 * config.json is a valid meshpoint config. HF keys that do not change the math (model_type,
 * torch_dtype, token ids, ...) are accepted; keys that would change it are checked (hidden_act must be
 * "silu", attention_bias false, rope_scaling null, ...). The training part lives in an optional
 * "train" object. Any other key is an error naming it, so a typo never silently falls back to a default.
 */
#ifndef MP_CONFIG_H
#define MP_CONFIG_H

#include <stdint.h>
#include "core/error.h"

typedef struct mp_model_config {
    int hidden_size;
    int intermediate_size;
    int num_hidden_layers;
    int num_attention_heads;
    int num_key_value_heads;
    int vocab_size;
    int max_position_embeddings;
    double rms_norm_eps;
    double rope_theta;
    int tie_word_embeddings;
    double initializer_range;
} mp_model_config;

#define MP_PATH_MAX 1024

typedef struct mp_train_config {
    int64_t steps;             /* optimizer steps to run in total */
    int batch_size;            /* global batch, in sequences, per optimizer step */
    int grad_accum;            /* micro-batches per step (batch_size % (grad_accum*dp) == 0) */
    int seq_len;
    double lr, min_lr;         /* peak and floor of the schedule */
    int64_t warmup_steps;
    int64_t decay_steps;       /* cosine length after warmup; 0 = until `steps` */
    double weight_decay, beta1, beta2, adam_eps, grad_clip;   /* grad_clip <= 0: off */
    uint64_t seed;
    char train_data[MP_PATH_MAX];
    char val_data[MP_PATH_MAX];
    int64_t eval_every;        /* 0 = only at the end */
    int eval_batches;
    int64_t log_every;
    int tp, dp;                /* mesh (0 = dp from world size) */
    int sp;                    /* sequence parallel: -1 auto (on when tp > 1), 0 off, 1 on */
    int reshard_after_forward;
} mp_train_config;

void mp_model_config_default(mp_model_config *m);
void mp_train_config_default(mp_train_config *t);

/* Parses JSON text (name is used in messages). Either output may be NULL to ignore that part, but
 * its keys are still checked. Validates the model config (mp_model_config_validate). */
mp_code mp_config_parse(const char *text, const char *name, mp_model_config *m, mp_train_config *t,
                        mp_err *err);
mp_code mp_config_load(const char *path, mp_model_config *m, mp_train_config *t, mp_err *err);

/* Checks divisibility and ranges; the message names the field. */
mp_code mp_model_config_validate(const mp_model_config *m, mp_err *err);
mp_code mp_train_config_validate(const mp_train_config *t, mp_err *err);

/* HF config.json text for the model ("architectures": ["LlamaForCausalLM"], ...). Caller frees. */
char *mp_model_config_to_json(const mp_model_config *m);
/* JSON text of the training config. Caller frees. */
char *mp_train_config_to_json(const mp_train_config *t);

static inline int mp_head_dim(const mp_model_config *m) { return m->hidden_size / m->num_attention_heads; }
/* Number of parameters of the (unpadded) model. */
int64_t mp_model_num_params(const mp_model_config *m);

#endif
