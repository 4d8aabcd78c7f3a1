#include "residual.h"

ar_residual *ar_residual_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                int nchunks, ar_param_table *pt)
{
    switch (cfg->residual.kind) {
    case AR_RES_BASELINE:
        return ar_residual_sum_create(cfg, be, maxN);
    case AR_RES_FULL:
    case AR_RES_BLOCK:
        /* flags that change queries or heads need the general depth mixer;
         * plain AttnRes, also with score: sigmoid or key_norm: false,
         * keeps the optimised two-phase one */
        if (ar_cfg_depth_flags_general(cfg) || ar_depth_general)
            return ar_residual_mixer_create(cfg, be, maxN, pt);
        return ar_residual_depth_create(cfg, be, maxN, nchunks, pt);
    case AR_RES_STATIC:
    case AR_RES_SWA:
    case AR_RES_RESCALED:
        return ar_residual_mixer_create(cfg, be, maxN, pt);
    case AR_RES_DENSEFORMER:
        return ar_residual_denseformer_create(cfg, be, maxN, pt);
    case AR_RES_MHC:
        return ar_residual_mhc_create(cfg, be, maxN, pt);
    }
    return 0;
}
