/* Model-level helpers shared by the model and variant suites. */
#ifndef AR_TEST_MODELUTIL_H
#define AR_TEST_MODELUTIL_H

#include <stdint.h>

#include "lib/model.h"

/* Random weights everywhere, queries and gains included, so depth attention
 * is far from uniform. */
void tu_model_randomize(ar_model *m, uint64_t seed);
/* n random byte tokens and their next-token targets. */
void tu_tokens(int32_t *in, int32_t *tg, int n, uint64_t seed);
/* Directional finite differences per tensor of a randomised model of config
 * mc (batch 2): for a random unit direction u on one tensor,
 * (L(p + h u) - L(p - h u)) / 2h against g.u, with the loss summed in
 * double.  Bound: |fd - g.u| <= 2e-2 |g.u| + 3e-4.  must_have (or NULL): a
 * tensor the model must hold.  what names the case in failures. */
void tu_model_fd_check(ar_model_cfg mc, const char *what, const char *must_have);
/* The same with prep (or NULL) applied to the weights after randomising. */
void tu_model_fd_check_prep(ar_model_cfg mc, const char *what, const char *must_have,
                            void (*prep)(ar_model *m));
/* The same (same bound, no prep) with the step h in place of 1e-2: the
 * central difference's truncation error is O(h^2), and a deeper random
 * model can curve enough that at 1e-2 it alone exceeds the bound. */
void tu_model_fd_check_step(ar_model_cfg mc, const char *what, float h);
/* Forward + backward of ma and mb (same weights, set by the caller) on the
 * same B sequences; max |difference| over loss, logits and the gradients
 * of the tensors both have (matched by name). */
double tu_model_diff(ar_model *ma, ar_model *mb, int B);

#endif
