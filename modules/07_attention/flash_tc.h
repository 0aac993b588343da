// Contract of 07_attention/flash_tc. Read-only: the checker calls exactly this.
#pragma once

#include "course/tensor_element.h"

// Attention forward in bf16 on the tensor cores (fp16 on a T4), for batch * heads heads at once.
// Q, K, V and O are [batch][heads][T][D] tensors of course::TensorElement, row-major (D
// contiguous): bf16, or fp16 where this build is for a GPU without bf16 tensor cores (compute
// capability 7.5, a T4: course/tensor_element.h). L is [batch][heads][T] float.
// For every head and query row i, with s_ij = scale * (q_i . k_j) over the keys j visible to i
// (every j < T, or j <= i when `causal`):
//   O_i = sum_j exp(s_ij - L_i) v_j,   L_i = log sum_j exp(s_ij)   (the row's logsumexp)
// Products are accumulated in float32; P may be rounded to the element type before it multiplies
// V (the checker's tolerance allows for that and for O's own rounding).
// - D is 64 or 128; 1 <= T; batch * heads <= 65535; batch * heads * T * D <= 2^25 (B 4, H 16,
//   T 4096, D 128: the largest the checker runs); scale > 0 (1 / sqrt(D) in a model).
// - All pointers are device pointers starting on 16-byte boundaries; O and L are outputs only
//   (their old contents may be NaN and must not be read). No T x T buffer: memory grows with T.
// Enqueue the work on the default stream and return; the checker synchronizes.
void flash_tc(const course::TensorElement* Q, const course::TensorElement* K,
              const course::TensorElement* V, course::TensorElement* O, float* L, int batch,
              int heads, int T, int D, float scale, bool causal);
