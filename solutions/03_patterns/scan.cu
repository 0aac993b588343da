// 03_patterns/scan: the inclusive scan of any n in one pass, with decoupled look-back.
// Reference solution.
//
// Teaches: chaining tiles without a second pass over the data. Each block scans one tile of 12288
// elements in registers (the block scan of scan_block, for 12 rows at once), publishes the tile's
// total in a status array, and learns the sum of all earlier tiles by looking back at its
// predecessors' published values: a full prefix ends the walk, a bare tile total is added and
// the walk goes on. Tiles are handed out in launch order by an atomic counter, so a block only
// ever waits for blocks that are already running (forward progress). Every element is read once
// and written once: 8 bytes per element, like a copy. Timed against CUB's DeviceScan.
//
// Run:  grader run 03/scan --solutions
// Contract: scan.h                     Notes:  notes/03_patterns.md
#include <cuda/atomic>

#include "course/exercise.h"
#include "scan.h"

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;                // 8
constexpr int kRows = 12;                            // int4s per thread
constexpr int kRowItems = kThreads * 4;              // a row: one int4 per thread, 1024 elements
constexpr std::size_t kTileItems = kRows * kRowItems;  // 12288 elements per tile and block
constexpr int kPartials = kRows * kWarps;            // one total per (row, warp): 96
constexpr int kPartialsPerLane = kPartials / 32;     // warp 0 scans them, 3 per lane
constexpr unsigned kFullMask = 0xffffffffu;
static_assert(kPartials % 32 == 0, "warp 0 scans the (row, warp) totals, the same count per lane");

// A tile's status is one 64-bit word: the flag in the high half, the value in the low half.
// Flag and value are stored and loaded together, atomically, so a reader never sees a flag with
// a stale value. That is also why relaxed atomics suffice: no other data passes between blocks.
using StatusWord = unsigned long long;
using StatusRef = cuda::atomic_ref<StatusWord, cuda::thread_scope_device>;
enum StatusFlag : unsigned {
    kNotReady = 0,     // what cudaMemsetAsync(0) leaves: nothing published yet
    kTileTotal = 1,    // value = the sum of this tile alone
    kPrefixTotal = 2,  // value = the sum of this tile and every tile before it
};

__device__ StatusWord pack(unsigned flag, int value) {
    return (static_cast<StatusWord>(flag) << 32) | static_cast<unsigned>(value);
}
__device__ unsigned flag_of(StatusWord word) { return static_cast<unsigned>(word >> 32); }
__device__ int value_of(StatusWord word) { return static_cast<int>(static_cast<unsigned>(word)); }

__device__ void publish(StatusWord* status, std::size_t tile, unsigned flag, int value) {
    StatusRef(status[tile]).store(pack(flag, value), cuda::memory_order_relaxed);
}

// Kogge-Stone over the lanes of a warp (see scan_block): lane l gets the sum of lanes 0..l.
__device__ int warp_inclusive_scan(int value) {
    const int lane = threadIdx.x % 32;
    for (int offset = 1; offset < 32; offset *= 2) {
        const int below = __shfl_up_sync(kFullMask, value, offset);
        if (lane >= offset) value += below;
    }
    return value;
}

// Every lane gets the sum over the warp.
__device__ int warp_sum(int value) {
    for (int offset = 16; offset > 0; offset /= 2) value += __shfl_xor_sync(kFullMask, value, offset);
    return value;
}

// Run by the 32 lanes of warp 0 once the tile's total is known. Publishes the tile total at
// once (later tiles can use it without waiting for our prefix), finds the sum of all earlier
// tiles, publishes our full prefix and returns the sum of the earlier tiles.
__device__ int look_back(StatusWord* status, std::size_t tile, int tile_total) {
    const int lane = threadIdx.x % 32;
    if (tile == 0) {
        if (lane == 0) publish(status, 0, kPrefixTotal, tile_total);
        return 0;
    }
    if (lane == 0) publish(status, tile, kTileTotal, tile_total);

    int before = 0;
    // A window of 32 predecessors at a time: lane l reads tile `window - l` (lane 0 the nearest).
    for (long long window = static_cast<long long>(tile) - 1;; window -= 32) {
        const long long predecessor = window - lane;
        StatusWord word = pack(kPrefixTotal, 0);  // before tile 0 there is nothing to add
        if (predecessor >= 0) {
            // The predecessor took its tile number before we did, so its block is running and
            // will publish: this wait ends. (With blockIdx.x as the tile number it might not: a
            // block could wait for one that has not started, while holding the SM it needs.)
            StatusRef ref(status[predecessor]);
            do {
                word = ref.load(cuda::memory_order_relaxed);
            } while (flag_of(word) == kNotReady);
        }
        // The nearest predecessor that knows its full prefix ends the walk: add that prefix and
        // the tile totals of the predecessors nearer to us. Without one, add all 32 tile totals
        // and look further back.
        const unsigned has_prefix = __ballot_sync(kFullMask, flag_of(word) == kPrefixTotal);
        const int nearest_prefix = has_prefix ? __ffs(has_prefix) - 1 : 31;
        before += warp_sum(lane <= nearest_prefix ? value_of(word) : 0);
        if (has_prefix) break;
    }
    if (lane == 0) publish(status, tile, kPrefixTotal, before + tile_total);
    return before;
}

