/* YAML configuration: one key table drives parsing, --set, validation of
 * single values, the "expected one of" lists and the resolved YAML.
 *
 * To add a key: add a field to core/config.h, a default in core/config.c, a
 * row in KEYS below (in the order it should be written) and a paragraph in
 * man/attnres-config.5.  Sections ("model", "model.residual") are not listed
 * anywhere: they are the prefixes of the dotted keys. */
#include "config.h"

#include "../core/blocks.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

/* ------------------------------------------------------------------ */
/* The key table                                                       */
/* ------------------------------------------------------------------ */

typedef enum {
    KT_INT,       /* int */
    KT_LONG,      /* long */
    KT_U64,       /* uint64_t */
    KT_NUM,       /* double */
    KT_ENUM,      /* an int-sized enum spelled by enum_name() */
    KT_VOCAB,     /* "bytes", "gpt2" (50257) or a positive integer: sets model.vocab_bytes and model.vocab */
    KT_PATH,      /* char[AR_PATH_MAX]; null is not allowed */
    KT_PATH_NULL, /* char[AR_PATH_MAX]; null is stored as "" */
    KT_INT_LIST,  /* ar_int_list: a YAML sequence of integers in the key's range */
} key_type;

typedef enum {
    RG_ANY,
    RG_POS,      /* integers >= 1, numbers > 0 */
    RG_NONNEG,   /* >= 0 */
    RG_OPEN01,   /* (0, 1) */
    RG_HALF01,   /* [0, 1) */
    RG_CLOSED01, /* [0, 1] */
} key_range;

typedef struct {
    const char *key; /* full dotted name */
    key_type type;
    key_range range;
    size_t off;      /* offset of the field in ar_config */
    /* KT_ENUM: the spelling of value i, "unknown" past the last one (the
     * convention of ar_res_kind_name / ar_sched_name). */
    const char *(*enum_name)(int i);
    /* Keys that may not be given together with this one in one document;
     * setting this key clears them (so a later file or --set wins). */
    const char *exclusive, *exclusive2;
    /* 0 in the struct means "not given": validation accepts it. */
    int zero_unset;
    /* NULL: always written by ar_config_to_yaml; else written when true. */
    int (*emit_if)(const ar_config *c);
} key_def;

_Static_assert(sizeof(ar_res_kind) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_sched_kind) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_device) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_precision) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_pipe_sched_kind) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_optimizer_kind) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_muon_scale_kind) == sizeof(int), "KT_ENUM stores enums as int");
_Static_assert(sizeof(ar_recompute) == sizeof(int), "KT_ENUM stores enums as int");

static const char *res_kind_at(int i) { return ar_res_kind_name((ar_res_kind)i); }
static const char *sched_at(int i) { return ar_sched_name((ar_sched_kind)i); }
static const char *score_at(int i) { return ar_score_name((ar_score_kind)i); }
static const char *key_norm_at(int i) { return ar_key_norm_name((ar_key_norm)i); }
static const char *query_at(int i) { return ar_query_name((ar_query_kind)i); }
static const char *query_scale_at(int i) { return ar_query_scale_name((ar_query_scale)i); }
static const char *device_at(int i) { return ar_device_name((ar_device)i); }
static const char *precision_at(int i) { return ar_precision_name((ar_precision)i); }
static const char *recompute_at(int i) { return ar_recompute_name((ar_recompute)i); }
static const char *bool_at(int i) { return i == 0 ? "false" : i == 1 ? "true" : "unknown"; }
static const char *pipe_sched_at(int i) { return ar_pipe_sched_name((ar_pipe_sched_kind)i); }
static const char *optimizer_at(int i) { return ar_optimizer_name((ar_optimizer_kind)i); }
static const char *muon_scale_at(int i) { return ar_muon_scale_name((ar_muon_scale_kind)i); }
/* The optimizer and Muon's keys are written only for a Muon run, so the
 * configs of AdamW runs (and those written before Muon) read the same. */
static int emit_muon(const ar_config *c) { return c->train.optimizer != AR_OPT_ADAMW; }
/* The parallel keys are written only where they differ from one process's
 * defaults, so a run's config.yaml reads the same on any layout. */
/* Written where it is not the default 0, so configs without it read the same. */
static int emit_final_eval(const ar_config *c) { return c->train.final_eval_windows != 0; }
static int emit_shard(const ar_config *c) { return c->parallel.shard_optimizer != 0; }
static int emit_pipeline(const ar_config *c) { return c->parallel.pipeline > 1; }
static int emit_virtual(const ar_config *c) { return c->parallel.virtual_stages > 1; }
static int emit_cache(const ar_config *c) { return c->parallel.cache_blocks != 1; }
static int emit_timeout(const ar_config *c) { return c->parallel.timeout_s != 600; }
static int emit_pipe_sched(const ar_config *c) { return c->parallel.schedule != AR_PIPE_SCHED_1F1B; }

/* The ablation flags are written only where they differ from their
 * defaults, so configs written before they existed resolve unchanged. */
static int emit_score(const ar_config *c) { return c->model.residual.score != AR_SCORE_SOFTMAX; }
static int emit_key_norm(const ar_config *c) { return c->model.residual.key_norm != AR_KEY_NORM_ON; }
static int emit_query(const ar_config *c) { return c->model.residual.query != AR_QUERY_LEARNED; }
/* Always written with query: input, so a config or checkpoint says which
 * form it trained whatever the defaults become (a checkpoint without them
 * predates them: the plain form, run/checkpoint.c). */
static int emit_query_forms(const ar_config *c) { return c->model.residual.query == AR_QUERY_INPUT; }
static int emit_heads(const ar_config *c) { return c->model.residual.heads > 0; }
static int emit_window(const ar_config *c) { return c->model.residual.window > 0; }
static int emit_streams(const ar_config *c) { return c->model.residual.streams > 0; }

/* S is only meaningful for kind block, and only the way it was given
 * (block_size, num_blocks or block_sizes) is written, so reading the YAML
 * back restores the same struct. */
static int emit_block_size(const ar_config *c)
{
    return c->model.residual.kind == AR_RES_BLOCK && c->model.residual.block_size > 0;
}

static int emit_num_blocks(const ar_config *c)
{
    return c->model.residual.kind == AR_RES_BLOCK && c->model.residual.num_blocks > 0;
}

static int emit_block_sizes(const ar_config *c)
{
    return c->model.residual.kind == AR_RES_BLOCK && c->model.residual.block_sizes.n > 0;
}

/* One row per key, in the order of attnres-config(5) and of the resolved YAML.
 * Optional columns are named after the first four. */
#define KEY(name, t_, r_, fld, ...) {.key = name, .type = t_, .range = r_, .off = offsetof(ar_config, fld), __VA_ARGS__}

