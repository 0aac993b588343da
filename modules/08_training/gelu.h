// Contract of 08_training/gelu. Read-only: the checker calls exactly this (and the trainer's
// learner table, trainer/ops.h, calls it around the MLP's first linear layer).
#pragma once

#include <cuda_bf16.h>

// GPT-2's GELU, the tanh approximation (also PyTorch's gelu(approximate="tanh") and cuBLASLt's
// GELU epilogues): with u(x) = kGeluScale * (x + kGeluCubic * x^3),
//   GELU(x)  = 0.5 * x * (1 + tanh(u))
//   GELU'(x) = 0.5 * (1 + tanh(u))
//              + 0.5 * x * (1 - tanh(u)^2) * kGeluScale * (1 + 3 * kGeluCubic * x^2)
// GELU' is the derivative of this GELU, not of the exact x * Phi(x) (erf) form.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// gelu_forward: out[i] = GELU(inp[i]) for 0 <= i < n. out and inp do not overlap.
//
// gelu_backward: dinp[i] = dout[i] * GELU'(inp[i]) for 0 <= i < n, WRITTEN (not accumulated):
// the gradient with respect to the GELU's input, given the gradient dout of its output and the
// input inp saved by the forward. dinp may be the same pointer as dout (computed in place, as the
// trainer does: dout is the product dout @ W of the next layer's backward, and is overwritten by
// its gradient); apart from that, no two pointers overlap.
//
// Activations are float, or bf16 (__nv_bfloat16, the trainer's mixed precision: compute
// capability 8.0 or newer). Either way the arithmetic is float: a bf16 value is widened, the
// result computed in float and rounded once to bf16 when it is stored.
// All pointers are device pointers to n elements, aligned to their element (4 or 2 bytes) only:
// a view may start anywhere, so 16-byte accesses need a check first. n >= 1, any value (not a
// multiple of anything), and n may exceed 2^31: compute indices in 64 bits.
// Enqueue the work on the default stream and return; the checker synchronizes.
void gelu_forward(float* out, const float* inp, long long n);
void gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, long long n);
void gelu_backward(float* dinp, const float* inp, const float* dout, long long n);
void gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                   long long n);
