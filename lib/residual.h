/* How sublayer inputs are formed from earlier outputs: the one interface
 * behind which baseline residuals, AttnRes and (later) the ablations live.
 *
 * Notation (DESIGN.md section 1): v_0 is the embedding, v_l the output of
 * sublayer l = 1..L, h_l the input of sublayer l, h_out the final state.
 * Every scheme here keeps running block sums P_l (P_0 = v_0; P_l = v_l when
 * l opens a block, else P_{l-1} + v_l); the schemes differ in which P's a
 * sublayer reads and how it mixes them.
 *
 * Forward, per step:   embed_out() <- v_0
 *                      for l = 1..L: h = input_fwd(l); sublayer writes v_l
 *                                    into output_buf(l); accept_fwd(l)
 *                      h_out = final_fwd()
 * dv and the input-gradient buffer of one sublayer may be the same memory:
 * a sublayer's backward reads all of dv before it adds anything to dL/dh.
 * Backward, in reverse: zero_grads(); caller adds dL/dh_out into
 *                      final_grad_buf(); final_bwd();
 *                      for l = L..1: dv = output_grad(l) (complete);
 *                                    h = input_saved(l);
 *                                    sublayer adds dL/dh_l into
 *                                    input_grad_buf(l); input_bwd(l)
 *                      dv_0 = embed_grad()
 */
#ifndef AR_RESIDUAL_H
#define AR_RESIDUAL_H

#include "backend.h"
#include "config.h"
#include "params.h"

typedef struct ar_residual ar_residual;

typedef struct {
    /* params: base of the parameter buffer (device) and of the gradients */
    void (*bind)(ar_residual *r, float *params, float *grads);
    float *(*embed_out)(ar_residual *r);
    const float *(*input_fwd)(ar_residual *r, int l, int N);
    float *(*output_buf)(ar_residual *r, int l);
    void (*accept_fwd)(ar_residual *r, int l, int N);
    const float *(*final_fwd)(ar_residual *r, int N);

    void (*zero_grads)(ar_residual *r, int N);
    float *(*final_grad_buf)(ar_residual *r);
    void (*final_bwd)(ar_residual *r, int N);
    float *(*output_grad)(ar_residual *r, int l, int N);
    /* The input h_l of sublayer l again, for its backward (called after
     * output_grad(l)); a scheme may recompute it rather than keep it. */
    const float *(*input_saved)(ar_residual *r, int l, int N);
    float *(*input_grad_buf)(ar_residual *r, int l, int N);
    void (*input_bwd)(ar_residual *r, int l, int N);
    float *(*embed_grad)(ar_residual *r);

    /* Depth-attention diagnostics for mixer l (1..L, L+1 = final): number of
     * sources (0 for schemes without weights) and the weights of the last
     * forward averaged over its N tokens, written to host memory. */
    int (*n_sources)(ar_residual *r, int l);
    void (*mean_weights)(ar_residual *r, int l, int N, float *out);
    /* Device pointer of source i of mixer l (NULL for schemes without). */
    const float *(*source)(ar_residual *r, int l, int i);
    void (*destroy)(ar_residual *r);
} ar_residual_vt;

struct ar_residual {
    const ar_residual_vt *vt;
    const ar_backend *be;
    int L, d, maxN;
};

/* Creates the scheme named by cfg->residual, registering its parameters in
 * pt (after the transformer's own).  Activation memory for maxN tokens is
 * allocated at bind time. */
ar_residual *ar_residual_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                ar_param_table *pt);

/* Most consecutive mixers that AttnRes kinds batch in one two-phase chunk
 * (lib/residual_depth.c; default 4).  Read at creation.  1 = one mixer per
 * chunk (one phase); tests vary it to check that results do not depend on it. */
extern int ar_depth_chunk;

/* The implementations (one file per family). */
ar_residual *ar_residual_sum_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN);
ar_residual *ar_residual_depth_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                      ar_param_table *pt);

#endif
