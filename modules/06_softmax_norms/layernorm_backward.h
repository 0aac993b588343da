// Contract of 06_softmax_norms/layernorm_backward. Read-only: the checker calls exactly this.
#pragma once

// Gradients of 06_softmax_norms/layernorm (rows x cols, row-major, float32), given dy = dL/dy
// and the mean and rstd that the forward pass saved (rows floats each). With
//   xhat[r][c] = (x[r][c] - mean[r]) * rstd[r]   and   g[r][c] = dy[r][c] * gamma[c]:
//   dx[r][c]  = rstd[r] * (g[r][c] - (1 / cols) * sum_k g[r][k]
//                                  - xhat[r][c] * (1 / cols) * sum_k g[r][k] * xhat[r][k])
//   dgamma[c] = sum_r dy[r][c] * xhat[r][c]
//   dbeta[c]  = sum_r dy[r][c]
// dx (rows x cols floats), dgamma and dbeta (cols floats each) are written, not accumulated
// into. The result must be deterministic: the same inputs give the same bits on every call (so
// no floating-point atomicAdd, whose order changes from run to run).
// x and dy (rows x cols floats each), gamma (cols floats), mean and rstd (rows floats each), dx,
// dgamma and dbeta are device pointers, none aliasing another.
// Enqueue the work on the default stream and return; the checker synchronizes. rows >= 1 and
// cols >= 1, any values (not multiples of anything); rows * cols may exceed 2^31, so compute
// offsets in 64 bits.
void layernorm_backward(const float* x, const float* dy, const float* gamma, const float* mean,
                        const float* rstd, float* dx, float* dgamma, float* dbeta, int rows,
                        int cols);
