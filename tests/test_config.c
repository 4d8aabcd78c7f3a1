/* Config parsing, --set, validation and the resolved YAML
 * (formats/config.c, core/config.c). */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../formats/config.h"
#include "../lib/backend.h"
#include "testutil.h"

/* ---- helpers ---- */

static int parse(ar_config *c, const char *yaml, ar_err *e)
{
    return ar_config_parse(c, yaml, strlen(yaml), "t.yaml", e);
}

/* Parses over defaults, expecting failure; returns the message. */
static const char *parse_err(const char *yaml)
{
    static ar_err e;
    ar_config c;
    ar_config_defaults(&c);
    memset(&e, 0, sizeof e);
    cr_assert_eq(parse(&c, yaml, &e), -1, "expected an error for:\n%s", yaml);
    return e.msg;
}

static const char *set_err(const char *assign)
{
    static ar_err e;
    ar_config c;
    ar_config_defaults(&c);
    memset(&e, 0, sizeof e);
    cr_assert_eq(ar_config_set(&c, assign, &e), -1, "expected an error for --set %s", assign);
    return e.msg;
}

static const char *validate_err(const ar_config *c)
{
    static ar_err e;
    memset(&e, 0, sizeof e);
    cr_assert_eq(ar_config_validate(c, &e), -1, "expected validation to fail");
    return e.msg;
}

#define assert_has(msg, sub) cr_assert(strstr((msg), (sub)) != NULL, "message\n  %s\nlacks\n  %s", (msg), (sub))

static void assert_parses(ar_config *c, const char *yaml)
{
    ar_err e = {{0}};
    cr_assert_eq(parse(c, yaml, &e), 0, "parse failed: %s", e.msg);
}

static void assert_sets(ar_config *c, const char *assign)
{
    ar_err e = {{0}};
    cr_assert_eq(ar_config_set(c, assign, &e), 0, "--set %s failed: %s", assign, e.msg);
}

/* Two configs are equal when they resolve to the same YAML and agree on
 * every field the YAML does not spell out. */
static void assert_same(const ar_config *a, const ar_config *b)
{
    char *ya = ar_config_to_yaml(a), *yb = ar_config_to_yaml(b);
    cr_assert_str_eq(ya, yb);
    free(ya);
    free(yb);
    cr_assert_eq(a->model.vocab_bytes, b->model.vocab_bytes);
    cr_assert_eq(a->model.vocab, b->model.vocab);
    cr_assert_eq(a->model.residual.kind, b->model.residual.kind);
    cr_assert_eq(ar_cfg_block_size(&a->model), ar_cfg_block_size(&b->model));
}

/* ---- defaults and core/config.c ---- */

Test(config, defaults)
{
    ar_config c;
    ar_config_defaults(&c);
    cr_assert_eq(c.model.vocab_bytes, 1);
    cr_assert_eq(c.model.vocab, 256);
    cr_assert_eq(c.model.d_model, 192);
    cr_assert_eq(c.model.n_layer, 4);
    cr_assert_eq(c.model.n_head, 4);
    cr_assert_eq(c.model.d_ff, 512);
    cr_assert_eq(c.model.seq_len, 128);
    cr_assert_eq(c.model.residual.kind, AR_RES_BLOCK);
    cr_assert_eq(c.model.residual.block_size, 4);
    cr_assert_eq(c.model.residual.num_blocks, 0);
    cr_assert_str_eq(c.data.train, AR_DEFAULT_CORPUS);
    cr_assert_str_eq(c.data.val, "");
    cr_assert_eq(c.data.val_fraction, 0.05);
    cr_assert_eq(c.train.steps, 1000);
    cr_assert_eq(c.train.batch_size, 16);
    cr_assert_eq(c.train.grad_accum, 1);
    cr_assert_eq(c.train.lr, 3e-3);
    cr_assert_eq(c.train.min_lr, 3e-4);
    cr_assert_eq(c.train.schedule, AR_SCHED_COSINE);
    cr_assert_eq(c.train.warmup, 100);
    cr_assert_eq(c.train.decay_frac, 0.2);
    cr_assert_eq(c.train.weight_decay, 0.1);
    cr_assert_eq(c.train.beta1, 0.9);
    cr_assert_eq(c.train.beta2, 0.95);
    cr_assert_eq(c.train.eps, 1e-8);
    cr_assert_eq(c.train.grad_clip, 1.0);
    cr_assert_eq(c.train.seed, 1);
    cr_assert_eq(c.train.eval_every, 200);
    cr_assert_eq(c.train.eval_windows, 64);
    cr_assert_eq(c.train.save_every, 500);
    cr_assert_eq(c.train.keep_checkpoints, 3);
    cr_assert_eq(c.train.max_bad_steps, 5);
    cr_assert_eq(c.train.log_every, 10);
    cr_assert_eq(c.train.threads, 0);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "defaults must validate: %s", e.msg);
}

/* a variant's residual starts from every key's default, not from zeros:
 * whatever the struct held before is gone, and the result validates */
