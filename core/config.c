#include "config.h"

#include <stdio.h>
#include <string.h>

void ar_config_defaults(ar_config *c)
{
    /* Zero first so padding and unused path bytes are deterministic: callers
     * compare configs and write them into checkpoints. */
    memset(c, 0, sizeof *c);

    ar_model_cfg *m = &c->model;
    m->vocab_bytes = 1;
    m->vocab = 256;
    m->d_model = 192;
    m->n_layer = 4;
    m->n_head = 4;
    m->d_ff = 512;
    m->seq_len = 128;
    m->residual.kind = AR_RES_BLOCK;
    m->residual.block_size = 4;
    m->residual.num_blocks = 0;
    /* query: input's stabilisers, chosen by the study in docs/findings.md
     * (the plain form's logits move by up to lr d^2 a step and saturate):
     * a static query plus a zero-gated dynamic part, and a tenth of the
     * learning rate on W_l */
    m->residual.query_scale = AR_QUERY_SCALE_NONE;
    m->residual.query_norm = 0;
    m->residual.query_gate = 1;
    m->residual.query_lr_scale = 0.1;

    ar_data_cfg *d = &c->data;
    snprintf(d->train, sizeof d->train, "%s", AR_DEFAULT_CORPUS);
    d->val[0] = '\0';
    d->val_fraction = 0.05;

    ar_train_cfg *t = &c->train;
    t->steps = 1000;
    t->batch_size = 16;
    t->grad_accum = 1;
    t->lr = 3e-3;
    t->min_lr = 3e-4;
    t->schedule = AR_SCHED_COSINE;
    t->warmup = 100;
    t->decay_frac = 0.2;
    t->weight_decay = 0.1;
    t->beta1 = 0.9;
    t->beta2 = 0.95;
    t->eps = 1e-8;
    t->grad_clip = 1.0;
    t->optimizer = AR_OPT_ADAMW;
    t->muon_lr = 0.02;
    t->muon_momentum = 0.95;
    t->muon_nesterov = 1;
    t->muon_ns_steps = 5;
    t->muon_scale = AR_MUON_SCALE_KELLER;
    t->muon_weight_decay = 0.0;
    t->seed = 1;
    t->eval_every = 200;
    t->eval_windows = 64;
    t->save_every = 500;
    t->keep_checkpoints = 3;
    t->max_bad_steps = 5;
    t->log_every = 10;
    t->threads = 0;
    t->device = AR_DEVICE_CPU;
    t->precision = AR_PREC_FP32;
    c->parallel.pipeline = 1;
    c->parallel.virtual_stages = 1;
    c->parallel.cache_blocks = 1;
    c->parallel.timeout_s = 600; /* as NCCL's watchdog in PyTorch's default process group */
    c->parallel.schedule = AR_PIPE_SCHED_1F1B;
}

void ar_residual_cfg_of_kind(ar_residual_cfg *r, ar_res_kind kind)
{
    ar_config d;
    ar_config_defaults(&d);
    *r = d.model.residual;
    r->block_size = 0;
    r->kind = kind;
}

int ar_cfg_sublayers(const ar_model_cfg *m)
{
    return 2 * m->n_layer;
}

int ar_cfg_block_size(const ar_model_cfg *m)
{
    int L = ar_cfg_sublayers(m);
    switch (m->residual.kind) {
    case AR_RES_BASELINE:
        /* One block holding every sublayer: never used for attention, but
         * it keeps "which block is sublayer l in" well defined. */
        return L + 1;
    case AR_RES_FULL:
    case AR_RES_STATIC:
    case AR_RES_SWA:
    case AR_RES_RESCALED:
        return 1;
    case AR_RES_DENSEFORMER:
        return 2; /* its averages sit at transformer-block boundaries */
    case AR_RES_MHC:
        return L + 1;
    case AR_RES_BLOCK:
        if (m->residual.block_sizes.n > 0)
            return 0; /* no one S: ar_blocks_of_cfg */
        if (m->residual.block_size > 0)
            return m->residual.block_size;
        if (m->residual.num_blocks > 0)
            return (L + m->residual.num_blocks - 1) / m->residual.num_blocks;
        /* Neither given (ar_config_validate rejects this): one block. */
        return L > 0 ? L : 1;
    }
    return 1;
}

