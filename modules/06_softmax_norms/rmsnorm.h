// Contract of 06_softmax_norms/rmsnorm. Read-only: the checker calls exactly this.
#pragma once

// Added to the mean of squares before the square root (Llama 2's rms_norm_eps).
constexpr float kRmsNormEps = 1e-5f;

// RMSNorm of each row of x (rows x cols, row-major, float32), as in Llama:
//   y[r][c] = x[r][c] / sqrt((1 / cols) * sum_k x[r][k]^2 + kRmsNormEps) * weight[c]
// x, weight (cols floats) and y are device pointers, none aliasing another. Enqueue the work on
// the default stream and return; the checker synchronizes. rows >= 1 and cols >= 1, any values
// (not multiples of anything); rows * cols may exceed 2^31, so compute offsets in 64 bits.
void rmsnorm(const float* x, const float* weight, float* y, int rows, int cols);