Test(config, residual_of_kind)
{
    ar_config c, d;
    ar_config_defaults(&c);
    ar_config_defaults(&d);
    memset(&c.model.residual, 0x5a, sizeof c.model.residual);
    ar_residual_cfg_of_kind(&c.model.residual, AR_RES_FULL);
    cr_assert_eq(c.model.residual.kind, AR_RES_FULL);
    cr_assert_eq(c.model.residual.block_size, 0);
    cr_assert_eq(c.model.residual.query_lr_scale, d.model.residual.query_lr_scale);
    cr_assert_eq(c.model.residual.query_gate, d.model.residual.query_gate);
    cr_assert_eq(c.model.residual.key_norm, d.model.residual.key_norm);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

Test(config, sublayers_and_block_size)
{
    ar_config c;
    ar_config_defaults(&c);
    cr_assert_eq(ar_cfg_sublayers(&c.model), 8);
    cr_assert_eq(ar_cfg_block_size(&c.model), 4);
    c.model.residual.kind = AR_RES_FULL;
    cr_assert_eq(ar_cfg_block_size(&c.model), 1);
    c.model.residual.kind = AR_RES_BASELINE;
    cr_assert_eq(ar_cfg_block_size(&c.model), 9);
    c.model.residual.kind = AR_RES_BLOCK;
    c.model.residual.block_size = 0;
    c.model.residual.num_blocks = 3; /* ceil(8/3) */
    cr_assert_eq(ar_cfg_block_size(&c.model), 3);
    c.model.residual.num_blocks = 8;
    cr_assert_eq(ar_cfg_block_size(&c.model), 1);
}

Test(config, names)
{
    cr_assert_str_eq(ar_res_kind_name(AR_RES_BASELINE), "baseline");
    cr_assert_str_eq(ar_res_kind_name(AR_RES_FULL), "full");
    cr_assert_str_eq(ar_res_kind_name(AR_RES_BLOCK), "block");
    cr_assert_str_eq(ar_sched_name(AR_SCHED_COSINE), "cosine");
    cr_assert_str_eq(ar_sched_name(AR_SCHED_WSD), "wsd");
    cr_assert_str_eq(ar_sched_name(AR_SCHED_CONSTANT), "constant");
    /* The parser spells enums through the same names. */
    const char *kinds[] = {"baseline", "full", "block"};
    for (int i = 0; i < 3; i++) {
        ar_config c;
        char y[128];
        ar_config_defaults(&c);
        snprintf(y, sizeof y, "model:\n  residual:\n    kind: %s\n", kinds[i]);
        assert_parses(&c, y);
        cr_assert_str_eq(ar_res_kind_name(c.model.residual.kind), kinds[i]);
    }
}

/* ---- parsing ---- */

Test(config, empty_documents_change_nothing)
{
    const char *docs[] = {"", "# only a comment\n", "---\n", "\n\n", "model:\n  # d_model: 9\ndata:\n"};
    for (size_t i = 0; i < sizeof docs / sizeof docs[0]; i++) {
        ar_config c, d;
        ar_config_defaults(&c);
        ar_config_defaults(&d);
        assert_parses(&c, docs[i]);
        assert_same(&c, &d);
    }
}

static const char *FULL_YAML =
    "model:\n"
    "  vocab: 50304\n"
    "  d_model: 256\n"
    "  n_layer: 6\n"
    "  n_head: 8\n"
    "  d_ff: 688\n"
    "  seq_len: 256\n"
    "  residual:\n"
    "    kind: block\n"
    "    num_blocks: 3\n"
    "data:\n"
    "  train: corpus/train.bin\n"
    "  val: 'corpus/val.bin'\n"
    "  val_fraction: 0.1\n"
    "train:\n"
    "  steps: 2000\n"
    "  batch_size: 32\n"
    "  grad_accum: 4\n"
    "  lr: 3.0e-3\n"
    "  min_lr: 1e-4\n"
    "  schedule: wsd\n"
    "  warmup: 50\n"
    "  decay_frac: 0.25\n"
    "  weight_decay: 0\n"
    "  beta1: 0.8\n"
    "  beta2: 0.99\n"
    "  eps: 1e-10\n"
    "  grad_clip: 0.5\n"
    "  seed: 18446744073709551615\n"
    "  eval_every: 0\n"
    "  eval_windows: 0\n"
    "  save_every: 100\n"
    "  keep_checkpoints: 0\n"
    "  max_bad_steps: 1\n"
    "  log_every: 5\n"
    "  threads: 2\n";

Test(config, full_file)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, FULL_YAML);
    cr_assert_eq(c.model.vocab_bytes, 0);
    cr_assert_eq(c.model.vocab, 50304);
    cr_assert_eq(c.model.d_model, 256);
    cr_assert_eq(c.model.n_layer, 6);
    cr_assert_eq(c.model.n_head, 8);
    cr_assert_eq(c.model.d_ff, 688);
    cr_assert_eq(c.model.seq_len, 256);
    cr_assert_eq(c.model.residual.kind, AR_RES_BLOCK);
    cr_assert_eq(c.model.residual.num_blocks, 3);
    cr_assert_eq(c.model.residual.block_size, 0, "num_blocks clears the default block_size");
    cr_assert_eq(ar_cfg_block_size(&c.model), 4);
    cr_assert_str_eq(c.data.train, "corpus/train.bin");
    cr_assert_str_eq(c.data.val, "corpus/val.bin");
    cr_assert_eq(c.data.val_fraction, 0.1);
    cr_assert_eq(c.train.steps, 2000);
    cr_assert_eq(c.train.batch_size, 32);
    cr_assert_eq(c.train.grad_accum, 4);
    cr_assert_eq(c.train.lr, 3e-3);
    cr_assert_eq(c.train.min_lr, 1e-4);
    cr_assert_eq(c.train.schedule, AR_SCHED_WSD);
    cr_assert_eq(c.train.warmup, 50);
    cr_assert_eq(c.train.decay_frac, 0.25);
    cr_assert_eq(c.train.weight_decay, 0);
    cr_assert_eq(c.train.beta1, 0.8);
    cr_assert_eq(c.train.beta2, 0.99);
    cr_assert_eq(c.train.eps, 1e-10);
    cr_assert_eq(c.train.grad_clip, 0.5);
    cr_assert_eq(c.train.seed, UINT64_MAX);
    cr_assert_eq(c.train.eval_every, 0);
    cr_assert_eq(c.train.eval_windows, 0);
    cr_assert_eq(c.train.save_every, 100);
    cr_assert_eq(c.train.keep_checkpoints, 0);
    cr_assert_eq(c.train.max_bad_steps, 1);
    cr_assert_eq(c.train.log_every, 5);
    cr_assert_eq(c.train.threads, 2);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

Test(config, load_file)
{
    const char *dir = tu_tmpdir();
    const char *path = tu_path(dir, "c.yaml");
    const char *y = "model:\n  d_model: 384\n  n_head: 6\n";
    tu_write_file(path, y, strlen(y));
    ar_config c;
    ar_err e = {{0}};
    ar_config_defaults(&c);
    cr_assert_eq(ar_config_load(&c, path, &e), 0, "%s", e.msg);
    cr_assert_eq(c.model.d_model, 384);
    cr_assert_eq(c.model.n_head, 6);

    /* Messages name the file as given. */
    const char *bad = "model:\n  d_model: x\n";
    tu_write_file(path, bad, strlen(bad));
    cr_assert_eq(ar_config_load(&c, path, &e), -1);
    char want[4200];
    snprintf(want, sizeof want, "%s:2:12: 'model.d_model'", path);
    assert_has(e.msg, want);

    cr_assert_eq(ar_config_load(&c, tu_path(dir, "missing.yaml"), &e), -1);
    assert_has(e.msg, "missing.yaml");
}

Test(config, scalar_forms)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, "train:\n  lr: 1\n  min_lr: 0.001\n  eps: 3e-3\n");
    cr_assert_eq(c.train.lr, 1.0);
    cr_assert_eq(c.train.min_lr, 0.001);
    cr_assert_eq(c.train.eps, 3e-3);
    assert_parses(&c, "model:\n  vocab: 300\n");
    cr_assert_eq(c.model.vocab_bytes, 0);
    cr_assert_eq(c.model.vocab, 300);
    assert_parses(&c, "model:\n  vocab: bytes\n");
    cr_assert_eq(c.model.vocab_bytes, 1);
    cr_assert_eq(c.model.vocab, 256);
    const char *nulls[] = {"null", "~", "", "Null"};
    for (int i = 0; i < 4; i++) {
        char y[64];
        snprintf(c.data.val, sizeof c.data.val, "x");
        snprintf(y, sizeof y, "data:\n  val: %s\n", nulls[i]);
        assert_parses(&c, y);
        cr_assert_str_eq(c.data.val, "", "val: %s", nulls[i]);
    }
    /* A quoted "null" is a file name. */
    assert_parses(&c, "data:\n  val: \"null\"\n");
    cr_assert_str_eq(c.data.val, "null");
    assert_parses(&c, "{model: {n_layer: 2, residual: {kind: full}}, train: {seed: 0}}\n");
    cr_assert_eq(c.model.n_layer, 2);
    cr_assert_eq(c.model.residual.kind, AR_RES_FULL);
    cr_assert_eq(c.train.seed, 0);
}

Test(config, later_document_clears_the_other_block_key)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, "model:\n  residual:\n    num_blocks: 2\n");
    cr_assert_eq(c.model.residual.block_size, 0);
    cr_assert_eq(c.model.residual.num_blocks, 2);
    assert_parses(&c, "model:\n  residual:\n    block_size: 3\n");
    cr_assert_eq(c.model.residual.block_size, 3);
    cr_assert_eq(c.model.residual.num_blocks, 0);
}

