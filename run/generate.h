/* Sampling from a trained model (attnres generate): a checkpoint loaded for
 * decoding, the next-token sampler, and the generation loop over an
 * ar_decoder (lib/decode.h) with the context policy of
 * attnres-generate(1). */
#ifndef AR_GENERATE_H
#define AR_GENERATE_H

#include <stdint.h>

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/decode.h"

/* The checkpoint at path (a run directory or a .safetensors file, as
 * run/checkpoint.h reads it) as a model holding the weights, built for
 * chunk rows (clamped to 1..seq_len) rather than seq_len, with no
 * activations: a decoder's parameters.  cfg gets the stored config (its
 * seq_len is the trained context), *step the checkpoint's step. */
int ar_gen_load(const char *path, const ar_backend *be, int chunk, ar_config *cfg, ar_model **m,
                long *step, ar_err *e);

/* Next-token sampling from logits z (V floats):
 *   temperature 0: argmax (the first of equal maxima): greedy
 *   else p_i ∝ exp((z_i - max z) / temperature) over the candidates:
 *     top_k > 0: only the k largest logits (ties: the lower id first);
 *     top_p < 1: then only the smallest set of most probable candidates
 *                whose probability reaches top_p (nucleus);
 *   one uniform draw u in [0, 1) per token from MT19937 seeded with seed
 *   picks the candidate where the cumulative probability passes u. */
typedef struct {
    double temperature; /* >= 0 */
    int top_k;          /* 0: every token */
    double top_p;       /* in (0, 1]; 1: no nucleus cut */
    uint64_t seed;
} ar_sample_cfg;

typedef struct ar_sampler ar_sampler;
ar_sampler *ar_sampler_create(const ar_sample_cfg *c, int V);
void ar_sampler_free(ar_sampler *s);
int32_t ar_sample(ar_sampler *s, const float *logits);

typedef struct {
    long prompt_tokens; /* as fed */
    long generated;
    long slides;        /* times the context was full and slid */
    double prefill_s;   /* feeding the prompt */
    double decode_s;    /* everything after it: steps, slides, sampling, emitting */
} ar_gen_stats;

/* Feeds prompt[0..np) (1 <= np <= the decoder's context, from position
 * 0), then samples n_new tokens, calling emit(token, ud) after each.  Each
 * sampled token but the last is fed back.  When the context is full the
 * window slides: the decoder restarts from the last ceil(ctx/2) tokens
 * (re-prefilled at positions 0..), so every token is sampled with at least
 * ceil(ctx/2) tokens of context, and at most ctx. */
int ar_generate(ar_decoder *dec, ar_sampler *s, const int32_t *prompt, long np, long n_new,
                void (*emit)(int32_t tok, void *ud), void *ud, ar_gen_stats *st, ar_err *e);

#endif