static const key_def KEYS[] = {
    KEY("model.vocab", KT_VOCAB, RG_POS, model.vocab),
    KEY("model.d_model", KT_INT, RG_POS, model.d_model),
    KEY("model.n_layer", KT_INT, RG_POS, model.n_layer),
    KEY("model.n_head", KT_INT, RG_POS, model.n_head),
    KEY("model.d_ff", KT_INT, RG_POS, model.d_ff),
    KEY("model.seq_len", KT_INT, RG_POS, model.seq_len),
    KEY("model.residual.kind", KT_ENUM, RG_ANY, model.residual.kind, .enum_name = res_kind_at),
    KEY("model.residual.block_size", KT_INT, RG_POS, model.residual.block_size,
        .exclusive = "model.residual.num_blocks", .exclusive2 = "model.residual.block_sizes", .zero_unset = 1,
        .emit_if = emit_block_size),
    KEY("model.residual.num_blocks", KT_INT, RG_POS, model.residual.num_blocks,
        .exclusive = "model.residual.block_size", .exclusive2 = "model.residual.block_sizes", .zero_unset = 1,
        .emit_if = emit_num_blocks),
    KEY("model.residual.block_sizes", KT_INT_LIST, RG_POS, model.residual.block_sizes,
        .exclusive = "model.residual.block_size", .exclusive2 = "model.residual.num_blocks", .zero_unset = 1,
        .emit_if = emit_block_sizes),
    KEY("model.residual.score", KT_ENUM, RG_ANY, model.residual.score, .enum_name = score_at,
        .emit_if = emit_score),
    KEY("model.residual.key_norm", KT_ENUM, RG_ANY, model.residual.key_norm, .enum_name = key_norm_at,
        .emit_if = emit_key_norm),
    KEY("model.residual.query", KT_ENUM, RG_ANY, model.residual.query, .enum_name = query_at,
        .emit_if = emit_query),
    KEY("model.residual.query_scale", KT_ENUM, RG_ANY, model.residual.query_scale, .enum_name = query_scale_at,
        .emit_if = emit_query_forms),
    KEY("model.residual.query_norm", KT_ENUM, RG_ANY, model.residual.query_norm, .enum_name = bool_at,
        .emit_if = emit_query_forms),
    KEY("model.residual.query_gate", KT_ENUM, RG_ANY, model.residual.query_gate, .enum_name = bool_at,
        .emit_if = emit_query_forms),
    KEY("model.residual.query_lr_scale", KT_NUM, RG_POS, model.residual.query_lr_scale,
        .emit_if = emit_query_forms),
    KEY("model.residual.heads", KT_INT, RG_POS, model.residual.heads, .zero_unset = 1, .emit_if = emit_heads),
    KEY("model.residual.window", KT_INT, RG_POS, model.residual.window, .zero_unset = 1,
        .emit_if = emit_window),
    KEY("model.residual.streams", KT_INT, RG_POS, model.residual.streams, .zero_unset = 1,
        .emit_if = emit_streams),

    KEY("data.train", KT_PATH, RG_ANY, data.train),
    KEY("data.val", KT_PATH_NULL, RG_ANY, data.val),
    KEY("data.val_fraction", KT_NUM, RG_OPEN01, data.val_fraction),

    KEY("train.steps", KT_LONG, RG_POS, train.steps),
    KEY("train.batch_size", KT_INT, RG_POS, train.batch_size),
    KEY("train.grad_accum", KT_INT, RG_POS, train.grad_accum),
    KEY("train.lr", KT_NUM, RG_POS, train.lr),
    KEY("train.min_lr", KT_NUM, RG_NONNEG, train.min_lr),
    KEY("train.schedule", KT_ENUM, RG_ANY, train.schedule, .enum_name = sched_at),
    KEY("train.warmup", KT_LONG, RG_NONNEG, train.warmup),
    KEY("train.decay_frac", KT_NUM, RG_CLOSED01, train.decay_frac),
    KEY("train.weight_decay", KT_NUM, RG_NONNEG, train.weight_decay),
    KEY("train.beta1", KT_NUM, RG_HALF01, train.beta1),
    KEY("train.beta2", KT_NUM, RG_HALF01, train.beta2),
    KEY("train.eps", KT_NUM, RG_POS, train.eps),
    KEY("train.grad_clip", KT_NUM, RG_NONNEG, train.grad_clip),
    KEY("train.optimizer", KT_ENUM, RG_ANY, train.optimizer, .enum_name = optimizer_at, .emit_if = emit_muon),
    KEY("train.muon_lr", KT_NUM, RG_POS, train.muon_lr, .emit_if = emit_muon),
    KEY("train.muon_momentum", KT_NUM, RG_HALF01, train.muon_momentum, .emit_if = emit_muon),
    KEY("train.muon_nesterov", KT_ENUM, RG_ANY, train.muon_nesterov, .enum_name = bool_at, .emit_if = emit_muon),
    KEY("train.muon_ns_steps", KT_INT, RG_POS, train.muon_ns_steps, .emit_if = emit_muon),
    KEY("train.muon_scale", KT_ENUM, RG_ANY, train.muon_scale, .enum_name = muon_scale_at, .emit_if = emit_muon),
    KEY("train.muon_weight_decay", KT_NUM, RG_NONNEG, train.muon_weight_decay, .emit_if = emit_muon),
    KEY("train.seed", KT_U64, RG_NONNEG, train.seed),
    KEY("train.eval_every", KT_LONG, RG_NONNEG, train.eval_every),
    KEY("train.eval_windows", KT_LONG, RG_NONNEG, train.eval_windows),
    KEY("train.final_eval_windows", KT_LONG, RG_NONNEG, train.final_eval_windows, .emit_if = emit_final_eval),
    KEY("train.save_every", KT_LONG, RG_NONNEG, train.save_every),
    KEY("train.keep_checkpoints", KT_INT, RG_NONNEG, train.keep_checkpoints),
    KEY("train.max_bad_steps", KT_INT, RG_POS, train.max_bad_steps),
    KEY("train.log_every", KT_LONG, RG_POS, train.log_every),
    KEY("train.threads", KT_INT, RG_NONNEG, train.threads),
    KEY("train.device", KT_ENUM, RG_ANY, train.device, .enum_name = device_at),
    KEY("train.precision", KT_ENUM, RG_ANY, train.precision, .enum_name = precision_at),
    KEY("train.recompute", KT_ENUM, RG_ANY, train.recompute, .enum_name = recompute_at),

    KEY("parallel.shard_optimizer", KT_ENUM, RG_ANY, parallel.shard_optimizer, .enum_name = bool_at,
        .emit_if = emit_shard),
    KEY("parallel.pipeline", KT_INT, RG_POS, parallel.pipeline, .emit_if = emit_pipeline),
    KEY("parallel.virtual", KT_INT, RG_POS, parallel.virtual_stages, .emit_if = emit_virtual),
    KEY("parallel.cache_blocks", KT_ENUM, RG_ANY, parallel.cache_blocks, .enum_name = bool_at,
        .emit_if = emit_cache),
    KEY("parallel.schedule", KT_ENUM, RG_ANY, parallel.schedule, .enum_name = pipe_sched_at,
        .emit_if = emit_pipe_sched),
    KEY("parallel.timeout_s", KT_NUM, RG_NONNEG, parallel.timeout_s, .emit_if = emit_timeout),
};

enum { N_KEYS = sizeof KEYS / sizeof KEYS[0] };

/* Dotted keys and section paths are short; longer user text is simply an
 * unknown key. */
#define KEY_MAX 256

static int find_leaf(const char *dotted)
{
    for (int i = 0; i < N_KEYS; i++)
        if (strcmp(KEYS[i].key, dotted) == 0)
            return i;
    return -1;
}

