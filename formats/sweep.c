/* Sweep files.  The grid's own structure (base, sizes, variants) is read
 * here; every config value goes through formats/config.c's key table with
 * ar_config_apply_node, so values are checked and placed exactly as in a
 * config file. */
#include "sweep.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

#include "config.h"

typedef struct {
    const char *name;
    yaml_document_t *doc;
    ar_err *e;
} sctx;

__attribute__((format(printf, 3, 4))) static int fail_at(sctx *c, const yaml_node_t *n, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return ar_fail(c->e, "%s:%zu:%zu: %s", c->name, n->start_mark.line + 1, n->start_mark.column + 1, msg);
}

static int is_null(const yaml_node_t *n)
{
    if (n->type != YAML_SCALAR_NODE || n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return 0;
    const char *s = (const char *)n->data.scalar.value;
    return n->data.scalar.length == 0 || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") ||
           !strcmp(s, "NULL");
}

/* The text of a scalar key, or NULL for anything else (or text holding a
 * NUL byte). */
static const char *key_text(const yaml_node_t *k)
{
    if (k->type != YAML_SCALAR_NODE || strlen((const char *)k->data.scalar.value) != k->data.scalar.length)
        return NULL;
    return (const char *)k->data.scalar.value;
}

static const char *describe(const yaml_node_t *n)
{
    return n->type == YAML_MAPPING_NODE ? "a mapping" : n->type == YAML_SEQUENCE_NODE ? "a sequence" : "a scalar";
}

/* Run names become directory names: letters, digits, '.', '_', '-', not
 * starting with '.', at most AR_SWEEP_NAME_MAX - 1 bytes. */
static int check_name(sctx *c, const yaml_node_t *n, const char *what, char *out)
{
    const char *s = n->type == YAML_SCALAR_NODE && !is_null(n) ? key_text(n) : NULL;
    size_t len = s ? strlen(s) : 0;
    if (!s || len == 0 || len >= AR_SWEEP_NAME_MAX || s[0] == '.' ||
        strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len)
        return fail_at(c, n, "%s name expects letters, digits, '.', '_' or '-' (at most %d, not starting with '.'), got %s%s%s",
                       what, AR_SWEEP_NAME_MAX - 1, s ? "'" : "", s ? s : describe(n), s ? "'" : "");
    memcpy(out, s, len + 1);
    return 0;
}

/* A duplicate key earlier in the same mapping. */
static int check_dup(sctx *c, const yaml_node_t *map, const yaml_node_pair_t *pair)
{
    const yaml_node_t *k = yaml_document_get_node(c->doc, pair->key);
    for (const yaml_node_pair_t *q = map->data.mapping.pairs.start; q < pair; q++) {
        const yaml_node_t *p = yaml_document_get_node(c->doc, q->key);
        if (p->type == YAML_SCALAR_NODE && k->type == YAML_SCALAR_NODE &&
            p->data.scalar.length == k->data.scalar.length &&
            memcmp(p->data.scalar.value, k->data.scalar.value, k->data.scalar.length) == 0)
            return fail_at(c, k, "duplicate key '%s' (first given at %zu:%zu)", (const char *)k->data.scalar.value,
                           p->start_mark.line + 1, p->start_mark.column + 1);
    }
    return 0;
}

/* ------------------------------------------------------------------ */

typedef struct {
    char name[AR_SWEEP_NAME_MAX];
    const yaml_node_t *entry;
    yaml_node_t *kind, *block_size, *num_blocks, *block_sizes;
} variant_spec;

typedef struct {
    char name[AR_SWEEP_NAME_MAX];
    yaml_node_t *map;
} size_spec;

/* The short size keys and the config keys they set. */
static const struct {
    const char *key, *dotted;
} SIZE_KEYS[] = {
    {"d_model", "model.d_model"},   {"n_layer", "model.n_layer"},       {"n_head", "model.n_head"},
    {"d_ff", "model.d_ff"},         {"seq_len", "model.seq_len"},       {"lr", "train.lr"},
    {"min_lr", "train.min_lr"},     {"warmup", "train.warmup"},         {"batch_size", "train.batch_size"},
    {"grad_accum", "train.grad_accum"}, {"steps", "train.steps"},
};
enum { N_SIZE_KEYS = sizeof SIZE_KEYS / sizeof SIZE_KEYS[0] };

static int parse_variant(sctx *c, yaml_node_t *n, variant_spec *v)
{
    memset(v, 0, sizeof *v);
    v->entry = n;
    if (n->type == YAML_SCALAR_NODE) {
        v->kind = n;
        return check_name(c, n, "a variant", v->name);
    }
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(c, n,
                       "a variant is a residual kind or a mapping {name, kind, block_size | num_blocks | block_sizes}, "
                       "got %s",
                       describe(n));
    yaml_node_t *name = NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key), *val = yaml_document_get_node(c->doc, p->value);
        const char *kt = key_text(k);
        if (check_dup(c, n, p))
            return -1;
        if (kt && !strcmp(kt, "name"))
            name = val;
        else if (kt && !strcmp(kt, "kind"))
            v->kind = val;
        else if (kt && !strcmp(kt, "block_size"))
            v->block_size = val;
        else if (kt && !strcmp(kt, "num_blocks"))
            v->num_blocks = val;
        else if (kt && !strcmp(kt, "block_sizes"))
            v->block_sizes = val;
        else
            return fail_at(c, k,
                           "unknown variant key '%s' (expected one of: name, kind, block_size, num_blocks, block_sizes)",
                           kt ? kt : "?");
    }
    if (!v->kind)
        return fail_at(c, n, "a variant mapping needs 'kind'");
    if (!!v->block_size + !!v->num_blocks + !!v->block_sizes > 1)
        return fail_at(c, v->block_sizes ? v->block_sizes : v->num_blocks,
                       "'block_size', 'num_blocks' and 'block_sizes' are mutually exclusive");
    return check_name(c, name ? name : v->kind, "a variant", v->name);
}

