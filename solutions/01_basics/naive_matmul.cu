// 01_basics/naive_matmul: one thread per element of C. Reference solution.
//
// Teaches: mapping a 2D output onto a 2D grid, a dot product per thread, and (in the timed case)
// how far a kernel that reads every operand from memory is from cuBLAS: the starting point of
// the tiling in module 02 and of the SGEMM ladder in module 04.
//
// Run:  grader run 01/naive_matmul --solutions
// Contract: naive_matmul.h             Notes:  notes/01_basics.md
#include "course/exercise.h"
#include "naive_matmul.h"

__global__ void naive_matmul_kernel(int M, int N, int K, const float* __restrict__ A,
                                    const float* __restrict__ B, float* __restrict__ C) {
    // x along the columns of C. The 32 threads of a warp share one row and take 32 neighbouring
    // columns, so at every step k they read ONE float of A (the same address: a broadcast) and
    // 32 neighbouring floats of row k of B (128 contiguous bytes: coalesced). With x along the
    // rows instead, the warp would read 32 floats of B that are N * 4 bytes apart (32 separate
    // transactions) and 32 different rows of A.
    const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    const int row = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
    // The grid sticks out past the right and the bottom edge of C.
    if (row >= M || col >= N) return;

    // Row `row` of A starts at row * K; column `col` of B is every N-th float from B + col.
    // All indices are below M * K, K * N or M * N, which the contract keeps under 2^31.
    float sum = 0.0f;
    for (int k = 0; k < K; ++k) sum += A[row * K + k] * B[k * N + col];
    C[row * N + col] = sum;
}

void naive_matmul(int M, int N, int K, const float* A, const float* B, float* C) {
    // 32 x 8 = 256 threads: a warp per 32 columns of one row of C, 8 rows per block. The 8 warps
    // of a block read the same 128 bytes of B at each step k, so 7 of them find it in L1.
    const dim3 threads(32, 8);
    const dim3 blocks(course::ceil_div(N, threads.x), course::ceil_div(M, threads.y));
    naive_matmul_kernel<<<blocks, threads>>>(M, N, K, A, B, C);
    CUDA_CHECK_LAUNCH();
}
