/* The run configuration as plain data (no YAML here: formats/config.c parses
 * and emits it).  Field names mirror the YAML keys of attnres-config(5);
 * docs/reference.md §4.4 lists those names. */
#ifndef AR_CONFIG_H
#define AR_CONFIG_H

#include <stdint.h>

#define AR_PATH_MAX 4096

typedef enum {
    AR_RES_BASELINE = 0, /* PreNorm residual: h_l = v_0 + ... + v_{l-1} */
    AR_RES_FULL,         /* depth attention over every earlier sublayer output (S = 1) */
    AR_RES_BLOCK,        /* depth attention over block summaries (S = block_size, or block_sizes) */
    /* Ablation variants (docs/reference.md §2.5-2.11; lib/residual_mixer.c,
     * residual_denseformer.c, residual_mhc.c) */
    AR_RES_STATIC,       /* alpha = softmax(theta_l), one learned scalar per source (Full's sources) */
    AR_RES_DENSEFORMER,  /* DenseFormer depth-weighted average after each transformer block */
    AR_RES_SWA,          /* depth attention over v_0 and the last `window` sublayer outputs */
    AR_RES_MHC,          /* mHC-lite hyper-connections with `streams` streams */
    AR_RES_RESCALED,     /* uniform average of Full's sources, alpha = 1/n */
} ar_res_kind;

/* Flags of the depth-attention kinds (full, block, swa). */
typedef enum { AR_SCORE_SOFTMAX = 0, AR_SCORE_SIGMOID } ar_score_kind;
typedef enum { AR_KEY_NORM_ON = 0, AR_KEY_NORM_OFF } ar_key_norm; /* spelled true | false */
typedef enum { AR_QUERY_LEARNED = 0, AR_QUERY_INPUT } ar_query_kind;
/* query: input's logit scale: none (1) | head (1/sqrt(d / heads), the
 * head width, as in dot-product attention). */
typedef enum { AR_QUERY_SCALE_NONE = 0, AR_QUERY_SCALE_HEAD } ar_query_scale;

typedef enum {
    AR_SCHED_COSINE = 0, /* linear warmup, then cosine from lr to min_lr */
    AR_SCHED_WSD,        /* warmup, stable at lr, linear decay to min_lr over the last decay_frac */
    AR_SCHED_CONSTANT,   /* linear warmup, then lr */
} ar_sched_kind;

/* A list of positive integers held in the config itself (plain data: a
 * config is copied and compared by value). */
#define AR_LIST_MAX 256
typedef struct {
    int n;              /* entries; 0 = not given */
    int v[AR_LIST_MAX];
} ar_int_list;

typedef struct {
    ar_res_kind kind;
    int block_size; /* S in sublayers; 0 = not given */
    int num_blocks; /* N; 0 = not given */
    ar_int_list block_sizes; /* sublayers of blocks 1, 2, ... (sum L); n = 0: not given.
                                At most one of block_size/num_blocks/block_sizes is set;
                                core/blocks.h turns any of them into a layout */
    ar_score_kind score;   /* full, block, swa: softmax (default) | sigmoid */
    ar_key_norm key_norm;  /* full, block, swa: RMSNorm on keys (default) or not */
    ar_query_kind query;   /* full, block, swa: learned vector (default) | input-dependent */
    /* query: input's stabilisers (docs/reference.md, the input-dependent
     * query): w = scale x [q + g x] N(W RMSNorm(last source)), N an RMSNorm
     * without gain with query_norm, the bracket with query_gate (q, g
     * zero-initialised).  ar_config_defaults sets the stabilised default;
     * checkpoints written before the keys existed read as the plain form
     * (run/checkpoint.c: ar_config_plain_query). */
    ar_query_scale query_scale;
    int query_norm;        /* 0 | 1 */
    int query_gate;        /* 0 | 1 */
    double query_lr_scale; /* AdamW's learning rate of the W_l (train.lr's schedule times this) */
    int heads;             /* full, block, swa: depth-attention heads H; 0 = not given (1) */
    int window;            /* swa: W most recent sublayer outputs; 0 = not given */
    int streams;           /* mhc: m streams; 0 = not given (4) */
} ar_residual_cfg;

