// 01_basics/hello_threads: every thread finds its own element, in a 1D and in a 2D grid.
//
// Teaches: blockIdx, blockDim, threadIdx and gridDim; the global index of a thread in 1D and in
// 2D (x = column, y = row); sizing a grid with ceil_div; the bounds guard of the last, partial
// block. No timing: the checker only looks at which thread wrote which element.
//
// Run:  grader run 01/hello_threads    Stuck:  grader hint 01/hello_threads
// Contract: hello_threads.h            Notes:  notes/01_basics.md
#include "course/exercise.h"
#include "hello_threads.h"

__global__ void global_index_1d_kernel(int* out, int n) {
    // TODO: compute this thread's global index i: the blockIdx.x blocks before this one hold
    //       blockDim.x threads each, and threadIdx.x is the position inside this block.
    // TODO: the last block sticks out past n when n is not a multiple of blockDim.x: only when
    //       i < n, store out[i] = i.
}

__global__ void global_index_2d_kernel(int* out, int rows, int cols) {
    // TODO: the column is the global index along x (blockIdx.x, blockDim.x, threadIdx.x), the row
    //       the global index along y (the same three with .y).
    // TODO: blocks stick out past the right and the bottom edge: only when the row is inside
    //       rows and the column inside cols, store out[row * cols + col] = row * cols + col.
}

void global_index_1d(int* out, int n) {
    // TODO: pick a block size (a multiple of 32, the warp size, e.g. 256), compute the number of
    //       blocks with course::ceil_div(n, threads), launch global_index_1d_kernel, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("hello_threads: launch global_index_1d_kernel, then delete this line");
}

void global_index_2d(int* out, int rows, int cols) {
    // TODO: a 2D block, e.g. dim3 threads(32, 8): 32 threads along x, so that a warp covers 32
    //       neighbouring columns of one row. A 2D grid with enough blocks along x for cols and
    //       along y for rows (course::ceil_div for each). Launch, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("hello_threads: launch global_index_2d_kernel, then delete this line");
}
