// 08_training/linear_backward: the backward pass of a linear layer: dinp and dweight with one
// tiled GEMM of your own, read through strides, and dbias as a deterministic column sum.
//
// Teaches: the two transposed products of a layer's backward (dinp = dout @ W, dweight += dout^T
// @ inp) as one kernel that reads its operands through strides, so that a transpose is a choice
// of strides and never a copy; module 04's shared-memory tiles and 8 x 8 register blocking with
// guards for every edge (the trainer's shapes are multiples of 32, the checker's are not); an
// epilogue that overwrites, accumulates, or multiplies by GELU' (the MLP's activation fused into
// the product that precedes it in the backward); and column sums without atomics. Timed against
// cuBLAS SGEMM doing the same two products.
//
// Run:  grader run 08/linear_backward  Stuck:  grader hint 08/linear_backward
// Contract: linear_backward.h          Notes:  notes/08_training.md, notes/04_sgemm.md
#include "course/exercise.h"
#include "gelu.h"  // kGeluScale, kGeluCubic: GELU' must be the derivative of the forward's GELU
#include "linear_backward.h"

// A matrix operand read through strides: element (i, k) is data[i * i_stride + k * k_stride].
// A row-major matrix has (row length, 1); its transpose is the same memory with the strides
// swapped.
struct Operand {
    const float* data;
    int i_stride, k_stride;
};

// TODO: gemm_kernel: out[M][N] (row-major) with out[i][j] = sum over k < K of X(i, k) * Y(j, k),
//       X and Y Operands. Module 04's technique: one block per 128 x 128 tile of out, a loop over
//       k in steps of 32 that loads a 128 x 32 tile of X and of Y into shared memory (0 past M,
//       N or K: the last tiles are partial), __syncthreads(), 8 x 8 results per thread from
//       registers, __syncthreads(). Then the epilogue: out = the sum (dinp), out += the sum
//       (dweight), or out = the sum * GELU'(gelu_input[i][j]) (dinp of the MLP's second layer).
// TODO: column_sums_kernel: dbias[o] += the sum over r of dout[r][o], deterministically (threads
//       own columns; partial sums combined in shared memory in a fixed order; no atomicAdd).

void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* gelu_input, const float* weight, int rows, int C, int OC) {
    // TODO: dinp[r][c] = sum over o of dout[r][o] * weight[o][c]: X = dout, Y(c, o) = weight[o][c].
    // TODO: dweight[o][c] += sum over r of dout[r][o] * inp[r][c]: X(o, r) = dout[r][o],
    //       Y(c, r) = inp[r][c].
    // TODO: dbias (where not null) += the column sums of dout.
    // TODO: CUDA_CHECK_LAUNCH() after each launch.
    COURSE_TODO("linear_backward: write the GEMM and the column sums, then delete this line");
}