/* What the backward recomputes instead of keeping it from the forward. */
typedef enum {
    AR_RECOMPUTE_NONE = 0, /* every sublayer's internals kept */
    AR_RECOMPUTE_SUBLAYER, /* only each sublayer's normalised input kept; its
                              internals recomputed in the backward */
} ar_recompute;

typedef struct {
    int vocab_bytes;  /* 1: vocab is "bytes" (256) */
    int vocab;        /* vocabulary size (256 when vocab_bytes) */
    int d_model;
    int n_layer;      /* transformer blocks; sublayers L = 2*n_layer */
    int n_head;
    int d_ff;
    int seq_len;      /* T */
    ar_residual_cfg residual;
    /* Not a model key: train.recompute, copied here by whoever builds a
     * model to train (lib/model.h), since it decides what the model
     * allocates.  0 (none) everywhere else. */
    ar_recompute recompute;
} ar_model_cfg;

typedef struct {
    char train[AR_PATH_MAX]; /* text, .gz text, or llm.c token file */
    char val[AR_PATH_MAX];   /* "" = null: take val_fraction of train's tail */
    double val_fraction;
} ar_data_cfg;

/* Where training and evaluation run (lib/backend_select.c) and how the
 * matrix products round. */
typedef enum { AR_DEVICE_CPU = 0, AR_DEVICE_CUDA } ar_device;
typedef enum {
    AR_PREC_FP32 = 0, /* every product and reduction in fp32 */
    AR_PREC_BF16,     /* matrix products in bf16 with fp32 accumulation, fp32 master weights (cuda) */
} ar_precision;

/* train.optimizer: AdamW on every parameter, or Muon on the transformer
 * blocks' 2-D matrices and AdamW on the rest (lib/optim.h). */
typedef enum { AR_OPT_ADAMW = 0, AR_OPT_MUON } ar_optimizer_kind;
/* train.muon_scale: the factor of the orthogonalised update of an m x n
 * matrix: keller max(1, m/n)^0.5, moonlight 0.2 sqrt(max(m, n)). */
typedef enum { AR_MUON_SCALE_KELLER = 0, AR_MUON_SCALE_MOONLIGHT } ar_muon_scale_kind;

typedef struct {
    long steps;
    int batch_size;
    int grad_accum;
    double lr;
    double min_lr;
    ar_sched_kind schedule;
    long warmup;
    double decay_frac;  /* wsd: fraction of steps spent decaying */
    double weight_decay;
    double beta1, beta2, eps;
    double grad_clip;   /* 0 = off */
    ar_optimizer_kind optimizer;
    double muon_lr;            /* Muon's peak learning rate (the schedule scales it as lr) */
    double muon_momentum;      /* mu */
    int muon_nesterov;         /* 1: orthogonalise g + mu B, 0: B */
    int muon_ns_steps;         /* Newton-Schulz iterations */
    ar_muon_scale_kind muon_scale;
    double muon_weight_decay;  /* decoupled, times the Muon learning rate */
    uint64_t seed;
    long eval_every;    /* 0 = only at the end */
    long eval_windows;  /* validation windows per evaluation; 0 = all */
    long final_eval_windows; /* sweep/ablate: windows of each finished run's final evaluation; 0 = all */
    long save_every;    /* 0 = only at the end */
    int keep_checkpoints; /* step-numbered checkpoints kept in checkpoints/; 0 = none */
    int max_bad_steps;  /* consecutive non-finite steps (skipped) before training stops */
    long log_every;
    int threads;        /* 0 = all cores */
    ar_device device;   /* cpu | cuda */
    ar_precision precision; /* fp32 | bf16 (bf16 needs cuda) */
    ar_recompute recompute; /* none | sublayer: the same bits, less memory */
} ar_train_cfg;

