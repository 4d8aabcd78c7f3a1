/* The CPU backend's linear layers (no bias): the small products on
 * libxsmm where built with it (matmul_xsmm.c), the large forward and dx
 * products on BLIS on AMD CPUs where built with it (matmul_blis.c), the
 * rest on CBLAS sgemm (OpenBLAS, whose OpenMP build splits only the output
 * among its threads, so products are reproducible for a given thread
 * count; BLIS's too). */
#include "../backend.h"
#include "ops_cpu.h"

#include <cblas.h>

#include "matmul_blis.h"
#include "matmul_xsmm.h"

const char *ar_cpu_small_products(void) { return xsmm_describe(); }
const char *ar_cpu_large_products(void) { return blis_products_describe(); }

/* out = x W^T     x: N x in, W: outd x in, out: N x outd   (=) */
void cpu_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    if (xsmm_matmul_fwd(out, x, W, N, in, outd))
        return;
    if (blis_takes(N))
        blis_matmul_fwd(out, x, W, N, in, outd);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, N, outd, in, 1.0f, x, in, W, in, 0.0f,
                    out, outd);
}

/* dx += dout W   (skipped when dx is NULL; overwrite: =);   dW += dout^T x */
void cpu_matmul_bwd(float *dx, float *dW, const float *dout, const float *x,
                    const float *W, int overwrite, int N, int in, int outd)
{
    if (xsmm_matmul_bwd(dx, dW, dout, x, W, overwrite, N, in, outd))
        return;
    if (dx && blis_takes(N))
        blis_matmul_dx(dx, dout, W, overwrite, N, in, outd);
    else if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, in, outd, 1.0f, dout, outd, W,
                    in, overwrite ? 0.0f : 1.0f, dx, in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, outd, in, N, 1.0f, dout, outd, x, in,
                1.0f, dW, in);
}

/* out = W x     x: in, W: outd x in, out: outd   (=)   (one row of matmul_fwd) */
void cpu_matvec_fwd(float *out, const float *x, const float *W, int in, int outd)
{
    cblas_sgemv(CblasRowMajor, CblasNoTrans, outd, in, 1.0f, W, in, x, 1, 0.0f, out, 1);
}
