// 01_basics/matrix_add_2d: C = A + B on matrices with a leading dimension.
//
// Teaches: a 2D grid over a 2D array (x along columns, so that warps read whole row segments),
// row-major addressing with a leading dimension (row r starts at r * ld, not at r * cols), guards
// on both edges, and 64-bit index arithmetic. Memory-bound: the checker reports your bandwidth
// next to a device-to-device copy.
//
// Run:  grader run 01/matrix_add_2d    Stuck:  grader hint 01/matrix_add_2d
// Contract: matrix_add_2d.h            Notes:  notes/01_basics.md
#include <cstddef>

#include "course/exercise.h"
#include "matrix_add_2d.h"

__global__ void matrix_add_2d_kernel(const float* __restrict__ A, const float* __restrict__ B,
                                     float* __restrict__ C, int rows, int cols, int ld) {
    // TODO: the column from the x components (blockIdx.x, blockDim.x, threadIdx.x), the row from
    //       the y components. x must run along a row: neighbouring threads, neighbouring floats.
    // TODO: only for row < rows and col < cols (not col < ld: the padding is not yours): compute
    //       the index of (row, col) as a std::size_t, row * ld + col, and store C = A + B there.
}

void matrix_add_2d(const float* A, const float* B, float* C, int rows, int cols, int ld) {
    // TODO: a 2D block (e.g. dim3 threads(32, 8)) and a 2D grid covering cols along x and rows
    //       along y (course::ceil_div for each); launch matrix_add_2d_kernel, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("matrix_add_2d: launch matrix_add_2d_kernel on a 2D grid, then delete this line");
}
