/* Data splits, training-batch sampling and the evaluation windows.
 *
 * The data stay on disk, mapped (formats/token_set.h): opening checks what
 * costs no pass over the tokens (formats, kinds, lengths), and every window
 * read checks its ids, so a bad id stops a run at the step that reads it,
 * naming its shard and offset. */
#include "data.h"

#include <errno.h>
#include <glob.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A byte vocabulary means text; a token file's ids mean nothing as bytes.
 * The other way round, text is fine under an integer vocabulary as long as
 * every byte value is a valid id. */
static int check_kind(const ar_token_set *ts, const char *spec, const ar_model_cfg *mc, ar_err *e)
{
    int text = ar_token_set_format(ts) == AR_TOKENS_TEXT;
    if (mc->vocab_bytes && !text)
        return ar_fail(e,
                       "'%s' is a token file but model.vocab is bytes; set model.vocab to the "
                       "tokenizer's vocabulary size",
                       spec);
    if (!mc->vocab_bytes && text && mc->vocab < 256)
        return ar_fail(e,
                       "'%s' is a text file (byte ids 0..255) but model.vocab is %d; set model.vocab "
                       "to bytes",
                       spec, mc->vocab);
    return 0;
}

/* Every shard holds one window at least: a shorter one is almost surely a
 * mistake (a stray file in the directory, a cut-off download). */
static int check_shards(const ar_token_set *ts, const ar_model_cfg *mc, ar_err *e)
{
    size_t need = (size_t)mc->seq_len + 1;
    for (int i = 0; i < ar_token_set_shards(ts); i++) {
        size_t n = ar_token_set_shard_first(ts, i + 1) - ar_token_set_shard_first(ts, i);
        if (n < need)
            return ar_fail_kind(e, AR_ERR_FORMAT,
                                "'%s': the shard holds %zu tokens but needs at least %zu (model.seq_len + 1)",
                                ar_token_set_shard_path(ts, i), n, need);
    }
    return 0;
}

static ar_token_set *open_checked(const char *spec, const ar_model_cfg *mc, ar_err *e)
{
    ar_token_set *ts = ar_token_set_open(spec, e);
    if (ts && (check_kind(ts, spec, mc, e) < 0 || check_shards(ts, mc, e) < 0)) {
        ar_token_set_free(ts);
        return NULL;
    }
    return ts;
}

/* Splits train's tail off as validation: the last floor(n * fraction) tokens. */
static int split_tail(ar_dataset *ds, const ar_data_cfg *dc, ar_err *e)
{
    if (!(dc->val_fraction >= 0 && dc->val_fraction < 1))
        return ar_fail_kind(e, AR_ERR_BAD_VALUE,
                            "data.val_fraction is %g but must be in [0, 1) when data.val is null", dc->val_fraction);
    size_t n = ar_token_set_count(ds->train_set);
    size_t nval = (size_t)floor((double)n * dc->val_fraction);
    ds->train = (ar_token_span){ds->train_set, 0, n - nval};
    ds->val = ar_xmalloc(sizeof *ds->val);
    ds->val[0] = (ar_token_span){ds->train_set, n - nval, nval};
    ds->nval = 1;
    return 0;
}

ar_token_span *ar_token_spans_of_shards(const ar_token_set *ts)
{
    int n = ar_token_set_shards(ts);
    ar_token_span *sp = ar_xmalloc((size_t)n * sizeof *sp);
    for (int i = 0; i < n; i++) {
        size_t lo = ar_token_set_shard_first(ts, i);
        sp[i] = (ar_token_span){ts, lo, ar_token_set_shard_first(ts, i + 1) - lo};
    }
    return sp;
}

/* data.val: each shard its own part, evaluated in turn. */
static void split_shards(ar_dataset *ds)
{
    ds->train = (ar_token_span){ds->train_set, 0, ar_token_set_count(ds->train_set)};
    ds->nval = ar_token_set_shards(ds->val_set);
    ds->val = ar_token_spans_of_shards(ds->val_set);
}

/* One window of T+1 tokens is the least a split can be used for. */
static int check_lengths(const ar_dataset *ds, const ar_data_cfg *dc, const ar_model_cfg *mc, ar_err *e)
{
    size_t need = (size_t)mc->seq_len + 1;
    int tail = dc->val[0] == '\0';
    if (ds->train.n < need)
        return ar_fail(e,
                       "'%s': the training split holds %zu tokens but needs at least %zu "
                       "(model.seq_len + 1); lower %smodel.seq_len",
                       dc->train, ds->train.n, need, tail ? "data.val_fraction or " : "");
    if (tail && ds->val[0].n < need)
        return ar_fail(e,
                       "'%s': the validation split (data.val_fraction %g of it) holds %zu tokens but "
                       "needs at least %zu (model.seq_len + 1); raise data.val_fraction, lower "
                       "model.seq_len or set data.val",
                       dc->train, dc->val_fraction, ds->val[0].n, need);
    return 0;
}

