// 04_sgemm/sgemm_coalesced: one thread per element of C, numbered so that a warp reads
// consecutive memory. Reference solution.
//
// Teaches: the full SGEMM contract (alpha, beta, a C that is read only when beta != 0) and the
// thread-to-element mapping that makes a warp's loads coalesce: 32 consecutive thread numbers
// take 32 consecutive columns of one row of C. The first rung of the ladder; module 01's
// naive_matmul is the rung below it.
//
// Run:  grader run 04/sgemm_coalesced --solutions      Ladder:  grader report 04 --solutions
// Contract: sgemm.h                                    Notes:   notes/04_sgemm.md
#include "course/exercise.h"
#include "sgemm_coalesced.h"

namespace {

constexpr int kTile = 32;                // a block computes a kTile x kTile tile of C
constexpr int kThreads = kTile * kTile;  // one thread per element of the tile

static_assert(kThreads <= 1024, "a block holds at most 1024 threads");

}  // namespace

__global__ void sgemm_coalesced_kernel(int M, int N, int K, float alpha,
                                       const float* __restrict__ A, const float* __restrict__ B,
                                       float beta, float* __restrict__ C) {
    // A 1D block: thread t is in warp t / 32. Consecutive t take consecutive columns (t % 32)
    // of one row (t / 32): at every step k the warp reads one float of A (the same address for
    // all 32 threads: a broadcast) and 32 neighbouring floats of row k of B (128 contiguous
    // bytes: one coalesced request). With row = t % 32 instead, the warp would read 32 floats of
    // B that are N * 4 bytes apart, and 32 different rows of A.
    const int row = blockIdx.y * kTile + static_cast<int>(threadIdx.x) / kTile;
    const int col = blockIdx.x * kTile + static_cast<int>(threadIdx.x) % kTile;
    // The grid sticks out past the right and the bottom edge of C.
    if (row >= M || col >= N) return;

    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += A[row * K + k] * B[k * N + col];
    // beta == 0 must not read C: it may hold NaN, and 0 * NaN is NaN.
    const int c = row * N + col;
    C[c] = beta == 0.0f ? alpha * sum : alpha * sum + beta * C[c];
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // One block of 1024 threads per 32 x 32 tile of C: x walks the tiles along N, y along M
    // (M <= 2^20 keeps grid.y within CUDA's 65535).
    const dim3 grid(course::ceil_div(N, kTile), course::ceil_div(M, kTile));
    sgemm_coalesced_kernel<<<grid, kThreads>>>(M, N, K, alpha, A, B, beta, C);
    CUDA_CHECK_LAUNCH();
}
