// 02_memory/reduce_warp: warp shuffles sum 32 values without shared memory. Reference solution.
//
// Teaches: __shfl_xor_sync (registers of one warp exchanged directly, no shared memory and no
// __syncthreads() inside the warp), a block sum in two shuffle rounds with one shared slot per
// warp, and 16-byte float4 loads with several of them in flight per thread: the memory-bound
// version of reduce_shared. The checker verifies every block's partial exactly and reports the
// bandwidth next to a device copy.
//
// Run:  grader run 02/reduce_warp --solutions
// Contract: reduce_warp.h              Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "reduce_warp.h"

namespace {

constexpr int kWarpSize = 32;
constexpr int kWarpsPerBlock = kReduceWarpThreads / kWarpSize;  // 8
constexpr int kVectorsPerThread = 4;                            // float4 loads per thread
constexpr std::size_t kVectorsPerBlock = kReduceWarpItemsPerBlock / 4;
static_assert(kVectorsPerBlock == kVectorsPerThread * kReduceWarpThreads,
              "a slice is 4 float4 per thread");

}  // namespace

// The sum of `value` over the 32 lanes of the warp, returned to every lane. Butterfly: at step
// `mask` each lane adds the value of the lane whose index differs in that one bit, so after the
// steps 16, 8, 4, 2, 1 every lane has combined all 32. The full mask says all 32 lanes take part
// (they do: no lane has returned early).
__device__ float warp_sum(float value) {
    for (int mask = kWarpSize / 2; mask > 0; mask /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, mask);
    return value;
}

__global__ void reduce_warp_kernel(const float* __restrict__ in, std::size_t n,
                                   float* __restrict__ partials) {
    __shared__ float warp_sums[kWarpsPerBlock];
    const int lane = threadIdx.x % kWarpSize;
    const int warp = threadIdx.x / kWarpSize;

    // Block b owns floats [b * 4096, (b + 1) * 4096), i.e. float4s [b * 1024, (b + 1) * 1024)
    // (in is 16-byte aligned and 4096 is a multiple of 4, so every slice starts on a float4).
    // Thread t takes float4s t, t + 256, t + 512, t + 768 of the slice: each load instruction of a
    // warp reads 32 consecutive float4 = 512 contiguous bytes.
    const float4* in4 = reinterpret_cast<const float4*>(in);
    const std::size_t whole_vectors = n / 4;  // float4s lying entirely inside [0, n)
    const std::size_t first = static_cast<std::size_t>(blockIdx.x) * kVectorsPerBlock + threadIdx.x;
    // All four loads are issued before any add uses them: four independent 16-byte requests in
    // flight per thread is what keeps the memory system busy. Past the end, 0 stands in.
    float4 v[kVectorsPerThread];
#pragma unroll
    for (int k = 0; k < kVectorsPerThread; ++k) {
        const std::size_t i = first + static_cast<std::size_t>(k) * kReduceWarpThreads;
        v[k] = i < whole_vectors ? in4[i] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kVectorsPerThread; ++k) sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);

    // The n % 4 floats after the last whole float4 (indices 4 * whole_vectors .. n - 1): they lie
    // in the last block's slice (a slice boundary is a multiple of 4), one per thread there.
    const std::size_t tail = 4 * whole_vectors + threadIdx.x;
    const bool last_block = blockIdx.x == (n - 1) / kReduceWarpItemsPerBlock;
    if (last_block && tail < n) sum += in[tail];

    // Round 1: each warp sums its 32 values in registers; lane 0 parks the warp's sum in shared
    // memory (8 floats for the whole block).
    sum = warp_sum(sum);
    if (lane == 0) warp_sums[warp] = sum;
    // The 8 slots are written by 8 different warps and read by warp 0: wait for all of them.
    __syncthreads();
    // Round 2: warp 0 sums the 8 warp sums (its other lanes contribute 0).
    if (warp == 0) {
        sum = warp_sum(lane < kWarpsPerBlock ? warp_sums[lane] : 0.0f);
        if (lane == 0) partials[blockIdx.x] = sum;
    }
}

void reduce_warp(const float* in, std::size_t n, float* partials) {
    // One block per 4096-element slice (16 floats per thread): 16384 blocks for 2^26 floats,
    // many times what the GPU holds at once, so the slices stream through the SMs.
    const std::size_t blocks = course::ceil_div(n, kReduceWarpItemsPerBlock);
    reduce_warp_kernel<<<static_cast<unsigned>(blocks), kReduceWarpThreads>>>(in, n, partials);
    CUDA_CHECK_LAUNCH();
}
