/* Small products on libxsmm's JIT kernels (matmul_xsmm.c), built with
 * -Dcpu_gemm=libxsmm.  In a build without it every function here is a
 * stub that takes nothing (0, NULL), so that callers need no #ifdef: they
 * fall back to the CBLAS. */
#ifndef AR_CPU_MATMUL_XSMM_H
#define AR_CPU_MATMUL_XSMM_H

#include <stdlib.h>

/* A kernel for other small products (attention's, per head), column-
 * major as libxsmm is: C (m x n) (beta 0: =, 1: +=) A (m x k) B (k x n),
 * leading dimensions lda, ldb, ldc; trans_b: B stored n x k, read
 * transposed.  NULL where libxsmm has none for the shape.  The kernel
 * runs on whatever thread calls xsmm_run. */
typedef void *xsmm_kern;

#ifdef AR_HAVE_LIBXSMM
/* The linear layers: 1 when the product is computed, 0 when the shape is
 * left to the CBLAS (nothing written then). */
int xsmm_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd);
int xsmm_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W, int overwrite,
                    int N, int in, int outd);
xsmm_kern xsmm_dispatch(int m, int n, int k, int lda, int ldb, int ldc, float beta, int trans_b);
void xsmm_run(xsmm_kern f, const float *a, const float *b, float *c);
/* the library, its version and the instruction set of its kernels here */
const char *xsmm_describe(void);
#else
static inline int xsmm_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    (void)out, (void)x, (void)W, (void)N, (void)in, (void)outd;
    return 0;
}
static inline int xsmm_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W,
                                  int overwrite, int N, int in, int outd)
{
    (void)dx, (void)dW, (void)dout, (void)x, (void)W, (void)overwrite, (void)N, (void)in, (void)outd;
    return 0;
}
static inline xsmm_kern xsmm_dispatch(int m, int n, int k, int lda, int ldb, int ldc, float beta, int trans_b)
{
    (void)m, (void)n, (void)k, (void)lda, (void)ldb, (void)ldc, (void)beta, (void)trans_b;
    return NULL;
}
/* never reached: every dispatch gave NULL */
static inline void xsmm_run(xsmm_kern f, const float *a, const float *b, float *c)
{
    (void)f, (void)a, (void)b, (void)c;
    abort();
}
static inline const char *xsmm_describe(void) { return NULL; }
#endif

#endif
