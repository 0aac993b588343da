// 01_basics/naive_matmul: one thread per element of C.
//
// Teaches: mapping a 2D output onto a 2D grid, a dot product per thread, and (in the timed case)
// how far a kernel that reads every operand from memory is from cuBLAS: the starting point of
// the tiling in module 02 and of the SGEMM ladder in module 04.
//
// Run:  grader run 01/naive_matmul     Stuck:  grader hint 01/naive_matmul
// Contract: naive_matmul.h             Notes:  notes/01_basics.md
#include "course/exercise.h"
#include "naive_matmul.h"

__global__ void naive_matmul_kernel(int M, int N, int K, const float* __restrict__ A,
                                    const float* __restrict__ B, float* __restrict__ C) {
    // TODO: this thread's element of C: the column from the x components, the row from the y
    //       components (x along the columns: the threads of a warp then read neighbouring floats
    //       of B). Threads outside the M x N matrix do nothing.
    // TODO: sum over k = 0 .. K-1 of A(row, k) * B(k, col) in a float register, with
    //       A(row, k) = A[row * K + k] and B(k, col) = B[k * N + col]; then store the sum to
    //       C[row * N + col].
}

void naive_matmul(int M, int N, int K, const float* A, const float* B, float* C) {
    // TODO: a 2D block (e.g. dim3 threads(32, 8)) and a 2D grid with enough blocks along x for
    //       the N columns and along y for the M rows (course::ceil_div); launch
    //       naive_matmul_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("naive_matmul: launch naive_matmul_kernel, then delete this line");
}
