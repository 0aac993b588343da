// An optional entry point beside layernorm_backward (layernorm_backward.h): the same gradients of
// bf16 rows, added into the trainer's: the residual stream's gradient gathers what every
// LayerNorm of a layer sends it, and the micro-batches' parameter gradients add up. Module 08's
// trainer calls it where the library it loads defines it, and otherwise converts around
// layernorm_backward (x, dy and gamma copied to float, its written outputs added in a pass of
// their own); layernorm_backward's fast reference defines it (no stub asks for it). The checker
// (tests/layernorm_backward_test.cu) runs its cases where the file defines it and skips them,
// naming it, where not.
#pragma once

#include <cuda_bf16.h>

// The gradients of layernorm_backward.h's formulas, from bf16 x, dy and gamma and the forward's
// float mean and rstd, computed in float and ADDED INTO the outputs (where layernorm_backward
// writes them):
//   dx[r][c] += rstd[r] * (g - mean_c(g) - xhat * mean_c(g * xhat))   (rounded to bf16 once)
//   dgamma[c] += sum_r dy[r][c] * xhat[r][c],   dbeta[c] += sum_r dy[r][c]   (float)
// The same bits on every call with the same inputs (no floating-point atomics). rows >= 1 and
// cols >= 1, any values, rows * cols at most 2^26 (the trainer calls it in chunks of rows); the
// pointers are 2-byte aligned (bf16) and 4-byte aligned (float), no more; none aliases another.
void layernorm_backward_bf16(const __nv_bfloat16* x, const __nv_bfloat16* dy,
                             const __nv_bfloat16* gamma, const float* mean, const float* rstd,
                             __nv_bfloat16* dx, float* dgamma, float* dbeta, int rows, int cols);