/* Does `key` lie under section `prefix` ("" = the top level)?  Returns the
 * start of the remaining components, or NULL. */
static const char *under(const char *key, const char *prefix)
{
    size_t n = strlen(prefix);
    if (n == 0)
        return key;
    if (strncmp(key, prefix, n) != 0 || key[n] != '.')
        return NULL;
    return key + n + 1;
}

static int is_section(const char *prefix)
{
    for (int i = 0; i < N_KEYS; i++)
        if (under(KEYS[i].key, prefix))
            return 1;
    return 0;
}

static size_t component_len(const char *s)
{
    const char *dot = strchr(s, '.');
    return dot ? (size_t)(dot - s) : strlen(s);
}

/* "vocab, d_model, ..., residual": the names valid directly under prefix,
 * in table order, each once. */
static void list_children(const char *prefix, char *out, size_t n)
{
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < N_KEYS; i++) {
        const char *rest = under(KEYS[i].key, prefix);
        if (!rest)
            continue;
        size_t len = component_len(rest);
        int dup = 0;
        for (int j = 0; j < i && !dup; j++) {
            const char *r = under(KEYS[j].key, prefix);
            dup = r && component_len(r) == len && strncmp(r, rest, len) == 0;
        }
        if (dup)
            continue;
        int k = snprintf(out + used, n - used, "%s%.*s", used ? ", " : "", (int)len, rest);
        if (k < 0 || (size_t)k >= n - used)
            return;
        used += (size_t)k;
    }
}

static void *field(ar_config *c, const key_def *k) { return (char *)c + k->off; }
static const void *cfield(const ar_config *c, const key_def *k) { return (const char *)c + k->off; }

static int enum_count(const key_def *k)
{
    int n = 0;
    while (n < 64 && strcmp(k->enum_name(n), "unknown") != 0)
        n++;
    return n;
}

/* What a key expects, for messages: "a positive integer". */
static const char *expects(const key_def *k, char *buf, size_t n)
{
    int integer = k->type == KT_INT || k->type == KT_LONG || k->type == KT_U64;
    switch (k->type) {
    case KT_ENUM: {
        size_t used = snprintf(buf, n, "one of ");
        for (int i = 0, m = enum_count(k); i < m && used < n; i++)
            used += snprintf(buf + used, n - used, "%s%s", i ? "|" : "", k->enum_name(i));
        return buf;
    }
    case KT_VOCAB: return "'bytes', 'gpt2' or a positive integer";
    case KT_PATH: return "a path";
    case KT_PATH_NULL: return "a path or null";
    case KT_INT_LIST:
        return k->range == RG_POS ? "a list of positive integers, such as [2, 2, 4]" : "a list of integers";
    default: break;
    }
    switch (k->range) {
    case RG_POS: return integer ? "a positive integer" : "a positive number";
    case RG_NONNEG: return integer ? "a non-negative integer" : "a non-negative number";
    case RG_OPEN01: return "a number in (0, 1)";
    case RG_HALF01: return "a number in [0, 1)";
    case RG_CLOSED01: return "a number in [0, 1]";
    case RG_ANY: break;
    }
    return integer ? "an integer" : "a number";
}

