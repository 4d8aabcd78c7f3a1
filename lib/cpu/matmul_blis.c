/* The linear layers' large forward and dx products on BLIS's own sgemm,
 * on AMD CPUs, where OpenBLAS stays the CBLAS (for the weight gradients,
 * attention, GSL and the rest).
 *
 * Why: on an AMD EPYC Zen 3 (2 threads), BLIS's zen3 kernels ran the
 * forward products out = x W^T 20-35% faster than OpenBLAS's Zen sgemm
 * at d_model 256-688 and dx += dout W a little faster, while OpenBLAS
 * stayed ahead on dW += dout^T x; bench-small trained 9-15% and inferred
 * 19-37% faster with them on BLIS.  On a Zen 4 the two libraries were
 * level (BENCHMARKS.md, "Small products").  On other CPUs nothing was
 * measured, so OpenBLAS keeps every product there.
 *
 * Which products: those libxsmm does not take (a weight of more than
 * 32768 floats, matmul_xsmm.c) with at least BLIS_MIN_ROWS token rows.
 * Shorter products spend more on BLIS's packing and its threads'
 * barriers than on arithmetic (its packed path, the only one attnres lets
 * it take: blis_setup.c).
 *
 * Symbols: BLIS is linked after OpenBLAS, so the cblas_* and BLAS names
 * both export resolve to OpenBLAS (the dynamic linker takes the first
 * library in load order that defines a symbol); only bli_* calls reach
 * BLIS.
 *
 * Determinism: BLIS splits only the output among its threads (its jc and
 * ic loops; the k loop stays whole), so a product's bits depend on its
 * shape and the thread count alone, as OpenBLAS's do. */
#include <blis.h>

#include "matmul_blis.h"

#include <stdio.h>

enum { BLIS_MIN_ROWS = 512 };

static int on_amd(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    return __builtin_cpu_is("amd");
#else
    return 0;
#endif
}

int blis_takes(int N)
{
    static int amd = -1;
    if (amd < 0)
        amd = on_amd();
    return amd && N >= BLIS_MIN_ROWS;
}

/* BLIS's general strides read W^T in place: element (i, o) of W^T is
 * W[o in + i], row stride 1, column stride in. */
void blis_matmul_fwd(float *out, const float *x, const float *W, int N, int in, int outd)
{
    float one = 1.0f, zero = 0.0f;
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, N, outd, in, &one, (float *)x, in, 1, (float *)W, 1, in,
              &zero, out, outd, 1);
}

void blis_matmul_dx(float *dx, const float *dout, const float *W, int overwrite, int N, int in, int outd)
{
    float one = 1.0f, beta = overwrite ? 0.0f : 1.0f;
    bli_sgemm(BLIS_NO_TRANSPOSE, BLIS_NO_TRANSPOSE, N, in, outd, &one, (float *)dout, outd, 1, (float *)W, in, 1,
              &beta, dx, in, 1);
}

const char *blis_products_describe(void)
{
    static char name[64];
    if (!blis_takes(BLIS_MIN_ROWS))
        return NULL;
    if (!name[0])
        snprintf(name, sizeof name, "BLIS %s %s", bli_info_get_version_str(),
                 bli_arch_string(bli_arch_query_id()));
    return name;
}