Test(config, error_leaves_config_unchanged)
{
    ar_config c, d;
    ar_err e;
    ar_config_defaults(&c);
    ar_config_defaults(&d);
    cr_assert_eq(parse(&c, "model:\n  d_model: 512\n  n_head: zero\n", &e), -1);
    assert_same(&c, &d);
    cr_assert_eq(c.model.d_model, 192);
    cr_assert_eq(ar_config_set(&c, "model={d_model: 512, n_head: x}", &e), -1);
    cr_assert_eq(c.model.d_model, 192);
}

/* ---- parse errors: message and place ---- */

Test(config, err_unknown_key)
{
    const char *m = parse_err("model:\n  d_model: 8\n  dmodel: 8\n");
    assert_has(m, "t.yaml:3:3: unknown key 'model.dmodel'");
    assert_has(m, "(expected one of: vocab, d_model, n_layer, n_head, d_ff, seq_len, residual)");
    m = parse_err("model:\n  residual:\n    kind: full\n    size: 2\n");
    assert_has(m, "t.yaml:4:5: unknown key 'model.residual.size' (expected one of: kind, block_size, num_blocks, block_sizes, score, key_norm, query, query_scale, query_norm, query_gate, query_lr_scale, heads, window, streams)");
    m = parse_err("modle:\n  d_model: 8\n");
    assert_has(m, "t.yaml:1:1: unknown key 'modle' (expected one of: model, data, train, parallel)");
    m = parse_err("train:\n  lr: 0.1\n  schedul: wsd\n");
    assert_has(m, "t.yaml:3:3: unknown key 'train.schedul'");
    assert_has(m, "lr, min_lr, schedule, warmup, decay_frac");
}

Test(config, err_bad_type)
{
    assert_has(parse_err("model:\n  d_model: abc\n"),
               "t.yaml:2:12: 'model.d_model' expects a positive integer, got 'abc'");
    assert_has(parse_err("model:\n  d_model: {a: 1}\n"),
               "t.yaml:2:12: 'model.d_model' expects a positive integer, got a mapping");
    assert_has(parse_err("model:\n  n_layer:\n    - 1\n"),
               "t.yaml:3:5: 'model.n_layer' expects a positive integer, got a sequence");
    assert_has(parse_err("model:\n  d_model: \"384\"\n"),
               "t.yaml:2:12: 'model.d_model' expects a positive integer, got '384' (a quoted string)");
    /* Integers must be written as integers. */
    assert_has(parse_err("train:\n  steps: 1e3\n"), "t.yaml:2:10: 'train.steps' expects a positive integer, got '1e3'");
    assert_has(parse_err("train:\n  batch_size: 2.5\n"), "t.yaml:2:15: 'train.batch_size' expects a positive integer");
    assert_has(parse_err("train:\n  lr: fast\n"), "t.yaml:2:7: 'train.lr' expects a positive number, got 'fast'");
    assert_has(parse_err("train:\n  lr: .inf\n"), "'train.lr' expects a positive number, got '.inf'");
    assert_has(parse_err("model: 3\n"), "t.yaml:1:8: 'model' expects a mapping, got '3'");
    assert_has(parse_err("model:\n  d_model:\n"), "t.yaml:2:11: 'model.d_model' expects a positive integer, got null");
    assert_has(parse_err("data:\n  train: ~\n"), "t.yaml:2:10: 'data.train' expects a path, got null");
    assert_has(parse_err("data:\n  val: [a, b]\n"), "t.yaml:2:8: 'data.val' expects a path or null, got a sequence");
    assert_has(parse_err("model:\n  vocab: words\n"),
               "t.yaml:2:10: 'model.vocab' expects 'bytes', 'gpt2' or a positive integer, got 'words'");
    assert_has(parse_err("model:\n  ? [a]\n  : 1\n"), "t.yaml:2:5: keys must be names, got a sequence");
}

Test(config, err_bad_value)
{
    assert_has(parse_err("model:\n  d_model: 0\n"), "t.yaml:2:12: 'model.d_model' expects a positive integer, got '0'");
    assert_has(parse_err("model:\n  d_model: -64\n"), "'model.d_model' expects a positive integer, got '-64'");
    assert_has(parse_err("model:\n  d_model: 99999999999\n"),
               "'model.d_model' expects a positive integer, got '99999999999' (out of range)");
    assert_has(parse_err("data:\n  val_fraction: 1\n"),
               "t.yaml:2:17: 'data.val_fraction' expects a number in (0, 1), got '1'");
    assert_has(parse_err("data:\n  val_fraction: 0\n"), "'data.val_fraction' expects a number in (0, 1), got '0'");
    assert_has(parse_err("train:\n  lr: 0\n"), "t.yaml:2:7: 'train.lr' expects a positive number, got '0'");
    assert_has(parse_err("train:\n  steps: -1\n"), "t.yaml:2:10: 'train.steps' expects a positive integer, got '-1'");
    assert_has(parse_err("train:\n  batch_size: 0\n"), "'train.batch_size' expects a positive integer, got '0'");
    assert_has(parse_err("train:\n  warmup: -5\n"), "'train.warmup' expects a non-negative integer, got '-5'");
    assert_has(parse_err("train:\n  beta2: 1\n"), "'train.beta2' expects a number in [0, 1), got '1'");
    assert_has(parse_err("train:\n  seed: -1\n"), "'train.seed' expects a non-negative integer, got '-1'");
    assert_has(parse_err("train:\n  seed: 18446744073709551616\n"), "(out of range)");
    assert_has(parse_err("model:\n  residual:\n    block_size: 0\n"),
               "t.yaml:3:17: 'model.residual.block_size' expects a positive integer, got '0'");
    assert_has(parse_err("model:\n  vocab: 0\n"), "'model.vocab' expects 'bytes', 'gpt2' or a positive integer, got '0'");
}

Test(config, err_duplicate_key)
{
    assert_has(parse_err("model:\n  d_model: 64\n  n_head: 2\n  d_model: 128\n"),
               "t.yaml:4:3: duplicate key 'model.d_model' (first given at 2:3)");
    assert_has(parse_err("model:\n  d_model: 64\ntrain:\n  steps: 2\nmodel:\n  n_head: 2\n"),
               "t.yaml:5:1: duplicate key 'model' (first given at 1:1)");
}

Test(config, err_bad_enum)
{
    assert_has(parse_err("train:\n  schedule: foo\n"),
               "t.yaml:2:13: 'train.schedule' expects one of cosine|wsd|constant, got 'foo'");
    assert_has(parse_err("model:\n  residual:\n    kind: dense\n"),
               "t.yaml:3:11: 'model.residual.kind' expects one of baseline|full|block|static|denseformer|swa|mhc|rescaled, got 'dense'");
}

Test(config, err_block_size_and_num_blocks)
{
    assert_has(parse_err("model:\n  residual:\n    block_size: 2\n    num_blocks: 4\n"),
               "t.yaml:4:17: 'model.residual.num_blocks' and 'model.residual.block_size' are mutually exclusive "
               "('model.residual.block_size' was given at 3:17)");
}

