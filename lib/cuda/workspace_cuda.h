/* Grow-only device scratch of the CUDA backend's ops (ar_cu_ws, in
 * backend_cuda.cu; the CPU backend's is lib/cpu/workspace.h): at least
 * `bytes` bytes, 256-byte aligned, contents undefined.  A slot is
 * reallocated (after a stream sync) only when a call asks for more than it
 * holds, so the training loop allocates nothing in steady state.  Ops are
 * ordered on the one stream, so an op may reuse a slot an earlier op used;
 * within one op, areas in use at the same time need distinct slots. */
#ifndef AR_CUDA_WORKSPACE_H
#define AR_CUDA_WORKSPACE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CU_WS_ROWS: the per-block partials of the row-block ops (rows_cuda.h);
 * CU_WS_MM_A, _B, _C: a product's operands rounded to bf16
 * (matmul_cuda.cu); CU_WS_WEIGHTS: the bf16 copy of the parameters
 * (set_weight_copy, matmul_cuda.cu), kept across ops */
enum {
    CU_WS_RED,
    CU_WS_PART,
    CU_WS_ROPE,
    CU_WS_SORT,
    CU_WS_ROWS,
    CU_WS_MM_A,
    CU_WS_MM_B,
    CU_WS_MM_C,
    CU_WS_WEIGHTS,
    CU_WS_NSLOTS
};
void *ar_cu_ws(int slot, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
