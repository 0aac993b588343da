// 03_patterns/scan_block: the inclusive scan of one tile per block.
//
// Teaches: a work-efficient block scan. Let each thread own a few consecutive elements and scan
// them itself, let each warp scan its thread totals with shuffles (Kogge-Stone inside a warp),
// let one warp scan the warp totals, and add to every element the totals of everything before
// it in the tile. The next exercise (scan) chains these tiles across the whole array.
//
// Run:  grader run 03/scan_block       Stuck:  grader hint 03/scan_block
// Contract: scan_block.h               Notes:  notes/03_patterns.md
#include "course/exercise.h"
#include "scan_block.h"

// Returns the inclusive scan of `value` across the warp: lane l gets the sum of lanes 0..l.
__device__ int warp_inclusive_scan(int value) {
    // TODO: Kogge-Stone across the 32 lanes (notes/03_patterns.md, "Inside a block"): in each
    //       step every lane adds the value of a lane further down, which __shfl_up_sync
    //       fetches; all 32 lanes execute every shuffle, even those that do not use its result.
    return value;
}

// A suggested shape: 256 threads per block, each owning 4 consecutive elements of the
// 1024-element tile (one int4: thread t of block b owns elements b * kScanBlockTile + 4t .. + 3).
__global__ void scan_block_kernel(const int* in, int* out, std::size_t n) {
    // TODO: load this thread's 4 elements (an int4 when all 4 lie below n; one by one, with 0 for
    //       missing elements, in the last partial tile) and scan them in registers.
    // TODO: warp_inclusive_scan of the thread totals; subtract the thread's own total to get the
    //       sum of the earlier lanes. Lane 31 stores its warp's total in a __shared__ array.
    // TODO: __syncthreads(); warp 0 scans the warp totals (exclusive: the sum of the earlier
    //       warps); __syncthreads() again before the warps read them.
    // TODO: add (earlier warps + earlier lanes) to the 4 elements and store those below n.
}

void scan_block(const int* in, int* out, std::size_t n) {
    // TODO: one block of 256 threads per tile: course::ceil_div(n, kScanBlockTile) blocks; then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("scan_block: write the kernel and launch it, then delete this line");
}
