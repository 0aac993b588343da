// Contract of 01_basics/naive_matmul. Read-only: the checker calls exactly this.
#pragma once

// C = A * B in float32, all three row-major: A is M x K, B is K x N, C is M x N, so
//     C[r * N + c] = sum over k of A[r * K + k] * B[k * N + c].
// A, B and C are device pointers; C's old contents are not read, every element is overwritten.
// 1 <= M <= 65535, 1 <= N, 1 <= K, and M * K, K * N and M * N are at most 2^22 (the checker's
// largest: 2048 x 2048; int indices do).
// (The order of the arguments is cuBLAS's: sizes first, then the matrices.)
//
// Enqueue the work on the default stream and return; the checker synchronizes.
void naive_matmul(int M, int N, int K, const float* A, const float* B, float* C);