typedef enum { AR_PIPE_SCHED_1F1B = 0, AR_PIPE_SCHED_GPIPE } ar_pipe_sched_kind;

/* How a run is spread over processes (parallel/dp.h, parallel/pipe.h).  Data
 * parallelism does not change what the run computes (the same bits for
 * any number of ranks, given the same threads per process, build and
 * OpenBLAS kernels on every rank); a pipeline changes it by rounding
 * only. */
typedef struct {
    int shard_optimizer; /* ZeRO-1: each rank keeps 1/P of the AdamW moments */
    int pipeline;        /* P pipeline stages (1: none); the world is P x data-parallel degree */
    int virtual_stages;  /* V chunks per stage (Megatron's interleaving; 1: none) */
    int cache_blocks;    /* cross-stage caching of block representations (default 1) */
    ar_pipe_sched_kind schedule; /* 1f1b (interleaved when V > 1) | gpipe */
    double timeout_s;    /* a rank waiting on the others longer than this stops (0: waits forever) */
} ar_parallel_cfg;

typedef struct {
    ar_model_cfg model;
    ar_data_cfg data;
    ar_train_cfg train;
    ar_parallel_cfg parallel;
} ar_config;

/* Fills c with the built-in defaults (the quick start's model and training
 * settings; data.train = AR_DEFAULT_CORPUS). */
void ar_config_defaults(ar_config *c);
/* r: every residual key at its default, then kind (block size 0: the
 * caller sets the block layout).  What a variant starts from, so that a
 * key it does not name (say query_lr_scale) is never left at zero. */
void ar_residual_cfg_of_kind(ar_residual_cfg *r, ar_res_kind kind);

#define AR_DEFAULT_CORPUS "data/kjv.txt"

/* Sublayer count L and the effective block size S for a residual config
 * (S = ceil(L/N) when num_blocks is given; 1 for full; L+1 for baseline;
 * 0 for kind block with block_sizes, whose blocks need not share one
 * size: core/blocks.h gives the layout of every config). */
int ar_cfg_sublayers(const ar_model_cfg *m);
/* The model section of c as a model to train is built from: with
 * train.recompute copied in (ar_model_cfg.recompute). */
ar_model_cfg ar_cfg_training_model(const ar_config *c);
int ar_cfg_block_size(const ar_model_cfg *m);

/* Whether the config's depth-attention flags (score, key_norm, query,
 * heads) differ from plain AttnRes. */
int ar_cfg_depth_flags(const ar_model_cfg *m);
/* Those of them that need the general one-phase mixer of
 * lib/residual_mixer.c (query, heads); score and key_norm alone keep the
 * two-phase one (lib/residual_depth.c). */
int ar_cfg_depth_flags_general(const ar_model_cfg *m);

/* Effective depth-attention heads (1 when not given) and mHC streams (4). */
int ar_cfg_heads(const ar_model_cfg *m);
int ar_cfg_streams(const ar_model_cfg *m);

const char *ar_res_kind_name(ar_res_kind k);
const char *ar_score_name(ar_score_kind k);
const char *ar_key_norm_name(ar_key_norm k);
const char *ar_query_name(ar_query_kind k);
const char *ar_query_scale_name(ar_query_scale k);
/* The plain input-dependent query w = W RMSNorm(last source): no scale,
 * norm or gate (what every input-query checkpoint before the stabilisers
 * was trained with). */
void ar_config_plain_query(ar_residual_cfg *r);
/* Whether r's stabiliser keys differ from the defaults (they apply to
 * query: input only). */
int ar_cfg_query_stabilisers_changed(const ar_residual_cfg *r);
const char *ar_sched_name(ar_sched_kind k);
const char *ar_device_name(ar_device k);
const char *ar_precision_name(ar_precision k);
const char *ar_recompute_name(ar_recompute k);
const char *ar_pipe_sched_name(ar_pipe_sched_kind k);
const char *ar_optimizer_name(ar_optimizer_kind k);
const char *ar_muon_scale_name(ar_muon_scale_kind k);

#endif
