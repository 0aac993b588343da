// The contract of every rung of 04_sgemm (sgemm_coalesced, sgemm_smem, sgemm_blocktile_1d,
// sgemm_blocktile_2d, sgemm_vectorized). Read-only: the checker calls exactly this.
#pragma once

// C = alpha * A * B + beta * C in float32 arithmetic (no tensor cores, no lower precision):
//     C[i * N + j] = alpha * (sum over k of A[i * K + k] * B[k * N + j]) + beta * C[i * N + j]
// for 0 <= i < M, 0 <= j < N. A is M x K, B is K x N, C is M x N, all row-major and dense, all
// device pointers.
// - beta == 0: C is output only. Its old contents may be anything, NaN included, and must not be
//   read (0 * NaN is NaN, not 0).
// - beta != 0: C is read and updated in place.
// 1 <= M, N, K <= 2^20, none of them needs to be a multiple of anything, and each matrix has
// fewer than 2^31 elements (int indices do). A, B and C are only promised a float's alignment
// (4 bytes): a row starts on a 16-byte boundary only when its matrix does and its length is a
// multiple of 4, which is what a float4 load needs.
// (The order of the arguments is cuBLAS's: sizes, alpha, A, B, beta, C.)
//
// Enqueue the work on the default stream and return; the checker synchronizes.
void sgemm(int M, int N, int K, float alpha, const float* A, const float* B, float beta, float* C);
