// 04_sgemm/sgemm_smem: shared-memory cache blocking with 32 x 32 tiles. Reference solution.
//
// Teaches: loading a tile of A and a tile of B into shared memory once per block, so that each
// float fetched from global memory serves 32 multiply-adds; the two barriers of the K loop (the
// tiles are complete before anyone reads them, and read by everyone before they are
// overwritten); zero-filled tiles at the edges. One thread per element of C, as in
// sgemm_coalesced: only where the operands come from changes.
//
// Run:  grader run 04/sgemm_smem --solutions       Ladder:  grader report 04 --solutions
// Contract: sgemm.h                                Notes:   notes/04_sgemm.md
#include "course/exercise.h"
#include "sgemm_smem.h"

namespace {

constexpr int kTile = 32;                // C tile, A tile and B tile are all kTile x kTile
constexpr int kThreads = kTile * kTile;  // one thread per element of the C tile

static_assert(kThreads <= 1024, "a block holds at most 1024 threads");

}  // namespace

__global__ void sgemm_smem_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                  const float* __restrict__ B, float beta, float* __restrict__ C) {
    // a_tile holds A[row0 .. row0 + 32)[k0 .. k0 + 32), b_tile holds B[k0 .. k0 + 32)[col0 ..
    // col0 + 32). In the inner loop a warp (one ty, 32 tx) reads a_tile[ty][k] (one address: a
    // broadcast) and b_tile[k][0..31] (32 banks): no bank conflict, no padding needed.
    __shared__ float a_tile[kTile][kTile];
    __shared__ float b_tile[kTile][kTile];

    // As in sgemm_coalesced: consecutive threads take consecutive columns.
    const int tx = static_cast<int>(threadIdx.x) % kTile;
    const int ty = static_cast<int>(threadIdx.x) / kTile;
    const int row = blockIdx.y * kTile + ty;  // this thread's element of C
    const int col = blockIdx.x * kTile + tx;

    // No early return for threads outside C: every thread loads its share of the tiles and
    // reaches the barriers.
    float sum = 0.0f;
    for (int k0 = 0; k0 < K; k0 += kTile) {
        // Thread (tx, ty) loads element (ty, tx) of both tiles; a warp reads 32 consecutive
        // floats of one row of A and of B (coalesced). Outside A or B (the last tile along M,
        // N or K) it stores 0, which adds nothing to the dot products.
        a_tile[ty][tx] = row < M && k0 + tx < K ? A[row * K + k0 + tx] : 0.0f;
        b_tile[ty][tx] = k0 + ty < K && col < N ? B[(k0 + ty) * N + col] : 0.0f;
        // Every thread reads a whole row of a_tile and column of b_tile, written by 63 others:
        // wait until all are loaded.
        __syncthreads();

#pragma unroll
        for (int k = 0; k < kTile; ++k) sum += a_tile[ty][k] * b_tile[k][tx];
        // The next iteration overwrites the tiles: wait until every thread is done reading.
        __syncthreads();
    }

    if (row < M && col < N) {
        // beta == 0 must not read C: it may hold NaN, and 0 * NaN is NaN.
        const int c = row * N + col;
        C[c] = beta == 0.0f ? alpha * sum : alpha * sum + beta * C[c];
    }
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // One block of 1024 threads per 32 x 32 tile of C; ceil_div covers the partial tiles at the
    // right and bottom edges.
    const dim3 grid(course::ceil_div(N, kTile), course::ceil_div(M, kTile));
    sgemm_smem_kernel<<<grid, kThreads>>>(M, N, K, alpha, A, B, beta, C);
    CUDA_CHECK_LAUNCH();
}