static int parse_size(sctx *c, yaml_node_t *n, size_spec *z)
{
    memset(z, 0, sizeof *z);
    z->map = n;
    if (n->type != YAML_MAPPING_NODE)
        return fail_at(c, n, "a size is a mapping {name, d_model, n_layer, ...}, got %s", describe(n));
    yaml_node_t *name = NULL, *steps = NULL, *tokens = NULL, *flops = NULL;
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key);
        const char *kt = key_text(k);
        if (check_dup(c, n, p))
            return -1;
        if (kt && !strcmp(kt, "name"))
            name = yaml_document_get_node(c->doc, p->value);
        else if (kt && (!strcmp(kt, "steps") || !strcmp(kt, "train.steps")))
            steps = k;
        else if (kt && !strcmp(kt, "tokens"))
            tokens = k;
        else if (kt && !strcmp(kt, "flops"))
            flops = k;
    }
    if (!name)
        return fail_at(c, n, "a size needs a 'name'");
    if (!!steps + !!tokens + !!flops > 1)
        return fail_at(c, flops ? flops : tokens, "give a size one of 'steps', 'tokens' or 'flops', not several");
    return check_name(c, name, "a size", z->name);
}

/* Token budget: a positive integer (plain digits, or a number such as
 * 4.194304e6 whose value is a whole number). */
static int parse_tokens(sctx *c, const yaml_node_t *n, double *out)
{
    const char *s = n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? key_text(n) : NULL;
    if (s && *s && strspn(s, "0123456789+.eE") == strlen(s)) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (!*end && isfinite(v) && v >= 1 && v == floor(v) && v < 9007199254740992.0) {
            *out = v;
            return 0;
        }
    }
    return fail_at(c, n, "'tokens' expects a positive whole number of tokens, got %s%s%s", s ? "'" : "",
                   s ? s : describe(n), s ? "'" : "");
}

