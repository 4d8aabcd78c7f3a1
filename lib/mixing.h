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
 * l = 1..L+1 over its sources i (study/depth_stats.h measures them). */
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
 * block (with any flags), static and rescaled (swa's sliding sources are
 * not drawn yet). */
int ar_res_has_depth_attn(ar_res_kind k);

/* The sources of mixer l (1..L+1) under cfg's AttnRes scheme: those of
 * ar_depth_sources (depth_sources.h) with block size S =
 * ar_cfg_block_size(cfg) (Full: S = 1) and no window.  Returns their number
 * (0 for kinds without depth attention) and fills out[0..n) when out is
 * non-NULL (at most L+1 entries). */
int ar_mixer_sources(const ar_model_cfg *cfg, int l, ar_source *out);

/* Fills M ((L+1) x (L+1), row l-1 = mixer l, column i = v_i; NaN for
 * i >= l, where v_i does not exist yet) for the scheme of cfg:
 *     baseline      M[l][i] = 1                      (h_l = v_0 + ... + v_{l-1})
 *     full, block   M[l][i] = abar_{l,s(i)}, s(i) the source holding v_i:
 *                   a block's weight goes to each of its member sublayers,
 *                   since h_l = sum_s abar_s b_s = sum_s abar_s sum_{i in s} v_i
 *     static, rescaled   as full (their weights are measured too)
 *     mhc           M[l][i] = p_l^T R_{l-1} .. R_{i+1} q_i from its parameters
 *     denseformer   from its DWA coefficients (lib/residual_denseformer.c)
 * w holds the token-averaged weights (ar_depth_attn above) for the kinds that
 * have them, else may be NULL; m is the model, for schemes whose M comes
 * from their parameters (mHC: M[l][i] = beta_i^T A alpha_l), else may be
 * NULL.  A kind with no M yet is an error. */
int ar_mixing_matrix(const ar_model_cfg *cfg, const ar_model *m, const ar_depth_attn *w, double *M, ar_err *e);

/* Whether ar_mixing_matrix needs measured weights w for this kind. */
int ar_mixing_needs_weights(ar_res_kind k);

#endif
