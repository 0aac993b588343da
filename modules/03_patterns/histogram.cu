// 03_patterns/histogram: a 256-bin histogram of bytes.
//
// Teaches: privatization. Counting straight into the 256 global bins makes every byte a global
// atomic, and all threads fight over 256 addresses. Give each block its own copy of the
// histogram in shared memory, count there with shared-memory atomics, and add the copy to the
// global bins once, at the end. Then make the copy conflict-free for any input, including one
// that is a single value repeated (every thread hitting the same counter).
//
// Run:  grader run 03/histogram        Stuck:  grader hint 03/histogram
// Contract: histogram.h                Notes:  notes/03_patterns.md
#include "course/exercise.h"
#include "histogram.h"

__global__ void histogram_kernel(const std::uint8_t* data, std::size_t n, unsigned int* bins) {
    // TODO: a __shared__ copy of the 256 counts, zeroed by the block, then __syncthreads().
    // TODO: a grid-stride loop over the data, 16 bytes (one uint4) per step and thread; for each
    //       byte, atomicAdd(&shared_counts[byte], 1). Then the last n % 16 bytes one by one.
    // TODO: __syncthreads(), then add each nonzero shared count to bins[] with one global
    //       atomicAdd per bin and block.
}

void histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins) {
    // TODO: zero the bins (cudaMemsetAsync: it runs in stream order before the kernel). Launch
    //       about as many blocks as the GPU runs at once (SM count x blocks per SM), fewer for a
    //       small n; CUDA_CHECK_LAUNCH().
    COURSE_TODO("histogram_256: write the kernel and launch it, then delete this line");
}
