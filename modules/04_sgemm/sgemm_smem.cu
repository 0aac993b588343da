// 04_sgemm/sgemm_smem: shared-memory cache blocking with 32 x 32 tiles.
//
// Teaches: loading a tile of A and a tile of B into shared memory once per block, so that each
// float fetched from global memory serves 32 multiply-adds; the two barriers of the K loop (the
// tiles are complete before anyone reads them, and read by everyone before they are
// overwritten); zero-filled tiles at the edges. One thread per element of C, as in
// sgemm_coalesced: only where the operands come from changes.
//
// Run:  grader run 04/sgemm_smem           Stuck:   grader hint 04/sgemm_smem
// Contract: sgemm.h                        Notes:   notes/04_sgemm.md     Ladder: grader report 04
#include "course/exercise.h"
#include "sgemm_smem.h"

namespace {

constexpr int kTile = 32;                // C tile, A tile and B tile are all kTile x kTile
constexpr int kThreads = kTile * kTile;  // one thread per element of the C tile

static_assert(kThreads <= 1024, "a block holds at most 1024 threads");

}  // namespace

__global__ void sgemm_smem_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                                  const float* __restrict__ B, float beta, float* __restrict__ C) {
    // TODO: two __shared__ kTile x kTile tiles, one for A and one for B. This thread's element
    //       of C as in sgemm_coalesced (consecutive threads on consecutive columns).
    // TODO: walk K in steps of kTile. At each step the block copies the kTile x kTile tile of A
    //       (its rows, the step's columns) and of B (the step's rows, its columns) into shared
    //       memory, each thread one element of each, coalesced; then every thread accumulates
    //       its dot product over the step from shared memory. Where a tile reaches past M, N or
    //       K, store something that leaves the dot products unchanged. Then ask yourself, for
    //       each moment a thread reads a shared element another thread writes: is that write
    //       guaranteed to have happened, and not yet been replaced?
    // TODO: C(row, col) = alpha * dot + beta * C(row, col) inside the matrix only, reading C
    //       only when beta != 0.
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // TODO: one block of kThreads threads per kTile x kTile tile of C (course::ceil_div along N
    //       and M); launch sgemm_smem_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("sgemm_smem: write the tiled kernel and launch it, then delete this line");
}