// The 4 elements first .. first + 3, or those of them below n (the others count 0).
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

__device__ void add_to_four(int4& v, int carry) {
    v.x += carry;
    v.y += carry;
    v.z += carry;
    v.w += carry;
}

__global__ void __launch_bounds__(kThreads)
    scan_kernel(const int* in, int* out, std::size_t n, StatusWord* status,
                unsigned long long* next_tile) {
    __shared__ std::size_t tile_shared;
    __shared__ int partial_prefix[kPartials];  // (row, warp) -> sum of the tile before it
    __shared__ int tile_prefix;                // sum of all earlier tiles
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

    // Tile numbers in the order blocks start, not blockIdx.x (see look_back).
    if (threadIdx.x == 0) tile_shared = atomicAdd(next_tile, 1ull);
    __syncthreads();
    const std::size_t tile = tile_shared;

    // Row r of the tile is elements tile * kTileItems + r * kRowItems + [0, kRowItems); thread t
    // owns the int4 at 4t of each row. So every load is a coalesced 16-byte access, and the
    // tile's order is (row, warp, lane, component): the scans below follow that order.
    const std::size_t tile_first = tile * kTileItems + threadIdx.x * 4;
    int4 v[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) v[r] = load_four(in, tile_first + r * kRowItems, n);

    // 1. Each thread scans each of its int4s; 2. each warp scans its thread totals, row by row
    // (12 independent shuffle chains that the compiler interleaves). Afterwards v[r] holds the
    // scan of row r's part owned by this warp, and lane 31 knows the warp's total for that row.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        v[r].y += v[r].x;
        v[r].z += v[r].y;
        v[r].w += v[r].z;
        const int through_me = warp_inclusive_scan(v[r].w);
        add_to_four(v[r], through_me - v[r].w);  // plus the earlier lanes of the warp, same row
        if (lane == 31) partial_prefix[r * kWarps + warp] = through_me;
    }
    __syncthreads();  // all (row, warp) totals stored

    // 3. Warp 0 scans the 96 (row, warp) totals in tile order, 3 consecutive ones per lane, which
    //    gives the tile's total; then it looks back for the sum of the earlier tiles.
    if (warp == 0) {
        int totals[kPartialsPerLane];
        int lane_total = 0;
#pragma unroll
        for (int k = 0; k < kPartialsPerLane; ++k) {
            totals[k] = partial_prefix[lane * kPartialsPerLane + k];
            lane_total += totals[k];
        }
        const int through_lane = warp_inclusive_scan(lane_total);
        int running = through_lane - lane_total;  // sum of the (row, warp) totals before this lane's
#pragma unroll
        for (int k = 0; k < kPartialsPerLane; ++k) {
            partial_prefix[lane * kPartialsPerLane + k] = running;  // exclusive
            running += totals[k];
        }
        const int tile_total = __shfl_sync(kFullMask, through_lane, 31);
        const int before = look_back(status, tile, tile_total);
        if (lane == 0) tile_prefix = before;
    }
    __syncthreads();  // partial_prefix and tile_prefix are ready

    // 4. Add what lies before this (row, warp) inside the tile, and every earlier tile; store.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        add_to_four(v[r], tile_prefix + partial_prefix[r * kWarps + warp]);
        store_four(out, tile_first + r * kRowItems, n, v[r]);
    }
}

// Scratch for one call: word 0 counts the tiles handed out, words 1..tiles are the tile
// statuses. Allocated once and grown when a larger n comes; zeroed on every call.
StatusWord* scratch(std::size_t words) {
    static StatusWord* buffer = nullptr;
    static std::size_t capacity = 0;
    if (words > capacity) {
        if (buffer) CUDA_CHECK(cudaFree(buffer));
        CUDA_CHECK(cudaMalloc(&buffer, words * sizeof(StatusWord)));
        capacity = words;
    }
    return buffer;
}

}  // namespace

void scan(const int* in, int* out, std::size_t n) {
    const std::size_t tiles = course::ceil_div(n, kTileItems);
    StatusWord* words = scratch(tiles + 1);
    // Every status to kNotReady and the tile counter to 0, in stream order before the kernel:
    // the previous call's statuses must not be mistaken for this call's.
    CUDA_CHECK(cudaMemsetAsync(words, 0, (tiles + 1) * sizeof(StatusWord)));
    scan_kernel<<<static_cast<unsigned>(tiles), kThreads>>>(in, out, n, words + 1, words);
    CUDA_CHECK_LAUNCH();
}
