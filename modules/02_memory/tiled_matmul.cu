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
    // TODO: declare two __shared__ 32 x 32 float tiles, a_tile and b_tile. This block computes
    //       the 32 x 32 tile of C at row0 = blockIdx.y * 32, col0 = blockIdx.x * 32. With a
    //       32 x 8 block, thread (tx, ty) computes the 4 outputs C[row0 + ty + 8 * i][col0 + tx],
    //       i = 0..3, in 4 float accumulators.
    // TODO: for k0 = 0, 32, 64, ... < K:
    //         - thread (tx, ty) loads rows ty, ty + 8, ty + 16, ty + 24 of both tiles at column
    //           tx: a_tile[r][tx] = A[(row0 + r) * K + k0 + tx] and b_tile[r][tx] =
    //           B[(k0 + r) * N + col0 + tx], storing 0 where the element lies outside A or B;
    //         - __syncthreads();
    //         - for k = 0..31: acc[i] += a_tile[ty + 8 * i][k] * b_tile[k][tx];
    //         - __syncthreads() before the next iteration overwrites the tiles.
    // TODO: store the 4 accumulators to C where row < M and col < N.
}

void tiled_matmul(const float* A, const float* B, float* C, int M, int N, int K) {
    // TODO: block dim3(32, 8); grid dim3(course::ceil_div(N, 32), course::ceil_div(M, 32));
    //       launch tiled_matmul_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("tiled_matmul: write the tiled kernel and launch it, then delete this line");
}
