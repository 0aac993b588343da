// 03_patterns/scan_fast: the single-pass scan with the tile's bookkeeping done by a whole warp.
// Fast reference: the readable solution (scan.cu, included below), whose one thread per tile
// turns 96 (row, warp) totals into prefixes and walks back one predecessor at a time; here warp
// 0 does both 32 at a time.
//
// Teaches: the warp-wide look-back: 32 lanes read 32 predecessors' statuses at once,
// __ballot_sync finds the nearest full prefix, and a shuffle sum adds the tile totals up to it,
// so a tile waits one round trip to L2 where a lone thread waits one per predecessor; and a scan
// of 96 totals as 3 per lane and one warp scan. Timed against CUB's DeviceScan.
//
// Run:  grader run 03/scan --solutions            (the "scan (fast)" row)
// Contract: scan.h                     Notes:  notes/03_patterns.md
#include <cuda/atomic>

#include "course/exercise.h"
#include "scan.h"

// The readable solution, whole: its status words, tile steps and scratch serve here too. (Every
// header it includes is included above, so that none of them lands inside the namespace.)
namespace readable {
#include "scan.cu"
}  // namespace readable

namespace {

using readable::kFullMask;
using readable::kPartials;
using readable::StatusWord;
constexpr int kPartialsPerLane = kPartials / 32;  // warp 0 scans the (row, warp) totals, 3 each
static_assert(kPartials % 32 == 0, "the same number of (row, warp) totals per lane");

// Every lane gets the sum over the warp.
__device__ int warp_sum(int value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

// The readable look_back with a warp: run by the 32 lanes of warp 0, it reads a window of 32
// predecessors at a time (lane l reads tile `window - l`, lane 0 the nearest).
__device__ int look_back(StatusWord* status, std::size_t tile, int tile_total) {
    const int lane = threadIdx.x % 32;
    if (tile == 0) {
        if (lane == 0) readable::publish(status, 0, readable::kPrefixTotal, tile_total);
        return 0;
    }
    if (lane == 0) readable::publish(status, tile, readable::kTileTotal, tile_total);

    int before = 0;
    for (long long window = static_cast<long long>(tile) - 1;; window -= 32) {
        const long long predecessor = window - lane;
        // Before tile 0 there is nothing to add.
        StatusWord word = readable::pack(readable::kPrefixTotal, 0);
        if (predecessor >= 0) {
            readable::StatusRef ref(status[predecessor]);
            do {
                word = ref.load(cuda::memory_order_relaxed);
            } while (readable::flag_of(word) == readable::kNotReady);
        }
        // The nearest predecessor that knows its full prefix ends the walk: add that prefix and
        // the tile totals of the predecessors nearer to us. Without one, add all 32 tile totals
        // and look further back.
        const unsigned has_prefix =
            __ballot_sync(kFullMask, readable::flag_of(word) == readable::kPrefixTotal);
        const int nearest_prefix = has_prefix ? __ffs(has_prefix) - 1 : 31;
        before += warp_sum(lane <= nearest_prefix ? readable::value_of(word) : 0);
        if (has_prefix) break;
    }
    if (lane == 0) readable::publish(status, tile, readable::kPrefixTotal, before + tile_total);
    return before;
}

__global__ void __launch_bounds__(readable::kThreads)
    scan_kernel(const int* in, int* out, std::size_t n, StatusWord* status,
                unsigned long long* next_tile) {
    __shared__ int partials[kPartials];  // (row, warp) totals, then what lies before each
    __shared__ int tile_prefix;          // the sum of all earlier tiles
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const std::size_t tile = readable::take_tile(next_tile);
    const std::size_t first = tile * readable::kTileItems + threadIdx.x * 4;
    int4 v[readable::kRows];
    readable::scan_rows_in_warps(in, first, n, v, partials);

    // Warp 0 scans the 96 (row, warp) totals in tile order, 3 consecutive ones per lane, which
    // gives the tile's total; then it looks back for the sum of the earlier tiles.
    if (warp == 0) {
        int totals[kPartialsPerLane];
        int lane_total = 0;
#pragma unroll
        for (int k = 0; k < kPartialsPerLane; ++k) {
            totals[k] = partials[lane * kPartialsPerLane + k];
            lane_total += totals[k];
        }
        const int through_lane = readable::warp_inclusive_scan(lane_total);
        int running = through_lane - lane_total;  // the totals before this lane's
#pragma unroll
        for (int k = 0; k < kPartialsPerLane; ++k) {
            partials[lane * kPartialsPerLane + k] = running;  // exclusive
            running += totals[k];
        }
        const int tile_total = __shfl_sync(kFullMask, through_lane, 31);
        const int before = look_back(status, tile, tile_total);
        if (lane == 0) tile_prefix = before;
    }
    __syncthreads();  // partials and tile_prefix are ready

    readable::finish_rows(out, first, n, v, partials, tile_prefix);
}

}  // namespace

void scan(const int* in, int* out, std::size_t n) {
    const std::size_t tiles = course::ceil_div(n, readable::kTileItems);
    StatusWord* words = readable::fresh_scratch(tiles);
    scan_kernel<<<static_cast<unsigned>(tiles), readable::kThreads>>>(in, out, n, words + 1, words);
    CUDA_CHECK_LAUNCH();
}
