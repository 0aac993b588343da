// 02_memory/reduce_warp: warp shuffles sum 32 values without shared memory.
//
// Teaches: __shfl_xor_sync / __shfl_down_sync (registers of one warp exchanged directly, no
// shared memory and no __syncthreads() inside the warp), a block sum in two shuffle rounds with
// one shared slot per warp, and 16-byte float4 loads with several of them in flight per thread:
// the memory-bound version of reduce_shared. The checker verifies every block's partial exactly
// and reports your bandwidth next to a device copy.
//
// Run:  grader run 02/reduce_warp      Stuck:  grader hint 02/reduce_warp
// Contract: reduce_warp.h              Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "reduce_warp.h"

// The sum of `value` over the 32 lanes of the calling warp.
__device__ float warp_sum(float value) {
    // TODO: add up the 32 lanes' values without shared memory and without a barrier: the lanes
    //       of a warp can read each other's registers (notes/02_memory.md, "Warp shuffles").
    //       Every lane calls this, so all 32 take part in each exchange.
    return value;
}

__global__ void reduce_warp_kernel(const float* in, std::size_t n, float* partials) {
    // TODO: block b sums the slice in[b * 4096, (b + 1) * 4096) (cut short at n). Read it as
    //       float4 (in is 16-byte aligned, and so is every slice): each of the 256 threads
    //       issues its 4 loads before it adds any of them, so that 64 bytes per thread are in
    //       flight; a warp's load should cover consecutive float4s. Compute element indices as
    //       std::size_t: n can pass 2^31.
    // TODO: the 1-3 floats after the last whole float4 (when n is not a multiple of 4) belong
    //       to the last block.
    // TODO: the block's sum: each warp reduces its lanes with warp_sum, the 8 warp totals meet
    //       in shared memory (one barrier), one warp adds them, one thread writes
    //       partials[blockIdx.x].
}

void reduce_warp(const float* in, std::size_t n, float* partials) {
    // TODO: one block of kReduceWarpThreads threads per slice:
    //       course::ceil_div(n, kReduceWarpItemsPerBlock) blocks; launch reduce_warp_kernel, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("reduce_warp: write warp_sum and the kernel, launch it, then delete this line");
}
