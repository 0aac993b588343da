// 04_sgemm/sgemm_blocktile_2d: each thread computes a kTM x kTN block of C as outer products.
//
// Teaches: 2D register blocking. At each step k a thread copies kTM values of A's column k and
// kTN values of B's row k from shared memory into registers, then does kTM * kTN multiply-adds
// with them (their outer product): 16 shared loads for 64 FMAs with 8 x 8, where the 1D rung
// needed 9 for 8. Bigger block tiles (128 x 128) also halve the global traffic per FMA again,
// and longer steps of k (32: tuned with dev/sweep.sh) halve the barriers per FMA.
//
// Run:  grader run 04/sgemm_blocktile_2d   Stuck:   grader hint 04/sgemm_blocktile_2d
// Contract: sgemm.h                        Notes:   notes/04_sgemm.md     Ladder: grader report 04
#include "course/exercise.h"
#include "sgemm_blocktile_2d.h"

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

static_assert(kBM % kTM == 0 && kBN % kTN == 0, "the block tile splits into whole thread tiles");
static_assert((kBM + kBN) * kBK * sizeof(float) <= 48 * 1024,
              "both tiles fit in the 48 KB of static shared memory a block has without opting in");

}  // namespace

__global__ void __launch_bounds__(kThreads, kBlocksPerSm)
    sgemm_blocktile_2d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                              const float* __restrict__ B, float beta, float* __restrict__ C) {
    // TODO: the shared tiles as in sgemm_blocktile_1d (kBM x kBK of A, kBK x kBN of B). The
    //       block tile is a grid of (kBM / kTM) x (kBN / kTN) thread tiles, one per thread:
    //       find this thread's first row and first column in the block tile. Registers: a
    //       kTM x kTN array of accumulators, and room for kTM values of A and kTN of B.
    // TODO: walk K in steps of kBK: load both tiles as in the 1D rung (now kBM * kBK / kThreads
    //       elements of each per thread), with the barriers. For each k of the step, fill the
    //       kTM + kTN registers from the tiles, then update all kTM * kTN accumulators from
    //       registers only.
    // TODO: the kTM x kTN results to C (alpha, beta), inside the matrix only.
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // TODO: one block of kThreads threads per kBM x kBN tile of C (course::ceil_div); launch
    //       sgemm_blocktile_2d_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("sgemm_blocktile_2d: write the kernel and launch it, then delete this line");
}
