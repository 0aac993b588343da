// 02_memory/transpose: a coalesced transpose through a padded shared-memory tile.
//
// Teaches: why a naive transpose is slow (its writes stride through memory), staging a tile in
// shared memory so that both the global reads and the global writes are coalesced, bank
// conflicts and the one-column padding that removes them, and giving each thread several
// elements so that enough loads are in flight. The checker compares your bandwidth with a device
// copy and with the naive transpose of tests/naive_transpose.cuh (read it first).
//
// Run:  grader run 02/transpose        Stuck:  grader hint 02/transpose
// Contract: transpose.h                Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "transpose.h"

__global__ void transpose_kernel(const float* in, float* out, int rows, int cols) {
    // TODO: stage this block's 32 x 32 tile of `in` in a __shared__ array padded to 33 columns
    //       (why: notes/02_memory.md, "Bank conflicts and padding"). The block has 32 x 8
    //       threads, so each thread loads 4 elements of the tile; arrange the loads so that the
    //       32 threads of a warp read 32 consecutive floats of one row of `in`. Skip the
    //       elements that lie outside the matrix (the edge tiles).
    // TODO: __syncthreads(): the writes below read elements that other warps loaded.
    // TODO: write the tile transposed into `out` (cols x rows), again so that a warp writes 32
    //       consecutive floats of one row of `out`, skipping what lies outside it. Compute the
    //       flat offsets as std::size_t.
}

void transpose(const float* in, float* out, int rows, int cols) {
    // TODO: one block of 32 x 8 threads per 32 x 32 tile of `in`: a 2D grid with the tile
    //       columns along x and the tile rows along y (course::ceil_div for each); launch
    //       transpose_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("transpose: write the tiled kernel and launch it, then delete this line");
}
