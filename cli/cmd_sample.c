/*
 * cli/cmd_sample.c — `meshpoint sample --checkpoint CKPT --prompt TEXT [--tokens N] [--temperature T]
 * [--top-k K] [--top-p P] [--seed S] [--ids] [--ignore-eos] [--no-kv-cache]`: text (or token ids) generated
 * by a trained model, on any mesh.
 *
 * The model is the checkpoint's architecture (its model_config) with its weights, loaded like eval's (a
 * full or --model-only checkpoint, any mesh it was saved on), forward only: weights, the activations of one
 * forward and the KV cache, no gradients, no moments (the printed memory plan says so).
 *
 * Generation runs with a KV cache (layers/llama.h llama_forward_kv): one forward over the prompt (the
 * prefill) fills every layer's cache and gives the logits of its last position, then each new token is
 * one forward of one position against the cache. On tp meshes the cache is sharded by kv head, as the
 * attention is (each tp rank caches its own heads' keys and values); dp replicas each keep a whole cache.
 * --no-kv-cache keeps the former path as the oracle of the tests: every token reruns the forward over the
 * whole sequence (micro-batch 1, seq_len = prompt + tokens, no sequence parallelism); causal attention
 * makes the unused tail irrelevant to the logits read at the last position. Both paths compute the same
 * function; their logits may differ in the last bits (a one-row GEMM may sum in another order than a
 * many-row one: docs/DESIGN_NOTES.md "Sampling with a KV cache"), and tests/sample.sh checks that the
 * tokens are identical.
 *
 * Sampling is identical on every mesh: the tp ranks gather the vocabulary-parallel logits of the last
 * position into the whole row, and every rank then draws the same token with cli/sampler.h's rule
 * (temperature, top-k, top-p; the uniform number comes from the counter-based RNG keyed by --seed and the
 * position, never from a rank-local state), so no broadcast is needed and dp replicas agree.
 *
 * Generation stops after --tokens tokens, or at an end-of-sequence id (sample_eos_ids: a carried
 * generation_config.json's eos_token_id, else the model config's, an int or a list, else the tokenizer's
 * EOS) unless --ignore-eos; the EOS token itself is printed (as text: its decoding, special tokens
 * skipped). Tokens
 * are printed on rank 0 as they are produced (sample_print_token, flushed per token).
 *
 * Input and output: when the checkpoint carries a tokenizer (`import` of an HF directory keeps it),
 * --prompt TEXT is encoded by it (with the BOS its template puts first, as transformers' tokenizer(text)
 * does) and the continuation is printed as text token by token as it is produced (print_token: the
 * decoded text is held back while it ends in an incomplete UTF-8 character, as a byte-level token can;
 * each token decodes a window of a few tokens, not the whole sequence). Without a tokenizer, --prompt TEXT
 * is UTF-8 bytes as token ids (byte-level models, vocab >= 256) and the continuation is printed as bytes;
 * a checkpoint whose tokenizer does not load, or that carries only a sentencepiece tokenizer.model, refuses
 * text. --ids takes the prompt as decimal ids ("72 101 108") and prints ids, for any model, without loading
 * the tokenizer. Exit 2 on bad input (ids >= vocab_size, a sequence beyond
 * max_position_embeddings), 1 when the checkpoint fails to load.
 */
#include <assert.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/args.h"
#include "cli/ckpt_common.h"
#include "cli/cli.h"
#include "cli/memplan.h"
#include "cli/runtime.h"
#include "cli/sampler.h"
#include "cli/tokfiles.h"
#include "cli/train_ckpt.h"
#include "core/alloc.h"
#include "core/log.h"
#include "tokenizer/tokenizer.h"

/* The flags of `meshpoint sample`. */
typedef struct sample_flags {
    const char *checkpoint, *prompt, *device, *comm, *max_memory;
    int tokens, top_k, tp, dp, ids, ignore_eos, no_kv_cache;
    double temperature, top_p;
    int64_t seed;
} sample_flags;

