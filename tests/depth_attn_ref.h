/* One-phase depth attention (docs/reference.md §2.3-2.4) on the CPU, the
 * reference of the depth ops' tests (tests/depth_attn_ref.c).
 *
 * n sources src[0..n-1], each N x d (host memory); per token i:
 *   rstd[i,s]  = 1/sqrt(mean_j src[s][i,j]^2 + eps)
 *   logit[i,s] = sum_j w_j g_j src[s][i,j] rstd[i,s]
 *   alpha[i,:] = softmax_s(logit[i,:]);  h[i,:] = sum_s alpha[i,s] src[s][i,:]   (=)
 * alpha, rstd: N x n, saved for the backward.
 * bwd, with u = w*g, da_s = dh.src_s, dl_s = alpha_s (da_s - sum_r alpha_r da_r):
 *   dsrc[s] += alpha_s dh + dl_s (rstd_s u - (u.src_s) rstd_s^3 src_s / d)
 *   dw += g * sum_{i,s} dl_s rstd_s src_s ;  dg += w * (same sum)
 * dsrc entries may repeat a pointer only if the caller accepts accumulation
 * order (they are processed in index order per token). */
#ifndef AR_TESTS_DEPTH_ATTN_REF_H
#define AR_TESTS_DEPTH_ATTN_REF_H

void ref_depth_attn_fwd(float *h, float *alpha, float *rstd, const float *const *src, int n,
                        const float *w, const float *g, int N, int d);
void ref_depth_attn_bwd(float *const *dsrc, float *dw, float *dg, const float *dh,
                        const float *alpha, const float *rstd, const float *const *src, int n,
                        const float *w, const float *g, int N, int d);

#endif
