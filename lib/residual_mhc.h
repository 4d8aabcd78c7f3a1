/* mHC-lite's H_res (lib/residual_mhc.c), which its mixing matrix
 * (lib/mixing.c) and the tests need too. */
#ifndef AR_RESIDUAL_MHC_H
#define AR_RESIDUAL_MHC_H

/* The permutations of {0..m-1} in lexicographic order (perm, if non-NULL,
 * gets count x m entries; returns count = m!), and
 * H_res = sum_k softmax(r)_k P_k (m x m, row-major) with
 * P_k[i, perm_k[i]] = 1. */
int ar_mhc_perms(int m, int *perm);
void ar_mhc_hres(const float *r, int m, double *R);

#endif
