/* A stand-in for CUDA's warp matrix functions (nvcuda::wmma), for
 * tests/cuda_emu/emu.cc: 16 x 16 x 16 fragments of bf16 operands and fp32
 * accumulators, the kinds the CUDA backend uses.
 *
 * On a GPU a fragment is spread over the 32 lanes of a warp in a layout
 * the programming guide leaves unspecified; code may touch fragment.x[i]
 * only element by element, the same for every i.  Here every lane holds
 * the whole 16 x 16 tile (in row-major order, num_elements = 256), which
 * such code cannot tell apart.  Each call is a warp-wide operation: it
 * waits, as __syncwarp does, until all 32 lanes have reached it (a lane
 * that does not is reported, naming the kernel), and checks the rules of
 * load_matrix_sync and store_matrix_sync: the pointer 256-bit aligned,
 * ldm a multiple of 8 elements for 16-bit types and of 4 for float.
 * Operands are bf16 values held as floats; mma_sync multiplies them
 * exactly and adds in fp32, in k order (a tensor core's order and
 * rounding of the sum are its own). */
#ifndef AR_CUDA_EMU_MMA_H
#define AR_CUDA_EMU_MMA_H

#include "cuda_bf16.h"
#include "cuda_runtime.h"

#include <type_traits>

/* the checks of a load or store (emu.cc), then the warp barrier */
void emu_wmma_check(const void *p, unsigned ldm, size_t elem_bytes, const char *what);

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void> struct fragment {
    static_assert(M == 16 && N == 16 && K == 16, "the emulator takes 16 x 16 x 16 fragments");
    enum { num_elements = 256 };
    float x[256]; /* (i, j) at x[16 i + j]: A's M x K, B's K x N, C's M x N */
};

template <typename Use, typename T, typename Layout>
inline void fill_fragment(fragment<Use, 16, 16, 16, T, Layout> &f, float v)
{
    __syncwarp();
    for (int i = 0; i < 256; i++)
        f.x[i] = v;
}

inline float emu_wmma_value(const __nv_bfloat16 &v) { return __bfloat162float(v); }
inline float emu_wmma_value(const float &v) { return v; }

/* an operand tile: (i, j) at p[i ldm + j] (row_major) or p[j ldm + i] */
template <typename Use, typename T, typename Layout>
inline void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout> &f, const T *p, unsigned ldm)
{
    emu_wmma_check(p, ldm, sizeof(T), "load_matrix_sync");
    bool rows = std::is_same<Layout, row_major>::value;
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            f.x[16 * i + j] = emu_wmma_value(rows ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i]);
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float> &f, const float *p, unsigned ldm, layout_t l)
{
    emu_wmma_check(p, ldm, sizeof(float), "load_matrix_sync");
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            f.x[16 * i + j] = l == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
}

inline void store_matrix_sync(float *p, const fragment<accumulator, 16, 16, 16, float> &f, unsigned ldm, layout_t l)
{
    emu_wmma_check(p, ldm, sizeof(float), "store_matrix_sync");
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++)
            (l == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i]) = f.x[16 * i + j];
}

/* d = a b + c */
template <typename LA, typename LB>
inline void mma_sync(fragment<accumulator, 16, 16, 16, float> &d,
                     const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LA> &a,
                     const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LB> &b,
                     const fragment<accumulator, 16, 16, 16, float> &c)
{
    __syncwarp();
    float r[256];
    for (int i = 0; i < 16; i++)
        for (int j = 0; j < 16; j++) {
            float s = c.x[16 * i + j];
            for (int k = 0; k < 16; k++)
                s += a.x[16 * i + k] * b.x[16 * k + j];
            r[16 * i + j] = s;
        }
    for (int i = 0; i < 256; i++)
        d.x[i] = r[i];
}

} // namespace wmma
} // namespace nvcuda

#endif
