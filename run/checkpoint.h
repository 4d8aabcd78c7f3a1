/* Run directories and checkpoints (docs/reference.md §4):
 *   model.safetensors      weights, docs/reference.md §3 tensor names, F32, with
 *                          __metadata__ config (resolved YAML), step,
 *                          attnres_version, and the training state of
 *                          ar_ckpt_state (rng_seed, data_position,
 *                          bad_steps, threads, data_fingerprint, data_tokens,
 *                          cpu, blas, build);
 *                          like every safetensors file attnres writes, it
 *                          holds the CRC-32 of every tensor
 *   optimizer.safetensors  AdamW moments "m.<name>", "v.<name>", metadata
 *                          step and adam_t; with train.optimizer muon,
 *                          "muon.<name>" (momentum) instead for the Muon
 *                          matrices and metadata optimizer "muon" (a
 *                          resume with the other optimizer is refused);
 *                          optimizer.prev.safetensors keeps
 *                          the previous one until the new model file is in
 *                          place, so a kill at any moment leaves a matching
 *                          (model, optimizer) pair
 *   config.yaml            the resolved config
 *   metrics.jsonl          one JSON object per logged step
 *   checkpoints/step-N/    the last train.keep_checkpoints checkpoints:
 *                          model.safetensors and optimizer.safetensors,
 *                          hard links to (or copies of) the files above as
 *                          they were at step N */
#ifndef AR_CHECKPOINT_H
#define AR_CHECKPOINT_H

#include "../core/config.h"
#include "../core/error.h"
#include "../lib/model.h"
#include "../lib/optim.h"
#include "machine.h"

/* What a checkpoint holds besides weights and optimizer moments: all a
 * resumed run needs to continue exactly as an uninterrupted one.  The
 * batches are the only randomness after initialisation: micro-batch k
 * (counted from the start of the run) is drawn by mt19937 seeded with
 * splitmix64(rng_seed, k), so (rng_seed, data_position) is the whole RNG
 * state and the position in the data. */
typedef struct {
    long step;            /* optimizer steps completed */
    uint64_t rng_seed;    /* train.seed of the run */
    long data_position;   /* micro-batches drawn so far */
    long bad_steps;       /* consecutive skipped (non-finite) steps up to this one */
    int threads;          /* compute threads (results depend on it); 0 = unknown */
    long data_tokens;     /* training split length in tokens; 0 = unknown */
    /* ar_token_set_fingerprint of the training set (formats/token_set.h);
     * has_data_fingerprint 0 where the file has none (an older version's
     * "data_crc32", a CRC of the whole split, is not read) */
    uint32_t data_fingerprint;
    int has_data_fingerprint;
    /* the machine that wrote the checkpoint (run/machine.h): read back
     * from the file, "" where an older file has none; a save always
     * records the machine saving it */
    ar_machine machine;
} ar_ckpt_state;

/* The state of a fresh checkpoint at `step` for cfg: seed from cfg,
 * data_position = step * grad_accum, the rest unknown. */
ar_ckpt_state ar_ckpt_state_at(const ar_config *cfg, long step);

/* Writes config.yaml, the optimizer state (if opt) and the model into dir,
 * each file atomically, in that order (see optimizer.prev above).  Refuses,
 * before writing anything, weights or moments that are not all finite:
 *   "not saving step 12 in 'DIR': tensor 'x' holds a non-finite value
 *    (nan at element 3); the checkpoint already there is kept" */
int ar_ckpt_save_state(const char *dir, const ar_config *cfg, ar_model *m, const ar_adamw *opt,
                       const ar_ckpt_state *st, ar_err *e);
/* ar_ckpt_save_state with ar_ckpt_state_at(cfg, step). */
int ar_ckpt_save(const char *dir, const ar_config *cfg, ar_model *m, const ar_adamw *opt, long step,
                 ar_err *e);

/* After a save at `step`: links the checkpoint into dir/checkpoints/step-N
 * (built as .step-N.tmp and renamed, so it is whole or absent), then keeps
 * only the `keep` newest step-N folders (removing any with N > step, left
 * by a run that was resumed from an older checkpoint). */
int ar_ckpt_keep(const char *dir, long step, int keep, ar_err *e);

/* Reads the config and training state of a checkpoint file (metadata that
 * older checkpoints lack gets the ar_ckpt_state_at values). */
int ar_ckpt_read_state(const char *file, ar_config *cfg, ar_ckpt_state *st, ar_err *e);

/* Reads the config stored in a checkpoint (a run directory or a
 * .safetensors file) into cfg (over the built-in defaults) and *step. */
int ar_ckpt_read_config(const char *path, ar_config *cfg, long *step, ar_err *e);

/* Creates a model for the checkpoint's config (batch capacity max_batch)
 * and loads its weights; every tensor is checked for name, dtype and shape,
 * and tensors the model does not have are an error. */
int ar_ckpt_load_model(const char *path, const ar_backend *be, int max_batch, ar_config *cfg,
                       ar_model **m, long *step, ar_err *e);

/* Loads weights from a safetensors file into an existing model. */
int ar_ckpt_load_weights(const char *file, ar_model *m, ar_err *e);

/* Loads the optimizer state matching `step` from run directory dir. */
int ar_ckpt_load_optim(const char *dir, ar_model *m, ar_adamw *opt, long step, ar_err *e);

/* Writes the gradient buffer as safetensors with the model's tensor names. */
int ar_ckpt_save_grads(const char *file, ar_model *m, ar_err *e);

/* Resolves a checkpoint argument: a directory gives DIR/model.safetensors. */
void ar_ckpt_model_path(const char *path, char *out, size_t n);

#endif
