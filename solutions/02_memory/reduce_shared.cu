// 02_memory/reduce_shared: a block sums its slice through a shared-memory tree. Reference solution.
//
// Teaches: shared memory as a block's scratchpad, __syncthreads() between the levels of a tree,
// sequential addressing (the active threads stay contiguous: no divergent modulo, no bank
// conflicts), and adding during the load so that no thread idles in the first step. The checker
// verifies every block's partial exactly and reports the bandwidth next to a device copy.
//
// Run:  grader run 02/reduce_shared --solutions
// Contract: reduce_shared.h            Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "reduce_shared.h"

__global__ void reduce_shared_kernel(const float* __restrict__ in, std::size_t n,
                                     float* __restrict__ partials) {
    __shared__ float sums[kReduceSharedThreads];
    const unsigned tid = threadIdx.x;

    // Block b owns in[b * 512, (b + 1) * 512). Thread t adds the elements at offsets t and
    // t + 256 of that slice: both loads are coalesced (consecutive threads, consecutive floats),
    // and the tree below starts with 256 values instead of 512. Widen blockIdx.x before the
    // multiplication: the element index passes 2^31 on inputs of 8 GiB.
    const std::size_t first =
        static_cast<std::size_t>(blockIdx.x) * kReduceSharedItemsPerBlock + tid;
    const std::size_t second = first + kReduceSharedThreads;
    // The last slice may be short: missing elements count as 0, the identity of the sum, so every
    // thread still joins the tree (and reaches every __syncthreads() below).
    float sum = first < n ? in[first] : 0.0f;
    if (second < n) sum += in[second];
    sums[tid] = sum;
    __syncthreads();  // every thread's value is in shared memory before anyone reads a neighbour's

    // Tree with sequential addressing: at each level the lower half of the active threads adds
    // the upper half (thread t adds slot t + active to slot t). Active threads are always
    // 0 .. active-1, so whole warps drop out together (no divergence inside a warp while
    // active >= 32) and a warp reads 32 consecutive floats (one per bank: no conflict).
    for (unsigned active = kReduceSharedThreads / 2; active > 0; active /= 2) {
        if (tid < active) sums[tid] += sums[tid + active];
        // Level l + 1 reads what level l wrote, possibly in another warp: wait for all of them.
        __syncthreads();
    }

    if (tid == 0) partials[blockIdx.x] = sums[0];
}

void reduce_shared(const float* in, std::size_t n, float* partials) {
    // One block per 512-element slice; ceil_div gives the last, partial slice its own block.
    const std::size_t blocks = course::ceil_div(n, kReduceSharedItemsPerBlock);
    reduce_shared_kernel<<<static_cast<unsigned>(blocks), kReduceSharedThreads>>>(in, n, partials);
    CUDA_CHECK_LAUNCH();
}
