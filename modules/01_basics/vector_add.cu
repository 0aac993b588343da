// 01_basics/vector_add: vector add with a grid-stride loop.
//
// Teaches: the global thread index, covering any n with ceil_div and a bounds guard, and the
// grid-stride loop that lets a grid of any size process any n. Memory-bound: the checker reports
// your bandwidth next to a device-to-device copy of the same size.
//
// Run:  grader run 01/vector_add       Stuck:  grader hint 01/vector_add
// Contract: vector_add.h               Notes:  notes/01_basics.md
#include "course/exercise.h"
#include "vector_add.h"

__global__ void vector_add_kernel(const float* a, const float* b, float* c, std::size_t n) {
    // TODO: compute this thread's global index i from blockIdx.x, blockDim.x and threadIdx.x
    //       (as std::size_t: the product blockIdx.x * blockDim.x can overflow an int), and the
    //       grid's stride (the number of threads in the whole grid).
    // TODO: loop: c[i] = a[i] + b[i] for i, i + stride, i + 2 * stride, ... while i < n.
}

void vector_add(const float* a, const float* b, float* c, std::size_t n) {
    // TODO: pick a block size (a multiple of 32, e.g. 256), compute the number of blocks with
    //       course::ceil_div(n, threads), launch vector_add_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("vector_add: launch vector_add_kernel, then delete this line");
}