Test(config, err_syntax)
{
    const char *m = parse_err("model:\n  d_model: 8\n  n_head: [1, 2\n");
    assert_has(m, "t.yaml:4:1: invalid YAML: did not find expected ',' or ']'");
    m = parse_err("model:\n  d_model: 8: 9\n");
    assert_has(m, "t.yaml:2:13: invalid YAML: mapping values are not allowed in this context");
    m = parse_err("model:\n\td_model: 8\n");
    assert_has(m, "t.yaml:2:1: invalid YAML: found character that cannot start any token");
    /* The column is that of the offending byte, counted in characters. */
    m = parse_err("model:\n  d_model: \xc3\xa9\xc3\x28\n");
    assert_has(m, "t.yaml:2:14: invalid YAML: invalid trailing UTF-8 octet");
}

Test(config, err_not_a_mapping)
{
    assert_has(parse_err("- model\n- data\n"), "t.yaml:1:1: expected a mapping of sections (model, data, train, parallel) "
                                                "at the top level, got a sequence");
    assert_has(parse_err("just text\n"), "t.yaml:1:1: expected a mapping");
    assert_has(parse_err("model:\n  d_model: 8\n---\ntrain:\n  steps: 1\n"),
               "t.yaml:4:1: expected one YAML document, found a second one");
}

/* ---- resolved YAML ---- */

Test(config, yaml_defaults_round_trip)
{
    ar_config c, d;
    ar_config_defaults(&c);
    char *y = ar_config_to_yaml(&c);
    ar_config_defaults(&d);
    assert_parses(&d, y);
    assert_same(&c, &d);
    /* Every key is written, so the YAML overrides any starting point. */
    ar_config_defaults(&d);
    assert_parses(&d, FULL_YAML);
    assert_parses(&d, y);
    assert_same(&c, &d);
    cr_assert_eq(d.model.residual.num_blocks, 0);
    free(y);
}

Test(config, yaml_order_and_shape)
{
    ar_config c;
    ar_config_defaults(&c);
    char *y = ar_config_to_yaml(&c);
    const char *order[] = {"model:\n", "  vocab: bytes\n", "  d_model: 192\n", "  seq_len: 128\n",
                           "  residual:\n", "    kind: block\n", "    block_size: 4\n", "data:\n",
                           "  train: \"data/kjv.txt\"\n", "  val: null\n", "  val_fraction: 0.05\n",
                           "train:\n", "  steps: 1000\n", "  lr: 0.003\n", "  schedule: cosine\n",
                           "  eps: 1.0e-08\n", "  grad_clip: 1.0\n", "  seed: 1\n", "  threads: 0\n"};
    const char *at = y;
    for (size_t i = 0; i < sizeof order / sizeof order[0]; i++) {
        const char *p = strstr(at, order[i]);
        cr_assert(p != NULL, "'%s' missing or out of order in\n%s", order[i], y);
        at = p;
    }
    cr_assert(strstr(y, "num_blocks") == NULL);
    free(y);

    c.model.residual.kind = AR_RES_FULL;
    y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "    kind: full\n") != NULL);
    cr_assert(strstr(y, "block_size") == NULL && strstr(y, "num_blocks") == NULL, "%s", y);
    free(y);

    c.model.residual.kind = AR_RES_BLOCK;
    c.model.residual.block_size = 0;
    c.model.residual.num_blocks = 2;
    y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "    num_blocks: 2\n") != NULL && strstr(y, "block_size") == NULL, "%s", y);
    free(y);
}

static void round_trip(const ar_config *c)
{
    char *y = ar_config_to_yaml(c);
    ar_config d;
    ar_config_defaults(&d);
    ar_err e = {{0}};
    cr_assert_eq(parse(&d, y, &e), 0, "re-parse failed: %s\n%s", e.msg, y);
    char *y2 = ar_config_to_yaml(&d);
    cr_assert_str_eq(y, y2);
    cr_assert_str_eq(d.data.train, c->data.train);
    cr_assert_str_eq(d.data.val, c->data.val);
    cr_assert_eq(d.data.val_fraction, c->data.val_fraction);
    cr_assert_eq(d.train.lr, c->train.lr);
    cr_assert_eq(d.train.min_lr, c->train.min_lr);
    cr_assert_eq(d.train.eps, c->train.eps);
    cr_assert_eq(d.train.weight_decay, c->train.weight_decay);
    cr_assert_eq(d.train.beta1, c->train.beta1);
    cr_assert_eq(d.train.seed, c->train.seed);
    cr_assert_eq(d.model.vocab_bytes, c->model.vocab_bytes);
    cr_assert_eq(d.model.vocab, c->model.vocab);
    cr_assert_eq(d.model.residual.kind, c->model.residual.kind);
    if (c->model.residual.kind == AR_RES_BLOCK) {
        cr_assert_eq(d.model.residual.block_size, c->model.residual.block_size);
        cr_assert_eq(d.model.residual.num_blocks, c->model.residual.num_blocks);
        cr_assert_eq(d.model.residual.block_sizes.n, c->model.residual.block_sizes.n);
        for (int i = 0; i < c->model.residual.block_sizes.n; i++)
            cr_assert_eq(d.model.residual.block_sizes.v[i], c->model.residual.block_sizes.v[i]);
    }
    free(y);
    free(y2);
}

/* "gpt2" spells 50257 and is written back as the number (the resolved
 * config states the size; it reads back the same) */
Test(config, vocab_gpt2)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, "model:\n  vocab: gpt2\n");
    cr_assert_eq(c.model.vocab_bytes, 0);
    cr_assert_eq(c.model.vocab, 50257);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    char *y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "\n  vocab: 50257\n") != NULL, "%s", y);
    cr_assert(strstr(y, "gpt2") == NULL, "%s", y);
    free(y);
    round_trip(&c);
    assert_sets(&c, "model.vocab=bytes");
    cr_assert_eq(c.model.vocab_bytes, 1);
    assert_sets(&c, "model.vocab=gpt2");
    cr_assert_eq(c.model.vocab_bytes, 0);
    cr_assert_eq(c.model.vocab, 50257);
    assert_has(parse_err("model:\n  vocab: GPT2\n"),
               "'model.vocab' expects 'bytes', 'gpt2' or a positive integer, got 'GPT2'");
    assert_has(parse_err("model:\n  vocab: gpt2x\n"), "got 'gpt2x'");
}

Test(config, yaml_round_trip_awkward_values)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, FULL_YAML);
    round_trip(&c);

    /* Doubles needing 17 digits, tiny and huge exponents, integral values. */
    c.train.lr = 0.1 + 0.2;
    c.train.min_lr = 1e-300;
    c.train.eps = 5e-324;
    c.train.weight_decay = 2.0;
    c.train.beta1 = 1.0 / 3.0;
    c.data.val_fraction = 0.999999999999;
    c.train.grad_clip = 1e20;
    /* Paths YAML would misread unquoted. */
    snprintf(c.data.train, sizeof c.data.train, "dir with: colon/#hash \"q\" \\back\\ tab\there\nnl ünï.txt");
    snprintf(c.data.val, sizeof c.data.val, "null");
    c.model.residual.kind = AR_RES_FULL;
    c.train.schedule = AR_SCHED_CONSTANT;
    c.train.seed = UINT64_MAX - 1;
    round_trip(&c);

    snprintf(c.data.train, sizeof c.data.train, "- [x] {y} & *z ! %% @ `");
    c.data.val[0] = '\0';
    c.model.residual.kind = AR_RES_BASELINE;
    round_trip(&c);
}

