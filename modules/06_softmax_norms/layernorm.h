// Contract of 06_softmax_norms/layernorm. Read-only: the checker calls exactly this.
#pragma once

// Added to the variance before the square root, as in PyTorch's nn.LayerNorm and GPT-2.
constexpr float kLayerNormEps = 1e-5f;

// LayerNorm of each row of x (rows x cols, row-major, float32):
//   mean[r] = (1 / cols) * sum_c x[r][c]
//   var     = (1 / cols) * sum_c (x[r][c] - mean[r])^2        (biased: divide by cols, not cols - 1)
//   rstd[r] = 1 / sqrt(var + kLayerNormEps)
//   y[r][c] = (x[r][c] - mean[r]) * rstd[r] * gamma[c] + beta[c]
// mean and rstd (rows floats each) are outputs too: the backward pass reuses them.
// x and y (rows x cols floats each), gamma and beta (cols floats each), mean and rstd (rows floats
// each) are device pointers, none aliasing another. Enqueue the work on the default stream and
// return; the checker synchronizes.
// rows >= 1 and cols >= 1, any values (not multiples of anything); rows * cols may exceed 2^31,
// so compute offsets in 64 bits. x may hold rows of equal values (variance 0) and rows whose
// mean is large next to their spread.
void layernorm(const float* x, const float* gamma, const float* beta, float* y, float* mean,
               float* rstd, int rows, int cols);