/* The state of one sampling run, owned by mp_cmd_sample. */
typedef struct sample_run {
    sample_flags f;
    mp_runtime rt;
    mp_err err;
    llama_config mc;
    char ckpt_dir[4096];
    size_t max_bytes;
    int32_t *seq;          /* prompt + generated ids, [T] */
    int n_prompt, n, T;    /* prompt length, current length, sequence capacity */
    float *row;            /* the last position's logits over the whole vocabulary */
    float *part;           /* this tp rank's slice of it */
    mp_sampler sampler;
    int32_t eos[LLAMA_MAX_EOS];
    int n_eos;             /* end-of-sequence ids generation stops at (sample_eos_ids; none with --ignore-eos) */
    llama_model *model;
    mp_tok *tok;           /* the checkpoint's tokenizer (NULL: byte-level or --ids) */
    int32_t carried_eos[LLAMA_MAX_EOS];   /* the carried files' EOS ids (eos_ids), n_carried_eos of them */
    int n_carried_eos;
    int out_from, out_to;  /* print_token's window: text of seq[out_from..out_to) printed, out_from its context */
    mp_memplan plan;       /* printed at the start, compared with the peak at the end */
} sample_run;

static const char *sample_about =
    "Generates a continuation of --prompt from a checkpoint's model, on any mesh (mpirun -np N with --tp/--dp):\n"
    "the same tokens on every mesh for a given --seed. --prompt is text through the checkpoint's tokenizer when\n"
    "it carries one (`meshpoint import` keeps the model's), else UTF-8 bytes for byte-level models (vocab >=\n"
    "256); --ids reads the prompt as decimal token ids and prints ids. The prompt is run once into a KV cache,\n"
    "then each new token is one position; tokens print as they come. Generation stops after --tokens tokens or\n"
    "at the model's end-of-sequence id (generation_config.json's or the config's eos_token_id) unless\n"
    "--ignore-eos. Sampling: logits / temperature, then the --top-k most likely, then the smallest most likely\n"
    "set of mass >= --top-p.";

