// Contract of 07_attention/flash_backward. Read-only: the checker calls exactly this.
#pragma once

#include "course/tensor_element.h"

// The backward pass of attention (flash_tc.h's forward) for batch * heads heads: given dO, the
// gradient of a loss with respect to O, the gradients with respect to Q, K and V. All of
// Q, K, V, O, dO (course::TensorElement: bf16, or fp16 in a build for sm_75, as in flash_tc.h)
// and dQ, dK, dV (float32) are [batch][heads][T][D], row-major; L
// ([batch][heads][T], float32) is the forward's logsumexp. With s_ij = scale * (q_i . k_j) over
// the visible keys (j < T, or j <= i when `causal`), P_ij = exp(s_ij - L_i), D_i = dO_i . O_i:
//   dV_j = sum_i P_ij dO_i,   dP_ij = dO_i . v_j,   dS_ij = P_ij (dP_ij - D_i),
//   dQ_i = scale * sum_j dS_ij k_j,   dK_j = scale * sum_i dS_ij q_i.
// Products are accumulated in float32; P and dS may be rounded to the element type to feed the
// tensor cores.
// - D is 64 or 128; 1 <= T; batch * heads <= 65535; batch * heads * T * D <= 2^25 (B 4, H 16,
//   T 4096, D 128: the largest the checker runs); scale > 0.
// - All pointers are device pointers starting on 16-byte boundaries; dQ, dK, dV are outputs only
//   (their old contents may be NaN: zero what you accumulate into). No T x T buffer; scratch
//   memory of O(batch * heads * T) floats is allowed.
// Enqueue the work on the default stream and return; the checker synchronizes.
void flash_backward(const course::TensorElement* Q, const course::TensorElement* K,
                    const course::TensorElement* V, const course::TensorElement* O,
                    const course::TensorElement* dO, const float* L, float* dQ, float* dK,
                    float* dV, int batch, int heads, int T, int D, float scale, bool causal);
