// 01_basics/matrix_add_2d: C = A + B on matrices with a leading dimension. Reference solution.
//
// Teaches: a 2D grid over a 2D array (x along columns, so that warps read whole row segments),
// row-major addressing with a leading dimension (row r starts at r * ld, not at r * cols), guards
// on both edges, and 64-bit index arithmetic. Memory-bound: the checker reports the bandwidth next
// to a device-to-device copy.
//
// Run:  grader run 01/matrix_add_2d --solutions
// Contract: matrix_add_2d.h            Notes:  notes/01_basics.md
#include <cstddef>

#include "course/exercise.h"
#include "matrix_add_2d.h"

__global__ void matrix_add_2d_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                     float* __restrict__ C, int rows, int cols, int ld) {
    // x runs along a row: the 32 threads of a warp (threadIdx.x 0..31, one threadIdx.y) touch 32
    // neighbouring floats of one row, 128 contiguous bytes per array, one coalesced access each.
    // With y along the row instead, a warp would touch 32 different rows, ld * 4 bytes apart:
    // 32 separate memory transactions for the same 128 useful bytes.
    const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    const int row = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
    // Blocks stick out past the last column and the last row. The column guard is against cols,
    // not ld: the floats between cols and ld are padding that belongs to someone else.
    if (row < rows && col < cols) {
        // Row r starts r * ld floats into the buffer. In 64 bits: rows * ld can pass 2^31.
        const std::size_t i = static_cast<std::size_t>(row) * ld + col;
        C[i] = A[i] + B[i];
    }
}

void matrix_add_2d(const float* A, const float* B, float* C, int rows, int cols, int ld) {
    // 32 x 8 = 256 threads: a warp per 32-column row segment, 8 rows per block. rows <= 65535
    // needs at most 8192 blocks along y (the limit is 65535); x allows 2^31 - 1 blocks.
    const dim3 threads(32, 8);
    const dim3 blocks(course::ceil_div(cols, threads.x), course::ceil_div(rows, threads.y));
    matrix_add_2d_kernel<<<blocks, threads>>>(A, B, C, rows, cols, ld);
    CUDA_CHECK_LAUNCH();
}