/* Parses the flags into r->f. Fails alike on every rank (the caller declares it: mp_alike_of). */
static mp_code parse_flags(sample_run *r, int argc, char **argv, int *help) {
    sample_flags *f = &r->f;
    const mp_arg flags[] = {
        {"checkpoint", MP_ARG_STRING, &f->checkpoint, "DIR", "the model: RUN, RUN/checkpoints or RUN/checkpoints/step_N"},
        {"prompt", MP_ARG_STRING, &f->prompt, "TEXT", "the text to continue (with --ids: decimal token ids)"},
        {"tokens", MP_ARG_INT, &f->tokens, "N", "tokens to generate"},
        {"temperature", MP_ARG_DOUBLE, &f->temperature, "T", "softmax temperature (0: greedy)"},
        {"top-k", MP_ARG_INT, &f->top_k, "K", "sample among the K most likely tokens (0: all)"},
        {"top-p", MP_ARG_DOUBLE, &f->top_p, "P", "then among the most likely tokens of total probability >= P (1: all)"},
        {"seed", MP_ARG_I64, &f->seed, "S", "seed of the sampling"},
        {"ids", MP_ARG_SWITCH, &f->ids, NULL, "prompt and output as token ids instead of text (any model; the "
         "tokenizer is not loaded)"},
        {"ignore-eos", MP_ARG_SWITCH, &f->ignore_eos, NULL, "do not stop at the end-of-sequence id"},
        {"no-kv-cache", MP_ARG_SWITCH, &f->no_kv_cache, NULL,
         "rerun the whole sequence for every token (slow; the reference the KV cache is tested against)"},
        {"tp", MP_ARG_INT, &f->tp, "N", "tensor-parallel degree"},
        {"dp", MP_ARG_INT, &f->dp, "N", "data-parallel degree (0: world / tp)"},
        {"device", MP_ARG_STRING, &f->device, "DEV", MP_RUNTIME_DEVICE_HELP, mp_runtime_devices},
        {"comm", MP_ARG_STRING, &f->comm, "C", MP_RUNTIME_COMM_HELP, mp_mesh_comm_names},
        {"max-memory", MP_ARG_STRING, &f->max_memory, "SIZE", "memory bound per rank for the plan",
         .dflt = "what the host and ulimit allow"},
        {0}};
    int npos = 0;
    MP_TRY(mp_args_parse(flags, argc, argv, &npos, help, &r->err));
    if (*help) {
        if (r->rt.rank == 0)
            mp_args_help(stdout, "meshpoint sample --checkpoint DIR --prompt TEXT [options]", sample_about, flags);
        return MP_OK;
    }
    if (npos) return mp_err_set(&r->err, MP_EINPUT, "unexpected argument \"%s\"", argv[0]);
    if (!f->checkpoint || !f->prompt) return mp_err_set(&r->err, MP_EINPUT, "--checkpoint DIR and --prompt TEXT are required");
    if (f->tokens < 1) return mp_err_set(&r->err, MP_EINPUT, "--tokens must be >= 1, got %d", f->tokens);
    if (!(f->temperature >= 0)) return mp_err_set(&r->err, MP_EINPUT, "--temperature must be >= 0, got %g", f->temperature);
    if (f->top_k < 0) return mp_err_set(&r->err, MP_EINPUT, "--top-k must be >= 0, got %d", f->top_k);
    if (!(f->top_p > 0 && f->top_p <= 1)) return mp_err_set(&r->err, MP_EINPUT, "--top-p must be in (0, 1], got %g", f->top_p);
    if (f->seed < 0) return mp_err_set(&r->err, MP_EINPUT, "--seed must be >= 0, got %lld", (long long)f->seed);
    if (f->max_memory) MP_TRY(mp_args_parse_size(f->max_memory, "--max-memory", 1, &r->max_bytes, &r->err));
    return MP_OK;
}

/* run->carried_eos from eos_token_id j of generation_config.json (an int or a list of ints, each a token
 * id of the model); MP_EINPUT naming the file and key otherwise. */
static mp_code parse_eos(sample_run *run, const ckpt_reader *r, const cJSON *j) {
    const cJSON *one = cJSON_IsNumber(j) ? j : NULL, *it = one ? one : cJSON_IsArray(j) ? j->child : NULL;
    int ok = one || cJSON_IsArray(j);
    for (; ok && it; it = one ? NULL : it->next) {
        double v = cJSON_IsNumber(it) ? it->valuedouble : -1;
        ok = v >= 0 && v < run->mc.vocab_size && v == (double)(int32_t)v && run->n_carried_eos < LLAMA_MAX_EOS;
        if (ok) run->carried_eos[run->n_carried_eos++] = (int32_t)v;
    }
    if (!ok)
        return mp_err_set(&run->err, MP_EINPUT, "checkpoint %s: carried generation_config.json: \"eos_token_id\" must be a "
                          "token id or a list of at most %d, each an integer in [0, vocab_size %d)", ckpt_reader_dir(r),
                          LLAMA_MAX_EOS, run->mc.vocab_size);
    return MP_OK;
}

/* The end-of-sequence ids the checkpoint r's carried files name into run->carried_eos: its
 * generation_config.json's eos_token_id (an int or a list, each checked against the vocabulary) when
 * present, else none (sample_eos_ids falls back to the model config's, then the tokenizer's). */
