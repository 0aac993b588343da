// 02_memory/tiled_matmul: SGEMM through shared-memory tiles. Reference solution.
//
// Teaches: data reuse through shared memory. A block loads a 32 x 32 tile of A and one of B once
// from global memory, and every value is then read 32 times from shared memory; the K loop walks
// the tiles, with a __syncthreads() before the tiles are used and another before they are
// overwritten. Tails on M, N and K are zero-filled. Each thread computes 4 outputs of a column,
// so every value read from the B tile serves 4 multiply-adds. Timed against cuBLAS SGEMM.
//
// Run:  grader run 02/tiled_matmul --solutions
// Contract: tiled_matmul.h             Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "tiled_matmul.h"

namespace {

constexpr int kTile = 32;                           // C tile 32 x 32, A and B tiles 32 x 32
constexpr int kBlockRows = 8;                       // block 32 x 8 threads
constexpr int kRowsPerThread = kTile / kBlockRows;  // each thread: 4 outputs, 8 rows apart

}  // namespace

__global__ void tiled_matmul_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                    float* __restrict__ C, int M, int N, int K) {
    // a_tile holds A[row0 .. row0 + 32)[k0 .. k0 + 32), b_tile holds B[k0 .. k0 + 32)[col0 ..
    // col0 + 32). A warp (fixed threadIdx.y) reads b_tile[k][0..31] (32 banks, no conflict) and
    // a_tile[r][k] (one address: a broadcast, no conflict), so no padding is needed.
    __shared__ float a_tile[kTile][kTile];
    __shared__ float b_tile[kTile][kTile];

    const int tx = threadIdx.x, ty = threadIdx.y;
    const int row0 = blockIdx.y * kTile;  // this block computes C[row0 .. +32)[col0 .. +32)
    const int col0 = blockIdx.x * kTile;
    const int col = col0 + tx;  // the column of C this thread computes
    // This thread's outputs: C[row0 + ty + 8 * i][col] for i = 0..3.
    float acc[kRowsPerThread] = {};

    for (int k0 = 0; k0 < K; k0 += kTile) {
        // Load both tiles: thread (tx, ty) loads rows ty, ty + 8, ty + 16, ty + 24, column tx of
        // each, so a warp reads 32 consecutive floats of a row of A and of B (coalesced).
        // Outside the matrices (the last tiles along M, N or K) it stores 0, which adds nothing
        // to the dot products.
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) {
            const int r = ty + i * kBlockRows;
            const int a_row = row0 + r, a_col = k0 + tx;
            a_tile[r][tx] =
                a_row < M && a_col < K ? A[static_cast<std::size_t>(a_row) * K + a_col] : 0.0f;
            const int b_row = k0 + r;
            b_tile[r][tx] =
                b_row < K && col < N ? B[static_cast<std::size_t>(b_row) * N + col] : 0.0f;
        }
        // Every thread reads the whole row and column of the tiles: wait until all are loaded.
        __syncthreads();

        // 32 steps of k: one read of B serves this thread's 4 rows.
#pragma unroll
        for (int k = 0; k < kTile; ++k) {
            const float b = b_tile[k][tx];
#pragma unroll
            for (int i = 0; i < kRowsPerThread; ++i) acc[i] += a_tile[ty + i * kBlockRows][k] * b;
        }
        // The next iteration overwrites the tiles: wait until every thread is done reading them.
        __syncthreads();
    }

    for (int i = 0; i < kRowsPerThread; ++i) {
        const int row = row0 + ty + i * kBlockRows;
        if (row < M && col < N) C[static_cast<std::size_t>(row) * N + col] = acc[i];
    }
}

void tiled_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    // One block per 32 x 32 tile of C: x walks its columns, y its rows; ceil_div covers the
    // partial tiles at the right and bottom edges. (M <= 2^20 keeps y within CUDA's 65535.)
    const dim3 block(kTile, kBlockRows);
    const dim3 grid(course::ceil_div(N, kTile), course::ceil_div(M, kTile));
    tiled_matmul_kernel<<<grid, block>>>(A, B, C, M, N, K);
    CUDA_CHECK_LAUNCH();
}
