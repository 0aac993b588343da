// 02_memory/transpose: a coalesced transpose through a padded shared-memory tile. Reference
// solution.
//
// Teaches: why a naive transpose is slow (its writes stride through memory), staging a tile in
// shared memory so that both the global reads and the global writes are coalesced, bank
// conflicts and the one-column padding that removes them, and giving each thread several
// elements so that enough loads are in flight. The checker compares the bandwidth with a device
// copy and with the naive transpose.
//
// Run:  grader run 02/transpose --solutions
// Contract: transpose.h                Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "transpose.h"

namespace {

constexpr int kTile = 32;      // a tile is 32 x 32 elements; a warp covers one 32-float row
constexpr int kBlockRows = 8;  // a block is 32 x 8 threads: each thread moves 32 / 8 = 4 elements

}  // namespace

__global__ void transpose_kernel(const float* __restrict__ in, float* __restrict__ out, int rows,
                                 int cols) {
    // 33 columns, not 32: element (r, c) lives at word r * 33 + c, in bank (r * 33 + c) % 32 =
    // (r + c) % 32. Reading a column (fixed c, r = 0..31) then hits 32 different banks; with 32
    // columns every element of a column would sit in the same bank (a 32-way conflict).
    __shared__ float tile[kTile][kTile + 1];

    // This block's tile starts at (row0, col0) of `in` and so at (col0, row0) of `out`.
    const int row0 = blockIdx.y * kTile;
    const int col0 = blockIdx.x * kTile;

    // Read: warp y reads rows y, y + 8, y + 16, y + 24 of the tile; lane x reads column col0 + x,
    // so a warp reads 32 consecutive floats of one row of `in` (coalesced). The loop has a fixed
    // trip count (4), so it is unrolled and the four independent loads are in flight together.
    const int in_col = col0 + threadIdx.x;
#pragma unroll
    for (int step = 0; step < kTile; step += kBlockRows) {
        const int r = threadIdx.y + step;  // row within the tile
        const int in_row = row0 + r;
        // Edge tiles (rows or cols not a multiple of 32): skip what lies outside the matrix.
        if (in_row < rows && in_col < cols)
            tile[r][threadIdx.x] = in[static_cast<std::size_t>(in_row) * cols + in_col];
    }

    // The writes below read elements that other warps loaded: all of them must be in place.
    __syncthreads();

    // Write: row c of the tile's transpose is column c of the tile. Warp y writes rows y, y + 8,
    // ... of `out`'s tile; lane x writes out column row0 + x, so a warp writes 32 consecutive
    // floats of one row of `out` (coalesced), reading them down a column of `tile` (conflict-free
    // thanks to the padding).
    const int out_col = row0 + threadIdx.x;  // out's columns are in's rows
#pragma unroll
    for (int step = 0; step < kTile; step += kBlockRows) {
        const int c = threadIdx.y + step;  // column within the tile = row of out's tile
        const int out_row = col0 + c;      // out's rows are in's columns
        if (out_row < cols && out_col < rows)
            out[static_cast<std::size_t>(out_row) * rows + out_col] = tile[threadIdx.x][c];
    }
}

void transpose(const float* in, float* out, int rows, int cols) {
    // One block per 32 x 32 tile of `in`: x walks the tile columns, y the tile rows. ceil_div
    // gives the partial tiles at the right and bottom edges their own blocks. (rows <= 2^20 keeps
    // the y extent within CUDA's 65535.)
    const dim3 block(kTile, kBlockRows);
    const dim3 grid(course::ceil_div(cols, kTile), course::ceil_div(rows, kTile));
    transpose_kernel<<<grid, block>>>(in, out, rows, cols);
    CUDA_CHECK_LAUNCH();
}
