/* The machine a measurement or a checkpoint comes from, as attnres bench
 * reports it and model.safetensors records it: the CPU's model name, the
 * BLAS library with the kernel set it dispatches to, and the vector
 * instructions attnres's own loops were compiled for.  The last two, with
 * the thread count, decide how float sums are rounded.  Nothing here
 * fails: what cannot be read is "unknown". */
#ifndef AR_MACHINE_H
#define AR_MACHINE_H

#include <stddef.h>

#include "../formats/json.h"

/* The three together, as bench prints them and checkpoints record them. */
typedef struct {
    char cpu[128];  /* ar_machine_cpu */
    char blas[96];  /* ar_machine_blas */
    char build[48]; /* ar_machine_build */
} ar_machine;

/* This process's machine. */
void ar_machine_describe(ar_machine *m);
/* Writes the keys "cpu", "blas" and "build" of m into the open object w. */
void ar_machine_json(ar_jw *w, const ar_machine *m);

/* The first "model name" of cpuinfo (NULL: /proc/cpuinfo), blanks around
 * it trimmed, into buf[n]; "unknown" where the file cannot be read or has
 * no such line (not Linux, or a CPU whose kernel does not name it). */
void ar_machine_cpu(const char *cpuinfo, char *buf, size_t n);

/* The BLAS library, its version and the kernels it runs, into buf[n]:
 * "OpenBLAS 0.3.21 Cooperlake" (openblas_get_config's name and version,
 * then openblas_get_corename: the kernels chosen at load time, so
 * OPENBLAS_CORETYPE shows here); "BLIS 0.9.0 zen3" in a build with
 * -Dblas=blis (its version, then the kernel set it chose); "unknown BLAS"
 * for a build against another CBLAS. */
void ar_machine_blas(char *buf, size_t n);

/* The instruction set this build compiled its own loops for, from the
 * compiler's predefined macros, into buf[n]: "x86-64 avx512f fma",
 * "x86-64 avx2 fma", "x86-64 avx", "x86-64 sse2" (-Dnative=false), or the
 * architecture's name elsewhere.  Another vector width, or fused
 * multiply-adds against separate ones, rounds differently. */
void ar_machine_build(char *buf, size_t n);

/* The kernel set alone ("Cooperlake"), or NULL with a BLAS that does not
 * say. */
const char *ar_machine_blas_core(void);

#endif
