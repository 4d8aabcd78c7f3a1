/* The ablation variants' residual schemes (docs/reference.md §2.5-2.11),
 * created by ar_residual_create (lib/residual.c) from the config. */
#ifndef AR_RESIDUAL_ABLATE_H
#define AR_RESIDUAL_ABLATE_H

#include "residual.h"

/* Depth-attention family (lib/residual_ablate.c): full/block with flags,
 * swa, static, rescaled. */
ar_residual *ar_residual_ablate_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                       ar_param_table *pt);
/* lib/residual_denseformer.c */
ar_residual *ar_residual_denseformer_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                            ar_param_table *pt);
/* lib/residual_mhc.c */
ar_residual *ar_residual_mhc_create(const ar_model_cfg *cfg, const ar_backend *be, int maxN,
                                    ar_param_table *pt);

/* 1: plain full/block also run on the general one-phase mixer of
 * residual_ablate.c instead of residual_depth.c (tests compare the two).
 * Read at creation; default 0. */
extern int ar_depth_general;

/* mHC-lite helpers: the permutations of {0..m-1} in lexicographic order
 * (perm, if non-NULL, gets count x m entries; returns count = m!), and
 * H_res = sum_k softmax(r)_k P_k (m x m, row-major) with
 * P_k[i, perm_k[i]] = 1. */
int ar_mhc_perms(int m, int *perm);
void ar_mhc_hres(const float *r, int m, double *R);

#endif