static mp_code eos_ids(sample_run *run, const ckpt_reader *r) {
    run->n_carried_eos = 0;
    char *text = NULL;
    ckpt_file_entry *v;
    int n;
    MP_TRY(ckpt_files_list(r, &v, &n, &run->err));   /* a refused list is an error, not "none carried" */
    free(v);
    mp_code rc = ckpt_file_read(r, "generation_config.json", &text, NULL, &run->err);
    if (rc == MP_OK) {
        cJSON *j = cJSON_Parse(text), *e = cJSON_GetObjectItemCaseSensitive(j, "eos_token_id");
        if (!cJSON_IsObject(j))
            rc = mp_err_set(&run->err, MP_EINPUT, "checkpoint %s: carried generation_config.json is not a JSON object",
                            ckpt_reader_dir(r));
        else if (e && !cJSON_IsNull(e))
            rc = parse_eos(run, r, e);
        cJSON_Delete(j);
        free(text);
        MP_TRY(rc);
    } else if (rc != MP_EINPUT) {
        return rc;
    }
    mp_err_clear(&run->err);
    return MP_OK;
}

/* The checkpoint's tokenizer, when it carries one and the prompt is text, into r->tok (checked against
 * its checksums), and its EOS ids (eos_ids). With --ids the tokenizer is not loaded (any model samples
 * in ids). Text with a tokenizer that does not load, or only a sentencepiece tokenizer.model (which
 * meshpoint does not read), is refused, pointing to --ids (MP_EINPUT). Collective open (rank 0 reads the
 * index), the rest local: the caller agrees. */
static mp_code load_tokenizer(sample_run *r) {
    ckpt_reader *cr = NULL;
    MP_TRY(mp_runtime_ckpt_open_meta(&r->rt, r->ckpt_dir, &cr, &r->err));
    mp_code rc = r->f.ids ? MP_OK : mp_tokfiles_load_tokenizer(cr, &r->tok, &r->err);
    if (rc == MP_EINPUT)
        mp_err_wrap(&r->err, "--prompt as text: the tokenizer checkpoint %s carries does not load (pass the prompt as token "
                    "ids with --ids)", r->ckpt_dir);
    else if (!rc && !r->f.ids && !r->tok && mp_tokfiles_carries(cr, "tokenizer.model"))
        rc = mp_err_set(&r->err, MP_EINPUT, "--prompt as text: checkpoint %s carries only a sentencepiece tokenizer.model "
                        "(no tokenizer.json), which meshpoint does not read: pass the prompt as token ids with --ids",
                        r->ckpt_dir);
    if (!rc) rc = eos_ids(r, cr);
    ckpt_close(cr);
    return rc;
}

/* Resolves the checkpoint (rank 0 decides) and reads its model config (every rank). Collective: the
 * agreed code. */
static mp_agreed read_checkpoint_config(sample_run *r) {
    MP_TRY_AGREED(mp_runtime_resolve_ckpt(&r->rt, NULL, r->f.checkpoint, r->ckpt_dir, sizeof r->ckpt_dir, &r->err));
    MP_TRY_AGREED(mp_runtime_ckpt_model_config(&r->rt, r->ckpt_dir, &r->mc, &r->err));
    return mp_runtime_agree(&r->rt, load_tokenizer(r), &r->err);
}

