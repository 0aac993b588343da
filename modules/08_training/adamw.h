// Contract of 08_training/adamw. Read-only: the checker calls exactly this (and the trainer's
// learner table, trainer/ops.h, calls it as its adamw, once per parameter tensor per step).
#pragma once

#include <cuda_bf16.h>

// One AdamW step (Loshchilov & Hutter, decoupled weight decay) on n parameters, fused: every
// element read once and written once. For each 0 <= i < n, in float:
//   g         = grads[i] * grad_scale                  (grad_scale: the clipping factor, <= 1)
//   m[i]      = beta1 * m[i] + (1 - beta1) * g          (first moment, updated in place)
//   v[i]      = beta2 * v[i] + (1 - beta2) * g * g      (second moment, updated in place)
//   m_hat     = m[i] / beta1_correction                 (bias correction: the caller passes
//   v_hat     = v[i] / beta2_correction                  1 - beta1^step and 1 - beta2^step)
//   master[i] = master[i] * (1 - lr * weight_decay) - lr * m_hat / (sqrt(v_hat) + eps)
//   working[i] = master[i] rounded to the working type, where working is not null
// The weight decay is decoupled: it shrinks the parameter directly and never enters g, m or v
// (adding weight_decay * master[i] to g instead is L2 regularization, which Adam rescales).
//
// master, m, v (float) are read and updated in place; grads (float) is read only; working, where
// not null, is written only: the copy of the weights the forward pass reads (bf16 in the
// trainer's mixed precision, float also allowed), written in the same pass as master so that
// nothing reads master twice. The trainer passes a null working in its all-fp32 mode, where the
// master weights are the weights.
// Every pointer is a device pointer aligned to its element only (a view may start anywhere; the
// trainer's parameter tensors start wherever the previous one ended); no two overlap.
// n >= 1, any value, and n may exceed 2^31: compute indices in 64 bits. 0 <= beta1, beta2 < 1;
// beta1_correction, beta2_correction in (0, 1]; eps > 0; lr, weight_decay >= 0.
// Enqueue the work on the default stream and return; the checker synchronizes.
void adamw(float* master, float* working, const float* grads, float* m, float* v, long long n,
           float lr, float beta1, float beta2, float beta1_correction, float beta2_correction,
           float eps, float weight_decay, float grad_scale);
void adamw(float* master, __nv_bfloat16* working, const float* grads, float* m, float* v,
           long long n, float lr, float beta1, float beta2, float beta1_correction,
           float beta2_correction, float eps, float weight_decay, float grad_scale);
