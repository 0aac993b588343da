// 02_memory/tiled_matmul: SGEMM through shared-memory tiles.
//
// Teaches: data reuse through shared memory. A block loads a 32 x 32 tile of A and one of B once
// from global memory, and every value is then read 32 times from shared memory; the K loop walks
// the tiles, with a __syncthreads() before the tiles are used and another before they are
// overwritten. Tails on M, N and K are zero-filled. Your rate is shown next to cuBLAS SGEMM.
//
// Run:  grader run 02/tiled_matmul     Stuck:  grader hint 02/tiled_matmul
// Contract: tiled_matmul.h             Notes:  notes/02_memory.md
#include "course/exercise.h"
#include "tiled_matmul.h"

__global__ void tiled_matmul_kernel(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: this block computes the 32 x 32 tile of C whose corner is (blockIdx.y * 32,
    //       blockIdx.x * 32). With a block of 32 x 8 threads, each thread owns 4 elements of one
    //       column of that tile and accumulates them in registers.
    // TODO: walk K in steps of 32. At each step the block stages in shared memory the 32 x 32
    //       tiles of A and of B that this step of the dot products needs (coalesced loads; 0
    //       where a tile reaches past M, N or K), then every thread accumulates from the tiles.
    //       Two barriers per step: the tiles are complete before anyone reads them, and nobody
    //       is still reading them when the next step overwrites them.
    // TODO: store the outputs that lie inside C.
}

void tiled_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: one block of 32 x 8 threads per 32 x 32 tile of C: a 2D grid with the tile columns
    //       along x and the tile rows along y (course::ceil_div for each); launch
    //       tiled_matmul_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("tiled_matmul: write the tiled kernel and launch it, then delete this line");
}
