// 04_sgemm/sgemm_vectorized: the 2D block tiling with 16-byte loads, and A transposed in shared
// memory.
//
// Teaches: float4 (16-byte) global loads, four floats per instruction where a row allows it (the
// address must be a multiple of 16 bytes), with a one-by-one fallback at the edges and for rows
// that are not 16-byte aligned; storing the A tile transposed, so that the kTM values of A's
// column k that a thread needs are contiguous in shared memory and come in 16-byte reads, like
// B's row k. Same block tiles, thread tiles and steps of k as sgemm_blocktile_2d: only the loads
// change.
//
// Run:  grader run 04/sgemm_vectorized     Stuck:   grader hint 04/sgemm_vectorized
// Contract: sgemm.h                        Notes:   notes/04_sgemm.md     Ladder: grader report 04
#include "course/exercise.h"
#include "sgemm_vectorized.h"

namespace {

constexpr int kBM = 128;  // rows of C per block (and rows of the A tile)
constexpr int kBN = 128;  // columns of C per block (and columns of the B tile)
constexpr int kBK = 32;   // columns of the A tile = rows of the B tile: one step of k0
constexpr int kTM = 8;    // rows of C per thread
constexpr int kTN = 8;    // columns of C per thread
constexpr int kThreads = (kBM / kTM) * (kBN / kTN);  // one thread per kTM x kTN block of C
// kTM * kTN accumulators per thread make registers what limits the blocks an SM holds: ask the
// compiler to fit kBlocksPerSm blocks (65536 registers / (2 x 256 threads) = 128 per thread).
constexpr int kBlocksPerSm = 2;

// A float4 holds 4 floats: tiles, thread tiles and steps of k0 come in whole float4s, so that a
// float4 of a tile row starts on a 16-byte boundary whenever the matrix row does.
static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the block tile splits into whole thread tiles");
static_assert(kBK % 4 == 0 && kBN % 4 == 0 && kTM % 4 == 0 && kTN % 4 == 0, "whole float4s");

}  // namespace

// TODO: a __device__ helper that returns 4 consecutive floats of a row as a float4, 0 past the
//       row's end: one 16-byte load where that is allowed, else one float at a time.

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sgemm_vectorized_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                            const float* __restrict__ B, float beta, float* __restrict__ C,
                            bool a_rows_aligned, bool b_rows_aligned) {
    // TODO: start from your sgemm_blocktile_2d kernel. Shared tiles: B's as before; A's
    //       transposed (kBK x kBM: element (m, k) of the tile at [k][m]). Both 16-byte aligned.
    // TODO: load the tiles in float4s (kBM * kBK / 4 of A, kBK * kBN / 4 of B) with your
    //       helper: a_rows_aligned / b_rows_aligned say whether the rows of A / B may be read
    //       16 bytes at a time. A's 4 values go to 4 different rows of the transposed tile;
    //       B's float4 is stored as one.
    // TODO: in the k loop, fill the kTM values of A and the kTN values of B with 16-byte reads
    //       of shared memory; the outer product and the epilogue (alpha, beta, inside the matrix
    //       only) are the 2D rung's.
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // TODO: decide a_rows_aligned and b_rows_aligned: when does every row of A (of B) start on
    //       a 16-byte boundary? (course::is_aligned tests a pointer.) Then one block of kThreads
    //       threads per kBM x kBN tile of C; launch sgemm_vectorized_kernel, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("sgemm_vectorized: write the kernel and launch it, then delete this line");
}