/* Found by fuzzing (fuzz/corpus/config/nel-in-path.yaml): YAML's "\N" is
 * U+0085, a line break inside a quoted scalar, and was written back raw, so
 * the resolved YAML read back another path.  The same for the other
 * characters a YAML reader does not return unchanged. */
Test(config, yaml_round_trip_line_breaks_and_c1_controls_in_paths)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, "data:\n  train: \"f\\NULaa\"\n  val: \"a\\x80b\\Lc\\Pd\\uFEFFe\\x9f\"\n");
    cr_assert_str_eq(c.data.train, "f\xc2\x85ULaa");
    cr_assert_str_eq(c.data.val, "a\xc2\x80" "b\xe2\x80\xa8" "c\xe2\x80\xa9" "d\xef\xbb\xbf" "e\xc2\x9f");
    round_trip(&c);
    char *y = ar_config_to_yaml(&c);
    cr_expect(strstr(y, "train: \"f\\x85ULaa\""), "%s", y);
    free(y);
}

/* ---- --set ---- */

Test(config, set_good)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_sets(&c, "model.d_model=384");
    cr_assert_eq(c.model.d_model, 384);
    assert_sets(&c, "train.lr=1e-3");
    cr_assert_eq(c.train.lr, 1e-3);
    assert_sets(&c, "train.schedule=wsd");
    cr_assert_eq(c.train.schedule, AR_SCHED_WSD);
    assert_sets(&c, "data.val=held/out.txt");
    cr_assert_str_eq(c.data.val, "held/out.txt");
    assert_sets(&c, "data.val=null");
    cr_assert_str_eq(c.data.val, "");
    assert_sets(&c, "data.val=x.txt");
    assert_sets(&c, "data.val=");
    cr_assert_str_eq(c.data.val, "", "an empty value is null");
    assert_sets(&c, "train.seed=18446744073709551615");
    cr_assert_eq(c.train.seed, UINT64_MAX);
    assert_sets(&c, "data.train='my: file.txt'");
    cr_assert_str_eq(c.data.train, "my: file.txt");
    assert_sets(&c, "model.vocab=1024");
    cr_assert_eq(c.model.vocab, 1024);
    cr_assert_eq(c.model.vocab_bytes, 0);
    assert_sets(&c, " train.seed = 7");
    cr_assert_eq(c.train.seed, 7);
    assert_sets(&c, "model.residual.num_blocks=2");
    cr_assert_eq(c.model.residual.num_blocks, 2);
    cr_assert_eq(c.model.residual.block_size, 0, "setting num_blocks clears block_size");
    assert_sets(&c, "model.residual.block_size=1");
    cr_assert_eq(c.model.residual.block_size, 1);
    cr_assert_eq(c.model.residual.num_blocks, 0);
    assert_sets(&c, "model.residual={kind: full}");
    cr_assert_eq(c.model.residual.kind, AR_RES_FULL);
    assert_sets(&c, "train.lr=3.0e-3");
    cr_assert_eq(c.train.lr, 3e-3);
}

/* parallel.timeout_s: 600 by default and not written then, any number
 * >= 0 (0: no watchdog), written where it differs */
Test(config, parallel_timeout)
{
    ar_config c;
    ar_config_defaults(&c);
    cr_assert_eq(c.parallel.timeout_s, 600);
    char *y = ar_config_to_yaml(&c);
    cr_assert(!strstr(y, "timeout_s"), "%s", y);
    free(y);
    assert_sets(&c, "parallel.timeout_s=2.5");
    cr_assert_eq(c.parallel.timeout_s, 2.5);
    y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "timeout_s: 2.5"), "%s", y);
    free(y);
    assert_sets(&c, "parallel.timeout_s=0");
    assert_has(set_err("parallel.timeout_s=-1"), "parallel.timeout_s");
}

Test(config, set_bad)
{
    cr_assert_str_eq(set_err("model.d_model=abc"),
                     "--set 'model.d_model=abc': 'model.d_model' expects a positive integer, got 'abc'");
    cr_assert_str_eq(set_err("model.foo=1"), "--set 'model.foo=1': unknown key 'model.foo' (expected one of: "
                                             "vocab, d_model, n_layer, n_head, d_ff, seq_len, residual)");
    cr_assert_str_eq(set_err("model.d_model"), "--set 'model.d_model': expected KEY=VALUE");
    cr_assert_str_eq(set_err("=5"), "--set '=5': expected KEY=VALUE");
    assert_has(set_err("modle.d_model=8"), "unknown key 'modle.d_model' (expected one of: model, data, train, parallel)");
    assert_has(set_err("model.d_model.x=8"), "'model.d_model' takes a value, not sub-keys");
    assert_has(set_err("model.residual.foo=8"), "(expected one of: kind, block_size, num_blocks, block_sizes, score, key_norm, query, query_scale, query_norm, query_gate, query_lr_scale, heads, window, streams)");
    assert_has(set_err("train.schedule=linear"), "'train.schedule' expects one of cosine|wsd|constant, got 'linear'");
    assert_has(set_err("data.val_fraction=1.5"), "'data.val_fraction' expects a number in (0, 1), got '1.5'");
    assert_has(set_err("train.steps=1e3"), "'train.steps' expects a positive integer, got '1e3'");
    assert_has(set_err("data.train="), "'data.train' expects a path, got null");
    assert_has(set_err("model.d_model=[1,"), "--set 'model.d_model=[1,': invalid YAML value:");
    assert_has(set_err("model.d_model={a: 1}"), "expects a positive integer, got a mapping");
    assert_has(set_err("model.residual={block_size: 2, num_blocks: 2}"), "are mutually exclusive");
    assert_has(set_err("model=3"), "--set 'model=3': 'model' expects a mapping, got '3'");
}

/* ---- validation ---- */

Test(config, validate_failures)
{
    ar_config c;
#define FRESH() ar_config_defaults(&c)
    FRESH();
    c.model.n_head = 5;
    assert_has(validate_err(&c), "'model.d_model' (192) must be divisible by 'model.n_head' (5)");
    FRESH();
    c.model.d_model = 12;
    c.model.n_head = 4;
    assert_has(validate_err(&c), "head dimension 'model.d_model'/'model.n_head' = 12/4 = 3 must be even");
    FRESH();
    c.model.residual.block_size = 9;
    assert_has(validate_err(&c), "'model.residual.block_size' (9) exceeds the number of sublayers L = "
                                 "2*'model.n_layer' = 8");
    FRESH();
    c.model.residual.block_size = 0;
    c.model.residual.num_blocks = 9;
    assert_has(validate_err(&c), "'model.residual.num_blocks' (9) exceeds");
    FRESH();
    c.model.residual.num_blocks = 2;
    assert_has(validate_err(&c), "mutually exclusive");
    FRESH();
    c.model.residual.block_size = 0;
    assert_has(validate_err(&c), "none of 'model.residual.block_size', 'model.residual.num_blocks' and "
                                  "'model.residual.block_sizes' is set");
    FRESH();
    c.data.train[0] = '\0';
    assert_has(validate_err(&c), "'data.train' is empty");
    FRESH();
    c.train.eval_windows = -1;
    assert_has(validate_err(&c), "'train.eval_windows' expects a non-negative integer, got -1");
    FRESH();
    FRESH();
    c.train.min_lr = 0.01;
    assert_has(validate_err(&c), "'train.min_lr' (0.01) exceeds 'train.lr' (0.003)");
    FRESH();
    c.model.vocab = 300;
    assert_has(validate_err(&c), "'model.vocab' is bytes but the vocabulary size is 300");
    FRESH();
    c.model.d_model = 0;
    assert_has(validate_err(&c), "'model.d_model' expects a positive integer, got 0");
    FRESH();
    c.train.schedule = (ar_sched_kind)7;
    assert_has(validate_err(&c), "'train.schedule' expects one of cosine|wsd|constant, got 7");
#undef FRESH
}