static int in_range(key_range r, int integer, double v)
{
    switch (r) {
    case RG_ANY: return 1;
    case RG_POS: return integer ? v >= 1 : v > 0;
    case RG_NONNEG: return v >= 0;
    case RG_OPEN01: return v > 0 && v < 1;
    case RG_HALF01: return v >= 0 && v < 1;
    case RG_CLOSED01: return v >= 0 && v <= 1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Scalars                                                             */
/* ------------------------------------------------------------------ */

typedef struct {
    const char *s;
    size_t len;
    int quoted; /* any style but plain: always a string in YAML */
    int null;   /* plain "", "~", "null" */
} scalar;

static scalar scalar_of(const yaml_node_t *node)
{
    scalar v;
    v.s = (const char *)node->data.scalar.value;
    v.len = node->data.scalar.length;
    v.quoted = node->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    v.null = !v.quoted && (v.len == 0 || strcmp(v.s, "~") == 0 || strcmp(v.s, "null") == 0 ||
                           strcmp(v.s, "Null") == 0 || strcmp(v.s, "NULL") == 0);
    return v;
}

/* How a value is shown in "got ...": quoted text, cut at 60 bytes, with
 * control characters masked so one message stays one line. */
static const char *describe(const yaml_node_t *node, char *buf, size_t n)
{
    if (node->type == YAML_MAPPING_NODE)
        return "a mapping";
    if (node->type == YAML_SEQUENCE_NODE)
        return "a sequence";
    scalar v = scalar_of(node);
    if (v.null)
        return "null";
    char text[64];
    size_t k = 0;
    for (; k < v.len && k < 60; k++)
        text[k] = (unsigned char)v.s[k] < 0x20 ? '?' : v.s[k];
    text[k] = '\0';
    snprintf(buf, n, "'%s%s'%s", text, v.len > 60 ? "..." : "", v.quoted ? " (a quoted string)" : "");
    return buf;
}

/* Exactly one NUL-free string (the value may hold "\0" escapes). */
static int plain_text(const scalar *v)
{
    return !v->quoted && !v->null && strlen(v->s) == v->len;
}

/* YAML integers in decimal: [-+]?[0-9]+.  Returns 0, or -1 if the text is
 * not an integer, -2 if it does not fit. */
static int parse_long(const scalar *v, long long *out)
{
    if (!plain_text(v))
        return -1;
    const char *p = v->s + (v->s[0] == '-' || v->s[0] == '+');
    if (!*p || strspn(p, "0123456789") != strlen(p))
        return -1;
    errno = 0;
    long long x = strtoll(v->s, NULL, 10);
    if (errno == ERANGE)
        return -2;
    *out = x;
    return 0;
}

static int parse_u64(const scalar *v, uint64_t *out)
{
    if (!plain_text(v))
        return -1;
    const char *p = v->s + (v->s[0] == '+');
    if (!*p || strspn(p, "0123456789") != strlen(p))
        return -1;
    errno = 0;
    unsigned long long x = strtoull(p, NULL, 10);
    if (errno == ERANGE)
        return -2;
    *out = (uint64_t)x;
    return 0;
}

/* Decimal floats and integers (3e-3, 0.001, 1, 1.0e-08).  No hex, inf or
 * nan: a training hyperparameter is a finite decimal number. */
static int parse_num(const scalar *v, double *out)
{
    if (!plain_text(v) || strspn(v->s, "0123456789+-.eE") != v->len ||
        strpbrk(v->s, "0123456789") == NULL)
        return -1;
    char *end;
    errno = 0;
    double x = strtod(v->s, &end);
    if (*end)
        return -1;
    /* Underflow (ERANGE with a subnormal or zero result) is harmless; the
     * range check catches a zero where it matters. */
    if (!isfinite(x))
        return -2;
    *out = x;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Applying a YAML tree to a config                                    */
/* ------------------------------------------------------------------ */

typedef struct {
    ar_config *c;
    yaml_document_t *doc;
    const char *name;   /* file name for messages; NULL in --set mode */
    const char *assign; /* the --set argument */
    unsigned char seen[N_KEYS];
    yaml_mark_t seen_at[N_KEYS];
    ar_err *e;
} pctx;

/* The place prefix of a message: "file:line:col" or "--set 'k=v'". */
static const char *where(const pctx *p, yaml_mark_t m, char *buf, size_t n)
{
    if (p->name)
        snprintf(buf, n, "%s:%zu:%zu", p->name, m.line + 1, m.column + 1);
    else
        snprintf(buf, n, "--set '%s'", p->assign);
    return buf;
}

__attribute__((format(printf, 4, 0))) static void vfail_at(pctx *p, ar_err_kind kind, yaml_mark_t m, const char *fmt,
                                                            va_list ap)
{
    char msg[1536], loc[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    ar_fail_kind(p->e, kind, "%s: %s", where(p, m, loc, sizeof loc), msg);
}

/* A key or value that is wrong on its own (AR_ERR_BAD_VALUE), at its place. */
__attribute__((format(printf, 3, 4))) static int fail_at(pctx *p, yaml_mark_t m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(p, AR_ERR_BAD_VALUE, m, fmt, ap);
    va_end(ap);
    return -1;
}

/* Text that is not one YAML document: a malformed file (AR_ERR_FORMAT), or
 * in --set a wrong value (AR_ERR_BAD_VALUE). */
__attribute__((format(printf, 3, 4))) static int fail_syntax_at(pctx *p, yaml_mark_t m, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vfail_at(p, p->name ? AR_ERR_FORMAT : AR_ERR_BAD_VALUE, m, fmt, ap);
    va_end(ap);
    return -1;
}

static int bad_value(pctx *p, const key_def *k, const yaml_node_t *node, int rc)
{
    char exp[256], got[160];
    return fail_at(p, node->start_mark, "'%s' expects %s, got %s%s", k->key, expects(k, exp, sizeof exp),
                   describe(node, got, sizeof got), rc == -2 ? " (out of range)" : "");
}

static int store_integer(pctx *p, const key_def *k, const yaml_node_t *node, const scalar *v)
{
    long long lo = k->range == RG_POS ? 1 : k->range == RG_NONNEG ? 0 : LLONG_MIN;
    long long hi = k->type == KT_INT ? INT_MAX : LONG_MAX;
    long long x;
    int rc = parse_long(v, &x);
    if (rc == 0 && (x < lo || x > hi))
        rc = x < lo ? -1 : -2;
    if (rc)
        return bad_value(p, k, node, rc);
    if (k->type == KT_INT)
        *(int *)field(p->c, k) = (int)x;
    else
        *(long *)field(p->c, k) = (long)x;
    return 0;
}

/* "gpt2" is only a spelling of GPT-2's vocabulary size (tiktoken's gpt2
 * encoding, llm.c's token files): the config keeps, and writes back, 50257. */
#define GPT2_VOCAB 50257

static int store_vocab(pctx *p, const key_def *k, const yaml_node_t *node, const scalar *v)
{
    if (!v->null && strcmp(v->s, "bytes") == 0 && v->len == 5) {
        p->c->model.vocab_bytes = 1;
        p->c->model.vocab = 256;
        return 0;
    }
    if (!v->null && strcmp(v->s, "gpt2") == 0 && v->len == 4) {
        p->c->model.vocab_bytes = 0;
        p->c->model.vocab = GPT2_VOCAB;
        return 0;
    }
    long long x;
    int rc = parse_long(v, &x);
    if (rc == 0 && (x < 1 || x > INT_MAX))
        rc = x < 1 ? -1 : -2;
    if (rc)
        return bad_value(p, k, node, rc);
    p->c->model.vocab_bytes = 0;
    p->c->model.vocab = (int)x;
    return 0;
}

static int store_enum(pctx *p, const key_def *k, const yaml_node_t *node, const scalar *v)
{
    for (int i = 0, n = enum_count(k); i < n && !v->null; i++) {
        if (strlen(k->enum_name(i)) == v->len && strcmp(k->enum_name(i), v->s) == 0) {
            *(int *)field(p->c, k) = i;
            return 0;
        }
    }
    return bad_value(p, k, node, -1);
}

/* Any non-null scalar is taken as a path, even one YAML would read as a
 * number: file names like 2024 are legitimate. */
static int store_path(pctx *p, const key_def *k, const yaml_node_t *node, const scalar *v)
{
    char *dst = field(p->c, k);
    if (v->null) {
        if (k->type == KT_PATH)
            return bad_value(p, k, node, -1);
        dst[0] = '\0';
        return 0;
    }
    if (strlen(v->s) != v->len)
        return fail_at(p, node->start_mark, "'%s' expects a path, got a string containing a NUL byte", k->key);
    if (v->len >= AR_PATH_MAX)
        return fail_at(p, node->start_mark, "'%s' is too long (%zu bytes; at most %d)", k->key, v->len,
                       AR_PATH_MAX - 1);
    memcpy(dst, v->s, v->len + 1);
    return 0;
}

static int store_scalar(pctx *p, const key_def *k, const yaml_node_t *node)
{
    scalar v = scalar_of(node);
    int rc;
    switch (k->type) {
    case KT_INT:
    case KT_LONG:
        return store_integer(p, k, node, &v);
    case KT_U64:
        if ((rc = parse_u64(&v, field(p->c, k))))
            return bad_value(p, k, node, rc);
        return 0;
    case KT_NUM: {
        double x;
        rc = parse_num(&v, &x);
        if (rc == 0 && !in_range(k->range, 0, x))
            rc = -1;
        if (rc)
            return bad_value(p, k, node, rc);
        *(double *)field(p->c, k) = x;
        return 0;
    }
    case KT_ENUM: return store_enum(p, k, node, &v);
    case KT_VOCAB: return store_vocab(p, k, node, &v);
    case KT_PATH:
    case KT_PATH_NULL: return store_path(p, k, node, &v);
    case KT_INT_LIST: break; /* store_list */
    }
    return bad_value(p, k, node, -1);
}

static void clear_field(ar_config *c, const key_def *k)
{
    switch (k->type) {
    case KT_INT:
    case KT_ENUM: *(int *)field(c, k) = 0; break;
    case KT_LONG: *(long *)field(c, k) = 0; break;
    case KT_U64: *(uint64_t *)field(c, k) = 0; break;
    case KT_NUM: *(double *)field(c, k) = 0; break;
    case KT_VOCAB:
    case KT_PATH:
    case KT_PATH_NULL: *(char *)field(c, k) = '\0'; break;
    case KT_INT_LIST: memset(field(c, k), 0, sizeof(ar_int_list)); break;
    }
}

/* A flow or block sequence of integers, each in the key's range: "[2, 2, 4]".
 * Entries are counted from 1 in messages. */
static int store_list(pctx *p, const key_def *k, const yaml_node_t *node)
{
    char exp[256], got[160];
    if (node->type != YAML_SEQUENCE_NODE)
        return bad_value(p, k, node, -1);
    ar_int_list *dst = field(p->c, k), out = {0};
    long long lo = k->range == RG_POS ? 1 : k->range == RG_NONNEG ? 0 : INT_MIN;
    for (const yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
        const yaml_node_t *item = yaml_document_get_node(p->doc, *it);
        if (out.n == AR_LIST_MAX)
            return fail_at(p, item->start_mark, "'%s' has more than %d entries", k->key, AR_LIST_MAX);
        long long x;
        scalar v;
        int rc = -1;
        if (item->type == YAML_SCALAR_NODE) {
            v = scalar_of(item);
            rc = parse_long(&v, &x);
            if (rc == 0 && (x < lo || x > INT_MAX))
                rc = x < lo ? -1 : -2;
        }
        if (rc)
            return fail_at(p, item->start_mark, "'%s' expects %s, got %s at entry %d%s", k->key,
                           expects(k, exp, sizeof exp), describe(item, got, sizeof got), out.n + 1,
                           rc == -2 ? " (out of range)" : "");
        out.v[out.n++] = (int)x;
    }
    if (out.n == 0)
        return fail_at(p, node->start_mark, "'%s' is an empty list (expected %s)", k->key,
                       expects(k, exp, sizeof exp));
    *dst = out;
    return 0;
}

/* The other key is given in this document: an error naming both. */
static int check_exclusive(pctx *p, const key_def *k, const char *other_key, const yaml_node_t *node)
{
    if (!other_key)
        return 0;
    int other = find_leaf(other_key);
    if (p->seen[other]) {
        char loc[512] = "", at[512];
        if (p->name)
            snprintf(loc, sizeof loc, " at %zu:%zu", p->seen_at[other].line + 1, p->seen_at[other].column + 1);
        /* each value is fine alone: kind OTHER */
        return ar_fail(p->e, "%s: '%s' and '%s' are mutually exclusive ('%s' was given%s)",
                       where(p, node->start_mark, at, sizeof at), k->key, other_key, other_key, loc);
    }
    clear_field(p->c, &KEYS[other]);
    return 0;
}

static int apply_leaf(pctx *p, int ki, const yaml_node_t *node)
{
    const key_def *k = &KEYS[ki];
    if (k->type == KT_INT_LIST) {
        if (store_list(p, k, node))
            return -1;
    } else if (node->type != YAML_SCALAR_NODE) {
        return bad_value(p, k, node, -1);
    } else if (store_scalar(p, k, node)) {
        return -1;
    }
    if (check_exclusive(p, k, k->exclusive, node) || check_exclusive(p, k, k->exclusive2, node))
        return -1;
    p->seen[ki] = 1;
    p->seen_at[ki] = node->start_mark;
    return 0;
}

static int apply_section(pctx *p, const char *prefix, const yaml_node_t *node);

/* A duplicate is the same key text earlier in the same mapping. */
static int check_duplicate(pctx *p, const char *dotted, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *key = yaml_document_get_node(p->doc, pair->key);
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *prev = yaml_document_get_node(p->doc, q->key);
        if (prev->type == YAML_SCALAR_NODE && prev->data.scalar.length == key->data.scalar.length &&
            memcmp(prev->data.scalar.value, key->data.scalar.value, key->data.scalar.length) == 0) {
            if (!p->name)
                return fail_at(p, key->start_mark, "duplicate key '%s'", dotted);
            return fail_at(p, key->start_mark, "duplicate key '%s' (first given at %zu:%zu)", dotted,
                           prev->start_mark.line + 1, prev->start_mark.column + 1);
        }
    }
    return 0;
}

static int apply_pair(pctx *p, const char *prefix, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *key = yaml_document_get_node(p->doc, pair->key);
    const yaml_node_t *val = yaml_document_get_node(p->doc, pair->value);
    char got[160], dotted[KEY_MAX + 64];
    if (key->type != YAML_SCALAR_NODE)
        return fail_at(p, key->start_mark, "keys must be names, got %s", describe(key, got, sizeof got));
    snprintf(dotted, sizeof dotted, "%s%s%.*s", prefix, *prefix ? "." : "",
             (int)(key->data.scalar.length > KEY_MAX ? KEY_MAX : key->data.scalar.length),
             (const char *)key->data.scalar.value);
    if (check_duplicate(p, dotted, map, pair))
        return -1;
    /* A key holding a "\0" escape or cut at KEY_MAX names nothing. */
    int whole = strlen((const char *)key->data.scalar.value) == key->data.scalar.length &&
                key->data.scalar.length <= KEY_MAX;
    int ki = whole ? find_leaf(dotted) : -1;
    if (ki >= 0)
        return apply_leaf(p, ki, val);
    if (whole && is_section(dotted))
        return apply_section(p, dotted, val);
    char valid[1024];
    list_children(prefix, valid, sizeof valid);
    return fail_at(p, key->start_mark, "unknown key '%s' (expected one of: %s)", dotted, valid);
}

/* A section's value is a mapping of its keys; null (a section whose keys
 * are all commented out) means no overrides. */
static int apply_section(pctx *p, const char *prefix, const yaml_node_t *node)
{
    char got[160];
    if (node->type == YAML_SCALAR_NODE && scalar_of(node).null)
        return 0;
    if (node->type != YAML_MAPPING_NODE) {
        if (!*prefix)
            return fail_at(p, node->start_mark, "expected a mapping of sections (model, data, train, parallel) at the top level, got %s",
                           describe(node, got, sizeof got));
        return fail_at(p, node->start_mark, "'%s' expects a mapping, got %s", prefix, describe(node, got, sizeof got));
    }
    for (const yaml_node_pair_t *q = node->data.mapping.pairs.start; q < node->data.mapping.pairs.top; q++)
        if (apply_pair(p, prefix, node, q))
            return -1;
    return 0;
}

/* ------------------------------------------------------------------ */
/* Loading YAML                                                        */
/* ------------------------------------------------------------------ */

/* libyaml's reader reports byte offsets, not marks; its marks count
 * characters, so UTF-8 continuation bytes do not advance the column. */
static yaml_mark_t mark_of_offset(const char *text, size_t len, size_t off)
{
    yaml_mark_t m = {0, 0, 0};
    for (size_t i = 0; i < off && i < len; i++) {
        if (text[i] == '\n') {
            m.line++;
            m.column = 0;
        } else if (((unsigned char)text[i] & 0xC0) != 0x80) {
            m.column++;
        }
    }
    m.index = off;
    return m;
}

static int syntax_error(pctx *p, const yaml_parser_t *y, const char *text, size_t len)
{
    const char *problem = y->problem ? y->problem : "unknown error";
    if (y->error == YAML_MEMORY_ERROR)
        return ar_fail(p->e, "%s: out of memory parsing YAML", p->name ? p->name : "--set");
    if (y->error == YAML_READER_ERROR)
        return fail_syntax_at(p, mark_of_offset(text, len, y->problem_offset), "invalid YAML: %s", problem);
    char ctx[256] = "";
    if (y->context && p->name)
        snprintf(ctx, sizeof ctx, " (%s at %zu:%zu)", y->context, y->context_mark.line + 1,
                 y->context_mark.column + 1);
    else if (y->context)
        snprintf(ctx, sizeof ctx, " (%s)", y->context);
    if (!p->name)
        return ar_fail_kind(p->e, AR_ERR_BAD_VALUE, "--set '%s': invalid YAML value: %s at column %zu of the value%s",
                            p->assign, problem, y->problem_mark.column + 1, ctx);
    return fail_syntax_at(p, y->problem_mark, "invalid YAML: %s%s", problem, ctx);
}

/* Loads the single document of `text` into doc.  A stream with a second
 * document is an error: which one would win is not obvious. */
static int load_document(pctx *p, yaml_document_t *doc, const char *text, size_t len)
{
    yaml_parser_t y;
    yaml_document_t extra;
    int rc = -1;
    if (!yaml_parser_initialize(&y))
        return ar_fail(p->e, "out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
    if (!yaml_parser_load(&y, doc)) {
        syntax_error(p, &y, text, len);
        goto out;
    }
    if (!yaml_parser_load(&y, &extra)) {
        syntax_error(p, &y, text, len);
        yaml_document_delete(doc);
        goto out;
    }
    yaml_node_t *root = yaml_document_get_root_node(&extra);
    if (root) {
        fail_syntax_at(p, root->start_mark, "expected one YAML document, found a second one");
        yaml_document_delete(doc);
    } else {
        rc = 0;
    }
    yaml_document_delete(&extra);
out:
    yaml_parser_delete(&y);
    return rc;
}

int ar_config_parse(ar_config *c, const char *text, size_t len, const char *name, ar_err *e)
{
    /* Work on a copy so a file with an error changes nothing. */
    ar_config tmp = *c;
    yaml_document_t doc;
    pctx p = {.c = &tmp, .doc = &doc, .name = name ? name : "<config>", .e = e};
    if (load_document(&p, &doc, text, len))
        return -1;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = root ? apply_section(&p, "", root) : 0;
    yaml_document_delete(&doc);
    if (rc == 0)
        *c = tmp;
    return rc;
}

int ar_config_apply_node(ar_config *c, yaml_document_t *doc, yaml_node_t *node, const char *key,
                         const char *name, ar_err *e)
{
    ar_config tmp = *c;
    pctx p = {.c = &tmp, .doc = doc, .name = name ? name : "<config>", .e = e};
    int rc, ki = key && *key ? find_leaf(key) : -1;
    if (!key || !*key)
        rc = apply_section(&p, "", node);
    else if (ki >= 0)
        rc = apply_leaf(&p, ki, node);
    else if (strlen(key) < KEY_MAX && is_section(key))
        rc = apply_section(&p, key, node);
    else
        rc = fail_at(&p, node->start_mark, "unknown key '%s'", key);
    if (rc == 0)
        *c = tmp;
    return rc;
}

/* Reads a whole stream (a config may come from a pipe, so no fstat). */
static char *read_all(FILE *f, size_t *len)
{
    size_t cap = 4096, got;
    char *buf = ar_xmalloc(cap);
    *len = 0;
    while ((got = fread(buf + *len, 1, cap - *len, f)) > 0) {
        *len += got;
        if (*len == cap) {
            char *bigger = ar_xmalloc(cap * 2);
            memcpy(bigger, buf, cap);
            free(buf);
            buf = bigger;
            cap *= 2;
        }
    }
    return buf;
}

int ar_config_load(ar_config *c, const char *path, ar_err *e)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        int err = errno;
        return ar_fail_kind(e, ar_errno_kind(err), "cannot open config '%s': %s", path, strerror(err));
    }
    size_t len;
    char *buf = read_all(f, &len);
    int err = ferror(f);
    fclose(f);
    int rc = err ? ar_fail_kind(e, AR_ERR_IO, "cannot read config '%s'", path) : ar_config_parse(c, buf, len, path, e);
    free(buf);
    return rc;
}

/* ------------------------------------------------------------------ */
/* --set                                                               */
/* ------------------------------------------------------------------ */

/* Explains why `key` names nothing: lists the valid names at the deepest
 * section that does exist. */
static int unknown_set_key(const char *assign, const char *key, ar_err *e)
{
    char prefix[KEY_MAX] = "", valid[1024];
    for (const char *dot = strchr(key, '.'); dot; dot = strchr(dot + 1, '.')) {
        char head[KEY_MAX];
        snprintf(head, sizeof head, "%.*s", (int)(dot - key), key);
        if (find_leaf(head) >= 0)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "--set '%s': unknown key '%s' ('%s' takes a value, not sub-keys)",
                                assign, key, head);
        if (!is_section(head))
            break;
        memcpy(prefix, head, sizeof prefix);
    }
    list_children(prefix, valid, sizeof valid);
    return ar_fail_kind(e, AR_ERR_BAD_VALUE, "--set '%s': unknown key '%s' (expected one of: %s)", assign, key, valid);
}

int ar_config_set(ar_config *c, const char *assign, ar_err *e)
{
    const char *eq = strchr(assign, '=');
    const char *k0 = assign, *k1 = eq ? eq : assign + strlen(assign);
    while (k0 < k1 && (*k0 == ' ' || *k0 == '\t'))
        k0++;
    while (k1 > k0 && (k1[-1] == ' ' || k1[-1] == '\t'))
        k1--;
    if (!eq || k0 == k1)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "--set '%s': expected KEY=VALUE", assign);
    char key[KEY_MAX];
    if ((size_t)(k1 - k0) >= sizeof key)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "--set '%s': key too long", assign);
    snprintf(key, sizeof key, "%.*s", (int)(k1 - k0), k0);

    int ki = find_leaf(key);
    if (ki < 0 && !is_section(key))
        return unknown_set_key(assign, key, e);

    ar_config tmp = *c;
    yaml_document_t doc;
    pctx p = {.c = &tmp, .doc = &doc, .name = NULL, .assign = assign, .e = e};
    const char *value = eq + 1;
    if (load_document(&p, &doc, value, strlen(value)))
        return -1;
    /* An empty value is YAML null ("data.val=" clears the path). */
    yaml_node_t null_node = {.type = YAML_SCALAR_NODE};
    null_node.data.scalar.value = (yaml_char_t *)"";
    null_node.data.scalar.style = YAML_PLAIN_SCALAR_STYLE;
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root)
        root = &null_node;
    int rc = ki >= 0 ? apply_leaf(&p, ki, root) : apply_section(&p, key, root);
    yaml_document_delete(&doc);
    if (rc == 0)
        *c = tmp;
    return rc;
}

