// 06_softmax_norms/softmax_block: softmax with a warp or a block per row, the row kept on chip.
//
// Teaches: giving a row to a group of threads so that loads are coalesced, reducing the group's
// partial maxima and sums with warp shuffles and a small shared array, float4 loads where the
// alignment allows them, and holding the row on chip (in registers, or in shared memory when it
// is too long for registers) so that device memory reads each row exactly once.
//
// Run:  grader run 06/softmax_block       Stuck:  grader hint 06/softmax_block
// Contract: softmax_block.h               Notes:  notes/06_softmax_norms.md
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "course/exercise.h"
#include "softmax_block.h"

// The two ways a row's values combine.
struct Max {
    __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};
struct Sum {
    __device__ float operator()(float a, float b) const { return a + b; }
};

// Every lane ends with op over the 32 values of its warp: warp_reduce(v, Max{}) is the warp's
// maximum, warp_reduce(v, Sum{}) its sum.
template <class Op>
__device__ float warp_reduce(float v, Op op) {
    // TODO: butterfly with __shfl_xor_sync(0xffffffff, v, offset) for offset = 16, 8, 4, 2, 1,
    //       combining each time with op.
    return v;
}

// TODO: the reduction of a whole block (for long rows): each warp reduces its values, lane 0 of
//       each warp writes the warp's result to a __shared__ float[32], __syncthreads(), then a
//       warp reduces those blockDim.x / 32 values (lanes past them use the identity: -INFINITY
//       for the max, 0 for the sum) and the result reaches every thread. Use a separate shared
//       array for the sum than for the max, or a barrier before reusing one.

__global__ void softmax_block_kernel(const float* in, float* out, int rows, int cols) {
    // TODO: decide which threads share a row: one warp per row for short rows (several rows per
    //       block), the whole block for long rows. Find this thread's row and its place in the
    //       row's group; a warp whose row is past the last one returns as a whole.
    // TODO: read the row from device memory once, and keep it on chip. In registers: each thread
    //       holds a fixed number of the row's vectors, Vec cache[N] with N a compile-time
    //       constant (a template parameter), vector k = place + j * group in cache[j] (the group
    //       reads neighbouring vectors: coalesced), every loop over j fully unrolled (#pragma
    //       unroll), or the array lands in local memory. A row too long for registers goes to
    //       extern __shared__ memory instead: each thread stores the vectors it loads there, at
    //       the same index, and later reads back only those.
    // TODO: the maximum: each thread over its vectors, then over the group.
    // TODO: the exponentials expf(x - max), from the on-chip copy, and their sum over the group.
    // TODO: one write pass: exp * (1 / sum).
    // TODO (speed): when every row starts on a 16-byte boundary (cols % 4 == 0 and in, out
    //       aligned), load float4s: reinterpret_cast<const float4*>(row). A template over the
    //       vector type (float or float4) keeps one kernel body for both.
}

void softmax_block(const float* in, float* out, int rows, int cols) {
    // TODO: choose from cols where the row is kept (a warp's registers, a block's registers,
    //       shared memory: opt in above 48 KB with cudaFuncSetAttribute(kernel,
    //       cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), the limit from
    //       cudaDevAttrMaxSharedMemoryPerBlockOptin; rows longer still read device memory
    //       again), compute the grid with course::ceil_div, launch (the float4 or the float
    //       version), then CUDA_CHECK_LAUNCH().
    COURSE_TODO("softmax_block: launch softmax_block_kernel, then delete this line");
}