int ar_dataset_open(ar_dataset *ds, const ar_data_cfg *dc, const ar_model_cfg *mc, ar_err *e)
{
    memset(ds, 0, sizeof *ds);
    if (mc->seq_len < 1)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "model.seq_len is %d but must be at least 1", mc->seq_len);
    ds->vocab = mc->vocab_bytes ? 256 : mc->vocab;
    if (!(ds->train_set = open_checked(dc->train, mc, e)))
        return -1;
    int rc = 0;
    if (dc->val[0] == '\0') {
        rc = split_tail(ds, dc, e);
    } else if (!(ds->val_set = open_checked(dc->val, mc, e))) {
        rc = ar_wrap(e, "data.val");
    } else {
        split_shards(ds);
    }
    if (rc == 0)
        rc = check_lengths(ds, dc, mc, e);
    if (rc < 0) {
        ar_dataset_close(ds);
        return -1;
    }
    ds->eval = (ar_eval_data){ds->val, ds->nval, ds->vocab};
    return 0;
}

/* A glob pattern names no file when it matches none. */
static int glob_matches(const char *spec)
{
    if (!strpbrk(spec, "*?["))
        return 0;
    glob_t g;
    int found = glob(spec, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}

int ar_data_check_train(const ar_data_cfg *dc, ar_err *e)
{
    if (access(dc->train, R_OK) == 0 || glob_matches(dc->train))
        return 0;
    int err = errno;
    ar_err_kind kind = ar_errno_kind(err);
    if (kind != AR_ERR_NOT_FOUND)
        return ar_fail_kind(e, kind, "training data '%s' cannot be read: %s", dc->train, ar_strerror(err));
    if (strcmp(dc->train, AR_DEFAULT_CORPUS) == 0)
        return ar_fail_kind(e, kind,
                            "training data '%s' not found: run 'tools/get-data.sh' to install the King James Bible "
                            "corpus there, or choose a file with --set data.train=FILE",
                            AR_DEFAULT_CORPUS);
    return ar_fail_kind(e, kind, "training data '%s' not found", dc->train);
}

void ar_dataset_close(ar_dataset *ds)
{
    ar_token_set_free(ds->train_set);
    ar_token_set_free(ds->val_set);
    free(ds->val);
    memset(ds, 0, sizeof *ds);
}

/* Uniform integer in [0, m).  gsl_rng_uniform_int only covers the
 * generator's range (2^32 for mt19937); longer streams combine 16-bit draws
 * and reject the biased top so every offset stays equally likely. */
static size_t uniform_index(gsl_rng *r, size_t m)
{
    unsigned long span = gsl_rng_max(r) - gsl_rng_min(r);
    if (m - 1 <= span)
        return (size_t)gsl_rng_uniform_int(r, (unsigned long)m);
    uint64_t limit = UINT64_MAX - UINT64_MAX % m, v;
    do {
        v = 0;
        for (int k = 0; k < 4; k++)
            v = v << 16 | gsl_rng_uniform_int(r, 65536);
    } while (v >= limit);
    return (size_t)(v % m);
}

/* Reads window x[o .. o+T] of s and splits it into inputs and targets. */
static int read_window(const ar_token_span *s, size_t o, int32_t vocab, int T, int32_t *inputs, int32_t *targets,
                       ar_err *e)
{
    if (ar_token_set_read(s->set, s->lo + o, (size_t)T, vocab, inputs, e) != 0)
        return -1;
    memcpy(targets, inputs + 1, (size_t)(T - 1) * sizeof *targets);
    return ar_token_set_read(s->set, s->lo + o + (size_t)T, 1, vocab, targets + T - 1, e);
}

int ar_sample_batch(const ar_token_span *s, int32_t vocab, int B, int T, gsl_rng *r, int32_t *inputs,
                    int32_t *targets, ar_err *e)
{
    /* Offsets o in [0, n-T-1]: the window x[o..o+T] must lie inside x. */
    size_t span = s->n - (size_t)T;
    for (int b = 0; b < B; b++) {
        size_t o = uniform_index(r, span);
        if (read_window(s, o, vocab, T, inputs + (size_t)b * T, targets + (size_t)b * T, e) != 0)
            return -1;
    }
    return 0;
}

size_t ar_eval_window_count(size_t n, int T)
{
    return n >= (size_t)T + 1 ? (n - 1) / (size_t)T : 0;
}

void ar_eval_window(const int32_t *x, size_t w, int T, int32_t *inputs, int32_t *targets)
{
    /* stride T: consecutive windows share one token, and every token after
     * the first is predicted exactly once */
    const int32_t *s = x + w * (size_t)T;
    memcpy(inputs, s, (size_t)T * sizeof *x);
    memcpy(targets, s + 1, (size_t)T * sizeof *x);
}

size_t ar_eval_data_windows(const ar_eval_data *d, int T)
{
    size_t nw = 0;
    for (int i = 0; i < d->nparts; i++)
        nw += ar_eval_window_count(d->part[i].n, T);
    return nw;
}

int ar_eval_data_window(const ar_eval_data *d, size_t w, int T, int32_t *inputs, int32_t *targets, ar_err *e)
{
    /* Window w of a part is x[w*T .. w*T+T]: stride T, so consecutive
     * windows share one token and every token after the first is predicted
     * exactly once. */
    for (int i = 0; i < d->nparts; i++) {
        size_t nw = ar_eval_window_count(d->part[i].n, T);
        if (w < nw)
            return read_window(&d->part[i], w * (size_t)T, d->vocab, T, inputs, targets, e);
        w -= nw;
    }
    return ar_fail(e, "evaluation window %zu is past the data's last", w);
}
