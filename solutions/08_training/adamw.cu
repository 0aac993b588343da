// 08_training/adamw: one fused AdamW step: fp32 master weights and moments, bias correction,
// decoupled weight decay, the clipping factor, and the working copy written in the same pass.
// Reference solution.
//
// Teaches: the optimizer step of mixed-precision training as one memory-bound kernel (every
// parameter's five arrays read or written once: 28 bytes of float state per parameter, plus its
// working copy), why the master weights and both moments stay float (notes/08_training.md), and
// what makes AdamW differ from Adam with L2 regularization: the decay shrinks the weight itself
// and never enters the moments. Memory-bound: the checker reports the bandwidth next to a copy.
//
// Run:  grader run 08/adamw --solutions
// Contract: adamw.h                    Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include <algorithm>

#include "adamw.h"
#include "course/activation.h"
#include "course/exercise.h"

using course::from_float;

namespace {

constexpr int kThreads = 256;
// Enough blocks of kThreads to fill any GPU many times over; the grid-stride loop does the rest.
constexpr long long kMaxBlocks = 65536;
// Parameters per thread and loop trip: 4 floats, one 16-byte access per float array.
constexpr int kWidth = 4;

// kW values moved as one access (with kW = kWidth: 16 bytes of floats, 8 bytes of bf16). The
// alignment is what lets the compiler make it one wide load or store.
template <typename T, int kW>
struct alignas(sizeof(T) * kW) Pack {
    T value[kW];
};

// The step's scalars, as the trainer passes them.
struct Step {
    float lr, beta1, beta2, beta1_correction, beta2_correction, eps, weight_decay, grad_scale;
};

// One parameter: its master weight p and moments m, v updated in registers from its gradient.
__device__ void adamw_update(float& p, float& m, float& v, float gradient, const Step& s) {
    const float g = gradient * s.grad_scale;  // the clipping factor scales the gradient only
    m = s.beta1 * m + (1.0f - s.beta1) * g;
    v = s.beta2 * v + (1.0f - s.beta2) * g * g;
    // Bias correction: m and v start at 0, so early in training they are too small by the
    // factors 1 - beta^step; the stored moments stay uncorrected, only the step uses these.
    const float m_hat = m / s.beta1_correction, v_hat = v / s.beta2_correction;
    // Decoupled weight decay: the weight shrinks by lr * weight_decay of itself, outside the
    // moments (added to g instead, it would be L2 regularization, divided by sqrt(v_hat) like
    // the gradient: weights with large gradients would barely decay).
    p = p * (1.0f - s.lr * s.weight_decay) - s.lr * m_hat / (sqrtf(v_hat) + s.eps);
}

// kW values of each array per thread and loop trip (kW = kWidth where every pointer allows
// 16-byte accesses, else 1). working may be null: then only the float state is written.
template <typename Act, int kW>
__global__ void adamw_kernel(float* master, Act* working, const float* grads, float* m, float* v,
                             long long packs, Step s) {
    using Floats = Pack<float, kW>;
    using Copy = Pack<Act, kW>;
    // 64-bit index and stride: n may exceed 2^31.
    const long long stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < packs;
         i += stride) {
        // All four loads issued before any arithmetic: 4 x 16 bytes in flight per thread.
        Floats p = reinterpret_cast<const Floats*>(master)[i];
        const Floats g = reinterpret_cast<const Floats*>(grads)[i];
        Floats mi = reinterpret_cast<const Floats*>(m)[i];
        Floats vi = reinterpret_cast<const Floats*>(v)[i];
        Copy copy;
#pragma unroll
        for (int k = 0; k < kW; ++k) {
            adamw_update(p.value[k], mi.value[k], vi.value[k], g.value[k], s);
            copy.value[k] = from_float<Act>(p.value[k]);
        }
        reinterpret_cast<Floats*>(master)[i] = p;
        reinterpret_cast<Floats*>(m)[i] = mi;
        reinterpret_cast<Floats*>(v)[i] = vi;
        // The working copy from the registers that hold the new master weight: no second pass
        // that would read master again.
        if (working) reinterpret_cast<Copy*>(working)[i] = copy;
    }
}

unsigned blocks_for(long long packs) {
    return static_cast<unsigned>(std::min(course::ceil_div(packs, kThreads), kMaxBlocks));
}

template <typename Act>
void step(float* master, Act* working, const float* grads, float* m, float* v, long long n,
          const Step& s) {
    // 16-byte accesses need every view to start on a 16-byte boundary (8 bytes for 4 bf16 of the
    // working copy) and whole packs; a view that starts elsewhere (the contract allows it) takes
    // one value per access.
    const bool wide = n % kWidth == 0 && course::is_aligned(master, 16) &&
                      course::is_aligned(grads, 16) && course::is_aligned(m, 16) &&
                      course::is_aligned(v, 16) &&
                      (working == nullptr || course::is_aligned(working, sizeof(Act) * kWidth));
    if (wide)
        adamw_kernel<Act, kWidth>
            <<<blocks_for(n / kWidth), kThreads>>>(master, working, grads, m, v, n / kWidth, s);
    else
        adamw_kernel<Act, 1><<<blocks_for(n), kThreads>>>(master, working, grads, m, v, n, s);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

void adamw(float* master, float* working, const float* grads, float* m, float* v, long long n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale) {
    step(master, working, grads, m, v, n,
         {lr, beta1, beta2, beta1_correction, beta2_correction, eps, weight_decay, grad_scale});
}

void adamw(float* master, __nv_bfloat16* working, const float* grads, float* m, float* v,
           long long n, float lr, float beta1, float beta2, float beta1_correction,
           float beta2_correction, float eps, float weight_decay, float grad_scale) {
    step(master, working, grads, m, v, n,
         {lr, beta1, beta2, beta1_correction, beta2_correction, eps, weight_decay, grad_scale});
}
