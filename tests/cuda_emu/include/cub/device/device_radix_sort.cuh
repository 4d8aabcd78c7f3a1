/* A stand-in for cub::DeviceRadixSort (tests/cuda_emu/emu.cc): SortPairs
 * as the CUDA backend calls it, a stable sort of int32 keys (signed order,
 * as cub sorts them) carrying int32 values. */
#ifndef AR_CUDA_EMU_CUB_SORT_H
#define AR_CUDA_EMU_CUB_SORT_H

#include "../../cuda_runtime.h"

cudaError_t emu_sort_pairs(void *tmp, size_t &tmp_bytes, const int32_t *keys_in, int32_t *keys_out,
                           const int32_t *vals_in, int32_t *vals_out, int n, int begin_bit, int end_bit);

namespace cub {
struct DeviceRadixSort {
    static cudaError_t SortPairs(void *tmp, size_t &tmp_bytes, const int32_t *keys_in, int32_t *keys_out,
                                 const int32_t *vals_in, int32_t *vals_out, int n, int begin_bit = 0,
                                 int end_bit = 32, cudaStream_t s = 0)
    {
        (void)s;
        return emu_sort_pairs(tmp, tmp_bytes, keys_in, keys_out, vals_in, vals_out, n, begin_bit, end_bit);
    }
};
} // namespace cub

#endif
