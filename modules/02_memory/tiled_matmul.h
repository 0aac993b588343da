// Contract of 02_memory/tiled_matmul. Read-only: the checker calls exactly this.
#pragma once

// C = A * B:  C[i * N + j] = sum over k of A[i * K + k] * B[k * N + j]
// for 0 <= i < M, 0 <= j < N, in float32 arithmetic (no tensor cores, no lower precision).
// A is M x K, B is K x N, C is M x N, all row-major and dense, all device pointers. Every element
// of C must be written (it holds garbage on entry). 1 <= M, N, K <= 2^20, none of them needs to be
// a multiple of anything, and each matrix has at most 2^24 elements (the checker's largest: 4096 x
// 4096). Enqueue the work on the default stream and return; the checker synchronizes.
void tiled_matmul(const float* A, const float* B, float* C, int M, int N, int K);
