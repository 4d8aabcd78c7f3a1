/* A stand-in for CUDA's bf16 type (tests/cuda_emu/emu.cc): the storage
 * type and the two conversions the CUDA backend uses, rounding as the
 * device does (to nearest, ties to even; NaN stays NaN). */
#ifndef AR_CUDA_EMU_BF16_H
#define AR_CUDA_EMU_BF16_H

#include <stdint.h>
#include <string.h>

struct __nv_bfloat16 {
    uint16_t bits;
};

inline __nv_bfloat16 __float2bfloat16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return __nv_bfloat16{(uint16_t)((u >> 16) | 0x40u)}; /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return __nv_bfloat16{(uint16_t)(u >> 16)};
}

inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.bits; }

inline float __bfloat162float(__nv_bfloat16 h)
{
    uint32_t u = (uint32_t)h.bits << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#endif
