// 01_basics/hello_threads: every thread finds its own element, in a 1D and in a 2D grid.
// Reference solution.
//
// Teaches: blockIdx, blockDim, threadIdx and gridDim; the global index of a thread in 1D and in
// 2D (x = column, y = row); sizing a grid with ceil_div; the bounds guard of the last, partial
// block. No timing: the checker only looks at which thread wrote which element.
//
// Run:  grader run 01/hello_threads --solutions
// Contract: hello_threads.h            Notes:  notes/01_basics.md
#include "course/exercise.h"
#include "hello_threads.h"

__global__ void global_index_1d_kernel(int* out, int n) {
    // blockIdx.x whole blocks of blockDim.x threads come before this block; threadIdx.x is the
    // position inside it. (blockDim.x, not gridDim.x: gridDim.x counts blocks, not threads.)
    // n <= 2^30, so even the last thread's index (below n + blockDim.x) fits an int.
    const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    // The last block is partial when n is not a multiple of blockDim.x: its extra threads must
    // not store, or they write past the end of out.
    if (i < n) out[i] = i;
}

__global__ void global_index_2d_kernel(int* out, int rows, int cols) {
    // The same formula once per axis. x runs along a row, so the 32 threads of a warp (threadIdx.x
    // 0..31 of one threadIdx.y) write 32 neighbouring ints: 128 contiguous bytes, one coalesced
    // store. With cols, rows <= 65535 and blocks of 32 x 8 both fit an int with room to spare.
    const int col = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
    const int row = static_cast<int>(blockIdx.y * blockDim.y + threadIdx.y);
    // Both edges need the guard: blocks stick out past the last column when cols is not a
    // multiple of 32, and past the last row when rows is not a multiple of 8. Without the column
    // test, a thread past the right edge would land on the start of the next row.
    // row * cols + col < rows * cols < 2^31: no overflow.
    if (row < rows && col < cols) out[row * cols + col] = row * cols + col;
}

void global_index_1d(int* out, int n) {
    // 256 threads = 8 warps per block; ceil_div rounds up, so the grid covers all n elements and
    // the last block may be partial (hence the guard in the kernel).
    const int threads = 256;
    const int blocks = course::ceil_div(n, threads);
    global_index_1d_kernel<<<blocks, threads>>>(out, n);
    CUDA_CHECK_LAUNCH();
}

void global_index_2d(int* out, int rows, int cols) {
    // 32 x 8 = 256 threads: one warp per row segment of 32 columns, 8 rows per block. gridDim.y
    // may be at most 65535, and ceil_div(rows, 8) <= 8192 is well inside it.
    const dim3 threads(32, 8);
    const dim3 blocks(course::ceil_div(cols, threads.x), course::ceil_div(rows, threads.y));
    global_index_2d_kernel<<<blocks, threads>>>(out, rows, cols);
    CUDA_CHECK_LAUNCH();
}
