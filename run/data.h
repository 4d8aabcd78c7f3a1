/* Training and validation splits, window sampling, evaluation windows. */
#ifndef AR_DATA_H
#define AR_DATA_H

#include <gsl/gsl_rng.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../formats/tokens.h"

typedef struct {
    ar_tokens all;   /* owns the training file's tokens */
    ar_tokens valf;  /* owns the val file's tokens when data.val is given */
    const int32_t *train, *val; /* views */
    size_t ntrain, nval;
} ar_dataset;

/* Opens data.train (and data.val, or the val_fraction tail of train).
 * Checks: every token id < vocab (error names the file, the token's index
 * and id); a byte vocabulary needs text files; each split holds at least
 * seq_len+1 tokens. */
int ar_dataset_open(ar_dataset *ds, const ar_data_cfg *dc, const ar_model_cfg *mc, ar_err *e);
void ar_dataset_close(ar_dataset *ds);

/* The check the commands make before they set anything up: that the
 * training data dc->train can be read.  Else AR_ERR_NOT_FOUND, "training
 * data 'PATH' not found" (for the default corpus, with how to install it),
 * or AR_ERR_IO where it exists but cannot be read. */
int ar_data_check_train(const ar_data_cfg *dc, ar_err *e);

/* B training windows of T+1 tokens at uniform random offsets drawn from r:
 * inputs[b*T+t] = x[o_b+t], targets[b*T+t] = x[o_b+t+1]. */
void ar_sample_batch(const int32_t *x, size_t n, int B, int T, gsl_rng *r, int32_t *inputs,
                     int32_t *targets);

/* Evaluation protocol (docs/reference.md §5): consecutive windows of T+1 tokens, stride T,
 * from offset 0.  Number of whole windows in n tokens: (n-1)/T. */
size_t ar_eval_window_count(size_t n, int T);
void ar_eval_window(const int32_t *x, size_t w, int T, int32_t *inputs, int32_t *targets);

#endif
