/* The CPU backend's kernels: cpu_<op> for every op of lib/ops.def (their
 * math is there), in one file per family (lib/backend.h lists them); the
 * CUDA versions are lib/cuda/ops_cuda.h's. */
#ifndef AR_CPU_OPS_H
#define AR_CPU_OPS_H

#include "../backend.h"

#define AR_OP(ret, name, params, args, uses) ret cpu_##name params;
#include "../ops.def"
#undef AR_OP

#endif
