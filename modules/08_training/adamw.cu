// 08_training/adamw: one fused AdamW step: fp32 master weights and moments, bias correction,
// decoupled weight decay, the clipping factor, and the working copy written in the same pass.
//
// Teaches: the optimizer step of mixed-precision training as one memory-bound kernel (every
// parameter's five arrays read or written once: 28 bytes of float state per parameter, plus its
// working copy), why the master weights and both moments stay float (notes/08_training.md), and
// what makes AdamW differ from Adam with L2 regularization: the decay shrinks the weight itself
// and never enters the moments. Memory-bound: the checker reports the bandwidth next to a copy.
//
// Run:  grader run 08/adamw            Stuck:  grader hint 08/adamw
// Contract: adamw.h                    Notes:  notes/08_training.md
#include <cuda_bf16.h>

#include "adamw.h"
#include "course/activation.h"
#include "course/exercise.h"

using course::from_float;

// The step's scalars, as the trainer passes them.
struct Step {
    float lr, beta1, beta2, beta1_correction, beta2_correction, eps, weight_decay, grad_scale;
};

// TODO: adamw_kernel<Act>(master, working, grads, m, v, n, step): for every i < n (a grid-stride
//       loop, 64-bit index: n may exceed 2^31), in registers:
//         g = grads[i] * grad_scale; m[i] and v[i] updated; m_hat, v_hat bias-corrected copies;
//         master[i] = master[i] * (1 - lr * weight_decay) - lr * m_hat / (sqrtf(v_hat) + eps);
//         where working is not null, working[i] = from_float<Act>(the new master[i]).
// TODO: then 4 parameters per thread with 16-byte loads and stores of each float array (8 bytes
//       of bf16 for the working copy), where n and every pointer allow it (course::is_aligned).

template <typename Act>
void step(float* master, Act* working, const float* grads, float* m, float* v, long long n,
          const Step& s) {
    // TODO: launch the kernel (grid from course::ceil_div), then CUDA_CHECK_LAUNCH().
    COURSE_TODO("adamw: write the kernel and launch it, then delete this line");
}

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
