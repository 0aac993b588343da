// 03_patterns/histogram: a 256-bin histogram of bytes. Reference solution.
//
// Teaches: privatization. 2^28 bytes counted straight into 256 global counters would be 2^28
// global atomics fighting over 256 addresses. Instead every block counts into its own copy of
// the histogram in shared memory and adds it to the global one once, at the end: 256 global
// atomics per block. The shared copy has one column per lane (counts[bin][lane]), so the 32
// atomics of a warp always land in 32 different banks and never on the same address, whatever
// the data: a flood of one value costs no more than uniform noise.
//
// Run:  grader run 03/histogram --solutions
// Contract: histogram.h                Notes:  notes/03_patterns.md
#include <algorithm>

#include "course/exercise.h"
#include "histogram.h"

namespace {

constexpr int kBins = 256;
constexpr int kLanes = 32;
constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFullMask = 0xffffffffu;

// counts[bin * 32 + lane]: the word of `bin` in column `lane` sits in bank `lane`.
__device__ void count_byte(unsigned int* counts, unsigned int lane, unsigned int byte) {
    atomicAdd(&counts[byte * kLanes + lane],
              1u);  // shared atomic: lanes of other warps share the column
}

__device__ void count_word(unsigned int* counts, unsigned int lane, unsigned int word) {
    count_byte(counts, lane, word & 0xFFu);
    count_byte(counts, lane, (word >> 8) & 0xFFu);
    count_byte(counts, lane, (word >> 16) & 0xFFu);
    count_byte(counts, lane, word >> 24);
}

__device__ void count_sixteen(unsigned int* counts, unsigned int lane, uint4 bytes) {
    count_word(counts, lane, bytes.x);
    count_word(counts, lane, bytes.y);
    count_word(counts, lane, bytes.z);
    count_word(counts, lane, bytes.w);
}

__device__ unsigned int warp_sum(unsigned int value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

// 2 blocks of 1024 threads fill an H100 SM (2048 threads): that needs at most 32 registers per
// thread, which this kernel stays under (the occupancy query below sees it).
__global__ void __launch_bounds__(kThreads)
    histogram_kernel(const std::uint8_t* __restrict__ data, std::size_t n, unsigned int* bins) {
    __shared__ unsigned int counts[kBins * kLanes];  // 32 KiB
    for (int i = threadIdx.x; i < kBins * kLanes; i += kThreads) counts[i] = 0;
    __syncthreads();  // zeroed before anyone counts

    const unsigned int lane = threadIdx.x % 32;
    // Grid-stride loop over 16-byte chunks (uint4); two loads issued before counting either, so
    // the next data is on its way while the atomics run.
    const uint4* chunks = reinterpret_cast<const uint4*>(data);
    const std::size_t n_chunks = n / 16;
    const std::size_t thread = static_cast<std::size_t>(blockIdx.x) * kThreads + threadIdx.x;
    const std::size_t stride = static_cast<std::size_t>(gridDim.x) * kThreads;
    std::size_t i = thread;
    for (; i + stride < n_chunks; i += 2 * stride) {
        const uint4 a = chunks[i], b = chunks[i + stride];
        count_sixteen(counts, lane, a);
        count_sixteen(counts, lane, b);
    }
    if (i < n_chunks) count_sixteen(counts, lane, chunks[i]);
    // The last n % 16 bytes do not fill a uint4: the first threads of block 0 take one each.
    if (thread < n % 16) count_byte(counts, lane, data[16 * n_chunks + thread]);
    __syncthreads();  // every count of this block is in shared memory

    // Merge: warp w adds up bins w, w + 32, ...: lane l reads column l of the bin (32 banks, no
    // conflict), the warp sums the 32 columns, lane 0 adds the block's count to the global bin.
    const int warp = threadIdx.x / 32;
    for (int bin = warp; bin < kBins; bin += kWarps) {
        const unsigned int count = warp_sum(counts[bin * kLanes + lane]);
        if (lane == 0 && count != 0) atomicAdd(&bins[bin], count);
    }
}

int resident_blocks() {
    static const int blocks = [] {
        int device = 0, sms = 0, per_sm = 0;
        CUDA_CHECK(cudaGetDevice(&device));
        CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        CUDA_CHECK(
            cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, histogram_kernel, kThreads, 0));
        return sms * per_sm;
    }();
    return blocks;
}

}  // namespace

void histogram_256(const std::uint8_t* data, std::size_t n, unsigned int* bins) {
    // The blocks add their counts to `bins`, so it must start at zero (in stream order, before
    // the kernel).
    CUDA_CHECK(cudaMemsetAsync(bins, 0, kBins * sizeof(unsigned int)));
    // One wave of blocks (each pays for zeroing and merging its 32 KiB copy once), fewer when n
    // is small: at least one uint4 per thread.
    const std::size_t wanted = course::ceil_div(n, std::size_t{16} * kThreads);
    const int blocks = static_cast<int>(std::min<std::size_t>(wanted, resident_blocks()));
    histogram_kernel<<<blocks, kThreads>>>(data, n, bins);
    CUDA_CHECK_LAUNCH();
}
