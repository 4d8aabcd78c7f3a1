/* One warp's tensor-core product at the register level: PTX's
 * mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32,
 *
 *   D (16 x 8, fp32) = A (16 x 16, bf16) B (16 x 8, bf16) + C (16 x 8, fp32)
 *
 * whose fragments, unlike WMMA's, have a documented place in each lane
 * (PTX ISA, "Matrix Fragments for mma.m16n8k16"), so a kernel can rescale
 * the rows of an accumulator in registers and use one product's result as
 * the next one's operand (the fused attention's forward does both).  With
 * g = lane / 4 and q = lane % 4, lane holds
 *   A: a[0] = (g, 2q..2q+1), a[1] = (g+8, 2q..2q+1),
 *      a[2] = (g, 2q+8..2q+9), a[3] = (g+8, 2q+8..2q+9)   (row, columns)
 *   B: b[0] = (2q..2q+1, g), b[1] = (2q+8..2q+9, g)         (rows, column)
 *   C, D: c[0], c[1] = (g, 2q), (g, 2q+1); c[2], c[3] = (g+8, 2q), (g+8, 2q+1)
 * each a[i], b[i] two bf16 in one 32-bit register, the lower-numbered
 * element in the low half (ar_pack_bf16).  Every lane of the warp takes
 * part.
 *
 * The fragments come from shared memory by ldmatrix (PTX's
 * ldmatrix.sync.aligned.m8n8.{x2,x4}[.trans].shared.b16): each of 2 or 4
 * 8 x 8 bf16 matrices is named by 8 lanes' row addresses (lanes 8m ..
 * 8m + 7 the rows of matrix m, 16 bytes each, 16-byte aligned), and
 * register m of lane (g, q) gets its elements (g, 2q..2q+1), or with
 * .trans (2q..2q+1, g): one instruction a warp where 32-bit loads would
 * take 2 to 4 a lane (the column pairs of a .trans need 16-bit loads).
 *
 * The PTX needs sm_80 (ldmatrix sm_75).  Where no device code is compiled
 * (the CUDA emulator of tests/cuda_emu, which compiles these sources for
 * the host), the product is ar_mma_emulated and the loads
 * ar_ldmatrix_emulated, which only the emulator defines: the first
 * gathers the warp's fragments, multiplies exactly and adds in k order;
 * the second gathers the warp's row addresses and reads the matrices. */
#ifndef AR_CUDA_MMA_H
#define AR_CUDA_MMA_H

#include <cuda_bf16.h>
#include <stdint.h>

/* lo and hi rounded to bf16, lo in the low 16 bits */
__device__ static inline uint32_t ar_pack_bf16(float lo, float hi)
{
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16(lo)) |
           ((uint32_t)__bfloat16_as_ushort(__float2bfloat16(hi)) << 16);
}

#if !defined(__CUDA_ARCH__)
void ar_mma_emulated(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4]);
void ar_ldmatrix_emulated(uint32_t *r, int n, int trans, const void *row);
#endif

/* r[0 .. N-1] = the N (2 or 4) 8 x 8 matrices whose rows lanes 0-7,
 * 8-15, 16-23, 24-31 point at (row: this lane's; for N = 2 the other
 * lanes' addresses are not read), transposed where TRANS */
template <int N, int TRANS> __device__ static inline void ar_ldmatrix(uint32_t *r, const __nv_bfloat16 *row)
{
    static_assert(N == 2 || N == 4, "ldmatrix loads 1, 2 or 4 matrices; these kernels use 2 or 4");
#if defined(__CUDA_ARCH__)
    unsigned a = (unsigned)__cvta_generic_to_shared(row);
    if constexpr (N == 4 && !TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else if constexpr (N == 4)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else if constexpr (!TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(a));
#else
    ar_ldmatrix_emulated(r, N, TRANS, row);
#endif
}

/* d = A b + c for the warp's fragments (d may be c) */
__device__ static inline void ar_mma_16816(float d[4], const uint32_t a[4], const uint32_t b[2], const float c[4])
{
#if defined(__CUDA_ARCH__)
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                 "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};\n"
                 : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
                   "f"(c[2]), "f"(c[3]));
#else
    ar_mma_emulated(d, a, b, c);
#endif
}

#endif
