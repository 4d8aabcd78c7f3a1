/* Incremental decoding: the model of docs/reference.md §1 run over a few new
 * tokens at a time, with a key/value cache per attention sublayer.
 *
 * A step takes n tokens (1 in decoding, up to `chunk` in a prefill) at
 * positions pos..pos+n-1 and runs, for the n rows only:
 *     v_0 = E[tok]
 *     for l = 1..L:  h_l = the residual scheme's mixer l over this token's
 *                    own earlier rows (P_0..P_{l-1}: depth mixing is per
 *                    token);  xn = RMSNorm_l(h_l)
 *        attention:  q = rope_at(xn Wq^T, pos),  K[pos..] = rope_at(xn Wk^T, pos),
 *                    V[pos..] = xn Wv^T;  y = causal attention of q against
 *                    K, V[0 .. pos+n);  v_l = y Wo^T
 *        MLP:        v_l = (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T
 *     h_out = mixer L+1;  logits = RMSNorm_final(h_out) Wlm^T
 * and appends its keys and values to the caches.  The residual scheme is
 * the model's own (lib/residual*.c, every kind, the two-phase Full/Block
 * schedule included), built for `chunk` rows in a copy of the model that
 * shares the trained parameters: its per-token state, the "depth cache",
 * lives only for the chunk being computed, never for the whole context.
 * The logits equal those of a full forward over the same tokens to
 * rounding (tests/test_decode.c). */
#ifndef AR_DECODE_H
#define AR_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "../core/error.h"
#include "model.h"

typedef struct ar_decoder ar_decoder;

/* A decoder over the parameters of m (shared, not copied: m must outlive
 * it; m's own activations are not touched).  chunk: the most tokens one
 * step takes (>= 1); ctx: positions the caches hold (>= 1; the model's
 * trained seq_len is the natural choice).  Every residual kind decodes; -1
 * with e set only for a bad chunk or ctx, or a model that cannot be built. */
int ar_decoder_create(ar_decoder **out, ar_model *m, int chunk, int ctx, ar_err *e);
void ar_decoder_free(ar_decoder *dec);

/* Forgets every cached position: the next step starts at position 0. */
void ar_decoder_reset(ar_decoder *dec);
/* Positions filled so far (the next step's pos), and the capacity ctx. */
int ar_decoder_pos(const ar_decoder *dec);
int ar_decoder_ctx(const ar_decoder *dec);
int ar_decoder_chunk(const ar_decoder *dec);

/* One step over tok[0..n) (host), 1 <= n <= chunk, pos + n <= ctx.
 * logits (host, or NULL): the logits of the last token (V floats), or with
 * all_rows those of every one of the n tokens (n x V).  Returns 0, or -1
 * with e set when n does not fit (the decoder is unchanged then). */
int ar_decoder_step(ar_decoder *dec, const int32_t *tok, int n, float *logits, int all_rows,
                    ar_err *e);

/* tok[0..n) in steps of at most chunk tokens (a prefill); logits as
 * ar_decoder_step's without all_rows: the last token's. */
int ar_decoder_feed(ar_decoder *dec, const int32_t *tok, int n, float *logits, ar_err *e);

/* Memory of the two caches, in bytes (float32):
 *   key/value cache: 2 x n_layer x ctx x d floats
 *   depth cache:     rows x R x d floats, R the representations one token
 *                    keeps across depth for its residual scheme:
 *       baseline 1 (the running sum);  block N+1 (b_0, the completed
 *       blocks and the current partial sum; N = ceil(L/S), or the length
 *       of model.residual.block_sizes);  full, static,
 *       rescaled L+1 (v_0..v_L);  swa min(W, L)+1;  denseformer
 *       n_layer+1 (x_0..x_n_layer);  mhc m (its streams)
 * The decoder holds the depth cache for `chunk` rows (rows = chunk), not
 * for the ctx positions of the context: chunk x R x d, not ctx x R x d.
 * (R counts what depth mixing needs; the schemes' buffers, shaped for
 * training, hold every P_0..P_L of the chunk and some gradient rows: what
 * is allocated is O(chunk x L x d), independent of the context too.) */
int ar_decode_depth_reps(const ar_model_cfg *c);
size_t ar_decode_depth_cache_bytes(const ar_model_cfg *c, int rows);
size_t ar_decode_kv_cache_bytes(const ar_model_cfg *c, int ctx);

#endif
