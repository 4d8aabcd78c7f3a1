/* The evaluation protocol (docs/reference.md §5): consecutive non-overlapping windows
 * of T+1 tokens (stride T) from offset 0; mean cross-entropy over every
 * predicted position of the first max_windows windows. */
#ifndef AR_EVAL_H
#define AR_EVAL_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "../formats/tokens.h"
#include "../lib/model.h"

typedef struct {
    double loss;     /* mean nats/token */
    double sum_nats;
    long tokens;     /* predicted positions */
    long windows;
} ar_eval_result;

/* Evaluates m on x[0..n).  max_windows <= 0 means all windows.  With
 * want_grads, the model's gradient buffer is set to the gradient of the mean
 * loss (zeroed first).  If m->collect_stats is set it stays set for the first
 * batch only, so diagnostics describe that batch. */
int ar_evaluate(ar_model *m, const int32_t *x, size_t n, long max_windows, int want_grads,
                ar_eval_result *r, ar_err *e);

/* ar_evaluate, calling hook(m, B, ud) after the forward of each batch of B
 * windows (B*T tokens), while the model still holds that batch's
 * activations and depth-attention weights. */
typedef void (*ar_eval_hook)(ar_model *m, int B, void *ud);
int ar_evaluate_with(ar_model *m, const int32_t *x, size_t n, long max_windows, int want_grads,
                     ar_eval_hook hook, void *ud, ar_eval_result *r, ar_err *e);

/* ar_evaluate without gradients, its batches spread over the ranks of c
 * (NULL: this process): the same result, bit for bit, on every rank and
 * for any number of ranks, given the same threads per process (and build
 * and OpenBLAS kernels).  collect_stats describes the first batch, which
 * rank 0 evaluates. */
struct ar_comm;
int ar_evaluate_ranks(ar_model *m, struct ar_comm *c, const int32_t *x, size_t n, long max_windows,
                      ar_eval_result *r, ar_err *e);
/* ar_evaluate_ranks, calling hook(m, B, ud) (NULL: none) after the forward
 * of each batch this rank evaluates; what the hook gathers is this rank's
 * share (the caller sums it over the ranks). */
int ar_evaluate_ranks_with(ar_model *m, struct ar_comm *c, const int32_t *x, size_t n, long max_windows,
                           ar_eval_hook hook, void *ud, ar_eval_result *r, ar_err *e);

/* Checks that a token stream suits model config mc: a byte vocabulary needs
 * a text file, and every id lies below the vocabulary size.  Errors name
 * the file ("'PATH': token 12 has id 300, outside the model's vocabulary
 * of 256"). */
int ar_eval_check_tokens(const ar_tokens *t, const ar_model_cfg *mc, const char *path, ar_err *e);

#endif
