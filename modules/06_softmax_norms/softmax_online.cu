// 06_softmax_norms/softmax_online: the online softmax, one pass for the maximum and the sum
// together, then the write pass.
//
// Teaches: the online normalizer (a running maximum m and a sum d of exp(x - m) that is rescaled
// whenever m grows), the rule that merges two such partial results, and keeping the row on chip
// (in shared memory) between the two passes, so that device memory reads each row only once.
// The same (m, d) merge is the heart of flash attention in module 07.
//
// Run:  grader run 06/softmax_online      Stuck:  grader hint 06/softmax_online
// Contract: softmax_online.h              Notes:  notes/06_softmax_norms.md
#include <cfloat>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "softmax_online.h"

// A partial softmax over some of a row's values: max = the largest, sum = sum of exp(x - max).
// Nothing seen yet: {-FLT_MAX, 0} (not -INFINITY: see merge).
struct SoftmaxState {
    float max;
    float sum;
};

// The state of a and b together.
__device__ SoftmaxState merge(SoftmaxState a, SoftmaxState b) {
    // TODO: the common maximum, and both sums rescaled to it: each was taken against its own max.
    //       Careful with two empty states: with {-inf, 0}, expf(-inf - (-inf)) is NaN; with
    //       {-FLT_MAX, 0} it is expf(0) * 0 = 0.
    return a;
}

// The state after one more value x.
__device__ SoftmaxState add(SoftmaxState state, float x) {
    // TODO: new max = fmaxf(state.max, x); rescale the old sum by expf(old max - new max); add
    //       expf(x - new max). (For a float4, raise the max once for all four values.)
    return state;
}

__global__ void softmax_online_kernel(const float* in, float* out, int rows, int cols) {
    // TODO: the row's group of threads, as in softmax_block (a warp for short rows, the block for
    //       long ones); this thread's row and lane.
    // TODO: pass 1: each thread folds columns lane, lane + group, ... into its SoftmaxState with
    //       add().
    // TODO: merge the group's states: a butterfly of __shfl_xor_sync on both max and sum, then,
    //       for a block, lane 0 of each warp posts its warp's state to two __shared__ float[32]
    //       arrays, one __syncthreads(), and every warp (not warp 0 alone) merges all the posted
    //       states again, {-FLT_MAX, 0} in the lanes past them: every thread then holds the
    //       row's state without a second barrier.
    // TODO: pass 2: y = expf(x - max) * (1 / sum).
    // TODO (speed): for long rows, pass 1 can also copy the row into dynamic shared memory
    //       (extern __shared__), so pass 2 reads it there and device memory sees the row once.
    //       A 50304-float row is 201 KB: above 48 KB the launcher must opt in with
    //       cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
    //       cudaDevAttrMaxSharedMemoryPerBlockOptin says how much this GPU allows.
}

void softmax_online(const float* in, float* out, int rows, int cols) {
    // TODO: choose the group and block size from cols, the grid with course::ceil_div, the
    //       dynamic shared memory if you stage rows, launch, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("softmax_online: launch softmax_online_kernel, then delete this line");
}