const char *ar_res_kind_name(ar_res_kind k)
{
    switch (k) {
    case AR_RES_BASELINE: return "baseline";
    case AR_RES_FULL: return "full";
    case AR_RES_BLOCK: return "block";
    case AR_RES_STATIC: return "static";
    case AR_RES_DENSEFORMER: return "denseformer";
    case AR_RES_SWA: return "swa";
    case AR_RES_MHC: return "mhc";
    case AR_RES_RESCALED: return "rescaled";
    }
    return "unknown";
}

int ar_cfg_depth_flags(const ar_model_cfg *m)
{
    const ar_residual_cfg *r = &m->residual;
    return r->score != AR_SCORE_SOFTMAX || r->key_norm != AR_KEY_NORM_ON || r->query != AR_QUERY_LEARNED ||
           r->heads > 1;
}

int ar_cfg_depth_flags_general(const ar_model_cfg *m)
{
    const ar_residual_cfg *r = &m->residual;
    return r->query != AR_QUERY_LEARNED || r->heads > 1;
}

int ar_cfg_heads(const ar_model_cfg *m) { return m->residual.heads > 1 ? m->residual.heads : 1; }
int ar_cfg_streams(const ar_model_cfg *m) { return m->residual.streams > 0 ? m->residual.streams : 4; }

const char *ar_score_name(ar_score_kind k)
{
    switch (k) {
    case AR_SCORE_SOFTMAX: return "softmax";
    case AR_SCORE_SIGMOID: return "sigmoid";
    }
    return "unknown";
}

const char *ar_key_norm_name(ar_key_norm k)
{
    switch (k) {
    case AR_KEY_NORM_ON: return "true";
    case AR_KEY_NORM_OFF: return "false";
    }
    return "unknown";
}

const char *ar_query_name(ar_query_kind k)
{
    switch (k) {
    case AR_QUERY_LEARNED: return "learned";
    case AR_QUERY_INPUT: return "input";
    }
    return "unknown";
}

const char *ar_query_scale_name(ar_query_scale k)
{
    switch (k) {
    case AR_QUERY_SCALE_NONE: return "none";
    case AR_QUERY_SCALE_HEAD: return "head";
    }
    return "unknown";
}

void ar_config_plain_query(ar_residual_cfg *r)
{
    r->query_scale = AR_QUERY_SCALE_NONE;
    r->query_norm = 0;
    r->query_gate = 0;
    r->query_lr_scale = 1.0;
}

int ar_cfg_query_stabilisers_changed(const ar_residual_cfg *r)
{
    ar_config d;
    ar_config_defaults(&d);
    const ar_residual_cfg *x = &d.model.residual;
    return r->query_scale != x->query_scale || r->query_norm != x->query_norm || r->query_gate != x->query_gate ||
           r->query_lr_scale != x->query_lr_scale;
}

const char *ar_sched_name(ar_sched_kind k)
{
    switch (k) {
    case AR_SCHED_COSINE: return "cosine";
    case AR_SCHED_WSD: return "wsd";
    case AR_SCHED_CONSTANT: return "constant";
    }
    return "unknown";
}

const char *ar_device_name(ar_device k)
{
    switch (k) {
    case AR_DEVICE_CPU: return "cpu";
    case AR_DEVICE_CUDA: return "cuda";
    }
    return "unknown";
}

const char *ar_recompute_name(ar_recompute k)
{
    switch (k) {
    case AR_RECOMPUTE_NONE: return "none";
    case AR_RECOMPUTE_SUBLAYER: return "sublayer";
    }
    return "unknown";
}

const char *ar_precision_name(ar_precision k)
{
    switch (k) {
    case AR_PREC_FP32: return "fp32";
    case AR_PREC_BF16: return "bf16";
    }
    return "unknown";
}

const char *ar_optimizer_name(ar_optimizer_kind k)
{
    switch (k) {
    case AR_OPT_ADAMW: return "adamw";
    case AR_OPT_MUON: return "muon";
    }
    return "unknown";
}

const char *ar_muon_scale_name(ar_muon_scale_kind k)
{
    switch (k) {
    case AR_MUON_SCALE_KELLER: return "keller";
    case AR_MUON_SCALE_MOONLIGHT: return "moonlight";
    }
    return "unknown";
}

const char *ar_pipe_sched_name(ar_pipe_sched_kind k)
{
    switch (k) {
    case AR_PIPE_SCHED_1F1B: return "1f1b";
    case AR_PIPE_SCHED_GPIPE: return "gpipe";
    }
    return "unknown";
}

ar_model_cfg ar_cfg_training_model(const ar_config *c)
{
    ar_model_cfg m = c->model;
    m.recompute = c->train.recompute;
    return m;
}