/* Turns --prompt into token ids in r->seq (allocated for the whole sequence). Fails alike. */
static mp_code encode_prompt(sample_run *r) {
    const char *s = r->f.prompt;
    int V = r->mc.vocab_size;
    size_t cap = strlen(s) + 1;   /* ids: at most one per byte */
    mp_tok_ids text = {0};
    if (r->tok && !r->f.ids) {   /* text: tokenizer(text), the template's BOS first */
        const int32_t *bos, *eos;
        int nbos, neos;
        mp_tok_template(r->tok, &bos, &nbos, &eos, &neos);
        for (int i = 0; i < nbos; i++) mp_tok_ids_push(&text, bos[i]);
        mp_tok_state *ts = mp_tok_state_new(r->tok);
        mp_tok_encode(ts, s, strlen(s), 0, &text);
        mp_tok_state_free(ts);
        cap = (size_t)text.n + 1;
    }
    r->seq = mp_xcalloc(sizeof(int32_t) * (cap + (size_t)r->f.tokens));
    int n = 0;
    if (r->tok && !r->f.ids) {
        for (int64_t i = 0; i < text.n; i++) {
            if (text.v[i] >= V) {
                mp_tok_ids_free(&text);
                return mp_err_set(&r->err, MP_EINPUT, "--prompt: token %d is not below the model's vocab_size %d",
                                  text.v[i], V);
            }
            r->seq[n++] = text.v[i];
        }
        mp_tok_ids_free(&text);
    } else if (!r->f.ids) {
        if (V < 256)
            return mp_err_set(&r->err, MP_EINPUT, "--prompt as bytes needs a byte-level model (vocab_size >= 256, this one "
                              "has %d): pass token ids with --ids", V);
        for (const unsigned char *c = (const unsigned char *)s; *c; c++) r->seq[n++] = *c;
    } else {
        for (const char *c = s; *c;) {
            while (*c && (isspace((unsigned char)*c) || *c == ',')) c++;
            if (!*c) break;
            char *end;
            long v = strtol(c, &end, 10);
            if (end == c || v < 0 || v >= V)
                return mp_err_set(&r->err, MP_EINPUT, "--prompt: \"%.20s\" is not a token id below vocab_size %d", c, V);
            r->seq[n++] = (int32_t)v;
            c = end;
        }
    }
    if (n == 0) return mp_err_set(&r->err, MP_EINPUT, "--prompt is empty");
    if (n + r->f.tokens > r->mc.max_position_embeddings)
        return mp_err_set(&r->err, MP_EINPUT, "the prompt (%d tokens) and --tokens %d pass max_position_embeddings (%d)",
                          n, r->f.tokens, r->mc.max_position_embeddings);
    r->n_prompt = r->n = n;
    r->T = n + r->f.tokens;
    return MP_OK;
}

/* The end-of-sequence ids generation stops at, into ids (cap >= LLAMA_MAX_EOS); returns their count. The
 * one place that decides them, as transformers' generate does: generation_config.json's eos_token_id when
 * the checkpoint carries one, else the model config's (an int or a list), else the tokenizer's EOS token;
 * none for a model with neither. */
static int sample_eos_ids(const sample_run *r, int32_t *ids, int cap) {
    const int32_t *src = r->n_carried_eos ? r->carried_eos : r->mc.eos_token_id;
    int n = r->n_carried_eos ? r->n_carried_eos : r->mc.n_eos;
    if (n > cap) n = cap;
    for (int i = 0; i < n; i++) ids[i] = src[i];
    if (n == 0 && r->tok && mp_tok_eos(r->tok) >= 0 && cap > 0) ids[n++] = mp_tok_eos(r->tok);
    return n;
}

/* Plans the memory, builds the model (micro-batch 1; with the KV cache: a cache of T positions and one
 * forward of the prompt's length; without: seq_len T, no SP) and loads the checkpoint's weights.
 * Collective: the agreed code. */
static mp_agreed build_model(sample_run *r) {
    /* forward only: the weights, the activations of one forward and the KV cache; no gradients, no moments */
    llama_options o = {.micro_batch = 1, .seq_len = r->T, .sp = 0, .reshard_after_forward = 1, .inference = 1,
                       .kv_cache = !r->f.no_kv_cache, .kv_chunk = r->f.no_kv_cache ? 0 : r->n_prompt,
                       .act_dtype = r->rt.be->act_dtype};
    int V = r->mc.vocab_size, vl = (V + r->rt.mesh.tp - 1) / r->rt.mesh.tp;
    /* the logits row, this rank's part of it and the sampler's */
    mp_memplan_use use = {.loads = 1, .own = (int64_t)sizeof(float) * vl * (r->rt.mesh.tp + 1) + mp_sampler_bytes(V)};
    MP_TRY_AGREED(mp_memplan_check(&r->rt, &r->mc, &o, &use, r->max_bytes, &r->plan, &r->err));
    MP_TRY_AGREED(
        mp_runtime_agree(&r->rt, llama_create(&r->model, &r->mc, &o, &r->rt.mesh, r->rt.be, &r->err), &r->err));
    mp_run_state st;
    MP_TRY_AGREED(
        mp_runtime_agree(&r->rt, mp_checkpoint_load(r->model, r->ckpt_dir, &r->mc, 1, &st, &r->err), &r->err));
    r->row = mp_xmalloc(sizeof(float) * (size_t)vl * (size_t)r->rt.mesh.tp);
    r->part = mp_xmalloc(sizeof(float) * (size_t)vl);
    mp_sampler_init(&r->sampler, V, r->f.temperature, r->f.top_k, r->f.top_p, (uint64_t)r->f.seed);
    r->n_eos = r->f.ignore_eos ? 0 : sample_eos_ids(r, r->eos, LLAMA_MAX_EOS);
    return (mp_agreed){MP_OK};
}

