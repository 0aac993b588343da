// 03_patterns/scan: the inclusive scan of any n in one pass, with decoupled look-back.
// Reference solution (the readable one; scan_fast.cu gives the tile's bookkeeping to a whole warp).
//
// Teaches: chaining tiles without a second pass over the data. Each block scans one tile of 12288
// elements in registers (scan_block's block scan, for 12 rows at once), publishes the tile's
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
constexpr int kWarps = kThreads / 32;                  // 8
constexpr int kRows = 12;                              // int4s per thread
constexpr int kRowItems = kThreads * 4;                // a row: one int4 per thread, 1024 elements
constexpr std::size_t kTileItems = kRows * kRowItems;  // 12288 elements per tile and block
constexpr int kPartials = kRows * kWarps;              // one total per (row, warp): 96
constexpr unsigned kFullMask = 0xffffffffu;

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

// Run by one thread once the tile's total is known. Publishes the tile total at once (later
// tiles can use it without waiting for our prefix), walks back over the predecessors for the sum
// of all earlier tiles, publishes our full prefix and returns that sum.
__device__ int look_back(StatusWord* status, std::size_t tile, int tile_total) {
    if (tile == 0) {
        publish(status, 0, kPrefixTotal, tile_total);
        return 0;
    }
    publish(status, tile, kTileTotal, tile_total);
    int before = 0;
    for (std::size_t predecessor = tile - 1;; --predecessor) {
        // The predecessor took its tile number before we did, so its block is running and will
        // publish: this wait ends. (With blockIdx.x as the tile number it might not: a block
        // could wait for one that has not started, while holding the SM it needs.)
        StatusWord word;
        do {
            word = StatusRef(status[predecessor]).load(cuda::memory_order_relaxed);
        } while (flag_of(word) == kNotReady);
        before += value_of(word);
        if (flag_of(word) == kPrefixTotal) break;  // it includes every tile before it
    }
    publish(status, tile, kPrefixTotal, before + tile_total);
    return before;
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

// The steps of a tile that both references share. Row r of a tile is its elements
// r * kRowItems + [0, kRowItems); thread t owns the int4 at 4t of each row, so every load is a
// coalesced 16-byte access, and the tile's order is (row, warp, lane, component).

// This block's tile number, in the order blocks start (see look_back), shared through the block.
__device__ std::size_t take_tile(unsigned long long* next_tile) {
    __shared__ std::size_t tile;
    if (threadIdx.x == 0) tile = atomicAdd(next_tile, 1ull);
    __syncthreads();
    return tile;
}

// Loads the thread's int4 of every row (kRows independent loads in flight), then scans each row
// in its warp: afterwards v[r] holds the inclusive scan of row r's part owned by this warp, and
// partials[r * kWarps + warp] that part's total. Ends with the barrier after which the totals
// can be read.
__device__ void scan_rows_in_warps(const int* in, std::size_t first, std::size_t n,
                                   int4 (&v)[kRows], int* partials) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) v[r] = load_four(in, first + r * kRowItems, n);
        // 12 independent shuffle chains, which the compiler interleaves.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        v[r].y += v[r].x;
        v[r].z += v[r].y;
        v[r].w += v[r].z;
        const int through_me = warp_inclusive_scan(v[r].w);
        add_to_four(v[r], through_me - v[r].w);  // plus the earlier lanes of the warp, same row
        if (lane == 31) partials[r * kWarps + warp] = through_me;
    }
    __syncthreads();  // all (row, warp) totals stored
}

// Adds what lies before each (row, warp) part: `before_part[r * kWarps + warp]` inside the tile,
// and `before_tile` from the earlier tiles; stores the elements below n.
__device__ void finish_rows(int* out, std::size_t first, std::size_t n, int4 (&v)[kRows],
                            const int* before_part, int before_tile) {
    const int warp = threadIdx.x / 32;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
        add_to_four(v[r], before_tile + before_part[r * kWarps + warp]);
        store_four(out, first + r * kRowItems, n, v[r]);
    }
}

__global__ void __launch_bounds__(kThreads)
    scan_kernel(const int* in, int* out, std::size_t n, StatusWord* status,
                unsigned long long* next_tile) {
    __shared__ int partials[kPartials];  // (row, warp) totals, then what lies before each
    __shared__ int tile_prefix;          // the sum of all earlier tiles
    const std::size_t tile = take_tile(next_tile);
    const std::size_t first = tile * kTileItems + threadIdx.x * 4;
    int4 v[kRows];
    scan_rows_in_warps(in, first, n, v, partials);

    // One thread turns the 96 (row, warp) totals, in tile order, into what lies before each
    // part, which gives the tile's total; then it looks back for the sum of the earlier tiles.
    if (threadIdx.x == 0) {
        int running = 0;
        for (int p = 0; p < kPartials; ++p) {
            const int total = partials[p];
            partials[p] = running;  // exclusive
            running += total;
        }
        tile_prefix = look_back(status, tile, running);
    }
    __syncthreads();  // partials and tile_prefix are ready

    finish_rows(out, first, n, v, partials, tile_prefix);
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

// Every status to kNotReady and the tile counter to 0, in stream order before the kernel: the
// previous call's statuses must not be mistaken for this call's. Returns the scratch.
StatusWord* fresh_scratch(std::size_t tiles) {
    StatusWord* words = scratch(tiles + 1);
    CUDA_CHECK(cudaMemsetAsync(words, 0, (tiles + 1) * sizeof(StatusWord)));
    return words;
}

}  // namespace

void scan(const int* in, int* out, std::size_t n) {
    const std::size_t tiles = course::ceil_div(n, kTileItems);
    StatusWord* words = fresh_scratch(tiles);
    scan_kernel<<<static_cast<unsigned>(tiles), kThreads>>>(in, out, n, words + 1, words);
    CUDA_CHECK_LAUNCH();
}
