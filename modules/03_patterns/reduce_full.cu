// 03_patterns/reduce_full: the sum of n floats over the whole GPU.
//
// Teaches: reducing across blocks. A block can only synchronize with itself, so each block
// reduces its share of the input to one partial sum, and the partials are then added: by a
// second kernel, or (the design sketched below) by the last block to finish, which it learns
// from an atomic counter. Memory-bound: read the input once, as float4, with several loads in
// flight per thread. Timed against CUB's DeviceReduce::Sum and against a device copy.
//
// Run:  grader run 03/reduce_full      Stuck:  grader hint 03/reduce_full
// Contract: reduce_full.h              Notes:  notes/03_patterns.md
#include "course/exercise.h"
#include "reduce_full.h"

constexpr int kMaxBlocks = 2048;  // the most blocks you will launch (size of the partials array)

// Scratch that needs no allocation: one partial sum per block, and how many blocks have stored
// theirs. A two-kernel design needs only the first (launch the second kernel with one block).
__device__ float g_block_sums[kMaxBlocks];
__device__ unsigned int g_blocks_done = 0;

// Returns the sum of `value` over the 32 lanes of the warp.
__device__ float warp_sum(float value) {
    // TODO: as in 02_memory/reduce_warp: shuffles, no shared memory.
    return value;
}

// Returns the sum of `value` over the whole block (it is enough that thread 0 gets it).
__device__ float block_sum(float value) {
    // TODO: warp_sum, lane 0 of each warp stores its warp's total in a __shared__ array,
    //       __syncthreads(), then warp 0 adds those totals with warp_sum again.
    return value;
}

__global__ void reduce_full_kernel(const float* in, std::size_t n, float* out) {
    // TODO: each thread adds its share of the input into a register: a grid-stride loop over
    //       the n / 4 float4s (reinterpret_cast<const float4*>(in)), with several independent
    //       loads issued before they are added, then the last n % 4 floats one by one. Use
    //       std::size_t for every index: n can exceed 2^31.
    // TODO: block_sum, then thread 0 stores the block's partial in g_block_sums[blockIdx.x],
    //       calls __threadfence() (so other blocks see the store), and atomicAdd(&g_blocks_done,
    //       1) tells it whether this block is the last one to finish (it returns the old count).
    // TODO: the last block (share that flag through __shared__ memory and __syncthreads())
    //       adds all gridDim.x partials, which other SMs wrote: read them so that no stale copy
    //       can be returned (notes/03_patterns.md, "the reading side"). Thread 0 writes *out and
    //       resets g_blocks_done to 0 for the next call.
}

void reduce_full(const float* in, std::size_t n, float* out) {
    // TODO: pick a block size (a multiple of 32: 256 or 512) and launch about as many blocks
    //       as the GPU runs at once: the SM count (cudaDeviceGetAttribute) times the blocks per
    //       SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor), asked once and kept in a static;
    //       fewer for a small n (course::ceil_div), never more than kMaxBlocks. Then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("reduce_full: write the kernel and launch it, then delete this line");
}
