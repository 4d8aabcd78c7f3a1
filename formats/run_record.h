/* A run's training record as the figures use it, read from its
 * metrics.jsonl (formats/metrics.h) with every field checked: a field of
 * the wrong type is an error placed "PATH:LINE: ...". */
#ifndef AR_RUN_RECORD_H
#define AR_RUN_RECORD_H

#include <stddef.h>

#include "../core/error.h"

typedef struct {
    int n;                    /* records with a training loss */
    double *step, *tokens, *loss;   /* n each (tokens NaN where a record has none) */
    int nv;                   /* records with a validation loss */
    double *vstep, *vtokens, *vloss;
    long last_step;           /* largest step logged; -1 if none */
    /* The last evaluation with per-sublayer statistics (L = 0: none). */
    int L;
    double *out_rms, *grad_rms; /* L each (grad_rms NaN where absent) */
    long eval_step;
    /* The last record with depth-attention weights (nmix = 0: none):
     * mixer l = 1..nmix has nsrc[l-1] weights at da + off[l-1]. */
    int nmix, *nsrc, *off;
    double *da;
    long da_step;
    /* Evaluations with routing statistics (depth_routing; nrt = 0: none),
     * each over rt_nmix mixers: record k has step rt_step[k], tokens
     * rt_tokens[k], and for mixer l = 1..rt_nmix, at [k * rt_nmix + l-1],
     * rt_entropy (nats), rt_hnorm (entropy / ln n; NaN for one source),
     * rt_eff (effective sources) and rt_max (mean largest weight). */
    int nrt, rt_nmix;
    double *rt_step, *rt_tokens, *rt_entropy, *rt_hnorm, *rt_eff, *rt_max;
} ar_run_record;

/* Reads path.  Fields checked where present: step, tokens, loss, val_loss
 * (numbers; null reads as missing), out_rms and grad_rms (lists of numbers
 * of one length throughout the file), depth_attn (a list of lists of
 * numbers), depth_routing (an object whose entropy, entropy_norm,
 * eff_sources and mean_max are lists of numbers or nulls, one per mixer,
 * of one length throughout the file, each value in its range: entropy >= 0,
 * entropy_norm and mean_max in [0, 1], eff_sources >= 1; top_share a list
 * of lists of numbers in [0, 1]). */
int ar_run_record_read(ar_run_record *r, const char *path, ar_err *e);
void ar_run_record_free(ar_run_record *r);

/* The name figures give a run: the last component of its directory
 * ("runs/base/" -> "base"); for a file in a run directory
 * ("runs/base/model.safetensors", "runs/base/metrics.jsonl") the
 * directory's, for a file on its own its name without extension. */
void ar_run_label(const char *path, char *buf, size_t cap);

#endif
