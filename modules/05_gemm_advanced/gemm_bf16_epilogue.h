// An optional entry point beside gemm_bf16 (gemm_bf16.h): the same product with either layout of
// each operand and an epilogue, what the three products of a linear layer in a training step
// need. Module 08's GPT trainer calls it where the GEMM library it loads defines it, and converts
// around gemm_bf16 where not (trainer/ops_learner.cu); wgmma_gemm's fast reference defines it (a
// stretch beyond the exercise: no stub asks for it). The checker (tests/gemm_bf16_test.cu) runs
// its cases where the file defines it and skips them, naming it, where not.
#pragma once

#include <cuda_bf16.h>

// How an operand lies in memory. kK: k contiguous, as gemm_bf16 takes both (A stored M x K, B
// stored N x K, row-major). kMN: the transpose, m (or n) contiguous (A stored K x M, B stored
// K x N, row-major): a linear layer's weight W (out x in) is B that way in dinp = dout W, and the
// activations are both operands that way in dW = dout^T inp.
enum class GemmMajor { kK, kMN };

// What the product P = A B^T (M x N, float accumulators) becomes as it is stored. Exactly one of
// `out` and `accumulate` is set:
//   out:        out[i][j] = bf16(v), v = P[i][j] + bias[j] (bias where not null);
//               with gelu_input: gelu_input[i][j] = bf16(v) and out[i][j] = bf16(GELU(v)), GELU
//               the tanh approximation of GPT-2 (0.5 v (1 + tanh(sqrt(2 / pi) (v + 0.044715 v^3))),
//               computed on the float v);
//               with gelu_backward_input (no bias): out[i][j] = bf16(P[i][j] * GELU'(g)),
//               g = gelu_backward_input[i][j], the derivative of that same GELU;
//   accumulate: accumulate[i][j] += P[i][j] in float (no bias, no GELU): the same bits on every
//               call with the same inputs (no floating-point atomics).
// Every matrix is M x N row-major; no output may overlap another matrix.
struct GemmEpilogue {
    __nv_bfloat16* out = nullptr;
    const __nv_bfloat16* bias = nullptr;
    __nv_bfloat16* gelu_input = nullptr;
    const __nv_bfloat16* gelu_backward_input = nullptr;
    float* accumulate = nullptr;
};

// P[i][j] = sum over k of A(i, k) B(j, k), A(i, k) = A[i * K + k] where a_major is kK, A[k * M + i]
// where kMN (B likewise with N), then the epilogue. All pointers are device pointers that start on
// 16-byte boundaries.
// - M, N and K from 1 to 2^16; N and the contiguous side of each operand (K where it is kK, M or N
//   where kMN) multiples of 8; every matrix fewer than 2^31 elements. M, N and K need not be
//   multiples of your tiles.
// Enqueue the work on the default stream and return; the checker synchronizes.
void gemm_bf16_epilogue(int M, int N, int K, const __nv_bfloat16* A, GemmMajor a_major,
                        const __nv_bfloat16* B, GemmMajor b_major, const GemmEpilogue& epilogue);
