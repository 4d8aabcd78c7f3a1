/* The CUDA backend's kernels: cuda_<op> for every op of lib/ops.def (their
 * math is there), in one .cu file per family (lib/backend.h lists them);
 * each runs on ar_cuda_stream(), and lists of buffers are host arrays of
 * device pointers.  The CPU versions are lib/cpu/ops_cpu.h's. */
#ifndef AR_CUDA_OPS_H
#define AR_CUDA_OPS_H

#include "../backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define AR_OP(ret, name, params, args, uses) ret cuda_##name params;
#include "../ops.def"
#undef AR_OP

#ifdef __cplusplus
}
#endif

#endif
