/* How sublayer inputs are formed from earlier outputs: the one interface
 * behind which baseline residuals, AttnRes and the other depth mixers live.
 *
 * Notation (docs/reference.md §1.1): v_0 is the embedding, v_l the output of
 * sublayer l = 1..L, h_l the input of sublayer l, h_out the final state.
 * Every scheme here keeps running block sums P_l (P_0 = v_0; P_l = v_l when
 * l opens a block, else P_{l-1} + v_l); the schemes differ in which P's a
 * sublayer reads and how it mixes them.
 *
 * Forward, per step:   embed_out() <- v_0
 *                      for l = 1..L: h = input_fwd(l, norm); if h is NULL
 *                                    the scheme wrote RMSNorm(h_l) for the
 *                                    sublayer itself; sublayer writes v_l
 *                                    into output_buf(l); accept_fwd(l)
 *                      h_out = final_fwd()
 * dv and the input-gradient buffer of one sublayer may be the same memory:
 * a sublayer's backward reads all of dv before it adds anything to dL/dh.
 * Backward, in reverse: zero_grads(); caller adds dL/dh_out into
 *                      final_grad_buf() (writes it, where the scheme sets
 *                      final_grad_overwrite); final_bwd();
 *                      for l = L..1: dv = output_grad(l) (complete);
 *                                    sublayer's backward down to dL/dxn;
 *                                    then either input_norm_bwd(l, ng),
 *                                    where the scheme has it (the norm's
 *                                    backward fused with its own),
 *                                    or h = input_saved(l); the caller's
 *                                    norm backward adds dL/dh_l into
 *                                    input_grad_buf(l, spare) (writes it,
 *                                    where input_grad_overwrite);
 *                                    input_bwd(l)
 *                      dv_0 = embed_grad()
 *
 * Scratch lent by the caller (bind): buffers of maxN x d floats that the
 * model owns for its sublayer backward and leaves alone from the start of a
 * forward until its first output_grad() call; and `spare` (one of them),
 * which it leaves alone again from input_grad_buf(l, spare) to the end of
 * input_bwd(l).  A scheme works in them instead of memory of its own, so
 * that beyond the baseline AttnRes keeps only what its gradients need:
 * nb block gradients of N x d (nb = N_blocks), plus each mixer's N x n
 * weights and N-float statistics (lib/residual_depth.c).
 */
#ifndef AR_RESIDUAL_H
#define AR_RESIDUAL_H

#include "../core/config.h"
#include "backend.h"
#include "params.h"

typedef struct ar_residual ar_residual;

/* Where sublayer l wants its input normalised, xn = RMSNorm(h_l), is an
 * ar_norm_out, and the backward of that norm from dL/dxn an ar_norm_grad
 * (lib/op_args.h: the depth ops take them to fuse the norm). */

typedef struct {
    /* params: base of the parameter buffer (device) and of the gradients;
     * scratch: nscratch lent buffers (see above; nscratch may be 0) */
    void (*bind)(ar_residual *r, float *params, float *grads, float *const *scratch, int nscratch);
    float *(*embed_out)(ar_residual *r);
    /* h_l; or NULL when the scheme has written nf's xn and rstd instead
     * (fused with forming h_l, which is then not stored) */
    const float *(*input_fwd)(ar_residual *r, int l, int N, const ar_norm_out *nf);
    float *(*output_buf)(ar_residual *r, int l);
    void (*accept_fwd)(ar_residual *r, int l, int N);
    const float *(*final_fwd)(ar_residual *r, int N);

    /* NULL where the scheme has nothing to clear before a backward */
    void (*zero_grads)(ar_residual *r, int N);
    float *(*final_grad_buf)(ar_residual *r);
    void (*final_bwd)(ar_residual *r, int N);
    float *(*output_grad)(ar_residual *r, int l, int N);
    /* The input h_l of sublayer l again, for its backward (called after
     * output_grad(l)); a scheme may recompute it rather than keep it. */
    const float *(*input_saved)(ar_residual *r, int l, int N);
    /* spare: a lent buffer free until input_bwd(l) returns, or NULL */
    float *(*input_grad_buf)(ar_residual *r, int l, int N, float *spare);
    void (*input_bwd)(ar_residual *r, int l, int N);
    /* NULL, or all of the above four in one call: the scheme forms dL/dh_l
     * from ng itself, fused with its own backward (it need not keep or
     * recompute h_l, nor pass dL/dh_l through memory in between) */
    void (*input_norm_bwd)(ar_residual *r, int l, int N, const ar_norm_grad *ng);
    float *(*embed_grad)(ar_residual *r);

    /* Depth-attention diagnostics for mixer l (1..L, L+1 = final): number of
     * sources (0 for schemes without weights) and the weights of the last
     * forward averaged over its N tokens, written to host memory. */
    int (*n_sources)(ar_residual *r, int l);
    void (*mean_weights)(ar_residual *r, int l, int N, float *out);
    /* The per-token weights of mixer l of the last forward, written to host
     * memory as rows of n_sources(l) floats: one row per token, or per
     * (token, head) with H > 1 heads (token-major, N x H rows).  Returns
     * the number of rows; out NULL: returns it only.  NULL for schemes
     * without per-token weights (routing statistics, lib/mixing.h). */
    long (*token_weights)(ar_residual *r, int l, int N, float *out);
    /* Device pointer of source i of mixer l (NULL for schemes without). */
    const float *(*source)(ar_residual *r, int l, int i);

    /* Pipeline parallelism (parallel/pipe_plan.h): row q = P_q, the running
     * sum of q's block after sublayer q (P_0 = v_0), as stages send and
     * receive it; row_grad(q) the buffer its gradient accumulates in (the
     * block's dB, the baseline's one running gradient), complete for the
     * rows below a chunk once the chunk's backward is done;
     * zero_row_grads clears every one (a stage's first backward of a
     * micro-batch, where no final mixer initialises them).  NULL where the
     * scheme cannot be split into stages.  A row may be bf16 storage
     * (lib/backend.h, alloc_act: the baseline's and the depth schemes'
     * under bf16), to be moved with the backend's copy, which converts;
     * a row's gradient is fp32. */
    float *(*row)(ar_residual *r, int q);
    float *(*row_grad)(ar_residual *r, int q);
    void (*zero_row_grads)(ar_residual *r, int N);
    void (*destroy)(ar_residual *r);
} ar_residual_vt;

