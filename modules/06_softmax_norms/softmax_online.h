// Contract of 06_softmax_norms/softmax_online. Read-only: the checker calls exactly this.
#pragma once

// For every row r < rows and column c < cols of a row-major matrix:
//   out[r * cols + c] = exp(in[r * cols + c] - m_r) / sum_k exp(in[r * cols + k] - m_r),
//   where m_r = max_k in[r * cols + k]   (k runs over the row's cols columns).
// Each row of out is a probability distribution: entries in [0, 1] that sum to 1.
//
// in and out are device pointers to rows * cols floats; they do not overlap and need not be
// 16-byte aligned (the checker also passes pointers that are one float past an aligned address).
// Inputs are finite or -inf (an -inf entry comes out 0), and every row has at least one finite
// entry; finite inputs can be as large as 1e4 in magnitude. 1 <= rows, 1 <= cols,
// rows * cols < 2^31. Accuracy: compute each exponential with expf (not __expf) and sum in float.
// Enqueue the work on the default stream and return; the checker synchronizes.
void softmax_online(const float* in, float* out, int rows, int cols);
