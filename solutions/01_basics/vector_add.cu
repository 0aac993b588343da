// 01_basics/vector_add: vector add with a grid-stride loop. Reference solution.
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
    // correct for any grid size, including one smaller than n.
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * blockDim.x;
    // Consecutive threads touch consecutive floats: each warp reads 128 contiguous bytes per
    // array, one fully coalesced transaction.
    for (std::size_t i = first; i < n; i += stride) c[i] = a[i] + b[i];
}

void vector_add(const float* a, const float* b, float* c, std::size_t n) {
    // 256 threads = 8 warps per block; one element per thread. The last block is partial when n
    // is not a multiple of 256: the loop's `i < n` keeps its extra threads from touching memory.
    // (Enough blocks to cover n outright keeps many loads in flight, which is what bandwidth
    // needs; the grid-stride loop is what keeps the kernel correct if the grid were capped.)
    const int threads = 256;
    const std::size_t blocks = course::ceil_div(n, threads);
    vector_add_kernel<<<static_cast<unsigned>(blocks), threads>>>(a, b, c, n);
    CUDA_CHECK_LAUNCH();
}
