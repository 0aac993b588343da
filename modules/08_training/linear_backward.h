// Contract of 08_training/linear_backward. Read-only: the checker calls exactly this (and the
// trainer's learner table, trainer/ops.h, calls it as its linear_backward in the all-fp32 mode).
#pragma once

// The backward pass of a linear layer y = inp @ weight^T + bias, in float32 arithmetic (no tensor
// cores, no lower precision):
//   inp [rows][C], weight [OC][C] (PyTorch's nn.Linear layout), dout = dL/dy [rows][OC], all
//   row-major and dense; rows = B * T tokens, C input and OC output channels.
// Three results:
//   dinp[r][c]     = sum over o of dout[r][o] * weight[o][c]          dinp = dout @ weight
//                    WRITTEN (dinp's old contents may be NaN and must not be read); where
//                    gelu_input is not null (inp was GELU(gelu_input), the MLP's second layer),
//                    times GELU'(gelu_input[r][c]), the derivative of the tanh approximation
//                    (08_training/gelu.h), so that dinp is the gradient with respect to
//                    gelu_input;
//   dweight[o][c] += sum over r of dout[r][o] * inp[r][c]             dweight += dout^T @ inp
//   dbias[o]      += sum over r of dout[r][o]     (column sums of dout; dbias may be null: a
//                                                  layer without bias, nothing to compute)
// dweight and dbias ACCUMULATE (the trainer adds micro-batches up); dinp does not. The result must
// be deterministic: the same inputs give the same bits on every call (no floating-point
// atomicAdd across blocks, whose order changes from run to run).
// Every pointer is a device pointer aligned to a float (4 bytes) only; no output overlaps an
// input or another output. rows, C, OC >= 1, none a multiple of anything (GPT-2 124M's C and OC
// are 768 and 3072, the checker's shapes have tails), and every matrix has fewer than 2^31
// elements (int offsets do).
// Enqueue the work on the default stream and return; the checker synchronizes.
void linear_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* gelu_input, const float* weight, int rows, int C, int OC);
