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
    // TODO: declare a __shared__ tile of 32 x 32 floats, padded to 33 columns (why: the notes,
    //       "bank conflicts").
    // TODO: this block's tile starts at row0 = blockIdx.y * 32, col0 = blockIdx.x * 32 of `in`.
    //       With a 32 x 8 block, thread (x, y) loads tile rows y, y + 8, y + 16, y + 24 at column
    //       x: tile[r][x] = in[(row0 + r) * cols + col0 + x], skipping elements outside the
    //       matrix. A warp then reads 32 consecutive floats of a row.
    // TODO: __syncthreads(): the writes read elements that other warps loaded.
    // TODO: write the tile transposed, again a row at a time: for c = y, y + 8, y + 16, y + 24,
    //       out[(col0 + c) * rows + row0 + x] = tile[x][c], skipping what lies outside `out`
    //       (cols x rows). Compute the flat offsets as std::size_t.
}

void transpose(const float* in, float* out, int rows, int cols) {
    // TODO: block dim3(32, 8); grid dim3(course::ceil_div(cols, 32), course::ceil_div(rows, 32));
    //       launch transpose_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("transpose: write the tiled kernel and launch it, then delete this line");
}