Test(config, validate_ignores_block_keys_for_other_kinds)
{
    ar_config c;
    ar_err e = {{0}};
    ar_config_defaults(&c);
    c.model.residual.kind = AR_RES_FULL;
    c.model.residual.block_size = 99;
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    c.model.residual.kind = AR_RES_BASELINE;
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

/* A run shorter than its warmup is valid, with a warning that gives the
 * learning rate it ends at; a run as long as its warmup gets none. */
Test(config, warmup_beyond_steps_warns_and_validates)
{
    ar_config c;
    ar_err e = {{0}};
    char msg[512];
    ar_config_defaults(&c);
    c.train.steps = 40;
    c.train.warmup = 100;
    c.train.lr = 3e-3;
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_config_warning(&c, msg, sizeof msg), 1);
    cr_assert(strstr(msg, "'train.warmup' (100) exceeds 'train.steps' (40)"), "%s", msg);
    cr_assert(strstr(msg, "0.0012"), "the last step's rate 3e-3 x 40/100 is not given: %s", msg);
    c.train.warmup = 40;
    cr_assert_eq(ar_config_warning(&c, msg, sizeof msg), 0);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

/* ---- documentation ---- */

/* Every key the resolved YAML can contain has an entry in
 * attnres-config(5) (a ".BR key" tagged paragraph). */
Test(config, man_page_documents_every_key)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR not set");
    char *man = tu_read_file(tu_path(src, "man/attnres-config.5"), NULL);
    cr_assert(man != NULL, "man/attnres-config.5 missing");
    ar_config c;
    ar_config_defaults(&c);
    char *y = ar_config_to_yaml(&c);
    size_t n = strlen(y) + 64;
    char *all = malloc(n);
    snprintf(all, n, "%snum_blocks: 1\n", y); /* written only when it is the way S is given */
    for (char *line = strtok(all, "\n"); line; line = strtok(NULL, "\n")) {
        line += strspn(line, " ");
        char want[160], key[104];
        size_t kl = strcspn(line, ":");
        kl = kl < 100 ? kl : 100;
        memcpy(key, line, kl);
        key[kl] = 0;
        snprintf(want, sizeof want, "\n.BR %s \"", key);
        if (strchr(line, ':')[1] == '\0')
            continue; /* a section heading */
        cr_assert(strstr(man, want) != NULL, "attnres-config(5) does not document '%.*s'", (int)strcspn(line, ":"),
                  line);
    }
    free(all);
    free(y);
    free(man);
}

/* ---- train.device, train.precision and the backend they name ---- */

Test(config, device_and_precision_keys)
{
    ar_config c, d;
    ar_config_defaults(&c);
    cr_assert_eq(c.train.device, AR_DEVICE_CPU);
    cr_assert_eq(c.train.precision, AR_PREC_FP32);
    assert_parses(&c, "train:\n  device: cuda\n  precision: bf16\n");
    cr_assert_eq(c.train.device, AR_DEVICE_CUDA);
    cr_assert_eq(c.train.precision, AR_PREC_BF16);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    /* written after threads, and read back the same */
    char *y = ar_config_to_yaml(&c);
    const char *t = strstr(y, "  threads: 0\n");
    cr_assert(t && strstr(t, "  device: cuda\n") && strstr(t, "  precision: bf16\n"), "%s", y);
    ar_config_defaults(&d);
    assert_parses(&d, y);
    assert_same(&c, &d);
    cr_assert_eq(d.train.precision, AR_PREC_BF16);
    free(y);
    assert_sets(&d, "train.device=cpu");
    assert_sets(&d, "train.precision=fp32");
    cr_assert_eq(d.train.device, AR_DEVICE_CPU);
    cr_assert_eq(d.train.precision, AR_PREC_FP32);
}

Test(config, device_and_precision_errors)
{
    assert_has(parse_err("train:\n  device: gpu\n"), "t.yaml:2:11: 'train.device' expects one of cpu|cuda, got 'gpu'");
    assert_has(parse_err("train:\n  precision: fp16\n"),
               "t.yaml:2:14: 'train.precision' expects one of fp32|bf16, got 'fp16'");
    assert_has(set_err("train.device=CUDA"), "--set 'train.device=CUDA': 'train.device' expects one of cpu|cuda");
    ar_config c;
    ar_config_defaults(&c);
    c.train.precision = AR_PREC_BF16;
    assert_has(validate_err(&c), "'train.precision' bf16 needs 'train.device' cuda");
}

/* The device changes how fast a run goes, not what it computes; the
 * precision changes what. */
Test(config, diff_ignores_device_not_precision)
{
    ar_config a, b;
    ar_config_defaults(&a);
    b = a;
    b.train.device = AR_DEVICE_CUDA;
    char buf[256];
    cr_expect_eq(ar_config_diff(&a, &b, buf, sizeof buf), 0, "%s", buf);
    b.train.precision = AR_PREC_BF16;
    cr_expect_eq(ar_config_diff(&a, &b, buf, sizeof buf), 1);
    assert_has(buf, "train.precision fp32 -> bf16");
}

Test(config, backend_open)
{
    ar_err e = {{0}};
    cr_assert_eq(ar_backend_open("cpu", 0, &e), ar_backend_cpu());
    cr_assert_eq(ar_backend_open(NULL, 0, &e), ar_backend_cpu());
    cr_assert_null(ar_backend_open("cpu", 1, &e));
    assert_has(e.msg, "'train.precision' bf16 needs 'train.device' cuda");
    cr_assert_null(ar_backend_open("tpu", 0, &e));
    assert_has(e.msg, "'train.device' expects one of cpu|cuda, got 'tpu'");
    if (ar_cuda_built())
        return; /* whether it opens depends on the machine: tests/test_backend_*.c */
    cr_assert_null(ar_backend_open("cuda", 0, &e));
    assert_has(e.msg, "'cuda' is not available");
    assert_has(e.msg, "-Dcuda=enabled");
}

/* Every ready-made config this project ships (except the sweep grid,
 * tested with the sweep) loads and validates as attnres train or bench
 * would take it. */
