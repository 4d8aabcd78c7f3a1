/* The evaluation protocol (docs/reference.md §5): consecutive non-overlapping windows
 * of T+1 tokens (stride T) from offset 0; mean cross-entropy over every
 * predicted position of the first max_windows windows. */
#ifndef AR_EVAL_H
#define AR_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../lib/model.h"
#include "data.h"

typedef struct {
    double loss;     /* mean nats/token */
    double sum_nats;
    long tokens;     /* predicted positions */
    long windows;
} ar_eval_result;

/* Evaluates m on the windows of d (run/data.h: each part in turn).
 * max_windows <= 0 means all windows.  With want_grads, the model's
 * gradient buffer is set to the gradient of the mean loss (zeroed first).
 * If m->collect_stats is set it stays set for the first batch only, so
 * diagnostics describe that batch.  An id not below d->vocab fails,
 * naming its shard and offset. */
int ar_evaluate_data(ar_model *m, const ar_eval_data *d, long max_windows, int want_grads, ar_eval_result *r,
                     ar_err *e);

/* ar_evaluate_data over n tokens in memory, x[0..n) (ids below the
 * model's vocabulary). */
int ar_evaluate(ar_model *m, const int32_t *x, size_t n, long max_windows, int want_grads,
                ar_eval_result *r, ar_err *e);

/* ar_evaluate_data, calling hook(m, B, ud) after the forward of each batch
 * of B windows (B*T tokens), while the model still holds that batch's
 * activations and depth-attention weights. */
typedef void (*ar_eval_hook)(ar_model *m, int B, void *ud);
int ar_evaluate_with(ar_model *m, const ar_eval_data *d, long max_windows, int want_grads, ar_eval_hook hook,
                     void *ud, ar_eval_result *r, ar_err *e);

/* ar_evaluate_data without gradients, its batches spread over the ranks of
 * c (NULL: this process): the same result, bit for bit, on every rank and
 * for any number of ranks, given the same threads per process (and build
 * and OpenBLAS kernels).  collect_stats describes the first batch, which
 * rank 0 evaluates.  A failure on one rank (a bad id) fails every rank. */
struct ar_comm;
int ar_evaluate_ranks(ar_model *m, struct ar_comm *c, const ar_eval_data *d, long max_windows, ar_eval_result *r,
                      ar_err *e);
/* ar_evaluate_ranks, calling hook(m, B, ud) (NULL: none) after the forward
 * of each batch this rank evaluates; what the hook gathers is this rank's
 * share (the caller sums it over the ranks). */
int ar_evaluate_ranks_with(ar_model *m, struct ar_comm *c, const ar_eval_data *d, long max_windows,
                           ar_eval_hook hook, void *ud, ar_eval_result *r, ar_err *e);

/* Opens evaluation data for model config mc: a file, directory or glob of
 * shards (formats/token_set.h), each shard one part.  A byte vocabulary
 * needs text; ids are checked as they are read.  *set owns what *d and
 * *parts point into: free both with ar_eval_data_close. */
int ar_eval_data_open(const char *spec, const ar_model_cfg *mc, ar_token_set **set, ar_token_span **parts,
                      ar_eval_data *d, ar_err *e);
void ar_eval_data_close(ar_token_set *set, ar_token_span *parts);

#endif
