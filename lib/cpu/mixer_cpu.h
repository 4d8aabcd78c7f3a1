/* The scalar versions of the CPU backend's general depth mixer ops
 * (lib/cpu/mixer_cpu.c; the ops are cpu_depth_mix_* of ops_cpu.h, their
 * math in lib/ops.def): the fast ops' reference in the tests, and what
 * they run for the shapes they do not take (d not a multiple of 16, or
 * head width neither a multiple nor a divisor of 16).  Two sweeps of every
 * source row per token, scalar reductions. */
#ifndef AR_CPU_MIXER_H
#define AR_CPU_MIXER_H

#include "../backend.h"

void cpu_depth_mix_fwd_simple(const ar_depth_mix *m, float *h);
void cpu_depth_mix_bwd_simple(const ar_depth_mix *m, float *const *dsrc, float *dw, float *dg,
                              float *dtheta, const float *dh);
void cpu_depth_mix_bwd_chunk_simple(const ar_depth_mix_chunk *c, float *const *dsrc,
                                    float *const *dw, float *const *dg, float *const *dtheta,
                                    const float *const *dh, const float *const *cdot);

#endif
