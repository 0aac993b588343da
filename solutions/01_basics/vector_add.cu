// 01_basics/vector_add: vector add with a grid-stride loop. Reference solution (the readable one;
// vector_add_fast.cu sizes the grid to one wave of the GPU and unrolls the loop).
//
// Teaches: the global thread index, covering any n with ceil_div and a bounds guard, and the
// grid-stride loop that lets a grid of any size process any n. Memory-bound: the checker reports
// the bandwidth next to a device-to-device copy of the same size.
//
// Run:  grader run 01/vector_add --solutions
// Contract: vector_add.h               Notes:  notes/01_basics.md
#include "course/exercise.h"
#include "vector_add.h"

__global__ void vector_add_kernel(const float* a, const float* b, float* c, std::size_t n) {
    // Global index of this thread. Widen before multiplying: blockIdx.x * blockDim.x is computed
    // in 32-bit unsigned arithmetic and wraps past 2^32.
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    // Threads in the whole grid: each thread handles first, first + stride, ... so the kernel is
    // correct for any grid size, including one smaller than n / blockDim.x.
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    // Consecutive threads touch consecutive floats: each warp reads 128 contiguous bytes per
    // array, four whole 32-byte sectors. `i < n` keeps the last, partial block inside the arrays.
    for (std::size_t i = first; i < n; i += stride) c[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* c, std::size_t n) {
    // 256 threads = 8 warps per block, and enough blocks for one thread per element: the loop
    // then runs once per thread (a smaller grid would still be correct).
    const int threads = 256;
    const std::size_t blocks = course::ceil_div(n, threads);
    vector_add_kernel<<<static_cast<unsigned>(blocks), threads>>>(a, b, c, n);
    CUDA_CHECK_LAUNCH();
}