/* ------------------------------------------------------------------ */
/* Validation                                                          */
/* ------------------------------------------------------------------ */

/* Each value on its own, against the same table as parsing (the struct may
 * have been filled by code rather than YAML). */
static int check_value(const ar_config *c, const key_def *k, ar_err *e)
{
    char exp[256], got[64];
    double v = 0;
    int integer = 1;
    switch (k->type) {
    case KT_INT: v = *(const int *)cfield(c, k); break;
    case KT_LONG: v = (double)*(const long *)cfield(c, k); break;
    case KT_U64: return 0;
    case KT_NUM: v = *(const double *)cfield(c, k); integer = 0; break;
    case KT_ENUM: {
        int x = *(const int *)cfield(c, k);
        if (x < 0 || x >= enum_count(k))
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' expects %s, got %d", k->key, expects(k, exp, sizeof exp),
                                x);
        return 0;
    }
    case KT_VOCAB:
        if (c->model.vocab_bytes && c->model.vocab != 256)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' is bytes but the vocabulary size is %d (must be 256)",
                                k->key, c->model.vocab);
        v = c->model.vocab;
        break;
    case KT_PATH:
        if (!*(const char *)cfield(c, k))
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' is empty (expected a text or token file)", k->key);
        return 0;
    case KT_PATH_NULL: return 0;
    case KT_INT_LIST: {
        const ar_int_list *l = cfield(c, k);
        if (l->n < 0 || l->n > AR_LIST_MAX)
            return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' has %d entries (expected 0 to %d)", k->key, l->n,
                                AR_LIST_MAX);
        for (int i = 0; i < l->n; i++)
            if (!in_range(k->range, 1, l->v[i]))
                return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' expects %s, got %d at entry %d", k->key,
                                    expects(k, exp, sizeof exp), l->v[i], i + 1);
        return 0;
    }
    }
    if (k->zero_unset && v == 0)
        return 0;
    if (isfinite(v) && in_range(k->range, integer, v))
        return 0;
    snprintf(got, sizeof got, "%.17g", v);
    return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'%s' expects %s, got %s", k->key, expects(k, exp, sizeof exp), got);
}

