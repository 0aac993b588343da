// 04_sgemm/sgemm_blocktile_1d: each thread computes a column of kTM results in registers.
//
// Teaches: 1D register blocking. In sgemm_smem every multiply-add needs a shared-memory load of
// B; here a thread keeps kTM = 8 accumulators for 8 rows of one column of C, so each value of B
// it loads from shared memory serves 8 multiply-adds. The block tile becomes rectangular in the
// loop's terms: 64 x 64 outputs, but only 8 columns of A and 8 rows of B per step of k0.
//
// Run:  grader run 04/sgemm_blocktile_1d   Stuck:   grader hint 04/sgemm_blocktile_1d
// Contract: sgemm.h                        Notes:   notes/04_sgemm.md     Ladder: grader report 04
#include "course/exercise.h"
#include "sgemm_blocktile_1d.h"

namespace {

constexpr int kBM = 64;  // rows of C per block (and rows of the A tile)
constexpr int kBN = 64;  // columns of C per block (and columns of the B tile)
constexpr int kBK = 8;   // columns of the A tile = rows of the B tile: one step of k0
constexpr int kTM = 8;   // rows of C per thread, one accumulator each
constexpr int kThreads = (kBM / kTM) * kBN;  // one thread per kTM x 1 column piece of the C tile

static_assert(kBM % kTM == 0, "a block's rows split into whole columns of kTM");
static_assert((kBM + kBN) * kBK * sizeof(float) <= 48 * 1024,
              "both tiles fit in the 48 KB of static shared memory a block has without opting in");

}  // namespace

__global__ void __launch_bounds__(kThreads)
    sgemm_blocktile_1d_kernel(int M, int N, int K, float alpha, const float* __restrict__ A,
                              const float* __restrict__ B, float beta, float* __restrict__ C) {
    // TODO: a __shared__ kBM x kBK tile of A and a kBK x kBN tile of B. This block computes the
    //       kBM x kBN tile of C at (blockIdx.y * kBM, blockIdx.x * kBN); thread t computes kTM
    //       consecutive rows of one column of it, in kTM float accumulators. Choose the mapping
    //       so that a warp reads a row of the B tile without bank conflicts.
    // TODO: walk K in steps of kBK. Each step: the block loads both tiles (kThreads threads,
    //       kBM * kBK and kBK * kBN elements: each thread a few, coalesced, 0 outside A or B),
    //       the barriers sgemm_smem taught you, and in between, for each k of the step, one
    //       value of the B tile in a register, used for all kTM accumulators.
    // TODO: the kTM results to C (alpha, beta as in the previous rungs), inside the matrix only.
}

void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C) {
    // TODO: one block of kThreads threads per kBM x kBN tile of C (course::ceil_div); launch
    //       sgemm_blocktile_1d_kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("sgemm_blocktile_1d: write the kernel and launch it, then delete this line");
}
