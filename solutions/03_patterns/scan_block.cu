// 03_patterns/scan_block: the inclusive scan of one tile per block. Reference solution.
//
// Teaches: a work-efficient block scan in three levels. Each thread owns 4 consecutive elements
// (one int4) and scans them itself; a warp scans its 32 thread totals with shuffles
// (Kogge-Stone: log2(32) = 5 steps); one warp scans the 8 warp totals; every thread adds the
// totals of what lies before it. Two __syncthreads() in all, and every load and store a
// coalesced 16-byte access.
//
// Run:  grader run 03/scan_block --solutions
// Contract: scan_block.h               Notes:  notes/03_patterns.md
#include "course/exercise.h"
#include "scan_block.h"

namespace {

constexpr int kItemsPerThread = 4;                                            // one int4
constexpr int kThreads = static_cast<int>(kScanBlockTile) / kItemsPerThread;  // 256
constexpr int kWarps = kThreads / 32;                                         // 8
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kThreads * kItemsPerThread == static_cast<int>(kScanBlockTile),
              "one int4 per thread");
static_assert(kWarps <= 32, "warp 0 scans the warp totals, one per lane");

// Kogge-Stone over the lanes of a warp: after the step with offset d, lane l holds the sum of
// lanes l - 2d + 1 .. l (those that exist). 5 steps, no shared memory, no __syncthreads().
__device__ int warp_inclusive_scan(int value) {
    const int lane = threadIdx.x % 32;
    for (int offset = 1; offset < 32; offset *= 2) {
        const int below = __shfl_up_sync(kFullMask, value, offset);
        if (lane >= offset) value += below;  // lanes < offset have nothing `offset` below them
    }
    return value;
}

// The 4 elements first .. first + 3, or as many of them as lie below n (the others count 0,
// which changes no sum). Only the last tile's last thread has to take the slow path.
__device__ int4 load_four(const int* in, std::size_t first, std::size_t n) {
    if (first + 4 <= n) return *reinterpret_cast<const int4*>(in + first);  // 16-byte aligned
    return make_int4(first < n ? in[first] : 0, first + 1 < n ? in[first + 1] : 0,
                     first + 2 < n ? in[first + 2] : 0, 0);
}

__device__ void store_four(int* out, std::size_t first, std::size_t n, int4 v) {
    if (first + 4 <= n) {
        *reinterpret_cast<int4*>(out + first) = v;
        return;
    }
    if (first < n) out[first] = v.x;
    if (first + 1 < n) out[first + 1] = v.y;
    if (first + 2 < n) out[first + 2] = v.z;
}

__global__ void __launch_bounds__(kThreads)
    scan_block_kernel(const int* in, int* out, std::size_t n) {
    __shared__ int warp_prefix[kWarps];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    // Block b scans tile b; thread t owns its elements 4t .. 4t + 3 (consecutive threads,
    // consecutive int4s: a warp loads 512 contiguous bytes).
    const std::size_t first =
        static_cast<std::size_t>(blockIdx.x) * kScanBlockTile + threadIdx.x * kItemsPerThread;
    int4 v = load_four(in, first, n);

    // 1. The thread scans its own 4 elements; v.w is then the thread's total.
    v.y += v.x;
    v.z += v.y;
    v.w += v.z;

    // 2. The warp scans the thread totals. Subtracting the thread's own total gives what the
    //    earlier lanes of the warp add up to: the thread's carry within the warp.
    const int through_me = warp_inclusive_scan(v.w);
    const int before_me = through_me - v.w;
    if (lane == 31) warp_prefix[warp] = through_me;  // the warp's total
    __syncthreads();  // all warp totals are stored before warp 0 reads them

    // 3. Warp 0 turns the warp totals into exclusive prefixes: warp_prefix[w] = the sum of
    //    warps 0 .. w - 1. Each lane reads and writes only its own slot.
    if (warp == 0) {
        const int total = lane < kWarps ? warp_prefix[lane] : 0;
        const int through = warp_inclusive_scan(total);
        if (lane < kWarps) warp_prefix[lane] = through - total;
    }
    __syncthreads();  // the prefixes are stored before any warp reads its own

    // 4. Everything before this thread's elements in the tile: earlier warps + earlier lanes.
    const int carry = warp_prefix[warp] + before_me;
    v.x += carry;
    v.y += carry;
    v.z += carry;
    v.w += carry;
    store_four(out, first, n, v);
}

}  // namespace

void scan_block(const int* in, int* out, std::size_t n) {
    // One block per tile; the last tile may be partial (the loads and stores check n).
    const std::size_t tiles = course::ceil_div(n, kScanBlockTile);
    scan_block_kernel<<<static_cast<unsigned>(tiles), kThreads>>>(in, out, n);
    CUDA_CHECK_LAUNCH();
}