/* Compute budget: a positive finite number of FLOPs (1e13, 2.5e14, ...). */
static int parse_flops(sctx *c, const yaml_node_t *n, double *out)
{
    const char *s = n->type == YAML_SCALAR_NODE && n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ? key_text(n) : NULL;
    if (s && *s && strspn(s, "0123456789+.eE") == strlen(s)) {
        char *end;
        errno = 0;
        double v = strtod(s, &end);
        if (!*end && isfinite(v) && v >= 1) {
            *out = v;
            return 0;
        }
    }
    return fail_at(c, n, "'flops' expects a positive number of FLOPs (such as 2.0e13), got %s%s%s", s ? "'" : "",
                   s ? s : describe(n), s ? "'" : "");
}

/* Applies a size's keys (all but name, tokens and flops) to cfg. */
static int apply_size(sctx *c, const size_spec *z, const ar_config *base, ar_config *cfg, yaml_node_t **tokens,
                      yaml_node_t **flops)
{
    int lr = 0, min_lr = 0;
    *tokens = *flops = NULL;
    for (yaml_node_pair_t *p = z->map->data.mapping.pairs.start; p < z->map->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key), *val = yaml_document_get_node(c->doc, p->value);
        const char *kt = key_text(k), *dotted = NULL;
        if (kt && !strcmp(kt, "name"))
            continue;
        if (kt && !strcmp(kt, "tokens")) {
            *tokens = val;
            continue;
        }
        if (kt && !strcmp(kt, "flops")) {
            *flops = val;
            continue;
        }
        for (int i = 0; kt && i < N_SIZE_KEYS && !dotted; i++)
            if (!strcmp(kt, SIZE_KEYS[i].key))
                dotted = SIZE_KEYS[i].dotted;
        if (!dotted && kt && strchr(kt, '.'))
            dotted = kt;
        if (!dotted) {
            char list[512];
            size_t used = (size_t)snprintf(list, sizeof list, "name");
            for (int i = 0; i < N_SIZE_KEYS && used < sizeof list; i++)
                used += (size_t)snprintf(list + used, sizeof list - used, ", %s", SIZE_KEYS[i].key);
            return fail_at(c, k, "unknown size key '%s' (expected one of: %s, tokens, flops, or a dotted config key such as train.warmup)",
                           kt ? kt : "?", list);
        }
        if (ar_config_apply_node(cfg, c->doc, val, dotted, c->name, c->e) != 0)
            return -1;
        lr |= !strcmp(dotted, "train.lr");
        min_lr |= !strcmp(dotted, "train.min_lr");
    }
    /* A size with its own lr keeps the base's min_lr / lr ratio. */
    if (lr && !min_lr)
        cfg->train.min_lr = cfg->train.lr * (base->train.min_lr / base->train.lr);
    return 0;
}

static int apply_variant(sctx *c, const variant_spec *v, ar_config *cfg)
{
    if (ar_config_apply_node(cfg, c->doc, v->kind, "model.residual.kind", c->name, c->e) != 0)
        return -1;
    /* the base's blocks of different sizes mean nothing to another kind */
    if (cfg->model.residual.kind != AR_RES_BLOCK)
        cfg->model.residual.block_sizes.n = 0;
    if (v->block_size && ar_config_apply_node(cfg, c->doc, v->block_size, "model.residual.block_size", c->name, c->e))
        return -1;
    if (v->num_blocks && ar_config_apply_node(cfg, c->doc, v->num_blocks, "model.residual.num_blocks", c->name, c->e))
        return -1;
    if (v->block_sizes &&
        ar_config_apply_node(cfg, c->doc, v->block_sizes, "model.residual.block_sizes", c->name, c->e))
        return -1;
    return 0;
}

static int load_base(sctx *c, yaml_node_t *n, const char *base_dir, ar_config *base)
{
    if (is_null(n))
        return 0;
    if (n->type == YAML_MAPPING_NODE)
        return ar_config_apply_node(base, c->doc, n, NULL, c->name, c->e);
    if (n->type != YAML_SCALAR_NODE || !key_text(n))
        return fail_at(c, n, "'base' expects a config mapping or the path of a config file, got %s", describe(n));
    const char *p = key_text(n);
    char path[AR_PATH_MAX];
    if (p[0] != '/' && base_dir && *base_dir)
        snprintf(path, sizeof path, "%s/%s", base_dir, p);
    else
        snprintf(path, sizeof path, "%s", p);
    if (ar_config_load(base, path, c->e) != 0)
        return ar_wrap(c->e, "%s:%zu:%zu: base", c->name, n->start_mark.line + 1, n->start_mark.column + 1);
    return 0;
}

