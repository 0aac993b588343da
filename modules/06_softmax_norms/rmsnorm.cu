// 06_softmax_norms/rmsnorm: RMSNorm (Llama), one block per row.
//
// Teaches: a block-wide sum reduction (warp shuffles, then shared memory across warps), float4
// loads and stores, keeping the row on chip between the sum and the write, and why RMSNorm needs
// no Welford: a sum of squares has no cancellation. Memory-bound: the checker reports your
// bandwidth next to a device-to-device copy.
//
// Run:  grader run 06/rmsnorm          Stuck:  grader hint 06/rmsnorm
// Contract: rmsnorm.h                  Notes:  notes/06_softmax_norms.md
#include "course/exercise.h"
#include "rmsnorm.h"

__global__ void rmsnorm_kernel(const float* x, const float* weight, float* y, int cols) {
    // TODO: one block per row: row = blockIdx.x; the row starts at x + std::size_t(row) * cols.
    // TODO: pass 1: each thread sums x * x over columns t, t + blockDim.x, ... (coalesced).
    // TODO: reduce the block's partial sums: __shfl_xor_sync within each warp, then one value per
    //       warp through a __shared__ float[32] and __syncthreads(); every thread needs the total.
    // TODO: scale = rsqrtf(total / cols + kRmsNormEps); pass 2: y = x * scale * weight.
    // TODO (fast): float4 loads and stores when cols % 4 == 0 and the pointers are 16-byte aligned.
    // TODO (fast): read x from device memory once: keep the thread's columns on chip between the
    //       passes, in registers for rows up to a few thousand floats (a fixed-size array, fully
    //       unrolled loops), in dynamic shared memory for longer ones (see layernorm.cu).
}

void rmsnorm(const float* x, const float* weight, float* y, int rows, int cols) {
    // TODO: launch rmsnorm_kernel with one block per row (grid = rows) and a multiple of 32
    //       threads, then CUDA_CHECK_LAUNCH() (dynamic shared memory, if any: see layernorm.cu).
    COURSE_TODO("rmsnorm: write rmsnorm_kernel and launch it, then delete this line");
}
