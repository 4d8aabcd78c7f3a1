/* The linear layers' small products on libxsmm (matmul_xsmm.c), built
 * with -Dcpu_gemm=libxsmm.  Each returns 1 when it has computed the
 * product, 0 when the shape is left to OpenBLAS (nothing written then). */
#ifndef AR_CPU_MATMUL_XSMM_H
#define AR_CPU_MATMUL_XSMM_H

/* whether a product of N tokens through an outd x in matrix is libxsmm's */
int xsmm_handles(int N, int in, int outd);
int xsmm_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd);
int xsmm_matmul_bwd(float *dx, float *dW, const float *dout, const float *x, const float *W, int N,
                    int in, int outd);
/* One kernel for other small products (attention's, per head), column-
 * major as libxsmm is: C (m x n) (beta 0: =, 1: +=) A (m x k) B (k x n),
 * leading dimensions lda, ldb, ldc; trans_b: B stored n x k, read
 * transposed.  NULL where libxsmm has none for the shape.  The kernel
 * runs on whatever thread calls xsmm_run. */
typedef void *xsmm_kern;
xsmm_kern xsmm_dispatch(int m, int n, int k, int lda, int ldb, int ldc, float beta, int trans_b);
void xsmm_run(xsmm_kern f, const float *a, const float *b, float *c);

/* the library, its version and the instruction set of its kernels here */
const char *xsmm_describe(void);

#endif