static int load_doc(sctx *c, yaml_document_t *doc, const char *text, size_t len)
{
    yaml_parser_t y;
    if (!yaml_parser_initialize(&y))
        return ar_fail(c->e, "out of memory initialising the YAML parser");
    yaml_parser_set_input_string(&y, (const unsigned char *)text, len);
    int rc = 0;
    if (!yaml_parser_load(&y, doc)) {
        rc = ar_fail(c->e, "%s:%zu:%zu: invalid YAML: %s", c->name, y.problem_mark.line + 1, y.problem_mark.column + 1,
                     y.problem ? y.problem : "unknown error");
    } else {
        yaml_document_t extra;
        if (!yaml_parser_load(&y, &extra)) {
            rc = ar_fail(c->e, "%s:%zu:%zu: invalid YAML: %s", c->name, y.problem_mark.line + 1,
                         y.problem_mark.column + 1, y.problem ? y.problem : "unknown error");
        } else {
            yaml_node_t *r = yaml_document_get_root_node(&extra);
            if (r)
                rc = ar_fail(c->e, "%s:%zu:%zu: expected one YAML document, found a second one", c->name,
                             r->start_mark.line + 1, r->start_mark.column + 1);
            yaml_document_delete(&extra);
        }
        if (rc)
            yaml_document_delete(doc);
    }
    yaml_parser_delete(&y);
    return rc;
}

void ar_sweep_free(ar_sweep *s)
{
    free(s->runs);
    memset(s, 0, sizeof *s);
}

int ar_sweep_keep_sizes(ar_sweep *s, const char *list, ar_err *e)
{
    char *want = calloc((size_t)s->nsizes + 1, 1), names[1024] = "";
    if (!want)
        abort();
    for (int z = 0; z < s->nsizes; z++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s'%s'", z ? ", " : "",
                 s->runs[z * s->nvariants].size);
    int rc = -1;
    const char *p = list;
    do {
        const char *q = strchr(p, ',');
        size_t n = q ? (size_t)(q - p) : strlen(p);
        int z = 0;
        while (z < s->nsizes && !(strlen(s->runs[z * s->nvariants].size) == n &&
                                  strncmp(s->runs[z * s->nvariants].size, p, n) == 0))
            z++;
        if (z == s->nsizes) {
            ar_fail(e, "'--sizes': no size '%.*s' in the grid (its sizes: %s)", (int)n, p, names);
            goto out;
        }
        if (want[z]) {
            ar_fail(e, "'--sizes': size '%.*s' named twice", (int)n, p);
            goto out;
        }
        want[z] = 1;
        p = q ? q + 1 : NULL;
    } while (p);
    int keep = 0;
    for (int z = 0; z < s->nsizes; z++)
        if (want[z])
            memmove(&s->runs[keep++ * s->nvariants], &s->runs[z * s->nvariants],
                    (size_t)s->nvariants * sizeof *s->runs);
    s->nsizes = keep;
    s->nruns = keep * s->nvariants;
    rc = 0;
out:
    free(want);
    return rc;
}

/* The top level: a mapping of base (optional), sizes and variants, each
 * key once; their nodes into *nbase (NULL: none), *nsizes and *nvars.
 * 0, or -1 with the error set. */
static int top_keys(sctx *c, yaml_node_t *root, yaml_node_t **nbase, yaml_node_t **nsizes, yaml_node_t **nvars)
{
    if (root->type != YAML_MAPPING_NODE) {
        fail_at(c, root, "expected a mapping with base, sizes and variants at the top level, got %s", describe(root));
        return -1;
    }
    *nbase = *nsizes = *nvars = NULL;
    for (yaml_node_pair_t *p = root->data.mapping.pairs.start; p < root->data.mapping.pairs.top; p++) {
        yaml_node_t *k = yaml_document_get_node(c->doc, p->key), *v = yaml_document_get_node(c->doc, p->value);
        const char *kt = key_text(k);
        if (check_dup(c, root, p))
            return -1;
        if (kt && !strcmp(kt, "base"))
            *nbase = v;
        else if (kt && !strcmp(kt, "sizes"))
            *nsizes = v;
        else if (kt && !strcmp(kt, "variants"))
            *nvars = v;
        else {
            fail_at(c, k, "unknown key '%s' (expected one of: base, sizes, variants)", kt ? kt : "?");
            return -1;
        }
    }
    if (!*nsizes || !*nvars) {
        fail_at(c, root, "a sweep needs '%s'", !*nsizes ? "sizes" : "variants");
        return -1;
    }
    return 0;
}