static int check_model(const ar_model_cfg *m, ar_err *e)
{
    if (m->d_model % m->n_head)
        return ar_fail(e, "'model.d_model' (%d) must be divisible by 'model.n_head' (%d)", m->d_model, m->n_head);
    int hd = m->d_model / m->n_head;
    if (hd % 2)
        return ar_fail(e,
                       "head dimension 'model.d_model'/'model.n_head' = %d/%d = %d must be even "
                       "(rotary embedding rotates pairs of dimensions)",
                       m->d_model, m->n_head, hd);
    const ar_residual_cfg *r = &m->residual;
    int L = ar_cfg_sublayers(m);
    int attn = r->kind == AR_RES_FULL || r->kind == AR_RES_BLOCK || r->kind == AR_RES_SWA;
    if (!attn && ar_cfg_depth_flags(m))
        return ar_fail(e, "'model.residual.score', 'key_norm', 'query' and 'heads' apply to kinds full, block "
                          "and swa, not '%s'", ar_res_kind_name(r->kind));
    if (r->query != AR_QUERY_INPUT && ar_cfg_query_stabilisers_changed(r))
        return ar_fail(e, "'model.residual.query_scale', 'query_norm', 'query_gate' and 'query_lr_scale' apply to "
                          "'query: input', not '%s'", ar_query_name(r->query));
    if (r->heads > 1 && m->d_model % r->heads)
        return ar_fail(e, "'model.d_model' (%d) must be divisible by 'model.residual.heads' (%d)", m->d_model,
                       r->heads);
    if (r->kind == AR_RES_SWA && r->window == 0)
        return ar_fail(e, "'model.residual.kind' is swa but 'model.residual.window' is not set");
    if (r->kind != AR_RES_SWA && r->window > 0)
        return ar_fail(e, "'model.residual.window' applies to kind swa, not '%s'", ar_res_kind_name(r->kind));
    if (r->kind != AR_RES_MHC && r->streams > 0)
        return ar_fail(e, "'model.residual.streams' applies to kind mhc, not '%s'", ar_res_kind_name(r->kind));
    if (attn && ar_cfg_heads(m) * (L + 2) > 4096)
        return ar_fail(e, "'model.residual.heads' (%d) times the sources of a mixer (up to %d) exceeds 4096",
                       ar_cfg_heads(m), L + 1);
    if (r->kind == AR_RES_MHC && r->streams > 5)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                            "'model.residual.streams' (%d) is at most 5 (mHC-lite mixes all m! permutations)",
                            r->streams);
    if (r->kind != AR_RES_BLOCK && r->block_sizes.n > 0)
        return ar_fail(e, "'model.residual.block_sizes' applies to kind block (and the ablation variants built "
                          "on it), not '%s'",
                       ar_res_kind_name(r->kind));
    if (r->kind != AR_RES_BLOCK)
        return 0;
    if (r->block_size > 0 && r->num_blocks > 0)
        return ar_fail(e, "'model.residual.block_size' and 'model.residual.num_blocks' are mutually exclusive");
    if (r->block_sizes.n > 0 && (r->block_size > 0 || r->num_blocks > 0))
        return ar_fail(e, "'model.residual.block_sizes' and '%s' are mutually exclusive",
                       r->block_size > 0 ? "model.residual.block_size" : "model.residual.num_blocks");
    if (r->block_size == 0 && r->num_blocks == 0 && r->block_sizes.n == 0)
        return ar_fail(e, "'model.residual.kind' is block but none of 'model.residual.block_size', "
                          "'model.residual.num_blocks' and 'model.residual.block_sizes' is set");
    if (r->block_sizes.n > 0) {
        long sum = 0;
        for (int i = 0; i < r->block_sizes.n; i++)
            sum += r->block_sizes.v[i];
        if (sum != L) {
            char list[1024];
            ar_int_list_text(r->block_sizes.v, r->block_sizes.n, ", ", list, sizeof list);
            return ar_fail(e, "'model.residual.block_sizes' [%s] sums to %ld sublayers, expected L = "
                              "2*'model.n_layer' = %d (every sublayer in exactly one block)",
                           list, sum, L);
        }
    }
    if (r->block_size > L)
        return ar_fail(e, "'model.residual.block_size' (%d) exceeds the number of sublayers L = 2*'model.n_layer' = %d",
                       r->block_size, L);
    if (r->num_blocks > L)
        return ar_fail(e, "'model.residual.num_blocks' (%d) exceeds the number of sublayers L = 2*'model.n_layer' = %d",
                       r->num_blocks, L);
    return 0;
}