Test(config, shipped_configs_load_and_validate)
{
    const char *src = tu_source_dir();
    if (!src)
        cr_skip_test("AR_SOURCE_DIR is not set");
    const char *names[] = {"quickstart.yaml", "ablation.yaml", "bench-small.yaml", "bench-medium.yaml",
                           "bench-gpt2-small.yaml"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[4096];
        snprintf(path, sizeof path, "%s/configs/%s", src, names[i]);
        ar_config c;
        ar_err e = {{0}};
        ar_config_defaults(&c);
        cr_assert_eq(ar_config_load(&c, path, &e), 0, "%s: %s", names[i], e.msg);
        cr_assert_eq(ar_config_validate(&c, &e), 0, "%s: %s", names[i], e.msg);
    }
}

/* ---- train.final_eval_windows (attnres sweep and ablate) ---- */

Test(config, final_eval_windows_key)
{
    ar_config c;
    ar_config_defaults(&c);
    cr_assert_eq(c.train.final_eval_windows, 0, "the default is the whole validation split");
    /* the default is not written, so configs and checkpoints without the key read the same */
    char *y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "final_eval_windows") == NULL, "%s", y);
    free(y);
    assert_sets(&c, "train.final_eval_windows=500");
    cr_assert_eq(c.train.final_eval_windows, 500);
    y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "  final_eval_windows: 500\n") != NULL, "%s", y);
    ar_config d;
    ar_config_defaults(&d);
    assert_parses(&d, y);
    assert_same(&c, &d);
    free(y);
    assert_has(set_err("train.final_eval_windows=-1"),
               "'train.final_eval_windows' expects a non-negative integer, got '-1'");
    assert_has(set_err("train.final_eval_windows=all"),
               "'train.final_eval_windows' expects a non-negative integer, got 'all'");
    c.train.final_eval_windows = -3;
    assert_has(validate_err(&c), "'train.final_eval_windows' expects a non-negative integer, got -3");
}

/* ---- model.residual.block_sizes ---- */

static void assert_list(const ar_config *c, const int *want, int n)
{
    const ar_int_list *l = &c->model.residual.block_sizes;
    cr_assert_eq(l->n, n, "%d entries, want %d", l->n, n);
    for (int i = 0; i < n; i++)
        cr_assert_eq(l->v[i], want[i], "entry %d is %d, want %d", i + 1, l->v[i], want[i]);
}

Test(config, block_sizes_parse_in_either_style)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_parses(&c, "model:\n  n_layer: 4\n  residual:\n    kind: block\n    block_sizes: [1, 3, 2, 2]\n");
    assert_list(&c, (int[]){1, 3, 2, 2}, 4);
    cr_assert_eq(c.model.residual.block_size, 0, "block_sizes clears the default block_size");
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    cr_assert_eq(ar_cfg_block_size(&c.model), 0, "no one S");
    ar_config_defaults(&c);
    assert_parses(&c, "model:\n  n_layer: 3\n  residual:\n    block_sizes:\n      - 4\n      - 2\n");
    assert_list(&c, (int[]){4, 2}, 2);
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
}

Test(config, block_sizes_round_trip)
{
    ar_config c;
    ar_config_defaults(&c);
    assert_sets(&c, "model.n_layer=4");
    assert_sets(&c, "model.residual.block_sizes=[1,3,2,2]");
    char *y = ar_config_to_yaml(&c);
    cr_assert(strstr(y, "    kind: block\n    block_sizes: [1, 3, 2, 2]\n"), "%s", y);
    cr_assert(!strstr(y, "block_size:") && !strstr(y, "num_blocks"), "only the way the blocks were given: %s", y);
    free(y);
    round_trip(&c);
    /* a long list survives whole, and two lists that differ late differ */
    ar_config_defaults(&c);
    c.model.n_layer = 100;
    c.model.residual.block_size = 0;
    c.model.residual.block_sizes.n = 200;
    for (int i = 0; i < 200; i++)
        c.model.residual.block_sizes.v[i] = 1;
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    round_trip(&c);
    ar_config d = c;
    d.model.residual.block_sizes.v[198] = 2;
    d.model.residual.block_sizes.n = 199;
    char diff[512];
    cr_expect_eq(ar_config_diff(&c, &d, diff, sizeof diff), 1, "%s", diff);
    cr_expect(strstr(diff, "model.residual.block_sizes"), "%s", diff);
    /* a kind without blocks does not write it */
    ar_config_defaults(&c);
    assert_sets(&c, "model.residual.block_sizes=[4,4]");
    c.model.residual.kind = AR_RES_FULL;
    y = ar_config_to_yaml(&c);
    cr_assert(!strstr(y, "block_sizes"), "%s", y);
    free(y);
}

Test(config, block_sizes_and_the_other_block_keys)
{
    /* one document: an error naming both */
    assert_has(parse_err("model:\n  residual:\n    block_size: 2\n    block_sizes: [4, 4]\n"),
               "t.yaml:4:18: 'model.residual.block_sizes' and 'model.residual.block_size' are mutually exclusive "
               "('model.residual.block_size' was given at 3:17)");
    assert_has(parse_err("model:\n  residual:\n    block_sizes: [4, 4]\n    num_blocks: 2\n"),
               "t.yaml:4:17: 'model.residual.num_blocks' and 'model.residual.block_sizes' are mutually exclusive");
    assert_has(set_err("model.residual={block_sizes: [4, 4], block_size: 4}"), "are mutually exclusive");
    /* later documents and --set win, clearing the other */
    ar_config c;
    ar_config_defaults(&c);
    assert_sets(&c, "model.residual.num_blocks=2");
    assert_sets(&c, "model.residual.block_sizes=[2, 6]");
    cr_assert_eq(c.model.residual.num_blocks, 0);
    cr_assert_eq(c.model.residual.block_size, 0);
    assert_list(&c, (int[]){2, 6}, 2);
    assert_parses(&c, "model:\n  residual:\n    block_size: 3\n");
    cr_assert_eq(c.model.residual.block_sizes.n, 0, "block_size clears block_sizes");
    assert_sets(&c, "model.residual.block_sizes=[8]");
    assert_sets(&c, "model.residual.num_blocks=4");
    cr_assert_eq(c.model.residual.block_sizes.n, 0, "num_blocks clears block_sizes");
    /* a struct filled by code with both */
    ar_config_defaults(&c);
    c.model.residual.block_sizes = (ar_int_list){.n = 2, .v = {4, 4}};
    assert_has(validate_err(&c), "'model.residual.block_sizes' and 'model.residual.block_size' are mutually "
                                 "exclusive");
    c.model.residual.block_size = 0;
    c.model.residual.num_blocks = 2;
    assert_has(validate_err(&c), "'model.residual.block_sizes' and 'model.residual.num_blocks' are mutually "
                                 "exclusive");
}