/* The lists 'variants' and 'sizes', each non-empty and without a name
 * twice, into vs[0..*nv) and zs[0..*nz) (allocated here, for the caller
 * to free also after a failure).  0, or -1 with the error set. */
static int parse_lists(sctx *c, yaml_node_t *nvars, yaml_node_t *nsizes, variant_spec **vs, int *nv,
                       size_spec **zs, int *nz)
{
    yaml_node_t *lists[2] = {nvars, nsizes};
    for (int l = 0; l < 2; l++)
        if (lists[l]->type != YAML_SEQUENCE_NODE ||
            lists[l]->data.sequence.items.top == lists[l]->data.sequence.items.start) {
            fail_at(c, lists[l], "'%s' expects a non-empty list, got %s", l ? "sizes" : "variants",
                    lists[l]->type == YAML_SEQUENCE_NODE ? "an empty one" : describe(lists[l]));
            return -1;
        }
    *nv = (int)(nvars->data.sequence.items.top - nvars->data.sequence.items.start);
    *nz = (int)(nsizes->data.sequence.items.top - nsizes->data.sequence.items.start);
    *vs = ar_xcalloc((size_t)*nv, sizeof **vs);
    *zs = ar_xcalloc((size_t)*nz, sizeof **zs);
    for (int i = 0; i < *nv; i++) {
        yaml_node_t *n = yaml_document_get_node(c->doc, nvars->data.sequence.items.start[i]);
        if (parse_variant(c, n, &(*vs)[i]))
            return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp((*vs)[i].name, (*vs)[j].name)) {
                fail_at(c, n, "duplicate variant '%s' (give each variant its own 'name')", (*vs)[i].name);
                return -1;
            }
    }
    for (int i = 0; i < *nz; i++) {
        yaml_node_t *n = yaml_document_get_node(c->doc, nsizes->data.sequence.items.start[i]);
        if (parse_size(c, n, &(*zs)[i]))
            return -1;
        for (int j = 0; j < i; j++)
            if (!strcmp((*zs)[i].name, (*zs)[j].name)) {
                fail_at(c, n, "duplicate size '%s'", (*zs)[i].name);
                return -1;
            }
    }
    return 0;
}

/* A size's 'tokens' as r's steps: a whole number of steps of per_step
 * tokens, or an error that names the nearest that are.  0, or -1 with
 * the error set. */
static int steps_of_tokens(sctx *c, yaml_node_t *tokens, const size_spec *z, ar_sweep_run *r, long per_step)
{
    const ar_train_cfg *t = &r->cfg.train;
    double want = 0;
    if (parse_tokens(c, tokens, &want))
        return -1;
    long tk = (long)want;
    if (tk % per_step) {
        long lo = tk / per_step * per_step;
        char near[64];
        if (lo > 0)
            snprintf(near, sizeof near, "%ld or %ld would be", lo, lo + per_step);
        else
            snprintf(near, sizeof near, "%ld would be", per_step);
        fail_at(c, tokens,
                "size '%s': tokens %ld is not a whole number of steps of %ld tokens "
                "(batch_size %d x grad_accum %d x seq_len %d); %s",
                z->name, tk, per_step, t->batch_size, t->grad_accum, r->cfg.model.seq_len, near);
        return -1;
    }
    r->cfg.train.steps = tk / per_step;
    return 0;
}

/* The run of size z and variant v over base, its config validated; 0, or
 * -1 with the error set. */
