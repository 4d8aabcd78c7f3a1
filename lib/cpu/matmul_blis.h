/* The linear layers' large forward and dx products on BLIS's own sgemm
 * (matmul_blis.c), in a build that links BLIS beside OpenBLAS
 * (-Dblis_products).  Without it blis_takes says 0 and the products are
 * never called, so callers need no #ifdef. */
#ifndef AR_CPU_MATMUL_BLIS_H
#define AR_CPU_MATMUL_BLIS_H

#include <stdlib.h>

#ifdef AR_HAVE_BLIS_PRODUCTS
/* 1 when this process sends a forward or dx product of N token rows (one
 * libxsmm did not take) to BLIS: N >= 512 on an AMD CPU. */
int blis_takes(int N);
/* out (N x outd) = x (N x in) W^T,   W: outd x in */
void blis_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd);
/* dx (N x in) = dout (N x outd) W (outd x in), or += unless overwrite */
void blis_matmul_dx(float *dx, const float *dout, const float *W, int overwrite, int N, int in, int outd);
/* "BLIS 0.9.0 zen3" where blis_takes can say 1 here, else NULL */
const char *blis_products_describe(void);
#else
static inline int blis_takes(int N)
{
    (void)N;
    return 0;
}
/* never reached: blis_takes said 0 */
static inline void blis_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    (void)out, (void)x, (void)W, (void)N, (void)in, (void)outd;
    abort();
}
static inline void blis_matmul_dx(float *dx, const float *dout, const float *W, int overwrite, int N, int in,
                                  int outd)
{
    (void)dx, (void)dout, (void)W, (void)overwrite, (void)N, (void)in, (void)outd;
    abort();
}
static inline const char *blis_products_describe(void) { return NULL; }
#endif

#endif