struct ar_residual {
    const ar_residual_vt *vt;
    const ar_backend *be;
    int L, d, maxN;
    /* 1 where final_grad_buf() / input_grad_buf() hand out memory that is
     * not yet an accumulator: the caller overwrites it (rmsnorm_bwd's
     * overwrite), so the scheme need not zero it first (a pass over N x d
     * floats per sublayer) */
    int final_grad_overwrite, input_grad_overwrite;
    /* 1 during and after a forward whose depth weights nobody reads and
     * after which no backward runs (ar_model_forward_unread; every
     * decoding step, lib/decode.c): a scheme may
     * leave its weights unwritten (lib/op_args.h, weights_unread), and
     * then gives NaN for them (mean_weights, token_weights) until the next
     * forward.  The model sets it before each forward. */
    int weights_unread;
};

/* Creates the scheme named by cfg->residual, registering its parameters in
 * pt (after the transformer's own).  Activation memory for maxN tokens is
 * allocated at bind time. */
ar_residual *ar_residual_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                int nchunks, ar_param_table *pt);

/* Most consecutive mixers that AttnRes kinds batch in one two-phase chunk
 * (lib/residual_depth.c), and that the general depth mixer batches in one
 * chunk of its backward (lib/residual_mixer.c; at most 8).  0 (the
 * default): each schedule's own choice (4; the general mixer's static 8,
 * swa about sqrt(window + 2)).  Read at creation.  1 = one mixer per chunk
 * (one phase); tests vary it to check that results do not depend on it. */
extern int ar_depth_chunk;

/* 1: plain full/block also run on the general depth mixer of
 * lib/residual_mixer.c instead of lib/residual_depth.c, and static on its
 * per-token ops instead of weighted sums of buffers (tests compare the
 * two).  Read at creation; default 0. */
extern int ar_depth_general;

/* 1 (the default): the general mixer keeps each source row's key-norm rstd
 * for the later mixers that list the same row (ar_depth_mix: rsc); 0:
 * every mixer takes its own (tests compare the two).  Read at creation. */
extern int ar_depth_rstd_cache;

/* The implementations (one file per family; docs/reference.md §2). */
/* baseline (lib/residual_sum.c) */
ar_residual *ar_residual_sum_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN);
/* plain full/block, two-phase (lib/residual_depth.c); no two-phase chunk
 * spans a cut between nchunks pipeline chunks (lib/chunks.h) */
ar_residual *ar_residual_depth_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                      int nchunks, ar_param_table *pt);
/* the general depth mixer (lib/residual_mixer.c): full/block with flags,
 * swa, static, rescaled */
ar_residual *ar_residual_mixer_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                      ar_param_table *pt);
/* lib/residual_denseformer.c */
ar_residual *ar_residual_denseformer_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                            ar_param_table *pt);
/* lib/residual_mhc.c */
ar_residual *ar_residual_mhc_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                    ar_param_table *pt);

#endif
