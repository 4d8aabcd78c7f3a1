/* Depth mixing as a matrix (the AttnRes report, section 6.2).  Every
 * residual scheme forms each sublayer input as a combination of the
 * earlier sublayer outputs (docs/reference.md §2.12):
 *     h_l = sum_{i=0}^{l-1} M[l][i] v_i      l = 1..L,  and l = L+1 for h_out
 * (for AttnRes, M holds the token-averaged weights).  M is what lets every
 * scheme be drawn on one picture; each scheme provides its own M in one
 * table in mixing.c.  Also here: which sources each mixer of an AttnRes
 * scheme reads, so that figures can name and mark them. */
#ifndef AR_MIXING_H
#define AR_MIXING_H

#include <stddef.h>

#include "../core/config.h"
#include "../core/error.h"
#include "depth_sources.h"
#include "model.h"

/* Token-averaged depth-attention weights, abar_{l,i} for each mixer
 * l = 1..L+1 over its sources i (run/depth_stats.h measures them). */
typedef struct {
    int L;         /* sublayers; mixers are 1..L+1 */
    int *n;        /* n[l-1]: number of sources of mixer l */
    double *w;     /* (L+1) x (L+1), row l-1 = abar_l over its n[l-1] sources, NaN after them */
    long tokens;   /* tokens averaged over (0 when filled from elsewhere) */
} ar_depth_attn;

/* An empty table for L sublayers: every n 0, every weight NaN. */
void ar_depth_attn_alloc(ar_depth_attn *a, int L);
void ar_depth_attn_free(ar_depth_attn *a);
static inline double *ar_depth_attn_row(const ar_depth_attn *a, int l)
{
    return a->w + (size_t)(l - 1) * (size_t)(a->L + 1);
}

/* Whether a residual kind mixes its sources with per-token weights that
 * can be averaged and drawn over Full's or Block's source lists: full,
 * block (with any flags), static, rescaled and swa (a window of Full's). */
int ar_res_has_depth_attn(ar_res_kind k);

/* The sources of mixer l (1..L+1) under cfg's AttnRes scheme: those of
 * ar_depth_sources (depth_sources.h) with the block layout of cfg
 * (ar_blocks_of_cfg: S = ar_cfg_block_size, or block_sizes; Full: S = 1)
 * and swa's window (no window for the other kinds).  Returns their number
 * (0 for kinds without depth attention) and fills out[0..n) when out is
 * non-NULL (at most L+1 entries). */
int ar_mixer_sources(const ar_model_cfg *cfg, int l, ar_source *out);

/* The columns of a figure over cfg's sources: the sources h_out would have
 * without a window (every block b_n, or every v_i), so that each source's
 * .block is a column (0 for kinds without depth attention). */
int ar_mixer_columns(const ar_model_cfg *cfg);

/* Fills M ((L+1) x (L+1), row l-1 = mixer l, column i = v_i; NaN for
 * i >= l, where v_i does not exist yet) for the scheme of cfg:
 *     baseline      M[l][i] = 1                      (h_l = v_0 + ... + v_{l-1})
 *     full, block   M[l][i] = abar_{l,s(i)}, s(i) the source holding v_i:
 *                   a block's weight goes to each of its member sublayers,
 *                   since h_l = sum_s abar_s b_s = sum_s abar_s sum_{i in s} v_i
 *     static, rescaled   as full (their weights are measured too)
 *     swa           as full, and 0 for the v_i before the window
 *     mhc           M[l][i] = p_l^T R_{l-1} .. R_{i+1} q_i from its parameters
 *     denseformer   from its DWA coefficients (lib/residual_denseformer.c)
 * w holds the token-averaged weights (ar_depth_attn above) for the kinds that
 * have them, else may be NULL; m is the model, for schemes whose M comes
 * from their parameters (mHC: M[l][i] = beta_i^T A alpha_l), else may be
 * NULL.  A kind with no M yet is an error. */
int ar_mixing_matrix(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M, ar_err *e);

/* Whether ar_mixing_matrix needs measured weights w for this kind. */
int ar_mixing_needs_weights(ar_res_kind k);

/* ---- Depth-routing statistics (`attnres eval --json`, metrics.jsonl,
 * `attnres plot-depth-attn --stats`; docs/reference.md §4.5).
 * One distribution p_t over the n sources of a mixer per token t (per
 * (token, head) pair with H > 1 heads: each is one distribution, T = N x H
 * rows).  Each row is normalised to sum 1 first, p_ti = w_ti / sum_j w_tj:
 * softmax rows already sum to 1 (this only removes rounding); sigmoid
 * scores (score: sigmoid) do not, and count as the distribution they are
 * proportional to.  With 0 ln 0 = 0:
 *   H_t           = -sum_i p_ti ln p_ti                    (nats)
 *   entropy       = (1/T) sum_t H_t
 *   entropy_norm  = entropy / ln n          in [0, 1]; NaN (undefined) for n = 1
 *   eff_sources   = (1/T) sum_t exp(H_t)    the token mean of exp(H_t), in
 *                                           [1, n]; exp(entropy) is the other
 *                                           convention, and is never larger
 *   max_weight    = (1/T) sum_t max_i p_ti  in [1/n, 1]  (JSON, CSV: mean_max)
 *   top_share_i   = #{t : argmax_j p_tj = i} / T    (ties: the lowest index)
 * Uniform weights give entropy ln n, eff_sources n, max_weight 1/n; one-hot
 * weights 0, 1 and 1.  A row with a sum that is not positive and finite
 * makes every statistic of its mixer NaN.
 *
 * The statistics are sums over rows, so batches (and ranks) add up:
 * acc[l-1] = {T, sum H_t, sum exp(H_t), sum max, count_0 .. count_{n-1}}. */
typedef struct ar_depth_route {
    int L;          /* sublayers; mixers are 1..L+1 */
    int *n;         /* n[l-1]: sources of mixer l */
    double *acc;    /* L+1 rows of ar_route_stride(L) doubles */
    long tokens;    /* tokens added (rows are tokens x heads) */
} ar_depth_route;

static inline size_t ar_route_stride(int L) { return 4 + (size_t)L + 1; }

typedef struct {
    int n;
    double rows;    /* T */
    double entropy, entropy_norm, eff_sources, max_weight;
} ar_route_stats;

/* Adds rows x n weights w (row-major, rows as above) to the sums of one
 * mixer (acc: 4 + n doubles, as above). */
void ar_route_add(double *acc, const float *w, long rows, int n);
/* The statistics of one mixer's sums; share (n entries, or NULL) gets the
 * top-source shares.  With T = 0 every statistic is NaN. */
void ar_route_stats_of(const double *acc, int n, ar_route_stats *s, double *share);

/* Empty sums for the mixers of r: returns 0 (and leaves a empty, safe to
 * free) when the scheme has no per-token weights (vt->token_weights). */
int ar_depth_route_init(ar_depth_route *a, ar_residual *r);
void ar_depth_route_free(ar_depth_route *a);
static inline double *ar_depth_route_acc(const ar_depth_route *a, int l)
{
    return a->acc + (size_t)(l - 1) * ar_route_stride(a->L);
}
/* Adds the weights of r's last forward (N tokens) for every mixer. */
void ar_depth_route_add(ar_depth_route *a, ar_residual *r, int N);

#endif