static int check_train(const ar_train_cfg *t, ar_err *e)
{
    if (t->muon_ns_steps > 100)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "'train.muon_ns_steps' (%d) is at most 100 (5 is the usual count)",
                            t->muon_ns_steps);
    if (t->precision == AR_PREC_BF16 && t->device != AR_DEVICE_CUDA)
        return ar_fail(e, "'train.precision' bf16 needs 'train.device' cuda (the %s backend computes in fp32)",
                       ar_device_name(t->device));
    if (t->min_lr > t->lr)
        return ar_fail(e, "'train.min_lr' (%g) exceeds 'train.lr' (%g)", t->min_lr, t->lr);
    return 0;
}

int ar_config_validate(const ar_config *c, ar_err *e)
{
    for (int i = 0; i < N_KEYS; i++)
        if (check_value(c, &KEYS[i], e))
            return -1;
    if (check_model(&c->model, e) || check_train(&c->train, e))
        return -1;
    /* Muon orthogonalises whole matrices: a rank needs every element of
     * the matrices it updates */
    if (c->train.optimizer == AR_OPT_MUON && c->parallel.shard_optimizer)
        return ar_fail(e, "'train.optimizer' muon does not combine with 'parallel.shard_optimizer': ZeRO-1 splits "
                          "the optimizer state at arbitrary offsets, and Muon orthogonalises whole matrices; set "
                          "'parallel.shard_optimizer' false (or 'train.optimizer' adamw)");
    if (c->train.optimizer == AR_OPT_MUON && (c->parallel.pipeline > 1 || c->parallel.virtual_stages > 1))
        return ar_fail(e, "'train.optimizer' muon does not combine with 'parallel.pipeline' (%d): Muon runs on one "
                          "process or with data parallelism alone; set 'parallel.pipeline' 1 (or 'train.optimizer' "
                          "adamw)",
                       c->parallel.pipeline);
    return 0;
}

