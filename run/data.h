/* Training and validation splits, window sampling, evaluation windows. */
#ifndef AR_DATA_H
#define AR_DATA_H

#include <gsl/gsl_rng.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../formats/token_set.h"

/* A stretch of a token set's stream: tokens [lo, lo + n). */
typedef struct {
    const ar_token_set *set;
    size_t lo, n;
} ar_token_span;

/* Each shard of ts as a span of its own (malloc'd, ar_token_set_shards(ts)
 * of them): the parts of a set evaluated shard by shard. */
ar_token_span *ar_token_spans_of_shards(const ar_token_set *ts);

/* What an evaluation reads: the protocol's windows (docs/reference.md §5)
 * of each part in turn, so a sharded validation set is evaluated shard by
 * shard; every id must be below vocab. */
typedef struct {
    const ar_token_span *part;
    int nparts;
    int32_t vocab;
} ar_eval_data;

typedef struct {
    ar_token_set *train_set, *val_set; /* owned; val_set NULL: the tail of train */
    ar_token_span train;               /* the training split */
    ar_token_span *val;                /* the validation split: each shard of data.val, or train's tail */
    int nval;
    int32_t vocab; /* ids must be below it (256 for bytes) */
    ar_eval_data eval; /* val as an evaluation reads it */
} ar_dataset;

/* Opens data.train (and data.val, or the val_fraction tail of train): each
 * a file, a directory or a glob of shards (formats/token_set.h), mapped,
 * never read whole.  Checks what costs no pass over the tokens: a byte
 * vocabulary needs text, an integer vocabulary under 256 cannot take text,
 * every shard holds at least seq_len+1 tokens, each split one window.  Ids
 * are checked as windows are read. */
int ar_dataset_open(ar_dataset *ds, const ar_data_cfg *dc, const ar_model_cfg *mc, ar_err *e);
void ar_dataset_close(ar_dataset *ds);

/* The check the commands make before they set anything up: that the
 * training data dc->train can be read (a glob: that it matches a file).
 * Else AR_ERR_NOT_FOUND, "training data 'PATH' not found" (for the default
 * corpus, with how to install it), or AR_ERR_IO where it exists but cannot
 * be read. */
int ar_data_check_train(const ar_data_cfg *dc, ar_err *e);

/* B training windows of T+1 tokens of s at uniform random offsets drawn
 * from r (the shards are one stream, so a window may span two):
 * inputs[b*T+t] = x[o_b+t], targets[b*T+t] = x[o_b+t+1], o_b uniform in
 * [0, n-T-1].  An id not below vocab fails, naming its shard and offset. */
int ar_sample_batch(const ar_token_span *s, int32_t vocab, int B, int T, gsl_rng *r, int32_t *inputs,
                    int32_t *targets, ar_err *e);

/* Evaluation protocol (docs/reference.md §5): consecutive windows of T+1
 * tokens, stride T, from offset 0 of each part.  Number of whole windows in
 * n tokens: (n-1)/T; of d: the sum over its parts. */
size_t ar_eval_window_count(size_t n, int T);
size_t ar_eval_data_windows(const ar_eval_data *d, int T);
/* Window w of n tokens in memory, x[w*T .. w*T+T]. */
void ar_eval_window(const int32_t *x, size_t w, int T, int32_t *inputs, int32_t *targets);
/* Window w (0 .. ar_eval_data_windows - 1) of d, parts in order. */
int ar_eval_data_window(const ar_eval_data *d, size_t w, int T, int32_t *inputs, int32_t *targets, ar_err *e);

#endif
