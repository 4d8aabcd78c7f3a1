/* BLIS (-Dblas=blis, or -Dblis_products: matmul_blis.c): its threads,
 * and its products on the packed path only.
 *
 * BLIS 0.9.0 (Debian 12's) sends any product with a dimension below its
 * "small/unpacked" thresholds (on Zen 3: m < 512, n < 200 or k < 240 in
 * fp32, which takes every weight gradient of a d_model 256 layer) to
 * assembly kernels that read past the end of an operand (by 32 bytes to
 * a kilobyte): a product whose operand ends at the end of a mapped page
 * faults
 * (tests/test_matmul_cpu.c, products_read_nothing_past_their_operands:
 * from one row and two columns up; OpenBLAS and BLIS's packed path read
 * nothing past one).  Thresholds of 1 send every product, fp32 and
 * fp64 (GSL's), down the packed path, which copies each operand within
 * its bounds.  Set when a program with the CPU backend loads, before any
 * product runs. */
#include <blis.h>

#include "blis_setup.h"

__attribute__((constructor)) static void blis_packed_products_only(void)
{
    cntx_t *c = bli_gks_query_cntx();
    blksz_t none;
    bli_blksz_init_easy(&none, 1, 1, 1, 1);
    bli_cntx_set_l3_sup_thresh(3, BLIS_MT, &none, BLIS_NT, &none, BLIS_KT, &none, c);
}

void ar_blis_set_threads(int n) { bli_thread_set_num_threads(n); }
