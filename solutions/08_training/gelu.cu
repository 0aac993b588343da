// 08_training/gelu: GELU forward and backward (GPT-2's tanh approximation), float and bf16
// activations, 16 bytes per access. Reference solution.
//
// Teaches: an elementwise op and its derivative as a training step needs them (the backward
// writes the gradient of the GELU's input from the gradient of its output and the saved input),
// mixed precision at the boundary of a kernel (bf16 in memory, float in registers, one rounding
// when stored), and one kernel for both types by moving 16 bytes per access whatever the type: 4
// floats or 8 bf16. Memory-bound: the checker reports the bandwidth next to a device copy.
//
// Run:  grader run 08/gelu --solutions
// Contract: gelu.h                     Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include <algorithm>

#include "course/activation.h"
#include "course/exercise.h"
#include "gelu.h"

using course::from_float;
using course::to_float;

namespace {

constexpr int kThreads = 256;
// Enough blocks of kThreads to fill any GPU many times over (an H100 holds 264 at once); the
// grid-stride loop covers what is left, so a grid never needs more.
constexpr long long kMaxBlocks = 65536;

// The inner argument of tanh, u(x) = sqrt(2 / pi) * (x + 0.044715 x^3).
__device__ float gelu_inner(float x) { return kGeluScale * (x + kGeluCubic * x * x * x); }

__device__ float gelu(float x) { return 0.5f * x * (1.0f + tanhf(gelu_inner(x))); }

// d/dx of gelu() above, by the product rule on 0.5 x * (1 + tanh(u)) and the chain rule through
// tanh (tanh' = 1 - tanh^2) and u (u' = sqrt(2 / pi) * (1 + 3 * 0.044715 x^2)). It must be the
// derivative of the function the forward computed: the exact GELU's derivative, Phi(x) + x phi(x),
// differs from it by up to 9e-4, a wrong gradient that a float check sees.
__device__ float gelu_derivative(float x) {
    const float t = tanhf(gelu_inner(x));
    const float du_dx = kGeluScale * (1.0f + 3.0f * kGeluCubic * x * x);
    return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du_dx;
}

// kWidth values of a view moved as one access. The alignment is what lets the compiler make it
// one 16-byte load or store (kWidth * sizeof(Act) = 16) instead of kWidth narrow ones.
template <typename Act, int kWidth>
struct alignas(sizeof(Act) * kWidth) Pack {
    Act value[kWidth];
};

// Values of Act in 16 bytes: the widest access a thread can make.
template <typename Act>
constexpr int kVector = 16 / sizeof(Act);

// Whether n values at every one of these pointers can be moved kVector<Act> at a time: whole
// packs only, each starting on a 16-byte boundary. A view may start anywhere (the contract), and
// a 16-byte access at an address that is not a multiple of 16 is an error ("misaligned
// address"), so every pointer is checked, not only one of them.
template <typename Act, typename... Pointers>
bool moves_16_bytes(long long n, const Pointers*... pointers) {
    return n % kVector<Act> == 0 && (course::is_aligned(pointers, 16) && ...);
}

// Blocks for `packs` packs, one per thread where that fits under kMaxBlocks.
unsigned blocks_for(long long packs) {
    return static_cast<unsigned>(std::min(course::ceil_div(packs, kThreads), kMaxBlocks));
}

// out[i] = GELU(inp[i]) over `packs` packs of kWidth values.
template <typename Act, int kWidth>
__global__ void gelu_forward_kernel(Act* out, const Act* inp, long long packs) {
    using P = Pack<Act, kWidth>;
    // 64-bit pack index and stride: n may exceed 2^31, and so may packs when kWidth is 1.
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long p = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
         p += stride) {
        const P x = reinterpret_cast<const P*>(inp)[p];
        P y;
#pragma unroll
        for (int k = 0; k < kWidth; ++k) y.value[k] = from_float<Act>(gelu(to_float(x.value[k])));
        reinterpret_cast<P*>(out)[p] = y;
    }
}

// dinp[i] = dout[i] * GELU'(inp[i]) over `packs` packs of kWidth values. dinp may be dout (in
// place): each thread reads its pack of dout before it writes the same pack of dinp, and no
// other thread touches it, so no __restrict__ here.
template <typename Act, int kWidth>
__global__ void gelu_backward_kernel(Act* dinp, const Act* inp, const Act* dout, long long packs) {
    using P = Pack<Act, kWidth>;
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long p = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; p < packs;
         p += stride) {
        const P x = reinterpret_cast<const P*>(inp)[p];
        const P g = reinterpret_cast<const P*>(dout)[p];
        P d;
#pragma unroll
        for (int k = 0; k < kWidth; ++k)
            d.value[k] =
                from_float<Act>(to_float(g.value[k]) * gelu_derivative(to_float(x.value[k])));
        reinterpret_cast<P*>(dinp)[p] = d;
    }
}

// 16 bytes per access where n and the views allow it, else one value per access (a view that
// starts off a 16-byte boundary, or an n with a tail): the trainer's tensors always take the
// first way.
template <typename Act>
void forward(Act* out, const Act* inp, long long n) {
    constexpr int kWide = kVector<Act>;
    if (moves_16_bytes<Act>(n, out, inp))
        gelu_forward_kernel<Act, kWide><<<blocks_for(n / kWide), kThreads>>>(out, inp, n / kWide);
    else
        gelu_forward_kernel<Act, 1><<<blocks_for(n), kThreads>>>(out, inp, n);
    CUDA_CHECK_LAUNCH();
}

template <typename Act>
void backward(Act* dinp, const Act* inp, const Act* dout, long long n) {
    constexpr int kWide = kVector<Act>;
    if (moves_16_bytes<Act>(n, dinp, inp, dout))
        gelu_backward_kernel<Act, kWide>
            <<<blocks_for(n / kWide), kThreads>>>(dinp, inp, dout, n / kWide);
    else
        gelu_backward_kernel<Act, 1><<<blocks_for(n), kThreads>>>(dinp, inp, dout, n);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

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
