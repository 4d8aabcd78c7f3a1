/* Model-level helpers shared by the model and variant suites. */
#ifndef AR_TEST_MODELUTIL_H
#define AR_TEST_MODELUTIL_H

#include <stdint.h>

#include "lib/model.h"
#include "run/data.h"

/* Random weights everywhere, queries and gains included, so depth attention
 * is far from uniform. */
void tu_model_randomize(ar_model *m, uint64_t seed);
/* n random byte tokens and their next-token targets. */
void tu_tokens(int32_t *in, int32_t *tg, int n, uint64_t seed);
/* A model of c on the CPU for batches of B, its weights randomised (seed),
 * and B T tokens and targets in in and tg (token_seed), at most cap each. */
ar_model *tu_model_random(ar_model_cfg c, int B, uint64_t seed, uint64_t token_seed, int32_t *in, int32_t *tg,
                          int cap);
/* Directional finite differences per tensor of a randomised model of config
 * mc (batch 2): for a random unit direction u on one tensor,
 * (L(p + h u) - L(p - h u)) / 2h against g.u, with the loss summed in
 * double.  Bound: |fd - g.u| <= 2e-2 |g.u| + 50 u / h (u = 2^-24; 3e-4 at
 * h = 1e-2), the two errors of a central difference:
 * - truncation, h^2/6 times the third directional derivative: 2e-2 of g.u
 *   admits third derivatives up to 1200 |g.u| at h = 1e-2;
 * - rounding: the mean loss (about ln 256 = 5.5 per token) comes out of a
 *   float forward of a dozen chained reductions, off by some 50 u, and the
 *   difference of two such losses over 2h is off by 50 u / h.
 * must_have (or NULL): a tensor the model must hold.  what names the case
 * in failures. */
void tu_model_fd_check(ar_model_cfg mc, const char *what, const char *must_have);
/* The same with prep (or NULL) applied to the weights after randomising. */
void tu_model_fd_check_prep(ar_model_cfg mc, const char *what, const char *must_have,
                            void (*prep)(ar_model *m));
/* The same (no prep) with the step h in place of 1e-2: the central
 * difference's truncation error is O(h^2), and a deeper random model can
 * curve enough that at 1e-2 it alone exceeds 2e-2 |g.u|; the rounding term
 * grows as 1/h. */
void tu_model_fd_check_step(ar_model_cfg mc, const char *what, float h);
/* Forward + backward of ma and mb (same weights, set by the caller) on the
 * same B sequences: the largest of
 *   the loss's relative difference,
 *   the logits' largest difference over the largest logit,
 *   for every tensor both have (matched by name), its gradient's largest
 *   difference over its largest entry (in either model), or over 1/64 of
 *   the largest gradient entry of the model where that is more.
 * Each is a relative error, so a bound reads k gamma(n).  The floor: a
 * tensor's gradient entries add terms of the size of its layer's
 * activations times back-propagated gradients; where they cancel to almost
 * nothing (the query and gain of a softmax mixer with one source are 0 in
 * exact arithmetic, whatever the logit, and come out of the general mixer
 * as the rounding of dh.x - dh.h) their rounding is still that of the
 * terms.  The gradients here that do not cancel (norm gains, attention
 * q and k, queries) are 1/150 to 1/3 of the largest, so the floor dilutes
 * none of them by more than about 2. */
double tu_model_diff(ar_model *ma, ar_model *mb, int B);
/* The bound on tu_model_diff between two schedules of the same depth
 * mixing (chunked or not, two-phase or general, one head or the general
 * mixer's heads: 1, swa over every layer or full) of model m on B
 * sequences.  They add the same terms in other orders: each mixer's logits,
 * key norms, dh.x and dh.h (d terms), its mix and softmax (at most L + 1
 * sources), and its query and gain gradients (B T tokens x at most L + 1
 * sources); each sum is within gamma(n) of the magnitudes it adds in
 * either, so the two differ by 2 gamma(n) of them, n = max(d, B T (L + 1)).
 * The keys are RMS-normalised and the weights of scale 1/sqrt(d) (tests
 * keep them so), so those magnitudes are those of the compared quantities,
 * and a difference reaches the loss, the logits and the gradients with a
 * gain taken as 2.  The L + 1 mixers' differences add up along the forward
 * and the backward: 2 * 2 (L + 1) gamma(max(d, B T (L + 1))).  A term of a
 * mixer scaled by 1 + 1e-3 moves these comparisons past it. */
double tu_model_mixing_bound(const ar_model *m, int B);

/* n tokens in memory, x[0..n) (borrowed), as evaluation data of one part
 * with ids below vocab (run/data.h); tu_mem_eval_free releases it. */
typedef struct {
    ar_token_set *set;
    ar_token_span part;
    ar_eval_data d;
} tu_mem_eval;
const ar_eval_data *tu_mem_eval_of(tu_mem_eval *me, const int32_t *x, size_t n, int32_t vocab);
void tu_mem_eval_free(tu_mem_eval *me);

#endif
