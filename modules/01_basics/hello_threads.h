// Contract of 01_basics/hello_threads. Read-only: the checker calls exactly this.
#pragma once

// 1D: out[i] = i for every 0 <= i < n, each element written by the one thread of a 1D grid whose
// global index is i. out is a device pointer to n ints; 1 <= n <= 2^30.
void global_index_1d(int* out, int n);

// 2D: a rows x cols matrix of ints, row-major (row r starts at element r * cols). Every element
// holds its own flat index: out[r * cols + c] = r * cols + c, written by the thread of a 2D grid
// whose global x index is the column c and whose global y index is the row r (x runs along a
// row, so that neighbouring threads write neighbouring ints). out is a device pointer to
// rows * cols ints; 1 <= rows <= 65535, 1 <= cols <= 65535, rows * cols < 2^31.
void global_index_2d(int* out, int rows, int cols);

// Both: enqueue the work on the default stream and return; the checker synchronizes.
