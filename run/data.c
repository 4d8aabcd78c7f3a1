/* Data splits, training-batch sampling and the evaluation windows.
 *
 * Everything a bad data set could do wrong is caught when it is opened
 * (wrong kind of file for the vocabulary, ids out of range, splits too short
 * for one window), so the training loop can index without checks. */
#include "data.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A byte vocabulary means text; a token file's ids mean nothing as bytes.
 * The other way round, text is fine under an integer vocabulary as long as
 * every byte value is a valid id. */
static int check_kind(const ar_tokens *t, const char *path, const ar_model_cfg *mc, ar_err *e)
{
    if (mc->vocab_bytes && !t->is_bytes)
        return ar_fail(e,
                       "'%s' is a token file but model.vocab is bytes; set model.vocab to the "
                       "tokenizer's vocabulary size",
                       path);
    if (!mc->vocab_bytes && t->is_bytes && mc->vocab < 256)
        return ar_fail(e,
                       "'%s' is a text file (byte ids 0..255) but model.vocab is %d; set model.vocab "
                       "to bytes",
                       path, mc->vocab);
    return 0;
}

/* The first id >= vocab, named by its position, so the user can find it. */
static int check_ids(const ar_tokens *t, const char *path, int vocab, ar_err *e)
{
    if (t->max_token < vocab)
        return 0;
    for (size_t i = 0; i < t->n; i++)
        if (t->tok[i] >= vocab)
            return ar_fail(e, "'%s': token %zu has id %d but model.vocab is %d (ids must be below it)",
                           path, i, (int)t->tok[i], vocab);
    return 0;
}

static int load_checked(ar_tokens *t, const char *path, const ar_model_cfg *mc, ar_err *e)
{
    if (ar_tokens_load(t, path, e) < 0)
        return -1;
    int vocab = mc->vocab_bytes ? 256 : mc->vocab;
    if (check_kind(t, path, mc, e) < 0 || check_ids(t, path, vocab, e) < 0) {
        ar_tokens_free(t);
        return -1;
    }
    return 0;
}

/* Splits train's tail off as validation: the last floor(n * fraction) tokens. */
static int split_tail(ar_dataset *ds, const ar_data_cfg *dc, ar_err *e)
{
    if (!(dc->val_fraction >= 0 && dc->val_fraction < 1))
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "data.val_fraction is %g but must be in [0, 1) when data.val is null",
                            dc->val_fraction);
    size_t n = ds->all.n;
    size_t nval = (size_t)floor((double)n * dc->val_fraction);
    ds->train = ds->all.tok;
    ds->ntrain = n - nval;
    ds->val = ds->all.tok + ds->ntrain;
    ds->nval = nval;
    return 0;
}

/* One window of T+1 tokens is the least a split can be used for. */
static int check_lengths(const ar_dataset *ds, const ar_data_cfg *dc, const ar_model_cfg *mc, ar_err *e)
{
    size_t need = (size_t)mc->seq_len + 1;
    int tail = dc->val[0] == '\0';
    if (ds->ntrain < need)
        return ar_fail(e,
                       "'%s': the training split holds %zu tokens but needs at least %zu "
                       "(model.seq_len + 1); lower %smodel.seq_len",
                       dc->train, ds->ntrain, need, tail ? "data.val_fraction or " : "");
    if (ds->nval < need && tail)
        return ar_fail(e,
                       "'%s': the validation split (data.val_fraction %g of it) holds %zu tokens but "
                       "needs at least %zu (model.seq_len + 1); raise data.val_fraction, lower "
                       "model.seq_len or set data.val",
                       dc->train, dc->val_fraction, ds->nval, need);
    if (ds->nval < need)
        return ar_fail(e,
                       "'%s': the validation split holds %zu tokens but needs at least %zu "
                       "(model.seq_len + 1); lower model.seq_len",
                       dc->val, ds->nval, need);
    return 0;
}

int ar_dataset_open(ar_dataset *ds, const ar_data_cfg *dc, const ar_model_cfg *mc, ar_err *e)
{
    memset(ds, 0, sizeof *ds);
    if (mc->seq_len < 1)
        return ar_fail_kind(e, AR_ERR_BAD_VALUE, "model.seq_len is %d but must be at least 1", mc->seq_len);
    if (load_checked(&ds->all, dc->train, mc, e) < 0)
        return -1;
    int rc;
    if (dc->val[0] == '\0') {
        rc = split_tail(ds, dc, e);
    } else {
        rc = load_checked(&ds->valf, dc->val, mc, e);
        ds->train = ds->all.tok;
        ds->ntrain = ds->all.n;
        ds->val = ds->valf.tok;
        ds->nval = ds->valf.n;
    }
    if (rc == 0)
        rc = check_lengths(ds, dc, mc, e);
    if (rc < 0)
        ar_dataset_close(ds);
    return rc;
}

int ar_data_check_train(const ar_data_cfg *dc, ar_err *e)
{
    if (access(dc->train, R_OK) == 0)
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
    ar_tokens_free(&ds->all);
    ar_tokens_free(&ds->valf);
    ds->train = ds->val = NULL;
    ds->ntrain = ds->nval = 0;
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

void ar_sample_batch(const int32_t *x, size_t n, int B, int T, gsl_rng *r, int32_t *inputs,
                     int32_t *targets)
{
    /* Offsets o in [0, n-T-1]: the window x[o..o+T] must lie inside x. */
    size_t span = n - (size_t)T;
    for (int b = 0; b < B; b++) {
        size_t o = uniform_index(r, span);
        memcpy(inputs + (size_t)b * T, x + o, (size_t)T * sizeof *x);
        memcpy(targets + (size_t)b * T, x + o + 1, (size_t)T * sizeof *x);
    }
}

size_t ar_eval_window_count(size_t n, int T)
{
    return n >= (size_t)T + 1 ? (n - 1) / (size_t)T : 0;
}

void ar_eval_window(const int32_t *x, size_t w, int T, int32_t *inputs, int32_t *targets)
{
    /* Window w is x[w*T .. w*T+T]: stride T, so consecutive windows share
     * one token and every token after the first is predicted exactly once. */
    const int32_t *s = x + w * (size_t)T;
    memcpy(inputs, s, (size_t)T * sizeof *x);
    memcpy(targets, s + 1, (size_t)T * sizeof *x);
}
