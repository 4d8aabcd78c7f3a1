/* YAML configuration files (libyaml) with strict validation, --set
 * overrides, and the resolved YAML written into every run directory.
 * The keys are documented in man/attnres-config.5. */
#ifndef AR_FORMATS_CONFIG_H
#define AR_FORMATS_CONFIG_H

#include <stddef.h>

#include "../core/config.h"
#include "../core/error.h"

/* Overlays the YAML document in `text` on c (which the caller has filled,
 * usually with ar_config_defaults).  `name` is used in messages:
 *   "NAME:LINE:COL: unknown key 'model.foo' (expected one of: ...)"
 *   "NAME:LINE:COL: 'model.d_model' expects a positive integer, got 'abc'"
 * Does not run the cross-field checks of ar_config_validate. */
int ar_config_parse(ar_config *c, const char *text, size_t len, const char *name, ar_err *e);

/* Reads a file and overlays it (ar_config_parse with name = path). */
int ar_config_load(ar_config *c, const char *path, ar_err *e);

/* Overlays one node of a YAML document the caller has loaded with libyaml
 * (a section of a larger file, such as the base: section of a sweep file):
 * with key NULL or "" the node is a mapping of sections, as a whole config
 * file is; otherwise it is the value of the dotted key or section `key`
 * ("model.d_model", "train").  Messages are placed "NAME:LINE:COL" from the
 * node's marks, exactly as ar_config_parse places them.  On error c is
 * unchanged. */
struct yaml_document_s;
struct yaml_node_s;
int ar_config_apply_node(ar_config *c, struct yaml_document_s *doc, struct yaml_node_s *node,
                         const char *key, const char *name, ar_err *e);

/* Applies one "--set" override "dotted.key=value"; value is a YAML scalar
 * (or a flow sequence/mapping where the key takes one).  Errors:
 *   "--set 'model.d_model=abc': 'model.d_model' expects a positive integer, got 'abc'" */
int ar_config_set(ar_config *c, const char *assignment, ar_err *e);

/* Cross-field checks (d_model divisible by n_head, even head_dim, block_size
 * within 1..L, block_sizes summing to L and only with kind block, data.train
 * given, ...). */
int ar_config_validate(const ar_config *c, ar_err *e);

/* Settings that are valid but probably not what was meant; today one: a
 * run shorter than its warmup (attnres-train(1), "SHORT RUNS").  Writes
 * the warning, without the "attnres: warning: " prefix, into buf and
 * returns 1, or returns 0. */
int ar_config_warning(const ar_config *c, char *buf, size_t n);

/* Compares two configs key by key, as their resolved YAML shows them
 * (train.threads and train.device are not compared: they change how fast,
 * not what; train.precision is).  Returns
 * the number of keys that differ, and describes the first few in buf as
 * "train.lr 0.01 -> 0.02, model.d_model 64 -> 128" (a's value first). */
int ar_config_diff(const ar_config *a, const ar_config *b, char *buf, size_t n);

/* The resolved config as YAML (every key, explicit values), malloc'd.
 * Parsing it back over defaults gives an identical ar_config. */
char *ar_config_to_yaml(const ar_config *c);

#endif
