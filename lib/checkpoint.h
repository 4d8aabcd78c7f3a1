/* Run directories and checkpoints (DESIGN.md section 2):
 *   model.safetensors      weights, DESIGN.md tensor names, F32, with
 *                          __metadata__ config (resolved YAML), step,
 *                          attnres_version
 *   optimizer.safetensors  AdamW moments "m.<name>", "v.<name>", metadata
 *                          step and adam_t; optimizer.prev.safetensors keeps
 *                          the previous one until the new model file is in
 *                          place, so a kill at any moment leaves a matching
 *                          (model, optimizer) pair
 *   config.yaml            the resolved config
 *   metrics.jsonl          one JSON object per logged step */
#ifndef AR_CHECKPOINT_H
#define AR_CHECKPOINT_H

#include "config.h"
#include "error.h"
#include "model.h"
#include "optim.h"

/* Writes model, optimizer state (if opt) and config.yaml into dir, each file
 * atomically. */
int ar_ckpt_save(const char *dir, const ar_config *cfg, ar_model *m, const ar_adamw *opt, long step,
                 ar_err *e);

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
