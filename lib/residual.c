#include "residual.h"

ar_residual *ar_residual_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                ar_param_table *pt)
{
    switch (cfg->residual.kind) {
    case AR_RES_BASELINE:
        return ar_residual_sum_create(cfg, be, maxN);
    case AR_RES_FULL:
    case AR_RES_BLOCK:
        return ar_residual_depth_create(cfg, be, maxN, pt);
    }
    return 0;
}
