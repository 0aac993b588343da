// The contract of the tensor-core rungs of 05_gemm_advanced (wmma_gemm, mma_gemm, mma_pipeline,
// wgmma_gemm). Read-only: the checker calls exactly this.
#pragma once

#include "course/tensor_element.h"

// C = A B^T, 16-bit float inputs, products accumulated in float32, C in float32:
//     C[i * N + j] = sum over k of A[i * K + k] * B[j * K + k]
// for 0 <= i < M, 0 <= j < N. A is M x K and B is N x K, both row-major, so both are K-contiguous:
// the layout cuBLAS calls "TN" (notes/05_gemm_advanced.md says why), and the one a linear layer's
// weight W (out_features x in_features) has as B. C is M x N row-major, output only: its old
// contents may be anything, NaN included, and must not be read. All device pointers.
// - The inputs are course::TensorElement: bf16 (__nv_bfloat16), or fp16 (__half) where this build
//   is for a GPU without bf16 tensor cores (compute capability 7.5, a T4: course/tensor_element.h).
//   The name stays gemm_bf16 for both.
// - M, N and K are multiples of 8 (a row of A or B is a whole number of 16-byte chunks), from 8 up
//   to 2^16 each, and each matrix has fewer than 2^31 elements (int indices do). M and N need not
//   be multiples of your tile: the last tiles are partial. K need not be a multiple of your K step.
// - A, B and C start on 16-byte boundaries (so every row of A and B does).
//
// Enqueue the work on the default stream and return; the checker synchronizes.
void gemm_bf16(int M, int N, int K, const course::TensorElement* A, const course::TensorElement* B,
               float* C);
