/* Products of small tiles in shared memory, for kernels that keep their
 * operands on chip (the fused attention of attention_cuda.cu): every
 * thread of the block takes part, and the caller puts a __syncthreads
 * between a product and any read of its result.
 *
 *   C = alpha op(A) op(B)          (acc = 0)
 *   C = C + alpha op(A) op(B)      (acc = 1)
 *
 * C is M x N (row-major, ldc); op(A) is M x K, A stored row-major with
 * lda (ta = 0) or as its K x M transpose (ta = 1); op(B) is K x N, B stored
 * row-major with ldb (tb = 0) or as its N x K transpose (tb = 1).
 *
 * Two element types for A and B:
 *   float           a 4 x 4 block of C a thread (one entry where M or N
 *                   is not a multiple of 4), each entry's K terms in
 *                   order: the fp32 product (SIMT);
 *   __nv_bfloat16   tensor cores through WMMA, 16 x 16 x 16 fragments, one
 *                   warp per 16 x 16 tile of C: bf16 operands, fp32
 *                   accumulation.  M, N, K multiples of 16; ld* multiples
 *                   of 16 elements and tiles 32-byte aligned (WMMA's rules
 *                   for 16-bit operands, 8 elements and 256 bits). */
#ifndef AR_CUDA_TILES_H
#define AR_CUDA_TILES_H

#include "cuda_util.h"

#include <cuda_bf16.h>
#include <mma.h>

typedef __nv_bfloat16 bf16;


/* fp32, in 4 x 4 blocks of C where M and N allow (one thread a block: 8
 * shared-memory reads for 16 multiply-adds, where one entry a thread takes
 * 2 for 1), else one entry a thread; either way each entry's K terms are
 * added in order, so both give the same bits. */
#define TILE_RB 4
__device__ static inline void tile_mm(float *C, int ldc, const float *A, int lda, int ta, const float *B,
                                      int ldb, int tb, int M, int N, int K, float alpha, int acc)
{
    if (M % TILE_RB || N % TILE_RB) {
        for (int e = threadIdx.x; e < M * N; e += blockDim.x) {
            int m = e / N, n = e % N;
            float s = 0.0f;
            for (int k = 0; k < K; k++)
                s += A[ta ? k * lda + m : m * lda + k] * B[tb ? n * ldb + k : k * ldb + n];
            float *c = C + m * ldc + n;
            *c = acc ? *c + alpha * s : alpha * s;
        }
        return;
    }
    int nb = N / TILE_RB;
    for (int e = threadIdx.x; e < (M / TILE_RB) * nb; e += blockDim.x) {
        int m0 = e / nb * TILE_RB, n0 = e % nb * TILE_RB;
        float s[TILE_RB][TILE_RB] = {{0.0f}};
        for (int k = 0; k < K; k++) {
            float a[TILE_RB], b[TILE_RB];
            for (int i = 0; i < TILE_RB; i++) {
                a[i] = A[ta ? k * lda + m0 + i : (m0 + i) * lda + k];
                b[i] = B[tb ? (n0 + i) * ldb + k : k * ldb + n0 + i];
            }
            for (int i = 0; i < TILE_RB; i++)
                for (int j = 0; j < TILE_RB; j++)
                    s[i][j] += a[i] * b[j];
        }
        for (int i = 0; i < TILE_RB; i++)
            for (int j = 0; j < TILE_RB; j++) {
                float *c = C + (m0 + i) * ldc + n0 + j;
                *c = acc ? *c + alpha * s[i][j] : alpha * s[i][j];
            }
    }
}

/* bf16 on tensor cores: warp w takes the 16 x 16 tiles w, w + warps, ... of C */
__device__ static inline void tile_mm(float *C, int ldc, const bf16 *A, int lda, int ta, const bf16 *B,
                                      int ldb, int tb, int M, int N, int K, float alpha, int acc)
{
    using namespace nvcuda;
    int warps = blockDim.x >> 5, tn = N / 16;
    for (int t = threadIdx.x >> 5; t < (M / 16) * tn; t += warps) {
        int m0 = t / tn * 16, n0 = t % tn * 16;
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
        wmma::fill_fragment(c, 0.0f);
        for (int k0 = 0; k0 < K; k0 += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> ar;
            wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::col_major> ac;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> br;
            wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> bc;
            /* op(A)(m, k) at A[k lda + m] is a column-major M x K matrix */
            if (ta)
                wmma::load_matrix_sync(ac, A + k0 * lda + m0, lda);
            else
                wmma::load_matrix_sync(ar, A + m0 * lda + k0, lda);
            if (tb)
                wmma::load_matrix_sync(bc, B + n0 * ldb + k0, ldb);
            else
                wmma::load_matrix_sync(br, B + k0 * ldb + n0, ldb);
            if (ta && tb)
                wmma::mma_sync(c, ac, bc, c);
            else if (ta)
                wmma::mma_sync(c, ac, br, c);
            else if (tb)
                wmma::mma_sync(c, ar, bc, c);
            else
                wmma::mma_sync(c, ar, br, c);
        }
        /* element by element: the same in any fragment layout */
        for (int i = 0; i < c.num_elements; i++)
            c.x[i] *= alpha;
        if (acc) {
            wmma::fragment<wmma::accumulator, 16, 16, 16, float> old;
            wmma::load_matrix_sync(old, C + m0 * ldc + n0, ldc, wmma::mem_row_major);
            for (int i = 0; i < c.num_elements; i++)
                c.x[i] += old.x[i];
        }
        wmma::store_matrix_sync(C + m0 * ldc + n0, c, ldc, wmma::mem_row_major);
    }
}

#endif
