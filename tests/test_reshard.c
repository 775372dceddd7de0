/*
 * tests/test_reshard.c — the reshard/ engine in one process: target layouts against the model's own
 * parameter table, init -> checkpoint -> reshard round trips through the public API, and the reader's
 * byte counters: for every tensor family (column-parallel, row-parallel, vocab-parallel, replicated
 * norms) and every change among tp 1/2/4/8 (dp 1 and 2 on the target), bytes read / bytes needed <=
 * 1.05 when the dims are multiples of 8 (checksum tiles fall on the TP boundaries; docs/FORMAT.md).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "core/alloc.h"
#include "core/comm.h"
#include "layers/llama.h"
#include "reshard/reshard.h"
#include "tests/testutil.h"

/* Dims divisible by 8: hidden 512, 8 heads / 8 kv heads (head_dim 64), intermediate 1024, vocab 512. */
static void cfg_aligned(llama_config *c) {
    llama_config_default(c);
    c->hidden_size = 512;
    c->intermediate_size = 1024;
    c->num_hidden_layers = 1;
    c->num_attention_heads = 8;
    c->num_key_value_heads = 8;
    c->vocab_size = 512;
    c->tie_word_embeddings = 0;
}

/* init -> a checkpoint for tp x dp at dir (model_only: parameters only). */
static void write_init(const llama_config *c, int tp, int dp, int model_only, const char *dir) {
    mp_err e;
    rs_box *b = NULL;
    int n = 0;
    cr_assert_eq(rs_target_layout(c, tp, dp, model_only, &b, &n, &e), MP_OK, "%s", e.msg);
    rs_source *src = NULL;
    cr_assert_eq(rs_source_init(&src, c, 1234, &e), MP_OK, "%s", e.msg);
    rs_sink *sink = NULL;
    cr_assert_eq(rs_sink_ckpt(&sink, mp_comm_self(), dir, 0, tp * dp, 0, 1 << 20, 0, 0, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(sink->meta(sink, "step", "0", &e), MP_OK);
    rs_stats st;
    cr_assert_eq(rs_run(src, sink, b, n, 0, 1, &st, &e), MP_OK, "%s", e.msg);
    cr_assert(st.largest_band <= (1 << 20), "band %lld above the bound", (long long)st.largest_band);
    sink->free(sink);
    src->close(src);
    free(b);
}

Test(reshard, target_layout_matches_the_model_table) {
    /* every box of the layout is what llama_place gives, every element of every tensor exactly once */
    llama_config c;
    cfg_aligned(&c);
    c.vocab_size = 258;            /* padded on tp 4 */
    c.intermediate_size = 90;      /* uneven TP slices */
    c.num_key_value_heads = 4;
    mp_err e;
    rs_box *b = NULL;
    int n = 0;
    cr_assert_eq(rs_target_layout(&c, 4, 3, 0, &b, &n, &e), MP_OK, "%s", e.msg);
    int ns = llama_tensor_specs(&c, NULL, 0);
    llama_tensor_spec *specs = mp_xmalloc(sizeof *specs * (size_t)ns);
    llama_tensor_specs(&c, specs, ns);
    for (int i = 0; i < ns; i++) {
        char name[160];
        snprintf(name, sizeof name, "model/%s", specs[i].name);
        int64_t vol = 0;
        for (int k = 0; k < n; k++)
            if (!strcmp(b[k].name, name)) vol += b[k].shape[0] * (b[k].ndim == 2 ? b[k].shape[1] : 1);
        cr_assert_eq(vol, specs[i].shape[0] * specs[i].shape[1], "%s: boxes cover %lld of %lld elements", name,
                     (long long)vol, (long long)(specs[i].shape[0] * specs[i].shape[1]));
    }
    /* vocab padding never reaches disk: the last tp rank's embed rows end at V */
    for (int k = 0; k < n; k++)
        if (strstr(b[k].name, "embed_tokens")) cr_assert_leq(b[k].off[0] + b[k].shape[0], 258);
    /* intermediate_size == vocab_size: gate/up are split as the MLP, not as vocabulary */
    c.intermediate_size = c.vocab_size = 258;
    free(b);
    cr_assert_eq(rs_target_layout(&c, 4, 1, 1, &b, &n, &e), MP_OK, "%s", e.msg);
    for (int k = 0; k < n; k++)
        if (strstr(b[k].name, "gate_proj")) {
            int64_t s, cnt;
            mp_split(258, 4, b[k].file_rank, &s, &cnt);
            cr_assert_eq(b[k].off[0], s, "gate_proj of rank %d starts at %lld, mp_split says %lld", b[k].file_rank,
                         (long long)b[k].off[0], (long long)s);
            cr_assert_eq(b[k].shape[0], cnt);
        }
    free(b);
    free(specs);
    /* refusals name the field */
    cr_assert_eq(rs_target_layout(&c, 3, 1, 0, &b, &n, &e), MP_EINPUT);
    cr_assert(strstr(e.msg, "num_key_value_heads"), "%s", e.msg);
}

Test(reshard, init_box_equals_model_init) {
    /* llama_init_box of any box = the same elements of the whole tensor generated at once */
    llama_config c;
    cfg_aligned(&c);
    llama_tensor_spec s[16];
    int ns = llama_tensor_specs(&c, s, 16);
    cr_assert_gt(ns, 5);
    const llama_tensor_spec *o = &s[5];   /* o_proj [512, 512] */
    cr_assert(strstr(o->name, "o_proj"), "%s", o->name);
    float *whole = mp_xmalloc(sizeof(float) * 512 * 512), *part = mp_xmalloc(sizeof(float) * 100 * 37);
    int64_t z[2] = {0, 0}, full[2] = {512, 512}, off[2] = {301, 77}, shp[2] = {100, 37};
    llama_init_box(&c, o, 7, z, full, whole);
    llama_init_box(&c, o, 7, off, shp, part);
    for (int r = 0; r < 100; r++)
        for (int k = 0; k < 37; k++)
            cr_assert_eq(part[r * 37 + k], whole[(301 + r) * 512 + 77 + k], "element (%d, %d)", 301 + r, 77 + k);
    free(whole);
    free(part);
}

/* The family of a tensor name. */
static int family(const char *name) {
    if (strstr(name, "norm")) return 3;
    if (strstr(name, "embed") || strstr(name, "lm_head")) return 2;
    if (strstr(name, "o_proj") || strstr(name, "down_proj")) return 1;
    return 0;
}

Test(reshard, bytes_read_equal_bytes_needed, .timeout = 300) {
    static const char *const fam[4] = {"column-parallel", "row-parallel", "vocab-parallel", "replicated norms"};
    llama_config c;
    cfg_aligned(&c);
    char *root = tu_mkdtemp("rs_bytes");
    const int tps[4] = {1, 2, 4, 8};
    char dirs[4][512];
    for (int i = 0; i < 4; i++) {
        snprintf(dirs[i], sizeof dirs[i], "%s/src_tp%d", root, tps[i]);
        write_init(&c, tps[i], 1, 1, dirs[i]);
    }
    mp_err e;
    for (int i = 0; i < 4; i++) {
        ckpt_reader *r = NULL;
        cr_assert_eq(ckpt_open(&r, dirs[i], &e), MP_OK, "%s", e.msg);
        for (int j = 0; j < 4; j++)
            for (int dp = 1; dp <= 2; dp++) {
                if (tps[i] == tps[j] && dp == 1) continue;   /* same layout: whole-box reads */
                rs_box *b = NULL;
                int n = 0;
                cr_assert_eq(rs_target_layout(&c, tps[j], dp, 1, &b, &n, &e), MP_OK, "%s", e.msg);
                for (int f = 0; f < 4; f++) {
                    ckpt_reader_io_reset(r);
                    for (int k = 0; k < n; k++) {
                        if (family(b[k].name) != f) continue;
                        float *buf = mp_xmalloc(sizeof(float) * (size_t)(b[k].shape[0] * b[k].shape[1]));
                        cr_assert_eq(ckpt_read(r, b[k].name, b[k].off, b[k].shape, buf, &e), MP_OK, "%s", e.msg);
                        free(buf);
                    }
                    int64_t rd = 0, need = 0;
                    ckpt_reader_io(r, &rd, &need);
                    cr_assert_gt(need, 0);
                    double ratio = (double)rd / (double)need;
                    cr_assert_leq(ratio, 1.05, "tp %d -> tp %d x dp %d, %s: read %lld for %lld needed (%.3f)", tps[i],
                                  tps[j], dp, fam[f], (long long)rd, (long long)need, ratio);
                    cr_assert_geq(rd, need, "read fewer bytes than returned?");
                }
                free(b);
            }
        ckpt_close(r);
    }
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    tu_run(cmd, NULL);
    free(root);
}

Test(reshard, resharded_equals_init_on_target, .timeout = 120) {
    /* tp 8 init resharded to tp 2 x dp 3 (uneven FSDP shards, row and column splits) reads back equal
     * to tp 2 x dp 3 init, box by box */
    llama_config c;
    cfg_aligned(&c);
    char *root = tu_mkdtemp("rs_eq");
    char a[512], bdir[512], cdir[512];
    snprintf(a, sizeof a, "%s/tp8", root);
    snprintf(bdir, sizeof bdir, "%s/tp2dp3_init", root);
    snprintf(cdir, sizeof cdir, "%s/tp2dp3_resharded", root);
    write_init(&c, 8, 1, 0, a);
    write_init(&c, 2, 3, 0, bdir);
    mp_err e;
    rs_source *src = NULL;
    cr_assert_eq(rs_source_ckpt(&src, a, 1 << 20, &e), MP_OK, "%s", e.msg);
    rs_box *b = NULL;
    int n = 0;
    cr_assert_eq(rs_target_layout(&c, 2, 3, 0, &b, &n, &e), MP_OK, "%s", e.msg);
    rs_sink *sink = NULL;
    cr_assert_eq(rs_sink_ckpt(&sink, mp_comm_self(), cdir, 0, 6, 0, 1 << 20, 0, 0, &e), MP_OK, "%s", e.msg);
    rs_stats st;
    cr_assert_eq(rs_run(src, sink, b, n, 0, 1, &st, &e), MP_OK, "%s", e.msg);
    sink->free(sink);
    src->close(src);
    ckpt_reader *x = NULL, *y = NULL;
    cr_assert_eq(ckpt_open(&x, bdir, &e), MP_OK);
    cr_assert_eq(ckpt_open(&y, cdir, &e), MP_OK);
    cr_assert_eq(ckpt_num_boxes(x), ckpt_num_boxes(y));
    for (int j = 0; j < ckpt_num_boxes(x); j++) {
        const ckpt_box_info *p = ckpt_box_at(x, j), *q = ckpt_box_at(y, j);
        cr_assert_eq(p->checksum, q->checksum, "box %d (%s) differs", j, ckpt_tensor_at(x, p->tensor)->name);
        cr_assert_str_eq(p->file, q->file);
    }
    ckpt_close(x);
    ckpt_close(y);
    free(b);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    tu_run(cmd, NULL);
    free(root);
}

/* The HF sink takes only names a checkpoint may carry, never one it writes itself, each once: a carried
 * file cannot replace the exported config.json or weights. */
Test(reshard, hf_sink_refuses_carried_files_it_would_overwrite) {
    llama_config c;
    cfg_aligned(&c);
    char *tmp = tu_mkdtemp("rs_hffiles"), *out = tu_path(tmp, "hf");
    rs_sink *s = NULL;
    mp_err e;
    cr_assert_eq(rs_sink_hf(&s, out, &c, "F32", 0, 1 << 20, 0, &e), MP_OK, "%s", e.msg);
    const char *own[] = {"config.json", "model.safetensors", "model.safetensors.index.json",
                         "model-00001-of-00002.safetensors", "../x", "notes.txt"};
    for (size_t i = 0; i < sizeof own / sizeof *own; i++) {
        cr_assert_eq(s->file(s, own[i], "{}", 2, &e), MP_EINPUT, "%s", own[i]);
        cr_assert(strstr(e.msg, own[i]), "%s", e.msg);
    }
    cr_assert_eq(s->file(s, "tokenizer.json", "{}", 2, &e), MP_OK, "%s", e.msg);
    cr_assert_eq(s->file(s, "tokenizer.json", "{}", 2, &e), MP_EINPUT);
    s->free(s);
    tu_rm_rf(tmp);
    free(out);
    free(tmp);
}

/* reshard/dcp_names.c: the q/k permutation's two directions are inverses and match the formula
 * HF row h*hd + j*hd/2 + i == torchtitan row h*hd + 2*i + j (dcp_names.h). */
Test(dcp_names, permutation) {
    static const int64_t hds[] = {2, 8, 64};
    for (size_t k = 0; k < sizeof hds / sizeof *hds; k++) {
        int64_t hd = hds[k];
        for (int64_t h = 0; h < 3; h++)
            for (int64_t j = 0; j < 2; j++)
                for (int64_t i = 0; i < hd / 2; i++) {
                    int64_t hf = h * hd + j * hd / 2 + i, tt = h * hd + 2 * i + j;
                    cr_assert_eq(rs_dcp_titan_row(hf, hd), tt, "hd %lld: HF row %lld", (long long)hd, (long long)hf);
                    cr_assert_eq(rs_dcp_hf_row(tt, hd), hf, "hd %lld: torchtitan row %lld", (long long)hd, (long long)tt);
                }
    }
}

/* The DCP name of n under sp is fqn (and permute as given). */
static void expect_name(const llama_config *c, const rs_dcp_spelling *sp, const char *n, const char *fqn, int permute) {
    rs_dcp_place p;
    mp_err e;
    cr_assert_eq(rs_dcp_name(c, sp, n, &p, &e), MP_OK, "%s: %s", n, e.msg);
    cr_assert_str_eq(p.fqn, fqn, "%s", n);
    cr_assert_eq(p.permute, permute, "%s", n);
    cr_assert_eq(p.head_dim, permute ? 64 : 0, "%s", n);
    cr_assert_eq(p.optim, !strncmp(n, "optim/", 6), "%s", n);
}

/* The name sets in the sink's spelling and in the others the source reads ("model." prefix, qkv_linear,
 * lm_head), the optimizer names (never prefixed), and a tensor torchtitan has no name for. */
Test(dcp_names, spellings) {
    llama_config c;
    cfg_aligned(&c);
    rs_dcp_spelling hf = rs_dcp_spelling_of(RS_DCP_NAMES_HF), tt = rs_dcp_spelling_of(RS_DCP_NAMES_TORCHTITAN);
    expect_name(&c, &hf, "model/model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.q_proj.weight", 0);
    expect_name(&c, &hf, "optim/exp_avg/lm_head.weight", "optimizer.state.lm_head.weight.exp_avg", 0);
    /* the sink writes torchtitan 0.3.0's spelling (qkv_linear, lm_head), without the prefix */
    expect_name(&c, &tt, "model/model.layers.3.self_attn.k_proj.weight", "layers.3.attention.qkv_linear.wk.weight", 1);
    expect_name(&c, &tt, "model/model.layers.0.mlp.gate_proj.weight", "layers.0.feed_forward.w1.weight", 0);
    expect_name(&c, &tt, "optim/exp_avg_sq/lm_head.weight", "optimizer.state.lm_head.weight.exp_avg_sq", 0);
    expect_name(&c, &tt, "model/model.embed_tokens.weight", "tok_embeddings.weight", 0);
    rs_dcp_spelling old = tt;   /* the earlier spelling (0.2.x), which the source reads */
    snprintf(old.qkv, sizeof old.qkv, "attention.");
    snprintf(old.out, sizeof old.out, "output.weight");
    expect_name(&c, &old, "model/model.layers.3.self_attn.k_proj.weight", "layers.3.attention.wk.weight", 1);
    expect_name(&c, &old, "optim/exp_avg_sq/lm_head.weight", "optimizer.state.output.weight.exp_avg_sq", 0);
    rs_dcp_spelling cur = tt;
    snprintf(cur.prefix, sizeof cur.prefix, "model.");
    expect_name(&c, &cur, "model/model.layers.1.self_attn.q_proj.weight", "model.layers.1.attention.qkv_linear.wq.weight", 1);
    expect_name(&c, &cur, "model/model.layers.1.self_attn.v_proj.weight", "model.layers.1.attention.qkv_linear.wv.weight", 0);
    expect_name(&c, &cur, "model/model.layers.1.self_attn.o_proj.weight", "model.layers.1.attention.wo.weight", 0);
    expect_name(&c, &cur, "model/lm_head.weight", "model.lm_head.weight", 0);
    expect_name(&c, &cur, "optim/exp_avg/model.layers.1.self_attn.q_proj.weight",
                "optimizer.state.layers.1.attention.qkv_linear.wq.weight.exp_avg", 1);
    rs_dcp_place p;
    mp_err e;
    cr_assert_eq(rs_dcp_name(&c, &tt, "model/model.layers.0.self_attn.q_proj.bias", &p, &e), MP_EINPUT);
    cr_assert_eq(rs_dcp_name(&c, &tt, "other/x", &p, &e), MP_EINTERNAL);
    cr_assert_eq(rs_dcp_names_parse("torchtitan"), RS_DCP_NAMES_TORCHTITAN);
    cr_assert_eq(rs_dcp_names_parse("hf"), RS_DCP_NAMES_HF);
    cr_assert_eq(rs_dcp_names_parse("titan"), -1);
}
