// 08_training/gelu: GELU forward and backward (GPT-2's tanh approximation), float and bf16
// activations, 16 bytes per access.
//
// Teaches: an elementwise op and its derivative as a training step needs them (the backward
// writes the gradient of the GELU's input from the gradient of its output and the saved input),
// mixed precision at the boundary of a kernel (bf16 in memory, float in registers, one rounding
// when stored), and one kernel for both types by moving 16 bytes per access whatever the type: 4
// floats or 8 bf16. Memory-bound: the checker reports the bandwidth next to a device copy.
//
// Run:  grader run 08/gelu             Stuck:  grader hint 08/gelu
// Contract: gelu.h                     Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include "course/activation.h"
#include "course/exercise.h"
#include "gelu.h"

using course::from_float;
using course::to_float;

__device__ float gelu(float x) {
    // TODO: 0.5 * x * (1 + tanh(u)), u = kGeluScale * (x + kGeluCubic * x^3) (gelu.h).
    return x;
}

__device__ float gelu_derivative(float x) {
    // TODO: the derivative of gelu() above, not of the exact (erf) GELU: product rule on
    //       0.5 * x * (1 + tanh(u)), chain rule through tanh (tanh' = 1 - tanh^2) and u.
    return 1.0f;
}

// TODO: gelu_forward_kernel<Act>(out, inp, n): out[i] = from_float<Act>(gelu(to_float(inp[i])))
//       for every i < n, with a grid-stride loop and a 64-bit index (n may exceed 2^31).
// TODO: gelu_backward_kernel<Act>(dinp, inp, dout, n): dinp[i] = dout[i] * gelu_derivative(inp[i])
//       (written, not added). dinp may be dout: read both inputs of element i before writing it.
// TODO: then move 16 bytes per access (4 floats or 8 bf16) where every pointer is 16-byte aligned
//       and n a multiple of that width (course::is_aligned), one value per access otherwise.

template <typename Act>
void forward(Act* out, const Act* inp, long long n) {
    // TODO: launch the forward kernel (grid from course::ceil_div), then CUDA_CHECK_LAUNCH().
    COURSE_TODO("gelu_forward: write the kernel and launch it, then delete this line");
}

template <typename Act>
void backward(Act* dinp, const Act* inp, const Act* dout, long long n) {
    // TODO: launch the backward kernel, then CUDA_CHECK_LAUNCH().
    COURSE_TODO("gelu_backward: write the kernel and launch it, then delete this line");
}

void gelu_forward(float* out, const float* inp, long long n) { forward(out, inp, n); }
void gelu_forward(__nv_bfloat16* out, const __nv_bfloat16* inp, long long n) {
    forward(out, inp, n);
}
void gelu_backward(float* dinp, const float* inp, const float* dout, long long n) {
    backward(dinp, inp, dout, n);
}
void gelu_backward(__nv_bfloat16* dinp, const __nv_bfloat16* inp, const __nv_bfloat16* dout,
                   long long n) {
    backward(dinp, inp, dout, n);
}
