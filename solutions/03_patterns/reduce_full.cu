// 03_patterns/reduce_full: the sum of n floats over the whole GPU, in one kernel. Reference
// solution.
//
// Teaches: reducing across blocks. Every block reduces its share of the input to one partial
// sum; the last block to finish (found with an atomic counter, after a memory fence) adds the
// partials and writes the result. The input is read once, as float4, with several loads in
// flight per thread and one wave of blocks sized from the SM count: it runs at the speed of
// reading memory. Timed against CUB's DeviceReduce::Sum and against a device copy.
//
// Run:  grader run 03/reduce_full --solutions
// Contract: reduce_full.h              Notes:  notes/03_patterns.md
#include <algorithm>

#include "course/exercise.h"
#include "reduce_full.h"

namespace {

constexpr int kThreads = 512;  // 16 warps per block
constexpr int kWarps = kThreads / 32;
constexpr int kLoadsInFlight = 4;  // float4 loads a thread issues before it adds any of them
constexpr int kMaxBlocks = 2048;   // more than any GPU keeps resident at once (H100: 132 x 4)
constexpr unsigned kFullMask = 0xffffffffu;

// Scratch that needs no allocation: one partial sum per block, and how many blocks have stored
// theirs. They live as long as the program; the last block resets the counter for the next call.
// (Two calls running at the same time on different streams would share them: the contract says
// default stream, so calls follow each other.)
__device__ float g_block_sums[kMaxBlocks];
__device__ unsigned int g_blocks_done = 0;

// Every lane gets the sum of the warp's 32 values: a butterfly of 5 shuffles, no shared memory.
__device__ float warp_sum(float value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

// The sum of `value` over the block, valid in warp 0 (thread 0 is the one that uses it). Ends
// with warp 0 still reading `warp_sums`: a caller that calls it again must __syncthreads() first.
__device__ float block_sum(float value) {
    __shared__ float warp_sums[kWarps];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    value = warp_sum(value);
    if (lane == 0) warp_sums[warp] = value;
    __syncthreads();  // every warp's total is in shared memory before warp 0 reads them
    if (warp == 0) value = warp_sum(lane < kWarps ? warp_sums[lane] : 0.0f);
    return value;
}

__global__ void __launch_bounds__(kThreads)
    reduce_full_kernel(const float* __restrict__ in, std::size_t n, float* out) {
    // Grid-stride loop over float4s: the grid is one wave of blocks, each thread walks the input
    // with a stride of the whole grid. Consecutive threads read consecutive 16-byte chunks, so
    // a warp reads 512 contiguous bytes per load.
    const float4* in4 = reinterpret_cast<const float4*>(in);
    const std::size_t n4 = n / 4;
    const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;

    float sum = 0.0f;
    std::size_t i = thread;
    // Main loop: kLoadsInFlight independent loads are issued before the first add waits for its
    // data, so each thread keeps 64 bytes in flight; that is what hides the memory latency.
    for (; i + (kLoadsInFlight - 1) * stride < n4; i += kLoadsInFlight * stride) {
        float4 v[kLoadsInFlight];
#pragma unroll
        for (int k = 0; k < kLoadsInFlight; ++k) v[k] = in4[i + k * stride];
#pragma unroll
        for (int k = 0; k < kLoadsInFlight; ++k) sum += (v[k].x + v[k].y) + (v[k].z + v[k].w);
    }
    // Fewer than kLoadsInFlight strides left: one float4 at a time.
    for (; i < n4; i += stride) {
        const float4 v = in4[i];
        sum += (v.x + v.y) + (v.z + v.w);
    }
    // The last n % 4 floats do not fill a float4: threads 0, 1, 2 of block 0 take them.
    if (thread < n % 4) sum += in[4 * n4 + thread];

    sum = block_sum(sum);

    // Publish this block's partial, then count it. The fence makes the store visible to every
    // block before the counter says it is there; without it the last block could read an old
    // partial.
    __shared__ bool is_last_block;
    if (threadIdx.x == 0) {
        g_block_sums[blockIdx.x] = sum;
        __threadfence();
        const unsigned int done_before = atomicAdd(&g_blocks_done, 1u);
        is_last_block = done_before == gridDim.x - 1;
    }
    __syncthreads();  // is_last_block is written; also separates the two block_sum calls
    if (!is_last_block) return;

    // The last block: every other block has stored its partial and fenced. Our own fence orders
    // the reads below after that; __ldcg reads from L2 (never a stale L1 line).
    __threadfence();
    float total = 0.0f;
    for (unsigned int b = threadIdx.x; b < gridDim.x; b += kThreads)
        total += __ldcg(&g_block_sums[b]);
    // The partials are added in the same order on every call: the result does not depend on
    // which block finished when.
    total = block_sum(total);
    if (threadIdx.x == 0) {
        *out = total;
        g_blocks_done = 0;  // ready for the next call (the kernel's end orders it before it)
    }
}

// As many blocks as the GPU runs at once: more would only queue behind them, fewer would leave
// SMs idle. Asked once: the occupancy API knows this kernel's registers and shared memory.
int resident_blocks() {
    static const int blocks = [] {
        int device = 0, sms = 0, per_sm = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reduce_full_kernel,
                                                                 kThreads, 0));
        return std::min(sms * per_sm, kMaxBlocks);
    }();
    return blocks;
}

}  // namespace

void reduce_full(const float* in, std::size_t n, float* out) {
    // Small inputs need fewer blocks: at least one float4 per thread, never more than one wave.
    const std::size_t wanted = course::ceil_div(n, std::size_t{4} * kThreads);
    const int blocks = static_cast<int>(std::min<std::size_t>(wanted, resident_blocks()));
    reduce_full_kernel<<<blocks, kThreads>>>(in, n, out);
    CUDA_CHECK_LAUNCH();
}
