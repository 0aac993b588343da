// 02_memory/reduce_shared: a block sums its slice through a shared-memory tree.
//
// Teaches: shared memory as a block's scratchpad, __syncthreads() between the levels of a tree,
// sequential addressing (the active threads stay contiguous: no divergent modulo, no bank
// conflicts), and adding during the load so that no thread idles in the first step. The checker
// verifies every block's partial exactly and reports your bandwidth next to a device copy.
//
// Run:  grader run 02/reduce_shared    Stuck:  grader hint 02/reduce_shared
// Contract: reduce_shared.h            Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "reduce_shared.h"

__global__ void reduce_shared_kernel(const float* in, std::size_t n, float* partials) {
    // TODO: declare __shared__ float sums[kReduceSharedThreads].
    // TODO: block b owns in[b * 512, (b + 1) * 512). Thread t loads the elements at offsets t and
    //       t + 256 of the slice (use 0 for any index >= n), adds them and stores the sum in
    //       sums[t]. Compute the index as std::size_t: blockIdx.x * 512 overflows an int once n
    //       passes 2^31.
    // TODO: __syncthreads(), then the tree with sequential addressing: for active = 128, 64, ...,
    //       1, threads t < active add sums[t + active] into sums[t]; a __syncthreads() after each
    //       level (outside the if: every thread of the block must reach it).
    // TODO: thread 0 writes sums[0] to partials[blockIdx.x].
}

void reduce_shared(const float* in, std::size_t n, float* partials) {
    // TODO: one block of kReduceSharedThreads threads per slice:
    //       course::ceil_div(n, kReduceSharedItemsPerBlock) blocks; launch reduce_shared_kernel,
    //       then CUDA_CHECK_LAUNCH().
    COURSE_TODO("reduce_shared: write the kernel and launch it, then delete this line");
}
