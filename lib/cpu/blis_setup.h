/* BLIS under the CPU backend's products (-Dblas=blis, or the large ones
 * with -Dblis_products): lib/cpu/blis_setup.c */
#ifndef AR_CPU_BLIS_SETUP_H
#define AR_CPU_BLIS_SETUP_H

/* the threads of BLIS's products */
void ar_blis_set_threads(int n);

#endif
