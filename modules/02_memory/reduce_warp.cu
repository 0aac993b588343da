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
    // TODO: five shuffle steps, no shared memory: value += __shfl_xor_sync(0xffffffff, value, m)
    //       for m = 16, 8, 4, 2, 1 leaves the total in every lane.
    return value;
}

__global__ void reduce_warp_kernel(const float* in, std::size_t n, float* partials) {
    // TODO: block b owns in[b * 4096, (b + 1) * 4096), which is float4s b * 1024 .. b * 1024 +
    //       1023 of reinterpret_cast<const float4*>(in). Thread t loads float4s t, t + 256,
    //       t + 512 and t + 768 of the slice (all four before adding any; a zero float4 for those
    //       at or past n / 4, the number of whole float4s) and adds up their 16 floats.
    // TODO: the n % 4 floats after the last whole float4 (indices 4 * (n / 4) .. n - 1) belong
    //       to the last block: there, thread t < n % 4 adds in[4 * (n / 4) + t].
    // TODO: warp_sum(); lane 0 of warp w stores the result in a __shared__ float warp_sums[8];
    //       __syncthreads(); warp 0 takes warp_sums[lane] (0 for lanes >= 8), warp_sum() again,
    //       and lane 0 writes partials[blockIdx.x].
}

void reduce_warp(const float* in, std::size_t n, float* partials) {
    // TODO: one block of kReduceWarpThreads threads per slice:
    //       course::ceil_div(n, kReduceWarpItemsPerBlock) blocks; launch reduce_warp_kernel, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("reduce_warp: write warp_sum and the kernel, launch it, then delete this line");
}