static int make_run(sctx *c, const size_spec *z, const variant_spec *v, const ar_config *base, ar_sweep_run *r)
{
    yaml_node_t *tokens, *flops;
    r->cfg = *base;
    if (apply_size(c, z, base, &r->cfg, &tokens, &flops) || apply_variant(c, v, &r->cfg))
        return -1;
    if (flops) {
        if (parse_flops(c, flops, &r->flops_budget))
            return -1;
        r->cfg.train.steps = 1; /* until ar_sweep_resolve_budgets */
    }
    const ar_train_cfg *t = &r->cfg.train;
    long per_step = (long)t->batch_size * t->grad_accum * r->cfg.model.seq_len;
    if (tokens && steps_of_tokens(c, tokens, z, r, per_step))
        return -1;
    snprintf(r->size, sizeof r->size, "%s", z->name);
    snprintf(r->variant, sizeof r->variant, "%s", v->name);
    snprintf(r->name, sizeof r->name, "%s-%s", z->name, v->name);
    r->tokens = r->cfg.train.steps * per_step;
    ar_err ve;
    if (ar_config_validate(&r->cfg, &ve) != 0) {
        ar_fail(c->e, "%s: size '%s', variant '%s': %s", c->name, r->size, r->variant, ve.msg);
        return -1;
    }
    return 0;
}

int ar_sweep_parse(ar_sweep *s, const char *text, size_t len, const char *name, const char *base_dir,
                   const char *const *sets, int nsets, ar_err *e)
{
    memset(s, 0, sizeof *s);
    yaml_document_t doc;
    sctx c = {.name = name ? name : "<sweep>", .doc = &doc, .e = e};
    if (load_doc(&c, &doc, text, len))
        return -1;
    int rc = -1, nv = 0, nz = 0;
    variant_spec *vs = NULL;
    size_spec *zs = NULL;
    ar_config base;
    ar_config_defaults(&base);
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (!root) {
        ar_fail(e, "%s: empty sweep file (expected base, sizes and variants)", c.name);
        goto out;
    }
    yaml_node_t *nbase, *nsizes, *nvars;
    if (top_keys(&c, root, &nbase, &nsizes, &nvars))
        goto out;
    if (nbase && load_base(&c, nbase, base_dir, &base))
        goto out;
    for (int i = 0; i < nsets; i++)
        if (ar_config_set(&base, sets[i], e) != 0)
            goto out;
    if (parse_lists(&c, nvars, nsizes, &vs, &nv, &zs, &nz))
        goto out;
    s->nsizes = nz;
    s->nvariants = nv;
    s->nruns = nz * nv;
    s->runs = ar_xcalloc((size_t)s->nruns, sizeof *s->runs);
    for (int i = 0; i < nz; i++)
        for (int j = 0; j < nv; j++)
            if (make_run(&c, &zs[i], &vs[j], &base, &s->runs[i * nv + j]))
                goto out;
    rc = 0;
out:
    if (rc)
        ar_sweep_free(s);
    free(vs);
    free(zs);
    yaml_document_delete(&doc);
    return rc;
}

int ar_sweep_load(ar_sweep *s, const char *path, const char *const *sets, int nsets, ar_err *e)
{
    memset(s, 0, sizeof *s);
    FILE *f = fopen(path, "rb");
    if (!f)
        return ar_fail(e, "cannot open sweep file '%s': %s", path, strerror(errno));
    size_t cap = 1 << 14, len = 0, got;
    char *buf = ar_xmalloc(cap);
    while ((got = fread(buf + len, 1, cap - len, f)) > 0) {
        len += got;
        if (len == cap) {
            char *b = ar_xmalloc(2 * cap);
            memcpy(b, buf, len);
            free(buf);
            buf = b;
            cap *= 2;
        }
    }
    int err = ferror(f);
    fclose(f);
    char dir[AR_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        dir[0] = '\0';
    int rc = err ? ar_fail(e, "cannot read sweep file '%s'", path)
                 : ar_sweep_parse(s, buf, len, path, slash ? (dir[0] ? dir : "/") : NULL, sets, nsets, e);
    free(buf);
    return rc;
}