/* The logits of position r->n - 1 over the whole vocabulary into r->row (every rank alike): one forward
 * of the new positions against the KV cache (all of the prompt first, then one), or, with --no-kv-cache,
 * of the whole sequence. */
static void last_logits(sample_run *r) {
    int64_t row = 0;
    if (r->f.no_kv_cache) {
        llama_forward(r->model, r->seq, NULL);
        row = r->n - 1;
    } else if (r->n == r->n_prompt) {
        llama_forward_kv(r->model, r->seq, r->n, 0);
    } else {
        llama_forward_kv(r->model, r->seq + r->n - 1, 1, r->n - 1);
    }
    int v_start, v_local, v_valid;
    llama_logits(r->model, r->part, row, 1, &v_start, &v_local, &v_valid);
    mp_comm *tp = r->rt.mesh.ctl_tp;   /* r->part and r->row are host buffers */
    int64_t counts[64];
    assert(tp->size <= 64);
    for (int i = 0; i < tp->size; i++) counts[i] = v_local;   /* every slice is v_local long (padding at the end) */
    tp->ops->all_gatherv(tp, r->row, r->part, counts, MP_F32);
}

/* Whether id is one of the end-of-sequence ids. */
static int is_eos(const sample_run *r, int32_t id) {
    for (int i = 0; i < r->n_eos; i++)
        if (r->eos[i] == id) return 1;
    return 0;
}

/* Prints what token r->seq[r->n - 1] adds to the text, through the tokenizer (rank 0), incrementally:
 * the new bytes are decode(seq[out_from..n)) past decode(seq[out_from..out_to)) (special tokens
 * skipped), a window of a few tokens whatever the length, with out_from's token as context (a decoder
 * that strips a leading space strips it from both). They are held back while they end in U+FFFD, the
 * mark of a UTF-8 character a later byte-level or byte-fallback token completes, for up to 3 tokens (a
 * character has at most 4 bytes: longer, the bytes are not a character and are printed as U+FFFD, as
 * decode does); and while the last token is a byte of a ByteFallback run ("<0xNN>"), however long the
 * run: decode turns an invalid run into one U+FFFD per byte, bytes that printed fine alone included, so
 * a run's text is known only when it ends (printing it early printed a byte that decode then replaced,
 * and sliced the replacement). final flushes what is held. The prompt itself (decode(prompt)) is printed
 * first, with n == n_prompt. */
static void print_token(sample_run *r, int final) {
    size_t plen = 0, len = 0;
    char *prev = mp_tok_decode(r->tok, r->seq + r->out_from, r->out_to - r->out_from, 1, &plen);
    char *text = mp_tok_decode(r->tok, r->seq + r->out_from, r->n - r->out_from, 1, &len);
    int held = !final && ((r->n - r->out_to < 4 && len >= 3 && !memcmp(text + len - 3, "\xEF\xBF\xBD", 3)) ||
                          mp_tok_is_fallback_byte(r->tok, r->seq[r->n - 1]));
    if (!held) {
        if (len > plen) {
            fwrite(text + plen, 1, len - plen, stdout);
            fflush(stdout);
        }
        r->out_from = r->out_to;
        r->out_to = r->n;
    }
    free(prev);
    free(text);
}

