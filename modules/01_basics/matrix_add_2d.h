// Contract of 01_basics/matrix_add_2d. Read-only: the checker calls exactly this.
#pragma once

// C = A + B for rows x cols float matrices, each stored row-major with a leading dimension
// ld >= cols: element (r, c) of a matrix lives at index r * ld + c of its buffer, so each row is
// followed by ld - cols floats of padding (a matrix that is a window into a wider one).
//
// A, B and C are device pointers to rows * ld floats each. Write C(r, c) = A(r, c) + B(r, c) for
// every 0 <= r < rows, 0 <= c < cols, and nothing else: C's padding (the indices r * ld + c with
// cols <= c < ld) belongs to someone else and must keep its contents.
// 1 <= rows <= 65535, 1 <= cols <= ld <= 2^30; rows * ld may exceed 2^31 (index in 64 bits).
//
// Enqueue the work on the default stream and return; the checker synchronizes.
void matrix_add_2d(const float* A, const float* B, float* C, int rows, int cols, int ld);
