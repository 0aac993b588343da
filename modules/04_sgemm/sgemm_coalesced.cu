// 04_sgemm/sgemm_coalesced: one thread per element of C, numbered so that a warp reads
// consecutive memory.
//
// Teaches: the full SGEMM contract (alpha, beta, a C that is read only when beta != 0) and the
// thread-to-element mapping that makes a warp's loads coalesce: 32 consecutive thread numbers
// take 32 consecutive columns of one row of C. The first rung of the ladder; module 01's
// naive_matmul is the rung below it.
//
// Run:  grader run 04/sgemm_coalesced      Stuck:   grader hint 04/sgemm_coalesced
// Contract: sgemm.h                        Notes:   notes/04_sgemm.md     Ladder: grader report 04
#include "course/exercise.h"
#include "sgemm_coalesced.h"

namespace {

constexpr int kTile = 32;                // a block computes a kTile x kTile tile of C
constexpr int kThreads = kTile * kTile;  // one thread per element of the tile

static_assert(kThreads <= 1024, "a block holds at most 1024 threads");

}  // namespace

__global__ void sgemm_coalesced_kernel(int M, int N, int K, float alpha,
                                       const float* __restrict__ A, const float* __restrict__ B,
                                       float beta, float* __restrict__ C) {
    // TODO: the block is 1D (kThreads threads, numbered by threadIdx.x) and computes the
    //       kTile x kTile tile of C whose top-left corner is (blockIdx.y * kTile,
    //       blockIdx.x * kTile). Pick this thread's (row, col) in that tile so that the 32
    //       threads of a warp (32 consecutive numbers) read neighbouring floats of B.
    //       Threads outside the M x N matrix do nothing.
    // TODO: the dot product of row `row` of A and column `col` of B in a float register, then
    //       C(row, col) = alpha * dot + beta * C(row, col), reading C only when beta != 0.
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // TODO: one block of kThreads threads per kTile x kTile tile of C, the grid's x along N and
    //       y along M (course::ceil_div); launch sgemm_coalesced_kernel, then
    //       CUDA_CHECK_LAUNCH().
    COURSE_TODO("sgemm_coalesced: write the kernel and launch it, then delete this line");
}