int ar_config_warning(const ar_config *c, char *buf, size_t n)
{
    const ar_train_cfg *t = &c->train;
    if (t->warmup <= t->steps)
        return 0;
    /* the schedule's warmup branch, lr (step+1)/warmup, at the last step */
    snprintf(buf, n,
             "'train.warmup' (%ld) exceeds 'train.steps' (%ld): the run ends inside its warmup; the learning "
             "rate rises linearly to %.3g ('train.lr' x %ld/%ld) at the last step and never decays",
             t->warmup, t->steps, t->lr * (double)t->steps / (double)t->warmup, t->steps, t->warmup);
    return 1;
}

/* ------------------------------------------------------------------ */
/* Emitting the resolved YAML                                          */
/* ------------------------------------------------------------------ */

/* The shortest of %.15g..%.17g that reads back as the same double, spelled
 * so every YAML 1.1 reader takes it as a float (PyYAML needs a '.'). */
static void format_double(double v, char *buf, size_t n)
{
    char num[40];
    for (int prec = 15; prec <= 17; prec++) {
        snprintf(num, sizeof num, "%.*g", prec, v);
        if (strtod(num, NULL) == v)
            break;
    }
    if (strpbrk(num, ".nN")) {
        snprintf(buf, n, "%s", num);
        return;
    }
    /* 1 -> 1.0, 1e-08 -> 1.0e-08 */
    size_t mant = strcspn(num, "e");
    snprintf(buf, n, "%.*s.0%s", (int)mant, num, num + mant);
}

/* Double-quoted YAML string: always safe, whatever the path holds.  Besides
 * the ASCII controls, the characters a YAML reader would not give back
 * unchanged are escaped: the C1 controls U+0080..U+009F (a reader rejects
 * them raw; U+0085 is also a line break), the line and paragraph
 * separators U+2028 and U+2029 (folded like line breaks inside quotes) and
 * U+FEFF (a byte order mark).  (Found by fuzzing: "\N" in a path did not
 * survive the round trip.) */
static void emit_quoted(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        switch (*q) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\t': fputs("\\t", f); break;
        case '\r': fputs("\\r", f); break;
        default:
            if (*q < 0x20 || *q == 0x7f) {
                fprintf(f, "\\x%02x", *q);
            } else if (q[0] == 0xC2 && q[1] >= 0x80 && q[1] <= 0x9F) {
                fprintf(f, "\\x%02x", q[1]);
                q++;
            } else if (q[0] == 0xE2 && q[1] == 0x80 && (q[2] == 0xA8 || q[2] == 0xA9)) {
                fputs(q[2] == 0xA8 ? "\\L" : "\\P", f);
                q += 2;
            } else if (q[0] == 0xEF && q[1] == 0xBB && q[2] == 0xBF) {
                fputs("\\uFEFF", f);
                q += 2;
            } else {
                fputc(*q, f);
            }
        }
    }
    fputc('"', f);
}

static void emit_value(FILE *f, const ar_config *c, const key_def *k)
{
    char buf[64];
    const void *v = cfield(c, k);
    switch (k->type) {
    case KT_INT: fprintf(f, "%d", *(const int *)v); break;
    case KT_LONG: fprintf(f, "%ld", *(const long *)v); break;
    case KT_U64: fprintf(f, "%" PRIu64, *(const uint64_t *)v); break;
    case KT_NUM:
        format_double(*(const double *)v, buf, sizeof buf);
        fputs(buf, f);
        break;
    case KT_ENUM: fputs(k->enum_name(*(const int *)v), f); break;
    case KT_VOCAB:
        if (c->model.vocab_bytes)
            fputs("bytes", f);
        else
            fprintf(f, "%d", c->model.vocab);
        break;
    case KT_PATH_NULL:
        if (!*(const char *)v) {
            fputs("null", f);
            break;
        }
        /* fall through */
    case KT_PATH: emit_quoted(f, v); break;
    case KT_INT_LIST: {
        const ar_int_list *l = v;
        fputc('[', f);
        for (int i = 0; i < l->n; i++)
            fprintf(f, "%s%d", i ? ", " : "", l->v[i]);
        fputc(']', f);
        break;
    }
    }
}

/* One key's value as the resolved YAML writes it ("-" when not written). */
static void value_text(const ar_config *c, const key_def *k, char *buf, size_t n)
{
    if (k->emit_if && !k->emit_if(c)) {
        snprintf(buf, n, "-");
        return;
    }
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) {
        snprintf(buf, n, "?");
        return;
    }
    emit_value(f, c, k);
    fclose(f);
    snprintf(buf, n, "%s", out);
    free(out);
}

int ar_config_diff(const ar_config *a, const ar_config *b, char *buf, size_t n)
{
    int count = 0;
    size_t used = 0;
    if (n)
        buf[0] = '\0';
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &KEYS[i];
        /* how the run is spread over threads, devices and ranks, not what it trains */
        if (strcmp(k->key, "train.threads") == 0 || strcmp(k->key, "train.device") == 0 ||
            strcmp(k->key, "train.recompute") == 0 || strncmp(k->key, "parallel.", 9) == 0)
            continue;
        char va[4096], vb[4096]; /* a whole list: equal text, equal values */
        value_text(a, k, va, sizeof va);
        value_text(b, k, vb, sizeof vb);
        if (strcmp(va, vb) == 0)
            continue;
        if (++count <= 3 && used < n) {
            int w = snprintf(buf + used, n - used, "%s%s %s -> %s", used ? ", " : "", k->key, va, vb);
            used = w < 0 ? n : used + (size_t)w;
        } else if (count == 4 && used < n) {
            int w = snprintf(buf + used, n - used, ", ...");
            used = w < 0 ? n : used + (size_t)w;
        }
    }
    return count;
}

char *ar_config_to_yaml(const ar_config *c)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    if (!f) {
        fputs("attnres: error: out of memory writing the config\n", stderr);
        abort();
    }
    /* Open sections as the dotted keys walk into them; the table keeps each
     * section's keys together, so a section is never reopened. */
    const char *open[8];
    size_t open_len[8];
    int depth = 0;
    for (int i = 0; i < N_KEYS; i++) {
        const key_def *k = &KEYS[i];
        if (k->emit_if && !k->emit_if(c))
            continue;
        const char *comp = k->key;
        int level = 0;
        for (size_t n = component_len(comp); comp[n] == '.' && level < 8; n = component_len(comp)) {
            if (level >= depth || open_len[level] != n || strncmp(open[level], comp, n) != 0) {
                fprintf(f, "%*s%.*s:\n", 2 * level, "", (int)n, comp);
                open[level] = comp;
                open_len[level] = n;
                depth = level + 1;
            }
            level++;
            comp += n + 1;
        }
        depth = level;
        fprintf(f, "%*s%s: ", 2 * level, "", comp);
        emit_value(f, c, k);
        fputc('\n', f);
    }
    fclose(f);
    return out;
}
