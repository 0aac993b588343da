// 03_patterns/scan: the inclusive scan of any n in one pass, with decoupled look-back.
//
// Teaches: chaining tiles without a second pass over the data. Each block scans one tile in
// registers (scan_block, with more elements per thread), publishes the tile's total in a status
// array, and learns the sum of all earlier tiles by looking back at its predecessors' published
// values: a full prefix ends the walk, a bare tile total is added and the walk goes on. Tiles
// are handed out by an atomic counter, so a block only ever waits for blocks that already run.
// Every element is read once and written once, like a copy. Timed against CUB's DeviceScan.
//
// Run:  grader run 03/scan             Stuck:  grader hint 03/scan
// Contract: scan.h                     Notes:  notes/03_patterns.md
#include <cuda/atomic>

#include "course/exercise.h"
#include "scan.h"

// A tile's status: one 64-bit word, the flag in the high 32 bits and the value in the low 32, so
// that a flag and its value are always stored and loaded together (one atomic access).
using StatusWord = unsigned long long;
using StatusRef = cuda::atomic_ref<StatusWord, cuda::thread_scope_device>;
enum StatusFlag : unsigned {
    kNotReady = 0,     // nothing published yet (what a zeroed array holds)
    kTileTotal = 1,    // value = the sum of this tile alone
    kPrefixTotal = 2,  // value = the sum of this tile and all tiles before it
};

__device__ StatusWord pack(unsigned flag, int value) {
    return (static_cast<StatusWord>(flag) << 32) | static_cast<unsigned>(value);
}
__device__ unsigned flag_of(StatusWord word) { return static_cast<unsigned>(word >> 32); }
__device__ int value_of(StatusWord word) { return static_cast<int>(static_cast<unsigned>(word)); }
// Publish:  StatusRef(status[tile]).store(pack(flag, value), cuda::memory_order_relaxed);
// Read:     StatusWord word = StatusRef(status[tile]).load(cuda::memory_order_relaxed);

// Returns the sum of all tiles before `tile` (whose own total is tile_total), and publishes
// this tile's statuses on the way.
__device__ int look_back(StatusWord* status, std::size_t tile, int tile_total) {
    // TODO: publish kTileTotal with tile_total at once (tile 0: publish kPrefixTotal, return 0).
    // TODO: walk back over the predecessors: wait while one is kNotReady; add a kTileTotal value
    //       and keep going; add a kPrefixTotal value and stop. (Faster: let the 32 lanes of a
    //       warp read 32 predecessors at once, __ballot_sync to find the nearest kPrefixTotal.)
    // TODO: publish kPrefixTotal with (sum of the earlier tiles + tile_total).
    return 0;
}

__global__ void scan_kernel(const int* in, int* out, std::size_t n, StatusWord* status,
                            unsigned long long* next_tile) {
    // TODO: thread 0 takes this block's tile number with atomicAdd(next_tile, 1) and shares it
    //       through __shared__ memory (not blockIdx.x: see the notes on forward progress).
    // TODO: scan the tile as in scan_block, but with several int4s per thread (e.g. 256 threads
    //       x 12 int4s = 12288 elements per tile), so the look-back is paid once per 48 KiB.
    // TODO: once the tile's total is known, one warp calls look_back; add its result to every
    //       element of the tile and store the elements below n.
}

void scan(const int* in, int* out, std::size_t n) {
    // TODO: scratch of (tiles + 1) StatusWords, allocated once with cudaMalloc and kept in a
    //       static (grown when a larger n comes); word 0 is the tile counter, the rest the tile
    //       statuses. Zero it with cudaMemsetAsync before every launch; launch one block per
    //       tile; CUDA_CHECK_LAUNCH().
    COURSE_TODO("scan: write the single-pass scan and launch it, then delete this line");
}