/* Prints one token of the output on rank 0 and flushes it: text through the checkpoint's tokenizer
 * (print_token: what seq[0..n) adds), decimal ids after a space but the first, or bytes. The one place
 * that turns ids into output; first: the prompt's first token (text: the whole prompt is printed then). */
static void sample_print_token(sample_run *r, int32_t id, int first) {
    if (r->rt.rank != 0) return;
    if (r->tok && !r->f.ids) {
        print_token(r, 0);
        return;
    }
    if (r->f.ids) printf("%s%d", first ? "" : " ", id);
    else putchar(id < 256 ? id : '?');
    fflush(stdout);
}

/* Prints the prompt, then generates up to --tokens tokens (stopping after an end-of-sequence id), printing
 * each as it comes, on rank 0. */
static void generate(sample_run *r) {
    int text = r->tok && !r->f.ids;
    if (text) sample_print_token(r, r->seq[0], 1);   /* decode(prompt) */
    for (int i = 0; !text && i < r->n_prompt; i++) sample_print_token(r, r->seq[i], i == 0);
    double t0 = mp_time_s(), t1 = t0;
    for (int t = 0; t < r->f.tokens; t++) {
        last_logits(r);
        int32_t id = mp_sampler_draw(&r->sampler, r->row, r->n);
        r->seq[r->n++] = id;
        sample_print_token(r, id, 0);
        if (t == 0) t1 = mp_time_s();
        if (is_eos(r, id)) break;
    }
    double t2 = mp_time_s();
    if (r->rt.rank != 0) return;
    if (text) print_token(r, 1);   /* what was held back */
    putchar('\n');
    fflush(stdout);
    int n = r->n - r->n_prompt;
    mp_info("sampled %d token(s) in %.3f s (prompt of %d: %.3f s to the first token; then %.2f tokens/s)%s", n,
            t2 - t0, r->n_prompt, t1 - t0, n > 1 ? (n - 1) / (t2 - t1) : 0.0,
            n < r->f.tokens ? ", stopped at the end-of-sequence id" : "");
}

/* `meshpoint sample`. Errors every rank finds alike go through MP_PHASE_ALIKE; the others are agreed
 * (MP_PHASE_AGREED; cli/runtime.h). */
int mp_cmd_sample(int argc, char **argv) {
    sample_run run = {.f = {.device = "cpu", .comm = "auto", .tokens = 64, .temperature = 0.8, .top_k = 0, .top_p = 1, .tp = 1, .seed = 1}};
    sample_run *r = &run;
    mp_runtime_start(&r->rt, &argc, &argv);
    mp_err_clear(&r->err);
    int help = 0, status = mp_exit_status(MP_OK);
#define ALIKE(expr) MP_PHASE_ALIKE(status, done, &r->rt, &r->err, expr)
#define AGREED(expr) MP_PHASE_AGREED(status, done, expr)
    ALIKE(mp_alike_of(parse_flags(r, argc, argv, &help)));
    if (help) goto done;
    ALIKE(mp_alike_of(mp_runtime_mesh(&r->rt, r->f.tp, r->f.dp, r->f.device, r->f.comm, &r->err)));
    AGREED(read_checkpoint_config(r));
    ALIKE(mp_alike_of(encode_prompt(r)));
    AGREED(build_model(r));
    generate(r);
    mp_memplan_report(&r->rt, r->plan.total);
#undef ALIKE
#undef AGREED
done:
    llama_destroy(r->model);
    free(r->seq);
    free(r->row);
    free(r->part);
    mp_sampler_free(&r->sampler);
    mp_tok_free(r->tok);
    mp_runtime_end(&r->rt);
    return status;
}