Test(config, block_sizes_bad_values)
{
    const char *pre = "model:\n  residual:\n    block_sizes: ";
    char y[256];
#define BAD(list, want)                                                                                              \
    do {                                                                                                             \
        snprintf(y, sizeof y, "%s%s\n", pre, list);                                                                  \
        assert_has(parse_err(y), want);                                                                              \
    } while (0)
    BAD("[4, 0, 4]", "t.yaml:3:22: 'model.residual.block_sizes' expects a list of positive integers, such as "
                     "[2, 2, 4], got '0' at entry 2");
    BAD("[4, -2, 6]", "'model.residual.block_sizes' expects a list of positive integers, such as [2, 2, 4], got "
                      "'-2' at entry 2");
    BAD("[2, 2.5, 3.5]", "got '2.5' at entry 2");
    BAD("[2, two]", "got 'two' at entry 2");
    BAD("[2, \"6\"]", "got '6' (a quoted string) at entry 2");
    BAD("[2, [3, 3]]", "got a sequence at entry 2");
    BAD("[99999999999, 1]", "at entry 1 (out of range)");
    BAD("[]", "t.yaml:3:18: 'model.residual.block_sizes' is an empty list (expected a list of positive integers");
    BAD("8", "t.yaml:3:18: 'model.residual.block_sizes' expects a list of positive integers, such as [2, 2, 4], "
             "got '8'");
    BAD("{a: 1}", "expects a list of positive integers, such as [2, 2, 4], got a mapping");
    BAD("null", "got null");
#undef BAD
    /* more entries than a config holds */
    char big[4096];
    size_t u = (size_t)snprintf(big, sizeof big, "%s[", pre);
    for (int i = 0; i <= AR_LIST_MAX; i++)
        u += (size_t)snprintf(big + u, sizeof big - u, "%s1", i ? "," : "");
    snprintf(big + u, sizeof big - u, "]\n");
    assert_has(parse_err(big), "'model.residual.block_sizes' has more than 256 entries");
    /* a failed parse changes nothing */
    ar_config c, d;
    ar_config_defaults(&c);
    ar_config_defaults(&d);
    ar_err e;
    cr_assert_eq(parse(&c, "model:\n  residual:\n    block_sizes: [4, 0]\n", &e), -1);
    assert_same(&c, &d);
    cr_assert_eq(c.model.residual.block_sizes.n, 0);
    cr_assert_eq(c.model.residual.block_size, 4);
}

Test(config, block_sizes_validation)
{
    ar_config c;
    ar_config_defaults(&c); /* n_layer 4: L = 8 */
    assert_sets(&c, "model.residual.block_sizes=[1, 3, 2]");
    cr_assert_str_eq(validate_err(&c), "'model.residual.block_sizes' [1, 3, 2] sums to 6 sublayers, expected L = "
                                       "2*'model.n_layer' = 8 (every sublayer in exactly one block)");
    assert_sets(&c, "model.residual.block_sizes=[4, 4, 1]");
    assert_has(validate_err(&c), "sums to 9 sublayers, expected L = 2*'model.n_layer' = 8");
    assert_sets(&c, "model.residual.block_sizes=[4, 4]");
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), 0, "%s", e.msg);
    /* the list follows n_layer */
    assert_sets(&c, "model.n_layer=5");
    assert_has(validate_err(&c), "sums to 8 sublayers, expected L = 2*'model.n_layer' = 10");
    /* kinds without blocks */
    const char *kinds[] = {"full", "baseline", "swa", "mhc", "static", "denseformer", "rescaled"};
    for (int i = 0; i < 7; i++) {
        ar_config_defaults(&c);
        assert_sets(&c, "model.residual.block_sizes=[4, 4]");
        char set[64];
        snprintf(set, sizeof set, "model.residual.kind=%s", kinds[i]);
        assert_sets(&c, set);
        if (!strcmp(kinds[i], "swa"))
            assert_sets(&c, "model.residual.window=2");
        char want[160];
        snprintf(want, sizeof want, "'model.residual.block_sizes' applies to kind block (and the ablation variants "
                                    "built on it), not '%s'", kinds[i]);
        assert_has(validate_err(&c), want);
    }
    /* entries filled by code */
    ar_config_defaults(&c);
    c.model.residual.block_size = 0;
    c.model.residual.block_sizes = (ar_int_list){.n = 3, .v = {4, 0, 4}};
    assert_has(validate_err(&c), "'model.residual.block_sizes' expects a list of positive integers, such as "
                                 "[2, 2, 4], got 0 at entry 2");
    c.model.residual.block_sizes.n = AR_LIST_MAX + 1;
    assert_has(validate_err(&c), "'model.residual.block_sizes' has 257 entries (expected 0 to 256)");
}

/* ---- error kinds ---- */

static ar_err_kind parse_kind(const char *yaml)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_err e = {{0}};
    cr_assert_eq(parse(&c, yaml, &e), -1, "expected an error for:\n%s", yaml);
    return e.kind;
}

static ar_err_kind set_kind(const char *assign)
{
    ar_config c;
    ar_config_defaults(&c);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_set(&c, assign, &e), -1, "expected an error for --set %s", assign);
    return e.kind;
}

static ar_err_kind validate_kind(void (*change)(ar_config *c))
{
    ar_config c;
    ar_config_defaults(&c);
    change(&c);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_validate(&c, &e), -1);
    return e.kind;
}

static void lr_negative(ar_config *c) { c->train.lr = -1; }
static void train_empty(ar_config *c) { c->data.train[0] = 0; }
static void heads_misfit(ar_config *c) { c->model.n_head = 5; }
static void min_lr_above_lr(ar_config *c) { c->train.min_lr = 2 * c->train.lr; }

Test(config, error_kinds)
{
    /* a file that is missing, or not YAML */
    const char *dir = tu_tmpdir();
    ar_config c;
    ar_config_defaults(&c);
    ar_err e = {{0}};
    cr_assert_eq(ar_config_load(&c, tu_path(dir, "missing.yaml"), &e), -1);
    cr_expect_eq(e.kind, AR_ERR_NOT_FOUND, "%s", e.msg);
    cr_expect_eq(parse_kind("model:\n  d_model: 8\n  n_head: [1, 2\n"), AR_ERR_FORMAT);
    cr_expect_eq(parse_kind("model:\n  d_model: 8\n---\ntrain:\n  steps: 1\n"), AR_ERR_FORMAT);
    /* a key or value that is wrong on its own */
    cr_expect_eq(parse_kind("model:\n  bogus: 1\n"), AR_ERR_BAD_VALUE);
    cr_expect_eq(parse_kind("model:\n  d_model: x\n"), AR_ERR_BAD_VALUE);
    cr_expect_eq(parse_kind("train:\n  schedule: foo\n"), AR_ERR_BAD_VALUE);
    cr_expect_eq(parse_kind("model:\n  d_model: 64\n  d_model: 128\n"), AR_ERR_BAD_VALUE);
    cr_expect_eq(set_kind("model.bogus=1"), AR_ERR_BAD_VALUE);
    cr_expect_eq(set_kind("model.d_model.x=1"), AR_ERR_BAD_VALUE);
    cr_expect_eq(set_kind("model.d_model"), AR_ERR_BAD_VALUE);
    cr_expect_eq(set_kind("model.d_model=[1"), AR_ERR_BAD_VALUE); /* not YAML, but a value, not a file */
    cr_expect_eq(set_kind("model.d_model=-3"), AR_ERR_BAD_VALUE);
    cr_expect_eq(validate_kind(lr_negative), AR_ERR_BAD_VALUE);
    cr_expect_eq(validate_kind(train_empty), AR_ERR_BAD_VALUE);
    /* values each fine alone that do not fit together */
    cr_expect_eq(parse_kind("model:\n  residual:\n    block_size: 2\n    num_blocks: 4\n"), AR_ERR_OTHER);
    cr_expect_eq(validate_kind(heads_misfit), AR_ERR_OTHER);
    cr_expect_eq(validate_kind(min_lr_above_lr), AR_ERR_OTHER);
}
